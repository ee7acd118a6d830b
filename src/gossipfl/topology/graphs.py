"""Communication graphs and their per-round mixing matrices.

A :class:`Topology` gives, for every round t, a 0/1 adjacency ``A(t)`` (``A_ij = 1``: client i
receives client j's model; zero diagonal), the networkx graph of it and the float64 mixing
matrix ``W(t)`` of the chosen rule (``x_i ← Σ_j W_ij x_j``). Static topologies compute W once.

Topologies (M clients):

- ``ring``: i ~ i ± 1 mod M.
- ``grid``: 2-D torus rows × cols, rows = the largest divisor of M that is ≤ √M (M must be
  composite; with rows = 2 the short direction wraps onto itself, so degrees are 3).
- ``exponential``: i ~ i ± 2^k mod M for k = 0..⌊log₂(M−1)⌋, undirected (degree 14 at M = 100).
- ``full``: complete graph. ``star``: client 0 is the hub.
- ``erdos_renyi`` (``p``): G(M, p), seeded, redrawn until connected.
- ``k_regular`` (``k``): a random k-regular graph (k·M even), seeded, redrawn until connected.
- ``random_k`` (``k``, time-varying): every round every client draws k distinct neighbours
  uniformly from the others, with the generator of (seed, "topology", round) — the papers'
  code. The draw is a directed graph; ``mixing="uniform"`` uses it as is (row-stochastic
  W_ij = 1/(k+1) on {i} ∪ N_i(t)); a symmetric rule first symmetrizes it (i ~ j when either
  drew the other).
- ``authors_random`` (``k``, time-varying): the random graph of the DFedCata / OledFL code
  (Li et al. 2024; its ``generate_random_topo``): every round every client draws k − 1
  indices among all M clients without replacement (k = the code's ``active_ratio · M`` = 10 at
  M = 100, so 9 draws); a draw of itself is dropped; edge (i, j), i < j, exists iff i drew j
  (j's draw of i is ignored), and the adjacency is mirrored. Degrees vary (about 3–17 at
  M = 100). With ``mixing="uniform"`` W_ij = 1/|N_i ∪ {i}|, the code's row-stochastic weights.
- ``one_peer_exponential`` (time-varying, period ⌈log₂ M⌉): Ying et al. 2021; round t, client i
  averages (1/2, 1/2) with the model of i + 2^(t mod ⌈log₂ M⌉) — one message per client per
  round, doubly stochastic, exact average after log₂ M rounds when M is a power of 2.
- ``base_k`` (``k``, time-varying, periodic): Takezawa et al. 2023's Base-(k+1) graph, ≤ k peers
  per client per round, symmetric doubly stochastic, exact average after one period, any M.
- ``epidemic`` (``s``, time-varying): de Vos et al. 2023 (EL-Local); every client sends its model
  to s random others, each averages what it received and its own uniformly: row-stochastic only.
- ``random_matching`` (time-varying): a random perfect (M even) or maximal (M odd) matching per
  round; pairs average (1/2, 1/2), an unmatched client keeps its model.
- ``custom``: ``path`` to a .npy / .csv / .txt file or ``matrix`` (API; ``array`` in
  :func:`build_topology`) holding an adjacency (0/1) matrix, or a mixing matrix when
  ``mixing="custom"``: row-stochastic, or column-stochastic only (a push-sum matrix for
  ``sgp``).

Each topology is registered with the parameters it reads (:func:`register_topology`: each
one's rule and default; :data:`TOPOLOGY_KINDS`), which the config checks before training and
``gossipfl list`` shows. ``k``, ``p``, ``s``, ``path`` and ``matrix`` are shared keys of every
``topology`` section (the built-in graphs' parameters; one set for a graph that does not
read it is warned about); a plugin's topology may declare parameters of its own, which a
config sets beside the section's keys.

The first three carry their paper's weights (``topology.mixing`` is not used; their ``mixing``
reads ``uniform`` or ``base_k``); their definitions are in :mod:`gossipfl.topology.dynamic`.
Every topology says what its matrices are (:attr:`Topology.stochastic`: ``doubly``, ``row``
or ``column``), which an algorithm's ``mixing`` declaration is checked against.

Up to :data:`~gossipfl.topology.sparse.DENSE_MAX_CLIENTS` clients the matrices are dense
``[M, M]`` float64. Above it, ``ring``, ``exponential``, ``k_regular``, ``random_k``,
``one_peer_exponential``, ``epidemic``, ``random_matching`` and ``custom`` (an edge list) are
built as edges only (:class:`~gossipfl.topology.sparse.Edges`, O(M + edges)): every rule,
check and count works on the edges, :meth:`Topology.edges` gives W, and what needs the dense
W (:meth:`Topology.matrix`) refuses in one sentence. The other graphs stay dense at any M
(their memory is estimated before anything is allocated).

Where the code is: this module holds the :class:`Topology` class, the registry
(:func:`register_topology`, :data:`TOPOLOGY_KINDS`) and :func:`build_topology`;
:mod:`gossipfl.topology.builders` the built-in topologies' builders, each registered;
:mod:`gossipfl.topology.loaders` the files a custom topology reads (matrices, edge lists).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gossipfl.common.sections import (
    SHARED_TOPOLOGY_DEFAULTS,
    SHARED_TOPOLOGY_PARAMS,
    TOPOLOGY_SECTION_KEYS,
)
from gossipfl.engine.memory import require_memory
from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.plugins import Registry
from gossipfl.topology.mixing import (
    ROW_SUM_TOL,
    check_connected,
    count_messages,
    mixing_edges,
    mixing_matrix,
    mixing_rule_names,
    spectral_gap,
    symmetric_rule,
    validate_mixing,
)
from gossipfl.topology.sparse import (
    DENSE_MAX_CLIENTS,
    Edges,
    first_asymmetry,
    refuse_dense,
    validate_edges,
)
from gossipfl.validation import Params, Rule, describe_params, typed

if TYPE_CHECKING:  # networkx is imported where a graph is built (a faster start-up)
    import networkx as nx

from gossipfl.topology.loaders import is_edge_file

TOPOLOGIES = ("ring", "grid", "exponential", "full", "star", "erdos_renyi", "k_regular",
              "random_k", "authors_random", "one_peer_exponential", "base_k", "epidemic",
              "random_matching", "custom")
STOCHASTIC = ("doubly", "row", "column")  # what every round's W is (Topology.stochastic)
MAX_DRAWS = 100  # random graphs are redrawn this many times at most to get a connected one
CONNECTIVITY_WINDOW = 10  # rounds whose union must be connected for a time-varying topology
_CACHE_ROUNDS = 4  # per-round matrices kept by a time-varying topology
#: the topologies built as edges above DENSE_MAX_CLIENTS clients (gossipfl.topology.builders)
SPARSE_TOPOLOGIES = frozenset({"ring", "grid", "star", "exponential", "k_regular", "random_k",
                               "authors_random", "base_k", "one_peer_exponential",
                               "epidemic", "random_matching", "erdos_renyi"})

AdjacencyFn = Callable[[int], np.ndarray]
WeightsFn = Callable[[int], np.ndarray]


class Topology:
    """A (possibly time-varying) communication graph with its mixing rule.

    Attributes: ``name``, ``num_clients`` (M), ``mixing`` (rule name), ``time_varying``,
    ``directed`` (the adjacency may be non-symmetric), ``params`` (k, p, seed, ... as used) and
    ``period`` (W_{t+period} = W_t for a periodic time-varying graph, else None).

    ``weights``: W itself instead of a mixing rule, one matrix or a function of the round.
    ``stochastic`` declares what every round's W is (``doubly``, ``row`` or ``column``; see
    :attr:`stochastic` for the default), and each round's W is validated against it.
    """

    def __init__(self, name: str, num_clients: int, mixing: str, adjacency: AdjacencyFn, *,
                 time_varying: bool = False, directed: bool = False,
                 weights: np.ndarray | WeightsFn | None = None,
                 params: dict[str, Any] | None = None, stochastic: str | None = None,
                 period: int | None = None, sparse: bool = False):
        if stochastic not in (None, *STOCHASTIC):
            raise ValueError(f"stochastic must be one of {STOCHASTIC}, got {stochastic!r}")
        self.name = name
        self.num_clients = num_clients
        self.mixing = mixing
        self.time_varying = time_varying
        self.directed = directed
        self.params = dict(params or {})
        self.order = "synchronous"  # topology.order, as the run uses the graph
        self._adjacency_fn = adjacency
        self._weights = weights
        self._stochastic = stochastic
        self.period = period
        # edges only (adjacency / weights give Edges): no [M, M] array is ever formed
        self.sparse = sparse
        self._cache: dict[int, tuple] = {}
        self._edge_cache: dict[int, Edges] = {}  # dense topologies: W's entries, as edges

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.params.items())
        return f"Topology({self.name!r}, M={self.num_clients}, mixing={self.mixing!r}{extra})"

    @property
    def stochastic(self) -> str:
        """What every round's W is: ``doubly`` (rows and columns sum to 1), ``row`` (rows
        only) or ``column`` (columns only, push-sum). Declared by the builder; otherwise a
        symmetric rule gives ``doubly``, and the others ``row`` for a time-varying graph and
        what W(0) is for a static one (e.g. ``uniform`` on a regular graph is doubly)."""
        if self._stochastic is not None:
            return self._stochastic
        if symmetric_rule(self.mixing):
            return "doubly"
        if self.time_varying:
            return "row"
        columns = self.edges(0).column_sums() if self.sparse else self.matrix(0).sum(axis=0)
        return "doubly" if np.allclose(columns, 1.0, rtol=0, atol=ROW_SUM_TOL) else "row"

    def adjacency(self, round: int, what: str = "the dense adjacency") -> np.ndarray:
        """Read-only float64 0/1 ``[M, M]`` adjacency of the round (zero diagonal); refused
        (naming ``what`` needs it) for a topology built as edges."""
        if self.sparse:
            raise refuse_dense(self.num_clients, what)
        return self._entry(round)[0]

    def adjacency_edges(self, round: int) -> Edges:
        """The round's adjacency as edges (values 1, no diagonal)."""
        if self.sparse:
            return self._entry(round)[0]
        return self.edges(round).pattern()

    def union_edges(self, rounds: int) -> Edges:
        """The union of the adjacencies of rounds 0..rounds−1 as edges (each link once)."""
        parts = [self.adjacency_edges(t) for t in range(rounds)]
        return Edges.build(self.num_clients, np.concatenate([A.rows for A in parts]),
                           np.concatenate([A.cols for A in parts]))

    def edges(self, round: int) -> Edges:
        """The round's W as edges (its non-zero entries, row-major; read-only)."""
        if self.sparse:
            return self._entry(round)[1]
        key = int(round) if self.time_varying else 0
        if key not in self._edge_cache:
            if len(self._edge_cache) >= _CACHE_ROUNDS:
                self._edge_cache.pop(next(iter(self._edge_cache)))
            self._edge_cache[key] = Edges.from_dense(self.matrix(round))
        return self._edge_cache[key]

    def graph(self, round: int) -> nx.Graph | nx.DiGraph:
        """The round's graph; a DiGraph edge (i, j) means client i receives j's model."""
        import networkx as nx

        if self.sparse:
            raise refuse_dense(self.num_clients, "a networkx graph")
        kind = nx.DiGraph if self.directed else nx.Graph
        return nx.from_numpy_array(self.adjacency(round).astype(np.int8), create_using=kind)

    def matrix(self, round: int, what: str = "this feature") -> np.ndarray:
        """Read-only float64 ``[M, M]`` mixing matrix W of the round (validated); refused
        (naming ``what`` needs it) for a topology built as edges (:meth:`edges`)."""
        if self.sparse:
            raise refuse_dense(self.num_clients, what)
        return self._entry(round)[1]

    def describe(self, rounds: int = 5) -> dict[str, Any]:
        """Summary: sizes, degrees, spectral gap, symmetry (time-varying: over ``rounds``).
        A topology built as edges has no spectral gap computed (``None``)."""
        measured = self._measure_edges(rounds) if self.sparse else self._measure_dense(rounds)
        degrees, gap, symmetric, doubly, messages = measured
        return {
            "name": self.name,
            "num_clients": self.num_clients,
            "mixing": self.mixing,
            "time_varying": self.time_varying,
            "directed": self.directed,
            **self.params,
            "degree_min": int(degrees.min()),
            "degree_mean": float(degrees.mean()),
            "degree_max": int(degrees.max()),
            "spectral_gap": gap,
            "symmetric": symmetric,
            "doubly_stochastic": doubly,
            "stochastic": self.stochastic,
            "period": self.period,
            "messages_per_step": messages,
        }

    def _measure_dense(self, rounds: int) -> tuple:
        """(in-degrees of the rounds, mean spectral gap, symmetric, doubly stochastic, mean
        messages per step) from the rounds' matrices W."""
        Ws = [self.matrix(t) for t in range(rounds if self.time_varying else 1)]
        degrees = np.concatenate([np.count_nonzero(W, axis=1) - (np.diag(W) != 0) for W in Ws])
        return (degrees, float(np.mean([spectral_gap(W) for W in Ws])),
                all(np.allclose(W, W.T, rtol=0, atol=ROW_SUM_TOL) for W in Ws),
                all(np.allclose(W.sum(axis=0), 1.0, rtol=0, atol=ROW_SUM_TOL)
                    and np.allclose(W.sum(axis=1), 1.0, rtol=0, atol=ROW_SUM_TOL) for W in Ws),
                float(np.mean([count_messages(W) for W in Ws])))

    def _measure_edges(self, rounds: int) -> tuple:
        """The same from the rounds' edges; no spectral gap (None: not computed above
        DENSE_MAX_CLIENTS, an M × M eigenproblem)."""
        Es = [self.edges(t) for t in range(rounds if self.time_varying else 1)]
        degrees = np.concatenate([E.in_degree() for E in Es])
        sums_one = [np.allclose(s, 1.0, rtol=0, atol=ROW_SUM_TOL)
                    for E in Es for s in (E.row_sums(), E.column_sums())]
        return (degrees, None, all(first_asymmetry(E, ROW_SUM_TOL)[0] < 0 for E in Es),
                all(sums_one), float(np.mean([E.messages() for E in Es])))

    def _entry(self, round: int) -> tuple[np.ndarray, np.ndarray]:
        """(adjacency, W) of the round, computed once (static) or kept for a few rounds."""
        key = int(round) if self.time_varying else 0
        if key not in self._cache:
            if len(self._cache) >= _CACHE_ROUNDS:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = self._compute(key)
        return self._cache[key]

    def _compute(self, round: int) -> tuple[np.ndarray, np.ndarray]:
        if self.sparse:
            return self._compute_edges(round)
        A = np.asarray(self._adjacency_fn(round), dtype=np.float64)
        weights = self._weights
        W = (mixing_matrix(A, self.mixing) if weights is None
             else np.asarray(weights(round) if callable(weights) else weights, dtype=np.float64))
        symmetric = symmetric_rule(self.mixing)
        declared = self._stochastic
        validate_mixing(W, symmetric=symmetric, doubly=symmetric or declared == "doubly",
                        rows=declared != "column", key="topology.mixing",
                        label=f"{self.mixing} matrix")
        for array in (A, W):
            array.flags.writeable = False
        return A, W

    def _compute_edges(self, round: int) -> tuple[Edges, Edges]:
        """(adjacency, W) of the round as edges, W validated as the dense one would be."""
        A = self._adjacency_fn(round)
        weights = self._weights
        W = (mixing_edges(A, self.mixing) if weights is None
             else weights(round) if callable(weights) else weights)
        if weights is not None:
            A = W.pattern()
        symmetric = symmetric_rule(self.mixing)
        declared = self._stochastic
        validate_edges(W, symmetric=symmetric, doubly=symmetric or declared == "doubly",
                       rows=declared != "column", key="topology.mixing",
                       label=f"{self.mixing} matrix")
        return A.read_only(), W.read_only()


