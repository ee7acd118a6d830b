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
from numba.core import types
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import overload

from gossipfl.compression.sampling import RUN


@numba.njit(inline="always")
def _d(z, h, j):
    if h is None:
        return z[j]
    return z[j] - h[j]


@numba.njit(inline="always")
def _finite(a):
    return np.inf if np.isnan(a) else a  # a NaN counts as the largest, as in torch.topk


@numba.njit(inline="always")
def _threshold(z, h, stride, rank, sample):
    """The rank-th largest of a sample of the |d_j| (−inf without sampling): runs of RUN
    consecutive coordinates, one run every RUN·stride (each run a few cache lines that the
    hardware prefetches, so that the sample costs a few scattered reads per row rather than
    one per line), the rank-th largest found by radix selection on its bits."""
    if stride == 1:
        sample[0] = -np.inf
        return sample[0]
    p = z.shape[0]
    n = 0
    for start in range(0, p, RUN * stride):
        for j in range(start, min(start + RUN, p)):
            sample[n] = _finite(abs(_d(z, h, j)))
            n += 1
    keys = _bits(sample)
    keys[0] = _kth_key(keys, n, n - rank)
    return sample[0]


def _bits(a):
    """The unsigned integers with a's bits (compiled only, through the overload below)."""
    raise NotImplementedError


@overload(_bits)
def _bits_overload(a):
    if a.dtype == types.float32:
        return lambda a: a.view(np.uint32)
    return lambda a: a.view(np.uint64)


@numba.njit(inline="always")
def _kth_key(keys, c, r):
    """The r-th smallest (from 0) of keys[:c], by radix selection one byte at a time from the
    most significant: for non-negative floats (and +inf) the order of their bits as unsigned
    integers is the order of the values, and the counting has almost no branches to
    mispredict, where a quickselect on fresh data mispredicts half of its comparisons."""
    hist = np.zeros(256, np.int64)
    prefix = keys[0] ^ keys[0]
    fixed = prefix
    shift = 8 * keys.itemsize
    while shift > 0:
        shift -= 8
        hist[:] = 0
        for q in range(c):
            key = keys[q]
            hist[(key >> shift) & 255] += (key & fixed) == prefix
        digit = 0
        while r >= hist[digit]:
            r -= hist[digit]
            digit += 1
        prefix |= type(prefix)(digit) << shift
        fixed |= type(prefix)(255) << shift
    return prefix


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
    keys = _bits(cv)  # |d| ≥ 0 or +inf: compared as their bits
    kth = _kth_key(keys, c, c - k)
    missing = k
    for q in range(c):
        missing -= keys[q] > kth
    o = 0
    for q in range(c):
        take = keys[q] > kth
        if not take and keys[q] == kth and missing > 0:
            take = True
            missing -= 1
        if take:
            idx[o] = ci[q]
            values[o] = _d(z, h, ci[q])
            o += 1


