"""The worked examples of docs/design.md: a server optimizer of one's own (``nesterov``,
registered by name as gossipfl's ``sgd``, ``momentum``, ``adam`` ... are), a centralized
algorithm that uses it, and a personalized one with two local phases on the shared /
personal groups. (The decentralized example is ``my_plugin.py``'s ``dfedavg_cta``.)

    gossipfl run --plugin examples/plugins/design_examples.py --set algorithm.name=fedavg_nesterov
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import Algorithm, Phase, register
from gossipfl.algorithms.base import POSITIVE
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm
from gossipfl.algorithms.centralized.fedopt import ServerMomentumParams
from gossipfl.algorithms.decentralized.dfedavg import GossipParams
from gossipfl.algorithms.server import (
    ServerOptimizer,
    register_server_optimizer,
    server_optimizer,
)


@register_server_optimizer("nesterov")
@dataclass(frozen=True)
class ServerNesterov(ServerOptimizer):
    """Nesterov momentum on the server: v⁺ = β v + Δ,  x⁺ = x + η (β v⁺ + Δ)."""

    momentum: float = 0.9
    state_names: tuple[str, ...] = ("velocity",)

    def direction(self, delta, state):
        state["velocity"] = self.momentum * state["velocity"] + delta
        return self.momentum * state["velocity"] + delta


@register
class FedAvgNesterov(ServerAlgorithm):
    """FedAvg's clients and aggregation; the server steps with Nesterov momentum."""

    name = "fedavg_nesterov"
    paper = "design example: FedAvg with a Nesterov server optimizer"
    Params = ServerMomentumParams  # participation, global_lr, server_momentum β

    def server_optimizer(self):
        return server_optimizer("nesterov", self.params.global_lr,
                                momentum=self.params.server_momentum)


@dataclass
class TwoPhaseParams(GossipParams):
    head_lr: float = 0.01  # η_v
    head_epochs: int = 1  # K_v
    rules: ClassVar = {"head_lr": POSITIVE}


@register
class DFedRepExample(Algorithm):
    """Decentralized FedRep-style round: the personal head v_i trains with the body frozen,
    then the shared body u_i with the new head frozen; only the body is gossiped:

        v_i ← K_v epochs of SGD on v (lr η_v),  u_i ← K_u epochs of SGD on u (lr η),
        u_i ← Σ_j w_ij u_j   (the head never leaves client i)
    """

    name = "dfedrep_example"
    paper = "design example: two phases on the personal and shared groups"
    Params = TwoPhaseParams

    def phases(self):
        return [Phase("head", epochs=self.params.head_epochs, lr=self.params.head_lr,
                      group="personal"),
                Phase("body", group="shared")]

    def end_round(self, ctx, state, work):
        state["x"] = self.fed.gossip(work.y, ctx.round, self.params.gossip_steps,
                                     group="shared")