# --------------------------------------------------------------------------------------------
# The registry: every topology with the parameters it reads
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TopologyKind:
    """A registered topology: its builder and the parameters it reads.

    ``build(num_clients, mixing, seed, params) -> Topology`` gets in ``params`` exactly the
    parameters of ``Params`` (its :class:`~gossipfl.validation.Params` dataclass: each
    field's rule, checked before training, and default, the value a config leaves out; a
    field without a default must be given), each the value given or its default. A shared
    parameter (k, p, s, path, matrix: :data:`gossipfl.common.sections.SHARED_TOPOLOGY_PARAMS`) has
    the shared default (:data:`gossipfl.common.sections.SHARED_TOPOLOGY_DEFAULTS`) for every
    topology that reads it."""

    name: str
    build: Callable[[int, str, int, dict], Topology]
    Params: type[Params]
    #: None: W is ``topology.mixing``'s rule applied to the graph; else the words of the
    #: weights the topology fixes itself (``topology.mixing`` is then not read)
    weights: str | None = None

    @property
    def rules(self) -> dict[str, Rule | None]:
        """Its parameters (in order) with their rules."""
        return self.Params.parameter_rules()

    @property
    def defaults(self) -> dict[str, Any]:
        """Its parameters that have a default, with it."""
        return self.Params.defaults()

    def check(self, params: dict[str, Any]) -> Params:
        """Its typed parameters (:func:`~gossipfl.validation.typed`): one sentence naming
        ``topology.<param>`` and its value for a parameter the topology does not take
        (listing those it takes) or a value its rule refuses, or naming a parameter it needs
        that ``params`` lacks."""
        return typed(self.Params, params, "topology", "topology", self.name,
                     near=TOPOLOGY_SECTION_KEYS)

    def parameters(self, given: dict[str, Any]) -> dict[str, Any]:
        """The builder's ``params`` from those ``given`` (a shared one it does not read is
        left out; any other it does not take is refused by :meth:`check`), defaults filled
        in, in the order of its fields."""
        given = {key: value for key, value in given.items()
                 if key in self.rules or key not in SHARED_TOPOLOGY_PARAMS}
        return self.check(given).given()

    def describe(self) -> str:
        """Its parameters for ``gossipfl list``: ``k = 10 (an integer >= 1)``, ... (one
        without a default is required); '' when it has none."""
        return describe_params(self.rules, self.defaults)


