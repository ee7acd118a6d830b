"""FedPer — federated learning with personalization layers (Arivazhagan et al. 2019), as the
DFedMDC paper runs it (§5.1): "the linear layer as the personalized layer and the rest model
as the base layer. It follows FedAvg's training paradigm but only passes the base layer to
the server and keeps the personalized layer locally."

Round t, sampled client i starts from (u^t, v_i) and trains body and head jointly, K local
SGD steps on F_i(u, v); it keeps v_i and uploads its body; the server averages the bodies:

    (u_i, v_i) ← K steps of SGD from (u^t, v_i),   u^{t+1} = u^t + η_g Σ p_i (u_i − u^t)

Client i's personalized model is (u^t, v_i).
"""

from __future__ import annotations

from gossipfl.algorithms import register
from gossipfl.algorithms.personalized.personal_server import PersonalServer


@register
class FedPer(PersonalServer):
    name = "fedper"
    paper = "Arivazhagan et al. 2019, Federated Learning with Personalization Layers"
    exchanged = "shared"
    kept = "personal"
