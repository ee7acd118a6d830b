"""benchmarks/gpu_paths.py, the script measured on a borrowed GPU, checked on the CPU with tiny
sizes: every section runs to the end without an error and writes its records."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import gpu_paths


@pytest.mark.slow
def test_small_cpu_run_writes_every_section(tmp_path, capsys):
    out = tmp_path / "gpu_paths.jsonl"
    threads = torch.get_num_threads()
    try:
        assert gpu_paths.main(["--device", "cpu", "--small", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    done = {r["section"]: r for r in records if r["case"] == "section_done"}
    assert set(done) == set(gpu_paths.SECTIONS)
    assert all(r["status"] == "ok" for r in done.values()), done
    assert not [r for r in records if "error" in r]
    cases = {(r["section"], r["case"]) for r in records}
    assert ("conv_layers", "network_sum") in cases and ("conv_layers", "step_profile") in cases
    layers = [r for r in records if r["case"] == "layer" and "ms" in r]
    shapes = next(r for r in records if r["case"] == "shapes")["shapes"]
    assert len(shapes) == 11 and sum(s["count"] for s in shapes) == 20  # ResNet-18's 20 convs
    assert len(layers) == 11 * 3  # every shape, every CPU formulation
    gossip = [r for r in records if r["section"] == "gossip_scale" and "round_s" in r]
    assert {r["method"] for r in gossip} == {"roll", "slices", "csr"}
    assert "## cuda_graphs" in capsys.readouterr().out


def test_ring_gossip_three_ways_agree():
    X = torch.randn(7, 5)
    ring = (torch.roll(X, 1, 0) + X + torch.roll(X, -1, 0)) / 3
    csr = torch.sparse.mm(gpu_paths.ring_csr(7, torch.device("cpu")), X)
    for got in (gpu_paths.gossip_roll(X), gpu_paths.gossip_slices(X), csr):
        torch.testing.assert_close(got, ring)


def test_conv_formulations_compute_the_stacked_convolution():
    """The GEMM (unfold + bmm) layout gives each client's own convolution, as the grouped
    convolution does (a 3×3 stride-2 layer, M = 2 clients, N = 3 samples)."""
    model = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False)
    shape = gpu_paths.ConvShape(model, (8, 8), True)
    M, N = 2, 3
    gemm = gpu_paths.ConvCase(shape, M, N, torch.device("cpu"), "gemm", "fp32")
    y = gemm.forward(gemm.x, gemm.w)  # [M, O, N·L]
    for m in range(M):
        ref = torch.nn.functional.conv2d(gemm.x[m], gemm.w[m].view(6, 4, 3, 3), None, 2, 1)
        torch.testing.assert_close(y[m].view(6, N, 16).transpose(0, 1),
                                   ref.flatten(2), rtol=1e-4, atol=1e-4)
