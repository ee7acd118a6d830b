"""FedCM — client-level momentum (Xu, Wang, Wang, Ji & Li 2021, "FedCM: Federated Learning
with Client-level Momentum", Algorithm 1).

The server keeps the global momentum m (m_0 = 0, gradient units) and sends x_t and m_t to the
sampled clients; each runs K steps from y = x_t with

    y ← y − η_l (α ∇F_i(y; ξ) + (1 − α) m_t)          (∇F_i with ``train.weight_decay``)

and uploads Δ_i = y − x_t. Server, with Δ_t = (1/|S_t|) Σ_{i∈S_t} Δ_i:

    m_{t+1} = −Δ_t / (K η_l)           (the average client gradient of the round)
    x_{t+1} = x_t + η_g Δ_t

The original writes x_{t+1} = x_t − η̃_g m_{t+1}; here η̃_g = η_g K η_l, so η_g = 1 is the
FedAvg-sized step x_t + Δ_t of the public FedCM codes (FL-Simulator, the FedSAGD authors',
global lr 1). The FedSAGD paper's proof (App. C.7) takes η̃_g = 1, x_{t+1} = x_t +
Δ_t/(K η_l): ``global_lr: 1/(K η_l)`` here, for a constant η_l. α is the weight of the
fresh gradient; the FedSAGD paper's "FedCM β = 0.1" (A.3) is this α = 0.1, Xu et al.'s
default. Bytes: x_t and m_t down, Δ_i up (1–1.5× FedAvg).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import FRACTION
from gossipfl.algorithms.centralized.fedavg import ServerParams
from gossipfl.algorithms.centralized.global_momentum import GlobalMomentum
from gossipfl.algorithms.terms import pure


@dataclass
class FedCMParams(ServerParams):
    alpha: float = 0.1  # α, weight of the local gradient (1 − α on the global momentum)
    rules: ClassVar = {"alpha": FRACTION}


@register
class FedCM(GlobalMomentum):
    name = "fedcm"
    paper = "Xu et al. 2021, FedCM: Federated Learning with Client-level Momentum"
    Params = FedCMParams

    @pure
    def client_direction(self, ctx, work, gradient):
        alpha = self.params.alpha
        return alpha * gradient + (1 - alpha) * work["m"]

    def next_momentum(self, ctx, state, work, delta):
        return self.pseudo_gradient(ctx, work, delta)
