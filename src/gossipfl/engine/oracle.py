"""Gradient oracles: the only place where the model runs.

An oracle evaluates all M models of the stack ``X [M, P]`` on their own minibatches:

    L_i(x_i) = Σ_b m_ib ℓ(f(x_i; a_ib), y_ib) / max(1, Σ_b m_ib),    i = 1..M,

returning ``loss [M]`` and ``grad [M, P]`` (rows whose mask is all False get 0 and 0).
Per-sample losses ℓ: ``cross_entropy`` (log-softmax of the logits at the target class) and
``mse`` (``F.mse_loss`` convention: mean over the output dims of (f − y)²; a ``[.., 1]``
output with a target without that dim is squeezed).

Three implementations give the same numbers (tested):

- :class:`~gossipfl.engine.stacked.StackedOracle` — the model traced once with ``torch.fx`` and
  run for all clients as batched matmuls / grouped convolutions (no vmap); the default.

- :class:`VmapOracle` — ``torch.func.functional_call`` + ``vmap(grad_and_value)`` over named
  views of X, in blocks of ``chunk_size`` clients; one batched computation per block.
- :class:`LoopOracle` — one ``nn.Module``; loads row i, forward/backward, writes grad row i.
  The universal fallback (BatchNorm, LSTM, anything vmap cannot batch). BatchNorm running
  statistics live in the one module and are therefore shared by all clients.

Gradients come out in X's dtype (fp32 for the default stack).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value, vmap

from gossipfl.engine.params import ParamLayout
from gossipfl.errors import GossipflError, unknown_choice

LOSSES = ("cross_entropy", "mse")
ORACLES = ("auto", "stacked", "vmap", "loop")


def per_sample_loss(out: Tensor, targets: Tensor, loss: str, sample_dims: int) -> Tensor:
    """ℓ for every sample: ``out [*S, out_dim]``, ``targets [*S]`` or ``[*S, ...]`` → ``[*S]``.

    ``sample_dims`` = len(S) (1 for one client's batch, 2 for ``[M, B]``).
    """
    if loss == "cross_entropy":
        target = targets if targets.dtype == torch.long else targets.long()
        picked = out.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        return torch.logsumexp(out, dim=-1) - picked
    if out.dim() > targets.dim() and out.shape[-1] == 1:
        out = out.squeeze(-1)
    sq = (out - targets.to(out.dtype)).square()
    return sq.flatten(sample_dims).mean(-1) if sq.dim() > sample_dims else sq


def masked_mean_loss(out: Tensor, targets: Tensor, mask: Tensor, loss: str) -> Tensor:
    """One client's Σ_b m_b ℓ_b / max(1, Σ_b m_b) for ``out [B, ...]`` and ``mask [B]`` bool."""
    values = per_sample_loss(out, targets, loss, sample_dims=1)
    total = torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))
    return total.sum() / mask.sum().clamp_min(1).to(values.dtype)


def check_loss(loss: str) -> str:
    """Validate a loss name (config key ``train.loss``)."""
    if loss not in LOSSES:
        raise unknown_choice("train.loss", loss, LOSSES)
    return loss


def check_loss_fits(loss: str, dataset_name: str, num_classes: int) -> None:
    """``train.loss`` against the dataset's targets: ``mse`` needs real-valued targets (or
    one class: one output), not the class indices of several classes; one sentence else."""
    if loss == "mse" and num_classes > 1:
        raise GossipflError(
            f"train.loss: 'mse' needs real-valued targets, but {dataset_name} has "
            f"{num_classes} classes (its labels are class indices); use cross_entropy.")


def check_chunk_size(chunk_size: int | None) -> int | None:
    """Validate ``engine.chunk_size``: a positive integer or None (all clients at once)."""
    if chunk_size is None:
        return None
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise GossipflError(
            f"engine.chunk_size: must be a positive integer or null, got {chunk_size!r}."
        )
    return chunk_size


def has_batchnorm(model: nn.Module) -> bool:
    """True when the model has BatchNorm-style layers (running statistics; vmap cannot batch)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _prepare(X: Tensor, inputs: Tensor, targets: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """Cast floating inputs (and mse targets) to X's dtype; integer tensors pass unchanged."""
    if inputs.is_floating_point() and inputs.dtype != X.dtype:
        inputs = inputs.to(X.dtype)
    if targets is not None and targets.is_floating_point() and targets.dtype != X.dtype:
        targets = targets.to(X.dtype)
    return inputs, targets


def _full_mask(mask: Tensor | None, targets: Tensor) -> Tensor:
    if mask is None:
        return torch.ones(targets.shape[:2], dtype=torch.bool, device=targets.device)
    return mask if mask.dtype == torch.bool else mask.bool()


CPU_UPDATE_PIECE = 1 << 20  # elements a fused update takes at once on CPU (docs/benchmarks.md)


