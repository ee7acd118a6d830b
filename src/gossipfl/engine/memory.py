"""CPU allocator tuning for the simulator's large, short-lived tensors.

Every local step allocates a few ``[M, P]`` tensors (the gradients, the update's temporaries)
and the stacked oracle's activation blocks, tens to thousands of MiB each. glibc serves blocks
above its mmap threshold (at most 32 MiB) with freshly mapped pages and unmaps them on free, so
every step pays a page fault for each 4 KiB it touches again: about 0.5 s per GiB on the
benchmark machine, more than the arithmetic of a small model (docs/benchmarks.md).

:func:`keep_freed_memory` asks glibc to serve every block from its heap and never to give
freed heap memory back to the system, so a step's tensors reuse the pages of the previous
step. The price: the process keeps its peak memory until it exits. It is process-wide; the
runner calls it on CPU unless ``engine.keep_freed_memory: false``. Elsewhere call it once at
start-up, or set ``MALLOC_MMAP_MAX_=0`` and ``MALLOC_TRIM_THRESHOLD_=-1`` in the environment
before Python starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1  # glibc mallopt parameters (malloc.h)
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Make glibc keep and reuse freed memory (no mmap per large block, no trimming).

    Returns True when applied, False where the C library is not glibc (nothing changes).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, -1))
