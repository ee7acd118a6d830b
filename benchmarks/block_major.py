"""Block-major against step-major local training (``engine.block_clients``, issue 23).

One DFedAvg round of the headline task (Fashion-MNIST, 100 clients, one local epoch of batch
32, the stacked oracle): step-major (every client's step t, then everyone's step t + 1: the
whole ``[M, P]`` stack streamed from memory at every step) against blocks of N clients that
run all their local steps before the next block (their rows stay in the cache). Interleaved
over the block sizes, ``--reps`` rounds each after one warm-up; median (min–max) seconds of
the round and of its local training, and the ratio to step-major.

    python -m benchmarks.block_major                     # mlp 784-200-200-10
    python -m benchmarks.block_major --model cnn --local-steps 2
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP

import argparse

import torch

from benchmarks.common import markdown_table, median, spread, start_cpu_run
from benchmarks.reference_sequential import benchmark_config
from benchmarks.round_time import GossipflRound


def cache_bytes() -> dict[str, int]:
    """The caches the machine reports (Linux sysfs; empty elsewhere)."""
    out = {}
    root = "/sys/devices/system/cpu/cpu0/cache"
    for index in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        try:
            with open(f"{root}/{index}/level") as f:
                level = f.read().strip()
            with open(f"{root}/{index}/type") as f:
                kind = f.read().strip()
            with open(f"{root}/{index}/size") as f:
                size = f.read().strip()
        except OSError:
            continue
        if kind != "Instruction":
            out[f"L{level}"] = int(size.rstrip("K")) * 1024 if size.endswith("K") else int(size)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--local-steps", type=int, default=None, help="default: one epoch")
    parser.add_argument("--sizes", default="4,8,16,25,50")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    start_cpu_run(args.threads)
    print({"caches": cache_bytes()}, flush=True)
    config = benchmark_config(args.model, args.clients, 32, oracle="stacked",
                              local_steps=args.local_steps)
    run = GossipflRound(config)
    P = run.runner.exp.env.P
    sizes: list[int | None] = [None, *(int(s) for s in args.sizes.split(","))]
    rows: dict[int | None, list[dict]] = {s: [] for s in sizes}
    for rep in range(args.reps + 1):
        for size in sizes:
            run.runner.trainer.block_clients = size
            with torch.no_grad():
                row = run.round(rep)
            if rep:
                rows[size].append(row)
    base = median([r["total"] for r in rows[None]])
    table = []
    for size, reps in rows.items():
        total = [r["total"] for r in reps]
        block_mb = "all" if size is None else f"{size * P * 4 / 2**20:.1f}"
        table.append(["step-major" if size is None else f"blocks of {size}", block_mb,
                      spread(total, 3), spread([r["local"] for r in reps], 3),
                      f"{base / median(total):.2f}×"])
    print(markdown_table(["order", "params per block (MiB)", "s / round", "local s",
                          "vs step-major"], table))


if __name__ == "__main__":
    main()
