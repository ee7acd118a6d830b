"""Hessian-vector products of the loss at all M models of a stack, on one fixed data set.

The loss of model x on the N samples (a_n, y_n) is the oracle's per-sample loss ℓ averaged:
L(x) = (1/N) Σ_n ℓ(f(x; a_n), y_n), with the model in eval mode (no dropout). The product
H(x)·v is forward-over-reverse differentiation, ``jvp(grad(L), (x,), (v,))`` with
:mod:`torch.func`, one pass per data batch (L is a weighted sum of batch losses, so is H·v).

All M models at once: the product of one model is ``vmap``-ped over the client dimension of
the flat ``[M, P]`` stack, as :class:`~gossipfl.engine.VmapOracle` batches gradients
(``functional_call`` on named views of the flat vector). Models vmap cannot batch (BatchNorm)
use the same function in a loop over models. Recurrent models (LSTM) loop too, and take the
product as reverse-over-reverse differentiation, ``vjp(grad(L), x)(v)`` (= H·v, H being
symmetric): torch has no forward-mode rule for the fused LSTM kernels (``mkldnn_rnn_layer``
on the CPU; cuDNN's RNN, which is also not twice differentiable, is switched off for the
product). ``mode="auto"`` also loops over models for
convolutional models on the CPU, where vmap's batched convolutions made H·v 2.5× slower
than the loop (``benchmarks/hessian.py``, docs/benchmarks.md); fully connected models gain
1.2–1.3× from batching there.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, jvp, vjp, vmap

from gossipfl.engine.oracle import (
    check_loss,
    client_blocks,
    has_batchnorm,
    has_rnn,
    per_sample_loss,
)
from gossipfl.engine.params import ParamLayout
from gossipfl.errors import GossipflError

MODES = ("auto", "batched", "loop")


class HessianOperator:
    """``hvp(X, V)``: H(x_i)·v_i for every row i of ``X, V [M, P]``; ``loss(X)``: L(x_i).

    ``inputs [N, *in]`` and ``targets [N]`` are shared by all models; they are processed in
    batches of ``batch_size`` samples, and the models in blocks of ``chunk_size`` (None: all
    at once). ``mode`` is "batched" (vmap over models), "loop" (one model at a time) or
    "auto" (:func:`auto_mode`). Products come out in X's dtype.
    """

    def __init__(self, model: nn.Module, inputs: Tensor, targets: Tensor,
                 loss: str = "cross_entropy", batch_size: int = 1000,
                 chunk_size: int | None = None, mode: str = "auto"):
        self.check_model(model, mode)
        if len(targets) == 0:
            raise GossipflError("data: the analysis needs at least one sample, got none.")
        self.model = model.eval()
        self.layout = ParamLayout.from_module(model)
        self.loss_name = check_loss(loss)
        self.inputs, self.targets = inputs, targets
        self.batch_size = max(1, int(batch_size))
        self.chunk_size = chunk_size
        self.mode = auto_mode(model) if mode == "auto" else mode
        self.recurrent = has_rnn(model)
        self.products = 0  # Hessian-vector products computed (one per model per call)
        one_hvp = self._one_hvp_reverse if self.recurrent else self._one_hvp
        one_loss = self._one_loss
        if self.mode == "batched":
            self._hvp = vmap(one_hvp, in_dims=(0, 0, None, None))
            self._loss = vmap(one_loss, in_dims=(0, None, None))
        else:
            self._hvp = _looped(one_hvp)
            self._loss = _looped(one_loss)

    @staticmethod
    def check_model(model: nn.Module, mode: str) -> None:
        """Refuse, in one sentence, a ``mode`` that does not exist or cannot run ``model``
        (called before any work)."""
        if mode not in MODES:
            raise GossipflError(f"mode: unknown value '{mode}'; choose one of: "
                                f"{', '.join(MODES)}.")
        if mode == "batched" and (has_rnn(model) or has_batchnorm(model)):
            what = "recurrent layers" if has_rnn(model) else "BatchNorm"
            raise GossipflError(f"mode: 'batched' cannot run a model with {what} (vmap has no "
                                f"rule for it); use 'loop' or 'auto'.")

    # -- one model ----------------------------------------------------------------------
    def _batch_loss(self, x: Tensor, inputs: Tensor, targets: Tensor) -> Tensor:
        """Σ_n ℓ_n over one batch for the flat parameters ``x [P]``."""
        params = self.layout.views(x)
        buffers = dict(self.model.named_buffers())
        out = functional_call(self.model, (params, buffers), (inputs,))
        return per_sample_loss(out, targets, self.loss_name, sample_dims=1).sum()

    def _one_hvp(self, x: Tensor, v: Tensor, inputs: Tensor, targets: Tensor) -> Tensor:
        return jvp(grad(lambda p: self._batch_loss(p, inputs, targets)), (x,), (v,))[1]

    def _one_hvp_reverse(self, x: Tensor, v: Tensor, inputs: Tensor, targets: Tensor
                         ) -> Tensor:
        """H·v as the vector-Jacobian product of the gradient (H is symmetric)."""
        _, pullback = vjp(grad(lambda p: self._batch_loss(p, inputs, targets)), x)
        return pullback(v)[0]

    def _one_loss(self, x: Tensor, inputs: Tensor, targets: Tensor) -> Tensor:
        return self._batch_loss(x, inputs, targets)

    # -- all models ---------------------------------------------------------------------
    def _batches(self, dtype: torch.dtype, device: torch.device):
        N = len(self.targets)
        for a in range(0, N, self.batch_size):
            inputs = self.inputs[a:a + self.batch_size].to(device)
            targets = self.targets[a:a + self.batch_size].to(device)
            if inputs.is_floating_point():
                inputs = inputs.to(dtype)
            if targets.is_floating_point():
                targets = targets.to(dtype)
            yield inputs, targets

    def _accumulate(self, fn: Callable[..., Tensor], X: Tensor, *rows: Tensor) -> Tensor:
        out = None
        with torch.enable_grad(), torch.backends.cudnn.flags(enabled=not self.recurrent):
            for inputs, targets in self._batches(X.dtype, X.device):
                parts = [fn(X[a:b], *(r[a:b] for r in rows), inputs, targets).detach()
                         for a, b in client_blocks(X.shape[0], self.chunk_size)]
                total = torch.cat(parts)
                out = total if out is None else out + total
        return out / len(self.targets)

    def hvp(self, X: Tensor, V: Tensor) -> Tensor:
        """``[M, P]``: row i is H(x_i)·v_i."""
        if X.shape != V.shape or X.dim() != 2 or X.shape[1] != self.layout.P:
            raise ValueError(f"X and V must both be [M, {self.layout.P}], got "
                             f"{tuple(X.shape)} and {tuple(V.shape)}")
        self.products += X.shape[0]
        return self._accumulate(self._hvp, X, V)

    def loss(self, X: Tensor) -> Tensor:
        """``[M]``: L(x_i) on the operator's samples."""
        return self._accumulate(self._loss, X)


def auto_mode(model: nn.Module) -> str:
    """"loop" for BatchNorm and recurrent models, and for convolutional models on the CPU;
    else "batched"."""
    if has_batchnorm(model) or has_rnn(model):
        return "loop"
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    has_conv = any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())
    return "loop" if on_cpu and has_conv else "batched"


def _looped(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``fn`` of one model applied row by row to ``[M, ...]`` arguments (shared data last)."""
    def apply(*args: Tensor) -> Tensor:
        *per_model, inputs, targets = args
        return torch.stack([fn(*(a[i] for a in per_model), inputs, targets)
                            for i in range(per_model[0].shape[0])])
    return apply
