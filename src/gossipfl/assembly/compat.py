"""Which features combine: every refusal of a combination, in one place.

A run combines an algorithm, a gossip order (its schedule), the stages of its gossip
pipeline (compression with error feedback, robust aggregation under attack:
:mod:`gossipfl.topology.stages`), a backend (one process or several), a systems model and a
privacy mechanism. Each declares what it is and what it needs, and this module derives the
refusals from those declarations, each one sentence naming the key (the CLI exits 2):

- a stage's :class:`~gossipfl.topology.stages.Needs` against the algorithm (``centralized``,
  ``compressible``: its gossip is x ← W x, ``own_compression``), the other stages (``whole``:
  whether they send whole messages), the topology (``time_varying``), the order, the backend
  and the systems model (``has_failures``: W'_t changes every round);
- a schedule's ``one_process``, ``no_failures`` and ``by_completion_time`` (why it cannot
  split the stack over processes, why it has no rounds for a client or link to miss, why it
  needs positive speeds) and, for a schedule that ``asks_algorithm``, the algorithm's
  ``orders`` and ``order_conflict`` (:data:`ORDER_SENTENCES`);
- the algorithm's ``mixing`` and ``static_graph`` against the topology's ``stochastic`` and
  ``time_varying`` (:func:`mixing_check`, :data:`MIXING_SENTENCES`), then its own
  :meth:`~gossipfl.algorithms.base.Algorithm.refusal` of its parameters on the graph;
- the systems section and the privacy section against the backend (their state is not
  split over the ranks), privacy against an algorithm that ``reads_label_counts`` and
  against a model with BatchNorm (:func:`model_refusal`); a stability study against the
  backend (:func:`stability_refusal`).

Left where they are, each one piece's validation rather than a combination of features:
:func:`gossipfl.topology.sparse.refuse_dense` (the one sentence of a W held as edges, worded
once and called by each feature that needs the dense W: it sits below this module, which the
topology package may not import) and :func:`gossipfl.studies.packing.fits.refusal` (not a refusal:
the reason a study's grid point runs unpacked, shown and run).

:func:`check` raises the first refusal of a run's :class:`Features`;
:func:`check_config` is what can be decided from the config alone (when it is read),
:func:`preflight` what a dry run checks before any data are loaded (the features with the
topology built, then the Byzantine clients' graph: the honest clients connected, every
receiver's degree enough for the rule).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gossipfl.errors import GossipflError
from gossipfl.topology.stages import Needs, Stage

#: A stage's unmet need, in the words of its kind (``{key}``, ``{name}``: the algorithm,
#: ``{order}``, ``{topology}``); a plugin's stage gets :data:`GENERIC`.
SENTENCES: dict[tuple[str, str], str] = {
    ("robust", "decentralized"):
        "{key}: algorithm {name} is centralized and does not gossip; Byzantine neighbours and "
        "robust gossip are defined for decentralized algorithms.",
    ("robust", "whole_messages"):
        "{key}: robust gossip is not defined for compressed gossip ({name}, "
        "topology.compression): a rule needs every neighbour's full message; remove one of "
        "them.",
    ("robust", "plain_gossip"):
        "{key}: algorithm {name} gossips with push-sum weights, masks or pairwise averages, "
        "for which no robust rule is defined; use an algorithm that mixes x <- W x (dfedavg, "
        "dpsgd, dsgt, ...).",
    ("robust", "orders"):
        "{key}: needs topology.order: synchronous (got {order!r}); the sequential order mixes "
        "a few rows at a time.",
    ("robust", "one_process"):
        "{key}: not implemented under engine.backend: distributed yet (the neighbourhoods are "
        "gathered in one process); use engine.backend: single.",
    ("compression", "decentralized"):
        "{key}: algorithm {name} is centralized and does not gossip; topology.compression "
        "compresses gossip.",
    ("compression", "whole_messages"):
        "{key}: algorithm {name} compresses its own messages (algorithm.compressor); remove "
        "topology.compression.",
    ("compression", "plain_gossip"):
        "{key}: algorithm {name} gossips in a form CHOCO-Gossip does not cover (push-sum "
        "weights or masks); remove topology.compression.",
    ("compression", "static_graph"):
        "{key}: CHOCO-Gossip keeps each client's public copy at its neighbours, which needs a "
        "fixed graph, but the {topology} topology changes every round; use a static one "
        "(ring, k_regular, exponential, ...).",
    ("compression", "orders"):
        "{key}: needs topology.order: synchronous (got {order!r}); the sequential order mixes "
        "a few rows at a time, without public copies.",
}

GENERIC: dict[str, str] = {
    "decentralized": "{key}: algorithm {name} is centralized and does not gossip.",
    "whole_messages": "{key}: needs every neighbour's whole message, but algorithm {name} or "
                      "another stage compresses them; remove one of them.",
    "plain_gossip": "{key}: algorithm {name} does not gossip x <- W x; remove {key}.",
    "static_graph": "{key}: needs a fixed graph, but the {topology} topology changes every "
                    "round; use a static one.",
    "orders": "{key}: needs topology.order: synchronous (got {order!r}).",
    "one_process": "{key}: not implemented under engine.backend: distributed yet; use "
                   "engine.backend: single.",
}

#: compressed messages and a W that changes (``same_w``): the public copies' s = W x̂
SAME_W = ("systems.availability: not implemented with compressed gossip yet (its public copies "
          "s = W x̂ are updated incrementally and assume the same W every round); remove "
          "systems.availability or the compression.")


#: The algorithm against the order (``topology.order``): the reason its ``order_conflict``
#: declares (``{order}``, ``{name}`` and the values it gives).
ORDER_SENTENCES: dict[str, str] = {
    "orders": "topology.order: {order} is not defined for algorithm {name}, whose round is not "
              "'start from the mixed neighbours, then train' (use synchronous).",
    "gossip_steps": "topology.order: {order} mixes each client's neighbours once, in place, so it "
                    "needs algorithm.gossip_steps: 1, got {steps}.",
    "asynchronous_round": "topology.order: {order} is not defined for {name}, whose workers "
                          "compute and average asynchronously; set topology.order: "
                          "asynchronous.",
    "pre_gossip_gradient": "topology.order: {order} needs a round that mixes and then trains, "
                           "but {name}'s variant lian takes its gradient at the pre-gossip "
                           "point, in parallel with the gossip (variant: local_epoch is "
                           "defined).",
}

#: The algorithm's ``mixing`` (and ``static_graph``) against the topology's matrices
#: (``{what}``: the topology's matrix in words, ``{topology}``: its name).
MIXING_SENTENCES: dict[str, str] = {
    "column": "topology.name: algorithm {name} is push-sum and needs every column of W to sum "
              "to 1, but {what} is row-stochastic only; use a doubly or column-stochastic one "
              "(e.g. one_peer_exponential, base_k, or custom with topology.mixing: custom).",
    "row": "topology.name: algorithm {name} mixes x_i ← Σ_j w_ij x_j, which needs every row of "
           "W to sum to 1, but {what} is column-stochastic only (a push-sum matrix, for "
           "algorithm sgp).",
    "pairs_pattern": "topology.name: algorithm {name} averages pairs of neighbours, which needs "
                     "an undirected graph, but {what} has a directed pattern.",
    "pairs_weights": "topology.name: algorithm {name} averages pairs of neighbours, which needs "
                     "an undirected graph, but {what} is {stochastic}-stochastic only (a "
                     "directed graph's weights).",
    "static_graph": "topology.name: algorithm {name} keeps each client's public copy at its "
                    "neighbours, which needs a fixed graph, but the {topology} topology changes "
                    "every round; use a static one (ring, k_regular, exponential, ...).",
    # a warning, not a refusal: a static row-stochastic W for a doubly stochastic algorithm
    "perron": "algorithm {name} assumes a doubly stochastic W, but {what} is row-stochastic "
              "only: the clients are drawn towards Σ_i π_i F_i (π: W's Perron vector), not the "
              "plain mean of their objectives.",
}

#: A schedule that orders its events by completion time (``by_completion_time``) against
#: speeds that are not positive.
SPEED = ("systems.compute: topology.order: {order} orders its events by completion time, "
         "which needs every client's seconds_per_step > 0.")

#: DP-SGD against a model whose layers mix a batch's samples.
BATCHNORM = ("privacy: model {model} has BatchNorm, which mixes the samples of a batch, so "
             "per-sample gradients are undefined; use a model without BatchNorm (GroupNorm or "
             "none).")


@dataclass
class Asked:
    """A stage the config asks for: its class and the key that asks for it."""

    stage: type[Stage]
    key: str


@dataclass
class Features:
    """What a run combines, as declarations: ``algorithm`` (its class, or an instance when
    its hooks read its parameters), ``schedule`` (the class of ``topology.order``),
    ``stages`` (asked for, outermost first), ``topology`` (None: centralized, or not built
    yet), ``world`` (the number of processes, None: one), ``systems`` (the systems draws, a
    :class:`~gossipfl.systems.SystemsModel`; None without the section), and the config."""

    config: Any
    algorithm: Any
    schedule: Any
    stages: list[Asked] = field(default_factory=list)
    topology: Any = None
    world: int | None = None
    systems: Any = None

    @property
    def name(self) -> str:
        return self.algorithm.name

    @property
    def order(self) -> str:
        return self.config.topology.order

    @property
    def distributed(self) -> bool:
        return self.world is not None or self.config.engine.backend == "distributed"

    def compressed(self) -> bool:
        """Whether the messages travel compressed (the algorithm's own or a stage's)."""
        return self.algorithm.own_compression or any(not a.stage.whole for a in self.stages)


def stages_asked(config) -> list[Asked]:
    """The stages ``config`` asks for, outermost first: the plugins' (``topology.stages``),
    robust aggregation (``byzantine``, ``topology.robust``), then compression
    (``topology.compression``)."""
    from gossipfl.compression.gossip import Channels
    from gossipfl.topology.stages import asked_stages
    from gossipfl.trust.gossip import RobustGossip

    asked = [Asked(entry.stage, entry.key) for entry in asked_stages(config.topology.stages)]
    if config.topology.robust is not None or config.byzantine is not None:
        key = "topology.robust" if config.topology.robust is not None else "byzantine"
        asked.append(Asked(RobustGossip, key))
    if config.topology.compression is not None:
        asked.append(Asked(Channels, "topology.compression"))
    return asked


def features(config, algorithm=None, topology=None, world: int | None = None,
             systems=None) -> Features:
    """The :class:`Features` of ``config`` (``algorithm``: its class by default)."""
    from gossipfl.algorithms import get_algorithm
    from gossipfl.schedules import get_schedule

    algorithm = get_algorithm(config.algorithm.name) if algorithm is None else algorithm
    return Features(config, algorithm, get_schedule(config.topology.order),
                    stages_asked(config), topology, world, systems)


# --------------------------------------------------------------------------------------------
# The refusals, in the order a run meets them
# --------------------------------------------------------------------------------------------
def _unmet(asked: Asked, f: Features) -> Iterator[str]:
    """The needs of ``asked``'s stage that the run does not meet, in order."""
    needs: Needs = asked.stage.needs
    others = [a for a in f.stages if a is not asked]
    if f.algorithm.centralized:
        yield "decentralized"
    if needs.whole_messages and (f.algorithm.own_compression
                                 or any(not a.stage.whole for a in others)):
        yield "whole_messages"
    if not asked.stage.whole and f.algorithm.own_compression:
        yield "whole_messages"  # two compressions of one message
    if needs.plain_gossip and not f.algorithm.compressible:
        yield "plain_gossip"
    if needs.static_graph and f.topology is not None and f.topology.time_varying:
        yield "static_graph"
    if f.order not in needs.orders:
        yield "orders"
    if needs.one_process and f.distributed:
        yield "one_process"


