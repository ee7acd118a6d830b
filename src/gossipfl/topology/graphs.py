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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gossipfl.engine.memory import require_memory
from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.plugins import Registry
from gossipfl.rng import derive_seed, numpy_generator
from gossipfl.sections import (
    SHARED_TOPOLOGY_DEFAULTS,
    SHARED_TOPOLOGY_PARAMS,
    TOPOLOGY_SECTION_KEYS,
)
from gossipfl.topology import dynamic
from gossipfl.topology.dynamic import random_k_neighbours
from gossipfl.topology.mixing import (
    ROW_SUM_TOL,
    check_connected,
    column_stochastic_only,
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
    components,
    first_asymmetry,
    refuse_dense,
    validate_edges,
)
from gossipfl.validation import Rule, check_piece_params, describe_params

if TYPE_CHECKING:  # networkx is imported where a graph is built (a faster start-up)
    import networkx as nx

TOPOLOGIES = ("ring", "grid", "exponential", "full", "star", "erdos_renyi", "k_regular",
              "random_k", "authors_random", "one_peer_exponential", "base_k", "epidemic",
              "random_matching", "custom")
STOCHASTIC = ("doubly", "row", "column")  # what every round's W is (Topology.stochastic)
MAX_DRAWS = 100  # random graphs are redrawn this many times at most to get a connected one
CONNECTIVITY_WINDOW = 10  # rounds whose union must be connected for a time-varying topology
_CACHE_ROUNDS = 4  # per-round matrices kept by a time-varying topology

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
    parameters of ``rules``, each the value given or its default. ``rules``: what each must be
    (:class:`gossipfl.validation.Rule`, checked before training); ``defaults``: the value of
    each one a config leaves out (one without a default must be given). A shared parameter
    (k, p, s, path, matrix: :data:`gossipfl.sections.SHARED_TOPOLOGY_PARAMS`) has
    the shared default (:data:`gossipfl.sections.SHARED_TOPOLOGY_DEFAULTS`) for every topology that reads it."""

    name: str
    build: Callable[[int, str, int, dict], Topology]
    rules: Mapping[str, Rule]
    defaults: Mapping[str, Any]
    #: None: W is ``topology.mixing``'s rule applied to the graph; else the words of the
    #: weights the topology fixes itself (``topology.mixing`` is then not read)
    weights: str | None = None

    def check(self, params: dict[str, Any]) -> None:
        """One sentence naming ``topology.<param>`` and its value for a parameter the
        topology does not take (listing those it takes) or a value its rule refuses, or naming
        a parameter it needs that ``params`` lacks."""
        check_piece_params("topology", "topology", self.name, params, dict(self.rules),
                           near=TOPOLOGY_SECTION_KEYS)
        for key, rule in self.rules.items():
            if key not in params and key not in self.defaults:
                raise GossipflError(f"topology.{key}: topology '{self.name}' needs this "
                                    f"parameter ({rule.words}); set it.")

    def parameters(self, given: dict[str, Any]) -> dict[str, Any]:
        """The builder's ``params`` from those ``given`` (a shared one it does not read is
        left out; any other it does not take is refused by :meth:`check`), defaults filled
        in, in the order of ``rules``."""
        given = {key: value for key, value in given.items()
                 if key in self.rules or key not in SHARED_TOPOLOGY_PARAMS}
        self.check(given)
        return {key: given[key] if key in given else self.defaults[key] for key in self.rules}

    def describe(self) -> str:
        """Its parameters for ``gossipfl list``: ``k = 10 (an integer >= 1)``, ... (one
        without a default is required); '' when it has none."""
        return describe_params(dict(self.rules), dict(self.defaults))


#: name -> its registration; :func:`register_topology` adds to it (gossipfl's and plugins').
TOPOLOGY_KINDS: Registry = Registry("topology", "topology.name")


def register_topology(name: str, *, rules: Mapping[str, Rule] | None = None,
                      defaults: Mapping[str, Any] | None = None,
                      weights: str | None = None) -> Callable:
    """Decorator: make ``builder(num_clients, mixing, seed, params) -> Topology`` available as
    ``topology.name: name``, reading the parameters of ``rules`` (each with its
    :class:`~gossipfl.validation.Rule`; ``defaults``: their values when a config leaves them
    out). A config sets them beside the section's keys (``topology: {name: name, hops: 2}``),
    each checked before training; ``params`` holds exactly them. Of the shared keys (k, p, s,
    path, matrix) it reads those it declares, with their shared defaults.
    :func:`build_topology` validates what the builder returns as every topology's: each
    round's W by its mixing rule, and connectivity. ``weights``: the words of the weights a
    topology fixes itself (it does not read ``topology.mixing``: a config that sets it is
    warned)."""
    rules, defaults = dict(rules or {}), dict(defaults or {})
    where = f"register_topology({name!r})"
    for key, rule in rules.items():
        if not isinstance(rule, Rule):
            raise GossipflError(f"{where}: the rule of '{key}' must be a gossipfl.validation."
                                f"Rule, got {type(rule).__name__} {rule!r:.60}.")
        if key in TOPOLOGY_SECTION_KEYS and key not in SHARED_TOPOLOGY_PARAMS or key == "options":
            raise GossipflError(f"{where}: '{key}' is a key of every topology section; name "
                                "the parameter otherwise.")
    for key, value in defaults.items():
        if key not in rules:
            raise GossipflError(f"{where}: a default for '{key}', which is not among its "
                                f"parameters ({', '.join(rules) or 'none'}); add its rule.")
        if key in SHARED_TOPOLOGY_PARAMS and not _same(value, SHARED_TOPOLOGY_DEFAULTS[key]):
            raise GossipflError(f"{where}: '{key}' is a shared key whose default is "
                                f"{SHARED_TOPOLOGY_DEFAULTS[key]!r} for every topology; leave it "
                                "out of defaults.")
        rules[key].check(f"{where}: the default of topology.{key}", value)
    defaults.update((key, SHARED_TOPOLOGY_DEFAULTS[key]) for key in rules
                    if key in SHARED_TOPOLOGY_PARAMS)
    defaults = {key: defaults[key] for key in rules if key in defaults}

    def decorate(builder: Callable[[int, str, int, dict], Topology]) -> Callable:
        from gossipfl.plugins import check_signature

        check_signature(builder, ("num_clients", "mixing", "seed", "params"),
                        f"the builder of topology {name!r}", options=False)
        TOPOLOGY_KINDS.add(name, TopologyKind(name, builder, rules, defaults, weights),
                           made_by=lambda kind: kind.build)
        return builder
    return decorate


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an array: not the default None
        return False


def topology_kind(name: str) -> TopologyKind:
    """The registration of topology ``name``; one sentence listing the names otherwise."""
    if name not in TOPOLOGY_KINDS:
        raise unknown_choice("topology.name", name, topology_names())
    return TOPOLOGY_KINDS[name]


def topology_names() -> tuple[str, ...]:
    """Every topology name: the built-in ones, then the plugins'."""
    return (*TOPOLOGIES, *(n for n in TOPOLOGY_KINDS if n not in TOPOLOGIES))


