"""D-PSGD — decentralized parallel SGD (Lian et al., NeurIPS 2017).

Default (``variant: lian``), one stochastic gradient per round, taken at the pre-gossip
point, in parallel with the gossip:

    x_i^{t+1} = Σ_l w_{il} x_l^t − η_t (∇F_i(x_i^t; ξ_i^t) + wd·x_i^t)
    i.e.  X^{t+1} = W X^t − η_t G(X^t)

``variant: local_epoch`` is the DFedSAM paper's reading (App. B.3, "the training epoch in
D-PSGD is set to 1"; spec 001 §7.7): one local epoch of SGD, then gossip — DFedAvg with E = 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Hyperparams, one_of
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg
from gossipfl.algorithms.steps import gossip, sgd_direction

VARIANTS = ("lian", "local_epoch")


@dataclass
class DPSGDParams(Hyperparams):
    variant: str = "lian"
    rules: ClassVar = {"variant": one_of(*VARIANTS)}


@register
class DPSGD(DFedAvg):
    name = "dpsgd"
    paper = "Lian et al. 2017, Can Decentralized Algorithms Outperform Centralized Ones?"
    Params = DPSGDParams

    def local_work(self):
        return ("steps", 1) if self.params.variant == "lian" else ("epochs", 1)

    def local_step(self, t, y, batch, lr):
        if self.params.variant == "local_epoch":
            return super().local_step(t, y, batch, lr)
        loss, direction = sgd_direction(self.fed, y, batch)
        self.state["step"] = lr * direction  # applied after mixing the pre-step models
        return y, loss

    def end_round(self, t, y, lr):
        if self.params.variant == "local_epoch":
            self.state["x"], sent = gossip(self.fed, y, t, 1)
            return sent
        mixed, sent = gossip(self.fed, y, t, 1)
        self.state["x"] = mixed - self.state.pop("step")
        return sent
