"""DeepSqueeze (Tang, Lian, Qiu, Yuan, Zhang, Zhang & Liu 2019, "DeepSqueeze: Decentralization
Meets Error-Compensated Compression", arXiv 1907.07346, Algorithm 1).

Round t, every client i, with the compression operator C (``compressor``), the consensus step
η (``gamma`` here) and the error memory δ_i (δ⁻¹ = 0), step size γ_t = the learning rate:

    v_i^t     = x_i^t − γ_t (∇F_i(x_i^t; ξ_i^t) + wd·x_i^t) + δ_i^{t−1}   (error-compensated)
    δ_i^t     = v_i^t − C(v_i^t)                                          (sent: C(v_i^t))
    x_i^{t+1} = x_i^t − γ_t (∇F_i(x_i^t; ξ_i^t) + wd·x_i^t) + η Σ_j (w_ij − 1[i=j]) C(v_j^t)

in matrix form X^{t+1} = X^t − γ G^t + η C(V^t)(W − I). Unlike CHOCO-SGD the message is the
compressed model itself plus the error left over from the last compression, not a difference
to a public copy. With the identity compressor and η = 1 the round is x ← W (x − γ ∇F(x)).

One stochastic gradient per round, as in the paper (``train.local_steps`` is not read). A
static topology and the synchronous order only.
"""

from __future__ import annotations

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Phase
from gossipfl.algorithms.decentralized.compressed import CompressedAlgorithm


@register
class DeepSqueeze(CompressedAlgorithm):
    name = "deepsqueeze"
    paper = ("Tang et al. 2019, DeepSqueeze: Decentralization Meets Error-Compensated "
             "Compression")
    client_state = ("x", "error")

    def phases(self):
        return [Phase(steps=1)]

    def init(self, x0):
        state = super().init(x0)
        state["error"] = torch.zeros_like(x0)  # δ⁻¹ = 0
        return state

    def end_round(self, ctx, state, work):
        self.keep(ctx, state, work)
        stepped = work.y  # x − γ g
        v = stepped + state["error"]
        sent, mixed = self.fed.send_compressed(v, ctx.round, self.compressor,
                                               ("v", ctx.round))
        state["error"] = v - sent
        state["x"] = stepped + self.params.gamma * (mixed - sent)