def stage_refusal(asked: Asked, f: Features) -> str | None:
    """Why the stage ``asked`` cannot wrap this run's gossip (None: it can)."""
    for need in _unmet(asked, f):
        words = SENTENCES.get((asked.stage.kind, need), GENERIC[need])
        return words.format(key=asked.key, name=f.name, order=f.order,
                            topology=getattr(f.topology, "name", ""))
    return None


def systems_processes(f: Features) -> str | None:
    """The systems model's clocks and draws live in one process."""
    if f.config.systems is not None and f.distributed:
        return ("systems: not implemented under engine.backend: distributed yet (the clocks "
                "and failures are not split over the ranks); remove systems or use "
                "engine.backend: single.")
    return None


def schedule_refusal(f: Features) -> str | None:
    """The order against the backend (``Schedule.one_process``) and the algorithm (the
    schedule's ``refusal``: the built-in orders ask ``Algorithm.orders``,
    :meth:`~gossipfl.algorithms.base.Algorithm.order_error`)."""
    why = f.schedule.one_process
    if why and f.world is not None:
        return (f"topology.order: {f.schedule.name} {why}, which engine.backend: distributed "
                f"splits over {f.world} processes; run it with engine.backend: single.")
    if isinstance(f.algorithm, type):
        return None  # the class: its parameters decide (checked once it is built)
    if f.schedule.asks_algorithm:
        reason = order_refusal(f.algorithm, f.schedule.name)
        if reason:
            return reason
    return f.schedule.refusal(f.algorithm, f.world)


