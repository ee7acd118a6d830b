"""The fused local step against the unfused one (issues 23, 39), interleaved round by round in
one process:

    PYTHONPATH=src python -m benchmarks.fused_step [--reps 7] [--cases mlp-dfedavg,mlp-wd]

The headline setting (Fashion-MNIST, 100 clients, one local epoch of batch 32, the stacked
oracle) for DFedAvg, DFedSAM, and DFedAvg in the seed papers' settings (weight decay 5e-4,
with momentum 0.9 or clipping). Fused: ``ClientEnv.fused_step`` (each parameter's rows take
the update straight from autograd's gradient). Unfused: the same runner with ``ClientEnv.fused`` False,
so that the gradient stack ``[M, P]`` is written and the local optimizer reads it back. The
numbers are the same bits (tests/engine/test_fused_step.py); only the time differs. Every case's
runner, fused and unfused, takes one round in turn (fused, unfused, next case, …), without
evaluation; the first turn is a warm-up. Prints the median (min–max) wall and CPU seconds
per round (CPU: this process's threads, the steadier measure on a shared machine), the ratio
to the case's unfused step and the ratio to the first case's fused step.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP

import argparse
import statistics
import time

import torch

from benchmarks.common import machine, markdown_table
from benchmarks.round_time import Case
from gossipfl.core.runner import Runner
from gossipfl.network.clients import ClientEnv

DECAY = {"weight_decay": 5e-4}
CASES = {"mlp-dfedavg": Case("mlp DFedAvg", model="mlp"),
         "mlp-dfedsam": Case("mlp DFedSAM", model="mlp", algorithm="dfedsam"),
         "mlp-wd": Case("mlp DFedAvg, wd 5e-4", model="mlp", train=DECAY),
         "mlp-wd-momentum": Case("mlp DFedAvg, wd 5e-4, momentum 0.9", model="mlp",
                                 train={**DECAY, "momentum": 0.9}),
         "mlp-wd-clip": Case("mlp DFedAvg, wd 5e-4, clip 1", model="mlp",
                             train={**DECAY, "clip_norm": 1.0})}


def timed_round(runner: Runner, t: int, fused: bool) -> tuple[float, float]:
    """Wall and CPU (this process, all threads) seconds of round t."""
    ClientEnv.fused = fused
    try:
        start, cpu = time.perf_counter(), time.process_time()
        runner.step(t, evaluate=False)
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        ClientEnv.fused = True


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    print(machine(torch.device("cpu")), flush=True)
    names = args.cases.split(",")
    runners = {name: Runner(CASES[name].config("stacked")) for name in names}
    times = {(name, fused): [] for name in names for fused in (True, False)}
    for t in range(args.reps + 1):
        for name in names:
            for fused in (True, False):
                seconds = timed_round(runners[name], 2 * t + (not fused), fused)
                if t:
                    times[name, fused].append(seconds)
    median = {key: [statistics.median(s[i] for s in v) for i in (0, 1)]
              for key, v in times.items()}
    first = median[names[0], True]
    rows = []
    for name in names:
        for fused in (True, False):
            wall, cpu = median[name, fused]
            unfused = median[name, False]
            rows.append([CASES[name].name, "fused" if fused else "unfused",
                         spread([s[0] for s in times[name, fused]]),
                         spread([s[1] for s in times[name, fused]]),
                         f"{unfused[0] / wall:.2f}× / {unfused[1] / cpu:.2f}×",
                         f"{wall / first[0]:.2f} / {cpu / first[1]:.2f}"])
            print(rows[-1], flush=True)
    print(markdown_table(["case", "step", "wall s / round", "CPU s / round",
                          "unfused ÷ this (wall / CPU)",
                          f"this ÷ {CASES[names[0]].name} fused (wall / CPU)"], rows))

if __name__ == "__main__":
    main()
