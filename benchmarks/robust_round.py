"""What a robust gossip step costs (issue 40): one gossip step of every robust rule against
plain gossip W X, on the ring and a 10-regular graph, interleaved rule by rule so that load
on a shared machine hits all alike.

    PYTHONPATH=src python -m benchmarks.robust_round                 # 100 clients, the mlp
    PYTHONPATH=src python -m benchmarks.robust_round --reps 3 --clients 50
    PYTHONPATH=src python -m benchmarks.robust_round --device cuda --clients 1000   # a GPU
    PYTHONPATH=src python -m benchmarks.robust_round --clients 10000 --hidden 8 --reps 3

The stack: M clients of the 784-64-10 MLP (P = 50 890), client 0 Byzantine, sending
``sign_flip`` messages (so that every rule, ``mean`` included, takes the robust path: a
receiver's messages gathered per neighbour). Plain gossip is the same Federation without the
``topology.robust`` and ``byzantine`` sections (one sparse or dense product). Each step is
memory-bound: W X reads the M·P stack (and each neighbour's row) once, a robust rule gathers
``[n, d + 1, P]`` messages per bucket of receivers and sorts (trimmed mean, median) or reduces
(clipping) over the d + 1 of them, so its ratio to W X grows with the degree d. Above
1 024 clients the topologies are built as edges, and the neighbourhoods are read from them.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import machine, sync
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import build_experiment
from gossipfl.errors import GossipflError

RULES = ({"rule": "mean"}, {"rule": "trimmed_mean", "b": 1}, {"rule": "median"},
         {"rule": "krum", "b": 1}, {"rule": "clipped_gossip", "tau": 1.0},
         {"rule": "cs_plus", "b": 1, "gamma": 1.0})
GRAPHS = ({"name": "ring"}, {"name": "k_regular", "k": 10})


def config(m: int, topology: dict, robust: dict | None, device: str = "cpu",
           hidden: int = 64) -> dict:
    setup = {"data": {"dataset": "synthetic", "clients": m, "partition": "iid",
                      "options": {"train_size": 20 * m, "test_size": 100, "dim": 784,
                                  "num_classes": 10}},
             "model": {"name": "mlp", "options": {"hidden": [hidden]}},
             "topology": dict(topology), "algorithm": {"name": "dfedavg"},
             "train": {"rounds": 1, "local_steps": 1}, "seed": 0, "device": device}
    if robust is not None:
        setup["topology"]["robust"] = robust
        setup["byzantine"] = {"clients": [0], "attack": "sign_flip"}
    return setup


def gossip_seconds(fed, x: torch.Tensor) -> float:
    sync(x.device)
    start = time.perf_counter()
    fed.gossip(x, 0)
    fed.traffic.take()
    sync(x.device)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--hidden", type=int, default=64,
                        help="the MLP's hidden width (8: P = 6 370, for 10^4 clients)")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(machine(torch.device(args.device)), flush=True)
    print("| graph | rule | s per step (median) | × plain W X |")
    print("|---|---|---|---|")
    for topology in GRAPHS:
        cases = {"plain": None} | {spec["rule"]: spec for spec in RULES}
        feds, refused = {}, {}
        for name, spec in cases.items():
            try:
                feds[name] = build_experiment(load_config(config(
                    args.clients, topology, spec, args.device, args.hidden))).fed
            except GossipflError as exc:  # e.g. krum's b + 2 neighbours on the ring
                refused[name] = str(exc).split(";")[0]
        x = torch.randn(args.clients, build_experiment(load_config(
            config(args.clients, topology, None, hidden=args.hidden))).layout.P,
            device=args.device)
        times: dict[str, list[float]] = {name: [] for name in feds}
        for name, fed in feds.items():  # warm-up (kernels, caches, buckets)
            gossip_seconds(fed, x)
        for _ in range(args.reps):
            for name, fed in feds.items():
                times[name].append(gossip_seconds(fed, x))
        plain = statistics.median(times["plain"])
        label = topology["name"] + (f" (k = {topology['k']})" if "k" in topology else "")
        for name in cases:
            if name in refused:
                print(f"| {label} | {name} | refused: {refused[name]} | |")
                continue
            median = statistics.median(times[name])
            print(f"| {label} | {name} | {median:.4f} | {median / plain:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
