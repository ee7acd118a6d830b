"""FedDyn — federated learning with dynamic regularization (Acar et al., ICLR 2021,
"Federated Learning Based on Dynamic Regularization", Algorithm 1).

Each client keeps the state h_i = ∇L_i(θ_i^{t−1}) (h_i = 0 at the start), the server h (0).
The server sends θ^{t−1}; each sampled client runs K SGD steps from y = θ^{t−1} on
L_i(θ) − ⟨h_i, θ⟩ + (α/2)‖θ − θ^{t−1}‖²:

    y ← y − η_l (∇L_i(y; ξ) − h_i + α (y − θ^{t−1}))      (∇L_i with ``train.weight_decay``)
    h_i ← h_i − α (θ_i^t − θ^{t−1})                        (θ_i^t: the final y; on the client)

and uploads Δ_i = θ_i^t − θ^{t−1}. Server, with Δ_t = (1/|S_t|) Σ_{i∈S_t} Δ_i:

    h^t = h^{t−1} − α (1/m) Σ_{i∈S_t} Δ_i = h^{t−1} − α (|S_t|/m) Δ_t
    θ^t = θ^{t−1} + η_g Δ_t − h^t / α                      (η_g = 1: mean_i θ_i^t − h^t/α)

This is the original paper's rule (``server_correction: true``, default), which the FedSAGD
paper's experiments run through FedDyn's code lineage. The FedSAGD paper's proof form (App.
C.4) averages the client models without the −h/α correction: ``server_correction: false``.
α is searched in {0.1, 0.01, 0.001} by both papers; default 0.01 (the FedSAGD paper's
EMNIST-L value). Bytes: θ down, Δ_i up (1× FedAvg); h and h_i never travel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import BOOLEAN, POSITIVE, Phase
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm, ServerParams
from gossipfl.algorithms.terms import prox, sgd, shift
from gossipfl.network.federation import Weighting


@dataclass
class FedDynParams(ServerParams):
    alpha: float = 0.01  # α, dynamic regularization coefficient
    server_correction: bool = True  # θ^t = mean θ_i − h^t/α (Acar et al.); False: C.4's mean
    rules: ClassVar = {"alpha": POSITIVE, "server_correction": BOOLEAN}


@register
class FedDyn(ServerAlgorithm):
    name = "feddyn"
    paper = "Acar et al. 2021, Federated Learning Based on Dynamic Regularization (ICLR)"
    Params = FedDynParams
    weighting = Weighting.UNIFORM
    client_state = ("h_clients",)
    server_vectors = ("h",)

    def phases(self):
        return [Phase(direction=sgd(shift("h_own", -1.0),
                                      prox(self.params.alpha)))]

    def begin_round(self, ctx, state):
        work = super().begin_round(ctx, state)
        h_own = self.fed.rows(state["h_clients"], work.clients)  # each client's own h_i
        return work.with_scratch(h_own=h_own, anchor=work.replicated(state["server"]))

    def end_round(self, ctx, state, work):
        fed, alpha, clients = self.fed, self.params.alpha, work.clients
        updates = work.y - state["server"]
        fed.set_rows(state["h_clients"], clients, work["h_own"] - alpha * updates)
        delta = fed.aggregate(updates, clients, self.weighting)
        sampled = fed.total(torch.tensor(float(len(clients)), device=delta.device))  # |S_t|
        state["h"] = state["h"] - alpha * sampled / fed.num_clients * delta
        self.server_step(state, delta)
        if self.params.server_correction:
            state["server"] = state["server"] - state["h"] / alpha
