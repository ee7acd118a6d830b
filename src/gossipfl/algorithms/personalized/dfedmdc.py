"""DFedMDC and DFedSMDC — personalized decentralized FL by model decoupling (Shi et al.,
"Enhancing Personal Decentralized Federated Learning through Model Decoupling"; arXiv
2305.15157 names them DFedAlt / DFedSalt), Algorithm 1.

Client i holds a shared body u_i (every layer but the classifier) and a personal head v_i
(the ``personal`` group: the classifier). Round t, every client in parallel:

    v_i^{t,k+1} = v_i^{t,k} − η_v ∇_v F_i(u_i^t, v_i^{t,k}; ξ)          K_v head steps, body frozen
    v_i^{t+1}   = v_i^{t,K_v}
    u_i^{t,k+1} = u_i^{t,k} − η_u ∇_u F_i(u_i^{t,k}, v_i^{t+1}; ξ)      K_u body steps, head frozen
                  (Option I, DFedMDC)
    u_i^{t,k+1} = u_i^{t,k} − η_u ∇_u F_i(u_i^{t,k} + ε, v_i^{t+1}; ξ),
                  ε = ρ ∇_u F_i(u_i^{t,k}, v_i^{t+1}; ξ) / ‖∇_u F_i(·)‖₂   (Option II, DFedSMDC)
    u_i^{t+1}   = Σ_l w_il u_l^{t,K_u}                                   only the body is sent

(the box's mixing line prints z_i; the prose and the proofs, U^{t+1} = W Z^t, mean z_l). The
SAM norm is over the body gradient only and both gradients use the same minibatch. Each
phase is a fresh heavy-ball SGD (momentum 0.9 in the experiments, reset every phase and
round); wd and the per-round lr decay come from the ``train`` section.

Paper defaults (App. B.2): η_v = ``head_lr`` = 0.001; η_u = ``train.lr`` = 0.1; K_v =
``head_epochs`` = 1 epoch (Dirichlet) / 5 (pathological); K_u = ``train.local_epochs`` = 5;
ρ = 0.7. ``head_steps`` counts K_v in steps instead (then ``head_epochs`` stays at its
default): the paper's one head epoch is 4 steps of its 500-sample clients, so a setting with
larger clients keeps the paper's number of head updates with ``head_steps`` rather than an
epoch of many more steps. The ablation of Table 4 places SAM on the body (``sam: body``,
DFedSMDC-U, the default), the head (``head``, -V: v ← v − η_v ∇_v F_i(u, v + ρ g_v/‖g_v‖))
or both (``both``, -UV).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import (
    AT_LEAST_ONE,
    NON_NEGATIVE,
    POSITIVE,
    UNIT_INTERVAL,
    Algorithm,
    Phase,
    one_of,
)
from gossipfl.algorithms.decentralized.dfedavg import GossipParams
from gossipfl.errors import GossipflError

SAM_PLACES = ("body", "head", "both")


@dataclass
class DFedMDCParams(GossipParams):
    head_lr: float = 0.001  # η_v
    head_epochs: int = 1  # K_v in epochs
    head_steps: int | None = None  # K_v in steps instead (set: head_epochs is not used)
    momentum: float = 0.9  # local momentum of both phases
    rules: ClassVar = {"head_lr": POSITIVE, "head_epochs": AT_LEAST_ONE,
                       "head_steps": AT_LEAST_ONE.or_none(), "momentum": UNIT_INTERVAL}

    def validate(self) -> None:
        super().validate()
        if self.head_steps is not None and self.head_epochs != 1:
            raise GossipflError(f"algorithm.head_steps: set it or algorithm.head_epochs, not "
                                f"both (got head_steps {self.head_steps}, head_epochs "
                                f"{self.head_epochs}).")


@dataclass
class DFedSMDCParams(DFedMDCParams):
    rho: float = 0.7  # ρ
    sam: str = "body"  # where SAM applies: body (-U), head (-V), both (-UV)
    rules: ClassVar = {"rho": NON_NEGATIVE, "sam": one_of(*SAM_PLACES)}


@register
class DFedMDC(Algorithm):
    name = "dfedmdc"
    paper = "Shi et al., Enhancing Personal Decentralized FL through Model Decoupling (DFedMDC)"
    Params = DFedMDCParams
    evaluations = ("average", "local", "personalized")

    def rho(self, part: str) -> float:
        """SAM radius of the ``body`` or ``head`` phase (0: plain SGD)."""
        return 0.0

    def phases(self):
        p = self.params
        length = {"epochs": p.head_epochs} if p.head_steps is None else {"steps": p.head_steps}
        return [Phase("head", **length, lr=p.head_lr, group="personal",
                      momentum=p.momentum, rho=self.rho("head")),
                Phase("body", group="shared", momentum=p.momentum, rho=self.rho("body"))]

    def end_round(self, ctx, state, work):
        state["x"] = self.fed.gossip(work.y, ctx.round, self.params.gossip_steps, group="shared")


@register
class DFedSMDC(DFedMDC):
    name = "dfedsmdc"
    paper = "Shi et al., Enhancing Personal Decentralized FL through Model Decoupling (DFedSMDC)"
    Params = DFedSMDCParams

    def rho(self, part):
        return self.params.rho if self.params.sam in (part, "both") else 0.0
