"""The distributed backend on one machine: bytes moved per rank, and round time, against the
number of gloo processes (docs/benchmarks.md, "Distributed").

    python -m benchmarks.distributed volume [--clients 100 1000] [--ranks 1 2 4 8 16]
    python -m benchmarks.distributed rounds [--clients 100] [--ranks 1 2 4]
    python -m benchmarks.distributed compressed [--clients 100] [--ranks 2 4]

``volume`` runs DFedAvg's gossip (no training) on forked gloo ranks with a tiny row width w (a linear model, P = 32)
and counts the bytes each rank really sends (``fed.traffic.wire``); rows sent = bytes / 4w,
and the bytes of a real model are rows × 4P. The accounted bytes are the Federation's count
of client-to-client messages (every out-neighbour, whatever rank holds it). ``rounds`` times
full DFedAvg rounds (local steps, gossip, no evaluation) of the mlp and the cnn;
``compressed`` counts the bytes each rank really sends for DFedAvg's gossip of the mlp
(P = 199 210) on the ring with ``topology.compression`` (none, top-1 %, sign): the ranks send
the encodings, so the wire bytes shrink by the encodings' factor; a round's
time is the slowest rank's. One process uses every core's thread; each forked rank one
thread (OpenMP does not survive a fork). Results are appended to ``benchmarks/results/distributed.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.common import cifar_like, machine, markdown_table, median, spread
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.data import load_dataset
from gossipfl.distributed.local import run_on_ranks

RESULTS = Path(__file__).with_name("results") / "distributed.jsonl"
MODELS_P = {"mlp": 199_210, "cnn": 573_578}  # mlp 784-200-200-10, cnn on 1×28×28 (10 classes)
TOPOLOGIES = {"ring": {"name": "ring"}, "random_k": {"name": "random_k", "k": 10}}


def setup(clients: int, topology: str, backend: str, model: str = "tiny",
          local_steps: int = 5) -> dict:
    models = {"tiny": ({"name": "mlp", "options": {"hidden": []}}, 15, 1),
              "mlp": ({"name": "mlp", "options": {"hidden": [200, 200]}}, 784, 10),
              "cnn": ({"name": "cnn"}, None, 10)}
    spec, dim, classes = models[model]
    data = {"clients": clients, "partition": "iid"}
    if dim is None:
        data["tensors"] = cifar_like(50 * clients, 10, classes)
    else:
        data.update(dataset="synthetic", options={"num_classes": max(classes, 2), "dim": dim,
                                                  "train_size": 50 * clients,
                                                  "test_size": 10})
    return {"data": data, "model": spec, "topology": TOPOLOGIES[topology],
            "algorithm": {"name": "dfedavg"},
            "train": {"rounds": 100, "local_steps": local_steps, "batch_size": 32,
                      "lr": 0.05},
            "eval": {"every": 1000}, "engine": {"backend": backend, "timeout": 600},
            "seed": 0}


def per_rank(fed, values: list[float]) -> torch.Tensor:
    """``[ranks, n]``: every rank's ``values`` (one process: one row)."""
    processes = getattr(fed, "processes", None)
    world, rank = (processes.world, processes.rank) if processes else (1, 0)
    table = torch.zeros(world, len(values), dtype=torch.float64)
    table[rank] = torch.tensor(values, dtype=torch.float64)
    return fed.total(table)


# --------------------------------------------------------------------------------------------
# Bytes moved
# --------------------------------------------------------------------------------------------
def gossip_traffic(config: dict, rounds: int) -> tuple[torch.Tensor, int, int]:
    """``rounds`` gossip steps of the config's algorithm (no training): the bytes each rank
    really sent (``[ranks]``), the accounted bytes of all clients' messages, and P."""
    runner = Runner(load_config(config))
    fed = runner.exp.fed
    x = runner.state["x"]
    accounted = 0
    for t in range(rounds):
        x = fed.gossip(x, t)
        accounted += fed.traffic.take()
    return per_rank(fed, [fed.traffic.wire])[:, 0], accounted, runner.exp.env.P


def volume_on_rank(clients: int, topology: str, rounds: int = 3) -> dict:
    wire, accounted, width = gossip_traffic(setup(clients, topology, "distributed"), rounds)
    return {"rows_per_rank": (wire / (4 * width * rounds)).tolist(),
            "accounted_rows": accounted / (4 * width * rounds)}


def volume(clients: list[int], ranks: list[int]) -> list[dict]:
    out = []
    for m in clients:
        for topology in TOPOLOGIES:
            for world in ranks:
                got = run_on_ranks(world, volume_on_rank, m, topology)
                rows = got["rows_per_rank"]
                out.append({"bench": "volume", "clients": m, "topology": topology,
                            "ranks": world, "rows_mean": sum(rows) / len(rows),
                            "rows_max": max(rows), "accounted_rows": got["accounted_rows"]})
                print(out[-1], flush=True)
    return out


