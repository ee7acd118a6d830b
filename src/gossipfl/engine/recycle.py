"""Large ``[M, P]`` buffers kept from round to round instead of allocated afresh.

A round of a decentralized algorithm on many clients makes a few whole-stack tensors (the
working copy Y of the models, the gossip output W Y), gigabytes each at 10⁵ clients. A fresh
one is served by glibc with newly mapped pages and returned to the kernel when freed, so every
round pays a page fault for each 4 KiB it writes (about 0.3 s per GiB on the benchmark
machine, more than the copy itself: docs/benchmarks.md, "The CPU's last steps").

A :class:`Recycler` keeps the buffers it handed out and hands one out again once nothing else
refers to it: no tensor, view or storage object outside the recycler holds its storage (the
storage's reference count, which every view and saved tensor raises). A buffer still in use is
never handed out, so recycling changes where a tensor lives, never a value. Only buffers of at
least ``min_bytes`` are kept (smaller ones are cheap to allocate), and at most ``limit``: when
every kept one is in use a new one takes the place of the oldest, which is then freed as soon
as its holder lets go of it. So a caller that holds each output longer than a round (an
algorithm that keeps x^t while it mixes) gets fresh buffers as before, and no more memory
than before is held between rounds.
"""

from __future__ import annotations

import sys

import torch

#: Buffers smaller than this are allocated as usual (glibc's heap serves them without a fault
#: per page once engine.keep_freed_memory is on).
MIN_BYTES = 64 * 2**20


def _references(base: torch.Tensor) -> tuple[int, int]:
    """(the storage's reference count, the Python references to its storage object): what
    tensors and views hold it, and who holds its Python storage object."""
    storage = base.untyped_storage()
    return torch._C._storage_Use_Count(storage._cdata), sys.getrefcount(storage)


_ALONE: tuple[int, int] | None = None  # the counts of a tensor nothing else refers to


def _shared(base: torch.Tensor) -> bool:
    """Whether anything besides ``base`` itself refers to its storage (a tensor, a view, a
    storage object), by the counts of a tensor alone, read the same way once (torch's own
    bookkeeping of the storage's Python object varies by version)."""
    global _ALONE
    if _ALONE is None:
        _ALONE = _references(torch.empty(1))
    tensors, objects = _references(base)
    return tensors > _ALONE[0] or objects > _ALONE[1]


class Recycler:
    """Hands out ``[shape]`` tensors in buffers it keeps (see the module doc)."""

    def __init__(self, limit: int = 2, min_bytes: int | None = None):
        self.limit = limit
        self.min_bytes = MIN_BYTES if min_bytes is None else min_bytes
        self._bases: list[torch.Tensor] = []

    def __len__(self) -> int:
        return len(self._bases)

    def nbytes(self) -> int:
        """Bytes held by the kept buffers (in use or not)."""
        return sum(b.numel() * b.element_size() for b in self._bases)

    def empty(self, shape, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """An uninitialized tensor of ``shape``: a kept buffer nothing else refers to, else a
        new one (kept when large enough and the recycler is not full)."""
        device = torch.device(device)
        numel = 1
        for n in shape:
            numel *= int(n)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if nbytes < self.min_bytes:
            return torch.empty(shape, dtype=dtype, device=device)
        for base in self._bases:
            if (base.numel() == numel and base.dtype == dtype and base.device == device
                    and not _shared(base)):
                return base.view(shape)
        fresh = torch.empty(numel, dtype=dtype, device=device)
        if len(self._bases) >= self.limit:  # full: the oldest is let go (freed with its
            self._bases.pop(0)              # holder), so no buffer waits here unused
        self._bases.append(fresh)
        return fresh.view(shape)

    def clone(self, x: torch.Tensor) -> torch.Tensor:
        """A contiguous copy of ``x`` (``x.clone()``'s values) in a kept buffer."""
        out = self.empty(x.shape, x.dtype, x.device)
        return out.copy_(x)

    def clear(self) -> None:
        """Forget every kept buffer (the ones in use live on with their holders)."""
        self._bases.clear()
