"""The stacked oracle's block size: one ``loss_and_grad`` of M clients' minibatches run in blocks
of 1, 2, 4, … clients (``engine.chunk_size``) against the automatic choice (the blocks whose
forward activations fit :func:`gossipfl.engine.stacked.activation_budget`).

Interleaved over the block sizes, ``--reps`` times; median (min–max) seconds and achieved
GFLOP/s (FLOPs of the plain model × samples, as in round_time.py).

    python -m benchmarks.block_size                      # cnn, M = 100, B = 32
    python -m benchmarks.block_size --model mlp --sizes 5,10,25,50,100
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP

import argparse
import time

import torch

from benchmarks.common import (
    flops_per_sample,
    markdown_table,
    matmul_peak,
    median,
    spread,
    start_cpu_run,
)
from gossipfl.engine import init_stack
from gossipfl.engine.stacked import StackedOracle
from gossipfl.models import build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--sizes", default="1,2,4,8,16,32,100")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    device = start_cpu_run(args.threads)
    shape = (1, 28, 28) if args.model in ("cnn", "mlp", "logistic") else (3, 32, 32)
    model = build_model(args.model, shape, 10, seed=0)
    M, B = args.clients, args.batch
    X = init_stack(model, M)
    gen = torch.Generator().manual_seed(0)
    inputs = torch.randn(M, B, *shape, generator=gen)
    targets = torch.randint(0, 10, (M, B), generator=gen)
    train_flops, _ = flops_per_sample(model, shape, 10)
    oracles = {"auto": StackedOracle(model)}
    auto_block = oracles["auto"].block_size(M, shape, B, X)
    for size in (int(s) for s in args.sizes.split(",") if s):
        oracles[str(size)] = StackedOracle(model, chunk_size=size)
    times: dict[str, list[float]] = {k: [] for k in oracles}
    for oracle in oracles.values():
        oracle.loss_and_grad(X, inputs, targets)  # warm-up: traces, allocator
    peak = matmul_peak(device)
    for _ in range(args.reps):
        for key, oracle in oracles.items():
            start = time.perf_counter()
            oracle.loss_and_grad(X, inputs, targets)
            times[key].append(time.perf_counter() - start)
    peak = max(peak, matmul_peak(device))
    rows = []
    for key, t in times.items():
        gflops = M * B * train_flops / median(t) / 1e9
        label = f"auto ({auto_block})" if key == "auto" else key
        rows.append([label, spread(t, 3), f"{gflops:.0f}", f"{100 * gflops / peak:.0f}%"])
    print(f"\n{args.model}, M = {M}, B = {B}; fp32 matmul peak {peak:.0f} GFLOP/s")
    print(markdown_table(["clients per block", "s per loss_and_grad", "GFLOP/s", "of peak"],
                         rows))


if __name__ == "__main__":
    sys.exit(main())
