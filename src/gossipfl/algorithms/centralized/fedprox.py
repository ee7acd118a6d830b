"""FedProx (Li et al., MLSys 2020): FedAvg with a proximal pull to the round's server model.

Each sampled client runs K SGD steps on F_i(y) + (μ/2)‖y − x^t‖²:

    y ← y − η (∇F_i(y; ξ) + wd·y + μ (y − x^t))

and the server aggregates as FedAvg. μ is not given by the papers; default 0.01.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import NON_NEGATIVE, Phase
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm, ServerParams
from gossipfl.algorithms.terms import prox, sgd


@dataclass
class FedProxParams(ServerParams):
    mu: float = 0.01  # μ, proximal coefficient
    rules: ClassVar = {"mu": NON_NEGATIVE}


@register
class FedProx(ServerAlgorithm):
    name = "fedprox"
    paper = "Li et al. 2020, Federated Optimization in Heterogeneous Networks"
    Params = FedProxParams

    def phases(self):
        return [Phase(direction=sgd(prox(self.params.mu)))]

    def begin_round(self, ctx, state):
        work = super().begin_round(ctx, state)  # the anchor: x^t, the round's server model
        return work.with_scratch(anchor=work.replicated(state["server"]))
