"""The algorithm interface (docs/design.md).

An algorithm is tensor algebra over the rows of the ``[M, P]`` stack, written FedJAX-style as
functions of a state it does not own: :meth:`Algorithm.init` makes the state from X^0, and
every hook of a round receives it. The state is a dict of tensors of two declared kinds:

- **per-client** state (``client_state``: one row per client, e.g. the models x),
- **global** state (``global_state``: the server model, a control variate, optimizer moments),

and whatever a round needs only within itself is **scratch**, carried by the :class:`Work`.
The runner holds the state (the algorithm's namespace of :class:`gossipfl.common.state.RunState`,
checkpointed from these declarations); a :mod:`schedule <gossipfl.schedules>` is handed it
and decides who trains and mixes when: it calls ``begin_round(ctx, state)`` for the working
rows (all clients, the sampled ones, or one wave of the sequential order, whose state rows
it hands over), runs the local
:class:`Phase` s on them, and calls ``keep`` / ``end_round`` to communicate through the
:class:`~gossipfl.network.federation.Federation` (which counts the bytes). The algorithm sees what a
client has through its :class:`~gossipfl.network.clients.ClientEnv`.

A phase carries its own direction (a :func:`~gossipfl.algorithms.terms.chain` of local
terms: gradient or SAM, weight decay, proximal pull, correction, ...) and its own step (the
phase's local optimizer by default), so a combination is a configuration, not a class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from gossipfl.engine.recycle import Recycler
from gossipfl.network.clients import Batch, ClientEnv
from gossipfl.validation import (  # noqa: F401  (the vocabulary algorithms import from here)
    AT_LEAST_ONE,
    BOOLEAN,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    UNIT_INTERVAL,
    Rule,
    one_of,
)

if TYPE_CHECKING:  # annotations only
    from gossipfl.network.federation import Federation

#: An algorithm's state: per-client ``[M, ...]`` and global tensors, by name.
State = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Phase:
    """One stretch of local work in a round.

    ``epochs`` / ``steps``: how long (both None: the ``train`` section's ``local_epochs`` /
    ``local_steps``); ``lr``: the phase's learning rate before the per-round decay (None:
    ``train.lr``); ``group``: the parameter group that moves (``all``, ``shared``,
    ``personal``); ``momentum``: local heavy-ball momentum μ, reset every round (None:
    ``train.momentum``); ``rho``: SAM radius ρ of the phase's gradients (0: plain SGD).

    What a step computes (:func:`gossipfl.algorithms.terms.local_step`): ``direction``
    (a :class:`~gossipfl.algorithms.terms.Direction`; None: SGD or SAM with ``rho`` on the
    group, plus ``train.weight_decay``) and ``update(ctx, work, batch) -> loss`` (None: the
    direction, then the phase's local optimizer). ``begin(ctx, work)`` runs before the phase's first step (e.g. Ditto switches
    the rows to the personal iterates).
    """

    name: str = "local"
    epochs: int | None = None
    steps: int | None = None
    lr: float | None = None
    group: str = "all"
    momentum: float | None = None
    rho: float = 0.0
    direction: Callable[[Context, Work, Batch], tuple[torch.Tensor, torch.Tensor]] | None = None
    update: Callable[[Context, Work, Batch], torch.Tensor] | None = None
    begin: Callable[[Context, Work], None] | None = None



@dataclass(frozen=True)
class RoundPlan:
    """Round t's conditions, decided before it runs and passed to whoever needs them (the
    systems model makes them, :meth:`gossipfl.systems.Systems.plan`; the default plan, without
    a ``systems`` section: everybody online, every sampled client reports, no clock).

    ``offline`` ``[M]`` bool: the clients that sit the round out (no minibatch, no compute,
    their rows kept); ``eligible`` ``[M]`` bool: the clients that would report to a server if
    sampled (online, and meeting ``systems.deadline``); ``compute`` ``[M]`` seconds per local
    step and ``exchange`` ``[M]`` seconds to send one model (an event-driven schedule orders its
    events by them); ``clocks`` ``[M]``: the clients' clocks when the round starts;
    ``round_seconds``: a server round's length (the slowest reporting client, or the
    deadline when one was dropped by it); ``idle``: no sampled client reports (the round is
    skipped: nothing trains, nothing is sent)."""

    offline: Any = None
    eligible: Any = None
    compute: Any = None
    exchange: Any = None
    clocks: Any = None
    round_seconds: float = 0.0
    idle: bool = False  # a server round that no sampled client reports to: skipped


#: The plan of a round without a systems model.
NO_PLAN = RoundPlan()


@dataclass
class Context:
    """Where a call happens: the round, its learning rate, the run's total rounds, the round's
    plan (:class:`RoundPlan`), and in a local step the phase, the step's index within the
    phase, the phase's local optimizer and the clients' environment."""

    round: int
    lr: float
    phase: Phase | None = None
    rounds: int | None = None  # the run's total rounds T (annealed schedules)
    phase_index: int = 0
    step: int = 0
    optimizer: Any = None  # the phase's gossipfl.algorithms.local.LocalOptimizer
    env: ClientEnv | None = None
    plan: RoundPlan = NO_PLAN


class Work:
    """The round's working rows: iterates ``y [S, P]``, the clients they belong to (None =
    all this process's clients in order), per-row scratch tensors (first dimension S), e.g. a
    proximal anchor, and ``steps [S, 1]``: the local steps each row has taken this round
    (counted by the local loop).
    """

    def __init__(self, y: torch.Tensor, clients: torch.Tensor | None = None,
                 **scratch: torch.Tensor):
        self.y = y
        self.clients = clients
        self.scratch = scratch
        if "steps" not in scratch:
            scratch["steps"] = torch.zeros(len(y), 1, dtype=y.dtype, device=y.device)

    @property
    def steps(self) -> torch.Tensor:
        return self.scratch["steps"]

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.scratch[key]

    def __len__(self) -> int:
        return self.y.shape[0]

    def with_scratch(self, **scratch: torch.Tensor) -> Work:
        """This Work (same rows and clients) with more scratch tensors."""
        return Work(self.y, self.clients, **self.scratch, **scratch)

    def replicated(self, x: torch.Tensor) -> torch.Tensor:
        """``[S, P]``: the vector ``x [P]`` seen by every row (a read-only broadcast view, no
        copy; e.g. the round's server model x_t that a client already received)."""
        return x.expand(len(self), -1)

    def of(self, clients: torch.Tensor | None) -> Work:
        """The same rows (iterates, scratch) as the rows of ``clients``."""
        return Work(self.y, clients, **self.scratch)

    def at(self, y: torch.Tensor) -> Work:
        """The same rows (clients, scratch) at other iterates ``y`` (e.g. a lookahead)."""
        return Work(y, self.clients, **self.scratch)

    def head(self, rows: int) -> Work:
        """The first ``rows`` rows, as views (in-place updates reach this Work)."""
        return self.block(0, rows, None if self.clients is None else self.clients[:rows])

    def block(self, start: int, stop: int, clients: torch.Tensor | None) -> Work:
        """Rows ``start:stop`` as views (in-place updates reach this Work), for the clients
        ``clients`` (their ids; None: this Work's are all the process's, in order)."""
        if (start, stop) == (0, len(self)):
            return self
        return Work(self.y[start:stop], clients,
                    **{k: v[start:stop] for k, v in self.scratch.items()})

    def take(self, order: torch.Tensor, clients: torch.Tensor | None) -> Work:
        """A copy with rows in ``order`` (and the given client ids)."""
        return Work(self.y[order], clients, **{k: v[order] for k, v in self.scratch.items()})

    def restore(self, other: Work, order: torch.Tensor) -> None:
        """Set this Work's rows (and scratch) to ``other``'s rows in ``order``, in place.
        Broadcast views (one vector seen by every row, stride 0) are read-only and kept."""
        self.y.copy_(other.y[order])
        for key, value in self.scratch.items():
            if value.dim() and value.stride(0) == 0:
                continue
            value.copy_(other.scratch[key][order])


class Hyperparams:
    """Base of the algorithms' hyperparameter dataclasses. ``rules`` (a plain class attribute,
    not a field) maps field names to :class:`~gossipfl.validation.Rule`; ``validate`` checks
    the rules of the class and of all its bases, so a subclass lists only the fields it
    adds."""

    rules: ClassVar[dict[str, Rule]] = {}

    def validate(self) -> None:
        for cls in reversed(type(self).__mro__):
            for key, rule in vars(cls).get("rules", {}).items():
                rule.check(f"algorithm.{key}", getattr(self, key))


@dataclass
class NoParams(Hyperparams):
    """Algorithms without hyperparameters of their own."""


class Algorithm:
    """Base class. Subclasses set ``name``, ``paper``, ``Params`` and override the hooks.

    Declarations read by the schedule and the runner: ``centralized`` (a server model
    instead of a topology), ``client_state`` / ``global_state`` (what a checkpoint keeps:
    per-client rows and the rest, :mod:`gossipfl.common.state`),
    ``evaluations`` (which models the evaluation protocols measure: ``average``, ``local``;
    ``personalized``: the algorithm trains personal models, measured on each client's local
    test split by default and reported first in tables), ``orders`` (the gossip orders
    its round is defined for, :meth:`order_conflict`) and ``mixing`` (the mixing matrices its
    update rule is defined for, :func:`gossipfl.assembly.compat.mixing_check`).
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    centralized: ClassVar[bool] = False
    Params: ClassVar[type] = NoParams
    client_state: ClassVar[tuple[str, ...]] = ("x",)
    global_state: ClassVar[tuple[str, ...]] = ()
    evaluations: ClassVar[tuple[str, ...]] = ("average", "local")
    #: the ``topology.order`` values the round is defined for (gossipfl.schedules)
    orders: ClassVar[tuple[str, ...]] = ("synchronous",)
    #: the matrices W the update rule is defined for (gossipfl.topology: Topology.stochastic):
    #: ``doubly`` (rows and columns sum to 1, the D-PSGD / DFedAvg papers), ``row`` (rows:
    #: x_i ← Σ_j w_ij x_j stays a convex combination), ``column`` (columns: push-sum) or
    #: ``pairs`` (pairwise averages of neighbours: an undirected graph, AD-PSGD)
    mixing: ClassVar[str] = "doubly"
    #: whether ``topology.compression`` (CHOCO-Gossip, gossipfl.compression) may replace its
    #: plain gossip (False: it gossips with push-sum weights or masks)
    compressible: ClassVar[bool] = True
    #: whether it compresses its own messages (``algorithm.compressor``: choco, beer, ...)
    own_compression: ClassVar[bool] = False
    #: the variables it gossips, each a channel of the gossip pipeline
    #: (``fed.gossip(z, t, channel=name)``; gossipfl.topology.stages.Channel): a stage keeps
    #: per-channel state and streams (CHOCO-Gossip's public copies), keyed by the position
    gossip_channels: ClassVar[tuple[str, ...]] = ("x",)
    #: whether it reads its clients' label counts (``env.label_counts``): data that DP-SGD
    #: does not privatize, so ``privacy`` refuses it
    reads_label_counts: ClassVar[bool] = False
    #: whether it keeps state at each client's neighbours (public copies: CHOCO, DeepSqueeze,
    #: BEER), which needs the same graph every round (a time-varying one is refused)
    static_graph: ClassVar[bool] = False

    def __init__(self, params: Any, env: ClientEnv, fed: Federation):
        self.params = params if params is not None else self.Params()
        self.env = env
        self.fed = fed

    # -- declarations ------------------------------------------------------------------------
    def phases(self) -> list[Phase]:
        """The round's local work (default: one phase as the ``train`` section says)."""
        return [Phase()]

    def check(self, topology: Any, order: str = "synchronous") -> list[str]:
        """Warnings about this algorithm on ``topology`` (None for centralized) in the gossip
        ``order``, before training (e.g. an unstable extrapolation)."""
        return []

    def refusal(self, config: Any, topology: Any) -> str | None:
        """Why this algorithm's own parameters cannot run on ``topology`` (one sentence,
        checked before training; None: they can). What combines features (its ``orders``,
        ``mixing``, ``static_graph``, ``compressible`` against the order, the topology and
        the stages) is worded by :mod:`gossipfl.assembly.compat` from the declarations."""
        return None

    def columns(self, rounds: int) -> dict:
        """Metric columns of the algorithm's own after ``rounds`` rounds, added to every
        evaluated row (e.g. Muffliato's privacy guarantee); none by default."""
        return {}

    def order_conflict(self, order: str) -> tuple[str, dict] | None:
        """What of this algorithm's round ``topology.order: order`` conflicts with, as a
        reason of :data:`gossipfl.assembly.compat.ORDER_SENTENCES` and the values its sentence names
        (None: none; gossipfl.assembly.compat words the refusal). By default the orders it declares
        (``orders``)."""
        return None if order in self.orders else ("orders", {})

    # -- a round -----------------------------------------------------------------------------
    def init(self, x0: torch.Tensor) -> State:
        """The state at the start, from the initial client models ``x0`` ``[M, P]``."""
        return {"x": x0.clone()}

    def begin_round(self, ctx: Context, state: State) -> Work:
        """The round's working rows (default: a copy of every client's model)."""
        return Work(self.working_copy(state["x"]))

    def working_copy(self, x: torch.Tensor) -> torch.Tensor:
        """``x.clone()``, in a buffer kept from round to round once the last round's working
        rows are gone (:class:`gossipfl.engine.recycle.Recycler`: no fresh pages to fault in
        for a large stack; the same values)."""
        if not x.is_contiguous():
            return x.clone()
        buffers = self.__dict__.get("_working_buffers")
        if buffers is None:
            buffers = self.__dict__["_working_buffers"] = Recycler(limit=1)
        return buffers.clone(x)

    def keep(self, ctx: Context, state: State, work: Work) -> None:
        """What a client remembers of its round before communicating (per-client state rows
        only, e.g. its local result): called by ``end_round`` and, in the sequential order,
        on the few clients of each wave (gossipfl.schedules.sequential)."""

    def end_round(self, ctx: Context, state: State, work: Work) -> None:
        """Communicate (through the Federation, which counts the bytes), updating ``state``."""
        raise NotImplementedError

    # -- an asynchronous order's events (topology.order: asynchronous) -----------------------
    def begin_event(self, ctx: Context, state: State, clients: torch.Tensor) -> Work:
        """The rows whose computations complete in one wave of events (``clients``: the
        workers that finish): what their gradients are taken at."""
        raise NotImplementedError

    def end_event(self, ctx: Context, state: State, work: Work, partners: torch.Tensor) -> None:
        """Each finishing worker ``work.clients[k]`` communicates with ``partners[k]`` (the
        pairs are disjoint) and applies its computation, updating ``state``."""
        raise NotImplementedError

    # -- what is evaluated -------------------------------------------------------------------
    def client_models(self, state: State) -> torch.Tensor:
        """``[M, P]`` current local models (what local evaluation measures)."""
        return state["x"]

    def personalized_models(self, state: State) -> torch.Tensor:
        """``[M, P]`` each client's own model, what the personalized protocol measures on its
        local test split (default: :meth:`client_models`)."""
        return self.client_models(state)

    def trained_models(self, state: State, work: Work) -> torch.Tensor:
        """``[M, P]`` each client's personalized model right after its local training, before
        communication (``eval.personalized_point: before_gossip``; decentralized algorithms,
        whose round trains every row): default ``work.y``."""
        return work.y

    def finetune_phases(self) -> list[Phase]:
        """Local work every client does on its :meth:`personalized_models` before the
        personalized protocol measures them (FedBABU's fine-tuning); none by default."""
        return []

    def global_model(self, state: State) -> torch.Tensor:
        """``[P]`` the model evaluated as "average model": mean of clients, or the server's."""
        return self.fed.mean(state["x"])

    def server_model(self, state: State) -> torch.Tensor | None:
        return None
