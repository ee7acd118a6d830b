"""The local optimizer of a phase: SGD on a parameter group, with heavy-ball momentum.

For the rows at work, with the phase's learning rate η and momentum μ (velocity v = 0 at
the start of every phase of every round):

    μ = 0:  y ← y − η d                   (on the group's coordinates only)
    μ > 0:  v ← μ v − η d,  y ← y + v     (heavy ball; equal to torch.optim.SGD's momentum
                                           with dampening 0 when η is constant in the phase)

η is a number, or a tensor on the rows' device (a phase replayed from a CUDA graph,
:mod:`gossipfl.schedules.phase_graph`, where η changes from round to round without a new
capture): 0-dim, or a ``[rows, 1]`` column of each row's own η (the runs of a packed study,
gossipfl.studies.packing). y − η d is then ``y.addcmul_(d, η, value=-1)``, the same fused
multiply-add as ``y.add_(d, alpha=-η)`` (:func:`descend`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from gossipfl.engine.groups import ParamGroup

if TYPE_CHECKING:  # annotation only
    from gossipfl.algorithms.base import Work


class LocalOptimizer:
    """Steps ``work.y`` in place along a direction; ``rows``: the working rows of the round;
    ``velocity``: the ``[rows, n_group]`` buffer to keep v in (default: a new zero one);
    ``lr``: η (see the module docstring; a ``[rows, 1]`` tensor: each row's)."""

    def __init__(self, group: ParamGroup, lr: float | torch.Tensor, momentum: float,
                 rows: int, like: torch.Tensor, velocity: torch.Tensor | None = None):
        self.group, self.lr, self.momentum = group, lr, momentum
        if momentum and velocity is None:
            velocity = torch.zeros(rows, group.numel, dtype=like.dtype, device=like.device)
        self.velocity = velocity if momentum else None
        self.per_row = isinstance(lr, torch.Tensor) and lr.dim() == 2

    def state(self, work: Work) -> tuple[torch.Tensor, ...]:
        """The row-stacked tensors a step of ``work`` moves, as :meth:`update` takes them:
        ``(y,)``, or ``(y, v)`` with momentum (v of the whole model: the group is ``all``),
        then with per-row rates the rows' η seen as ``[rows, P]`` (a broadcast view), so that
        any piece of rows and columns of the state carries its rows' rates."""
        rows = len(work)
        state = (work.y,) if self.velocity is None else (work.y, self.velocity[:rows])
        if self.per_row:
            state += (self.lr[:rows].expand(rows, work.y.shape[1]),)
        return state

    def update(self, d: torch.Tensor, y: torch.Tensor, *rest: torch.Tensor) -> None:
        """y ← y − η d, or v ← μ v − η d, y ← y + v: in place, elementwise, on tensors of one
        shape (whole rows, or one parameter's columns of them: the same numbers); ``rest``:
        the state after y (:meth:`state`)."""
        lr = rest[-1] if self.per_row else self.lr
        if self.velocity is None:
            descend(y, d, lr)
            return
        v = rest[0]
        descend(v.mul_(self.momentum), d, lr)
        y.add_(v)

    def step(self, work: Work, direction: torch.Tensor) -> None:
        y, lr = work.y, self.lr[: len(work)] if self.per_row else self.lr
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
    tensor η (0-dim, or one per row broadcast) ``y.addcmul_(d, η, value=-1)``: the same fused
    multiply-add fma(−d, η, y) — on the CPU the same bits (tests/algorithms/test_local_rates.py),
    on CUDA the contraction nvcc makes of both kernels."""
    if isinstance(lr, torch.Tensor):
        y.addcmul_(d, lr, value=-1)
    else:
        y.add_(d, alpha=-lr)
