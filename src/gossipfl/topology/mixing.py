"""Mixing rules, validation and spectral quantities of gossip matrices.

Convention: one gossip step is x_i ← Σ_j W_ij x_j, i.e. ``X ← W @ X`` for the ``[M, P]`` stack.
Every rule turns a 0/1 adjacency ``A`` (``A_ij = 1``: client i receives client j's model, zero
diagonal) into a row-stochastic W with ``W_ij > 0`` exactly on the edges and the diagonal:

- ``metropolis_hastings`` (default): W_ij = 1 / (1 + max(d_i, d_j)) on edges,
  W_ii = 1 − Σ_j W_ij over j ≠ i. Symmetric and doubly stochastic on any undirected graph.
- ``uniform``: W_ij = 1 / (d_i + 1) for j ∈ N_i ∪ {i} (the papers' code). Row-stochastic; it
  is symmetric only on regular graphs. Works on directed graphs (d_i = in-neighbours of i).
- ``max_degree``: W_ij = 1 / (d_max + 1) on edges, W_ii = 1 − d_i / (d_max + 1). Symmetric and
  doubly stochastic on any undirected graph.
- ``custom``: a user-given matrix, used as is: row-stochastic, or column-stochastic only (a
  push-sum matrix: column j is how client j splits what it sends, for ``sgp``).

A rule is one function of the edges, registered by name (:func:`register_mixing_rule`, for
gossipfl's rules and a plugin's alike): ``weights(rows, cols, degree)`` gives w_ij of every
edge (client ``rows[e]`` receives from ``cols[e]``; ``degree[i]`` = d_i, i's in-neighbours),
and W_ii = 1 − Σ_j W_ij over j ≠ i. The same function makes the dense W (:func:`mixing_matrix`) and
the edge list of a topology of many clients (:func:`gossipfl.topology.sparse.mixing_edges`).
A rule declared ``symmetric`` needs an undirected graph and promises a symmetric, doubly
stochastic W (checked on every W it makes).

Spectral quantities (all in float64) use J = 11ᵀ/M, the projection onto consensus:

- ``spectral_gap(W) = 1 − ρ(W − J)``. For a symmetric doubly stochastic W this is
  1 − max(|λ_2|, |λ_M|) (Sun et al.'s λ). For any row-stochastic W, W1 = 1 makes the spectrum
  of W − J the spectrum of W with one eigenvalue 1 replaced by 0, so the gap is one minus the
  second-largest eigenvalue modulus: the asymptotic per-step contraction factor of the
  distance to consensus (for non-symmetric W the one-step 2-norm contraction may be worse).
- ``disagreement_radius(W, β) = ρ(((1+β)W − βI)(I − J))``: the asymptotic growth factor of
  the disagreement under the extrapolated gossip operator of Ole / Catalyst-style methods.
- ``largest_safe_beta(W)``: the supremum of the β ≥ 0 with radius < 1 (closed form below).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.plugins import Registry
from gossipfl.topology.sparse import (
    ROW_SUM_TOL,
    Edges,
    _check_sums,
    components,
    count_strong_components,
    first_asymmetry,
    require_undirected,
    strongly_connected,
    with_diagonal,
)

#: ``topology.mixing: custom``: the matrix a custom topology gives, used as is (no rule).
CUSTOM = "custom"
_SYM_TOL = 1e-12  # "numerically symmetric" for choosing eigvalsh

#: ``weights(rows, cols, degree) -> w``: the weight of every edge (see the module docstring).
EdgeWeights = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class MixingRule:
    """A registered mixing rule: its name, its edge weights, and whether it is symmetric
    (needs an undirected graph; gives a symmetric, doubly stochastic W)."""

    name: str
    weights: EdgeWeights
    symmetric: bool

    def edge_weights(self, rows: np.ndarray, cols: np.ndarray,
                     degree: np.ndarray) -> np.ndarray:
        """``[E]`` float64 w_ij of the edges; one sentence when the rule's function returns
        something else."""
        w = np.asarray(self.weights(rows, cols, degree), dtype=np.float64)
        if w.shape != rows.shape:
            raise GossipflError(f"topology.mixing: the rule {self.name!r} returned weights of "
                                f"shape {w.shape} for {len(rows)} edges; it must return one "
                                f"weight per edge.")
        return w


#: name -> rule; :func:`register_mixing_rule` adds to it (gossipfl's and plugins').
MIXING_RULE_KINDS: Registry = Registry("mixing rule", "topology.mixing")


def register_mixing_rule(name: str, *, symmetric: bool = False) -> Callable:
    """Decorator: make ``weights(rows, cols, degree) -> w [E]`` available as
    ``topology.mixing: name`` (the module docstring says what the arguments hold).
    ``symmetric``: the rule needs an undirected graph and gives a symmetric W (every W it
    makes is checked to be symmetric and doubly stochastic)."""
    if not isinstance(name, str) or not name or name == CUSTOM:
        raise GossipflError(f"register_mixing_rule: the name must be a non-empty string other "
                            f"than {CUSTOM!r}, got {name!r}.")

    def decorate(weights: EdgeWeights) -> EdgeWeights:
        from gossipfl.plugins import check_signature

        check_signature(weights, ("rows", "cols", "degree"),
                        f"the weights of mixing rule {name!r}", options=False)
        MIXING_RULE_KINDS.add(name, MixingRule(name, weights, bool(symmetric)),
                              made_by=lambda rule: rule.weights)
        return weights
    return decorate


@register_mixing_rule("metropolis_hastings", symmetric=True)
def _metropolis_hastings(rows: np.ndarray, cols: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """w_ij = 1 / (1 + max(d_i, d_j))."""
    return 1.0 / (1.0 + np.maximum(degree[rows], degree[cols]))


@register_mixing_rule("uniform")
def _uniform(rows: np.ndarray, cols: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """w_ij = 1 / (1 + d_i): the receiver's in-neighbours and itself, equally."""
    return 1.0 / (1.0 + degree)[rows]


