"""Arithmetic precision on CUDA (``engine.precision``).

- ``fp32`` (default): float32 everywhere, TF32 off for matmuls *and* cuDNN convolutions.
  PyTorch's own default lets cuDNN convolutions use TF32 (10 mantissa bits), which moved a
  cnn's models by 1.2·10⁻² (relative) after 3 rounds on an H200, against 1.5·10⁻⁷ between
  the CPU and the GPU in fp32 (``benchmarks/gpu.py``, docs/benchmarks.md): gossipfl's default
  keeps the numbers of the tests.
- ``tf32``: TF32 tensor cores for float32 matmuls and convolutions (2.3× faster cnn rounds on
  an H200; the numbers move as above).
- ``bf16``: as tf32, and the local steps under ``torch.autocast(bfloat16)`` (parameters,
  gradients and updates stay float32; evaluation runs in float32).

The flags are process-wide (``torch.backends``): the last run built in a process sets them.
On a CPU device every setting computes in float32 (a warning says so for tf32/bf16).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

PRECISIONS = ("fp32", "tf32", "bf16")


def apply_precision(precision: str, device: torch.device, local_step: Callable) -> Callable:
    """Set the TF32 flags for ``precision`` on a CUDA ``device``; return the local step to
    use (``local_step`` itself, or wrapped in bf16 autocast)."""
    if device.type != "cuda":
        if precision != "fp32":
            warnings.warn(f"engine.precision: {precision!r} applies to CUDA devices; on "
                          f"{device.type} the run computes in float32.", stacklevel=3)
        return local_step
    tf32 = precision != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    if precision != "bf16":
        return local_step

    def bf16_step(*args, **kwargs):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            return local_step(*args, **kwargs)

    # autocast keeps nothing on the host: a phase graph may capture it if it may the step
    bf16_step.graphable = getattr(local_step, "graphable", False)
    return bf16_step
