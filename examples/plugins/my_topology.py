"""A topology of one's own (docs/design.md, "Adding a piece"): the one-peer exponential
graph, time-varying (Ying et al. 2021, "Exponential Graph is Provably Efficient for
Decentralized Deep Training").

Round t links client i with i ± 2^(t mod τ) (mod M), τ = ⌈log₂ M⌉: every client talks to one
or two peers per round, and τ consecutive rounds reach everyone. W_t comes from the
adjacency by ``topology.mixing`` (Metropolis–Hastings by default); gossipfl validates it and
checks that the union of the first rounds is connected, as for its own topologies.

    topology: {name: one_peer_exp}
"""

from __future__ import annotations

import math

import numpy as np

from gossipfl.topology import Topology, register_topology


def one_peer_adjacency(m: int, t: int) -> np.ndarray:
    """The 0/1 ``[M, M]`` adjacency of round t."""
    hop = 2 ** (t % max(1, math.ceil(math.log2(m))))
    A = np.zeros((m, m))
    for i in range(m):
        for j in ((i + hop) % m, (i - hop) % m):
            if j != i:
                A[i, j] = A[j, i] = 1.0
    return A


@register_topology("one_peer_exp")
def one_peer_exp(m: int, mixing: str, seed: int, params: dict) -> Topology:
    return Topology("one_peer_exp", m, mixing, lambda t: one_peer_adjacency(m, t),
                    time_varying=True)
