"""What a client has: everything a local step needs, apart from what crosses clients.

:class:`ClientEnv` holds the model as the gradient oracle sees it (``oracle``, ``layout``),
the parameter groups, the local-training settings of the ``train`` section, what each client
knows of its own data (n_i, its label counts) and the run's seed (per-client random streams
are hashed from it with the client id, :mod:`gossipfl.common.rng`). It never mixes, samples or
reduces across clients: that is the :class:`~gossipfl.network.federation.Federation`'s job, and an
algorithm receives both, typed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from gossipfl.engine.groups import ParamGroups
from gossipfl.engine.oracle import update_in_pieces
from gossipfl.engine.params import ParamLayout
from gossipfl.errors import GossipflError


@dataclass
class Batch:
    """One local minibatch of the rows at work: ``[S, B, ...]`` inputs, ``[S, B]`` mask;
    ``clients`` ``[S]``: whose rows they are (what a private gradient's noise is keyed by);
    ``every_row_active``: known to have at least one sample in every row (the local loop's
    batches, whose rows are the clients that still have data), so that the oracle need not
    read the mask back from the device to find out."""

    inputs: Tensor
    targets: Tensor
    mask: Tensor
    clients: Tensor | None = None
    every_row_active: bool = False

    def rows(self, index: Tensor | slice) -> Batch:
        return Batch(self.inputs[index], self.targets[index], self.mask[index],
                     None if self.clients is None else self.clients[index],
                     self.every_row_active)


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
    targets) of every client; ``seed``: the run's seed; ``privacy``: the DP-SGD mechanism
    every gradient goes through (:class:`~gossipfl.trust.dpsgd.PrivateGradient`; None: none).
    """

    oracle: object
    layout: ParamLayout
    groups: ParamGroups
    sample_sizes: Tensor
    seed: int = 0
    train: LocalTraining = LocalTraining()
    label_counts: Tensor | None = None
    privacy: Any = None
    #: whether local steps may take :meth:`fused_step` (False: the unfused reference that
    #: tests and benchmarks compare it with)
    fused: ClassVar[bool] = True

    def gradient(self, y: Tensor, batch: Batch, group: str = "all") -> tuple[Tensor, Tensor]:
        """Per-client loss ``[S]`` and minibatch gradient ∇F_i(y_i; ξ_i) of ``group`` (the
        other columns 0), clipped to ``train.clip_norm`` by the group's norm, as
        ``clip_grad_norm_`` over a model whose other parameters are frozen."""
        loss, grad = self.raw_gradient(y, batch, group)
        if self.train.clip_norm is not None:
            grad = grad * self.clip_factor(grad)
        return loss, grad

    def clip_factor(self, grad: Tensor) -> Tensor:
        """``[S, 1]`` min(1, c / (‖g_i‖₂ + 1e-6)), c = ``train.clip_norm``: the factor that
        clips each row of ``grad`` (as ``clip_grad_norm_``)."""
        return (self.train.clip_norm / (grad.norm(dim=1, keepdim=True) + 1e-6)).clamp(max=1.0)

    def fused_step(self, batch: Batch, update: Callable[..., None], state: Sequence[Tensor],
                   at: Tensor | None = None) -> Tensor:
        """One local step of every row, in place: ``update(g_i, *state)`` with g_i the
        gradient of :meth:`gradient` (whole model, clipped to ``train.clip_norm``) at a =
        ``at`` (default y), ``state`` the row-stacked tensors it moves (``[S, P]`` each, the
        iterates y first); returns the per-client loss at a. ``update`` is elementwise (and
        may overwrite the gradient it is given), so it is applied in pieces: unclipped, parameter by parameter from the gradients
        autograd returns (:meth:`~gossipfl.engine.oracle.Oracle.loss_and_step`), without
        writing a gradient stack; clipped, in two passes (the gradient stack and its row
        norms, then ``update(g ⊙ clip factor, …)`` in cache-sized pieces of rows); with
        ``privacy``, DP-SGD's gradient stack, then the update in pieces (the non-private
        paths are untouched)."""
        point = state[0] if at is None else at
        if self.train.clip_norm is None and self.privacy is None:
            return self.oracle.loss_and_step(point, batch.inputs, batch.targets, batch.mask,
                                             update, state,
                                             every_row_active=batch.every_row_active)
        loss, grad = self.raw_gradient(point, batch)  # with privacy: DP-SGD's gradient
        if self.train.clip_norm is None:
            update_in_pieces(update, grad, *state)
            return loss
        update_in_pieces(lambda g, factor, *rows: update(g * factor, *rows), grad,
                         self.clip_factor(grad), *state)
        return loss

    def raw_gradient(self, y: Tensor, batch: Batch, group: str = "all") -> tuple[Tensor, Tensor]:
        """Loss and gradient of ``group``, never clipped by ``train.clip_norm`` (SAM's ascent
        direction); with ``privacy``, DP-SGD's gradient (every gradient of the data is)."""
        wrt = self.groups.parameter_names(group)
        if self.privacy is not None:
            if batch.clients is None:
                raise GossipflError("privacy: a private gradient needs the batch's client ids "
                                    "(Batch.clients), which this caller did not give.")
            columns = None if self.groups[group].is_all else \
                self.groups[group].mask(y.device)
            return self.privacy.gradient(self.oracle, y, batch.inputs, batch.targets,
                                         batch.mask, batch.clients, wrt, columns)
        return self.oracle.loss_and_grad(y, batch.inputs, batch.targets, batch.mask, wrt,
                                         every_row_active=batch.every_row_active)

    @property
    def P(self) -> int:
        return self.layout.P
