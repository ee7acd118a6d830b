"""An interrupted run of many clients resumes exactly (issue 42): ``gossipfl run`` of M clients
straight through, and the same run stopped by Ctrl-C (SIGINT) after round ``--stop`` and
resumed with ``gossipfl run --resume``; the two metrics.csv (but the timing columns) and the
final client models (a SHA-256 of the checkpoint's ``x``) must be identical.

    python -m benchmarks.scale_resume                       # 100 000 clients, synthetic data
    python -m benchmarks.scale_resume --clients 60000 --fmnist
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
TIMING = ("seconds", "eval_seconds", "elapsed")


def settings(m: int, rounds: int, fmnist: bool, topology: str) -> list[str]:
    sets = [f"data.clients={m}", "model.name=logistic", f"topology.name={topology}",
            f"train.rounds={rounds}", "train.local_steps=1", "train.batch_size=1",
            "eval.every=1", "eval.local_models=false", "output.checkpoint_every=1"]
    if not fmnist:
        sets += ["data.dataset=synthetic", "data.partition=iid", f"data.options.train_size={m}",
                 "data.options.test_size=2000", "data.options.dim=784",
                 "data.options.num_classes=10"]
    return sets


def gossipfl(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen([sys.executable, "-m", "gossipfl", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def run(out: Path, sets: list[str]) -> float:
    start = time.perf_counter()
    proc = gossipfl(["run", "--out", str(out.parent), "--name", out.name, "--quiet",
                     *[f"--set={s}" for s in sets]])
    _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"gossipfl run failed: {err.decode().strip()}")
    return time.perf_counter() - start


def rounds_done(out: Path) -> int:
    try:
        with open(out / "metrics.csv") as handle:
            return len(list(csv.DictReader(handle)))
    except (OSError, csv.Error):
        return 0


def interrupted(out: Path, sets: list[str], stop: int) -> float:
    """The run, sent SIGINT once round ``stop`` is in its metrics, then resumed."""
    start = time.perf_counter()
    proc = gossipfl(["run", "--out", str(out.parent), "--name", out.name, "--quiet",
                     *[f"--set={s}" for s in sets]])
    while proc.poll() is None and rounds_done(out) < stop:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate()
    print(f"interrupted after round {rounds_done(out)} (exit {proc.returncode}): "
          f"{err.decode().strip().splitlines()[-1:] or ''}", flush=True)
    resumed = gossipfl(["run", "--resume", str(out), "--quiet"])
    _, err = resumed.communicate()
    if resumed.returncode:
        raise SystemExit(f"gossipfl run --resume failed: {err.decode().strip()}")
    return time.perf_counter() - start


def metrics(out: Path) -> list[dict]:
    with open(out / "metrics.csv") as handle:
        return [{k: v for k, v in row.items() if k not in TIMING}
                for row in csv.DictReader(handle)]


def models_digest(out: Path) -> str:
    import torch

    x = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    x = x["runner"]["algorithm"]["x"].contiguous()
    return hashlib.sha256(x.numpy().tobytes()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--stop", type=int, default=2)
    parser.add_argument("--topology", default="epidemic")
    parser.add_argument("--fmnist", action="store_true", help="Fashion-MNIST (≤ 60 000 clients)")
    parser.add_argument("--out", help="append the result as a JSON line to this file")
    args = parser.parse_args()
    sets = settings(args.clients, args.rounds, args.fmnist, args.topology)
    with tempfile.TemporaryDirectory() as tmp:
        straight = run(Path(tmp) / "straight", sets)
        want = (metrics(Path(tmp) / "straight"), models_digest(Path(tmp) / "straight"))
        (Path(tmp) / "straight" / "checkpoint.pt").unlink()
        stopped = interrupted(Path(tmp) / "stopped", sets, args.stop)
        got = (metrics(Path(tmp) / "stopped"), models_digest(Path(tmp) / "stopped"))
    result = {"clients": args.clients, "topology": args.topology, "rounds": args.rounds,
              "stopped_after": args.stop, "straight_s": straight, "stopped_and_resumed_s": stopped,
              "metrics_equal": got[0] == want[0], "models_equal": got[1] == want[1],
              "rows": len(want[0])}
    print(json.dumps(result), flush=True)
    if args.out:
        with open(args.out, "a") as handle:
            handle.write(json.dumps(result) + "\n")
    return 0 if result["metrics_equal"] and result["models_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
