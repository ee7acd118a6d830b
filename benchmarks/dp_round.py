"""Seconds per round of DP-SGD (``privacy:``, issue 40) against the same round without it,
interleaved round by round so that load on a shared machine hits both alike:

    PYTHONPATH=src python -m benchmarks.dp_round --threads 1 --rounds 3
    PYTHONPATH=src python -m benchmarks.dp_round --device cuda --clients 100   # a GPU

DFedAvg on a ring, synthetic 784-feature data, the MLP, ``local_steps`` minibatches of B.
Four runs: non-private; private with σ = 0 (per-sample clipping alone) and σ = 1 (plus the
noise), both on the MLP's ghost-norm path (gossipfl.trust.ghost: a forward and two
backwards); and σ = 0 on the materialized path every other model takes. Where that one sits
on the roofline: it writes the S·B per-sample gradients ``[S·B, P]`` and reads them back
(about seven passes over S·B·P float32: the rows repeated per sample, the forward's reads of
them, the backward's per-sample gradients, their copy into the gradient stack, the norms,
the clipped sum), so it is memory-bound; the line ``per-sample GB/s`` divides that traffic by
its step's time, beside the machine's copy bandwidth.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


import torch

from benchmarks.common import bandwidth, interleaved_round_seconds, machine, start_cpu_run
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner

PASSES = 7  # over S·B·P float32 per private step (module docstring)


def config_of(clients: int, hidden: int, batch: int, steps: int, sigma: float | None,
              device: str = "cpu") -> dict:
    config = {"data": {"dataset": "synthetic", "clients": clients,
                       "options": {"dim": 784, "train_size": 300 * clients, "test_size": 100,
                                   "num_classes": 10}},
              "model": {"name": "mlp", "options": {"hidden": [hidden]}},
              "topology": {"name": "ring"}, "algorithm": {"name": "dfedavg"},
              "train": {"rounds": 100, "local_steps": steps, "batch_size": batch, "lr": 0.05},
              "eval": {"average_model": False, "local_models": False}, "device": device}
    if sigma is not None:
        config["privacy"] = {"clip": 1.0, "noise_multiplier": sigma, "delta": 1e-5}
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    args = parser.parse_args()
    if args.device == "cpu":
        device = start_cpu_run(args.threads)
    else:
        device = torch.device(args.device)
        print(machine(device), flush=True)
    cases = {"plain": None, "dp σ=0": 0.0, "dp σ=1": 1.0, "dp σ=0 materialized": 0.0}
    runners = {name: Runner(load_config(config_of(args.clients, args.hidden, args.batch,
                                                  args.steps, sigma, args.device)))
               for name, sigma in cases.items()}
    runners["dp σ=0 materialized"].exp.privacy.gradient._ghost = False
    seconds = interleaved_round_seconds(runners, args.rounds, device)
    P = runners["plain"].exp.layout.P
    base = statistics.median(seconds["plain"][1:])
    print(f"M = {args.clients}, P = {P}, B = {args.batch}, {args.steps} steps per round")
    print(f"{'run':20s} {'s/round':>8s} {'min–max':>15s} {'× plain':>8s}")
    for name, values in seconds.items():
        timed = values[1:]
        med = statistics.median(timed)
        print(f"{name:20s} {med:8.3f} {min(timed):7.3f}–{max(timed):.3f} {med / base:8.2f}")
    per_step = statistics.median(seconds["dp σ=0 materialized"][1:]) / args.steps
    traffic = PASSES * 4 * args.clients * args.batch * P
    copy = bandwidth(device, 1 << 24)["copy"]
    print(f"materialized: per-sample GB/s {traffic / per_step / 1e9:.1f} (≈ {PASSES} passes "
          f"over S·B·P); "
          f"copy bandwidth {copy:.1f} GB/s")


if __name__ == "__main__":
    main()