#: name -> its registration; :func:`register_topology` adds to it (gossipfl's and plugins').
TOPOLOGY_KINDS: Registry = Registry("topology", "topology.name")


def register_topology(name: str, *, params: type[Params] | None = None,
                      rules: Mapping[str, Rule] | None = None,
                      defaults: Mapping[str, Any] | None = None,
                      weights: str | None = None) -> Callable:
    """Decorator: make ``builder(num_clients, mixing, seed, params) -> Topology`` available as
    ``topology.name: name``, reading the parameters of ``params``: a frozen
    :class:`~gossipfl.validation.Params` dataclass (each field a parameter, its default the
    value a config leaves out, ``rules`` what each must be). ``rules=`` (with ``defaults=``)
    is its shorthand: the dataclass made from those mappings. A config sets them beside the
    section's keys (``topology: {name: name, hops: 2}``), each checked before training;
    ``params`` holds exactly them. Of the shared keys (k, p, s, path, matrix) it reads those
    it declares, with their shared defaults. :func:`build_topology` validates what the
    builder returns as every topology's: each round's W by its mixing rule, and
    connectivity. ``weights``: the words of the weights a topology fixes itself (it does not
    read ``topology.mixing``: a config that sets it is warned)."""
    where = f"register_topology({name!r})"
    if params is not None and (rules is not None or defaults is not None):
        raise GossipflError(f"{where}: give params (a Params dataclass) or its shorthand "
                            f"rules= and defaults=, not both.")
    if params is None:
        params = _params_of(name, where, dict(rules or {}), dict(defaults or {}))
    _check_params(where, params)

    def decorate(builder: Callable[[int, str, int, dict], Topology]) -> Callable:
        from gossipfl.plugins import check_signature

        check_signature(builder, ("num_clients", "mixing", "seed", "params"),
                        f"the builder of topology {name!r}", options=False)
        TOPOLOGY_KINDS.add(name, TopologyKind(name, builder, params, weights),
                           made_by=lambda kind: kind.build)
        return builder
    return decorate


