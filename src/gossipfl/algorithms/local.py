"""The local optimizer of a phase: SGD on a parameter group, with heavy-ball momentum.

For the rows at work, with the phase's learning rate η and momentum μ (velocity v = 0 at
the start of every phase of every round):

    μ = 0:  y ← y − η d                   (on the group's coordinates only)
    μ > 0:  v ← μ v − η d,  y ← y + v     (heavy ball; equal to torch.optim.SGD's momentum
                                           with dampening 0 when η is constant in the phase)
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

    def step(self, work: Work, direction: torch.Tensor) -> None:
        y, lr = work.y, self.lr
        if self.velocity is None:
            if self.group.is_all:
                y.add_(direction, alpha=-lr)
                return
            for block, d in zip(self.group.columns(y), self.group.columns(direction),
                                strict=True):
                block.add_(d, alpha=-lr)
            return
        velocity = self.velocity[: len(work)]
        velocity.mul_(self.momentum).add_(self.group.select(direction), alpha=-lr)
        if self.group.is_all:
            y.add_(velocity)
            return
        start = 0
        for block in self.group.columns(y):
            width = block.shape[-1]
            block.add_(velocity[:, start:start + width])
            start += width
