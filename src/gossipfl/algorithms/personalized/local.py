"""Local — every client trains alone and communicates nothing (the DFedMDC paper's "Local"
baseline: "only trains the personalized model on the local data and does not communicate
with other clients"; 5 local epochs per round).

    x_i^{t+1} = K local SGD steps from x_i^t
"""

from __future__ import annotations

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Algorithm


@register
class Local(Algorithm):
    name = "local"
    paper = "Local training without communication (baseline)"
    evaluations = ("average", "local", "personalized")

    def end_round(self, ctx, state, work):
        state["x"] = work.y
