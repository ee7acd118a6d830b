"""numba kernels of :mod:`gossipfl.engine.fused_update` (imported only through it).

Each operation is the one torch's CPU kernels do, in float32: a product rounded
(``μ * y``), a sum rounded (``g + t``), and ``add(alpha=)`` as one fused multiply-add
(``llvm.fma.f32``: a single rounding, as torch's vectorized ``vec::fmadd``).

The rows come as views of the ``[M, P]`` stack (a parameter's columns of every row: unit
stride within a row, a row stride of P), which numba types as arrays of any layout; each row
is taken through ``np.ascontiguousarray`` (a view: the row is contiguous), whose C layout lets
LLVM vectorize the inner loop. Without it the kernel ran at 0.57x torch's plain ``add_`` on
such views (15.7 ms against 8.9 ms a step of the mlp, 100 clients) and weight decay cost
the round 1.14x (benchmarks/results/wd_views_cpu.txt).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


@intrinsic
def _fma(typingctx, a, b, c):
    """a·b + c with one rounding (LLVM's fma intrinsic on float32)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        fma = cgutils.get_or_insert_function(builder.module,
                                             ir.FunctionType(f32, [f32, f32, f32]),
                                             "llvm.fma.f32")
        return builder.call(fma, args)

    return sig, codegen


@numba.njit(nogil=True, cache=True)
def decayed(g, y, mu, neg_lr):
    """y ← y − η (g + μ_wd y): ``y.add_(g.add_(μ_wd * y), alpha=−η)``."""
    for i in range(g.shape[0]):
        gi, yi = np.ascontiguousarray(g[i]), np.ascontiguousarray(y[i])  # views (C layout)
        for j in range(g.shape[1]):
            old = yi[j]
            yi[j] = _fma(neg_lr, gi[j] + mu * old, old)


@numba.njit(nogil=True, cache=True)
def heavy_ball(g, y, v, mu, decay, momentum, neg_lr):
    """d = g (+ μ_wd y when ``decay``), v ← μ v − η d, y ← y + v:
    ``v.mul_(μ).add_(d, alpha=−η)``, ``y.add_(v)``."""
    for i in range(g.shape[0]):
        gi, yi = np.ascontiguousarray(g[i]), np.ascontiguousarray(y[i])  # views (C layout)
        vi = np.ascontiguousarray(v[i])
        for j in range(g.shape[1]):
            old = yi[j]
            d = gi[j] + mu * old if decay else gi[j]
            step = _fma(neg_lr, d, momentum * vi[j])
            vi[j] = step
            yi[j] = old + step
