"""``engine.precision`` (gossipfl.engine.precision): fp32 by default with TF32 off on CUDA
(PyTorch's own default lets cuDNN convolutions use TF32), tf32 and bf16 on request; on a CPU
every setting computes in float32. The CUDA tests run where a GPU is present."""

from __future__ import annotations

import pytest
import torch

from gossipfl.assembly.loading import load_config
from gossipfl.data import from_tensors
from gossipfl.errors import GossipflError
from tests import distributed_cases as cases

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def cnn_setup(device: str, precision: str | None = None) -> dict:
    gen = torch.Generator().manual_seed(0)
    data = from_tensors(torch.randn(96, 1, 16, 16, generator=gen),
                        torch.randint(0, 3, (96,), generator=gen),
                        torch.randn(24, 1, 16, 16, generator=gen),
                        torch.randint(0, 3, (24,), generator=gen))
    engine = {} if precision is None else {"precision": precision}
    return {"data": {"tensors": data, "clients": 6, "partition": "iid"},
            "model": {"name": "cnn"}, "topology": {"name": "ring"},
            "algorithm": {"name": "dfedavg"},
            "train": {"rounds": 2, "local_steps": 3, "batch_size": 8, "lr": 0.05},
            "engine": engine, "device": device, "seed": 2}


def test_an_unknown_precision_is_one_sentence():
    with pytest.raises(GossipflError, match=r"engine\.precision: unknown value 'fp16'"):
        load_config({"engine": {"precision": "fp16"}})


@pytest.mark.represented
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_on_cpu_every_precision_is_float32_with_a_warning(precision):
    want = cases.measure_config(cnn_setup("cpu"))
    with pytest.warns(UserWarning, match=f"engine.precision: '{precision}' applies to CUDA"):
        got = cases.measure_config(cnn_setup("cpu", precision))
    assert torch.equal(got["params"], want["params"])


@cuda
def test_fp32_on_cuda_gives_the_cpu_numbers_and_turns_tf32_off():
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
    want = cases.measure_config(cnn_setup("cpu"))
    got = cases.measure_config(cnn_setup("cuda"))
    assert not torch.backends.cudnn.allow_tf32
    assert not torch.backends.cuda.matmul.allow_tf32
    torch.testing.assert_close(got["params"].cpu(), want["params"], rtol=1e-5, atol=1e-5)


@cuda
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_reduced_precisions_run_on_cuda_and_stay_close(precision):
    want = cases.measure_config(cnn_setup("cuda"))
    got = cases.measure_config(cnn_setup("cuda", precision))
    assert torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32
    difference = (got["params"] - want["params"]).abs().max() / want["params"].abs().max()
    assert 0 < difference < 0.1  # a different arithmetic, the same training
