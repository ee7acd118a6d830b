"""DFedAvg — decentralized FedAvg (Sun, Li & Wang, "Decentralized Federated Averaging",
IEEE TPAMI 2022); the baseline of the DFedSAM, OledFL and DFedCata papers.

Round t, every client i (all in parallel), with y_i^{t,0} = x_i^t:

    y_i^{t,k+1} = y_i^{t,k} − η_t (∇F_i(y_i^{t,k}; ξ_i^{t,k}) + wd·y_i^{t,k}),  k = 0..K−1
    z_i^t = y_i^{t,K}
    x_i^{t+1} = Σ_l w_{il} z_l^t          (Q = ``gossip_steps`` times: X^{t+1} = W^Q Z^t)

Synchronous train-then-gossip as in the papers' algorithm boxes (DESIGN.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import AT_LEAST_ONE, Algorithm, Batch, Hyperparams
from gossipfl.algorithms.steps import descend, gossip, sgd_direction


@dataclass
class GossipParams(Hyperparams):
    gossip_steps: int = 1  # Q: multiplications by the round's W after local training
    rules: ClassVar = {"gossip_steps": AT_LEAST_ONE}


@register
class DFedAvg(Algorithm):
    name = "dfedavg"
    paper = "Sun, Li & Wang 2022, Decentralized Federated Averaging (TPAMI)"
    Params = GossipParams

    def local_direction(self, y: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and descent direction at ``y`` (plain SGD; SAM variants override this)."""
        return sgd_direction(self.fed, y, batch)

    def local_step(self, t, y, batch, lr):
        loss, direction = self.local_direction(y, batch)
        return descend(y, direction, lr, batch.active), loss

    def end_round(self, t, y, lr):
        self.state["x"], sent = gossip(self.fed, y, t, self.params.gossip_steps)
        return sent
