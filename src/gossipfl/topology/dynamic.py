"""Time-varying graphs of the decentralized-learning literature, one function each: the
round's float64 ``[M, M]`` mixing matrix (or adjacency) as its paper defines it.

Convention (gossipfl.topology.mixing): one gossip step is x_i ← Σ_j W_ij x_j, so W_ij ≠ 0
(i ≠ j) means client j sends its model to client i in that round.

- :func:`one_peer_exponential` (Ying et al., NeurIPS 2021): doubly stochastic, one message per
  node per round, period ⌈log₂ M⌉.
- :func:`base_k_sequence` (Takezawa et al., NeurIPS 2023): the Base-(k+1) graph, a finite
  sequence of symmetric doubly stochastic matrices with at most k peers per node whose product
  is exactly 11ᵀ/M, for every M.
- :func:`epidemic_adjacency` (de Vos et al., NeurIPS 2023): every node pushes to s random
  others; uniform weights over what a node received and its own model: row-stochastic only.
- :func:`random_matching_adjacency`: a uniformly random perfect (M even) or maximal (M odd)
  matching per round; every mixing rule gives the pairs (1/2, 1/2).

Random draws come from the stream (seed, "topology", round), as ``random_k``'s.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from gossipfl.common.rng import numpy_generator

if TYPE_CHECKING:  # annotations only
    from gossipfl.topology.sparse import Edges


# --------------------------------------------------------------------------------------------
# One-peer exponential graph
# --------------------------------------------------------------------------------------------
def one_peer_period(m: int) -> int:
    """τ = ⌈log₂ M⌉ (at least 1): the period of the one-peer exponential graph."""
    return max(1, math.ceil(math.log2(m)))


def one_peer_exponential(m: int, round: int) -> np.ndarray:
    """W_t of the one-peer exponential graph (Ying, Yuan, Chen, Hu, Pan & Yin, "Exponential
    Graph is Provably Efficient for Decentralized Deep Training", NeurIPS 2021, eq. (8)):

        w_ij^(t) = 1/2  if j = i + 2^(t mod τ) (mod M),   w_ii^(t) = 1/2,   0 otherwise,

    τ = ⌈log₂ M⌉. Node i receives from i + 2^(t mod τ) and sends to i − 2^(t mod τ): one
    message per node per round. W_t = (I + S)/2 with S a cyclic shift, so it is doubly
    stochastic (symmetric only when 2^(t mod τ) = M/2). When M is a power of 2 the product
    W_{τ−1} ⋯ W_1 W_0 is exactly 11ᵀ/M (its Theorem 1): exact averaging after τ rounds.
    """
    hop = 2 ** (int(round) % one_peer_period(m))
    W = np.eye(m) / 2
    W[np.arange(m), (np.arange(m) + hop) % m] += 0.5
    return W


# --------------------------------------------------------------------------------------------
# Base-(k+1) graph
# --------------------------------------------------------------------------------------------
def _small_factors(n: int, k: int) -> list[int] | None:
    """n as a product of factors in 2..k+1, largest first (greedy), or None when a prime
    factor of n exceeds k+1 ([] for n = 1)."""
    factors = []
    for base in range(k + 1, 1, -1):
        while n % base == 0:
            factors.append(base)
            n //= base
    return factors if n == 1 else None


class _Rounds:
    """The entries of a sequence of [M, M] matrices, kept sparse (O(M k) per round) and made
    dense one round at a time; a row nobody set in a round is the identity's (w_ii = 1)."""

    def __init__(self, m: int):
        self.m = m
        self.entries: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = []

    def set(self, r: int, rows, cols, values) -> None:
        while len(self.entries) <= r:
            self.entries.append([])
        rows, cols = np.broadcast_arrays(np.asarray(rows), np.asarray(cols))
        self.entries[r].append((rows.ravel(), cols.ravel(),
                                np.broadcast_to(values, rows.shape).ravel()))

    def clique(self, r: int, nodes: np.ndarray) -> None:
        """The nodes average uniformly in round r (weights 1/|nodes|)."""
        self.set(r, nodes[:, None], nodes[None, :], 1.0 / len(nodes))

    def __len__(self) -> int:
        return len(self.entries)

    def edges(self, r: int) -> Edges:
        """Round r's matrix as edges, as :meth:`dense` makes it (a later entry of a pair
        overrides an earlier one; an idle row is the identity's)."""
        from gossipfl.topology.sparse import Edges

        parts = self.entries[r]
        rows = np.concatenate([p[0] for p in parts]).astype(np.int64)
        cols = np.concatenate([p[1] for p in parts]).astype(np.int64)
        values = np.concatenate([p[2] for p in parts]).astype(np.float64)
        keys = rows * self.m + cols
        order = np.argsort(keys, kind="stable")
        keys, values = keys[order], values[order]
        last = np.ones(len(keys), dtype=bool)
        last[:-1] = keys[1:] != keys[:-1]
        keys, values = keys[last], values[last]
        keep = values != 0
        keys, values = keys[keep], values[keep]
        idle = np.setdiff1d(np.arange(self.m), keys // self.m)
        keys = np.concatenate([keys, idle * (self.m + 1)])
        values = np.concatenate([values, np.ones(len(idle))])
        return Edges.build(self.m, keys // self.m, keys % self.m, values)

    def dense(self, r: int) -> np.ndarray:
        W = np.zeros((self.m, self.m))
        for rows, cols, values in self.entries[r]:
            W[rows, cols] = values
        idle = np.flatnonzero(W.sum(axis=1) == 0)
        W[idle, idle] = 1.0
        return W


def _hyper_hypercube(rounds: _Rounds, start: int, nodes: np.ndarray, k: int) -> int:
    """The k-peer hyper-hypercube on ``nodes`` from round ``start``: with |nodes| = n_1 ⋯ n_L
    (each n_l ≤ k+1) and node positions in mixed radix (n_1, ..., n_L), round l averages the
    nodes that differ only in digit l (cliques of n_l, weights 1/n_l). After the L rounds
    every node holds the group's average. Returns L."""
    factors = _small_factors(len(nodes), k)
    assert factors is not None, "the hyper-hypercube needs (k+1)-smooth sizes"
    stride = 1
    for layer, size in enumerate(factors):
        positions = np.arange(len(nodes))
        digit = (positions // stride) % size
        for base in positions[digit == 0]:
            rounds.clique(start + layer, nodes[base + stride * np.arange(size)])
        stride *= size
    return len(factors)


def _simple_base(rounds: _Rounds, start: int, nodes: np.ndarray, k: int) -> int:
    """The simple Base-(k+1) graph on ``nodes`` from round ``start``; returns its length.

    n = |nodes| = Σ_{l=1}^{L} a_l (k+1)^{p_l} in base k+1 (p_1 > ... > p_L, 1 ≤ a_l ≤ k).
    The nodes are split into consecutive groups V_l of n_l = a_l (k+1)^{p_l} nodes, each cut
    into a_l subsets V_{l,c} of (k+1)^{p_l} nodes. S_l = n_l + ... + n_L.

    1. Every V_l reaches its own average by the k-peer hyper-hypercube (n_l is
       (k+1)-smooth); a shorter one idles once done.
    2. Step l = 1..L−1 (one round each): every node i of V_{l+1} ∪ ... ∪ V_L links to one
       fresh node j_c of every subset V_{l,c} (a_l ≤ k peers; j_c has one peer) with
       w_{i j_c} = w_{j_c i} = (k+1)^{p_l} / S_l, w_ii = 1 − n_l / S_l, w_{j_c j_c} =
       1 − (k+1)^{p_l} / S_l. Since S_{l+1} < (k+1)^{p_l}, the subsets have enough nodes.
       After step l the nodes past V_l hold (Σ_{l'≤l} n_{l'} v_{l'} + S_{l+1} v_own) / n, so
       V_L holds the global average after step L−1, and every subset V_{l,c} (paired once
       with each later node) holds (k+1)^{p_l} times the global average in total.
    3. From the round after its step, each subset V_{l,c} runs the hyper-hypercube on its
       (k+1)^{p_l} nodes, which spreads that total evenly: every node holds the average.

    (Takezawa, Sato, Bao, Niwa & Yamada, NeurIPS 2023, their simple Base-(k+1) graph; the
    optional averaging among V_l's unpaired nodes in step l changes no value and is left out,
    and a group done early idles instead of repeating its rounds.)
    """
    n, base = len(nodes), k + 1
    if _small_factors(n, k) is not None:
        return _hyper_hypercube(rounds, start, nodes, k)
    sizes, powers, rest = [], [], n
    for power in range(int(math.log(n, base)) + 1, -1, -1):
        a = rest // base ** power
        if a:
            sizes.append(a * base ** power)
            powers.append(power)
            rest -= a * base ** power
    groups = np.split(nodes, np.cumsum(sizes)[:-1])
    length1 = max(_hyper_hypercube(rounds, start, g, k) for g in groups)  # phase 1
    end = start + length1
    for step, group in enumerate(groups[:-1]):
        r = start + length1 + step
        subset = base ** powers[step]
        later = np.concatenate(groups[step + 1:])
        total = sizes[step] + len(later)  # S_l
        # later[o] pairs with the o-th node of every subset: group[c·subset + o], c < a_l
        j = group.reshape(-1, subset)[:, :len(later)].T  # [|later|, a_l]
        i = later[:, None]
        rounds.set(r, i, j, subset / total)
        rounds.set(r, j, i, subset / total)
        rounds.set(r, j, j, 1.0 - subset / total)
        rounds.set(r, later, later, 1.0 - sizes[step] / total)
        for c in range(sizes[step] // subset):  # phase 3 for V_l, from the next round
            length = _hyper_hypercube(rounds, r + 1, group[c * subset:(c + 1) * subset], k)
            end = max(end, r + 1 + length)
    return end - start


def base_k_sequence(m: int, k: int) -> _Rounds:
    """The Base-(k+1) graph on M nodes (Takezawa, Sato, Bao, Niwa & Yamada, "Beyond
    Exponential Graph: Communication-Efficient Topologies for Decentralized Learning via
    Finite-time Convergence", NeurIPS 2023): symmetric doubly stochastic W_1, ..., W_T with
    at most k peers per node per round and W_T ⋯ W_1 = 11ᵀ/M exactly, for every M and k
    (``len(seq)`` is T, ``seq.dense(r)`` is W_{r+1}).

    - the k-peer hyper-hypercube graph: when every prime factor of M is ≤ k+1,
      M = n_1 ⋯ n_L with n_l ≤ k+1 and round l averages cliques of n_l nodes
      (:func:`_hyper_hypercube`); T = L.
    - the simple Base-(k+1) graph (:func:`_simple_base`) for any M.
    - the Base-(k+1) graph: with M = n_s · n_r, n_s the (k+1)-smooth part of M
      (the largest divisor whose prime factors are ≤ k+1), the M nodes are cut into n_s
      consecutive blocks of n_r; every block runs the simple Base-(k+1) graph at once, then
      the n_r sets {the c-th node of every block} run the hyper-hypercube on n_s nodes. The
      shorter of this and the simple graph on all M nodes is used (the composite one on a
      tie, as the authors' code).
    """
    nodes = np.arange(m)
    simple = _Rounds(m)
    length = _simple_base(simple, 0, nodes, k)
    smooth = m
    while _small_factors(smooth, k) is None:
        smooth //= next(p for p in range(2, smooth + 1) if smooth % p == 0
                        and _small_factors(p, k) is None)
    rest = m // smooth
    if 1 < smooth < m:
        composite = _Rounds(m)
        blocks = nodes.reshape(smooth, rest)
        inner = max(_simple_base(composite, 0, block, k) for block in blocks)
        outer = max(_hyper_hypercube(composite, inner, blocks[:, c], k) for c in range(rest))
        if inner + outer <= length:
            return composite
    return simple


# --------------------------------------------------------------------------------------------
# Random graphs of a round
# --------------------------------------------------------------------------------------------
def random_k_neighbours(m: int, k: int, seed: int, round: int) -> np.ndarray:
    """``[M, k]`` int: row i holds k distinct clients ≠ i, uniform, from (seed, "topology", t).

    Vectorized: the k smallest of M i.i.d. uniform keys per row (own key set to +∞) are a
    uniform k-subset of the others.
    """
    keys = numpy_generator(seed, "topology", round).random((m, m))
    np.fill_diagonal(keys, np.inf)
    return np.argpartition(keys, k - 1, axis=1)[:, :k]


def epidemic_adjacency(m: int, s: int, seed: int, round: int) -> np.ndarray:
    """``[M, M]`` 0/1 of Epidemic Learning's round (de Vos, Farhadkhani, Guerraoui,
    Kermarrec, Pires & Sharma, "Epidemic Learning: Boosting Decentralized Learning with
    Randomized Communication", NeurIPS 2023, EL-Local, Alg. 1): every node j sends its model
    to s other nodes drawn uniformly without replacement; ``A_ij = 1`` when j sent to i. A
    node averages what it received and its own model with equal weights (the ``uniform``
    rule: W_ij = 1/(|R_i| + 1) on R_i ∪ {i}), a row-stochastic W whose columns do not sum to
    1. The in-degrees |R_i| vary (EL-Oracle's s-regular draw is not this)."""
    targets = random_k_neighbours(m, s, seed, round)  # row j: whom j sends to
    A = np.zeros((m, m))
    A[targets, np.arange(m)[:, None]] = 1.0
    return A


def random_matching_adjacency(m: int, seed: int, round: int) -> np.ndarray:
    """``[M, M]`` 0/1 of a uniformly random matching: a random permutation of the nodes,
    paired consecutively (one node left out when M is odd). Every pair averages (1/2, 1/2)
    under each mixing rule (every degree is 1), an unmatched node keeps its model."""
    order = numpy_generator(seed, "topology", "matching", round).permutation(m)
    pairs = order[: m - m % 2].reshape(-1, 2)
    A = np.zeros((m, m))
    A[pairs[:, 0], pairs[:, 1]] = A[pairs[:, 1], pairs[:, 0]] = 1.0
    return A


# --------------------------------------------------------------------------------------------
# The same graphs as edges (gossipfl.topology.sparse), for many clients: O(M + edges)
# --------------------------------------------------------------------------------------------
def one_peer_edges(m: int, round: int):
    """:func:`one_peer_exponential`'s W_t as edges."""
    from gossipfl.topology.sparse import Edges

    hop = 2 ** (int(round) % one_peer_period(m))
    i = np.arange(m)
    return Edges.build(m, np.concatenate([i, i]), np.concatenate([i, (i + hop) % m]), 0.5,
                       unique=False)


def distinct_others(m: int, k: int, seed: int, round: int) -> np.ndarray:
    """``[M, k]`` int: row i holds k distinct clients ≠ i, uniform, from (seed, "topology",
    t), in O(M k): k uniform draws among the M − 1 others per row, rows with a repeat drawn
    again (the edge-list counterpart of ``random_k_neighbours``; another stream of draws)."""
    rng = numpy_generator(seed, "topology", round)
    out = np.empty((m, k), dtype=np.int64)
    todo = np.arange(m)
    while len(todo):
        draw = rng.integers(0, m - 1, size=(len(todo), k))
        draw += draw >= todo[:, None]  # skip the row's own id
        ordered = np.sort(draw, axis=1)
        repeat = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        out[todo[~repeat]] = draw[~repeat]
        todo = todo[repeat]
    return out


def epidemic_edges(m: int, s: int, seed: int, round: int):
    """:func:`epidemic_adjacency` as edges (A_ij = 1 when j sent to i)."""
    from gossipfl.topology.sparse import Edges

    targets = distinct_others(m, s, seed, round)  # row j: whom j sends to
    return Edges.build(m, targets.ravel(), np.repeat(np.arange(m), s))


def random_matching_edges(m: int, seed: int, round: int):
    """:func:`random_matching_adjacency` as edges (the same matching)."""
    from gossipfl.topology.sparse import Edges

    order = numpy_generator(seed, "topology", "matching", round).permutation(m)
    pairs = order[: m - m % 2].reshape(-1, 2)
    return Edges.build(m, np.concatenate([pairs[:, 0], pairs[:, 1]]),
                       np.concatenate([pairs[:, 1], pairs[:, 0]]))


def random_regular_edges(m: int, k: int, rng: np.random.Generator,
                         max_sweeps: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """A random simple k-regular graph on M nodes as undirected edges (u < v), in O(M k):
    a random pairing of the M k half-edges, whose self-loops and repeated edges are removed
    by degree-preserving switches with random other edges ({a, b}, {c, d} → {a, c}, {b, d}).
    Near-uniform (the switch chain's), not networkx's generator."""
    stubs = np.repeat(np.arange(m), k)
    rng.shuffle(stubs)
    u, v = stubs[0::2].copy(), stubs[1::2].copy()
    for _ in range(max_sweeps):
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        keys = lo * m + hi
        order = np.argsort(keys, kind="stable")
        bad = np.zeros(len(keys), dtype=bool)
        bad[order[1:]] = keys[order[1:]] == keys[order[:-1]]  # a repeat of an earlier edge
        bad |= lo == hi
        bad_ids = np.flatnonzero(bad)
        if not len(bad_ids):
            return lo, hi
        partners = rng.integers(0, len(u), size=len(bad_ids))
        ok = ~bad[partners]
        bad_ids, partners = bad_ids[ok], partners[ok]
        if not len(partners):  # every partner drawn was bad itself: draw again
            continue
        order = np.argsort(partners, kind="stable")
        once = np.sort(order[np.concatenate([[True], np.diff(partners[order]) != 0])])
        bad_ids, partners = bad_ids[once], partners[once]
        a, b, c, d = u[bad_ids], v[bad_ids], u[partners], v[partners]
        flip = rng.random(len(bad_ids)) < 0.5
        u[bad_ids], v[bad_ids] = a, np.where(flip, d, c)
        u[partners], v[partners] = b, np.where(flip, c, d)
    raise RuntimeError(f"no simple {k}-regular graph on {m} nodes after {max_sweeps} sweeps")
