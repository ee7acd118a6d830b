"""The local optimizer's decayed and momentum updates in one pass on the CPU.

The definition is torch's, in :func:`gossipfl.algorithms.terms._fused_step` and
:meth:`gossipfl.algorithms.local.LocalOptimizer.update`: with weight decay μ_wd, momentum μ
and learning rate η,

    d = g + μ_wd·y                   (``g.add_(μ_wd * y)``: the product rounded, then the sum)
    y ← y − η d                      (``y.add_(d, alpha=−η)``: one fused multiply-add)
    or  v ← μ v − η d,  y ← y + v    (``v.mul_(μ).add_(d, alpha=−η)``, ``y.add_(v)``)

in float32, the scalars rounded to float32 as torch's CPU kernels take them. Torch runs this as
three to five elementwise kernels (each a pass over the rows, in cache-sized pieces:
:func:`gossipfl.engine.oracle.update_in_pieces`); :func:`sgd_update` does every operation of
one coordinate in turn, in one pass over g, y (and v), the rows split among torch's threads, with the same roundings — the
multiply-add through LLVM's ``llvm.fma.f32``, as torch's vectorized ``add(alpha=)`` computes it
— so the results are the same bits (tests/engine/test_fused_update.py). Plain SGD without decay or
momentum is one torch kernel already and is left to it.

numba compiles the kernels on first use and caches them on disk; without numba, or with
``GOSSIPFL_KERNELS=torch``, :func:`sgd_update` declines and the caller runs the torch code.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

from gossipfl.engine.threads import in_threads, torch_forced


def sgd_update(grad: Tensor, y: Tensor, velocity: Tensor | None, decay: float, lr: float,
               momentum: float) -> bool:
    """The update of the module docstring, in place on ``y`` (and ``velocity``) from ``grad``
    (rows of one parameter, or of the whole model); False, touching nothing, where the kernel
    does not apply (not the CPU or float32, no decay and no momentum, a layout that is not
    rows of unit-stride columns, numba missing)."""
    if not decay and velocity is None:
        return False
    rows = _rows(grad, y, velocity)
    if rows is None:
        return False
    kernels = _kernels()
    if kernels is None:
        return False
    g, y2, v = rows
    mu, neg_lr = np.float32(decay), np.float32(-lr)
    if v is None:
        in_threads(g.shape[0], g.size,
                   lambda lo, hi: kernels.decayed(g[lo:hi], y2[lo:hi], mu, neg_lr))
    else:
        m = np.float32(momentum)
        in_threads(g.shape[0], g.size, lambda lo, hi: kernels.heavy_ball(
            g[lo:hi], y2[lo:hi], v[lo:hi], mu, bool(decay), m, neg_lr))
    return True


def takes(y: Tensor, decay: float, momentum: float) -> bool:
    """Whether :func:`sgd_update` will take the updates of the rows ``y`` (a decayed or momentum
    update of float32 CPU rows, numba importable): then it needs no pieces of rows (it has no
    temporaries) and splits the rows among threads itself."""
    return bool(decay or momentum) and y.device.type == "cpu" and y.dtype == torch.float32 \
        and not torch_forced() and _kernels() is not None


def _rows(*tensors: Tensor | None) -> tuple | None:
    """Each tensor as a ``[rows, n]`` NumPy view with unit-stride columns, or None where one
    is not such a view (then the torch code runs)."""
    if torch_forced():
        return None
    out = []
    shape = None
    for t in tensors:
        if t is None:
            out.append(None)
            continue
        if t.device.type != "cpu" or t.dtype != torch.float32 or t.requires_grad \
                or t.dim() < 1:
            return None
        try:
            view = t.view(t.shape[0], -1)
        except RuntimeError:  # not viewable as rows: the torch code
            return None
        if view.shape[1] > 1 and view.stride(1) != 1:
            return None
        if shape is not None and view.shape != shape:
            return None
        shape = view.shape
        out.append(view.numpy())
    return tuple(out)


@functools.cache
def _kernels():
    """The compiled kernels, or None without numba."""
    try:
        from gossipfl.engine import _fused_update_numba as kernels
    except ImportError:
        return None
    return kernels


__all__ = ["sgd_update", "takes"]
