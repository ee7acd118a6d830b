"""Centralized algorithms whose server keeps a global momentum m and broadcasts it with x.

The shared skeleton of FedSAGD, FedCM, FedANAG and MimeLite (each in its own module, which
writes its rules). Round t, with S_t the sampled clients and η_l the round's local learning
rate:

1. the server sends x_t **and** m_t to each i ∈ S_t (two model-sized vectors down);
2. client i runs K_i local steps from y = x_t along ``client_direction``, a combination of
   its stochastic gradient d = ∇F_i(y; ξ) (+ wd·y, clipped as ``train`` says) and the
   received m_t, which stays fixed during the round; no other local momentum
   (``train.momentum`` is not used, with a warning);
3. client i uploads Δ_i = y_i^{K_i} − x_t; the server averages them **unweighted**,
   Δ_t = (1/|S_t|) Σ_{i∈S_t} Δ_i (the FedSAGD paper's aggregation, §3.1);
4. m_{t+1} = ``next_momentum`` — by default from the pseudo-gradient
   ĝ_t = −Δ_t / (K η_l) with K the mean number of steps the sampled clients actually took
   (each uploads its count K_i, one float); x_{t+1} = x_t + η_g Δ_t.

Bytes per sampled client: x_t and m_t down, Δ_i (and K_i: 4 bytes) up.
"""

from __future__ import annotations

import torch

from gossipfl.algorithms.base import Phase, Work
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm
from gossipfl.algorithms.terms import Direction, sgd
from gossipfl.network.federation import Weighting


class OwnMomentum(ServerAlgorithm):
    """A server algorithm of the FedSAGD paper whose local steps use its own momentum only
    (``train.momentum`` is not used, with a warning); unweighted aggregation."""

    weighting = Weighting.UNIFORM

    def direction(self) -> Direction:
        """The local direction (default: SGD with weight decay)."""
        return sgd()

    def phases(self):
        return [Phase(momentum=0.0, direction=self.direction())]

    def check(self, topology, order="synchronous"):
        momentum = self.env.train.momentum
        if not momentum:
            return []
        return [f"{self.name} ignores train.momentum = {momentum}: its local steps use its "
                + "own momentum only."]


class GlobalMomentum(OwnMomentum):
    """Skeleton; subclasses define ``client_direction`` and ``next_momentum``."""

    server_vectors = ("momentum",)

    def begin_round(self, ctx, state):
        work = super().begin_round(ctx, state)
        return work.with_scratch(m=self.fed.broadcast(state["momentum"], work.clients))

    def direction(self) -> Direction:
        """SGD with weight decay, then :meth:`client_direction` with the received m_t."""
        return sgd(self.client_direction)

    def client_direction(self, ctx, work: Work, gradient: torch.Tensor) -> torch.Tensor:
        """The local direction from the gradient and the received ``work["m"]`` (a term)."""
        raise NotImplementedError

    def pseudo_gradient(self, ctx, work: Work, delta: torch.Tensor) -> torch.Tensor:
        """ĝ_t = −Δ_t / (K η_l), K the sampled clients' mean number of local steps."""
        steps = self.fed.aggregate(work.steps, work.clients, Weighting.UNIFORM)
        return -delta / (steps.clamp_min(1) * ctx.lr)

    def next_momentum(self, ctx, state, work: Work, delta: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def end_round(self, ctx, state, work):
        delta = self.fed.aggregate(work.y - state["server"], work.clients, self.weighting)
        state["momentum"] = self.next_momentum(ctx, state, work, delta)
        self.server_step(state, delta)