@numba.njit(inline="always")
def _buffers(x, stride, rank):
    """The threshold's sample, the candidates' |d| and indices, and the candidate flags (one
    bit per coordinate), for a row of x (allocated once per call and reused by every row)."""
    p = x.shape[1]
    cap = p if stride == 1 else min(p, 4 * rank * stride)
    sample = np.empty(1 if stride == 1 else -(-p // (RUN * stride)) * RUN, x.dtype)
    return sample, np.empty(cap, x.dtype), np.empty(cap, np.int64), np.empty(-(-p // 64),
                                                                              np.uint64)


@numba.njit(inline="always")
def _flag(z, h, th, flags):
    """flags' bit j (of word j // 64) set where |d_j| ≥ θ or d_j is NaN: 64 comparisons
    to a word (a loop the compiler vectorizes)."""
    p = z.shape[0]
    for w in range(flags.shape[0]):
        lo = 64 * w
        word = np.uint64(0)
        for b in range(min(64, p - lo)):
            word |= np.uint64(not abs(_d(z, h, lo + b)) < th) << np.uint64(b)
        flags[w] = word


@numba.njit(inline="always")
def _collect(z, h, flags, cv, ci):
    """The flagged coordinates, in index order, into ci (index) and cv (|d|), one set bit at
    a time (its trailing zeros); returns how many fit (the capacity where they did not)."""
    c = 0
    for w in range(flags.shape[0]):
        word = flags[w]
        while word != 0:
            if c == cv.shape[0]:
                return c
            ci[c] = 64 * w + trailing_zeros(word)
            word &= word - np.uint64(1)
            c += 1
    for q in range(c):
        cv[q] = abs(_d(z, h, ci[q]))
    return c


@numba.njit(inline="always")
def _select_row(z, h, k, stride, rank, idx, values, sample, cv, ci, flags):
    """One row's top-k of d = z − h (h None: z). The pass over the row only flags the
    candidates; :func:`_collect` gathers them. Candidates past the buffer's capacity are
    dropped and the row redone in full by :func:`_choose`."""
    _flag(z, h, _threshold(z, h, stride, rank, sample), flags)
    _choose(z, h, k, cv, ci, _collect(z, h, flags, cv, ci), idx, values)


@numba.njit(nogil=True, cache=True)
def select(x, h, k, stride, rank, idx, values):
    """kernels.top_k on the rows of x (d = x − h, or x with h None)."""
    sample, cv, ci, flags = _buffers(x, stride, rank)
    for i in range(x.shape[0]):
        if h is None:
            _select_row(x[i], None, k, stride, rank, idx[i], values[i], sample, cv, ci, flags)
        else:
            _select_row(x[i], h[i], k, stride, rank, idx[i], values[i], sample, cv, ci, flags)


@numba.njit(inline="always")
def _consensus_row(z, copy, mixed, g, out):
    """One row of the consensus: out = (mixed − copy)·g + z."""
    for j in range(z.shape[0]):
        out[j] = (mixed[j] - copy[j]) * g + z[j]


@numba.njit(nogil=True, cache=True)
def consensus(z, copy, mixed, g, out):
    """kernels.consensus: out = (mixed − copy)·g + z, one pass (each operation rounded in
    the arrays' dtype, as torch's sub, mul and add)."""
    for i in range(z.shape[0]):
        _consensus_row(z[i], copy[i], mixed[i], g, out[i])


def scalar(dtype, value: float):
    """``value`` in the arrays' precision (torch multiplies a float32 tensor by a float32
    scalar)."""
    return np.float32(value) if str(dtype) == "torch.float32" else np.float64(value)


@numba.njit(inline="always")
def _touch(a, b):
    """Read one value per cache line of a and b: a streaming read that the hardware
    prefetches, so that the scattered updates after it hit the cache instead of waiting on
    memory one line at a time. Returns a sum, so that the reads stay."""
    t = a[0] - a[0]
    for c in range(0, a.shape[0], 16):
        t += a[c] + b[c]
    return t


@numba.njit(nogil=True, cache=True)
def deliver(lo, hi, idx, values, indptr, senders, weights, copy, mixed, z, g, out):
    """kernels.deliver for the receivers lo..hi−1 (edges of receiver i at
    indptr[i]:indptr[i+1]), in the torch definition's order of additions; with z (not None)
    also each receiver's consensus row into out, right after its delivery, while its copy and
    mix are still in cache."""
    k = idx.shape[1]
    lines = 0.0
    for i in range(lo, hi):
        lines += _touch(copy[i], mixed[i])
        for q in range(k):
            copy[i, idx[i, q]] += values[i, q]
        for e in range(indptr[i], indptr[i + 1]):
            j, w = senders[e], weights[e]
            for q in range(k):
                mixed[i, idx[j, q]] += w * values[j, q]
        if z is not None:
            _consensus_row(z[i], copy[i], mixed[i], g, out[i])
    return lines
