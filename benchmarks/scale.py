"""Gossip learning at scale (issue 42): peak memory and seconds per round against M.

Each point is one whole ``gossipfl run`` process (Fashion-MNIST, logistic regression, one
local step of batch 1, dfedavg, ``--rounds`` rounds, evaluated at the last one only; the local
models on the default sample of clients). Its peak resident memory comes from ``wait4``, its
seconds per round from metrics.csv (the median of the rounds after the first), and the
estimate from ``gossipfl.assembly.plan`` (what ``gossipfl run --dry-run`` prints). The runs set
``engine.keep_freed_memory: false`` unless ``--keep-freed-memory``: with it glibc keeps every
freed block in its heaps, and the peak then depends on how they fragment (measured up to
40 % above the plan at 10⁴ clients, and at the plan at 2·10⁴). "set-up + teardown" is the
wall time outside the rounds and evaluations (start, imports, data, topology, files). For every topology
the slopes of log(s/round) and log(peak − process) against log(M) are fitted (1.0: linear).

    python -m benchmarks.scale                                     # 1e3, 1e4, 1e5 clients
    python -m benchmarks.scale --clients 1000 10000 --topologies epidemic --out scale.jsonl
    python -m benchmarks.scale --clients 100000 --synthetic --ranks 2 --topologies epidemic ring
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parent.parent / "src"
TOPOLOGIES = ("ring", "one_peer_exponential", "epidemic", "random_matching")


def overrides(m: int, topology: str, rounds: int, model: str, keep: bool,
              device: str = "cpu", synthetic: bool = False) -> list[str]:
    sets = [f"data.clients={m}", f"model.name={model}", f"topology.name={topology}",
            f"device={device}",
            f"train.rounds={rounds}", "train.local_steps=1", "train.batch_size=1",
            f"eval.every={rounds}", "output.checkpoint_every=0",
            f"engine.keep_freed_memory={str(keep).lower()}"]
    if model == "mlp":
        sets.append("model.options.hidden=[64]")
    if synthetic:  # one sample per client past Fashion-MNIST's 60 000: Gaussian blobs, its shape
        sets += ["data.dataset=synthetic", "data.partition=iid", f"data.options.train_size={m}",
                 "data.options.test_size=10000", "data.options.dim=784",
                 "data.options.num_classes=10"]
    return sets


def launcher(ranks: int) -> list[str]:
    """The command that starts ``gossipfl``: itself, or torchrun with ``ranks`` processes."""
    if ranks == 1:
        return [sys.executable, "-m", "gossipfl"]
    from gossipfl.distributed.local import free_port

    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
            "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "gossipfl"]


def planned_bytes(sets: list[str]) -> float:
    """The plan's estimate (``gossipfl run --dry-run``'s total), computed in a process of its
    own: reading the dataset here would grow this process, and a child forked from it counts
    the parent's pages in its peak before it execs (the 10³-client points read 1.5 GB)."""
    code = ("import sys; from gossipfl.cli import QUICKSTART; "
            "from gossipfl.assembly.loading import load_config; from gossipfl.assembly.plan import estimate_bytes; "
            "print(estimate_bytes(load_config(QUICKSTART, sys.argv[1:])))")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code, *sets], env=env,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def run_point(m: int, topology: str, rounds: int, model: str, keep: bool = False,
              device: str = "cpu", synthetic: bool = False, ranks: int = 1) -> dict:
    """One run: wall seconds, peak RSS bytes, seconds per round, the plan's estimate (on a
    GPU the peak is the host process's; the plan counts the device's). With ``ranks`` > 1
    (torchrun, ``engine.backend: distributed``) the peak is the largest rank's, and
    ``wire_bytes_rank_max`` the most bytes one rank sent in a round (median over rounds)."""
    sets = overrides(m, topology, rounds, model, keep, device, synthetic)
    estimate = planned_bytes(sets)
    if ranks > 1:
        sets.append("engine.backend=distributed")
    with tempfile.TemporaryDirectory() as tmp:
        argv = [*launcher(ranks), "run", "--out", tmp, "--name", "run", "--quiet"]
        for item in sets:
            argv += ["--set", item]
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err = proc.stderr.read().decode(errors="replace")
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            return {"clients": m, "topology": topology, "model": model, "error":
                    f"exit {proc.returncode}: {err.strip().splitlines()[-1:] or ''}",
                    "estimate_bytes": estimate}
        with open(f"{tmp}/run/metrics.csv") as handle:
            rows = list(csv.DictReader(handle))
    seconds = [float(r["seconds"]) for r in rows]
    elapsed = float(rows[-1]["elapsed"]) if rows else 0.0
    elapsed += sum(float(r.get("eval_seconds") or 0.0) for r in rows)
    peak = usage.ru_maxrss * 1024  # Linux: KiB (the largest process: one rank under torchrun)
    wire = [float(r["wire_bytes_rank_max"]) for r in rows if r.get("wire_bytes_rank_max")]
    extra = {} if ranks == 1 else {"ranks": ranks,
                                   "wire_bytes_rank_max": statistics.median(wire) if wire else 0,
                                   "bytes_round": float(rows[-1]["bytes_round"])}
    return {"clients": m, "topology": topology, "model": model, "rounds": rounds, **extra,
            "keep_freed_memory": keep,
            "wall_s": wall, "outside_rounds_s": wall - elapsed,
            "s_per_round": statistics.median(seconds[1:] or seconds),
            "peak_bytes": peak, "estimate_bytes": estimate,
            "peak_over_estimate": peak / estimate}


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log y against log x."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument("--topologies", nargs="+", default=list(TOPOLOGIES))
    parser.add_argument("--model", default="logistic", choices=["logistic", "mlp"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (the runs' device)")
    parser.add_argument("--synthetic", action="store_true",
                        help="Gaussian blobs of Fashion-MNIST's shape, one sample per client "
                             "(more clients than its 60 000 samples, or no data files)")
    parser.add_argument("--ranks", type=int, default=1,
                        help="run each point on this many torchrun processes (the "
                             "distributed backend): the peak is then the largest rank's")
    parser.add_argument("--out", help="append each point as a JSON line to this file")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="measure with engine.keep_freed_memory (the default of runs): "
                             "glibc keeps freed blocks, and the peak depends on the heap's "
                             "fragmentation (up to ~40 %% above the plan at 10⁴ clients)")
    args = parser.parse_args()
    from gossipfl.assembly.plan import PROCESS_BYTES

    points = []
    for topology in args.topologies:
        for m in args.clients:
            point = run_point(m, topology, args.rounds, args.model, args.keep_freed_memory,
                              args.device, args.synthetic, args.ranks)
            points.append(point)
            print(json.dumps(point), flush=True)
            if args.out:
                with open(args.out, "a") as handle:
                    handle.write(json.dumps(point) + "\n")
    print("\n| topology | M | set-up + teardown s | s/round | peak GB | estimate GB | "
          "peak/estimate |")
    print("|---|---|---|---|---|---|---|")
    for p in points:
        if "error" in p:
            print(f"| {p['topology']} | {p['clients']} | {p['error']} | | | | |")
            continue
        print(f"| {p['topology']} | {p['clients']} | {p['outside_rounds_s']:.1f} | "
              f"{p['s_per_round']:.2f} | {p['peak_bytes'] / 1e9:.2f} | "
              f"{p['estimate_bytes'] / 1e9:.2f} | {p['peak_over_estimate']:.3f} |")
        if "ranks" in p:
            print(f"|   {p['ranks']} ranks: the most one rank sent in a round "
                  f"{p['wire_bytes_rank_max'] / 1e9:.3f} GB; accounted (every message) "
                  f"{p['bytes_round'] / 1e9:.3f} GB |")
    for topology in args.topologies:
        ok = [p for p in points if p["topology"] == topology and "error" not in p]
        if len(ok) >= 2:
            ms = [p["clients"] for p in ok]
            print(f"{topology}: slope of s/round in M {slope(ms, [p['s_per_round'] for p in ok]):.2f}"
                  f", of peak − process {slope(ms, [p['peak_bytes'] - PROCESS_BYTES for p in ok]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
