"""What one DFedAvg round of the FedSAGD Shakespeare LSTM (``lstm``) costs, and one training
step with each oracle that can compute its gradients: ``loop`` (what ``engine.oracle: auto``
picks) and :class:`~gossipfl.engine.VmapOracle` (torch's per-client fallback for the LSTM
kernel; ``engine.oracle: vmap`` is refused for it because vmap cannot evaluate an LSTM);
``stacked`` cannot trace ``nn.LSTM``/``nn.Embedding``.

Random Shakespeare-shaped data (80 int64 characters → the next one, 80 classes), each client
one user (natural partition), ring topology, ``--steps`` local steps of batch ``--batch``.
Rounds (loop oracle) are timed between the runner's per-round callbacks (evaluation excluded:
it runs only after the last round, which is not counted); a step is one ``loss_and_grad`` of
the M clients; everything runs interleaved, ``--reps`` times.

    python -m benchmarks.lstm_round --clients 10 --steps 5 --batch 10 --threads 2
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP

import argparse
import time
import warnings

import numpy as np
import torch

import gossipfl
from benchmarks.common import load_average, markdown_table, median, spread, start_cpu_run
from gossipfl.data import Dataset
from gossipfl.engine import VmapOracle, make_oracle
from gossipfl.engine.params import ParamLayout
from gossipfl.models import build_model


def shakespeare_like(clients: int, per_client: int, test: int, seed: int = 0) -> Dataset:
    gen = torch.Generator().manual_seed(seed)
    n = clients * per_client
    return Dataset("shakespeare_like", torch.randint(0, 80, (n, 80), generator=gen),
                   torch.randint(0, 80, (n,), generator=gen),
                   torch.randint(0, 80, (test, 80), generator=gen),
                   torch.randint(0, 80, (test,), generator=gen), 80,
                   users=tuple(f"u{i}" for i in range(clients)),
                   train_users=np.repeat(np.arange(clients), per_client))


def round_seconds(oracle: str, args, dataset: Dataset) -> list[float]:
    stamps: list[float] = []
    rounds = args.rounds + 1
    gossipfl.run({
        "data": {"tensors": dataset, "clients": args.clients, "partition": "natural"},
        "model": {"name": "lstm"}, "topology": {"name": "ring"},
        "algorithm": {"name": "dfedavg"}, "engine": {"oracle": oracle},
        "train": {"rounds": rounds, "local_steps": args.steps, "batch_size": args.batch,
                  "lr": 0.5},
        "eval": {"every": rounds}, "seed": 0,
    }, callbacks=[lambda runner, t, row: stamps.append(time.perf_counter())])
    return list(np.diff(stamps)[: args.rounds - 1])  # rounds 2..R (the first warms up)


def oracle_seconds(oracle: str, args) -> float:
    model = build_model("lstm", (80,), 80, seed=0)
    layout = ParamLayout.from_module(model)
    X = layout.flatten(model).detach().expand(args.clients, -1).clone()
    x = torch.randint(0, 80, (args.clients, args.batch, 80))
    y = torch.randint(0, 80, (args.clients, args.batch))
    runner = VmapOracle(model) if oracle == "vmap" else make_oracle(oracle, model)
    runner.loss_and_grad(X, x, y)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        runner.loss_and_grad(X, x, y)
        times.append(time.perf_counter() - start)
    return median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    start_cpu_run(args.threads)
    warnings.simplefilter("ignore", UserWarning)  # vmap's "performance drop" notice
    dataset = shakespeare_like(args.clients, args.steps * args.batch, 100)
    oracles = ("loop", "vmap")
    rounds: dict[str, list[float]] = {o: [] for o in oracles}
    steps: dict[str, list[float]] = {o: [] for o in oracles}
    for _ in range(args.reps):
        rounds["loop"] += round_seconds("auto", args, dataset)
        for oracle in oracles:
            steps[oracle].append(oracle_seconds(oracle, args))
    print(f"\nlstm, M = {args.clients}, {args.steps} steps of batch {args.batch}; "
          f"load average {load_average():.2f}\n")
    print(markdown_table(
        ["oracle", "s / round (DFedAvg, ring)", "s / step (loss_and_grad of M clients)",
         f"{args.steps} steps"],
        [[o, spread(rounds[o]) if rounds[o] else "refused (cannot evaluate)",
          spread(steps[o], 3), f"{args.steps * median(steps[o]):.2f}"] for o in oracles]))


if __name__ == "__main__":
    main()