def volume_table(results: list[dict]) -> str:
    rows = []
    for r in results:
        per_rank = {name: r["rows_max"] * 4 * p / 1e6 for name, p in MODELS_P.items()}
        gather_rows = (r["ranks"] - 1) * -(-r["clients"] // r["ranks"])
        rows.append([r["clients"], r["topology"], r["ranks"], f"{r['rows_mean']:.1f}",
                     f"{r['rows_max']:.0f}", f"{per_rank['mlp']:.1f}", f"{per_rank['cnn']:.1f}",
                     gather_rows, f"{r['rows_mean'] * r['ranks']:.0f}",
                     f"{r['accounted_rows']:.0f}"])
    return markdown_table(["M", "graph", "ranks", "rows sent / rank (mean)", "max",
                           "MB / rank, mlp", "MB / rank, cnn", "all-gather rows / rank",
                           "rows sent, whole job", "accounted messages, whole job"], rows)


# --------------------------------------------------------------------------------------------
# Bytes moved under compression
# --------------------------------------------------------------------------------------------
COMPRESSIONS = {"none": None,
                "top_k 1%": {"compressor": "top_k", "fraction": 0.01, "gamma": 0.5},
                "sign": {"compressor": "sign", "gamma": 0.5}}


def compressed_on_rank(clients: int, compression: str, rounds: int = 3) -> dict:
    config = setup(clients, "ring", "distributed", "mlp")
    config["topology"]["compression"] = COMPRESSIONS[compression]
    wire, accounted, _ = gossip_traffic(config, rounds)
    return {"wire_per_rank": (wire / rounds).tolist(), "accounted": accounted / rounds}


def compressed(clients: list[int], ranks: list[int]) -> list[dict]:
    load_dataset("synthetic")
    out = []
    for m in clients:
        for world in ranks:
            for name in COMPRESSIONS:
                got = run_on_ranks(world, compressed_on_rank, m, name)
                wire = got["wire_per_rank"]
                out.append({"bench": "compressed", "clients": m, "ranks": world,
                            "compression": name, "wire_mean": sum(wire) / len(wire),
                            "wire_max": max(wire), "accounted": got["accounted"]})
                print(out[-1], flush=True)
    return out


def compressed_table(results: list[dict]) -> str:
    base = {(r["clients"], r["ranks"]): r["wire_mean"] for r in results
            if r["compression"] == "none"}
    rows = [[r["clients"], r["ranks"], r["compression"], f"{r['wire_mean'] / 1e3:.1f}",
             f"{base[r['clients'], r['ranks']] / r['wire_mean']:.1f}×",
             f"{r['accounted'] / 1e6:.2f}"] for r in results]
    return markdown_table(["M", "ranks", "compression", "kB on the wire / rank / round",
                           "less than none", "accounted MB / round (all clients)"], rows)


# --------------------------------------------------------------------------------------------
# Round time
# --------------------------------------------------------------------------------------------
def rounds_on_rank(config: dict, rounds: int) -> dict:
    runner = Runner(load_config(config))
    times = []
    with torch.no_grad():
        for t in range(rounds + 1):  # the first round warms up
            start = time.perf_counter()
            runner.run_round(t)
            times.append(time.perf_counter() - start)
    slowest = per_rank(runner.exp.fed, times[1:]).max(dim=0).values
    return {"seconds": slowest.tolist()}


def round_times(clients: list[int], ranks: list[int], models: list[str], local_steps: int,
                rounds: int = 3) -> list[dict]:
    load_dataset("synthetic")  # imports warm before forking
    out = []
    for model in models:
        for m in clients:
            for topology in TOPOLOGIES:
                for world in [0, *ranks]:  # 0: one process, backend single
                    backend = "single" if world == 0 else "distributed"
                    config = setup(m, topology, backend, model, local_steps)
                    got = rounds_on_rank(config, rounds) if world == 0 else run_on_ranks(
                        world, rounds_on_rank, config, rounds)
                    out.append({"bench": "rounds", "model": model, "clients": m,
                                "topology": topology, "ranks": world,
                                "local_steps": local_steps,
                                "seconds": got["seconds"]})
                    print(out[-1], flush=True)
    return out


def rounds_table(results: list[dict]) -> str:
    rows = [[r["model"], r["clients"], r["topology"], r["local_steps"],
             "1 (single)" if r["ranks"] == 0 else r["ranks"], spread(r["seconds"]),
             f"{median(r['seconds']) and 1 / median(r['seconds']):.2f}"] for r in results]
    return markdown_table(["model", "M", "graph", "local steps", "processes", "s / round",
                           "rounds / s"],
                          rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["volume", "rounds", "compressed"])
    parser.add_argument("--clients", type=int, nargs="+")
    parser.add_argument("--ranks", type=int, nargs="+")
    parser.add_argument("--models", nargs="+", choices=list(MODELS_P), default=list(MODELS_P))
    parser.add_argument("--local-steps", type=int, default=5)
    args = parser.parse_args()
    info = machine(torch.device("cpu"))
    print(info, flush=True)
    if args.what == "volume":
        results = volume(args.clients or [100, 1000], args.ranks or [1, 2, 4, 8, 16, 32])
        table = volume_table(results)
    elif args.what == "compressed":
        results = compressed(args.clients or [100], args.ranks or [2, 4])
        table = compressed_table(results)
    else:
        results = round_times(args.clients or [100], args.ranks or [1, 2, 4], args.models,
                              args.local_steps)
        table = rounds_table(results)
    with RESULTS.open("a") as f:
        for r in results:
            f.write(json.dumps({**r, "machine": info}) + "\n")
    print(table)


if __name__ == "__main__":
    main()
