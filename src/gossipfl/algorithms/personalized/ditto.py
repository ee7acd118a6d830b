"""Ditto — fair and robust federated learning through personalization (Li et al., ICML
2021), Algorithm 1.

Round t, the server samples S_t and sends w^t; every i ∈ S_t, on its own data:

    w_i ← K local SGD steps on F_i from w^t                         (the global model's update)
    v_i ← K_v local SGD steps on F_i(v) + (λ/2)‖v − w^t‖² from v_i   (its personal model)
          v ← v − η (∇F_i(v; ξ) + wd·v + λ (v − w^t))
    w^{t+1} = w^t + η_g Σ_{i∈S_t} p_i (w_i − w^t)

λ = 0.75 (DFedMDC paper, §5.1); K_v = ``personal_epochs`` (None: ``train.local_epochs``; the
paper gives none). Client i's personalized model is v_i (v_i^0 = x^0); clients not sampled
keep theirs (Ditto's Algorithm 1 updates the selected devices only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import AT_LEAST_ONE, NON_NEGATIVE, Phase, Rule, Work
from gossipfl.algorithms.centralized.fedavg import ServerParams
from gossipfl.algorithms.personalized.personal_server import PersonalServer


@dataclass
class DittoParams(ServerParams):
    lam: float = 0.75  # λ
    personal_epochs: int | None = None  # K_v; None: train.local_epochs
    rules: ClassVar = {"lam": NON_NEGATIVE,
                       "personal_epochs": Rule(lambda v: v is None or AT_LEAST_ONE.holds(v),
                                               "an integer >= 1 or null")}


@register
class Ditto(PersonalServer):
    name = "ditto"
    paper = "Li et al. 2021, Ditto: Fair and Robust Federated Learning Through Personalization"
    Params = DittoParams

    def phases(self):
        return [Phase("global"), Phase("personal", epochs=self.params.personal_epochs)]

    def begin_round(self, ctx):
        work = super().begin_round(ctx)  # y = w^t
        own = self.fed.rows(self.state["own"], work.clients)
        return Work(work.y, work.clients, anchor=work.y.clone(), other=own)

    def begin_phase(self, ctx, work):
        if ctx.phase.name == "personal":  # "other": v_i before, then the trained w_i
            trained = work.y.clone()
            work.y.copy_(work["other"])
            work["other"].copy_(trained)

    def direction(self, ctx, work, batch):
        loss, direction = super().direction(ctx, work, batch)
        if ctx.phase.name == "personal":
            direction = direction + self.params.lam * (work.y - work["anchor"])
        return loss, direction

    def end_round(self, ctx, work):
        self.fed.set_rows(self.state["own"], work.clients, work.y)  # v_i
        self.upload(work["other"], work.clients)  # w_i
