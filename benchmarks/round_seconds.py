"""Seconds per round of the headline case, through nothing but ``Runner.run_round`` (an API
every version of gossipfl has), so two checkouts can be timed against each other:

    for i in 1 2 3; do for src in OLD/src NEW/src; do
        PYTHONPATH=$src:. python -m benchmarks.round_seconds --label $src; done; done

The headline case of docs/benchmarks.md: DFedAvg, Fashion-MNIST, 100 clients (Dirichlet 0.3,
equal sizes of 600), the 784-200-200-10 MLP, 1 local epoch of batch 32, the stacked oracle.
Prints the median (min–max) of ``--rounds`` rounds after one warm-up round; the average
model's evaluation is not timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner

HEADLINE = {
    "data": {"dataset": "fashion_mnist", "clients": 100, "partition": "dirichlet", "alpha": 0.3},
    "model": {"name": "mlp", "options": {"hidden": [200, 200]}},
    "topology": {"name": "ring"},
    "algorithm": {"name": "dfedavg"},
    "train": {"rounds": 50, "local_epochs": 1, "batch_size": 32, "lr": 0.05},
    "engine": {"oracle": "stacked"},
    "output": {"checkpoint_every": 0},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--algorithm", default="dfedavg")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    config = {**HEADLINE, "algorithm": {"name": args.algorithm}}
    runner = Runner(load_config(config))
    seconds = []
    with torch.no_grad():
        for t in range(args.rounds + 1):
            start = time.perf_counter()
            runner.run_round(t)
            seconds.append(time.perf_counter() - start)
    timed = seconds[1:]
    print(f"{args.label} {args.algorithm}: {statistics.median(timed):.3f} s/round "
          f"({min(timed):.3f}–{max(timed):.3f}), {args.rounds} rounds", flush=True)


if __name__ == "__main__":
    main()