def _shared(*keys: str) -> dict[str, Rule]:
    """The rules of shared keys a built-in topology reads."""
    return {key: SHARED_TOPOLOGY_PARAMS[key] for key in keys}


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
    topology = kind.build(num_clients, mixing, seed, params)
    if topology.time_varying and not topology.sparse:  # the rounds kept, the connectivity
        # check's union and one draw
        require_memory((16 * _CACHE_ROUNDS + 1 + 16) * num_clients ** 2,
                       f"the dense {num_clients}×{num_clients} matrices of {_CACHE_ROUNDS} "
                       f"rounds of the time-varying {name} topology", "data.clients")
    check_connected(topology, max(window, topology.period or 0))
    topology.edges(0) if topology.sparse else topology.matrix(0)
    return topology


def topology_bytes(name: str, m: int, params: dict, window: int = CONNECTIVITY_WINDOW
                   ) -> tuple[int, bool]:
    """What building topology ``name`` on ``m`` clients needs, and whether it is built as
    edges: :func:`edge_bytes` above DENSE_MAX_CLIENTS for a topology built as edges (a
    custom edge file too), else float64 [M, M] twice (the adjacency and the mixing matrix).
    :func:`build_topology` checks it, the memory plan (gossipfl.plan) counts it."""
    if m > DENSE_MAX_CLIENTS and (name in SPARSE_TOPOLOGIES or (
            name == "custom" and is_edge_file(params.get("path")))):
        return edge_bytes(name, m, params, window), True
    return 16 * m ** 2, False


def edge_bytes(name: str, m: int, params: dict, window: int = CONNECTIVITY_WINDOW) -> int:
    """Peak bytes of building a topology as edges: its edges per round (k, s as given), each
    24 B (two int64 indices, one float64 weight) held about six times over (adjacency, W,
    the sorted copies of the checks), over the rounds whose union the connectivity check
    reads (a time-varying graph)."""
    log = max(1, (m - 1).bit_length())
    k = params.get("k") if _is_int(params.get("k")) else 1
    s = params.get("s") if _is_int(params.get("s")) else 1
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
    return 24 * per_round * (6 + rounds)


