"""BEER — gradient tracking with compressed communication (Zhao, Li, Li, Richtárik & Chi,
"BEER: Fast O(1/T) Rate for Decentralized Nonconvex Optimization with Communication
Compression", NeurIPS 2022, Algorithm 1).

In the paper's matrix form (columns are clients), with the compression operator C
(``compressor``), the mixing step γ (``gamma``), the step size η = the learning rate, and
∇F(X) the stacked stochastic gradients (+ wd·x):

    X^{t+1} = X^t + γ H^t (W − I) − η V^t
    H^{t+1} = H^t + C(X^{t+1} − H^t)                       (sent: the compressed difference)
    V^{t+1} = V^t + γ G^t (W − I) + ∇F(X^{t+1}) − ∇F(X^t)
    G^{t+1} = G^t + C(V^{t+1} − G^t)                       (sent: the compressed difference)

with H⁰ = G⁰ = 0 and V⁰ = ∇F(X⁰). H and G are the public copies of the models and of the
trackers V (every neighbour holds them); each client keeps s_H = W H and s_G = W G from the
messages it receives, as in CHOCO-Gossip (gossipfl.compression.gossip).

Round t here takes the gradient g^t = ∇F(X^t) and then, in this order (the same recursion,
one gradient per round): V^t = u^t + g^t with u^t = V^{t−1} − g^{t−1} + γ G^{t−1}(W − I)
(u⁰ = 0: V⁰ = g⁰); G^t = G^{t−1} + C(V^t − G^{t−1}) for t ≥ 1 (G⁰ = 0: nothing is sent for
it in round 0); X^{t+1} = X^t + γ H^t(W − I) − η V^t; H^{t+1} = H^t + C(X^{t+1} − H^t);
u^{t+1} = V^t − g^t + γ G^t(W − I). Per client the state holds x, H, s_H, G, s_G and u; two
compressed messages per round (one in round 0).

With the identity compressor and γ = 1, H^{t+1} = X^{t+1} and G^t = V^t (t ≥ 1): from round 1
on BEER is gradient tracking in its combine-then-adapt form, X^{t+1} = W X^t − η V^t,
V^{t+1} = W V^t + g^{t+1} − g^t, started from X¹ = X⁰ − η V⁰ and V¹ = g¹ (H⁰ = G⁰ = 0, the
paper's and the authors' code's initialization; ``dsgt`` with ``form: cta`` has
V¹ = W g⁰ + g¹ − g⁰ instead). A static topology and the synchronous order only.
"""

from __future__ import annotations

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Phase, Work
from gossipfl.algorithms.decentralized.compressed import CompressedAlgorithm
from gossipfl.algorithms.decentralized.dsgt import gradient_into

PUBLIC = ("h", "h_mixed", "g", "g_mixed", "u")


@register
class BEER(CompressedAlgorithm):
    name = "beer"
    paper = ("Zhao, Li, Li, Richtárik & Chi 2022, BEER: Fast O(1/T) Rate for Decentralized "
             "Nonconvex Optimization with Communication Compression")
    client_state = ("x", *PUBLIC)

    def phases(self):
        return [Phase(steps=1, update=gradient_into("gradient"))]

    def init(self, x0):
        state = super().init(x0)
        state.update({key: torch.zeros_like(x0) for key in PUBLIC})
        return state

    def begin_round(self, ctx, state):
        x = state["x"]
        return Work(x.clone(), gradient=torch.zeros_like(x))

    def end_round(self, ctx, state, work):
        compressor, gamma, t = self.compressor, self.params.gamma, ctx.round
        g = work["gradient"]
        v = state["u"] + g  # V^t
        if t > 0:
            self._publish(state, "g", v, t, compressor)  # G^t (G⁰ = 0)
        x = state["x"] + gamma * (state["h_mixed"] - state["h"]) - ctx.lr * v
        self._publish(state, "h", x, t, compressor)  # H^{t+1}
        state["u"] = v - g + gamma * (state["g_mixed"] - state["g"])
        state["x"] = x

    def _publish(self, state, key: str, target, t: int, compressor) -> None:
        """Public copy ``key`` ← copy + C(target − copy); its mix W·copy likewise."""
        self.fed.publish(target, t, compressor, (key, t), state[key],
                         state[f"{key}_mixed"])
