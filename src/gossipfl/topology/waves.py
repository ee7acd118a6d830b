"""The waves of a sequential (Gauss–Seidel) sweep over a graph: the clients in index order,
each reading its neighbours' current rows, batched into waves of clients that share no edge.

wave(i) = 1 + max wave(j) over the neighbours j < i of i (0 if none), on the symmetrized
pattern (w_ij ≠ 0 or w_ji ≠ 0): a client of wave w reads only rows of earlier waves (j < i)
or rows not yet replaced (j > i, a later wave), so the waves in order compute the
one-client-at-a-time loop. Read by the sequential schedule
(:mod:`gossipfl.schedules.sequential`) and by the growth factors of
:mod:`gossipfl.algorithms.stability`.
"""

from __future__ import annotations

import numpy as np

from gossipfl.topology.sparse import Edges


def wave_numbers(W: np.ndarray | Edges) -> np.ndarray:
    """``[M]`` int: wave(i) = 1 + max wave(j) over j < i with w_ij ≠ 0 or w_ji ≠ 0 (0 if
    none); W dense or as edges (a topology of many clients): O(M + edges)."""
    E = Edges.of(W)
    off = (E.rows != E.cols) & (E.values != 0)
    low = np.minimum(E.rows[off], E.cols[off])  # each link {j < i}, from either direction
    high = np.maximum(E.rows[off], E.cols[off])
    order = np.lexsort((low, high))
    low, high = low[order], high[order]
    start = np.searchsorted(high, np.arange(E.num_clients + 1))
    waves = np.zeros(E.num_clients, dtype=np.int64)
    for i in np.flatnonzero(start[1:] > start[:-1]):  # the clients with a lower neighbour
        waves[i] = waves[low[start[i]:start[i + 1]]].max() + 1
    return waves


def sweep_waves(W: np.ndarray | Edges) -> list[np.ndarray]:
    """The clients of each wave, in wave order (each wave sorted by client index)."""
    numbers = wave_numbers(W)
    return [np.flatnonzero(numbers == w) for w in range(int(numbers.max()) + 1)]
