"""Host data onto the device without waiting for it (gossipfl.common.transfer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipfl.common.transfer import to_device


@pytest.mark.parametrize("values", [np.array([3, 1, 2]), [3, 1, 2], torch.tensor([3, 1, 2])],
                         ids=["numpy", "list", "tensor"])
def test_to_device_gives_the_values_as_a_tensor_of_its_own(values):
    """The values, of the dtype asked for, in a tensor that is not a view of the caller's
    (a later write to the source does not reach it)."""
    got = to_device(values, "cpu", torch.int64)
    assert got.dtype == torch.int64 and got.tolist() == [3, 1, 2]
    if not isinstance(values, list):
        values[0] = 7
    assert got.tolist() == [3, 1, 2]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_device_copies_onto_cuda_without_waiting():
    """Onto a GPU through page-locked memory, asynchronously: no synchronization (CUDA's
    synchronization debug mode raises at one), the same values."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = to_device(np.arange(5), "cuda", torch.int64)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert got.device.type == "cuda" and got.cpu().tolist() == list(range(5))
