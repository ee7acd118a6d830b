"""The built-in topologies' builders (the graphs of :mod:`gossipfl.topology.graphs`'s module
docstring), each registered with the parameters it reads (:func:`register_topology`). Imported
by the package, so that every built-in name is registered before a config is checked."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from gossipfl.common.rng import derive_seed, numpy_generator
from gossipfl.engine.memory import require_memory
from gossipfl.errors import GossipflError
from gossipfl.topology import dynamic
from gossipfl.topology.dynamic import random_k_neighbours
from gossipfl.topology.mixing import (
    ROW_SUM_TOL,
    column_stochastic_only,
    symmetric_rule,
    validate_mixing,
)
from gossipfl.topology.sparse import (
    Edges,
    components,
    first_asymmetry,
    validate_edges,
)

if TYPE_CHECKING:  # networkx is imported where a graph is built (a faster start-up)
    import networkx as nx

from gossipfl.topology.graphs import (
    MAX_DRAWS,
    Topology,
    as_edges,
    check_k,
    is_int,
    register_topology,
    shared_params,
)
from gossipfl.topology.loaders import custom_source, is_edge_file, load_edges


def _static(name: str, m: int, mixing: str, graph: nx.Graph,
            params: dict[str, Any] | None = None) -> Topology:
    """A topology with one undirected graph for all rounds (nodes 0..M−1)."""
    import networkx as nx

    A = nx.to_numpy_array(graph, nodelist=range(m), dtype=np.float64, weight=None)
    np.fill_diagonal(A, 0.0)
    return Topology(name, m, mixing, lambda _round: A, params=params)


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

    if as_edges(m):
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
    if as_edges(m):  # node r·cols + c, as networkx's sorted labels: right and down neighbours
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
    if as_edges(m):
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

    if as_edges(m):  # the hub 0 and every other client
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


@register_topology("erdos_renyi", params=shared_params("p"))
def _erdos_renyi(m: int, mixing: str, seed: int, params: dict) -> Topology:
    import networkx as nx

    p = params.get("p")
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p <= 1:
        raise GossipflError(f"topology.p: erdos_renyi needs an edge probability in (0, 1], "
                            f"got {p!r}.")
    if as_edges(m) and p < 1 / 3:  # edges (48 B a pair, both ways) fewer bytes than 16 M²
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


@register_topology("k_regular", params=shared_params("k"))
def _k_regular(m: int, mixing: str, seed: int, params: dict) -> Topology:
    import networkx as nx

    k = check_k(params.get("k"), m, "k_regular")
    if k * m % 2:
        raise GossipflError(f"topology.k: k_regular needs k × clients even, got k={k} with "
                            f"{m} clients.")
    failure = f"k_regular with k={k} on {m} clients"
    if as_edges(m):
        u, v = _connected_draw(
            lambda a: dynamic.random_regular_edges(
                m, k, numpy_generator(seed, "topology", "kreg", a)),
            "topology.k", failure, _pairs_connected(m))
        return _static_edges("k_regular", m, mixing, u, v, {"k": k, "seed": seed})
    graph = _connected_draw(
        lambda a: nx.random_regular_graph(k, m, seed=derive_seed(seed, "topology", "kreg", a)),
        "topology.k", failure)
    return _static("k_regular", m, mixing, graph, {"k": k, "seed": seed})


@register_topology("random_k", params=shared_params("k"))
def _random_k(m: int, mixing: str, seed: int, params: dict) -> Topology:
    k = check_k(params.get("k"), m, "random_k")
    symmetrize = symmetric_rule(mixing)
    if as_edges(m):
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


@register_topology("authors_random", params=shared_params("k"))
def _authors_random(m: int, mixing: str, seed: int, params: dict) -> Topology:
    k = params.get("k")
    if not is_int(k) or not 2 <= k <= m:
        raise GossipflError(f"topology.k: must be in 2..{m} for authors_random on {m} clients "
                            f"(k − 1 draws per client), got {k!r}.")
    if as_edges(m):
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


@register_topology("custom", params=shared_params("path", "matrix"))
def _custom(m: int, mixing: str, seed: int, params: dict) -> Topology:
    if is_edge_file(params.get("path")):
        if as_edges(m):
            return _custom_edges(m, mixing, params)
        rows, cols, weights = load_edges(params["path"], m)  # small: the dense matrix
        matrix = np.zeros((m, m))
        matrix[rows, cols] = 1.0 if weights is None else weights
        params = {**params, "path": None, "matrix": matrix}
    matrix, key = custom_source(m, params)
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
    if as_edges(m):
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


@register_topology("base_k", params=shared_params("k"), weights="the paper's Base-(k+1) weights")
def _base_k(m: int, mixing: str, seed: int, params: dict) -> Topology:
    k = check_k(params.get("k"), m, "base_k")
    sequence = dynamic.base_k_sequence(m, k)
    period = len(sequence)
    if as_edges(m):  # O(M k) entries per round, as edges
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


@register_topology("epidemic", params=shared_params("s"),
                   weights="the paper's: uniform over itself and the models it receives")
def _epidemic(m: int, mixing: str, seed: int, params: dict) -> Topology:
    s = params.get("s")
    if not is_int(s) or not 1 <= s <= m - 1:
        raise GossipflError(f"topology.s: must be in 1..{m - 1} for epidemic on {m} clients "
                            f"(the peers each client sends to per round), got {s!r}.")
    if as_edges(m):
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
    if as_edges(m):
        return Topology("random_matching", m, mixing,
                        lambda round: dynamic.random_matching_edges(m, seed, round),
                        time_varying=True, stochastic="doubly", params={"seed": seed},
                        sparse=True)
    return Topology("random_matching", m, mixing,
                    lambda round: dynamic.random_matching_adjacency(m, seed, round),
                    time_varying=True, stochastic="doubly", params={"seed": seed})


# built as edges only above DENSE_MAX_CLIENTS clients
