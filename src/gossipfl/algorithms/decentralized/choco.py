"""CHOCO-SGD (Koloskova, Stich & Jaggi, "Decentralized Stochastic Optimization and Gossip
Algorithms with Compressed Communication", ICML 2019, Algorithm 2).

Round t, every client i, with the compression operator C (``compressor``), the consensus step
γ (``gamma``), the public copies x̂ (x̂⁰ = 0) and s_i = Σ_j w_ij x̂_j (s⁰ = 0):

    x_i^{t+½} = x_i^t − η_t (∇F_i(x_i^t; ξ_i^t) + wd·x_i^t)
    q_i^t     = C(x_i^{t+½} − x̂_i^t)                     (sent to every neighbour)
    x̂_i^{t+1} = x̂_i^t + q_i^t,     s_i^{t+1} = s_i^t + Σ_j w_ij q_j^t
    x_i^{t+1} = x_i^{t+½} + γ (s_i^{t+1} − x̂_i^{t+1})    (= x^{t+½} + γ Σ_j w_ij (x̂_j − x̂_i))

The paper's step keeps the neighbours' copies x̂_j and computes Σ_j w_ij (x̂_j − x̂_i); s is
its memory-efficient form (the paper's appendix), equal on the fixed graph the method is
defined for (gossipfl.compression.gossip). With the identity compressor and γ = 1 the round is
x ← W (x − η ∇F(x)), DFedAvg with one local step.

One stochastic gradient per round, as in the paper (``train.local_steps`` is not read; the
momentum form of Koloskova, Lin, Stich & Jaggi, ICLR 2020, keeps a heavy-ball buffer across
rounds, which is not implemented here). The same gossip step for any algorithm:
``topology.compression``. A static topology and the synchronous order only.
"""

from __future__ import annotations

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Phase
from gossipfl.algorithms.decentralized.compressed import CompressedAlgorithm
from gossipfl.compression.gossip import ChocoGossip


@register
class CHOCO(CompressedAlgorithm):
    name = "choco"
    paper = ("Koloskova, Stich & Jaggi 2019, Decentralized Stochastic Optimization and Gossip "
             "Algorithms with Compressed Communication (CHOCO-SGD)")
    client_state = ("x", "hat", "mixed")

    def phases(self):
        return [Phase(steps=1)]

    def init(self, x0):
        state = super().init(x0)
        state["hat"] = torch.zeros_like(x0)  # x̂⁰ = 0
        state["mixed"] = torch.zeros_like(x0)  # s⁰ = W x̂⁰ = 0
        return state

    def end_round(self, ctx, state, work):
        self.keep(ctx, state, work)
        gossip = ChocoGossip(self.compressor, self.params.gamma)
        state["x"], state["hat"], state["mixed"] = gossip.step(
            self.fed, work.y, state["hat"], state["mixed"], ctx.round, ("x", ctx.round))
