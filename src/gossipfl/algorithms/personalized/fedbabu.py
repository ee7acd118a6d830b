"""FedBABU — federated averaging with body aggregation and body update (Oh et al., ICLR 2022).

The head keeps its random initialization v^0, the same on every client, and never trains
(head lr 0); the body trains and is averaged as FedAvg:

    u_i ← K SGD steps on ∇_u F_i(u, v^0) from u^t,   u^{t+1} = u^t + η_g Σ p_i (u_i − u^t)

Personalized evaluation, following the official code as the DFedMDC paper does ("finally
fine-tunes the whole model … it fine-tunes 5 times"): every client fine-tunes the whole
global model (u^t, v^0) on its own data for ``finetune_epochs`` = 5 epochs of SGD (lr
``finetune_lr``, default ``train.lr``) before it is measured; the fine-tuned models are not
kept. We read "5 times" as 5 epochs and fine-tune at every evaluated round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import AT_LEAST_ONE, Phase
from gossipfl.algorithms.centralized.fedavg import ServerParams
from gossipfl.algorithms.personalized.fedrep import POSITIVE_OR_NONE
from gossipfl.algorithms.personalized.personal_server import PersonalServer


@dataclass
class FedBABUParams(ServerParams):
    finetune_epochs: int = 5
    finetune_lr: float | None = None  # None: train.lr
    rules: ClassVar = {"finetune_epochs": AT_LEAST_ONE, "finetune_lr": POSITIVE_OR_NONE}


@register
class FedBABU(PersonalServer):
    name = "fedbabu"
    paper = "Oh et al. 2022, FedBABU: Towards Enhanced Representation for Federated Image " \
            "Classification"
    Params = FedBABUParams
    exchanged = "shared"
    kept = "personal"  # the heads: v^0 on every client, never trained

    def phases(self):
        return [Phase("body", group="shared")]

    def finetune_phases(self):
        return [Phase("finetune", epochs=self.params.finetune_epochs,
                      lr=self.params.finetune_lr)]
