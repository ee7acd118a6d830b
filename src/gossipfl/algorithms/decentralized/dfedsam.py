"""DFedSAM and DFedSAM-MGS (Shi et al., "Improving the Model Consistency of Decentralized
Federated Learning", ICML 2023).

Round t, every client i, y_i^{t,0} = x_i^t, k = 0..K−1, one minibatch ξ per step:

    g = ∇F_i(y^{t,k}; ξ),  δ = ρ g / ‖g‖₂,  g̃ = ∇F_i(y^{t,k} + δ; ξ)
    y^{t,k+1} = y^{t,k} − η (g̃ + wd·y^{t,k})
    z_i^t = y_i^{t,K};  X^{t+1} = W^Q Z^t            (DFedSAM: Q = 1; MGS: Q gossip steps)

ρ = 0.01 (paper's grid search, App. B.3); MGS Q = 4 ("we choose Q = 4"). Each of the Q steps
is an exchange with the neighbours, so bytes sent count Q exchanges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import NON_NEGATIVE, Phase
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg, GossipParams


@dataclass
class SAMParams(GossipParams):
    rho: float = 0.01  # ρ, SAM radius
    rules: ClassVar = {"rho": NON_NEGATIVE}


@dataclass
class MGSParams(SAMParams):
    gossip_steps: int = 4  # Q


@register
class DFedSAM(DFedAvg):
    name = "dfedsam"
    paper = "Shi et al. 2023, Improving the Model Consistency of Decentralized FL (ICML)"
    Params = SAMParams

    def phases(self):
        return [Phase(rho=self.params.rho)]


@register
class DFedSAMMGS(DFedSAM):
    name = "dfedsam_mgs"
    paper = DFedSAM.paper + ", multiple gossip steps"
    Params = MGSParams