def order_refusal(algorithm, order: str) -> str | None:
    """The algorithm against ``topology.order: order``: what its round conflicts with
    (:meth:`~gossipfl.algorithms.base.Algorithm.order_conflict`), in
    :data:`ORDER_SENTENCES`'s words (None: none)."""
    conflict = algorithm.order_conflict(order)
    if conflict is None:
        return None
    reason, values = conflict
    return ORDER_SENTENCES[reason].format(order=order, name=algorithm.name, **values)


def mixing_refusal(f: Features) -> str | None:
    """The algorithm's ``mixing`` against the topology's matrices (``stochastic``)."""
    if isinstance(f.algorithm, type) or f.topology is None:
        return None
    return mixing_check(f.algorithm, f.topology)[0]


def mixing_check(algorithm, topology) -> tuple[str | None, str | None]:
    """(refusal, warning) for the algorithm's ``mixing`` on the topology's matrices
    (``topology.stochastic``), checked before training (:data:`MIXING_SENTENCES`):

    - ``pairs`` (AD-PSGD's pairwise averages) needs an undirected graph: a directed pattern
      or weights that are not doubly stochastic are refused;
    - a ``column``-only W (push-sum) is refused for ``doubly`` / ``row`` algorithms: their
      x ← Wx needs rows summing to 1; a ``row``-only W is refused for ``column`` (push-sum
      needs the columns to sum to 1 to keep Σ_i x_i and Σ_i w_i);
    - an algorithm that keeps public copies at the neighbours (``static_graph``: CHOCO,
      DeepSqueeze, BEER) is refused on a time-varying graph;
    - a ``doubly`` algorithm on a row-stochastic-only W runs with a warning when the graph
      is static (its fixed point weights the clients by W's Perron vector, not uniformly);
      a time-varying one (random_k, authors_random, epidemic with ``uniform`` weights)
      runs silently: its draws are exchangeable, so E[W] is doubly stochastic.
    """
    if topology is None:
        return None, None
    has, need = topology.stochastic, algorithm.mixing
    words = {"name": algorithm.name, "topology": topology.name, "stochastic": has,
             "what": f"the {topology.name} topology's {topology.mixing} matrix"}
    if need == "pairs":
        from gossipfl.topology.sparse import first_asymmetry

        if first_asymmetry(topology.edges(0).pattern())[0] >= 0:
            return MIXING_SENTENCES["pairs_pattern"].format(**words), None
        if has != "doubly":
            return MIXING_SENTENCES["pairs_weights"].format(**words), None
        return None, None
    if need == "column" and has == "row":
        return MIXING_SENTENCES["column"].format(**words), None
    if need != "column" and has == "column":
        return MIXING_SENTENCES["row"].format(**words), None
    caution = None
    if need == "doubly" and has == "row" and not topology.time_varying:
        caution = MIXING_SENTENCES["perron"].format(**words)
    if algorithm.static_graph and topology.time_varying:
        return MIXING_SENTENCES["static_graph"].format(**words), caution
    return None, caution


