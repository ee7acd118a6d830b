"""MimeLite with SGD-momentum (Karimireddy et al. 2021, "Breaking the centralized barrier
for cross-device federated learning" (Mime), Algorithm 1 with the Lite client).

The server keeps the momentum m (m_0 = 0) and sends x_t and m_t to the sampled clients. Each
client first computes its full-batch gradient at x_t, c_i = ∇f_i(x_t) (one pass over its
data, minibatch gradients weighted by their sizes — exact full-batch), then runs K steps from
y = x_t with m_t fixed (the state is not updated locally):

    y ← y − η_l ((1 − β) ∇F_i(y; ξ) + β m_t)       (∇F_i with ``train.weight_decay``)

and uploads y − x_t and c_i. Server, with unweighted means over S_t:

    m_{t+1} = (1 − β) (1/|S_t|) Σ c_i + β m_t,       x_{t+1} = x_t + η_g (1/|S_t|) Σ (y_i − x_t)

The FedSAGD paper's proof form (App. C.8) has the same local and server-model rules but leaves
how m is built unsaid; this follows the original Mime paper (and the FedSAGD authors' code:
one epoch of gradients at x_t). The gradient pass costs one local epoch of compute. β = 0.9
(Mime's SGDm); the FedSAGD paper reports 0.2 (A.3). Bytes: x_t and m_t down, the update and
c_i up (2× FedAvg).
"""

from __future__ import annotations

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Phase
from gossipfl.algorithms.centralized.fedavg import MomentumParams
from gossipfl.algorithms.centralized.global_momentum import GlobalMomentum
from gossipfl.algorithms.terms import phase_direction, pure
from gossipfl.network.federation import Weighting


@register
class MimeLite(GlobalMomentum):
    name = "mimelite"
    paper = "Karimireddy et al. 2021, Breaking the Centralized Barrier for Cross-Device FL (Mime)"
    Params = MomentumParams

    def phases(self):
        return [Phase("gradient_at_server_model", epochs=1, momentum=0.0,
                      update=self.accumulate_gradient),
                *super().phases()]

    def begin_round(self, ctx, state):
        work = super().begin_round(ctx, state)
        rows = torch.zeros(len(work), 1, dtype=work.y.dtype, device=work.y.device)
        return work.with_scratch(gradient_sum=torch.zeros_like(work.y), samples=rows)

    @pure
    def accumulate_gradient(self, ctx, work, batch):
        """Σ_b |b| ∇F_i(x_t; b) over one epoch (no step: y stays x_t)."""
        loss, gradient = phase_direction(ctx, work, batch)
        samples = batch.mask.sum(dim=1, keepdim=True).to(gradient.dtype)
        work["gradient_sum"].add_(samples * gradient)
        work["samples"].add_(samples)
        return loss

    @pure
    def client_direction(self, ctx, work, gradient):
        beta = self.params.beta
        return (1 - beta) * gradient + beta * work["m"]

    def next_momentum(self, ctx, state, work, delta):
        full_batch = work["gradient_sum"] / work["samples"].clamp_min(1)
        average = self.fed.aggregate(full_batch, work.clients, Weighting.UNIFORM)
        beta = self.params.beta
        return (1 - beta) * average + beta * state["momentum"]
