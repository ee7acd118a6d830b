"""DFedAvgM — DFedAvg with local heavy-ball momentum (Sun, Li & Wang 2022, TPAMI).

Round t, every client i, with y_i^{t,0} = x_i^t and y_i^{t,−1} = y_i^{t,0} (momentum reset
every round):

    y_i^{t,k+1} = y_i^{t,k} − η_t d_i^{t,k} + θ (y_i^{t,k} − y_i^{t,k−1}),
        d_i^{t,k} = ∇F_i(y_i^{t,k}; ξ) + wd·y_i^{t,k}
    x_i^{t+1} = Σ_l w_{il} y_l^{t,K}

θ = 0.9 (DFedSAM paper B.3, following Sun et al. 2022): the local phase's momentum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import UNIT_INTERVAL, Phase
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg, GossipParams


@dataclass
class MomentumParams(GossipParams):
    momentum: float = 0.9  # θ
    rules: ClassVar = {"momentum": UNIT_INTERVAL}


@register
class DFedAvgM(DFedAvg):
    name = "dfedavgm"
    paper = "Sun, Li & Wang 2022, Decentralized Federated Averaging (TPAMI), DFedAvgM"
    Params = MomentumParams

    def phases(self):
        return [Phase(momentum=self.params.momentum)]