def _params_of(name: str, where: str, rules: dict[str, Any], defaults: dict[str, Any]
               ) -> type[Params]:
    """The Params dataclass of the shorthand ``rules=``/``defaults=`` (a shared key without
    a default takes the shared one; fields in the order of ``rules``, keyword-only)."""
    for key, rule in rules.items():
        if not isinstance(rule, Rule):
            raise GossipflError(f"{where}: the rule of '{key}' must be a gossipfl.validation."
                                f"Rule, got {type(rule).__name__} {rule!r:.60}.")
    for key in defaults:
        if key not in rules:
            raise GossipflError(f"{where}: a default for '{key}', which is not among its "
                                f"parameters ({', '.join(rules) or 'none'}); add its rule.")
    defaults = {**{key: SHARED_TOPOLOGY_DEFAULTS[key] for key in rules
                   if key in SHARED_TOPOLOGY_PARAMS and key not in defaults}, **defaults}
    fields = [(key, Any, dataclasses.field(default=defaults[key])) if key in defaults
              else (key, Any) for key in rules]
    made = dataclasses.make_dataclass(f"{name}_params", fields, bases=(Params,), frozen=True,
                                      kw_only=True)
    made.rules = rules
    return made


def _check_params(where: str, params: Any) -> None:
    """What a config could not use, in one sentence: not a frozen Params dataclass, a
    parameter named as a key of every topology section, a shared key with a default of its
    own, a default its rule refuses."""
    if not (isinstance(params, type) and issubclass(params, Params)
            and dataclasses.is_dataclass(params) and params.__dataclass_params__.frozen):
        raise GossipflError(f"{where}: params must be a frozen dataclass subclassing "
                            f"gossipfl.plugins.Params, got {params!r:.60}.")
    defaults = params.defaults()
    for key, rule in params.parameter_rules().items():
        if key in TOPOLOGY_SECTION_KEYS and key not in SHARED_TOPOLOGY_PARAMS or key == "options":
            raise GossipflError(f"{where}: '{key}' is a key of every topology section; name "
                                "the parameter otherwise.")
        if key in SHARED_TOPOLOGY_PARAMS and key in defaults \
                and not _same(defaults[key], SHARED_TOPOLOGY_DEFAULTS[key]):
            raise GossipflError(f"{where}: '{key}' is a shared key whose default is "
                                f"{SHARED_TOPOLOGY_DEFAULTS[key]!r} for every topology; leave it "
                                "out of defaults.")
        if key in defaults and rule is not None:
            rule.check(f"{where}: the default of topology.{key}", defaults[key])


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an array: not the default None
        return False


