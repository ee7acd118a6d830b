"""Graphs and mixing matrices as edge lists: what a topology of many clients is made of.

An :class:`Edges` holds the non-zero entries of an ``[M, M]`` matrix in row-major order (CSR
order): ``rows``, ``cols`` (int64) and ``values`` (float64). An adjacency is an Edges with
values 1 and no diagonal entry; a mixing matrix W carries its diagonal where it is non-zero.
Everything here costs O(M + edges): the mixing rules, the checks of
:func:`gossipfl.topology.mixing.validate_mixing` (same sentences), connectivity, message
counts, and the CSR tensor the Mixer multiplies by.

Topologies of at most :data:`DENSE_MAX_CLIENTS` clients keep their dense matrices (cheaper
there, and every committed number was made with them); larger ones are edges only.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from gossipfl.errors import GossipflError

ROW_SUM_TOL = 1e-6  # tolerance on row/column sums and symmetry of a mixing matrix


def _check_sums(sums: np.ndarray, what: str, key: str, label: str, tol: float) -> None:
    """Raise for the first row / column whose sum is not 1."""
    bad = np.flatnonzero(np.abs(sums - 1.0) > tol)
    if len(bad):
        raise GossipflError(
            f"{key}: {label} {what} {bad[0]} sums to {sums[bad[0]]:.6g}, not 1."
        )


# Above this many clients a topology is built as edges only (no [M, M] array anywhere). At
# 1024 clients a dense float64 matrix is 8 MiB and its checks take milliseconds; above it the
# O(M²) work and memory of the dense form outgrow the edge form's (docs/guide/topologies.md).
DENSE_MAX_CLIENTS = 1024


def _firsts(sorted_keys: np.ndarray) -> np.ndarray:
    """``[n]`` bool: the first of each run of equal keys in a sorted array."""
    first = np.ones(len(sorted_keys), dtype=bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    return first


def unique_sorted(keys: np.ndarray) -> np.ndarray:
    """The distinct values of ``keys``, ascending (a sort: numpy's hashing unique is slower
    on millions of int64)."""
    keys = np.sort(keys)
    return keys[_firsts(keys)]


@dataclass(frozen=True)
class Edges:
    """The non-zero entries of an ``[M, M]`` matrix, sorted by (row, column)."""

    num_clients: int
    rows: np.ndarray  # int64 [E]
    cols: np.ndarray  # int64 [E]
    values: np.ndarray  # float64 [E]

    # -- making ------------------------------------------------------------------------------
    @classmethod
    def build(cls, m: int, rows, cols, values=None, *, unique: bool = True) -> Edges:
        """Sorted edges from unordered (row, col[, value]) arrays; ``unique`` drops repeated
        pairs (one of their values is kept: use it for 0/1 patterns)."""
        rows = np.asarray(rows, dtype=np.int64).ravel()
        cols = np.asarray(cols, dtype=np.int64).ravel()
        values = (np.ones(len(rows)) if values is None
                  else np.broadcast_to(np.asarray(values, dtype=np.float64), rows.shape).ravel())
        keys = rows * m + cols
        if len(keys) > 1 and not (keys[1:] > keys[:-1]).all():
            order = np.argsort(keys)
            keys, values = keys[order], values[order]
            if unique:
                first = _firsts(keys)
                keys, values = keys[first], values[first]
        return cls(m, keys // m, keys % m, np.ascontiguousarray(values, dtype=np.float64))

    @classmethod
    def from_dense(cls, W: np.ndarray) -> Edges:
        """The non-zero entries of a dense matrix (row-major, as ``np.nonzero``)."""
        W = np.asarray(W)
        i, j = np.nonzero(W)
        return cls(len(W), i.astype(np.int64), j.astype(np.int64),
                   np.asarray(W[i, j], dtype=np.float64))

    @classmethod
    def of(cls, W: np.ndarray | Edges) -> Edges:
        """W as edges: as given (a topology of many clients), or a dense W's non-zero
        entries (:meth:`from_dense`)."""
        return W if isinstance(W, Edges) else cls.from_dense(W)

    def to_dense(self) -> np.ndarray:
        """The ``[M, M]`` float64 array (small M only: tests and plots)."""
        W = np.zeros((self.num_clients, self.num_clients))
        W[self.rows, self.cols] = self.values
        return W

    # -- reading -----------------------------------------------------------------------------
    @property
    def nnz(self) -> int:
        return len(self.values)

    def __len__(self) -> int:
        return self.nnz

    def keys(self) -> np.ndarray:
        """row · M + col, ascending."""
        return self.rows * self.num_clients + self.cols

    def off_diagonal(self) -> Edges:
        keep = self.rows != self.cols
        return Edges(self.num_clients, self.rows[keep], self.cols[keep], self.values[keep])

    def pattern(self) -> Edges:
        """The 0/1 adjacency of the off-diagonal non-zeros (an entry stored as 0 is none)."""
        keep = (self.rows != self.cols) & (self.values != 0)
        return Edges(self.num_clients, self.rows[keep], self.cols[keep],
                     np.ones(int(keep.sum())))

    def transpose(self) -> Edges:
        return Edges.build(self.num_clients, self.cols, self.rows, self.values, unique=False)

    def row_sums(self) -> np.ndarray:
        return np.bincount(self.rows, weights=self.values, minlength=self.num_clients)

    def column_sums(self) -> np.ndarray:
        return np.bincount(self.cols, weights=self.values, minlength=self.num_clients)

    def in_degree(self) -> np.ndarray:
        """``[M]`` off-diagonal non-zeros per row (what client i receives)."""
        return np.bincount(self.rows[(self.rows != self.cols) & (self.values != 0)],
                           minlength=self.num_clients)

    def out_degree(self) -> np.ndarray:
        """``[M]`` off-diagonal non-zeros per column: the messages client j sends per step."""
        return np.bincount(self.cols[(self.rows != self.cols) & (self.values != 0)],
                           minlength=self.num_clients)

    def messages(self) -> int:
        """Directed model transfers of one gossip step: the off-diagonal non-zeros."""
        return int(((self.rows != self.cols) & (self.values != 0)).sum())

    def diagonal(self) -> np.ndarray:
        d = np.zeros(self.num_clients)
        on = self.rows == self.cols
        d[self.rows[on]] = self.values[on]
        return d

    def indptr(self) -> np.ndarray:
        """CSR row pointers ``[M + 1]``."""
        return np.concatenate([[0], np.cumsum(np.bincount(self.rows,
                                                          minlength=self.num_clients))])

    def value_at(self, i: int, j: int) -> float:
        """The entry [i, j] (0 when absent)."""
        key = i * self.num_clients + j
        keys = self.keys()
        at = int(np.searchsorted(keys, key))
        return float(self.values[at]) if at < len(keys) and keys[at] == key else 0.0

    def rows_of(self, index: np.ndarray) -> Edges:
        """The rows ``index`` (in that order) as an ``[len(index), M]`` edge list."""
        ptr = self.indptr()
        index = np.asarray(index, dtype=np.int64)
        counts = ptr[index + 1] - ptr[index]
        start = np.repeat(ptr[index] - np.cumsum(counts) + counts, counts)
        at = start + np.arange(counts.sum())
        return Edges(self.num_clients, np.repeat(np.arange(len(index)), counts),
                     self.cols[at], self.values[at])

    def to_torch(self, dtype: torch.dtype, device, rows: int | None = None) -> torch.Tensor:
        """A sparse CSR tensor ``[rows or M, M]`` of these entries in ``dtype`` on ``device``."""
        n = self.num_clients if rows is None else rows
        ptr = np.concatenate([[0], np.cumsum(np.bincount(self.rows, minlength=n))])
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return torch.sparse_csr_tensor(  # sorted rows and columns by construction
                torch.as_tensor(ptr, dtype=torch.int64), torch.tensor(self.cols),
                torch.tensor(self.values, dtype=dtype), size=(n, self.num_clients),
                check_invariants=False,
            ).to(device)

    def read_only(self) -> Edges:
        """These edges, their arrays made read-only (what a topology hands out); returns
        self."""
        for array in (self.rows, self.cols, self.values):
            array.flags.writeable = False
        return self

    def nbytes(self) -> int:
        return self.rows.nbytes + self.cols.nbytes + self.values.nbytes


# --------------------------------------------------------------------------------------------
# Mixing rules and checks on edges (the dense ones: gossipfl.topology.mixing)
# --------------------------------------------------------------------------------------------
def with_diagonal(off: Edges, diagonal: np.ndarray) -> Edges:
    """``off`` (no diagonal entries) plus the non-zero entries of ``diagonal``, sorted."""
    m = off.num_clients
    ids = np.flatnonzero(diagonal)
    at = np.searchsorted(off.keys(), ids * (m + 1))  # merged in place: no sort
    return Edges(m, np.insert(off.rows, at, ids), np.insert(off.cols, at, ids),
                 np.insert(off.values, at, diagonal[ids]))


def first_asymmetry(A: Edges, tol: float = 0.0) -> tuple[int, int]:
    """The first (row-major) [i, j] with |A_ij − A_ji| > tol, or (−1, −1)."""
    T = A.transpose()
    if np.array_equal(A.keys(), T.keys()):  # the same pattern: compare the values in place
        bad = np.flatnonzero(np.abs(A.values - T.values) > tol)
        if not len(bad):
            return -1, -1
        return int(A.rows[bad[0]]), int(A.cols[bad[0]])
    keys = unique_sorted(np.concatenate([A.keys(), T.keys()]))
    a = _values_at(A, keys)
    b = _values_at(T, keys)
    bad = np.flatnonzero(np.abs(a - b) > tol)
    if not len(bad):
        return -1, -1
    key = int(keys[bad[0]])
    return key // A.num_clients, key % A.num_clients


def _values_at(E: Edges, keys: np.ndarray) -> np.ndarray:
    own = E.keys()
    at = np.minimum(np.searchsorted(own, keys), max(len(own) - 1, 0))
    found = (own[at] == keys) if len(own) else np.zeros(len(keys), dtype=bool)
    return np.where(found, E.values[at] if len(own) else 0.0, 0.0)


def require_undirected(A: Edges, rule: str) -> None:
    """Raise when a symmetric rule is asked for on a directed adjacency."""
    i, j = first_asymmetry(A)
    if i >= 0:
        raise GossipflError(
            f"topology.mixing: {rule} needs an undirected graph, but the adjacency is not "
            f"symmetric (A[{i},{j}]={A.value_at(i, j):g}, A[{j},{i}]={A.value_at(j, i):g}); "
            "use topology.mixing: uniform for a directed graph."
        )


def validate_edges(W: Edges, *, symmetric: bool, doubly: bool, key: str,
                   label: str = "mixing matrix", tol: float | None = None,
                   rows: bool = True) -> None:
    """:func:`gossipfl.topology.mixing.validate_mixing` on an edge list: finite,
    non-negative, row (or column) sums of 1, symmetric / doubly as asked; same sentences."""
    tol = ROW_SUM_TOL if tol is None else tol
    bad = np.flatnonzero(~np.isfinite(W.values))
    if len(bad):
        i, j = W.rows[bad[0]], W.cols[bad[0]]
        raise GossipflError(f"{key}: {label} has a non-finite entry W[{i},{j}]="
                            f"{W.values[bad[0]]}.")
    bad = np.flatnonzero(W.values < -tol)
    if len(bad):
        i, j = W.rows[bad[0]], W.cols[bad[0]]
        raise GossipflError(f"{key}: {label} has a negative entry W[{i},{j}]="
                            f"{W.values[bad[0]]:.6g}.")
    if rows:
        _check_sums(W.row_sums(), "row", key, label, tol)
    if symmetric:
        i, j = first_asymmetry(W, tol)
        if i >= 0:
            raise GossipflError(
                f"{key}: {label} is not symmetric (W[{i},{j}]={W.value_at(i, j):.6g} but "
                f"W[{j},{i}]={W.value_at(j, i):.6g})."
            )
    if doubly or not rows:
        _check_sums(W.column_sums(), "column", key, label, tol)


# --------------------------------------------------------------------------------------------
# Connectivity
# --------------------------------------------------------------------------------------------
def components(m: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``[M]`` label of each node's connected component (undirected), by hooking roots onto
    smaller roots and pointer jumping: O((M + edges) log M)."""
    parent = np.arange(m)
    while True:
        pu, pv = parent[rows], parent[cols]
        moved = pu != pv
        if not moved.any():
            return parent
        lo, hi = np.minimum(pu[moved], pv[moved]), np.maximum(pu[moved], pv[moved])
        np.minimum.at(parent, hi, lo)
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped


