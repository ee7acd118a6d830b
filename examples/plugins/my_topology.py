"""A topology of one's own (docs/design.md, "Adding a piece"): the one-peer exponential
graph, time-varying (Ying et al. 2021, "Exponential Graph is Provably Efficient for
Decentralized Deep Training"), with a parameter of its own.

Round t links client i with i ± 2^(t mod τ) (mod M), τ = ``period`` (null, the default:
⌈log₂ M⌉): every client talks to one or two peers per round, and τ = ⌈log₂ M⌉ consecutive
rounds reach everyone. W_t comes from the adjacency by ``topology.mixing``
(Metropolis–Hastings by default); gossipfl validates it and checks that the union of the first
rounds is connected, as for its own topologies. The registration declares ``period`` once, in
its ``Params`` dataclass with its rule and default, so a config sets it beside the section's
keys, checked before training
(``topology.period: must be an integer >= 1 or null, got 0.``), ``--set topology.period=2``
and a study's grid (``topology.period: [1, 2]``) set it as any key, and ``gossipfl list
--plugin`` shows it:

    topology: {name: one_peer_exp, period: 2}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from gossipfl.plugins import Params
from gossipfl.topology import Topology, register_topology
from gossipfl.validation import COUNT


def one_peer_adjacency(m: int, t: int, period: int) -> np.ndarray:
    """The 0/1 ``[M, M]`` adjacency of round t."""
    hop = 2 ** (t % period)
    A = np.zeros((m, m))
    for i in range(m):
        for j in ((i + hop) % m, (i - hop) % m):
            if j != i:
                A[i, j] = A[j, i] = 1.0
    return A


@dataclass(frozen=True)
class OnePeerParams(Params):
    period: int | None = None  # τ; null: ⌈log₂ M⌉
    rules: ClassVar = {"period": COUNT.or_none()}


@register_topology("one_peer_exp", params=OnePeerParams)
def one_peer_exp(m: int, mixing: str, seed: int, params: dict) -> Topology:
    tau = max(1, math.ceil(math.log2(m))) if params["period"] is None else int(params["period"])
    return Topology("one_peer_exp", m, mixing, lambda t: one_peer_adjacency(m, t, tau),
                    time_varying=True, period=tau, params={"period": tau})
