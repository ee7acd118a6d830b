"""FedANAG — global Nesterov momentum applied in the local steps (Zhang et al. 2025,
"Stabilizing and Accelerating Federated Learning on Heterogeneous Data with Partial Client
Participation", TPAMI), as the FedSAGD paper's App. C.10 writes its local rule and the
authors' public code its server rule.

The server keeps the global momentum m (m_0 = 0, gradient units) and sends x_t and m_t; each
sampled client runs K steps from y = x_t with the Nesterov direction of m_t:

    y ← y − η_l ((1 + β) ∇F_i(y; ξ) + β² m_t)  =  y − η_l (g + β (β m_t + g))

(∇F_i with ``train.weight_decay``) and uploads Δ_i = y − x_t. With Δ_t the unweighted mean,
the server recovers the round's average client gradient and updates m by heavy ball:

    ĝ_t     = −(Δ_t + K η_l β² m_t) / ((1 + β) K η_l)
    m_{t+1} = β m_t + ĝ_t,          x_{t+1} = x_t + η_g Δ_t

The proof form (C.10) has the same local rule and x_{t+1} = x_t + Δ_t, so the readings agree.
β = 0.9 (the FedSAGD paper, A.3). Bytes: x_t and m_t down, Δ_i up.
"""

from __future__ import annotations

from gossipfl.algorithms import register
from gossipfl.algorithms.centralized.fedavg import MomentumParams
from gossipfl.algorithms.centralized.global_momentum import GlobalMomentum
from gossipfl.algorithms.terms import pure


@register
class FedANAG(GlobalMomentum):
    name = "fedanag"
    paper = ("Zhang et al. 2025, Stabilizing and Accelerating Federated Learning on "
             "Heterogeneous Data with Partial Client Participation (TPAMI)")
    Params = MomentumParams

    @pure
    def client_direction(self, ctx, work, gradient):
        beta = self.params.beta
        return (1 + beta) * gradient + beta * beta * work["m"]

    def next_momentum(self, ctx, state, work, delta):
        beta, m = self.params.beta, state["momentum"]
        average_gradient = (self.pseudo_gradient(ctx, work, delta) - beta * beta * m) / (1 + beta)
        return beta * m + average_gradient
