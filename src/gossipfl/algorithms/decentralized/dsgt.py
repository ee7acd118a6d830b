"""DSGT — distributed stochastic gradient tracking (Pu & Nedić, "Distributed stochastic
gradient tracking methods", Mathematical Programming 187, 2021).

Every client i keeps a tracker y_i of the average gradient (1/M) Σ_j ∇f_j. Round k, with
g_i^k = ∇F_i(x_i^k; ξ_i^k) + wd·x_i^k (one stochastic gradient per round) and α = η_k:

    form: atc (default; the paper's eq. (3), adapt then combine):
        x_i^{k+1} = Σ_j w_ij (x_j^k − α y_j^k)
    form: cta (combine then adapt; DIGing, Nedić, Olshevsky & Shi 2017, stochastic):
        x_i^{k+1} = Σ_j w_ij x_j^k − α y_i^k
    both:
        y_i^{k+1} = Σ_j w_ij y_j^k + g_i^{k+1} − g_i^k,       y_i^0 = g_i^0

Sources differ on where the tracker mixes: Pu & Nedić combine y before adding the gradient
difference (above, in both forms here); Aug-DGM (Xu et al. 2015) mixes y_j + g_j^{k+1} − g_j^k
instead. Here "form" is the model update's order only; the tracker is always Pu & Nedić's.

The state keeps one vector per client besides x: ``tracker`` = Σ_j w_ij y_j^{k−1} − g_i^{k−1}
(0 at the start), so that y_i^k = tracker_i + g_i^k (y_i^0 = g_i^0) and the previous gradient
need not be stored apart; a checkpoint holds it and resumes exactly. Each round gossips two
vectors (x or x − α y, and y).

One stochastic gradient per round, as in the paper: ``train.local_steps`` and
``train.local_epochs`` are not read (K local steps with tracking is ``kgt``). Fully
decentralized: no partial participation; ``topology.order: sequential`` is refused (the
gradient is taken at the pre-gossip point, as D-PSGD's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Algorithm, Hyperparams, Phase, Work, one_of
from gossipfl.algorithms.terms import phase_direction, pure

FORMS = ("atc", "cta")


@dataclass
class DSGTParams(Hyperparams):
    form: str = "atc"
    rules: ClassVar = {"form": one_of(*FORMS)}


def gradient_into(key: str):
    """A phase update that stores the step's direction g (gradient + weight decay) in
    ``work[key]`` and leaves the rows where they are (the model moves in ``end_round``)."""

    @pure
    def update(ctx, work, batch):
        loss, direction = phase_direction(ctx, work, batch)
        work[key][: len(work)].copy_(direction)
        return loss

    return update


@register
class DSGT(Algorithm):
    name = "dsgt"
    paper = "Pu & Nedić 2021, Distributed stochastic gradient tracking methods (Math. Prog.)"
    Params = DSGTParams
    client_state = ("x", "tracker")
    gossip_channels = ("x", "tracker")

    def phases(self):
        return [Phase(steps=1, update=gradient_into("gradient"))]

    def init(self, x0):
        state = super().init(x0)
        state["tracker"] = torch.zeros_like(x0)  # Σ_j w_ij y_j^{-1} − g_i^{-1} = 0: y^0 = g^0
        return state

    def begin_round(self, ctx, state):
        x = state["x"]
        return Work(x.clone(), gradient=torch.zeros_like(x))

    def end_round(self, ctx, state, work):
        x, g = work.y, work["gradient"]
        y = state["tracker"] + g  # y^k
        if self.params.form == "atc":
            state["x"] = self.fed.gossip(x - ctx.lr * y, ctx.round)
        else:
            state["x"] = self.fed.gossip(x, ctx.round) - ctx.lr * y
        state["tracker"] = self.fed.gossip(y, ctx.round, channel="tracker") - g
