"""D-PSGD — decentralized parallel SGD (Lian et al., NeurIPS 2017).

Default (``variant: lian``), one stochastic gradient per round, taken at the pre-gossip
point, in parallel with the gossip:

    x_i^{t+1} = Σ_l w_{il} x_l^t − η_t (∇F_i(x_i^t; ξ_i^t) + wd·x_i^t)
    i.e.  X^{t+1} = W X^t − η_t G(X^t)

``variant: local_epoch`` is the DFedSAM paper's reading (App. B.3, "the training epoch in
D-PSGD is set to 1"): one local epoch of SGD, then gossip — DFedAvg with E = 1.

``topology.order: sequential`` is refused for ``lian``: its gradient is taken at the
pre-gossip point, in parallel with the gossip, so there is no "mix, then train" step to run
client by client; ``local_epoch`` runs sequentially as DFedAvg does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Hyperparams, Phase, Work, one_of
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg
from gossipfl.algorithms.terms import phase_direction, pure

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

    @property
    def lian(self) -> bool:
        return self.params.variant == "lian"

    def gossip_steps(self):
        return 1

    def phases(self):
        if self.lian:  # the step is taken after mixing the pre-step models
            return [Phase(steps=1, update=self.gradient_step)]
        return [Phase(epochs=1)]

    def order_conflict(self, order):
        if order == "sequential" and self.lian:  # its gradient at the pre-gossip point
            return "pre_gossip_gradient", {}
        return super().order_conflict(order)

    def begin_round(self, ctx, state):
        x = state["x"]
        return Work(x.clone(), step=torch.zeros_like(x)) if self.lian else Work(x.clone())

    @pure
    def gradient_step(self, ctx, work, batch):
        """η_t (∇F_i(x_i^t; ξ) + wd·x_i^t), kept for after the gossip; x stays."""
        loss, direction = phase_direction(ctx, work, batch)
        work["step"].copy_(ctx.lr * direction)
        return loss

    def end_round(self, ctx, state, work):
        # x^t is not read again: let go of it, so that on the CPU its buffer can take W x^t
        # (gossipfl.engine.recycle); the step is subtracted in place, so that no freed
        # product waits there through the next round
        del state["x"]
        mixed = self.fed.gossip(work.y, ctx.round)
        state["x"] = mixed.sub_(work["step"]) if self.lian else mixed
