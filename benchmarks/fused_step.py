"""The fused SGD step against the unfused one (issue 23), interleaved round by round in one
process:

    PYTHONPATH=src python -m benchmarks.fused_step [--reps 7] [--cases mlp-dfedavg,mlp-dfedsam]

The headline setting (Fashion-MNIST, 100 clients, one local epoch of batch 32, the stacked
oracle) for DFedAvg and DFedSAM. Fused: ``ClientEnv.sgd_step`` (each parameter's rows take
``add_(grad, alpha=-η)`` straight from autograd's gradient). Unfused: the same runner with
``ClientEnv.plain_sgd`` forced False, so that the gradient stack ``[M, P]`` is written and
the local optimizer reads it back. The numbers are the same bits (tests/test_fused_step.py);
only the time differs. Rounds alternate fused, unfused, … on one runner, without evaluation;
the first pair is a warm-up. Prints the median (min–max) seconds per round and the ratio.
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
from gossipfl.clients import ClientEnv
from gossipfl.runner import Runner

CASES = {"mlp-dfedavg": Case("mlp DFedAvg", model="mlp"),
         "mlp-dfedsam": Case("mlp DFedSAM", model="mlp", algorithm="dfedsam")}
PLAIN = ClientEnv.plain_sgd


def timed_round(runner: Runner, t: int, fused: bool) -> float:
    ClientEnv.plain_sgd = PLAIN if fused else property(lambda self: False)
    try:
        start = time.perf_counter()
        runner.step(t, evaluate=False)
        return time.perf_counter() - start
    finally:
        ClientEnv.plain_sgd = PLAIN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    print(machine(torch.device("cpu")), flush=True)
    rows = []
    for name in args.cases.split(","):
        runner = Runner(CASES[name].config("stacked"))
        times: dict[bool, list[float]] = {True: [], False: []}
        for t in range(args.reps + 1):
            for fused in (True, False):
                seconds = timed_round(runner, 2 * t + (not fused), fused)
                if t:
                    times[fused].append(seconds)
        unfused = statistics.median(times[False])
        for label, values in (("fused", times[True]), ("unfused", times[False])):
            spread = f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"
            rows.append([CASES[name].name, label, spread,
                         f"{unfused / statistics.median(values):.2f}×"])
            print(rows[-1], flush=True)
    print(markdown_table(["case", "step", "s / round (no eval)", "unfused ÷ this"], rows))


if __name__ == "__main__":
    main()
