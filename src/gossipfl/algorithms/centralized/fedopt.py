"""FedAvgM and the adaptive FedOpt family: FedAvg's clients, another server optimizer.

FedAvgM (Hsu, Qi & Brown 2019, "Measuring the Effects of Non-Identical Data Distribution for
Federated Visual Classification"), server momentum:

    Δ_t = Σ_{i∈S_t} p_i (y_i^{t,K} − x^t),   v⁺ = β v + Δ_t,   x^{t+1} = x^t + η_g v⁺

FedAdagrad, FedAdam, FedYogi (Reddi et al., "Adaptive Federated Optimization", ICLR 2021,
Algorithm 2), with m⁺ = β₁ m + (1 − β₁) Δ_t, m⁰ = 0, v⁰ = τ² and no bias correction:

    FedAdagrad:  v⁺ = v + Δ_t²
    FedAdam:     v⁺ = β₂ v + (1 − β₂) Δ_t²
    FedYogi:     v⁺ = v − (1 − β₂) Δ_t² sign(v − Δ_t²)
    x^{t+1} = x^t + η m⁺ / (√v⁺ + τ)

(the rules of :mod:`gossipfl.algorithms.server`), with their defaults β₁ = 0.9, β₂ = 0.99,
τ = 10⁻³; the server learning rate η is tuned per task in that paper (default 1). Δ is the
n_i-weighted average of the sampled clients' y_i − x (as FedAvg).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import POSITIVE, UNIT_INTERVAL
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm, ServerParams
from gossipfl.algorithms.server import server_optimizer


@dataclass
class ServerMomentumParams(ServerParams):
    server_momentum: float = 0.9  # β
    rules: ClassVar = {"server_momentum": UNIT_INTERVAL}


@dataclass
class AdaptiveParams(ServerParams):
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3
    rules: ClassVar = {"beta1": UNIT_INTERVAL, "beta2": UNIT_INTERVAL, "tau": POSITIVE}


@register
class FedAvgM(ServerAlgorithm):
    name = "fedavgm"
    paper = "Hsu, Qi & Brown 2019, Measuring the Effects of Non-Identical Data Distribution"
    Params = ServerMomentumParams

    def server_optimizer(self):
        return server_optimizer("momentum", self.params.global_lr,
                                momentum=self.params.server_momentum)


class FedOpt(ServerAlgorithm):
    """An adaptive server rule named ``rule`` (adagrad, adam, yogi)."""

    Params = AdaptiveParams
    rule: ClassVar[str] = "adam"
    paper = "Reddi et al. 2021, Adaptive Federated Optimization (ICLR)"

    def server_optimizer(self):
        p = self.params
        return server_optimizer(self.rule, p.global_lr, beta1=p.beta1, beta2=p.beta2, tau=p.tau)


@register
class FedAdagrad(FedOpt):
    name = "fedadagrad"
    rule = "adagrad"


@register
class FedAdam(FedOpt):
    name = "fedadam"
    rule = "adam"


@register
class FedYogi(FedOpt):
    name = "fedyogi"
    rule = "yogi"
