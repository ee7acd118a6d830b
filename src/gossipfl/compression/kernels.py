"""The row operations of compressed gossip, defined in torch and compiled on the CPU.

The operations that carry CHOCO-Gossip's cost (:mod:`gossipfl.compression.gossip`), with
:func:`deliver` below:

- :func:`top_k` — per row of ``d = x − copy`` (``copy`` optional), the k coordinates of largest
  |d_j|, a NaN counting as larger than every number (as in ``torch.topk``) and ties at the
  k-th value going to the lowest indices; returned as ``(idx, values)`` ``[n, k]``, indices
  ascending, ``values = d`` there. Because ties are broken by index, a row's selection is
  defined by its own values alone.
- :func:`consensus` — ``x = z + γ (s − x̂)``, rounded as ``(s − x̂)·γ + z`` elementwise (the
  order :class:`~gossipfl.compression.gossip.ChocoGossip` has always used).

:func:`deliver` adds sparse messages to the public copies and their mix, and can compute the
consensus on them in the same pass. A CHOCO step is the three in turn: the messages selected
from z and x̂, delivered, and the consensus computed on the copies that now include them.

**Two implementations, one result.** The torch code in this module *is* the definition
(several passes over ``[n, P]``: ``torch.topk`` for the k-th value, the tie rule applied to
the rows where more than k values reach it). On the CPU, when numba imports, the same
results come from compiled kernels. :func:`top_k`: one pass per row after a threshold from a
1/64 sample of the |d_j| (runs of 256 consecutive coordinates, set so that fewer than k
coordinates reach it with probability below 1e-9 for independent values, and checked: a row
where it misses is redone in full); the pass only sets a bit per coordinate at or above it
(a loop the compiler vectorizes), the set bits are gathered by their trailing zeros, and the
exact k-th value is found among the few thousand candidates (radix selection on their bits,
as the threshold is found in its sample). :func:`deliver`: the receiver's rows read once in
order before the scattered additions (they then hit the cache rather than wait on memory one
line at a time), and the receiver's consensus row right after them, while they are in cache.
:func:`consensus`: one pass instead of three. Every bit equals the torch definition (tested,
ties and NaNs included); ``GOSSIPFL_KERNELS=torch`` forces the torch code. The rows are split
among ``torch.get_num_threads()`` threads that release the GIL (no numba threading layer: the
kernels stay fork-safe under the multi-process backend). numba compiles them on first use and
caches them on disk.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from torch import Tensor

from gossipfl.compression.sampling import RUN, STRIDE, sampling
from gossipfl.engine.threads import in_threads, torch_forced


def top_k(x: Tensor, k: int, copy: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``(idx, values)`` of the k largest |x − copy| per row (module docstring)."""
    k = min(k, x.shape[1])
    if fused(x, copy):
        idx = torch.empty(x.shape[0], k, dtype=torch.int64)
        values = torch.empty(x.shape[0], k, dtype=x.dtype)
        _run_rows(_kernels().select, x, copy, k, idx, values)
        return idx, values
    d = x if copy is None else x - copy
    return _top_k_torch(d, k)


def consensus(z: Tensor, copy: Tensor, mixed: Tensor, gamma: float) -> Tensor:
    """``(mixed − copy)·γ + z``, the consensus of CHOCO-Gossip (module docstring)."""
    if fused(z, copy, mixed):
        x = torch.empty_like(z)
        g = _kernels().scalar(z.dtype, gamma)
        in_threads(z.shape[0], z.numel(), lambda lo, hi: _kernels().consensus(
            *(a[lo:hi].numpy() for a in (z, copy, mixed)), g, x[lo:hi].numpy()))
        return x
    return torch.sub(mixed, copy).mul_(gamma).add_(z)


