"""A local term of one's own, and the algorithm that uses it (docs/design.md, "Adding a
piece").

A local term is a plain function ``(ctx, work, d) -> d`` chained after a gradient in a
phase's direction, like gossipfl's own (:mod:`gossipfl.algorithms.terms`). It has no registry:
an algorithm puts it in a :class:`~gossipfl.algorithms.Phase`, and a config reaches it
through that algorithm's hyperparameters. Here an L1 penalty μ‖y‖₁ (its subgradient) on
DFedAvg's local steps:

    y_i ← y_i − η (∇F_i(y_i; ξ) + wd·y_i + μ sign(y_i)),   then   x_i ← Σ_j w_ij y_j

    gossipfl run --plugin examples/plugins/my_term.py --set algorithm.name=dfedavg_l1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import Phase, register
from gossipfl.algorithms.base import NON_NEGATIVE
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg, GossipParams
from gossipfl.algorithms.terms import Term, pure, sgd


def l1(coef: float) -> Term:
    """d + μ sign(y): the subgradient of μ‖y‖₁ at the working iterates. Declared pure: it
    reads only the Work's tensors and its coefficient, never the round, so on a GPU its phase
    is replayed from one CUDA graph (engine.cuda_graphs)."""

    @pure
    def term(ctx, work, d):
        return d + coef * work.y.sign()

    return term


@dataclass
class L1Params(GossipParams):
    l1: float = 1e-3  # μ
    rules: ClassVar = {"l1": NON_NEGATIVE}


@register
class DFedAvgL1(DFedAvg):
    """DFedAvg whose local objective adds μ‖y‖₁."""

    name = "dfedavg_l1"
    paper = "design example: DFedAvg with an L1 local term"
    Params = L1Params

    def phases(self):
        return [Phase(direction=sgd(l1(self.params.l1)))]
