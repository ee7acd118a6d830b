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

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from gossipfl.errors import unknown_choice
from gossipfl.plugins import Registry


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


def adagrad_moment(v: Tensor, square: Tensor, beta2: float) -> Tensor:
    """v + Δ²"""
    return v + square


def adam_moment(v: Tensor, square: Tensor, beta2: float) -> Tensor:
    """β₂ v + (1 − β₂) Δ²"""
    return beta2 * v + (1 - beta2) * square


def yogi_moment(v: Tensor, square: Tensor, beta2: float) -> Tensor:
    """v − (1 − β₂) Δ² sign(v − Δ²)"""
    return v - (1 - beta2) * square * torch.sign(v - square)


#: The second-moment rules of the adaptive family, by name.
SECOND_MOMENTS: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "adagrad": adagrad_moment, "adam": adam_moment, "yogi": yogi_moment}


@dataclass(frozen=True)
class ServerAdaptive(ServerOptimizer):
    """The FedAdagrad / FedAdam / FedYogi family; ``second_moment`` names the v-rule
    (:data:`SECOND_MOMENTS`)."""

    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3
    second_moment: str = "adam"
    state_names: tuple[str, ...] = ("m", "v")

    def __post_init__(self):
        if self.second_moment not in SECOND_MOMENTS:
            raise unknown_choice("algorithm.server_optimizer", self.second_moment,
                                 SECOND_MOMENTS)

    def init(self, x):
        return {"m": torch.zeros_like(x), "v": torch.full_like(x, self.tau ** 2)}

    def direction(self, delta, state):
        m, square = state["m"], delta * delta
        state["m"] = m = self.beta1 * m + (1 - self.beta1) * delta
        state["v"] = v = SECOND_MOMENTS[self.second_moment](state["v"], square, self.beta2)
        return m / (v.sqrt() + self.tau)


#: Every server optimizer by name: a function of (lr, momentum, beta1, beta2, tau).
SERVER_OPTIMIZERS: Registry = Registry("server optimizer", "algorithm.server_optimizer", {
    "sgd": lambda lr, **_: ServerOptimizer(lr),
    "momentum": lambda lr, momentum, **_: ServerMomentum(lr, momentum=momentum),
    **{name: (lambda lr, beta1, beta2, tau, name=name, **_: ServerAdaptive(
        lr, beta1=beta1, beta2=beta2, tau=tau, second_moment=name)) for name in SECOND_MOMENTS},
})


def register_server_optimizer(name: str):
    """Class decorator: make a :class:`ServerOptimizer` subclass available to
    :func:`server_optimizer` as ``name``; it is built with ``lr`` and those of ``momentum``,
    ``beta1``, ``beta2``, ``tau`` that are its fields."""
    def decorate(cls: type[ServerOptimizer]) -> type[ServerOptimizer]:
        from dataclasses import fields

        own = {f.name for f in fields(cls)} - {"lr", "state_names"}

        def build(lr, **hyper):
            return cls(lr, **{k: v for k, v in hyper.items() if k in own})

        build.cls = cls
        SERVER_OPTIMIZERS.add(name, build, made_by=lambda made: getattr(made, "cls", made))
        return cls
    return decorate


def server_optimizer(name: str, lr: float, momentum: float = 0.9, beta1: float = 0.9,
                     beta2: float = 0.99, tau: float = 1e-3) -> ServerOptimizer:
    """The server optimizer ``name`` (:data:`SERVER_OPTIMIZERS`) with its hyperparameters."""
    return SERVER_OPTIMIZERS.lookup(name)(lr, momentum=momentum, beta1=beta1, beta2=beta2, tau=tau)
