"""Host data onto the device without making the host wait for it.

A copy from the host to a GPU that blocks (``torch.tensor(values, device="cuda")``,
``tensor.to("cuda")``) waits until the device has run everything queued before it: within a
round, each one stops the host from running ahead of the device. :func:`to_device` copies
through page-locked memory, asynchronously: the copy is queued after the device's work, and
the host goes on (the page-locked block is kept until the copy has run). On the CPU it is the
plain tensor.
"""

from __future__ import annotations

import numpy as np
import torch


def to_device(values, device: str | torch.device, dtype: torch.dtype | None = None
              ) -> torch.Tensor:
    """``values`` (a NumPy array, a sequence of numbers or a tensor) as a tensor on
    ``device`` (of ``dtype``), copied from the host without waiting for the device; a tensor
    of the caller's own on the CPU (never a view of ``values``). A tensor already on a
    device is moved as ``Tensor.to`` moves it."""
    device = torch.device(device)
    if isinstance(values, torch.Tensor) and values.device.type != "cpu":
        return values.to(device=device, dtype=dtype)
    host = torch.as_tensor(np.array(values) if not isinstance(values, torch.Tensor)
                           else values.clone(), dtype=dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


__all__ = ["to_device"]
