"""Where the compiled top-k samples its threshold (:mod:`gossipfl.compression.kernels` and
its numba kernels, :mod:`gossipfl.compression._numba`, both read it): runs of ``RUN``
consecutive coordinates, one run every ``RUN · STRIDE``."""

from __future__ import annotations

import math

#: the compiled top-k's threshold samples 1 coordinate in STRIDE ...
STRIDE = 64
#: ... in runs of RUN consecutive ones (1 KiB of float32: few scattered reads per row)
RUN = 256


def sampling(p: int, k: int) -> tuple[int, int]:
    """(stride, rank): the threshold is the rank-th largest of a sample of the |d_j| — runs of
    RUN coordinates, one every RUN·stride, n values in all — with rank set so that the
    expected λ = k·n/p sampled coordinates among the top k exceed it with probability below
    1e-9 (a Poisson tail: rank = λ + 6√λ + 6); stride 1 (no sampling) where the candidates
    would not be fewer than the row."""
    period = RUN * STRIDE
    n = (p // period) * RUN + min(RUN, p % period)
    lam = k * n / p
    rank = math.ceil(lam + 6 * math.sqrt(lam) + 6)
    if 4 * rank * STRIDE >= p or rank > n:
        return 1, 1
    return STRIDE, rank


__all__ = ["RUN", "STRIDE", "sampling"]
