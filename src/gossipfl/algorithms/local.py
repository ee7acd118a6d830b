"""The local optimizer of a phase: SGD on a parameter group, with heavy-ball momentum.

For the rows at work, with the phase's learning rate η and momentum μ (velocity v = 0 at
the start of every phase of every round):

    μ = 0:  y ← y − η d                   (on the group's coordinates only)
    μ > 0:  v ← μ v − η d,  y ← y + v     (heavy ball; equal to torch.optim.SGD's momentum
                                           with dampening 0 when η is constant in the phase)

η is a number, or a 0-dim tensor on the rows' device (a phase replayed from a CUDA graph,
:mod:`gossipfl.schedules.phase_graph`, where η changes from round to round without a new
capture): y − η d is then ``y.addcmul_(d, η, value=-1)``, which CUDA computes as the same
fused multiply-add as ``y.add_(d, alpha=-η)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gossipfl.engine.groups import ParamGroup

if TYPE_CHECKING:  # annotation only
    from gossipfl.algorithms.base import Work


class LocalOptimizer:
    """Steps ``work.y`` in place along a direction; ``rows``: the working rows of the round;
    ``velocity``: the ``[rows, n_group]`` buffer to keep v in (default: a new zero one)."""

    def __init__(self, group: ParamGroup, lr: float, momentum: float, rows: int,
                 like: torch.Tensor, velocity: torch.Tensor | None = None):
        self.group, self.lr, self.momentum = group, lr, momentum
        if momentum and velocity is None:
            velocity = torch.zeros(rows, group.numel, dtype=like.dtype, device=like.device)
        self.velocity = velocity if momentum else None

    def state(self, work: Work) -> tuple[torch.Tensor, ...]:
        """The row-stacked tensors a step of ``work`` moves, as :meth:`update` takes them:
        ``(y,)``, or ``(y, v)`` with momentum (v of the whole model: the group is ``all``)."""
        return (work.y,) if self.velocity is None else (work.y, self.velocity[: len(work)])

    def update(self, d: torch.Tensor, y: torch.Tensor, v: torch.Tensor | None = None) -> None:
        """y ← y − η d, or v ← μ v − η d, y ← y + v: in place, elementwise, on tensors of one
        shape (whole rows, or one parameter's columns of them: the same numbers)."""
        if v is None:
            descend(y, d, self.lr)
            return
        descend(v.mul_(self.momentum), d, self.lr)
        y.add_(v)

    def step(self, work: Work, direction: torch.Tensor) -> None:
        y, lr = work.y, self.lr
        if self.group.is_all:
            self.update(direction, *self.state(work))
            return
        if self.velocity is None:
            for block, d in zip(self.group.columns(y), self.group.columns(direction),
                                strict=True):
                descend(block, d, lr)
            return
        velocity = self.velocity[: len(work)]
        descend(velocity.mul_(self.momentum), self.group.select(direction), lr)
        start = 0
        for block in self.group.columns(y):
            width = block.shape[-1]
            block.add_(velocity[:, start:start + width])
            start += width


def descend(y: torch.Tensor, d: torch.Tensor, lr: float | torch.Tensor) -> None:
    """y ← y − η d in place: ``y.add_(d, alpha=-η)`` (one fused multiply-add), or for a
    tensor η ``y.addcmul_(d, η, value=-1)`` (on CUDA the same fused multiply-add, fma(−d, η, y);
    on the CPU the product rounded first)."""
    if isinstance(lr, torch.Tensor):
        y.addcmul_(d, lr, value=-1)
    else:
        y.add_(d, alpha=-lr)
