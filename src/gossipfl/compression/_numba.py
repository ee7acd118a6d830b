"""numba versions of :mod:`gossipfl.compression.kernels` (imported only through it).

Each kernel walks its rows one at a time, so that a row stays in cache between the
threshold's sample, the candidate pass and the selection; with ``h`` None (compiled apart)
d is ``x`` itself. Every arithmetic operation is the one the torch definition does, in the
arrays' dtype, so results are bitwise equal. The candidate pass lets NaNs through
(``not a < th``) and maps them to +inf only among the candidates, so that the hot loop has
no extra test.
"""

from __future__ import annotations

import numba
import numpy as np

#: the sample's runs of consecutive coordinates (a 64-byte cache line of float32)
RUN = 16


@numba.njit(inline="always")
def _d(z, h, j):
    if h is None:
        return z[j]
    return z[j] - h[j]


@numba.njit(inline="always")
def _finite(a):
    return np.inf if np.isnan(a) else a  # a NaN counts as the largest, as in torch.topk


@numba.njit(inline="always")
def _threshold(z, h, stride, rank):
    """The rank-th largest of a 1/stride sample of the |d_j| (−inf without sampling): runs of
    RUN consecutive coordinates, one run every RUN·stride (a cache line each, so the sample
    reads 1/stride of the row's lines rather than all of them)."""
    if stride == 1:
        return -np.inf
    p = z.shape[0]
    period = RUN * stride
    n = 0
    for start in range(0, p, period):
        n += min(RUN, p - start)
    sample = np.empty(n, np.float64)
    q = 0
    for start in range(0, p, period):
        for j in range(start, min(start + RUN, p)):
            sample[q] = _finite(abs(_d(z, h, j)))
            q += 1
    return np.partition(sample, n - rank)[n - rank]


@numba.njit(inline="always")
def _choose(z, h, k, cv, ci, c, idx, values):
    """The k largest of the c candidates (|d| in cv, ascending indices in ci), ties to the
    lowest index, into idx/values in index order."""
    if c < k or c == cv.shape[0] < z.shape[0]:  # the threshold missed: every coordinate
        c = z.shape[0]
        cv = np.empty(c, cv.dtype)
        ci = np.arange(c)
        for j in range(c):
            cv[j] = abs(_d(z, h, j))
    for q in range(c):
        cv[q] = _finite(cv[q])
    kth = np.partition(cv[:c].copy(), c - k)[c - k]
    missing = k
    for q in range(c):
        if cv[q] > kth:
            missing -= 1
    o = 0
    for q in range(c):
        take = cv[q] > kth
        if not take and cv[q] == kth and missing > 0:
            take = True
            missing -= 1
        if take:
            idx[o] = ci[q]
            values[o] = _d(z, h, ci[q])
            o += 1


@numba.njit(inline="always")
def _buffers(x, stride, rank):
    """The candidates' |d| and indices for a row of x (allocated once per call and reused by
    every row)."""
    p = x.shape[1]
    cap = p if stride == 1 else min(p, 4 * rank * stride)
    return np.empty(cap, x.dtype), np.empty(cap, np.int64)


@numba.njit(inline="always")
def _select_row(z, h, k, stride, rank, idx, values, cv, ci, s, g, out):
    """One row's top-k of d = z − h (h None: z); with ``s`` given (compiled apart) the same
    pass also writes out = (s − h)·g + z. Candidates past the buffer's capacity are dropped
    and the row redone in full by :func:`_choose`."""
    th = _threshold(z, h, stride, rank)
    c = 0
    for j in range(z.shape[0]):
        if s is not None:
            out[j] = (s[j] - h[j]) * g + z[j]
        a = abs(_d(z, h, j))
        if not a < th and c <= cv.shape[0]:
            if c < cv.shape[0]:
                cv[c] = a
                ci[c] = j
            c += 1
    _choose(z, h, k, cv, ci, min(c, cv.shape[0]), idx, values)


@numba.njit(nogil=True, cache=True)
def select(x, h, k, stride, rank, idx, values):
    """kernels.top_k on the rows of x (d = x − h, or x with h None)."""
    cv, ci = _buffers(x, stride, rank)
    for i in range(x.shape[0]):
        if h is None:
            _select_row(x[i], None, k, stride, rank, idx[i], values[i], cv, ci, None, 0.0,
                        None)
        else:
            _select_row(x[i], h[i], k, stride, rank, idx[i], values[i], cv, ci, None, 0.0,
                        None)


@numba.njit(nogil=True, cache=True)
def select_consensus(x, h, k, stride, rank, idx, values, s, g, out):
    """kernels.top_k_consensus: select's pass over d = x − h also writes
    out = (s − h)·g + x."""
    cv, ci = _buffers(x, stride, rank)
    for i in range(x.shape[0]):
        _select_row(x[i], h[i], k, stride, rank, idx[i], values[i], cv, ci, s[i], g, out[i])


def scalar(dtype, value: float):
    """``value`` in the arrays' precision (torch multiplies a float32 tensor by a float32
    scalar)."""
    return np.float32(value) if str(dtype) == "torch.float32" else np.float64(value)


@numba.njit(nogil=True, cache=True)
def deliver(lo, hi, idx, values, indptr, senders, weights, copy, mixed, x, z, g):
    """kernels.deliver for the receivers lo..hi−1 (edges of receiver i at
    indptr[i]:indptr[i+1]), in the torch definition's order of additions."""
    k = idx.shape[1]
    for i in range(lo, hi):
        for q in range(k):
            c = idx[i, q]
            copy[i, c] += values[i, q]
            if x is not None:  # final unless a message below changes mixed[i, c] again
                x[i, c] = (mixed[i, c] - copy[i, c]) * g + z[i, c]
        for e in range(indptr[i], indptr[i + 1]):
            j, w = senders[e], weights[e]
            for q in range(k):
                c = idx[j, q]
                mixed[i, c] += w * values[j, q]
                if x is not None:  # the last message to (i, c) writes the final value
                    x[i, c] = (mixed[i, c] - copy[i, c]) * g + z[i, c]
