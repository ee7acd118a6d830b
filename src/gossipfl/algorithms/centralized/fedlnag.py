"""FedLNAG — local Nesterov momentum whose buffers are averaged and communicated (Yu, Jin &
Yang 2019, "On the Linear Speedup Analysis of Communication Efficient Momentum SGD for
Distributed Non-Convex Optimization", ICML; Nesterov variant).

The server keeps the averaged momentum buffer b (b_0 = 0, gradient units) and sends x_t and
b_t; each sampled client runs K Nesterov steps from y = x_t, u = b_t (PyTorch's SGD with
``nesterov=True``, dampening 0):

    g = ∇F_i(y; ξ) + wd·y,   u ← β u + g,   y ← y − η_l (g + β u)

and uploads y − x_t and u. Server (unweighted means over S_t):

    x_{t+1} = x_t + η_g (1/|S_t|) Σ (y_i − x_t),      b_{t+1} = (1/|S_t|) Σ u_i

This (``form: nesterov``, default) is the FedSAGD authors' code (``fed_localnesterov``) and
Yu et al.'s momentum averaging; the averaged buffers are the 2× communication of the FedSAGD
paper's Table 1. That paper's proof (App. C.5) writes the damped lookahead NAG instead,
``form: lookahead``, with the same buffer exchange:

    g = ∇F_i(y − η_l β u; ξ) + wd·(y − η_l β u),   u ← β u + (1 − β) g,   y ← y − η_l u

(C.5 prints the lookahead point as y − βu; η_l β u is the reading in which u, a gradient
average, has the units of the step it scales). β = 0.9 (the FedSAGD paper, A.3).
Bytes: x_t and b_t down, the update and u_i up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import register
from gossipfl.algorithms.base import one_of
from gossipfl.algorithms.centralized.fedavg import MomentumParams
from gossipfl.algorithms.centralized.global_momentum import OwnMomentum
from gossipfl.algorithms.terms import Direction, chain, default_direction, pure, sgd


@dataclass
class FedLNAGParams(MomentumParams):
    form: str = "nesterov"  # nesterov: PyTorch's Nesterov SGD; lookahead: App. C.5's NAG
    rules: ClassVar = {"form": one_of("nesterov", "lookahead")}


@register
class FedLNAG(OwnMomentum):
    name = "fedlnag"
    paper = ("Yu, Jin & Yang 2019, On the Linear Speedup Analysis of Communication Efficient "
             "Momentum SGD for Distributed Non-Convex Optimization (ICML)")
    Params = FedLNAGParams
    server_vectors = ("buffer",)  # the Nesterov buffer is the local momentum

    def begin_round(self, ctx, state):
        work = super().begin_round(ctx, state)
        return work.with_scratch(u=self.fed.broadcast(state["buffer"], work.clients))

    def direction(self) -> Direction:
        if self.params.form == "lookahead":
            return chain(self.lookahead_gradient, self.damped_buffer)
        return sgd(self.nesterov)

    @pure
    def nesterov(self, ctx, work, direction):
        """u ← β u + g;  the step g + β u."""
        beta, u = self.params.beta, work["u"]
        u.mul_(beta).add_(direction)
        return direction + beta * u

    # not pure: η β is one rounding of two numbers here, a product of tensors in a graph
    # (where η is a tensor), so a replayed phase would not be this one to the bit
    def lookahead_gradient(self, ctx, work, batch):
        """g = ∇F_i(y − η_l β u; ξ) + wd·(y − η_l β u)."""
        point = work.y - ctx.lr * self.params.beta * work["u"]
        return default_direction()(ctx, work.at(point), batch)

    @pure
    def damped_buffer(self, ctx, work, direction):
        """u ← β u + (1 − β) g;  the step u."""
        beta, u = self.params.beta, work["u"]
        u.mul_(beta).add_(direction, alpha=1 - beta)
        return u.clone()

    def end_round(self, ctx, state, work):
        state["buffer"] = self.fed.aggregate(work["u"], work.clients, self.weighting)
        super().end_round(ctx, state, work)
