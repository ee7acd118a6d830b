"""What the compiled CPU kernels (the fused update's, compressed gossip's) share: the
``GOSSIPFL_KERNELS=torch`` switch that turns them off, and row blocks on threads for kernels
that release the GIL (no numba threading layer, so the kernels stay fork-safe under the
multi-process backend)."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable

import torch

#: below this many values per thread a kernel is not worth a thread
PARALLEL_NUMEL = 1 << 18


def torch_forced() -> bool:
    """Whether ``GOSSIPFL_KERNELS=torch`` asks for the torch code instead of the compiled
    kernels (read at each call, so that a test or a user can switch it)."""
    return os.environ.get("GOSSIPFL_KERNELS", "").lower() == "torch"


def in_threads(n: int, numel: int, block: Callable[[int, int], None]) -> None:
    """``block(lo, hi)`` on contiguous blocks of the n rows, one thread each (as many threads
    as torch uses, fewer for small work: at least :data:`PARALLEL_NUMEL` values each), the
    first block on the calling thread; an error in any block is raised here. A row's result
    must depend on that row alone, so the split changes no bit."""
    threads = max(1, min(torch.get_num_threads(), n, numel // PARALLEL_NUMEL))
    bounds = [n * i // threads for i in range(threads + 1)]
    errors: list[BaseException] = []

    def guarded(lo: int, hi: int) -> None:
        try:
            block(lo, hi)
        except BaseException as error:  # noqa: BLE001 (re-raised by the calling thread)
            errors.append(error)

    workers = [threading.Thread(target=guarded, args=(lo, hi))
               for lo, hi in itertools.pairwise(bounds[1:])]
    for w in workers:
        w.start()
    guarded(bounds[0], bounds[1])
    for w in workers:
        w.join()
    if errors:
        raise errors[0]


__all__ = ["PARALLEL_NUMEL", "in_threads", "torch_forced"]
