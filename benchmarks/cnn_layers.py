"""Where the stacked oracle's time goes on the ``cnn``: each layer of one block of clients
timed alone (forward + backward, the kernels and layouts the stacked oracle uses), against the
whole block's ``loss_and_grad`` and the fp32 matmul peak, all in one run.

torch.profiler is not used for this: with it attached, oneDNN convolutions and large fills
measured 3–10× slower than without, which hides where the time really goes.

    python -m benchmarks.cnn_layers                # block of 4 clients × 32 samples
    python -m benchmarks.cnn_layers --clients 16
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from benchmarks.common import markdown_table, matmul_peak, start_cpu_run
from gossipfl.engine import init_stack
from gossipfl.engine.stacked import StackedOracle
from gossipfl.models import build_model


def best_of(fn: Callable[[], object], reps: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def channels_last(*shape: int, grad: bool = False) -> torch.Tensor:
    t = torch.randn(*shape).contiguous(memory_format=torch.channels_last)
    return t.requires_grad_(grad)


def layer_cases(M: int, N: int) -> list[tuple[str, float, Callable[[], object]]]:
    """(name, FLOPs of forward + backward, function) for every layer of the cnn's block."""
    x1 = channels_last(N, M, 28, 28)
    w1 = torch.randn(M * 64, 1, 5, 5, requires_grad=True)
    a1 = channels_last(N, M * 64, 24, 24, grad=True)
    x2 = channels_last(N, M * 64, 12, 12, grad=True)
    w2 = torch.randn(M * 64, 64, 5, 5, requires_grad=True)
    a2 = channels_last(N, M * 64, 8, 8, grad=True)
    h = torch.randn(M, 1024, N, requires_grad=True)
    fc = [torch.randn(M, o, i, requires_grad=True) for i, o in ((1024, 384), (384, 192),
                                                                 (192, 10))]

    def backward(y: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> None:
        torch.autograd.grad(y, inputs, torch.ones_like(y))

    def conv1() -> None:  # the input needs no gradient: weight gradient only
        backward(F.conv2d(x1, w1, None, 1, 0, 1, M), (w1,))

    def conv2() -> None:
        backward(F.conv2d(x2, w2, None, 1, 0, 1, M), (x2, w2))

    def pool(a: torch.Tensor) -> Callable[[], None]:
        return lambda: backward(F.relu(F.max_pool2d(a, 2)), (a,))

    def dense() -> None:
        y = h
        for w in fc:
            y = F.relu(torch.bmm(w, y))
        backward(y, (h, *fc))

    conv1_flops = 2 * 2 * N * M * 64 * 25 * 24 * 24  # forward + weight gradient
    conv2_flops = 3 * 2 * N * M * 64 * 64 * 25 * 8 * 8
    dense_flops = 3 * 2 * N * M * (1024 * 384 + 384 * 192 + 192 * 10)
    return [
        ("conv 5×5 1→64 (grouped, 28×28)", conv1_flops, conv1),
        ("ReLU + max-pool on 64×24×24", 0, pool(a1)),
        ("conv 5×5 64→64 (grouped, 12×12)", conv2_flops, conv2),
        ("ReLU + max-pool on 64×8×8", 0, pool(a2)),
        ("FC 1024→384→192→10 (bmm)", dense_flops, dense),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4, help="clients per block")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    device = start_cpu_run(args.threads)
    M, N = args.clients, args.batch
    peak = matmul_peak(device)
    rows, total_flops, total_time = [], 0.0, 0.0
    for name, flops, fn in layer_cases(M, N):
        seconds = best_of(fn, args.reps)
        total_flops, total_time = total_flops + flops, total_time + seconds
        rate = f"{flops / seconds / 1e9:.0f}" if flops else "–"
        rows.append([name, f"{seconds * 1e3:.1f}", f"{flops / 1e9:.2f}", rate])
    model = build_model("cnn", (1, 28, 28), 10, seed=0)
    oracle = StackedOracle(model, chunk_size=M)
    X = init_stack(model, M)
    inputs = torch.randn(M, N, 1, 28, 28)
    targets = torch.randint(0, 10, (M, N))
    whole = best_of(lambda: oracle.loss_and_grad(X, inputs, targets), args.reps)
    rows.append(["sum of the layers above", f"{total_time * 1e3:.1f}", f"{total_flops / 1e9:.2f}",
                 f"{total_flops / total_time / 1e9:.0f}"])
    rows.append(["whole block: StackedOracle.loss_and_grad", f"{whole * 1e3:.1f}",
                 f"{total_flops / 1e9:.2f}", f"{total_flops / whole / 1e9:.0f}"])
    peak = max(peak, matmul_peak(device))
    print(f"\ncnn block of {M} clients × {N} samples; fp32 matmul peak {peak:.0f} GFLOP/s")
    print(markdown_table(["layer (forward + backward)", "ms", "GFLOP", "GFLOP/s"], rows))


if __name__ == "__main__":
    sys.exit(main())