def _check_clients(name: str, num_clients: Any) -> int:
    if not _is_int(num_clients):
        raise GossipflError(f"topology.name: {name} needs an integer number of clients, "
                            f"got {num_clients!r}.")
    if num_clients < 2:
        raise GossipflError(f"topology.name: {name} with {num_clients} client has no one to "
                            "gossip with; use at least 2 clients.")
    return int(num_clients)


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _check_k(k: Any, m: int, name: str) -> int:
    if not _is_int(k) or not 1 <= k <= m - 1:
        raise GossipflError(f"topology.k: must be in 1..{m - 1} for {name} on {m} clients, "
                            f"got {k!r}.")
    return int(k)


def _static(name: str, m: int, mixing: str, graph: nx.Graph,
            params: dict[str, Any] | None = None) -> Topology:
    """A topology with one undirected graph for all rounds (nodes 0..M−1)."""
    import networkx as nx

    A = nx.to_numpy_array(graph, nodelist=range(m), dtype=np.float64, weight=None)
    np.fill_diagonal(A, 0.0)
    return Topology(name, m, mixing, lambda _round: A, params=params)


def _large(m: int) -> bool:
    """Whether a topology on m clients is built as edges only."""
    return m > DENSE_MAX_CLIENTS


def _static_edges(name: str, m: int, mixing: str, rows: np.ndarray, cols: np.ndarray,
                  params: dict[str, Any] | None = None) -> Topology:
    """A static undirected topology from the edges (rows[e], cols[e]), built as edges."""
    rows, cols = np.asarray(rows), np.asarray(cols)
    off = rows != cols
    A = Edges.build(m, np.concatenate([rows[off], cols[off]]),
                    np.concatenate([cols[off], rows[off]]))
    return Topology(name, m, mixing, lambda _round: A, params=params, sparse=True)


@register_topology("ring")
def _ring(m: int, mixing: str, seed: int, params: dict) -> Topology:
    import networkx as nx

    if _large(m):
        i = np.arange(m)
        return _static_edges("ring", m, mixing, i, (i + 1) % m)
    return _static("ring", m, mixing, nx.cycle_graph(m))


@register_topology("grid")
def _grid(m: int, mixing: str, seed: int, params: dict) -> Topology:
    import networkx as nx

    rows = max(d for d in range(1, int(np.sqrt(m)) + 1) if m % d == 0)
    if rows == 1:
        raise GossipflError(
            f"topology.name: grid needs a composite number of clients (rows × cols, both ≥ 2), "
            f"got {m}; {_nearest_composites(m)}."
        )
    cols = m // rows
    if _large(m):  # node r·cols + c, as networkx's sorted labels: right and down neighbours
        r, c = np.divmod(np.arange(m), cols)
        right, down = r * cols + (c + 1) % cols, ((r + 1) % rows) * cols + c
        return _static_edges("grid", m, mixing, np.tile(np.arange(m), 2),
                             np.concatenate([right, down]), {"rows": rows, "cols": cols})
    torus = nx.convert_node_labels_to_integers(
        nx.grid_2d_graph(rows, cols, periodic=True), ordering="sorted")
    return _static("grid", m, mixing, torus, {"rows": rows, "cols": cols})


def _nearest_composites(m: int) -> str:
    """'the nearest that work are a and b' for a prime (or too small) m."""
    def composite(n: int) -> bool:
        return n >= 4 and any(n % d == 0 for d in range(2, int(np.sqrt(n)) + 1))

    above = next(n for n in range(m + 1, 2 * m + 5) if composite(n))
    below = next((n for n in range(m - 1, 3, -1) if composite(n)), None)
    if below is None:
        return f"the smallest that works is {above}"
    return f"the nearest that work are {below} and {above}"


@register_topology("exponential")
def _exponential(m: int, mixing: str, seed: int, params: dict) -> Topology:
    import networkx as nx

    offsets = [2**k for k in range((m - 1).bit_length())]  # k = 0..⌊log₂(M−1)⌋
    if _large(m):
        i = np.repeat(np.arange(m), len(offsets))
        return _static_edges("exponential", m, mixing, i,
                             (i + np.tile(offsets, m)) % m)
    return _static("exponential", m, mixing, nx.circulant_graph(m, offsets))


