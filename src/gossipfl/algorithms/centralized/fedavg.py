"""FedAvg — federated averaging with a server (McMahan et al., AISTATS 2017).

Round t: the server samples S_t (|S_t| = round(participation·M), uniform without replacement)
and broadcasts x^t; each i ∈ S_t runs K local SGD steps from y_i^{t,0} = x^t:

    y_i^{t,k+1} = y_i^{t,k} − η_t (∇F_i(y_i^{t,k}; ξ) + wd·y_i^{t,k})
    x^{t+1} = x^t + η_g Σ_{i∈S_t} p_i (y_i^{t,K} − x^t),   p_i = n_i / Σ_{j∈S_t} n_j

η_g = 1 (DFedSAM paper App. B.3). Communication: |S_t| downloads + |S_t| uploads of the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import (
    FRACTION,
    POSITIVE,
    UNIT_INTERVAL,
    Algorithm,
    Hyperparams,
    Work,
)
from gossipfl.algorithms.server import ServerOptimizer
from gossipfl.network.federation import Weighting


@dataclass
class ServerParams(Hyperparams):
    participation: float = 0.1  # fraction of clients sampled per round
    global_lr: float = 1.0  # η_g
    rules: ClassVar = {"participation": FRACTION, "global_lr": POSITIVE}


@dataclass
class MomentumParams(ServerParams):
    beta: float = 0.9  # β, the algorithm's momentum coefficient
    rules: ClassVar = {"beta": UNIT_INTERVAL}


class ServerAlgorithm(Algorithm):
    """Centralized skeleton: a server model, client sampling, broadcast, aggregation of the
    client updates Δ = Σ p_i (y_i − x) and a server optimizer turning Δ into x⁺.

    Subclasses change the local direction, the ``weighting`` of the aggregation, the
    ``server_optimizer`` (with its state kept under ``server_opt.<name>``) or the round, and
    declare their extra state: ``server_vectors`` (global ``[P]``) and ``client_state``
    (``[M, P]``), all zero at the start. The optimizer's state lives in the algorithm's
    state under ``server_opt.<name>`` (read it with :meth:`optimizer_state`).
    """

    centralized = True
    Params = ServerParams
    client_state = ()
    server_vectors: ClassVar[tuple[str, ...]] = ()
    evaluations = ("average",)
    weighting: ClassVar[Weighting] = Weighting.SAMPLES

    def __init__(self, params, env, fed):
        super().__init__(params, env, fed)
        self.optimizer = self.server_optimizer()
        self.global_state = ("server", *(f"server_opt.{k}" for k in self.optimizer.state_names),
                             *self.server_vectors)

    def server_optimizer(self) -> ServerOptimizer:
        return ServerOptimizer(self.params.global_lr)

    def init(self, x0):
        state = {"server": x0[0].clone()}
        for key, value in self.optimizer.init(state["server"]).items():
            state[f"server_opt.{key}"] = value
        for key in self.server_vectors:
            state[key] = torch.zeros_like(x0[0])
        for key in self.client_state:
            state[key] = torch.zeros_like(x0)
        return state

    def optimizer_state(self, state, name: str) -> torch.Tensor:
        """The server optimizer's state tensor ``name`` (e.g. its ``velocity``)."""
        return state[f"server_opt.{name}"]

    def begin_round(self, ctx, state):
        clients = self.fed.sample(ctx.round, self.params.participation, ctx.plan.eligible)
        return Work(self.fed.broadcast(state["server"], clients), clients)

    def server_step(self, state, delta):
        """x⁺ from the aggregated update Δ with the server optimizer (its state updated)."""
        names = self.optimizer.state_names
        moments = {k: state[f"server_opt.{k}"] for k in names}
        state["server"] = self.optimizer.step(state["server"], delta, moments)
        for key in names:
            state[f"server_opt.{key}"] = moments[key]

    def end_round(self, ctx, state, work):
        delta = self.fed.aggregate(work.y - state["server"], work.clients, self.weighting)
        self.server_step(state, delta)

    def client_models(self, state):
        return self.fed.replicate(state["server"])

    def global_model(self, state):
        return state["server"]

    def server_model(self, state):
        return state["server"]


@register
class FedAvg(ServerAlgorithm):
    name = "fedavg"
    paper = "McMahan et al. 2017, Communication-Efficient Learning of Deep Networks"
