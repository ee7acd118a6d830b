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
from gossipfl.algorithms.base import AT_LEAST_ONE, NON_NEGATIVE, Phase
from gossipfl.algorithms.centralized.fedavg import ServerParams
from gossipfl.algorithms.personalized.personal_server import PersonalServer
from gossipfl.algorithms.terms import prox, sgd


@dataclass
class DittoParams(ServerParams):
    lam: float = 0.75  # λ
    personal_epochs: int | None = None  # K_v; None: train.local_epochs
    rules: ClassVar = {"lam": NON_NEGATIVE,
                       "personal_epochs": AT_LEAST_ONE.or_none()}


@register
class Ditto(PersonalServer):
    name = "ditto"
    paper = "Li et al. 2021, Ditto: Fair and Robust Federated Learning Through Personalization"
    Params = DittoParams

    def phases(self):
        return [Phase("global"),
                Phase("personal", epochs=self.params.personal_epochs, begin=self.swap,
                      direction=sgd(prox(self.params.lam)))]

    def begin_round(self, ctx, state):
        work = super().begin_round(ctx, state)  # y = w^t
        own = self.fed.rows(state["own"], work.clients)
        return work.with_scratch(anchor=work.y.clone(), other=own)

    def swap(self, ctx, work):
        """Before the personal phase: the rows become v_i; "other" keeps the trained w_i."""
        trained = work.y.clone()
        work.y.copy_(work["other"])
        work["other"].copy_(trained)

    def end_round(self, ctx, state, work):
        self.fed.set_rows(state["own"], work.clients, work.y)  # v_i
        self.upload(state, work["other"], work.clients)  # w_i
