"""D² — decentralized training over decentralized data (Tang, Lian, Yan, Zhang & Liu, ICML
2018), a.k.a. Exact Diffusion with the plain W (Yuan, Ying, Zhao & Sayed 2019).

Tang et al.'s Algorithm 1, with g_i^t = ∇F_i(x_i^t; ξ_i^t) + wd·x_i^t and step γ:

    x_i^1     = Σ_j w_ij (x_j^0 − γ g_j^0)
    x_i^{t+1} = Σ_j w_ij (2 x_j^t − x_j^{t−1} − γ g_j^t + γ g_j^{t−1}),     t ≥ 1

written as exact diffusion's adapt–correct–combine with one stored vector ψ per client:

    ψ_i^t = x_i^t − γ_t g_i^t,   φ_i^t = ψ_i^t + x_i^t − ψ_i^{t−1},   x_i^{t+1} = Σ_j w_ij φ_j^t

with ψ_i^{−1} = x_i^0. With a constant learning rate this is the paper's recursion exactly;
under ``train.lr_decay`` each gradient keeps the step γ_t it was taken with (the paper's
analysis is for a constant γ; the authors' code uses the current γ for both gradients).

**W's spectrum.** D² needs a symmetric W with λ_min(W) > −1/3 (Tang et al., Assumption 1):
without gradients the recursion is x^{t+1} = W(2x^t − x^{t−1}), whose mode at an eigenvalue
λ < 0 of W grows unless λ > −1/3 (at λ = −1/3 a root sits at −1 and never decays). So
:meth:`D2.check` refuses, before training, a topology whose W (every round's, for the first
rounds of a time-varying one) breaks it, naming the topology and the eigenvalue: e.g. a ring
of even size with Metropolis–Hastings weights 1/3 has λ_min = −1/3 exactly. The lazy
W' = (I + W)/2 (``topology.mixing: custom`` with its matrix) always satisfies it.

One stochastic gradient per round, as in the paper: ``train.local_steps`` and
``train.local_epochs`` are not read. Fully decentralized: no partial participation;
``topology.order: sequential`` is refused.
"""

from __future__ import annotations

import numpy as np
import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Algorithm, Phase, Work
from gossipfl.algorithms.decentralized.dsgt import gradient_into
from gossipfl.errors import GossipflError

BOUND = -1.0 / 3.0
ROUNDS_CHECKED = 10  # of a time-varying topology
TOLERANCE = 1e-9


def smallest_eigenvalue(W: np.ndarray) -> float | None:
    """λ_min(W) of a symmetric W (None when W is not symmetric)."""
    W = np.asarray(W, dtype=np.float64)
    if not np.allclose(W, W.T, rtol=0.0, atol=1e-10):
        return None
    return float(np.linalg.eigvalsh((W + W.T) / 2).min())


@register
class D2(Algorithm):
    name = "d2"
    paper = "Tang, Lian, Yan, Zhang & Liu 2018, D²: Decentralized Training over Decentralized Data"
    client_state = ("x", "psi")

    def check(self, topology, order="synchronous"):
        if topology is None:
            return []
        rounds = ROUNDS_CHECKED if topology.time_varying else 1
        for t in range(rounds):
            lam = smallest_eigenvalue(topology.matrix(t, "algorithm d2's eigenvalue check"))
            at = f" at round {t}" if topology.time_varying else ""
            if lam is None:
                raise GossipflError(
                    f"algorithm d2 needs a symmetric mixing matrix, but topology "
                    f"{topology.name} (M={topology.num_clients}, mixing {topology.mixing}) "
                    f"is not symmetric{at}.")
            if lam <= BOUND + TOLERANCE:
                raise GossipflError(
                    f"algorithm d2 needs λ_min(W) > −1/3 (Tang et al. 2018), but topology "
                    f"{topology.name} (M={topology.num_clients}, mixing {topology.mixing}) has "
                    f"λ_min(W) = {lam:.4f}{at}; use a lazier W such as (I + W)/2 "
                    f"(topology.mixing: custom).")
        return []

    def phases(self):
        return [Phase(steps=1, update=gradient_into("gradient"))]

    def init(self, x0):
        state = super().init(x0)
        state["psi"] = x0.clone()  # ψ^{-1} = x^0: the first round is x^1 = W(x^0 − γ g^0)
        return state

    def begin_round(self, ctx, state):
        x = state["x"]
        return Work(x.clone(), gradient=torch.zeros_like(x))

    def end_round(self, ctx, state, work):
        x = work.y
        psi = x - ctx.lr * work["gradient"]
        state["x"] = self.fed.gossip(psi + x - state["psi"], ctx.round)
        state["psi"] = psi
