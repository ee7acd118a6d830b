"""FedSAM — FedAvg with SAM as the local optimizer (Qu et al., ICML 2022; Caldarola et al.).

As :mod:`fedavg`, with each local step the SAM step of
:func:`~gossipfl.algorithms.terms.sam_gradient` (one minibatch ξ per step):

    g = ∇F_i(y; ξ),   ỹ = y + ρ g / ‖g‖₂,   y ← y − η (∇F_i(ỹ; ξ) + wd·y)
    x^{t+1} = x^t + η_g Σ_{i∈S_t} p_i (y_i^{t,K} − x^t)

ρ = 0.1 (DFedCata paper's common setting; the DFedSAM paper gives none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import NON_NEGATIVE, Phase
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm, ServerParams


@dataclass
class FedSAMParams(ServerParams):
    rho: float = 0.1  # ρ, SAM radius
    rules: ClassVar = {"rho": NON_NEGATIVE}


@register
class FedSAM(ServerAlgorithm):
    name = "fedsam"
    paper = "Qu et al. 2022, Generalized Federated Learning via Sharpness Aware Minimization"
    Params = FedSAMParams

    def phases(self):
        return [Phase(rho=self.params.rho)]