@register_mixing_rule("max_degree", symmetric=True)
def _max_degree(rows: np.ndarray, cols: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """w_ij = 1 / (1 + d_max)."""
    return np.full(len(rows), 1.0 / (1.0 + degree.max()))


def mixing_rule_names() -> tuple[str, ...]:
    """Every ``topology.mixing`` name: the registered rules (gossipfl's, then plugins'), and
    ``custom``."""
    return (*MIXING_RULE_KINDS, CUSTOM)


def mixing_rule(name: str) -> MixingRule:
    """The registered rule ``name``; one sentence for ``custom`` (a given matrix, not a rule
    on a graph) or an unknown name."""
    if name not in MIXING_RULE_KINDS:
        raise not_a_graph_rule(name)
    return MIXING_RULE_KINDS[name]


def symmetric_rule(name: str) -> bool:
    """Whether ``name`` is a registered symmetric rule (``custom`` is not: its matrix says)."""
    rule = MIXING_RULE_KINDS.get(name)
    return rule is not None and rule.symmetric


def mixing_matrix(adjacency: np.ndarray, rule: str) -> np.ndarray:
    """The float64 mixing matrix W of ``rule`` on a 0/1 adjacency (zero diagonal).

    Symmetric rules need a symmetric adjacency (an undirected graph).
    """
    kind = mixing_rule(rule)
    A = np.asarray(adjacency, dtype=np.float64)
    if kind.symmetric:
        _require_undirected(A, rule)
    degree = A.sum(axis=1)
    rows, cols = np.nonzero(A)
    W = np.zeros_like(A)
    W[rows, cols] = kind.edge_weights(rows, cols, degree)
    np.fill_diagonal(W, 1.0 - W.sum(axis=1))
    return W


def not_a_graph_rule(rule: str) -> GossipflError:
    """Why ``rule`` makes no W from a graph (``custom``: a given matrix; else: unknown), for
    both the dense rules and the edge rules (gossipfl.topology.sparse)."""
    if rule == CUSTOM:
        return GossipflError(
            "topology.mixing: custom needs a given matrix (topology.name: custom with "
            "topology.path or topology.matrix), not a graph."
        )
    return unknown_choice("topology.mixing", rule, mixing_rule_names())


def _require_undirected(A: np.ndarray, rule: str) -> None:
    """Raise when a symmetric rule is asked for on a directed adjacency."""
    i, j = _first_mismatch(A, A.T)
    if i >= 0:
        raise GossipflError(
            f"topology.mixing: {rule} needs an undirected graph, but the adjacency is not "
            f"symmetric (A[{i},{j}]={A[i, j]:g}, A[{j},{i}]={A[j, i]:g}); use "
            "topology.mixing: uniform for a directed graph."
        )


def count_messages(W: np.ndarray) -> int:
    """Directed model transfers of one gossip step: the off-diagonal non-zeros of W."""
    W = np.asarray(W)
    return int(np.count_nonzero(W) - np.count_nonzero(np.diagonal(W)))


def _first_mismatch(a: np.ndarray, b: np.ndarray, tol: float = 0.0) -> tuple[int, int]:
    """Index of the first entry where |a − b| > tol, or (−1, −1)."""
    bad = np.argwhere(np.abs(a - b) > tol)
    return (int(bad[0, 0]), int(bad[0, 1])) if len(bad) else (-1, -1)


def validate_mixing(W: np.ndarray, *, symmetric: bool, doubly: bool, key: str,
                    label: str = "mixing matrix", tol: float = ROW_SUM_TOL,
                    rows: bool = True) -> None:
    """Raise a :class:`GossipflError` unless W is a valid mixing matrix.

    Always: square, finite, non-negative, every row sums to 1 (within ``tol``). ``symmetric``
    adds W = Wᵀ; ``doubly`` adds column sums of 1. ``rows=False`` (a column-stochastic W)
    checks the column sums instead of the row sums. The message names ``key`` and the first
    offending row / entry.
    """
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise GossipflError(f"{key}: {label} must be square [M, M], got shape {W.shape}.")
    if not np.isfinite(W).all():
        i, j = np.argwhere(~np.isfinite(W))[0]
        raise GossipflError(f"{key}: {label} has a non-finite entry W[{i},{j}]={W[i, j]}.")
    if (W < -tol).any():
        i, j = np.argwhere(W < -tol)[0]
        raise GossipflError(f"{key}: {label} has a negative entry W[{i},{j}]={W[i, j]:.6g}.")
    if rows:
        _check_sums(W.sum(axis=1), "row", key, label, tol)
    if symmetric:
        i, j = _first_mismatch(W, W.T, tol)
        if i >= 0:
            raise GossipflError(
                f"{key}: {label} is not symmetric (W[{i},{j}]={W[i, j]:.6g} but "
                f"W[{j},{i}]={W[j, i]:.6g})."
            )
    if doubly or not rows:
        _check_sums(W.sum(axis=0), "column", key, label, tol)


def column_stochastic_only(W: np.ndarray, tol: float = ROW_SUM_TOL) -> bool:
    """Whether W's columns sum to 1 but its rows do not (a push-sum matrix)."""
    W = np.asarray(W, dtype=np.float64)
    return bool(np.allclose(W.sum(axis=0), 1.0, rtol=0, atol=tol)
                and not np.allclose(W.sum(axis=1), 1.0, rtol=0, atol=tol))


def check_connected(topology: Any, window: int = 10) -> None:
    """Raise unless the topology's graph is connected.

    A static graph must be connected (strongly, when directed); a time-varying one must be
    connected over the union of its graphs in rounds 0..window−1 (the B-connectivity that
    consensus over time-varying graphs needs).
    """
    if getattr(topology, "sparse", False):
        return _check_connected_edges(topology, window)
    import networkx as nx

    rounds = range(window if topology.time_varying else 1)
    union = np.zeros((topology.num_clients,) * 2, dtype=bool)  # one round's graph at a time
    for t in rounds:
        union |= topology.adjacency(t) > 0
    directed = not np.array_equal(union, union.T)
    graph = nx.from_numpy_array(union.astype(np.int8),
                                create_using=nx.DiGraph if directed else nx.Graph)
    connected = nx.is_strongly_connected(graph) if directed else nx.is_connected(graph)
    if connected:
        return
    parts = (nx.number_strongly_connected_components(graph) if directed
             else nx.number_connected_components(graph))
    where = f" over the union of rounds 0..{window - 1}" if topology.time_varying else ""
    raise GossipflError(
        f"topology.name: the {topology.name} graph on {topology.num_clients} clients is not "
        f"connected{where} ({parts} components); gossip can never reach consensus."
    )


def _check_connected_edges(topology: Any, window: int) -> None:
    """:func:`check_connected` on the edges of a topology built as edges (O(M + edges))."""
    m = topology.num_clients
    last = window if topology.time_varying else 1
    # The union of rounds 0..window−1 is connected when that of a prefix is: try 1, 2, 4, ...
    # rounds (a random graph is usually connected in its first round).
    prefix = 1
    while True:
        prefix = min(prefix, last)
        union = topology.union_edges(prefix)
        directed = topology.directed or first_asymmetry(union)[0] >= 0
        if directed:
            if strongly_connected(m, union.rows, union.cols):
                return
        else:
            labels = components(m, union.rows, union.cols)
            if (labels == 0).all():
                return
        if prefix == last:
            break
        prefix *= 2
    parts = (count_strong_components(m, union.rows, union.cols) if directed
             else int((labels == np.arange(m)).sum()))
    where = f" over the union of rounds 0..{window - 1}" if topology.time_varying else ""
    raise GossipflError(
        f"topology.name: the {topology.name} graph on {topology.num_clients} clients is not "
        f"connected{where} ({parts} components); gossip can never reach consensus."
    )


# --------------------------------------------------------------------------------------------
# Spectra
# --------------------------------------------------------------------------------------------
def _eigenvalues(A: np.ndarray) -> np.ndarray:
    """Eigenvalues of A (real via eigvalsh when A is numerically symmetric)."""
    if np.allclose(A, A.T, rtol=0.0, atol=_SYM_TOL):
        return np.linalg.eigvalsh((A + A.T) / 2)
    return np.linalg.eigvals(A)


def _spectral_radius(A: np.ndarray) -> float:
    return float(np.max(np.abs(_eigenvalues(A))))


def _consensus_projector(m: int) -> np.ndarray:
    """J = 11ᵀ/M."""
    return np.full((m, m), 1.0 / m)


def spectral_gap(W: np.ndarray) -> float:
    """1 − ρ(W − 11ᵀ/M); equals 1 − max(|λ_2|, |λ_M|) for symmetric doubly stochastic W."""
    W = np.asarray(W, dtype=np.float64)
    return 1.0 - _spectral_radius(W - _consensus_projector(len(W)))


def disagreement_radius(W: np.ndarray, beta: float) -> float:
    """ρ(((1+β)W − βI)(I − 11ᵀ/M)): the extrapolated gossip's growth factor on disagreement.

    A value ≥ 1 means x ← (1+β)Wx − βx does not contract the distance to consensus, so the
    extrapolation of Ole / Catalyst-type methods diverges with this W and β.
    """
    W = np.asarray(W, dtype=np.float64)
    m = len(W)
    eye = np.eye(m)
    operator = ((1.0 + beta) * W - beta * eye) @ (eye - _consensus_projector(m))
    return _spectral_radius(operator)


def _disagreement_eigenvalues(W: np.ndarray) -> np.ndarray:
    """Eigenvalues of W with the one closest to 1 (the consensus direction) removed."""
    ev = _eigenvalues(np.asarray(W, dtype=np.float64))
    return np.delete(ev, int(np.argmin(np.abs(ev - 1.0))))


def largest_safe_beta(W: np.ndarray) -> float:
    """Supremum of the β ≥ 0 with ``disagreement_radius(W, β) < 1`` (−inf when none is).

    An eigenvalue μ of W on the disagreement subspace becomes (1+β)μ − β = μ + β(μ − 1), and
    |μ + β(μ−1)|² < 1 ⇔ aβ² + bβ + c < 0 with a = |μ−1|², b = 2 Re(μ (μ−1)*), c = |μ|² − 1:
    an open interval (r₋, r₊). For real μ it is (−1, (1+μ)/(1−μ)), so for symmetric W the
    answer is (1 + μ_min)/(1 − μ_min): 0.5 for the 1/3-weighted ring (μ_min = −1/3).
    The safe set is the intersection of these intervals; its upper end is returned (0 when
    some |μ| = 1, −inf when W has no gap, e.g. a disconnected graph).
    """
    mu = _disagreement_eigenvalues(W).astype(np.complex128)
    if len(mu) == 0:
        return math.inf
    a = np.abs(mu - 1.0) ** 2
    if a.min() < 1e-24:  # eigenvalue 1 on the disagreement subspace: radius ≥ 1 for every β
        return -math.inf
    b = 2.0 * np.real(mu * np.conj(mu - 1.0))
    c = np.abs(mu) ** 2 - 1.0
    root = np.sqrt(np.maximum(b * b - 4.0 * a * c, 0.0))
    # Roots without cancellation: r₊ r₋ = c / a.
    upper = np.where(b <= 0, (-b + root) / (2 * a), 2 * c / np.minimum(-b - root, -1e-300))
    lower = np.where(b <= 0, 2 * c / np.maximum(-b + root, 1e-300), (-b - root) / (2 * a))
    hi, lo = float(upper.min()), float(lower.max())
    return hi if lo < hi else -math.inf


def mixing_edges(adjacency: Edges, rule: str) -> Edges:
    """W of ``rule`` on an adjacency edge list (off-diagonal, values 1): the same
    off-diagonal weights as :func:`mixing_matrix` bit for bit, and
    W_ii = 1 − Σ_j W_ij (summed in column order, so it may differ from the dense rule's
    pairwise sum in the last bit)."""
    kind = mixing_rule(rule)
    A = adjacency.pattern()
    if kind.symmetric:
        require_undirected(A, rule)
    m = A.num_clients
    degree = np.bincount(A.rows, minlength=m).astype(np.float64)
    off = Edges(m, A.rows, A.cols, kind.edge_weights(A.rows, A.cols, degree))
    return with_diagonal(off, 1.0 - off.row_sums())
