"""FedACG — accelerated client gradient (Kim, Kim & Han, CVPR 2024, "Communication-Efficient
Federated Learning with Accelerated Client Gradient", Algorithm 1 and its official code).

The server keeps the momentum m (m_0 = 0) and sends only the lookahead model
x̂_t = x_t + λ m_t; each sampled client runs K SGD steps from y = x̂_t with a proximal
penalty toward it (the official code's loss CE + (β/2)‖y − x̂_t‖²):

    y ← y − η_l (∇F_i(y; ξ) + β (y − x̂_t))            (∇F_i with ``train.weight_decay``)

and uploads Δ_i = y − x̂_t. Server, with Δ_t = (1/|S_t|) Σ_{i∈S_t} Δ_i:

    m_{t+1} = λ m_t + Δ_t,        x_{t+1} = x_t + η_g m_{t+1}   (η_g = 1: the mean client model)

The FedSAGD paper's proof form (App. C.9) omits the penalty: ``prox: 0``. λ = 0.85 and
β = 10⁻³ are the official code's defaults; the FedSAGD paper reports λ = 0.9 (A.3) and its
authors' README a penalty of 0.01. Bytes: x̂_t down, Δ_i up (1× FedAvg).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import NON_NEGATIVE, UNIT_INTERVAL, Phase, Work
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm, ServerParams
from gossipfl.algorithms.server import server_optimizer
from gossipfl.algorithms.terms import prox, sgd
from gossipfl.network.federation import Weighting


@dataclass
class FedACGParams(ServerParams):
    lam: float = 0.85  # λ, server momentum and lookahead coefficient
    prox: float = 1e-3  # β, proximal penalty toward the lookahead model
    rules: ClassVar = {"lam": UNIT_INTERVAL, "prox": NON_NEGATIVE}


@register
class FedACG(ServerAlgorithm):
    name = "fedacg"
    paper = "Kim, Kim & Han 2024, Communication-Efficient FL with Accelerated Client Gradient"
    Params = FedACGParams
    weighting = Weighting.UNIFORM

    def server_optimizer(self):
        return server_optimizer("momentum", self.params.global_lr, momentum=self.params.lam)

    def phases(self):
        return [Phase(direction=sgd(prox(self.params.prox)))]

    def begin_round(self, ctx, state):
        clients = self.fed.sample(ctx.round, self.params.participation, ctx.plan.eligible)
        velocity = self.optimizer_state(state, "velocity")
        lookahead = state["server"] + self.params.lam * velocity
        start = self.fed.broadcast(lookahead, clients)
        return Work(start, clients, anchor=start.clone())

    def end_round(self, ctx, state, work):
        delta = self.fed.aggregate(work.y - work["anchor"], work.clients, self.weighting)
        self.server_step(state, delta)
