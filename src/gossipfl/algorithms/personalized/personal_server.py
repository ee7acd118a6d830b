"""The centralized personalized protocol shared by FedAvg / FedSAM (personalized), FedPer,
FedRep, FedBABU, Ditto and Fed-RoD: a server with client sampling, where every client also
keeps something of its own.

Round t: the server samples S_t and sends the ``exchanged`` group of its model x^t; sampled
client i starts from its own model — x^t with its ``kept`` columns o_i (its own state, never
sent) — overwritten by what it received, trains, keeps the ``kept`` columns of the result
and uploads the ``exchanged`` ones; the server applies its optimizer to

    Δ = Σ_{i∈S_t} p_i (y_i − x^t)   on the exchanged columns (0 elsewhere), p_i = n_i/Σ n_j.

Client i's personalized model is x^t with its own columns o_i (clients not sampled keep
theirs). With ``exchanged = kept = all`` that is FedAvg with each client's latest locally
trained model as its personalized one, as DFedMDC's baselines evaluate FedAvg ("the local
model in FedAvg is also the comparable personalized model for each client"); with
``exchanged = shared``, ``kept = personal`` it is FedPer / FedRep's global body with each
client's own head (FedRep's evaluation, Collins et al. 2021).
"""

from __future__ import annotations

import torch

from gossipfl.algorithms.base import Work
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm


class PersonalServer(ServerAlgorithm):
    client_state = ("own",)
    evaluations = ("average", "personalized")
    exchanged = "all"  # the group the server sends and aggregates
    kept = "all"  # the group each client keeps as its own

    def init(self, x0):
        state = super().init(x0)
        state["own"] = self.own_init(x0)
        return state

    def own_init(self, x0: torch.Tensor) -> torch.Tensor:
        """o_i^0: the kept columns of X^0."""
        return self.env.groups[self.kept].select(x0).clone()

    def personalize(self, x: torch.Tensor, own: torch.Tensor) -> None:
        """Make the rows of ``x`` (copies of the server model) the clients' own models, in
        place: their kept columns are ``own``."""
        self.env.groups[self.kept].assign(x, own)

    def begin_round(self, ctx, state):
        clients = self.fed.sample(ctx.round, self.params.participation, ctx.plan.eligible)
        sent = self.env.groups[self.exchanged]
        y = self.fed.rows(self.fed.replicate(state["server"]), clients)
        self.personalize(y, self.fed.rows(state["own"], clients))
        sent.assign(y, self.fed.broadcast(sent.select(state["server"]), clients))
        return Work(y, clients)

    def end_round(self, ctx, state, work):
        self.fed.set_rows(state["own"], work.clients, self.env.groups[self.kept].select(work.y))
        self.upload(state, work.y, work.clients)

    def upload(self, state, trained: torch.Tensor, clients: torch.Tensor) -> None:
        """The clients upload the exchanged columns of ``trained``; the server steps."""
        sent, server = self.env.groups[self.exchanged], state["server"]
        delta = torch.zeros_like(server)
        sent.assign(delta, self.fed.aggregate(sent.select(trained) - sent.select(server),
                                              clients, self.weighting))
        self.server_step(state, delta)

    def personalized_models(self, state):
        x = self.fed.replicate(state["server"]).clone()
        self.personalize(x, state["own"])
        return x