def _reach(m: int, ptr: np.ndarray, targets: np.ndarray, start: int,
           levels: int = 64) -> np.ndarray | None:
    """``[M]`` bool: the nodes reachable from ``start`` along the CSR (ptr, targets), by a
    breadth-first search of at most ``levels`` levels (None: deeper than that)."""
    seen = np.zeros(m, dtype=bool)
    seen[start] = True
    frontier = np.array([start])
    for _ in range(levels):
        if not len(frontier):
            return seen
        counts = ptr[frontier + 1] - ptr[frontier]
        first = np.repeat(ptr[frontier] - np.cumsum(counts) + counts, counts)
        nxt = targets[first + np.arange(counts.sum())]
        nxt = unique_sorted(nxt[~seen[nxt]])
        seen[nxt] = True
        frontier = nxt
    return None if len(frontier) else seen


def strongly_connected(m: int, rows: np.ndarray, cols: np.ndarray) -> bool:
    """Whether every node reaches every other along the edges (i, j) (both directions are
    walked from node 0 breadth-first; a graph of large diameter, such as a directed ring,
    is left to :func:`count_strong_components`)."""
    forward = Edges.build(m, rows, cols)
    backward = Edges.build(m, cols, rows)
    ahead = _reach(m, forward.indptr(), forward.cols, 0)
    if ahead is not None and not ahead.all():
        return False
    behind = _reach(m, backward.indptr(), backward.cols, 0)
    if behind is not None and not behind.all():
        return False
    if ahead is None or behind is None:
        return count_strong_components(m, rows, cols) == 1
    return True


def count_strong_components(m: int, rows: np.ndarray, cols: np.ndarray) -> int:
    """The number of strongly connected components (iterative Tarjan; O(M + edges) in
    Python, used only to word a refusal)."""
    E = Edges.build(m, rows, cols)
    ptr, targets = E.indptr().tolist(), E.cols.tolist()
    index = [-1] * m
    low = [0] * m
    on_stack = [False] * m
    stack: list[int] = []
    count = counter = 0
    for root in range(m):
        if index[root] >= 0:
            continue
        work = [(root, ptr[root])]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, at = work[-1]
            if at < ptr[v + 1]:
                work[-1] = (v, at + 1)
                w = targets[at]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, ptr[w]))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                count += 1
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    if w == v:
                        break
    return count


def refuse_dense(m: int, what: str) -> GossipflError:
    """The one sentence of a feature that needs the dense W of a topology built as edges."""
    gib = 8 * m * m / 2**30
    return GossipflError(
        f"topology.name: {what} needs the dense {m}×{m} mixing matrix ({gib:.1f} GiB in "
        f"float64), which gossipfl forms only up to {DENSE_MAX_CLIENTS} clients; use at most "
        f"{DENSE_MAX_CLIENTS} clients (data.clients) for it."
    )
