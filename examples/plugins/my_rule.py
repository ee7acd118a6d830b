"""A robust rule of one's own (docs/design.md, "Adding a piece"): the distance filter, with a
parameter of its own.

Receiver i keeps the messages within a distance ρ of its own model and averages them with its
mixing weights, renormalized over what it keeps:

    K_i = {j ∈ {i} ∪ N_i : ‖m_{j→i} − z_i‖₂ ≤ ρ},    x_i = Σ_{j∈K_i} w_ij m_{j→i} / Σ_{j∈K_i} w_ij

(i ∈ K_i always, its distance being 0). ρ = ∞ is plain gossip, Σ_j w_ij m_{j→i}; a small ρ
keeps a receiver at home. A screening rule by distance, as BRIDGE's rules screen by value
(Yang & Bajwa 2019); an example, not a paper's rule. The parameter is declared once, in
``Params`` (its type, default and rule), so a config sets it beside the rule's name, checked
before training (``topology.robust.radius: must be > 0, got 0.``):

    topology: {robust: {rule: distance_filter, radius: 2.0}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.plugins import Params
from gossipfl.trust import RobustRule, register_rule
from gossipfl.validation import POSITIVE


@register_rule
class DistanceFilter(RobustRule):
    name, paper = "distance_filter", "the weighted mean of the messages within ρ of z_i"

    @dataclass(frozen=True)
    class Params(Params):
        radius: float = 1.0  # ρ
        rules: ClassVar = {"radius": POSITIVE}

    def aggregate(self, messages, weights, byzantine=None):
        # messages [n, d + 1, P] (column 0: the receiver's own), weights [n, d + 1]
        distance = torch.linalg.vector_norm(messages - messages[:, :1], dim=2)
        kept = weights * (distance <= self.radius)
        mixed = torch.bmm(kept.unsqueeze(1), messages).squeeze(1)
        return mixed / kept.sum(dim=1, keepdim=True)
