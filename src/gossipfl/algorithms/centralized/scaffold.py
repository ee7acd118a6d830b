"""SCAFFOLD, option II (Karimireddy et al., ICML 2020).

Server model x and control variate c; client control variates c_i (all start at 0). Each
sampled client i ∈ S_t runs K_i local steps from y = x^t:

    y ← y − η (∇F_i(y; ξ) + wd·y − c_i + c)
    c_i⁺ = c_i − c + (x^t − y_i^{K_i}) / (K_i η)                     (option II)
    x^{t+1} = x^t + η_g / |S| Σ_{i∈S} (y_i − x^t),   c ← c + 1/M Σ_{i∈S} (c_i⁺ − c_i)

K_i counts the steps client i actually took (epochs over unequal data sizes differ).
Communication: model and control variate, down and up — twice FedAvg's bytes.
"""

from __future__ import annotations

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm
from gossipfl.algorithms.steps import sgd_direction


@register
class Scaffold(ServerAlgorithm):
    name = "scaffold"
    paper = "Karimireddy et al. 2020, SCAFFOLD: Stochastic Controlled Averaging for FL"
    messages_per_client = 4  # (x, c) down, (Δy, Δc) up

    def init(self, x0):
        super().init(x0)
        self.state["c"] = torch.zeros_like(x0[0])
        self.state["c_clients"] = torch.zeros_like(x0)

    def begin_round(self, t):
        y, clients = super().begin_round(t)
        self.steps_taken = torch.zeros(len(clients), device=y.device)
        self.correction = self.state["c"] - self.state["c_clients"][clients]  # c − c_i
        return y, clients

    def local_direction(self, y, batch):
        loss, direction = sgd_direction(self.fed, y, batch)
        active = batch.active
        self.steps_taken += active
        return loss, direction + self.correction * active.unsqueeze(1)

    def aggregate(self, y, lr):
        server, clients = self.state["server"], self.clients
        c_old = self.state["c_clients"][clients]
        scale = (self.steps_taken * lr).clamp_min(1e-12).unsqueeze(1)
        c_new = c_old - self.state["c"] + (server - y) / scale
        self.state["c_clients"][clients] = c_new
        self.state["c"] = self.state["c"] + (c_new - c_old).sum(0) / self.fed.num_clients
        return server + self.params.global_lr * (y - server).mean(0)
