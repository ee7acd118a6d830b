"""DFedAvgM — DFedAvg with local heavy-ball momentum (Sun, Li & Wang 2022, TPAMI).

Round t, every client i, with y_i^{t,0} = x_i^t and y_i^{t,−1} = y_i^{t,0} (momentum reset
every round):

    y_i^{t,k+1} = y_i^{t,k} − η_t d_i^{t,k} + θ (y_i^{t,k} − y_i^{t,k−1}),
        d_i^{t,k} = ∇F_i(y_i^{t,k}; ξ) + wd·y_i^{t,k}
    x_i^{t+1} = Σ_l w_{il} y_l^{t,K}

θ = 0.9 (DFedSAM paper B.3, following Sun et al. 2022).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import UNIT_INTERVAL
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg, GossipParams
from gossipfl.algorithms.steps import heavy_ball_step


@dataclass
class MomentumParams(GossipParams):
    momentum: float = 0.9  # θ
    rules: ClassVar = {"momentum": UNIT_INTERVAL}


@register
class DFedAvgM(DFedAvg):
    name = "dfedavgm"
    paper = "Sun, Li & Wang 2022, Decentralized Federated Averaging (TPAMI), DFedAvgM"
    Params = MomentumParams

    def begin_round(self, t):
        self.state["velocity"] = torch.zeros_like(self.state["x"])  # y^{t,-1} = y^{t,0}
        return super().begin_round(t)

    def init(self, x0):
        super().init(x0)
        self.state["velocity"] = torch.zeros_like(x0)

    def local_step(self, t, y, batch, lr):
        loss, direction = self.local_direction(y, batch)
        y, self.state["velocity"] = heavy_ball_step(
            y, self.state["velocity"], direction, lr, self.params.momentum, batch.active)
        return y, loss
