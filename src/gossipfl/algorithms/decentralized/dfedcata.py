"""DFedCata — Catalyst acceleration for decentralized FL (Li et al. 2024, "Boosting the
Performance of Decentralized Federated Learning via Catalyst Acceleration").

Algorithm 1, every client i, round t (x_i^{−1} = x_i^0: no extrapolation at round 0):

    x_{i,0}^t = x_i^t + β (x_i^t − x_i^{t−1})                Nesterov step, previous MIXED model
    k = 0..K−1:  x_{i,k+1} = x_{i,k} − η (g_{i,k} + wd·x_{i,k} + λ (x_{i,k} − x_{i,0}^t))
                 (SGD on the Moreau-envelope objective f_i(x) + λ/2 ‖x − x_{i,0}^t‖²)
    x_i^{t+1} = Σ_j w_ij x_{j,K}^t

β = 0.99, λ = 0.05 (ablation best; code default). Special cases (paper Table V): λ = 0 is
Nesterov only, β = 0 Moreau envelope only (decentralized FedProx), λ = β = 0 DFedAvg.
``extrapolation_ref: own_local`` is the public code's reading, x_i^t + β (x_i^t − x_{i,K}^{t−1})
(the client's own pre-aggregation model, as OledFL's Ole).

The order matters (``topology.order``; docs/results/, section 5, 100 rounds, 3 seeds, the
authors' random graph): the paper's prev_mixed step is stable synchronously (88.3 % vs
DFedAvg's 85.3 %) but diverges in the authors' sequential in-place loop (its gradient-free
sweep grows disagreement 2.4× per round); the code's own_local step needs the sequential order
(88.1 % vs 86.5 %; synchronously 83.3 %).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import NON_NEGATIVE, UNIT_INTERVAL, Phase, Work, one_of
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg, GossipParams
from gossipfl.algorithms.stability import stability_messages
from gossipfl.algorithms.terms import extrapolate, prox, sgd

REFERENCES = ("prev_mixed", "own_local")


@dataclass
class CataParams(GossipParams):
    beta: float = 0.99  # β, extrapolation
    lam: float = 0.05  # λ, proximal (Moreau envelope) coefficient
    extrapolation_ref: str = "prev_mixed"
    rules: ClassVar = {"beta": UNIT_INTERVAL, "lam": NON_NEGATIVE,
                       "extrapolation_ref": one_of(*REFERENCES)}


@register
class DFedCata(DFedAvg):
    name = "dfedcata"
    paper = "Li et al. 2024, Boosting the Performance of Decentralized FL via Catalyst Acceleration"
    Params = CataParams
    client_state = ("x", "reference")

    def check(self, topology, order="synchronous"):
        own_local = self.params.extrapolation_ref == "own_local"
        return stability_messages(topology, self.params.beta,
                                  "ole" if own_local else "catalyst", order)

    def phases(self):
        return [Phase(direction=sgd(prox(self.params.lam, "anchor", skip_zero=True)))]

    def init(self, x0):
        state = super().init(x0)
        state["reference"] = x0.clone()  # x_i^{-1} = x_i^0 (or x_{i,K}^{-1} = x_i^0)
        return state

    def begin_round(self, ctx, state):
        anchor = extrapolate(state["x"], state["reference"], self.params.beta)
        return Work(anchor.clone(), anchor=anchor)

    def keep(self, ctx, state, work):
        own_local = self.params.extrapolation_ref == "own_local"
        state["reference"] = work.y.clone() if own_local else state["x"]