def topology_kind(name: str) -> TopologyKind:
    """The registration of topology ``name``; one sentence listing the names otherwise."""
    return TOPOLOGY_KINDS.lookup(name)


def topology_names() -> tuple[str, ...]:
    """Every topology name: the built-in ones, then the plugins'."""
    return (*TOPOLOGIES, *(n for n in TOPOLOGY_KINDS if n not in TOPOLOGIES))


def shared_params(*keys: str) -> type[Params]:
    """The Params of a built-in topology that reads the shared ``keys`` (each with its shared
    rule and default)."""
    return _params_of("shared_" + "_".join(keys), "shared_params",
                      {key: SHARED_TOPOLOGY_PARAMS[key] for key in keys}, {})


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------
def build_topology(name: str, num_clients: int, mixing: str = "metropolis_hastings",
                   seed: int = 0, *, window: int = CONNECTIVITY_WINDOW,
                   **params: Any) -> Topology:
    """Build and validate a topology by name (see the module docstring for names/params).

    ``params``: the parameters its registration declares (:func:`topology_kind`), each
    checked by its rule, the others at their defaults; a shared one it does not read (k, p,
    s, path, matrix; ``array`` is the API's name of matrix) is ignored, as the config passes
    them always, any other is refused. A time-varying topology must be connected over the
    union of rounds 0..window−1 (or over one period, when that is longer).
    """
    kind = topology_kind(name)
    if mixing not in mixing_rule_names():
        raise unknown_choice("topology.mixing", mixing, mixing_rule_names())
    if "array" in params:
        params["matrix"] = params.pop("array")
    params = kind.parameters(params)
    num_clients = _check_clients(name, num_clients)
    needed, as_edges = topology_bytes(name, num_clients, params, window)
    if as_edges:
        require_memory(needed, f"the {name} graph's edges on {num_clients} clients",
                       "data.clients")
    else:
        require_memory(needed, f"a dense {num_clients}×{num_clients} mixing matrix ({name})",
                       "data.clients")
    if mixing == "custom" and name != "custom":
        raise GossipflError(
            f"topology.mixing: custom needs topology.name: custom (a matrix from topology.path "
            f"or topology.matrix), got topology.name: {name}."
        )
    topology = _built(kind, num_clients, mixing, seed, params)
    if topology.time_varying and not topology.sparse:  # the rounds kept, the connectivity
        # check's union and one draw
        require_memory((16 * _CACHE_ROUNDS + 1 + 16) * num_clients ** 2,
                       f"the dense {num_clients}×{num_clients} matrices of {_CACHE_ROUNDS} "
                       f"rounds of the time-varying {name} topology", "data.clients")
    check_connected(topology, max(window, topology.period or 0))
    topology.edges(0) if topology.sparse else topology.matrix(0)
    return topology


