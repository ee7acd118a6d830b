"""Local directions shared by the algorithms: plain functions, composed rather than inherited.

Notation: ``Y`` ``[S, P]`` are the working iterates of S clients, ``G`` their stochastic
gradients, η the learning rate, ``wd`` the coupled L2 weight decay of SGD (d = ∇f(y) + wd·y,
as ``torch.optim.SGD(weight_decay=wd)``) and ``c`` the optional per-client gradient-norm clip
(``train.clip_norm``: g ← g · min(1, c / (‖g‖ + 10⁻⁶)) before the weight decay is added, as
``torch.nn.utils.clip_grad_norm_`` followed by ``SGD(weight_decay=wd)`` does).
"""

from __future__ import annotations

import torch

from gossipfl.algorithms.base import Batch, Context


def gradient(fed, y: torch.Tensor, batch: Batch,
             group: str = "all") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-client loss ``[S]`` and minibatch gradient ∇F_i(y_i; ξ_i), clipped if asked. With
    a ``group``, only that group's gradient (the phase moves nothing else; the other columns
    are 0, and the clip norm is the group's, as ``clip_grad_norm_`` over a model whose other
    parameters are frozen)."""
    wrt = fed.groups.parameter_names(group)
    loss, grad = fed.oracle.loss_and_grad(y, batch.inputs, batch.targets, batch.mask, wrt)
    clip = fed.train.clip_norm
    if clip is not None:
        grad = grad * (clip / (grad.norm(dim=1, keepdim=True) + 1e-6)).clamp(max=1.0)
    return loss, grad


def with_weight_decay(fed, direction: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d + wd·y."""
    wd = fed.train.weight_decay
    return direction + wd * y if wd else direction


def sgd_direction(fed, y: torch.Tensor, batch: Batch,
                  group: str = "all") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-client loss ``[S]`` and direction d = ∇F_i(y_i; ξ_i) + wd·y_i (the gradient of
    ``group`` only)."""
    loss, grad = gradient(fed, y, batch, group)
    return loss, with_weight_decay(fed, grad, y)


def sam_direction(fed, y: torch.Tensor, batch: Batch, rho: float,
                  group: str = "all") -> tuple[torch.Tensor, torch.Tensor]:
    """SAM (Foret et al. 2021), per client on one minibatch ξ:

        g = ∇F_i(y; ξ),  ỹ = y + ρ g / ‖g‖₂,  d = ∇F_i(ỹ; ξ) + wd·y

    ‖·‖ over the parameter group that moves (the whole vector by default: only that group's
    coordinates are perturbed); both gradients on the same ξ; the step is applied at the
    unperturbed y (weight decay, like SGD's, at y). Returns the loss at y and d. ρ = 0 is
    :func:`sgd_direction`.
    """
    if rho == 0:
        return sgd_direction(fed, y, batch, group)
    wrt = fed.groups.parameter_names(group)
    loss, grad = fed.oracle.loss_and_grad(y, batch.inputs, batch.targets, batch.mask, wrt)
    norm = grad.norm(dim=1, keepdim=True).clamp_min(1e-12)  # the group's: the rest is 0
    _, perturbed = gradient(fed, y + rho * grad / norm, batch, group)
    return loss, with_weight_decay(fed, perturbed, y)


def local_direction(fed, y: torch.Tensor, batch: Batch,
                    ctx: Context) -> tuple[torch.Tensor, torch.Tensor]:
    """The phase's direction: SAM with the phase's ρ on its group, plain SGD when ρ = 0."""
    phase = ctx.phase
    return sam_direction(fed, y, batch, phase.rho, phase.group)


def extrapolate(x: torch.Tensor, reference: torch.Tensor, beta: float) -> torch.Tensor:
    """x + β (x − reference): Ole (reference = own last local model) or Catalyst/Nesterov
    (reference = previous mixed model)."""
    return x + beta * (x - reference) if beta else x.clone()
