"""FedAvg and FedSAM evaluated with the personalized protocol, as the DFedMDC paper's
baselines (§5.1): "the local model in FedAvg is also the comparable personalized model for
each client".

FedAvg (McMahan et al. 2017): each sampled client runs K local SGD steps from x^t; FedSAM:
the same with SAM local steps (ρ = 0.7, the DFedMDC paper's setting):

    FedAvg:  y ← y − η (∇F_i(y; ξ) + wd·y)
    FedSAM:  g = ∇F_i(y; ξ),   y ← y − η (∇F_i(y + ρ g / ‖g‖₂; ξ) + wd·y)
    x^{t+1} = x^t + η_g Σ_{i∈S_t} p_i (y_i^{t,K} − x^t),   personalized model of i: y_i^{t,K}

Client i's personalized model is its latest locally trained y_i (X^0 before its first
round), as in the DisPFL code base the paper builds on
(:class:`~gossipfl.algorithms.personalized.personal_server.PersonalServer` with
``exchanged = kept = all``).
"""

from __future__ import annotations

from dataclasses import dataclass

from gossipfl.algorithms import register
from gossipfl.algorithms.centralized.fedavg import FedAvg
from gossipfl.algorithms.centralized.fedsam import FedSAM, FedSAMParams
from gossipfl.algorithms.personalized.personal_server import PersonalServer


@dataclass
class PersonalFedSAMParams(FedSAMParams):
    rho: float = 0.7  # ρ (DFedMDC paper, §5.1)


@register
class FedAvgPersonal(PersonalServer, FedAvg):
    name = "fedavg_personal"
    paper = FedAvg.paper + "; personalized: each client's latest local model"


@register
class FedSAMPersonal(PersonalServer, FedSAM):
    name = "fedsam_personal"
    paper = FedSAM.paper + "; personalized: each client's latest local model"
    Params = PersonalFedSAMParams
