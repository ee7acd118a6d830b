"""OledFL — opposite lookahead enhancement for decentralized FL (Li et al. 2024, "OledFL:
Unleashing the Potential of Decentralized Federated Learning via Opposite Lookahead
Enhancement").

Algorithm 1, every client i, round t (x_{i,K}^{−1} = x_i^0, so round 0 has no extrapolation):

    x_{i,0}^t = x_i^t + β (x_i^t − x_{i,K}^{t−1})        Ole: the client's OWN last local model
    k = 0..K−1:  g₁ = ∇f_i(x_{i,k}; ε),  x̃ = x_{i,k} + λ g₁/‖g₁‖,  g = ∇f_i(x̃; ε)
                 x_{i,k+1} = x_{i,k} − η (g + wd·x_{i,k})
    z_i^t = x_{i,K}^t;   x_i^{t+1} = Σ_j w_ij z_j^t

OledFL-SAM: λ = 0.1 (paper); OledFL-SGD: λ = 0. β = 0.99 (CIFAR-10) / 0.8 (CIFAR-100).
β = 0 gives DFedSAM (λ > 0) or DFedAvg (λ = 0). Equivalent to mixing with (1+β)W − βI,
which can diverge on poorly connected graphs: see :mod:`gossipfl.algorithms.stability`.

The order matters. The authors' code (public DFedCata code with λ_prox = 0) loops over the
clients and writes each result back in place (``topology.order: sequential``); Ole is then an
SOR sweep with ω = 1+β, stable for every β < 1, where the synchronous form above needs W
nearly positive semidefinite. On the authors' random graph (docs/results/, section 5; 100
rounds, 3 seeds) OledFL-SGD at β = 0.99 reaches 88.2 % sequentially vs DFedAvg's 86.5 %, but
83.3 % synchronously vs 85.3 %: the paper's advantage needs the sequential order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import NON_NEGATIVE, UNIT_INTERVAL, Phase, Work
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg, GossipParams
from gossipfl.algorithms.stability import stability_messages
from gossipfl.algorithms.terms import extrapolate


@dataclass
class OledParams(GossipParams):
    beta: float = 0.99  # β, Ole coefficient
    lam: float = 0.1  # λ, SAM perturbation weight (0 = OledFL-SGD)
    rules: ClassVar = {"beta": UNIT_INTERVAL, "lam": NON_NEGATIVE}


@register
class OledFL(DFedAvg):
    name = "oledfl"
    paper = "Li et al. 2024, OledFL: Unleashing the Potential of Decentralized FL via Opposite Lookahead Enhancement"
    Params = OledParams
    client_state = ("x", "last_local")

    def check(self, topology, order="synchronous"):
        return stability_messages(topology, self.params.beta, "ole", order)

    def phases(self):
        return [Phase(rho=self.params.lam)]

    def init(self, x0):
        state = super().init(x0)
        state["last_local"] = x0.clone()  # x_{i,K}^{-1} = x_i^0
        return state

    def begin_round(self, ctx, state):
        return Work(extrapolate(state["x"], state["last_local"], self.params.beta))

    def keep(self, ctx, state, work):
        state["last_local"] = work.y.clone()