def deliver(idx: Tensor, values: Tensor, edges: tuple[Tensor, Tensor, Tensor], copy: Tensor,
            mixed: Tensor, consensus_of: tuple[Tensor, float] | None = None
            ) -> Tensor | None:
    """Sparse messages q (row j: ``values[j]`` at columns ``idx[j]``) into the public copies,
    in place: copy ← copy + q, then mixed ← mixed + W q over ``edges`` = (receivers,
    senders, w) sorted by receiver then sender (``scatter_add_`` and ``index_add_`` of the
    products w·q, in that order). With ``consensus_of = (z, γ)``, also returns
    :func:`consensus` ``(z, copy, mixed, γ)`` on the updated copies; the compiled kernel
    computes each receiver's row right after its delivery, while the row is in cache."""
    receivers, senders, weights = edges
    m, p = copy.shape
    z, gamma = consensus_of if consensus_of is not None else (None, 0.0)
    if fused(copy, mixed, z) and values.dtype == copy.dtype:
        nb = _kernels()
        out = None if z is None else torch.empty_like(z)
        indptr = np.searchsorted(receivers.numpy(), np.arange(m + 1))
        args = (idx.numpy(), values.numpy(), indptr, senders.numpy(),
                weights.to(copy.dtype).numpy(), copy.numpy(), mixed.numpy())
        rows = (None, 0.0, None) if z is None else (z.numpy(), nb.scalar(z.dtype, gamma),
                                                    out.numpy())
        work = idx.numel() * (1 + len(senders) // max(m, 1)) + (0 if z is None else z.numel())
        in_threads(m, work, lambda lo, hi: nb.deliver(lo, hi, *args, *rows))
        return out
    copy.scatter_add_(1, idx, values)
    flat = (receivers[:, None] * p + idx[senders]).reshape(-1)
    mixed.view(-1).index_add_(0, flat, (values[senders] * weights[:, None]).reshape(-1))
    return None if z is None else consensus(z, copy, mixed, gamma)


def _top_k_torch(d: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The definition of :func:`top_k`, on ``d = x − copy``: ``torch.topk``'s k-th value
    decides; where more coordinates than k reach it (ties at the k-th value), the tied ones
    go to the lowest indices."""
    a = torch.nan_to_num(d.abs(), nan=math.inf, posinf=math.inf)
    top = a.topk(k, dim=1, sorted=False)
    kth = top.values.amin(dim=1, keepdim=True)
    idx = top.indices.sort(dim=1).values
    reach = (a >= kth).sum(dim=1)
    tied = (reach > k).nonzero()[:, 0]
    if tied.numel():
        at = a[tied]
        above, equal = at > kth[tied], at == kth[tied]
        missing = k - above.sum(dim=1, keepdim=True)
        keep = above | (equal & (equal.cumsum(dim=1) <= missing))
        idx[tied] = keep.nonzero()[:, 1].view(-1, k)
    return idx, d.gather(1, idx)


def fused(*tensors: Tensor | None) -> bool:
    """Whether the numba kernels apply to these tensors: CPU, float32/64, contiguous, of one
    shape, numba importable, and ``GOSSIPFL_KERNELS`` not ``torch``."""
    present = [t for t in tensors if t is not None]
    if torch_forced():
        return False
    if not all(t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64)
               and t.is_contiguous() and t.dtype == present[0].dtype
               and t.shape == present[0].shape and not t.requires_grad for t in present):
        return False
    return _kernels() is not None


def _run_rows(kernel, x: Tensor, copy: Tensor | None, k: int, idx: Tensor, values: Tensor
              ) -> None:
    """A selection ``kernel`` on blocks of rows (:func:`~gossipfl.engine.threads.in_threads`); a row's result depends
    on that row alone, so the split changes no bit."""
    stride, rank = sampling(x.shape[1], k)

    def rows(a, lo: int, hi: int):
        return a[lo:hi].numpy() if isinstance(a, Tensor) else a

    def block(lo: int, hi: int) -> None:
        kernel(rows(x, lo, hi), rows(copy, lo, hi), k, stride, rank, rows(idx, lo, hi),
               rows(values, lo, hi))

    in_threads(x.shape[0], x.numel(), block)


@functools.cache
def _kernels():
    """The compiled kernels (:mod:`gossipfl.compression._numba`), or None without numba."""
    try:
        from gossipfl.compression import _numba
    except ImportError:
        return None
    return _numba


__all__ = ["RUN", "STRIDE", "consensus", "deliver", "fused", "top_k"]
