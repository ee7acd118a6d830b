"""Pieces shared by the algorithms: plain functions, composed rather than inherited.

Notation: ``Y`` ``[S, P]`` are the working iterates of S clients, ``G`` their stochastic
gradients, η the learning rate, and ``wd`` the coupled L2 weight decay of SGD
(d = ∇f(y) + wd·y, as ``torch.optim.SGD(weight_decay=wd)``).
"""

from __future__ import annotations

import numpy as np
import torch

from gossipfl.algorithms.base import Batch, Federation
from gossipfl.rng import numpy_generator


def sgd_direction(fed: Federation, y: torch.Tensor,
                  batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-client loss ``[S]`` and direction d = ∇F_i(y_i; ξ_i) + wd·y_i (0 on empty rows)."""
    loss, grad = fed.oracle.loss_and_grad(y, batch.inputs, batch.targets, batch.mask)
    if fed.weight_decay:
        grad = grad + fed.weight_decay * y * batch.active.unsqueeze(1).to(y.dtype)
    return loss, grad


def masked_update(old: torch.Tensor, new: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """``new`` on active rows, ``old`` elsewhere (clients with an empty batch do not move)."""
    if bool(active.all()):
        return new
    return torch.where(active.unsqueeze(1), new, old)


def descend(y: torch.Tensor, direction: torch.Tensor, lr: float,
            active: torch.Tensor) -> torch.Tensor:
    """y − η d on active rows (in place on ``y``, the round's working copy, when all are)."""
    if bool(active.all()):
        return y.add_(direction, alpha=-lr)
    return torch.where(active.unsqueeze(1), y - lr * direction, y)


def heavy_ball_step(y: torch.Tensor, velocity: torch.Tensor, direction: torch.Tensor,
                    lr: float, theta: float,
                    active: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Heavy ball: y⁺ = y − η d + θ (y − y⁻), kept as v = y − y⁻; returns (y⁺, v⁺)."""
    new_velocity = theta * velocity - lr * direction
    return (masked_update(y, y + new_velocity, active),
            masked_update(velocity, new_velocity, active))


def gossip(fed: Federation, z: torch.Tensor, t: int, steps: int = 1) -> tuple[torch.Tensor, int]:
    """x ← W^Q z with round t's W; returns the mixed models and the bytes sent (Q exchanges)."""
    mixed = fed.mixer.mix(z, t, steps=steps)
    return mixed, fed.mixer.messages(t) * steps * fed.model_bytes


def sample_clients(fed: Federation, t: int, count: int) -> torch.Tensor:
    """Uniform sample of ``count`` clients without replacement for round t (sorted ids)."""
    rng = numpy_generator(fed.seed, "participation", t)
    ids = np.sort(rng.choice(fed.num_clients, size=count, replace=False))
    return torch.as_tensor(ids, device=fed.sample_sizes.device)


def clients_per_round(fed: Federation, participation: float) -> int:
    """max(1, round(participation · M))."""
    return max(1, round(participation * fed.num_clients))


def weighted_average_update(server: torch.Tensor, y: torch.Tensor, clients: torch.Tensor,
                            fed: Federation, global_lr: float) -> torch.Tensor:
    """x ← x + η_g Σ_{i∈S} p_i (y_i − x), p_i = n_i / Σ_{j∈S} n_j."""
    weights = fed.sample_sizes[clients].to(y.dtype)
    weights = weights / weights.sum()
    return server + global_lr * (weights @ (y - server))


def sam_direction(fed: Federation, y: torch.Tensor, batch: Batch,
                  rho: float) -> tuple[torch.Tensor, torch.Tensor]:
    """SAM (Foret et al. 2021), per client on one minibatch ξ:

        g = ∇F_i(y; ξ),  ỹ = y + ρ g / ‖g‖₂,  d = ∇F_i(ỹ; ξ) + wd·y

    ‖·‖ over the whole parameter vector of the client; both gradients on the same ξ; the
    step is applied at the unperturbed y (weight decay, like SGD's, at y). Returns the loss
    at y and d. ρ = 0 reduces to :func:`sgd_direction`.
    """
    if rho == 0:
        return sgd_direction(fed, y, batch)
    loss, grad = fed.oracle.loss_and_grad(y, batch.inputs, batch.targets, batch.mask)
    norm = grad.norm(dim=1, keepdim=True).clamp_min(1e-12)
    _, perturbed = fed.oracle.loss_and_grad(y + rho * grad / norm, batch.inputs,
                                            batch.targets, batch.mask)
    if fed.weight_decay:
        perturbed = perturbed + fed.weight_decay * y * batch.active.unsqueeze(1).to(y.dtype)
    return loss, perturbed


def extrapolate(x: torch.Tensor, reference: torch.Tensor, beta: float) -> torch.Tensor:
    """x + β (x − reference): Ole (reference = own last local model) or Catalyst/Nesterov
    (reference = previous mixed model)."""
    return x + beta * (x - reference) if beta else x.clone()