def algorithm_refusal(f: Features) -> str | None:
    """The algorithm's own refusal of its parameters on the graph
    (:meth:`~gossipfl.algorithms.base.Algorithm.refusal`, e.g. Muffliato's Chebyshev
    acceleration on a W held as edges or not symmetric). An algorithm whose messages must
    stay whole and plainly mixed (Muffliato's guarantee) declares ``compressible = False``:
    the stages' ``plain_gossip`` need refuses compression and robust aggregation."""
    if isinstance(f.algorithm, type) or f.topology is None and not f.algorithm.centralized:
        return None
    return f.algorithm.refusal(f.config, f.topology)


def failures_refusal(f: Features) -> str | None:
    """Offline clients and failed links (W'_t changes every round) against the stages and
    the algorithms that need the same W every round, and the schedule (``no_failures``)."""
    if f.systems is None or not f.systems.has_failures:
        return None
    same_w = f.algorithm.own_compression or any(a.stage.needs.same_w for a in f.stages)
    if same_w and not f.algorithm.centralized:
        return SAME_W
    why = f.schedule.no_failures
    if why:
        return (f"systems.availability: not implemented for topology.order: "
                f"{f.schedule.name} ({why}); remove systems.availability.")
    return None


def schedule_systems_refusal(f: Features) -> str | None:
    """What the schedule makes of the systems draws' values: positive speeds for a schedule
    that orders its events by completion time (``by_completion_time``), then the schedule's
    own ``systems_refusal``."""
    if f.systems is None:
        return None
    if f.schedule.by_completion_time and (f.systems.compute(0) <= 0).any():
        return SPEED.format(order=f.schedule.name)
    return f.schedule.systems_refusal(f.systems)


