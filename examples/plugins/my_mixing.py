"""A mixing rule of one's own (docs/design.md, "Adding a piece"): the lazy Metropolis rule,
W = (I + W_MH) / 2 (Nedić, Olshevsky and Rabbat 2018, "Network Topology and
Communication-Computation Tradeoffs in Decentralized Optimization", §III).

On an undirected graph with in-degrees d_i it gives every edge

    w_ij = 1 / (2 (1 + max(d_i, d_j))),        W_ii = 1 − Σ_{j≠i} w_ij ≥ 1/2,

half the Metropolis–Hastings weight: W is symmetric, doubly stochastic and, with W_ii ≥ 1/2,
positive semi-definite (its eigenvalues lie in [0, 1]), which some analyses of gossip need.
``symmetric=True`` makes gossipfl refuse a directed graph for it and check every W it makes
for symmetry and both sums. One function of the edges serves a dense W and a topology of many
clients built as edges alike; ``gossipfl list --plugin my_mixing.py`` shows the name:

    topology: {name: ring, mixing: lazy_metropolis}
"""

from __future__ import annotations

import numpy as np

from gossipfl.topology import register_mixing_rule


@register_mixing_rule("lazy_metropolis", symmetric=True)
def lazy_metropolis(rows: np.ndarray, cols: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """w_ij of the edges (client ``rows[e]`` receives from ``cols[e]``)."""
    return 0.5 / (1.0 + np.maximum(degree[rows], degree[cols]))
