"""QG-DSGDm — quasi-global momentum, heavy-ball form (Lin, Karimireddy, Stich & Jaggi, ICML
2021, "Quasi-Global Momentum: Accelerating Decentralized Deep Learning on Heterogeneous
Data", Algorithm 1).

Round t, every client i, with β = ``momentum``, η = η_t and the momentum buffer m_i
(m_i^{−1} = 0):

    g_i^t       = ∇F_i(x_i^t; ξ_i^t) + wd·x_i^t
    x_i^{t+½}   = x_i^t − η (β m_i^{t−1} + g_i^t)          (heavy ball on the quasi-global m)
    x_i^{t+1}   = Σ_j w_ij x_j^{t+½}
    d_i^t       = (x_i^t − x_i^{t+1}) / η                   (the model's change over the round,
                                                             gossip included)
    m_i^t       = β m_i^{t−1} + (1 − β) d_i^t

The buffer is built from the model difference after gossip rather than from the local
gradient, so it approximates the global direction on heterogeneous data. The paper writes the
buffer update with the factor (1 − β); the authors' code has a separate factor (0.1 by
default, i.e. 1 − β for their β = 0.9): here it is 1 − β. β = 0 is DSGD
(x^{t+1} = W(x^t − η g^t), DFedAvg with one step). The Nesterov variant (QG-DSGDm-N) is not
implemented.

One stochastic gradient per round, as in the paper (its DSGD gossips after every step):
``train.local_steps`` / ``train.local_epochs`` are not read, nor is ``train.momentum`` (the
momentum is β). Fully decentralized: no partial participation; ``topology.order: sequential``
is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import UNIT_INTERVAL, Algorithm, Hyperparams, Phase, Work
from gossipfl.algorithms.terms import sgd, shift


@dataclass
class QGMParams(Hyperparams):
    momentum: float = 0.9  # β
    rules: ClassVar = {"momentum": UNIT_INTERVAL}


@register
class QGM(Algorithm):
    name = "qgm"
    paper = ("Lin, Karimireddy, Stich & Jaggi 2021, Quasi-Global Momentum: Accelerating "
             "Decentralized Deep Learning on Heterogeneous Data")
    Params = QGMParams
    client_state = ("x", "buffer")

    def phases(self):
        beta = self.params.momentum
        return [Phase(steps=1, momentum=0.0,
                      direction=sgd(shift("buffer", beta)))]

    def init(self, x0):
        state = super().init(x0)
        state["buffer"] = torch.zeros_like(x0)
        return state

    def begin_round(self, ctx, state):
        return Work(state["x"].clone(), buffer=state["buffer"])

    def end_round(self, ctx, state, work):
        beta, x = self.params.momentum, state["x"]
        mixed = self.fed.gossip(work.y, ctx.round)
        state["buffer"] = beta * state["buffer"] + (1 - beta) / ctx.lr * (x - mixed)
        state["x"] = mixed
