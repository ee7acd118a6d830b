"""Where a round sits between this machine's two limits (issue 23): the matmul peak and the
memory bandwidth, measured in the same run as the rounds.

Limits, measured first and last (the best of the two is used):
- compute: fp32 ``n×n @ n×n`` (n = 2048) on the run's threads, GFLOP/s;
- memory: ``b.copy_(a)`` (2 × 4N bytes) and the triad ``a = b + s·c`` (3 × 4N bytes) on
  arrays of 200 MB (N = 50 M floats), GB/s.

For each case (one DFedAvg or DFedSAM round, M clients, one local epoch of batch 32, the
stacked oracle), the least work a round needs:
- FLOPs: the plain model's training FLOPs (``torch.utils.flop_counter``) × samples trained
  (× 2 for SAM's two gradients);
- bytes, step-major (the default order): every local step must at least read the ``[M, P]``
  stack for the forward pass, read it again for the backward pass and write the updated
  stack: 3 × 4MP per step (the update fused into the weight gradient; today's unfused
  update also writes and reads back a gradient stack: 5 × 4MP), plus every input sample
  read once;
- bytes, block-major with the rows in cache: 2 × 4MP per round plus the inputs.

The table gives t_compute = FLOPs / peak, t_memory = bytes / bandwidth (triad), the measured
local-training seconds of the round, the bound (the larger of the two times: what the round
could take at best), and the fraction of it achieved.

    python -m benchmarks.roofline                         # mlp and cnn, DFedAvg and DFedSAM
    python -m benchmarks.roofline --cases mlp --reps 3
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP

import argparse

import torch

from benchmarks.common import (
    bandwidth,
    flops_per_sample,
    markdown_table,
    matmul_peak,
    median,
    spread,
    start_cpu_run,
)
from benchmarks.reference_sequential import benchmark_config
from benchmarks.round_time import GossipflRound
from gossipfl.models import build_model

CASES = {
    "mlp": ("mlp", "dfedavg"), "mlp-sam": ("mlp", "dfedsam"),
    "cnn": ("cnn", "dfedavg"),
}


def limits() -> dict[str, float]:
    cpu = torch.device("cpu")
    return {"gflops": matmul_peak(cpu, n=2048), **bandwidth(cpu, 50_000_000)}


def measure(case: str, clients: int, reps: int) -> dict:
    model_name, algorithm = CASES[case]
    config = benchmark_config(model_name, clients, 32, algorithm=algorithm, oracle="stacked")
    run = GossipflRound(config)
    exp = run.runner.exp
    shape = tuple(exp.dataset.train_x.shape[1:])
    train_flops, _ = flops_per_sample(build_model(model_name, shape, 10), shape, 10)
    rows = []
    for rep in range(reps + 1):
        with torch.no_grad():
            row = run.round(rep)
        if rep:
            rows.append(row)
    M, P = len(exp.parts), exp.env.P
    steps = max(-(-len(ix) // 32) for ix in exp.parts)
    samples = rows[-1]["samples"]
    sample_bytes = samples * 4 * int(torch.tensor(shape).prod())
    gradients = 2 if algorithm == "dfedsam" else 1
    return {
        "case": f"{model_name} {algorithm}, M={M}", "P": P, "steps": steps,
        "flops": samples * train_flops * gradients,
        "bytes_step_major": steps * 3 * 4 * M * P * gradients + sample_bytes,
        "bytes_unfused": steps * 5 * 4 * M * P * gradients + sample_bytes,
        "bytes_block_major": 2 * 4 * M * P + sample_bytes,
        "local": [r["local"] for r in rows], "total": [r["total"] for r in rows],
    }


def table(results: list[dict], limit: dict[str, float]) -> str:
    out = []
    for r in results:
        local = median(r["local"])
        t_flops = r["flops"] / (limit["gflops"] * 1e9)
        for order, key in (("step-major (fused)", "bytes_step_major"),
                           ("step-major (unfused, today)", "bytes_unfused"),
                           ("block-major, rows in cache", "bytes_block_major")):
            t_bytes = r[key] / (limit["triad"] * 1e9)
            bound = max(t_flops, t_bytes)
            out.append([r["case"], order, f"{r['flops'] / 1e9:.1f}", f"{r[key] / 1e9:.2f}",
                        f"{t_flops:.3f}", f"{t_bytes:.3f}",
                        "compute" if t_flops >= t_bytes else "memory", spread(r["local"], 3),
                        f"{100 * bound / local:.0f}%"])
    return markdown_table(["case", "order", "GFLOP", "GB (least)", "t compute s",
                           "t memory s", "bound", "measured local s", "of the bound"], out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="mlp,mlp-sam,cnn")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    start_cpu_run(args.threads)
    before = limits()
    results = [measure(case, args.clients, args.reps) for case in args.cases.split(",")]
    after = limits()
    limit = {k: max(before[k], after[k]) for k in before}
    print({"limits": {k: round(v, 1) for k, v in limit.items()},
           "before": {k: round(v, 1) for k, v in before.items()},
           "after": {k: round(v, 1) for k, v in after.items()}}, flush=True)
    print(table(results, limit))


if __name__ == "__main__":
    main()