def update_in_pieces(update: Callable[..., None], grad: Tensor, *state: Tensor) -> None:
    """``update(grad, *state)`` on matching ``[m, ...]`` tensors, on the CPU in pieces of
    rows of about :data:`CPU_UPDATE_PIECE` elements: an update of several elementwise
    operations (weight decay, momentum) then keeps its temporaries in the cache instead of
    streaming ``[m, ...]`` ones through memory. Elementwise: the same numbers. An ``update``
    whose ``whole_rows`` is true (a compiled one-pass kernel: no temporaries) takes them
    whole."""
    m = grad.shape[0]
    if grad.device.type != "cpu" or grad.numel() <= CPU_UPDATE_PIECE or m < 2 or \
            getattr(update, "whole_rows", False):  # one pass, no temporaries: no pieces
        update(grad, *state)
        return
    rows = max(1, CPU_UPDATE_PIECE * m // grad.numel())
    for a in range(0, m, rows):
        update(grad[a:a + rows], *(t[a:a + rows] for t in state))


def client_blocks(M: int, step: int | None) -> list[tuple[int, int]]:
    """``[(a, b), ...]`` covering clients ``0..M`` in blocks of ``step`` (None: one block)."""
    step = step or max(M, 1)
    return [(a, min(a + step, M)) for a in range(0, M, step)]


class Oracle(ABC):
    """Loss, gradient and predictions of all M models of a stack ``X [M, P]``."""

    model: nn.Module
    layout: ParamLayout
    loss: str
    bounds_memory: bool = False  # True: predict() blocks models and samples by itself

    def loss_and_grad(
        self, X: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor | None = None,
        wrt: Sequence[str] | None = None, every_row_active: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """``X [M, P]``, ``inputs [M, B, *in]``, ``targets [M, B]``, ``mask [M, B]`` bool or
        None → (``loss [M]``, ``grad [M, P]``). ``wrt``: the names of the parameters whose
        gradient is wanted (None: all); the other columns of ``grad`` are 0 and cost nothing
        (a phase that trains only the head does not differentiate through the body).
        ``every_row_active``: as in :meth:`loss_and_step`."""
        inputs, targets, mask = self._training_batch(X, inputs, targets, mask)
        losses = torch.zeros(X.shape[0], dtype=X.dtype, device=X.device)
        grads = torch.empty(X.shape[0], self.layout.P, dtype=X.dtype, device=X.device)
        wanted = None if wrt is None or set(wrt) >= set(self.layout.names) else frozenset(wrt)
        self._fill(X, inputs, targets, mask, losses, grads, wanted, every_row_active)
        return losses, grads

    def _training_batch(self, X: Tensor, inputs: Tensor, targets: Tensor,
                        mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Inputs cast to X's dtype, a full bool mask, and the model in train mode."""
        inputs, targets = _prepare(X, inputs, targets)
        if not self.model.training:  # every mode switch is the whole model's: one check
            self.model.train()
        return inputs, targets, _full_mask(mask, targets)

    def loss_and_step(self, X: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor | None,
                      update: Callable[..., None], into: Sequence[Tensor] | None = None,
                      every_row_active: bool = False) -> Tensor:
        """One local step of every model, in place: ``update(grad, *into)`` with ``grad`` =
        ∇F(X) and ``into`` the ``[M, P]`` tensors it moves (default ``(X,)``), returning
        ``loss [M]`` at X. ``update`` must be elementwise, and may overwrite the gradient it
        is given (a fresh tensor, nobody else's): an oracle may call it parameter by
        parameter on the matching ``[m, *shape]`` views of a block of rows, with the
        gradients autograd returns, without writing a gradient stack ``[M, P]`` and reading
        it back; the numbers are those of :meth:`loss_and_grad` followed by ``update``.
        ``every_row_active``: the caller knows every row has a sample (an oracle may then skip
        asking the device)."""
        losses, grads = self.loss_and_grad(X, inputs, targets, mask)
        update_in_pieces(update, grads, *((X,) if into is None else into))
        return losses

    @abstractmethod
    def _fill(self, X: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor, losses: Tensor,
              grads: Tensor, wrt: frozenset[str] | None = None,
              every_row_active: bool = False) -> None:
        """Write every client's loss into ``losses [M]`` and gradient into ``grads [M, P]``
        (inputs cast to X's dtype, ``mask`` a full bool ``[M, B]``, model in train mode); with
        ``wrt``, only those parameters' gradients, the other columns 0. ``every_row_active``:
        every row of ``mask`` has a sample (an oracle may skip asking the device)."""

    @abstractmethod
    def predict(self, X: Tensor, inputs: Tensor, shared: bool = False) -> Tensor:
        """Model outputs ``[M, B, out]`` without gradients. ``inputs`` is ``[M, B, *in]``
        (each model its own batch) or, with ``shared=True``, ``[B, *in]`` (the same batch for
        every model)."""


class VmapOracle(Oracle):
    """All clients of a block in one ``vmap(grad_and_value(functional_call))`` computation."""

    def __init__(
        self, model: nn.Module, loss: str = "cross_entropy", chunk_size: int | None = None
    ):
        if has_batchnorm(model):
            raise GossipflError(
                "engine.oracle: 'vmap' cannot batch a model with BatchNorm; use 'loop' "
                "(or a GroupNorm model)."
            )
        self.model = model
        self.loss = check_loss(loss)
        self.chunk_size = check_chunk_size(chunk_size)
        self.layout = ParamLayout.from_module(model)
        # gradient with respect to the first dict only (the moving parameters)
        self._grad_fn = vmap(grad_and_value(self._split_loss), in_dims=(0, 0, 0, 0, 0))
        self._predict_own = vmap(self._client_forward, in_dims=(0, 0))
        self._predict_shared = vmap(self._client_forward, in_dims=(0, None))

    def _client_forward(self, params: dict[str, Tensor], inputs: Tensor) -> Tensor:
        buffers = dict(self.model.named_buffers())
        return functional_call(self.model, (params, buffers), (inputs,))

    def _client_loss(
        self, params: dict[str, Tensor], inputs: Tensor, targets: Tensor, mask: Tensor
    ) -> Tensor:
        return masked_mean_loss(self._client_forward(params, inputs), targets, mask, self.loss)

    def _split_loss(self, moving: dict[str, Tensor], fixed: dict[str, Tensor],
                    inputs: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
        return self._client_loss({**moving, **fixed}, inputs, targets, mask)

    def _fill(self, X: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor, losses: Tensor,
              grads: Tensor, wrt: frozenset[str] | None = None,
              every_row_active: bool = False) -> None:
        for a, b in client_blocks(X.shape[0], self.chunk_size):
            params = self.layout.views(X[a:b])
            moving = {n: v for n, v in params.items() if wrt is None or n in wrt}
            fixed = {n: v for n, v in params.items() if n not in moving}
            g, value = self._grad_fn(moving, fixed, inputs[a:b], targets[a:b], mask[a:b])
            losses[a:b] = value
            write_grads(self.layout, grads[a:b], g)

    @torch.no_grad()
    def predict(self, X: Tensor, inputs: Tensor, shared: bool = False) -> Tensor:
        inputs, _ = _prepare(X, inputs, None)
        self.model.eval()
        fn = self._predict_shared if shared else self._predict_own
        outs = [
            fn(self.layout.views(X[a:b]), inputs if shared else inputs[a:b])
            for a, b in client_blocks(X.shape[0], self.chunk_size)
        ]
        return outs[0] if len(outs) == 1 else torch.cat(outs)


class LoopOracle(Oracle):
    """One module, client by client: load row i, forward/backward, write grad row i."""

    def __init__(self, model: nn.Module, loss: str = "cross_entropy"):
        self.model = model
        self.loss = check_loss(loss)
        self.layout = ParamLayout.from_module(model)
        self._params = [p for _, p in model.named_parameters()]

    def _load(self, X: Tensor, i: int) -> None:
        first = self._params[0] if self._params else None
        if first is not None and (first.dtype != X.dtype or first.device != X.device):
            self.model.to(device=X.device, dtype=X.dtype)
        self.layout.load_into(self.model, X[i])

    def _fill(self, X: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor, losses: Tensor,
              grads: Tensor, wrt: frozenset[str] | None = None,
              every_row_active: bool = False) -> None:
        names = [n for n in self.layout.names if wrt is None or n in wrt]
        params = dict(zip(self.layout.names, self._params, strict=True))
        for p_name, p in params.items():
            p.requires_grad_(wrt is None or p_name in wrt)
        try:
            for i in range(X.shape[0]):
                self._load(X, i)
                with torch.enable_grad():
                    value = masked_mean_loss(self.model(inputs[i]), targets[i], mask[i],
                                             self.loss)
                    g = torch.autograd.grad(value, [params[n] for n in names],
                                            materialize_grads=True)
                losses[i] = value.detach()
                write_grads(self.layout, grads[i : i + 1], dict(zip(names, g, strict=True)))
        finally:
            for p in self._params:
                p.requires_grad_(True)

    @torch.no_grad()
    def predict(self, X: Tensor, inputs: Tensor, shared: bool = False) -> Tensor:
        inputs, _ = _prepare(X, inputs, None)
        self.model.eval()
        outs = []
        for i in range(X.shape[0]):
            self._load(X, i)
            outs.append(self.model(inputs if shared else inputs[i]))
        return torch.stack(outs)


def write_grads(layout: ParamLayout, out: Tensor, grads: dict[str, Tensor]) -> None:
    """Write per-parameter gradients ``{name: [m, *shape]}`` into the rows ``out [m, P]``;
    parameters missing from ``grads`` (not differentiated) get 0."""
    for name, view in layout.views(out).items():
        if name in grads:
            view.copy_(grads[name])  # broadcasts a single model's [*shape] over [1, *shape]
        else:
            view.zero_()


def has_rnn(model: nn.Module) -> bool:
    """True when the model has recurrent layers (``nn.LSTM``/``GRU``/``RNN``): vmap has no
    batching rule for their fused kernels and falls back to a slow per-client loop."""
    return any(isinstance(m, nn.RNNBase) for m in model.modules())
