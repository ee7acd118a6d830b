"""What a client has: everything a local step needs, apart from what crosses clients.

:class:`ClientEnv` holds the model as the gradient oracle sees it (``oracle``, ``layout``),
the parameter groups, the local-training settings of the ``train`` section, what each client
knows of its own data (n_i, its label counts) and the run's seed (per-client random streams
are hashed from it with the client id, :mod:`gossipfl.rng`). It never mixes, samples or
reduces across clients: that is the :class:`~gossipfl.federation.Federation`'s job, and an
algorithm receives both, typed.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from gossipfl.engine.groups import ParamGroups
from gossipfl.engine.params import ParamLayout


@dataclass
class Batch:
    """One local minibatch of the rows at work: ``[S, B, ...]`` inputs, ``[S, B]`` mask."""

    inputs: Tensor
    targets: Tensor
    mask: Tensor

    def rows(self, index: Tensor | slice) -> Batch:
        return Batch(self.inputs[index], self.targets[index], self.mask[index])


@dataclass(frozen=True)
class LocalTraining:
    """Settings of every local optimizer (the ``train`` section)."""

    weight_decay: float = 0.0
    momentum: float = 0.0
    clip_norm: float | None = None


@dataclass
class ClientEnv:
    """The clients' side of a run (rows are this process's clients, in order).

    ``oracle``: ``loss_and_grad(Y, inputs, targets, mask, wrt)`` for many rows at once;
    ``layout``: names, offsets and shapes of the parameters in a row; ``groups``: the column
    sets ``all``, ``shared``, ``personal``; ``train``: the local-training settings;
    ``sample_sizes`` ``[M]`` n_i and ``label_counts`` ``[M, C]`` n_ic (None for regression
    targets) of every client; ``seed``: the run's seed.
    """

    oracle: object
    layout: ParamLayout
    groups: ParamGroups
    sample_sizes: Tensor
    seed: int = 0
    train: LocalTraining = LocalTraining()
    label_counts: Tensor | None = None

    def gradient(self, y: Tensor, batch: Batch, group: str = "all") -> tuple[Tensor, Tensor]:
        """Per-client loss ``[S]`` and minibatch gradient ∇F_i(y_i; ξ_i) of ``group`` (the
        other columns 0), clipped to ``train.clip_norm`` by the group's norm, as
        ``clip_grad_norm_`` over a model whose other parameters are frozen."""
        wrt = self.groups.parameter_names(group)
        loss, grad = self.oracle.loss_and_grad(y, batch.inputs, batch.targets, batch.mask, wrt)
        clip = self.train.clip_norm
        if clip is not None:
            grad = grad * (clip / (grad.norm(dim=1, keepdim=True) + 1e-6)).clamp(max=1.0)
        return loss, grad

    @property
    def plain_sgd(self) -> bool:
        """Whether a gradient step is y − η ∇F_i as it comes: no ``train.clip_norm``, no
        ``train.weight_decay`` (then :meth:`sgd_step` applies)."""
        return self.train.clip_norm is None and not self.train.weight_decay

    def sgd_step(self, y: Tensor, batch: Batch, lr: float, at: Tensor | None = None
                 ) -> Tensor:
        """One SGD step of every row, in place: y ← y − η ∇F_i(a; ξ_i) with a = ``at``
        (default y), returning the per-client loss at a — the update fused into the gradient
        where the oracle can (:meth:`~gossipfl.engine.oracle.Oracle.loss_and_step`). For
        :attr:`plain_sgd` steps only (it neither clips nor decays)."""
        return self.oracle.loss_and_step(y if at is None else at, batch.inputs,
                                         batch.targets, batch.mask, lr,
                                         into=None if at is None else y)

    def raw_gradient(self, y: Tensor, batch: Batch, group: str = "all") -> tuple[Tensor, Tensor]:
        """Loss and gradient of ``group``, never clipped (SAM's ascent direction)."""
        wrt = self.groups.parameter_names(group)
        return self.oracle.loss_and_grad(y, batch.inputs, batch.targets, batch.mask, wrt)

    @property
    def P(self) -> int:
        return self.layout.P
