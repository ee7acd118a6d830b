"""DFedAvg — decentralized FedAvg (Sun, Li & Wang, "Decentralized Federated Averaging",
IEEE TPAMI 2022); the baseline of the DFedSAM, OledFL and DFedCata papers.

Round t, every client i (all in parallel), with y_i^{t,0} = x_i^t:

    y_i^{t,k+1} = y_i^{t,k} − η_t (∇F_i(y_i^{t,k}; ξ_i^{t,k}) + wd·y_i^{t,k}),  k = 0..K−1
    z_i^t = y_i^{t,K}
    x_i^{t+1} = Σ_l w_{il} z_l^t          (Q = ``gossip_steps`` times: X^{t+1} = W^Q Z^t)

Synchronous train-then-gossip as in the papers' algorithm boxes. With
``topology.order: sequential`` (the authors' in-place client loop, gossipfl.schedules.sequential) client
i mixes the current rows Σ_l w_{il} z_l, already replaced for l < i, and then trains; defined
for one gossip step only (Q = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import AT_LEAST_ONE, Algorithm, Hyperparams


@dataclass
class GossipParams(Hyperparams):
    gossip_steps: int = 1  # Q: multiplications by the round's W after local training
    rules: ClassVar = {"gossip_steps": AT_LEAST_ONE}


@register
class DFedAvg(Algorithm):
    name = "dfedavg"
    paper = "Sun, Li & Wang 2022, Decentralized Federated Averaging (TPAMI)"
    Params = GossipParams
    orders = ("synchronous", "sequential")

    def gossip_steps(self) -> int:
        """Q, the multiplications by the round's W after local training."""
        return self.params.gossip_steps

    def order_conflict(self, order):
        steps = self.gossip_steps()
        if order == "sequential" and steps != 1:  # it mixes each row once, in place
            return "gossip_steps", {"steps": steps}
        return super().order_conflict(order)

    def end_round(self, ctx, state, work):
        self.keep(ctx, state, work)
        # x^t is not read again: let go of it first, so that on the CPU its buffer can take
        # W^Q Z^t when nothing else holds it (gossipfl.engine.recycle)
        del state["x"]
        state["x"] = self.fed.gossip(work.y, ctx.round, self.gossip_steps())