def _built(kind: TopologyKind, num_clients: int, mixing: str, seed: int,
           params: dict) -> Topology:
    """``kind.build(...)``; a plugin's builder that raises, or returns something else than a
    :class:`Topology`, is one sentence naming it (and the line of its code that raised)."""
    from gossipfl.plugins import call_piece, replaceable

    if not replaceable(kind.build):  # gossipfl's own
        return kind.build(num_clients, mixing, seed, params)
    return call_piece("topology.name", f"topology '{kind.name}'", kind.build,
                      (num_clients, mixing, seed, params), Topology, "build")


def topology_bytes(name: str, m: int, params: dict, window: int = CONNECTIVITY_WINDOW
                   ) -> tuple[int, bool]:
    """What building topology ``name`` on ``m`` clients needs, and whether it is built as
    edges: :func:`edge_bytes` above DENSE_MAX_CLIENTS for a topology built as edges (a
    custom edge file too), else float64 [M, M] twice (the adjacency and the mixing matrix).
    :func:`build_topology` checks it, the memory plan (gossipfl.assembly.plan) counts it."""
    if m > DENSE_MAX_CLIENTS and (name in SPARSE_TOPOLOGIES or (
            name == "custom" and is_edge_file(params.get("path")))):
        return edge_bytes(name, m, params, window), True
    return 16 * m ** 2, False


