"""Issue 39's speed target, measured as it is stated: *the mlp DFedAvg round with weight decay
5e-4 at least as fast as today's without it* — this tree's round with weight decay against
the round without it at the commit the issue was filed on (6ec9dbc), each in its own
process, the processes alternated so that load on a shared machine hits both alike.

    git worktree add --detach /tmp/base39 6ec9dbc
    PYTHONPATH=src python -m benchmarks.wd_target --base /tmp/base39 [--pairs 4 --rounds 4]

The round: the headline task (Fashion-MNIST, 100 clients, iid, the MLP 784-200-200-10, one
local epoch of batch 32, DFedAvg on a ring, lr 0.1; ``Runner.run_round``: training and
gossip), the stacked oracle, torch's default threads, ``OMP_WAIT_POLICY=PASSIVE`` (the
runner's own setting); the first round of each process is a warm-up. Prints each process's
median wall and CPU seconds per round and the ratios (this tree with weight decay ÷ the
base without; below 1 is faster). Each child also runs this tree's and the base's round
without weight decay (``--cases``), so the table shows what weight decay costs today.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def child(weight_decay: float, rounds: int) -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    from gossipfl.assembly.loading import load_config
    from gossipfl.core.runner import Runner

    runner = Runner(load_config({
        "data": {"dataset": "fashion_mnist", "clients": 100, "partition": "iid"},
        "model": {"name": "mlp"}, "topology": {"name": "ring"},
        "algorithm": {"name": "dfedavg"},
        "train": {"rounds": rounds + 1, "local_epochs": 1, "batch_size": 32, "lr": 0.1,
                  "weight_decay": weight_decay},
        "eval": {"local_models": False}, "engine": {"oracle": "stacked"}}))
    wall, cpu = [], []
    with torch.no_grad():
        for t in range(rounds + 1):
            w, c = time.perf_counter(), time.process_time()
            runner.run_round(t)
            wall.append(time.perf_counter() - w)
            cpu.append(time.process_time() - c)
    print(json.dumps({"wall": wall[1:], "cpu": cpu[1:]}))


def run(tree: Path, weight_decay: float, rounds: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), OMP_WAIT_POLICY="PASSIVE")
    out = subprocess.run([sys.executable, str(HERE / "benchmarks" / "wd_target.py"), "--child",
                          "--weight-decay", str(weight_decay), "--rounds", str(rounds)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="a checkout of the commit the issue was "
                        "filed on (6ec9dbc)")
    parser.add_argument("--pairs", type=int, default=4, help="processes of each case")
    parser.add_argument("--rounds", type=int, default=4, help="timed rounds per process")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--weight-decay", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.weight_decay, args.rounds)
        return
    if args.base is None:
        raise SystemExit("--base: give a checkout of the commit the issue was filed on.")
    cases = {"this tree, wd 5e-4": (HERE, 5e-4), "base 6ec9dbc, wd 0": (args.base, 0.0),
             "this tree, wd 0": (HERE, 0.0), "base 6ec9dbc, wd 5e-4": (args.base, 5e-4)}
    seconds: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in cases}
    for _ in range(args.pairs):
        for name, (tree, wd) in cases.items():
            result = run(tree, wd, args.rounds)
            for clock in ("wall", "cpu"):
                seconds[name][clock].extend(result[clock])
    base = {c: statistics.median(seconds["base 6ec9dbc, wd 0"][c]) for c in ("wall", "cpu")}
    print(f"os.cpu_count() = {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    print("| case | wall s / round | CPU s / round | ÷ base wd 0 (wall / CPU) |")
    print("|---|---|---|---|")
    for name, clocks in seconds.items():
        wall, cpu = (statistics.median(clocks[c]) for c in ("wall", "cpu"))
        print(f"| {name} | {wall:.3f} ({min(clocks['wall']):.3f}–{max(clocks['wall']):.3f}) "
              f"| {cpu:.3f} ({min(clocks['cpu']):.3f}–{max(clocks['cpu']):.3f}) "
              f"| {wall / base['wall']:.2f} / {cpu / base['cpu']:.2f} |")


if __name__ == "__main__":
    main()
