"""Batched evaluation of a parameter stack through an oracle.

Accuracy is the fraction of samples whose arg-max output equals the integer target (NaN for
float targets, e.g. regression with ``mse``); loss is the mean per-sample loss ℓ of the
oracle's loss. Sums are kept on the device; there is one host sync at the end (none inside
the loops).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from gossipfl.engine.oracle import Oracle, per_sample_loss


def _scores(oracle: Oracle, out: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sample correctness and loss ``[M, B]`` for outputs ``[M, B, out]``."""
    loss = per_sample_loss(out, targets, oracle.loss, sample_dims=2)
    if targets.is_floating_point():
        correct = torch.full_like(loss, float("nan"))
    else:
        correct = (out.argmax(-1) == targets).to(loss.dtype)
    return correct, loss


def evaluate_stack(
    oracle: Oracle, X: Tensor, inputs: Tensor, targets: Tensor, batch_size: int = 1000,
    max_pairs: int = 4096,
) -> tuple[Tensor, Tensor]:
    """Accuracy ``[M]`` and mean loss ``[M]`` of each of the M models on the same data.

    ``inputs [N, *in]``, ``targets [N]`` (on any device; moved batch by batch to X's device).
    Use ``X.mean(0, keepdim=True)`` for the average model. Memory is bounded by evaluating
    blocks of models so that (models × samples) per pass stays within ``max_pairs``, unless the
    oracle bounds its own memory (the stacked oracle: then all M models see each batch in one
    call and the first layer is one matmul/convolution with every model's weights).
    """
    M, N = X.shape[0], inputs.shape[0]
    batch_size = max(1, min(batch_size, N))
    block = M if oracle.bounds_memory else max(1, max_pairs // batch_size)
    correct = torch.zeros(M, dtype=X.dtype, device=X.device)
    loss = torch.zeros(M, dtype=X.dtype, device=X.device)
    for a in range(0, N, batch_size):
        x_b = inputs[a : a + batch_size].to(X.device, non_blocking=True)
        y_b = targets[a : a + batch_size].to(X.device, non_blocking=True)
        for m in range(0, M, block):
            rows = slice(m, min(m + block, M))
            out = oracle.predict(X[rows], x_b, shared=True)
            c, l_ = _scores(oracle, out, y_b.expand(out.shape[0], *y_b.shape))
            correct[rows] += c.sum(1)
            loss[rows] += l_.sum(1)
    return correct / max(N, 1), loss / max(N, 1)


def _padded_indices(
    client_indices: Sequence[Tensor | np.ndarray], device: torch.device
) -> tuple[Tensor, Tensor]:
    """``[M, n_max]`` sample indices (0-padded) and each client's number of samples ``[M]``."""
    rows = [
        (ix.detach().cpu() if isinstance(ix, Tensor) else torch.as_tensor(np.asarray(ix)))
        .long()
        .reshape(-1)
        for ix in client_indices
    ]
    n_max = max((len(r) for r in rows), default=0)
    index = torch.zeros(len(rows), n_max, dtype=torch.long)
    for i, r in enumerate(rows):
        index[i, : len(r)] = r
    sizes = torch.as_tensor([len(r) for r in rows], dtype=torch.long)
    return index.to(device), sizes


def evaluate_per_client(
    oracle: Oracle,
    X: Tensor,
    inputs: Tensor,
    targets: Tensor,
    client_indices: Sequence[Tensor | np.ndarray],
    batch_size: int = 256,
) -> tuple[Tensor, Tensor]:
    """Accuracy ``[M]`` and mean loss ``[M]`` of model i on its own samples
    ``inputs[client_indices[i]]`` (personalized / local test splits).

    Clients are batched together: each step takes up to ``batch_size`` samples per client,
    and only the models that still have samples at that step run (the work is proportional to
    the real samples, up to the padding of each client's last step; X is gathered only for
    the steps that leave some clients out). A client with no samples gets NaN.
    """
    M = X.shape[0]
    if len(client_indices) != M:
        raise ValueError(f"client_indices has {len(client_indices)} entries for {M} models")
    index, sizes = _padded_indices(client_indices, inputs.device)
    correct = torch.zeros(M, dtype=X.dtype, device=X.device)
    loss = torch.zeros(M, dtype=X.dtype, device=X.device)
    for a in range(0, index.shape[1], batch_size):
        rows = (sizes > a).nonzero().squeeze(1)  # the clients with samples left
        idx = index[rows.to(index.device), a : a + batch_size]
        keep = (a + torch.arange(idx.shape[1]) < sizes[rows, None]).to(X.device)
        x_b = inputs[idx].to(X.device, non_blocking=True)
        y_b = targets[idx].to(X.device, non_blocking=True)
        on = rows.to(X.device)
        models = X if len(rows) == M else X[on]  # a copy only when some clients are done
        c, l_ = _scores(oracle, oracle.predict(models, x_b), y_b)
        correct.index_add_(0, on, torch.where(keep, c, 0).sum(1))
        loss.index_add_(0, on, torch.where(keep, l_, 0).sum(1))
    count = sizes.to(device=X.device, dtype=X.dtype)
    return correct / count, loss / count
