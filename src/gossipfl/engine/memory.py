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
import os
import sys
from typing import Any

from gossipfl.errors import GossipflError

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


# --------------------------------------------------------------------------------------------
# Allocations that cannot fit: refused up front, with the estimate
# --------------------------------------------------------------------------------------------
def available_memory(device: Any = "cpu") -> int | None:
    """Bytes that can still be allocated on ``device`` (None when unknown): CUDA's free
    memory; on CPU the smaller of Linux's MemAvailable (else the free physical pages) and
    what the address-space limit (``ulimit -v``) leaves."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    physical = _physical_available()
    limit = address_space_left()
    if physical is None or limit is None:
        return physical if limit is None else limit
    return min(physical, limit)


def _physical_available() -> int | None:
    """Linux's MemAvailable, else the free physical pages (None when unknown)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def address_space_left() -> int | None:
    """Bytes the process may still map under its address-space limit (``ulimit -v``,
    RLIMIT_AS): the soft limit less the virtual memory it holds (None: no limit, or unknown)."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    return max(soft - _virtual_size(), 0)


def _virtual_size() -> int:
    """The process's virtual memory size in bytes (0 when unknown)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def require_memory(needed: int, what: str, key: str, device: Any = "cpu") -> None:
    """Refuse (one sentence naming ``key``) an allocation of ``needed`` bytes that cannot fit
    in the memory available on ``device``; ``needed`` should count only what is certain."""
    available = available_memory(device)
    sharing = processes_sharing(device)
    if available is not None and needed > available // sharing:
        share = (f" (shared by the {sharing} processes of this job on this machine: "
                 f"{format_size(available // sharing)} each)" if sharing > 1 else "")
        raise GossipflError(f"{key}: {what} needs at least {format_size(needed)}, but only "
                            f"{format_size(available)} of memory is available on "
                            f"{device}{share}.")


def processes_sharing(device: Any = "cpu") -> int:
    """How many processes of this job share the memory ``device`` checks: the launcher's
    local ranks for the host's memory (torchrun's ``LOCAL_WORLD_SIZE``), 1 for a GPU (each
    rank has its own) or without a launcher."""
    if str(device).startswith("cuda"):
        return 1
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def format_size(n: float) -> str:
    """``n`` bytes in binary units, e.g. ``1.5 GiB``."""
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"
