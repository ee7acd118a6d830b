"""Server optimizers: how a server turns the aggregated client update into its next model.

Following FedOpt (Reddi et al., "Adaptive Federated Optimization", ICLR 2021), the server
treats Δ_t = Σ_{i∈S_t} p_i (y_i^t − x^t) (minus a pseudo-gradient) as the step direction:

    sgd       x⁺ = x + η Δ                                           (FedAvg: η = η_g)
    momentum  v⁺ = β v + Δ,  x⁺ = x + η v⁺                           (FedAvgM, Hsu et al. 2019)
    adagrad   v⁺ = v + Δ²,                        x⁺ = x + η m⁺ / (√v⁺ + τ)
    adam      v⁺ = β₂ v + (1 − β₂) Δ²,            x⁺ = x + η m⁺ / (√v⁺ + τ)
    yogi      v⁺ = v − (1 − β₂) Δ² sign(v − Δ²),  x⁺ = x + η m⁺ / (√v⁺ + τ)

with m⁺ = β₁ m + (1 − β₁) Δ for the three adaptive rules, m = 0 and v = τ² at the start
(Reddi et al., Algorithm 2: no bias correction). An optimizer is a pure rule: its state is a
dict of tensors the algorithm keeps as global state (and checkpoints).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gossipfl.errors import unknown_choice


@dataclass(frozen=True)
class ServerOptimizer:
    """x⁺ = x + η Δ; subclasses add state and change the direction."""

    lr: float = 1.0  # η

    state_names: tuple[str, ...] = ()

    def init(self, x: Tensor) -> dict[str, Tensor]:
        return {name: torch.zeros_like(x) for name in self.state_names}

    def step(self, x: Tensor, delta: Tensor, state: dict[str, Tensor]) -> Tensor:
        return x + self.lr * self.direction(delta, state)

    def direction(self, delta: Tensor, state: dict[str, Tensor]) -> Tensor:
        return delta


@dataclass(frozen=True)
class ServerMomentum(ServerOptimizer):
    momentum: float = 0.9  # β
    state_names: tuple[str, ...] = ("velocity",)

    def direction(self, delta, state):
        state["velocity"] = self.momentum * state["velocity"] + delta
        return state["velocity"]


@dataclass(frozen=True)
class ServerAdaptive(ServerOptimizer):
    """The FedAdagrad / FedAdam / FedYogi family; ``second_moment`` names the v-rule."""

    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3
    second_moment: str = "adam"
    state_names: tuple[str, ...] = ("m", "v")

    def init(self, x):
        return {"m": torch.zeros_like(x), "v": torch.full_like(x, self.tau ** 2)}

    def direction(self, delta, state):
        m, v, square = state["m"], state["v"], delta * delta
        state["m"] = m = self.beta1 * m + (1 - self.beta1) * delta
        if self.second_moment == "adagrad":
            state["v"] = v = v + square
        elif self.second_moment == "adam":
            state["v"] = v = self.beta2 * v + (1 - self.beta2) * square
        else:  # yogi
            state["v"] = v = v - (1 - self.beta2) * square * torch.sign(v - square)
        return m / (v.sqrt() + self.tau)


SERVER_OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam", "yogi")


def server_optimizer(name: str, lr: float, momentum: float = 0.9, beta1: float = 0.9,
                     beta2: float = 0.99, tau: float = 1e-3) -> ServerOptimizer:
    """The server optimizer ``name`` with its hyperparameters."""
    if name == "sgd":
        return ServerOptimizer(lr)
    if name == "momentum":
        return ServerMomentum(lr, momentum=momentum)
    if name in ("adagrad", "adam", "yogi"):
        return ServerAdaptive(lr, beta1=beta1, beta2=beta2, tau=tau, second_moment=name)
    raise unknown_choice("algorithm.server_optimizer", name, SERVER_OPTIMIZERS)