def edge_bytes(name: str, m: int, params: dict, window: int = CONNECTIVITY_WINDOW) -> int:
    """Peak bytes of building a topology as edges: its edges per round (k, s as given), each
    24 B (two int64 indices, one float64 weight) held about six times over (adjacency, W,
    the sorted copies of the checks), over the rounds whose union the connectivity check
    reads (a time-varying graph). The Erdős–Rényi graph, whose p·M(M−1) edges dwarf every
    other family's, was measured at 69 B an edge (10⁴ clients, p = 0.1, 10⁷ edges: 2.41 GB
    peak against the ring's 1.72 GB; ``benchmarks/results/scale_1e4_plan_cpu.txt``): about
    three copies, which it is counted at."""
    log = max(1, (m - 1).bit_length())
    k = params.get("k") if is_int(params.get("k")) else 1
    s = params.get("s") if is_int(params.get("s")) else 1
    p = params.get("p") if isinstance(params.get("p"), float | int) else 0.1
    per_round = {"ring": 2 * m, "grid": 4 * m, "star": 2 * m,
                 "exponential": 2 * log * m, "k_regular": k * m,
                 "random_k": 2 * k * m, "authors_random": 2 * k * m, "base_k": (k + 1) * m,
                 "epidemic": s * m, "erdos_renyi": int(p * m * (m - 1)),
                 "random_matching": m,
                 "one_peer_exponential": 2 * m}.get(name, 2 * m) + m  # + the diagonal
    rounds = {"ring": 1, "grid": 1, "star": 1, "exponential": 1, "k_regular": 1,
              "erdos_renyi": 1,
              "one_peer_exponential": max(window, log)}.get(name, window)
    copies = 3 if name == "erdos_renyi" else 6 + rounds
    return 24 * per_round * copies


def _check_clients(name: str, num_clients: Any) -> int:
    if not is_int(num_clients):
        raise GossipflError(f"topology.name: {name} needs an integer number of clients, "
                            f"got {num_clients!r}.")
    if num_clients < 2:
        raise GossipflError(f"topology.name: {name} with {num_clients} client has no one to "
                            "gossip with; use at least 2 clients.")
    return int(num_clients)


def is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def as_edges(m: int) -> bool:
    """Whether a topology of :data:`SPARSE_TOPOLOGIES` on m clients is built as edges only
    (above :data:`~gossipfl.topology.sparse.DENSE_MAX_CLIENTS`)."""
    return m > DENSE_MAX_CLIENTS


def check_k(k: Any, m: int, name: str) -> int:
    if not is_int(k) or not 1 <= k <= m - 1:
        raise GossipflError(f"topology.k: must be in 1..{m - 1} for {name} on {m} clients, "
                            f"got {k!r}.")
    return int(k)
