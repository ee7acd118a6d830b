"""FedSAGD — Federated Learning with Stable and Accelerated Client Gradient Descent
(anonymous ICLR submission, Algorithm 1).

The server keeps the global momentum v (v_0 = 0) and sends x_t and v_t to each sampled client
i ∈ S_t; the client runs K steps from x_{t,0}^i = x_t (Algorithm 1, lines 8–10):

    m_{t,k}^i   = β v_t + g_{t,k}^i,            g_{t,k}^i = ∇F_i(x_{t,k}^i; ξ)
    x_{t,k+1}^i = x_{t,k}^i − η_l (m_{t,k}^i + (λ + μ) x_{t,k}^i − λ x_t)

i.e. SGD on F_i(x) + β⟨v_t, x⟩ + (λ/2)‖x − x_t‖² + (μ/2)‖x‖²: the "hybrid proximal term" is a
FedProx pull λ plus the weight decay μ (§3.2), so ``train.weight_decay`` is not added (a
warning says so when it is set to another value than μ: a study may give every algorithm
the same weight decay, 10⁻³ in the FedSAGD authors' code, equal to the default μ). The sign of μ is Algorithm 1's +μx: Appendix C.11 prints −μx,
but its proof uses the contraction 1 − η_l(λ+μ), which needs +μx. Uploads
Δ_t^i = x_{t,K}^i − x_t; the server (lines 14–16):

    Δ_t     = (1/s) Σ_{i∈S_t} Δ_t^i                          (unweighted)
    v_{t+1} = (β v_t − Δ_t / (K η_l)) / (1 + β)
    x_{t+1} = x_t + η Δ_t

η_l is the round's (decayed) local learning rate, the one the clients used; K counts the
local steps actually taken (epochs × batches; the mean over S_t if clients differ). Defaults
are the paper's: β = 0.9 (Table 8), λ = 0.01 (Table 10), μ = 0.001 (Table 9); η is not stated
in the paper and is 1 here. Table 17's ablations: ``beta: 0`` (no momentum) and
``lam: 0, mu: 0`` (no hybrid proximal term). Bytes: x_t and v_t down, Δ_t^i up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import NON_NEGATIVE, UNIT_INTERVAL
from gossipfl.algorithms.centralized.fedavg import ServerParams
from gossipfl.algorithms.centralized.global_momentum import GlobalMomentum
from gossipfl.algorithms.terms import chain, gradient, pure


@dataclass
class FedSAGDParams(ServerParams):
    beta: float = 0.9  # β, global momentum coefficient
    lam: float = 0.01  # λ, proximal pull toward x_t
    mu: float = 0.001  # μ, weight decay (pull toward 0)
    rules: ClassVar = {"beta": UNIT_INTERVAL, "lam": NON_NEGATIVE, "mu": NON_NEGATIVE}


@register
class FedSAGD(GlobalMomentum):
    name = "fedsagd"
    paper = ("FedSAGD (anonymous ICLR submission), Federated Learning with Stable and "
             "Accelerated Client Gradient Descent")
    Params = FedSAGDParams

    def check(self, topology, order="synchronous"):
        wd, mu = self.env.train.weight_decay, self.params.mu
        warnings = super().check(topology, order)
        if wd and wd != mu:
            warnings.append(f"fedsagd ignores train.weight_decay = {wd}: its weight decay is "
                            + f"algorithm.mu = {mu}.")
        return warnings

    def direction(self):
        return chain(gradient(), self.client_direction)  # no train.weight_decay: μ is it

    def begin_round(self, ctx, state):
        work = super().begin_round(ctx, state)  # the anchor: x_t
        return work.with_scratch(anchor=work.replicated(state["server"]))

    @pure
    def client_direction(self, ctx, work, gradient):
        p = self.params
        return gradient + p.beta * work["m"] + (p.lam + p.mu) * work.y \
            - p.lam * work["anchor"]

    def next_momentum(self, ctx, state, work, delta):
        beta = self.params.beta
        v = state["momentum"]
        return (beta * v + self.pseudo_gradient(ctx, work, delta)) / (1 + beta)
