"""The sequential order's price: one round in waves against a synchronous round and against the
literal one-client-at-a-time loop of the authors' code, on the same task.

Three ways to compute a round of OledFL-SGD (β = 0.99) on the authors' random graph,
interleaved (A, B, C, A, B, C, ...) in one process, each with its own runner started from the
same experiment:

- ``synchronous``: begin_round, the batched local phase of all M clients, gossip;
- ``sequential``: :class:`gossipfl.schedules.sequential.Sequential`, one batched local phase per
  wave of the round's schedule;
- ``literal``: the same function with one client per wave (the authors' loop; equal results).

Default task: the issue-12 study's (Fashion-MNIST, 100 clients, MLP 784-200-10, one local
epoch of batch 50). Run ``python -m benchmarks.sequential --threads 2``.
"""

from __future__ import annotations

import argparse
import warnings

import torch

from benchmarks.common import CLOCKS, load_average, markdown_table, median, spread, start_cpu_run
from gossipfl.algorithms import Context
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.schedules.sequential import Sequential, one_by_one
from gossipfl.topology.waves import sweep_waves

IMPLEMENTATIONS = ("synchronous", "sequential", "literal")


def config(order: str, clients: int, hidden: int, device: str) -> dict:
    return {"data": {"dataset": "fashion_mnist", "clients": clients, "partition": "dirichlet",
                     "alpha": 0.3},
            "model": {"name": "mlp", "options": {"hidden": [hidden]}},
            "topology": {"name": "authors_random", "k": 10, "mixing": "uniform",
                         "order": order},
            "algorithm": {"name": "oledfl", "beta": 0.99, "lam": 0.0},
            "train": {"local_epochs": 1, "batch_size": 50, "lr": 0.1, "lr_decay": 0.998,
                      "weight_decay": 5e-4, "clip_norm": 10.0},
            "device": device}


def run(clients: int, hidden: int, reps: int, device: str,
        clock: str = "wall") -> tuple[list[list], dict]:
    """``reps`` rounds of each implementation, interleaved; ``clock`` ``cpu`` times this
    process's CPU time (what other jobs on a shared machine do not inflate)."""
    now = CLOCKS[clock]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runners = {name: Runner(load_config(config(
            "synchronous" if name == "synchronous" else "sequential", clients, hidden, device)))
            for name in IMPLEMENTATIONS}
    literal = runners["literal"]  # one client per wave: the authors' loop
    literal.schedule = Sequential(literal.exp.algorithm, literal.trainer, literal.exp.fed,
                                  waves=lambda W: one_by_one(len(W)))
    seconds: dict[str, list[float]] = {name: [] for name in IMPLEMENTATIONS}
    waves = []
    loads = [load_average()]
    for t in range(reps):
        W = runners["sequential"].exp.topology.matrix(t)
        waves.append(len(sweep_waves(W)))
        for name, runner in runners.items():
            ctx = Context(round=t, lr=runner.lr(t), env=runner.exp.env)
            start = now()
            with torch.no_grad():
                runner.schedule.run_round(ctx, runner.state)
            if runner.exp.device.type == "cuda":
                torch.cuda.synchronize()
            seconds[name].append(now() - start)
            print(name, t, round(seconds[name][-1], 3), flush=True)
        loads.append(load_average())
    literal = runners["literal"].state["x"]
    waved = runners["sequential"].state["x"]
    agree = float((literal - waved).abs().max())
    base = median(seconds["synchronous"])
    rows = []
    for name in IMPLEMENTATIONS:
        count = {"synchronous": "1", "sequential": spread(waves, 0), "literal": str(clients)}
        rows.append([name, count[name], spread(seconds[name]),
                     f"{median(seconds[name]) / base:.2f}×",
                     f"{median(seconds['literal']) / median(seconds[name]):.2f}×"])
    return rows, {"max |literal − waves|": agree, "load": f"{min(loads):.1f}–{max(loads):.1f}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--hidden", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args()
    start_cpu_run(args.threads)
    rows, info = run(args.clients, args.hidden, args.reps, args.device, args.clock)
    print(info)
    print(markdown_table(["implementation", "waves / round", "s / round", "vs synchronous",
                          "literal / this"], rows))


if __name__ == "__main__":
    main()