@register_topology("full")
def _full(m: int, mixing: str, seed: int, params: dict) -> Topology:
    import networkx as nx

    return _static("full", m, mixing, nx.complete_graph(m))


@register_topology("star")
def _star(m: int, mixing: str, seed: int, params: dict) -> Topology:
    import networkx as nx

    if _large(m):  # the hub 0 and every other client
        return _static_edges("star", m, mixing, np.zeros(m - 1, dtype=np.int64),
                             np.arange(1, m))
    return _static("star", m, mixing, nx.star_graph(m - 1))


def _connected_draw(draw: Callable[[int], Any], key: str, failure: str,
                    connected: Callable[[Any], bool] | None = None) -> Any:
    """The first connected graph among ``draw(0)``, ``draw(1)``, ... (MAX_DRAWS tries):
    networkx graphs, or anything ``connected`` judges (edge pairs (u, v) by
    :func:`_pairs_connected`)."""
    import networkx as nx

    connected = connected or nx.is_connected
    for attempt in range(MAX_DRAWS):
        graph = draw(attempt)
        if connected(graph):
            return graph
    raise GossipflError(f"{key}: {failure} was disconnected in all {MAX_DRAWS} random draws; "
                        "use a denser graph.")


@register_topology("erdos_renyi", rules=_shared("p"))
def _erdos_renyi(m: int, mixing: str, seed: int, params: dict) -> Topology:
    import networkx as nx

    p = params.get("p")
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p <= 1:
        raise GossipflError(f"topology.p: erdos_renyi needs an edge probability in (0, 1], "
                            f"got {p!r}.")
    if _large(m) and p < 1 / 3:  # edges (48 B a pair, both ways) fewer bytes than 16 M²
        return _erdos_renyi_edges(m, mixing, seed, p)
    graph = _connected_draw(
        lambda a: nx.gnp_random_graph(m, p, seed=derive_seed(seed, "topology", "er", a)),
        "topology.p", _er_failure(m, p))
    return _static("erdos_renyi", m, mixing, graph, {"p": p, "seed": seed})


