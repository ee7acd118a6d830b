"""FedRep — federated representation learning (Collins et al., ICML 2021), Algorithm 1.

Round t, sampled client i, body u^t from the server, its own head v_i:

    v_i ← τ_v epochs of SGD on ∇_v F_i(u^t, v)          body frozen
    u_i ← τ_u epochs of SGD on ∇_u F_i(u, v_i)          new head frozen, from u^t
    u^{t+1} = u^t + η_g Σ_{i∈S_t} p_i (u_i − u^t)        only bodies go to the server

τ_v = ``head_epochs`` = 10 and τ_u = ``train.local_epochs`` = 5, following the official code
as the DFedMDC paper does (§5.1); the head's lr ``head_lr`` defaults to ``train.lr`` (the
paper gives none). Client i's personalized model is (u^t, v_i), FedRep's own evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import AT_LEAST_ONE, POSITIVE, Phase
from gossipfl.algorithms.centralized.fedavg import ServerParams
from gossipfl.algorithms.personalized.personal_server import PersonalServer

POSITIVE_OR_NONE = POSITIVE.or_none()


@dataclass
class FedRepParams(ServerParams):
    head_epochs: int = 10  # τ_v
    head_lr: float | None = None  # None: train.lr
    rules: ClassVar = {"head_epochs": AT_LEAST_ONE, "head_lr": POSITIVE_OR_NONE}


@register
class FedRep(PersonalServer):
    name = "fedrep"
    paper = "Collins et al. 2021, Exploiting Shared Representations for Personalized FL"
    Params = FedRepParams
    exchanged = "shared"
    kept = "personal"

    def phases(self):
        return [Phase("head", epochs=self.params.head_epochs, lr=self.params.head_lr,
                      group="personal"),
                Phase("body", group="shared")]
