"""FedAvg — federated averaging with a server (McMahan et al., AISTATS 2017).

Round t: the server samples S_t (|S_t| = round(participation·M), uniform without replacement)
and broadcasts x^t; each i ∈ S_t runs K local SGD steps from y_i^{t,0} = x^t:

    y_i^{t,k+1} = y_i^{t,k} − η_t (∇F_i(y_i^{t,k}; ξ) + wd·y_i^{t,k})
    x^{t+1} = x^t + η_g Σ_{i∈S_t} p_i (y_i^{t,K} − x^t),   p_i = n_i / Σ_{j∈S_t} n_j

η_g = 1 (DFedSAM paper B.3). Communication: |S_t| downloads + |S_t| uploads of the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import FRACTION, POSITIVE, Algorithm, Hyperparams
from gossipfl.algorithms.steps import (
    clients_per_round,
    descend,
    sample_clients,
    sgd_direction,
    weighted_average_update,
)


@dataclass
class ServerParams(Hyperparams):
    participation: float = 0.1  # fraction of clients sampled per round
    global_lr: float = 1.0  # η_g
    rules: ClassVar = {"participation": FRACTION, "global_lr": POSITIVE}


class ServerAlgorithm(Algorithm):
    """Centralized skeleton: server model, client sampling, broadcast, weighted aggregation.

    Subclasses change the local step and may add to what is sent (``messages_per_client``).
    """

    centralized = True
    Params = ServerParams
    messages_per_client = 2  # model down + model up

    def init(self, x0):
        self.state = {"server": x0[0].clone()}

    def begin_round(self, t):
        count = clients_per_round(self.fed, self.params.participation)
        self.clients = sample_clients(self.fed, t, count)
        return self.state["server"].expand(count, -1).clone(), self.clients

    def local_direction(self, y: torch.Tensor, batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and local descent direction (plain SGD; FedSAM/FedProx/SCAFFOLD change it)."""
        return sgd_direction(self.fed, y, batch)

    def local_step(self, t, y, batch, lr):
        loss, direction = self.local_direction(y, batch)
        return descend(y, direction, lr, batch.active), loss

    def aggregate(self, y: torch.Tensor, lr: float) -> torch.Tensor:
        """The new server model from the sampled clients' final iterates."""
        return weighted_average_update(self.state["server"], y, self.clients, self.fed,
                                       self.params.global_lr)

    def end_round(self, t, y, lr):
        self.state["server"] = self.aggregate(y, lr)
        return self.messages_per_client * len(self.clients) * self.fed.model_bytes

    def client_models(self) -> torch.Tensor:
        return self.state["server"].expand(self.fed.num_clients, -1)

    def global_model(self):
        return self.state["server"]

    def server_model(self):
        return self.state["server"]


@register
class FedAvg(ServerAlgorithm):
    name = "fedavg"
    paper = "McMahan et al. 2017, Communication-Efficient Learning of Deep Networks"
