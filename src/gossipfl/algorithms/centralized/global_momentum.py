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


class OwnMomentum(ServerAlgorithm):
    """A server algorithm of the FedSAGD paper whose local steps use its own momentum only
    (``train.momentum`` is not used, with a warning); unweighted aggregation."""

    weighting = "uniform"

    def phases(self):
        return [Phase(momentum=0.0)]

    def check(self, topology):
        momentum = self.fed.train.momentum
        if not momentum:
            return []
        return [f"{self.name} ignores train.momentum = {momentum}: its local steps use its "
                + "own momentum only."]


class GlobalMomentum(OwnMomentum):
    """Skeleton; subclasses define ``client_direction`` and ``next_momentum``."""

    server_vectors = ("momentum",)

    def begin_round(self, ctx):
        work = super().begin_round(ctx)
        received = self.fed.broadcast(self.state["momentum"], work.clients)
        steps = torch.zeros(len(work), 1, dtype=work.y.dtype, device=work.y.device)
        return Work(work.y, work.clients, m=received, steps=steps)

    def local_step(self, ctx, work, batch):
        work["steps"].add_(1)
        return super().local_step(ctx, work, batch)

    def direction(self, ctx, work, batch):
        loss, gradient = super().direction(ctx, work, batch)
        return loss, self.client_direction(work, gradient)

    def client_direction(self, work: Work, gradient: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def pseudo_gradient(self, ctx, work: Work, delta: torch.Tensor) -> torch.Tensor:
        """ĝ_t = −Δ_t / (K η_l), K the sampled clients' mean number of local steps."""
        steps = self.fed.aggregate(work["steps"], work.clients, "uniform")
        return -delta / (steps.clamp_min(1) * ctx.lr)

    def next_momentum(self, ctx, work: Work, delta: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def end_round(self, ctx, work):
        delta = self.fed.aggregate(work.y - self.state["server"], work.clients, self.weighting)
        self.state["momentum"] = self.next_momentum(ctx, work, delta)
        self.server_step(delta)