def model_refusal(config, model) -> str | None:
    """The built model against the privacy section: DP-SGD's per-sample gradients are
    undefined where BatchNorm mixes a batch's samples (checked once the model is built,
    before the privacy mechanism)."""
    if config.privacy is None:
        return None
    from gossipfl.engine.oracle import has_batchnorm

    return BATCHNORM.format(model=config.model.name) if has_batchnorm(model) else None


def privacy_refusal(f: Features) -> str | None:
    """DP-SGD's accountant lives in one process; label counts are not privatized."""
    if f.config.privacy is None:
        return None
    if f.distributed:
        return ("privacy: not implemented under engine.backend: distributed yet (the "
                "accountant's counts are not split over the ranks); remove privacy or use "
                "engine.backend: single.")
    if f.algorithm.reads_label_counts:
        return (f"privacy: algorithm {f.name} reads each client's label counts, which "
                f"DP-SGD does not privatize; remove privacy or choose another algorithm.")
    return None


def stability_refusal(config, where: str = "") -> str | None:
    """A stability study (gossipfl stability) steps two runs in one process: not under the
    distributed backend (``where``: the study's pair, in the sentence)."""
    from gossipfl.distributed.launch import resolve_backend

    backend = config.engine.backend
    if backend == "distributed" or resolve_backend(backend) == "distributed":
        return (f"engine.backend: distributed splits one run over several processes, but "
                f"gossipfl stability runs two neighbouring runs side by side in one process; "
                f"use engine.backend: single{where}.")
    return None


def refusals(f: Features) -> Iterator[str]:
    """Every refusal of ``f``, in the order a run meets them."""
    checks = [systems_processes,
              *[lambda f, a=a: stage_refusal(a, f) for a in f.stages if a.stage.kind == "robust"],
              privacy_refusal, schedule_refusal, mixing_refusal, algorithm_refusal,
              *[lambda f, a=a: stage_refusal(a, f) for a in f.stages if a.stage.kind != "robust"],
              failures_refusal, schedule_systems_refusal]
    for check_one in checks:
        reason = check_one(f)
        if reason:
            yield reason


def check(f: Features) -> None:
    """Raise the first refusal of ``f`` (one sentence), if any."""
    for reason in refusals(f):
        raise GossipflError(reason)


def check_config(config) -> None:
    """What the config alone decides (no algorithm built, no topology): when it is read."""
    reason = systems_processes(features(config))
    if reason:
        raise GossipflError(reason)


def declared_features(config) -> Features:
    """The :class:`Features` of ``config`` with its algorithm built without clients (its
    hooks may read its parameters), or its class where it cannot be built so."""
    f = features(config)
    try:  # the declarations need no data: a built algorithm without clients
        built = f.algorithm(config.algorithm.params, None, None)
    except GossipflError:
        raise
    except Exception:  # noqa: BLE001 - a plugin that needs its clients: its class's declarations
        built = f.algorithm
    f.algorithm = built
    return f


def preflight(config) -> None:
    """What a run checks before training that needs no data, as a dry run sees it: the
    features with the algorithm built without clients and the topology built, then the
    Byzantine clients' graph (honest clients connected, every receiver's degree)."""
    from gossipfl.systems import systems_model
    from gossipfl.topology import build_topology
    from gossipfl.trust.gossip import build_trust

    f = declared_features(config)
    topo = config.topology
    if not f.algorithm.centralized and topo.matrix is None:
        f.topology = build_topology(topo.name, config.data.clients, mixing=topo.mixing,
                                    seed=config.seed, **topo.parameters())
    if config.systems is not None and not f.distributed:
        f.systems = systems_model(config, config.data.clients, False)
    check(f)
    if f.topology is not None:
        build_trust(config, f.topology)


__all__ = ["BATCHNORM", "MIXING_SENTENCES", "ORDER_SENTENCES",
           "SENTENCES", "SPEED", "Asked", "Features", "check", "check_config",
           "declared_features", "features", "mixing_check", "model_refusal", "order_refusal",
           "preflight", "refusals", "stage_refusal", "stages_asked"]