def upper_pair(e: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The pair (i, j), i < j, of linear index e of the upper triangle of an M × M matrix
    read row by row (e = 0 is (0, 1), e = M − 2 is (0, M − 1), e = M − 1 is (1, 2), ...)."""
    i = (m - 2 - np.floor(np.sqrt(4.0 * m * (m - 1) - 8.0 * e - 7) / 2 - 0.5)).astype(np.int64)
    return i, e + i + 1 - (m * (m - 1) // 2 - (m - i) * (m - i - 1) // 2)


def _erdos_renyi_edges(m: int, mixing: str, seed: int, p: float) -> Topology:
    """G(M, p) as edges: the number of pairs drawn from Binomial(M(M−1)/2, p), the pairs
    uniformly among all (distinct linear indices of the upper triangle); redrawn until
    connected, as the dense draw. Another stream than networkx's."""
    pairs = m * (m - 1) // 2

    def draw(attempt: int) -> tuple[np.ndarray, np.ndarray]:
        rng = numpy_generator(seed, "topology", "er", attempt)
        count = int(rng.binomial(pairs, p))
        chosen = np.unique(rng.integers(0, pairs, size=count))
        while len(chosen) < count:  # the rare repeated pair, drawn again
            extra = rng.integers(0, pairs, size=count - len(chosen))
            chosen = np.unique(np.concatenate([chosen, extra]))
        return upper_pair(chosen, m)

    i, j = _connected_draw(draw, "topology.p", _er_failure(m, p), _pairs_connected(m))
    return _static_edges("erdos_renyi", m, mixing, i, j, {"p": p, "seed": seed})


def _er_failure(m: int, p: float) -> str:
    return (f"erdos_renyi with p={p} on {m} clients (connectivity needs p > ln M / M ≈ "
            f"{np.log(m) / m:.3g})")


def _pairs_connected(m: int) -> Callable[[tuple[np.ndarray, np.ndarray]], bool]:
    """Whether the undirected edges (u[e], v[e]) connect all m clients."""
    return lambda pair: bool((components(m, *pair) == 0).all())


@register_topology("k_regular", rules=_shared("k"))
def _k_regular(m: int, mixing: str, seed: int, params: dict) -> Topology:
    import networkx as nx

    k = _check_k(params.get("k"), m, "k_regular")
    if k * m % 2:
        raise GossipflError(f"topology.k: k_regular needs k × clients even, got k={k} with "
                            f"{m} clients.")
    failure = f"k_regular with k={k} on {m} clients"
    if _large(m):
        u, v = _connected_draw(
            lambda a: dynamic.random_regular_edges(
                m, k, numpy_generator(seed, "topology", "kreg", a)),
            "topology.k", failure, _pairs_connected(m))
        return _static_edges("k_regular", m, mixing, u, v, {"k": k, "seed": seed})
    graph = _connected_draw(
        lambda a: nx.random_regular_graph(k, m, seed=derive_seed(seed, "topology", "kreg", a)),
        "topology.k", failure)
    return _static("k_regular", m, mixing, graph, {"k": k, "seed": seed})


@register_topology("random_k", rules=_shared("k"))
def _random_k(m: int, mixing: str, seed: int, params: dict) -> Topology:
    k = _check_k(params.get("k"), m, "random_k")
    symmetrize = symmetric_rule(mixing)
    if _large(m):
        def edges(round: int) -> Edges:
            rows = np.repeat(np.arange(m), k)
            cols = dynamic.distinct_others(m, k, seed, round).ravel()
            if symmetrize:
                rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
            return Edges.build(m, rows, cols)

        return Topology("random_k", m, mixing, edges, time_varying=True,
                        directed=not symmetrize, params={"k": k, "seed": seed}, sparse=True)

    def adjacency(round: int) -> np.ndarray:
        A = np.zeros((m, m))
        A[np.arange(m)[:, None], random_k_neighbours(m, k, seed, round)] = 1.0
        return np.maximum(A, A.T) if symmetrize else A

    return Topology("random_k", m, mixing, adjacency, time_varying=True,
                    directed=not symmetrize, params={"k": k, "seed": seed})


def authors_random_adjacency(m: int, k: int, seed: int, round: int) -> np.ndarray:
    """``[M, M]`` 0/1: every row draws k − 1 of all M clients without replacement (the
    k − 1 smallest of M i.i.d. uniform keys, from (seed, "topology", t)); upper triangle of
    the draws, mirrored, zero diagonal."""
    keys = numpy_generator(seed, "topology", round).random((m, m))
    draws = np.argpartition(keys, k - 2, axis=1)[:, :k - 1]
    A = np.zeros((m, m))
    A[np.arange(m)[:, None], draws] = 1.0
    upper = np.triu(A, 1)
    return upper + upper.T


@register_topology("authors_random", rules=_shared("k"))
def _authors_random(m: int, mixing: str, seed: int, params: dict) -> Topology:
    k = params.get("k")
    if not _is_int(k) or not 2 <= k <= m:
        raise GossipflError(f"topology.k: must be in 2..{m} for authors_random on {m} clients "
                            f"(k − 1 draws per client), got {k!r}.")
    if _large(m):
        return Topology("authors_random", m, mixing,
                        lambda round: authors_random_edges(m, k, seed, round),
                        time_varying=True, params={"k": k, "seed": seed}, sparse=True)
    return Topology("authors_random", m, mixing,
                    lambda round: authors_random_adjacency(m, k, seed, round),
                    time_varying=True, params={"k": k, "seed": seed})


def authors_random_edges(m: int, k: int, seed: int, round: int) -> Edges:
    """:func:`authors_random_adjacency` as edges, for many clients: every client draws k − 1
    others (``dynamic.distinct_others``: the dense draw may pick the client itself, which it
    then drops; at M > 1 024 that changes the law by less than (k − 1)/M), the draws i < j
    kept and mirrored. Another stream than the dense draw's."""
    rows = np.repeat(np.arange(m), k - 1)
    cols = dynamic.distinct_others(m, k - 1, seed, round).ravel()
    low, high = np.minimum(rows, cols), np.maximum(rows, cols)
    upper = rows < cols
    return Edges.build(m, np.concatenate([low[upper], high[upper]]),
                       np.concatenate([high[upper], low[upper]]))


# --------------------------------------------------------------------------------------------
# Custom matrices
# --------------------------------------------------------------------------------------------
def load_matrix(path: str | Path, key: str = "topology.path") -> np.ndarray:
    """A float64 matrix from a .npy, .csv (comma-separated) or .txt (whitespace) file."""
    file = Path(path).expanduser()
    suffix = file.suffix.lower()
    if suffix not in (".npy", ".csv", ".txt"):
        raise GossipflError(f"{key}: unsupported file type '{suffix or path}'; "
                            "use .npy, .csv or .txt.")
    if not file.is_file():
        raise GossipflError(f"{key}: no such file '{path}'.")
    try:
        if suffix == ".npy":
            return np.asarray(np.load(file, allow_pickle=False), dtype=np.float64)
        return np.loadtxt(file, delimiter="," if suffix == ".csv" else None,
                          dtype=np.float64, ndmin=2)
    except (ValueError, OSError) as error:
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        raise GossipflError(f"{key}: could not read a matrix from '{path}' ({reason}).") from None


def _custom_source(m: int, params: dict) -> tuple[np.ndarray, str]:
    """The user's matrix (float64, checked [M, M]) and the config key it came from."""
    path = params.get("path")
    array = params.get("matrix")
    if (path is None) == (array is None):
        raise GossipflError(
            "topology.path: the custom topology needs exactly one of topology.path (a .npy, "
            f".csv or .txt file) and topology.matrix (API), got {'both' if path else 'neither'}."
        )
    if path is not None:
        matrix, key = load_matrix(path), "topology.path"
    else:
        matrix, key = _api_matrix(array), "topology.matrix"
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise GossipflError(f"{key}: the matrix must be square, got shape {matrix.shape}.")
    if matrix.shape[0] != m:
        raise GossipflError(f"{key}: the matrix is {matrix.shape[0]}×{matrix.shape[0]} but "
                            f"there are {m} clients.")
    return matrix, key


def _api_matrix(array: Any) -> np.ndarray:
    """``topology.matrix`` as float64, or one sentence on what it is instead."""
    if isinstance(array, (str, Path)):
        raise GossipflError(f"topology.matrix: got the file name '{array}'; a matrix file goes "
                            f"in topology.path, topology.matrix takes the [M, M] array itself.")
    if hasattr(array, "detach"):
        array = array.detach().cpu().numpy()
    try:
        return np.asarray(array, dtype=np.float64)
    except (ValueError, TypeError):
        rows = [len(r) for r in array] if isinstance(array, (list, tuple)) and all(
            isinstance(r, (list, tuple)) for r in array) else None
        if rows is not None and len(set(rows)) > 1:
            raise GossipflError(f"topology.matrix: the rows have different lengths "
                                f"({', '.join(map(str, rows[:8]))}{', ...' if len(rows) > 8 else ''}"
                                f"); a mixing matrix is [M, M] numbers.") from None
        raise GossipflError(f"topology.matrix: must be an [M, M] array of numbers, got "
                            f"{type(array).__name__} {str(array)[:60]!r}.") from None


def is_edge_file(path: Any) -> bool:
    """Whether ``topology.path`` holds an edge list: a .npz (``rows``, ``cols``, optional
    ``weights``) or a .csv whose first line is the header ``i,j`` or ``i,j,w``."""
    if not isinstance(path, str | Path):
        return False
    file = Path(path).expanduser()
    if file.suffix.lower() == ".npz":
        return True
    if file.suffix.lower() != ".csv" or not file.is_file():
        return False
    with open(file, encoding="utf-8", errors="replace") as handle:
        head = handle.readline().replace(" ", "").strip().lower()
    return head in ("i,j", "i,j,w")


def load_edges(path: str | Path, m: int, key: str = "topology.path"
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(rows, cols, weights or None) of an edge-list file (:func:`is_edge_file`), every
    index checked to be a client 0..M−1; a bad line or entry is named."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise GossipflError(f"{key}: no such file '{path}'.")
    try:
        if file.suffix.lower() == ".npz":
            with np.load(file, allow_pickle=False) as data:
                missing = [name for name in ("rows", "cols") if name not in data.files]
                if missing:
                    raise GossipflError(f"{key}: '{path}' has no array named "
                                        f"{' or '.join(missing)} (an edge list .npz holds "
                                        "rows, cols and optionally weights).")
                rows, cols = np.asarray(data["rows"]), np.asarray(data["cols"])
                weights = (np.asarray(data["weights"], dtype=np.float64)
                           if "weights" in data.files else None)
            where = "entry"
            offset = 0
        else:
            table = np.loadtxt(file, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
            rows, cols = table[:, 0], table[:, 1]
            weights = table[:, 2] if table.shape[1] == 3 else None
            if table.shape[1] not in (2, 3):
                raise GossipflError(f"{key}: '{path}' has {table.shape[1]} columns; an edge "
                                    "list has i,j or i,j,w.")
            where, offset = "line", 2  # line 1 is the header
    except (ValueError, OSError) as error:
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        raise GossipflError(f"{key}: could not read an edge list from '{path}' "
                            f"({reason}).") from None
    if rows.shape != cols.shape or (weights is not None and weights.shape != rows.shape):
        raise GossipflError(f"{key}: rows, cols and weights of '{path}' differ in length.")
    bad = np.flatnonzero((rows != np.floor(rows)) | (cols != np.floor(cols))
                         | (rows < 0) | (cols < 0) | (rows >= m) | (cols >= m))
    if len(bad):
        b = int(bad[0])
        raise GossipflError(f"{key}: {where} {b + offset} of '{path}' ({rows[b]:g}, "
                            f"{cols[b]:g}) is not a pair of clients in 0..{m - 1}.")
    return rows.astype(np.int64), cols.astype(np.int64), weights


def _custom_edges(m: int, mixing: str, params: dict) -> Topology:
    """A custom topology from an edge list, built as edges (more than DENSE_MAX_CLIENTS
    clients): the same checks and sentences as the dense matrix."""
    key = "topology.path"
    rows, cols, weights = load_edges(params["path"], m, key)
    if mixing == "custom":
        if weights is None:
            raise GossipflError(f"{key}: topology.mixing: custom needs the weights of W (an "
                                "i,j,w edge list, or weights in the .npz).")
        W = Edges.build(m, rows, cols, weights)
        ones = {"rtol": 0, "atol": ROW_SUM_TOL}
        columns = bool(np.allclose(W.column_sums(), 1.0, **ones)
                       and not np.allclose(W.row_sums(), 1.0, **ones))
        validate_edges(W, symmetric=False, doubly=False, rows=not columns,
                       key="topology.mixing", label="custom matrix")
        return Topology("custom", m, "custom", lambda _round: None,
                        directed=first_asymmetry(W.pattern())[0] >= 0, weights=W,
                        stochastic="column" if columns else None, sparse=True)
    off = rows != cols
    if weights is not None:
        bad = np.flatnonzero(off & (weights != 0) & (weights != 1))
        if len(bad):
            b = int(bad[0])
            raise GossipflError(
                f"{key}: an adjacency matrix holds only 0 and 1, found {weights[b]:.6g} at "
                f"[{rows[b]},{cols[b]}]; for a mixing matrix set topology.mixing: custom.")
        off &= weights != 0
    A = Edges.build(m, rows[off], cols[off])
    i, j = first_asymmetry(A)
    if i >= 0 and symmetric_rule(mixing):
        raise GossipflError(
            f"{key}: the adjacency is not symmetric (A[{i},{j}]={A.value_at(i, j):g}, "
            f"A[{j},{i}]={A.value_at(j, i):g}), which {mixing} cannot use; symmetrize it or "
            "set topology.mixing: uniform."
        )
    return Topology("custom", m, mixing, lambda _round: A, directed=i >= 0, sparse=True)


@register_topology("custom", rules=_shared("path", "matrix"))
def _custom(m: int, mixing: str, seed: int, params: dict) -> Topology:
    if is_edge_file(params.get("path")):
        if _large(m):
            return _custom_edges(m, mixing, params)
        rows, cols, weights = load_edges(params["path"], m)  # small: the dense matrix
        matrix = np.zeros((m, m))
        matrix[rows, cols] = 1.0 if weights is None else weights
        params = {**params, "path": None, "matrix": matrix}
    matrix, key = _custom_source(m, params)
    if mixing == "custom":
        columns = column_stochastic_only(matrix)  # push-sum (sgp): else the rows sum to 1
        validate_mixing(matrix, symmetric=False, doubly=False, rows=not columns,
                        key="topology.mixing", label="custom matrix")
        A = (matrix != 0).astype(np.float64)
        np.fill_diagonal(A, 0.0)
        return Topology("custom", m, "custom", lambda _round: A,
                        directed=not np.array_equal(A, A.T), weights=matrix,
                        stochastic="column" if columns else None)
    A = _adjacency_from(matrix, key)
    directed = not np.array_equal(A, A.T)
    if directed and symmetric_rule(mixing):
        i, j = np.argwhere(A != A.T)[0]
        raise GossipflError(
            f"{key}: the adjacency is not symmetric (A[{i},{j}]={A[i, j]:g}, "
            f"A[{j},{i}]={A[j, i]:g}), which {mixing} cannot use; symmetrize it or set "
            "topology.mixing: uniform."
        )
    return Topology("custom", m, mixing, lambda _round: A, directed=directed)


def _adjacency_from(matrix: np.ndarray, key: str) -> np.ndarray:
    """A 0/1 adjacency with zero diagonal, or an error pointing to ``mixing: custom``."""
    off = ~np.eye(len(matrix), dtype=bool)
    bad = np.argwhere(off & (matrix != 0) & (matrix != 1))
    if len(bad):
        i, j = bad[0]
        raise GossipflError(
            f"{key}: an adjacency matrix holds only 0 and 1, found {matrix[i, j]:.6g} at "
            f"[{i},{j}]; for a mixing matrix set topology.mixing: custom."
        )
    return np.where(off, matrix, 0.0)


# --------------------------------------------------------------------------------------------
# Time-varying graphs of the papers (gossipfl.topology.dynamic holds their definitions)
# --------------------------------------------------------------------------------------------
@register_topology("one_peer_exponential", weights="the paper's: 1/2 on itself and its one peer")
def _one_peer_exponential(m: int, mixing: str, seed: int, params: dict) -> Topology:
    period = dynamic.one_peer_period(m)
    if _large(m):
        return Topology("one_peer_exponential", m, "uniform", lambda _round: None,
                        time_varying=True, directed=True,
                        weights=lambda round: dynamic.one_peer_edges(m, round),
                        stochastic="doubly", period=period, params={"period": period},
                        sparse=True)

    def adjacency(round: int) -> np.ndarray:
        A = (dynamic.one_peer_exponential(m, round) != 0).astype(np.float64)
        np.fill_diagonal(A, 0.0)
        return A

    return Topology("one_peer_exponential", m, "uniform", adjacency, time_varying=True,
                    directed=m > 2, weights=lambda round: dynamic.one_peer_exponential(m, round),
                    stochastic="doubly", period=period, params={"period": period})


@register_topology("base_k", rules=_shared("k"), weights="the paper's Base-(k+1) weights")
def _base_k(m: int, mixing: str, seed: int, params: dict) -> Topology:
    k = _check_k(params.get("k"), m, "base_k")
    sequence = dynamic.base_k_sequence(m, k)
    period = len(sequence)
    if _large(m):  # O(M k) entries per round, as edges
        return Topology("base_k", m, "base_k", lambda round: sequence.edges(round % period),
                        time_varying=True, weights=lambda round: sequence.edges(round % period),
                        stochastic="doubly", period=period, sparse=True,
                        params={"k": k, "period": period})
    # a dense [M, M] per round only while it is used
    require_memory(16 * m ** 2, f"the Base-(k+1) graph on {m} clients", "data.clients")

    def weights(round: int) -> np.ndarray:
        return sequence.dense(round % period)

    def adjacency(round: int) -> np.ndarray:
        A = (weights(round) != 0).astype(np.float64)
        np.fill_diagonal(A, 0.0)
        return A

    return Topology("base_k", m, "base_k", adjacency, time_varying=True, weights=weights,
                    stochastic="doubly", period=period, params={"k": k, "period": period})


@register_topology("epidemic", rules=_shared("s"),
                   weights="the paper's: uniform over itself and the models it receives")
def _epidemic(m: int, mixing: str, seed: int, params: dict) -> Topology:
    s = params.get("s")
    if not _is_int(s) or not 1 <= s <= m - 1:
        raise GossipflError(f"topology.s: must be in 1..{m - 1} for epidemic on {m} clients "
                            f"(the peers each client sends to per round), got {s!r}.")
    if _large(m):
        return Topology("epidemic", m, "uniform",
                        lambda round: dynamic.epidemic_edges(m, int(s), seed, round),
                        time_varying=True, directed=True, stochastic="row",
                        params={"s": int(s), "seed": seed}, sparse=True)
    return Topology("epidemic", m, "uniform",
                    lambda round: dynamic.epidemic_adjacency(m, int(s), seed, round),
                    time_varying=True, directed=True, stochastic="row",
                    params={"s": int(s), "seed": seed})


@register_topology("random_matching")
def _random_matching(m: int, mixing: str, seed: int, params: dict) -> Topology:
    if _large(m):
        return Topology("random_matching", m, mixing,
                        lambda round: dynamic.random_matching_edges(m, seed, round),
                        time_varying=True, stochastic="doubly", params={"seed": seed},
                        sparse=True)
    return Topology("random_matching", m, mixing,
                    lambda round: dynamic.random_matching_adjacency(m, seed, round),
                    time_varying=True, stochastic="doubly", params={"seed": seed})


# built as edges only above DENSE_MAX_CLIENTS clients
SPARSE_TOPOLOGIES = frozenset({"ring", "grid", "star", "exponential", "k_regular", "random_k",
                               "authors_random", "base_k", "one_peer_exponential",
                               "epidemic", "random_matching", "erdos_renyi"})
