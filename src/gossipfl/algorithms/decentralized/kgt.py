"""K-GT — gradient tracking with K local steps (Liu, Lin, Koloskova & Stich, "Decentralized
gradient tracking with local steps", Optimization Methods & Software 2024; arXiv 2301.01313,
Algorithm 1).

Round t, every client i, with the correction c_i^t, client step η_c = η_t and the
"server-like" step η_s (``eta_s``):

    z_i^{t,0} = x_i^t
    z_i^{t,k+1} = z_i^{t,k} − η_c (∇F_i(z_i^{t,k}; ξ_i^{t,k}) + wd·z_i^{t,k} + c_i^t),  k < K
    y_i^t = (x_i^t − z_i^{t,K}) / (K η_c)                       (the round's mean direction)
    c_i^{t+1} = c_i^t − y_i^t + Σ_j w_ij y_j^t
    x_i^{t+1} = Σ_j w_ij (x_j^t − η_s K η_c y_j^t) = Σ_j w_ij (x_j^t + η_s (z_j^{t,K} − x_j^t))

c_i^0 = 0 (Σ_i c_i stays 0: the corrections move the clients' directions toward the network's
average without shifting it). K is the ``train`` section's local length (``local_steps``, or
``local_epochs`` of minibatches); where clients take different numbers of steps (unequal
data under epochs) K is each client's own count K_i, which keeps Σ_i c_i = 0.

With K = 1 and η_s = 1, y_i^t = g_i^t + c_i^t is a tracker of the average gradient and K-GT
is DSGT's ``atc`` form (Pu & Nedić): x^{t+1} = W(x^t − η y^t),
y^{t+1} = g^{t+1} + c^t + (W − I) y^t = W y^t + g^{t+1} − g^t, y^0 = g^0 (tests/algorithms/test_tracking.py).

Two vectors are gossiped per round (x − η_s K η_c y and y). Fully decentralized: no partial
participation; ``topology.order: sequential`` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import POSITIVE, Algorithm, Hyperparams, Phase, Work
from gossipfl.algorithms.terms import sgd, shift


@dataclass
class KGTParams(Hyperparams):
    eta_s: float = 1.0  # η_s, the step on the mixed round update
    rules: ClassVar = {"eta_s": POSITIVE}


@register
class KGT(Algorithm):
    name = "kgt"
    paper = "Liu, Lin, Koloskova & Stich 2024, Decentralized gradient tracking with local steps"
    Params = KGTParams
    client_state = ("x", "correction")
    gossip_channels = ("y", "x")  # y (the round's update direction), then x

    def phases(self):
        return [Phase(direction=sgd(shift("correction")))]

    def init(self, x0):
        state = super().init(x0)
        state["correction"] = torch.zeros_like(x0)
        return state

    def begin_round(self, ctx, state):
        return Work(state["x"].clone(), correction=state["correction"])

    def end_round(self, ctx, state, work):
        x = state["x"]
        steps = work.steps.clamp_min(1)  # K_i; a client without data has y_i = 0
        y = (x - work.y) / (steps * ctx.lr)
        state["correction"] = state["correction"] - y + self.fed.gossip(y, ctx.round, channel="y")
        state["x"] = self.fed.gossip(x + self.params.eta_s * (work.y - x), ctx.round)
