"""FedLNAG — local Nesterov momentum whose buffers are averaged and communicated (Yu, Jin &
Yang 2019, "On the Linear Speedup Analysis of Communication Efficient Momentum SGD for
Distributed Non-Convex Optimization", ICML; Nesterov variant).

The server keeps the averaged momentum buffer b (b_0 = 0, gradient units) and sends x_t and
b_t; each sampled client runs K Nesterov steps from y = x_t, u = b_t (PyTorch's SGD with
``nesterov=True``, dampening 0):

    g = ∇F_i(y; ξ) + wd·y,   u ← β u + g,   y ← y − η_l (g + β u)

and uploads y − x_t and u. Server (unweighted means over S_t):

    x_{t+1} = x_t + η_g (1/|S_t|) Σ (y_i − x_t),      b_{t+1} = (1/|S_t|) Σ u_i

This is the form of the FedSAGD authors' code (``fed_localnesterov``) and of Yu et al.'s
momentum averaging, so the buffers cost the 2× communication of the FedSAGD paper's Table 1.
Its proof form (App. C.5) is the damped lookahead NAG (gradient at y − βm, m ← βm + (1−β)g),
a reparametrization whose step size is scaled by 1 − β; it is not offered here. β = 0.9 (the
FedSAGD paper, A.3). Bytes: x_t and b_t down, the update and u_i up.
"""

from __future__ import annotations

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Phase, Work
from gossipfl.algorithms.centralized.fedavg import MomentumParams, ServerAlgorithm
from gossipfl.algorithms.centralized.global_momentum import own_momentum_warnings


@register
class FedLNAG(ServerAlgorithm):
    name = "fedlnag"
    paper = ("Yu, Jin & Yang 2019, On the Linear Speedup Analysis of Communication Efficient "
             "Momentum SGD for Distributed Non-Convex Optimization (ICML)")
    Params = MomentumParams
    weighting = "uniform"
    server_vectors = ("buffer",)

    def phases(self):
        return [Phase(momentum=0.0)]  # the Nesterov buffer is the local momentum

    def check(self, topology):
        return own_momentum_warnings(self)

    def begin_round(self, ctx):
        work = super().begin_round(ctx)
        return Work(work.y, work.clients, u=self.fed.broadcast(self.state["buffer"], work.clients))

    def direction(self, ctx, work, batch):
        loss, direction = super().direction(ctx, work, batch)
        u = work["u"]
        u.mul_(self.params.beta).add_(direction)
        return loss, direction + self.params.beta * u

    def end_round(self, ctx, work):
        self.state["buffer"] = self.fed.aggregate(work["u"], work.clients, self.weighting)
        super().end_round(ctx, work)
