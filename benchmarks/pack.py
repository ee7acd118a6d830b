"""A study of small runs three ways: packed (``gossipfl sweep --pack``: runs that differ in
seed and learning rate as one stack of S·M clients), one run at a time, and on ``--jobs`` worker processes;
rounds per second of the whole study (runs × rounds / wall seconds of the sweep).

    PYTHONPATH=src python -m benchmarks.pack                        # CPU, Fashion-MNIST cnn
    PYTHONPATH=src python -m benchmarks.pack --device cuda --out $OUT/pack.jsonl   # a GPU
    PYTHONPATH=src python -m benchmarks.pack --rounds 2 --seeds 2 --data synthetic  # a check

The study (default): DFedAvg on a ring of 20 clients, the cnn of gossipfl.models.cnn (or
``--model mlp``), ``--local-steps`` steps of batch 32 a round, evaluated at the last round
only, ``--seeds`` seeds × ``--lrs`` learning rates (8 runs by default: 4 × 2, one pack). Every mode runs the same study into its own temporary
folder, in this process (``--jobs`` on worker processes), one after the other, after an
untimed one-round sweep (``--warmup``: the first sweep of a process pays its one-time costs,
2-4 s on the CPU and the CUDA context on a GPU, which the first mode timed would otherwise
carry); each number is one sweep, so time it on a quiet machine (nothing else running): the
sweep's own start-up (data loading, building each run) is part of it, as it is for a user. ``--data synthetic``
needs no dataset files (Gaussian blobs of Fashion-MNIST's shape).

One JSON line per mode goes to ``--out`` (when given), with the phases replayed from a CUDA
graph (``engine.cuda_graphs``, on for CUDA: gossipfl.schedules.phase_graph) and the seconds
of the study's fixed costs (building the runs, drawing the runs' figures, the study's
report), and a Markdown table to stdout.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from gossipfl.schedules.phase_graph import PhaseGraphs
from gossipfl.studies.sweep import load_study, run_study

MODES = ("packed", "alone", "jobs")


def study(args: argparse.Namespace) -> dict:
    if args.data == "synthetic":
        data = {"dataset": "synthetic", "options": {"dim": args.dim, "train_size": 6000,
                                                    "test_size": 1000, "num_classes": 10}}
        model = {"name": "mlp", "options": {"hidden": args.hidden}} if args.model == "mlp" \
            else None
        if model is None:
            raise SystemExit("--data synthetic: use --model mlp (the cnn needs images).")
    else:
        data = {"dataset": "fashion_mnist", "partition": "dirichlet", "alpha": 0.3}
        model = {"name": "mlp", "options": {"hidden": [200, 200]}} if args.model == "mlp" \
            else {"name": "cnn"}
    base = {"data": {**data, "clients": args.clients}, "model": model,
            "topology": {"name": "ring"}, "algorithm": {"name": "dfedavg"},
            "train": {"rounds": args.rounds, "local_steps": args.local_steps,
                      "batch_size": 32, "lr": args.lrs[0]},
            "eval": {"every": args.rounds, "local_subset": 500},
            "output": {"checkpoint_every": 0}, "device": args.device}
    return {"name": "pack_bench", "base": base, "grid": {"train.lr": args.lrs},
            "seeds": list(range(args.seeds))}


#: phases replayed from a CUDA graph in this process (engine.cuda_graphs, on for CUDA)
REPLAYS = {"phases": 0}
#: seconds spent in this process building runs (Runner), drawing the runs' figures and
#: writing the study's report: where a study's fixed cost goes
SPENT = {"build_s": 0.0, "run_figures_s": 0.0, "report_s": 0.0}


def _time_fixed_costs() -> None:
    """Counts into :data:`SPENT` the time of the fixed costs of a study's runs."""
    import gossipfl.core.runner as runner_module
    from gossipfl.results import lifecycle
    from gossipfl.studies import sweep
    from gossipfl.studies.packing import execute

    def timed(owner, name: str, key: str) -> None:
        real = getattr(owner, name)

        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                SPENT[key] += time.perf_counter() - start

        setattr(owner, name, call)

    timed(runner_module, "build_experiment", "build_s")
    timed(lifecycle, "draw_figures", "run_figures_s")  # a run's own (one at a time)
    timed(execute, "draw_figures", "run_figures_s")  # a packed study's runs' together
    timed(sweep, "report_study", "report_s")


def _count_replays() -> None:
    real = PhaseGraphs.run

    def run(self, *args, **kwargs):
        before = self.replays
        done = real(self, *args, **kwargs)
        REPLAYS["phases"] += self.replays - before
        return done

    PhaseGraphs.run = run


def measure(mode: str, args: argparse.Namespace) -> dict:
    parsed = load_study(study(args))
    runs = args.seeds * len(args.lrs)
    replayed = REPLAYS["phases"]
    spent = dict(SPENT)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        outcome = run_study(parsed, out=Path(out), pack=mode == "packed",
                            jobs=args.jobs if mode == "jobs" else 1)
        seconds = time.perf_counter() - start
    if outcome.failed:
        raise SystemExit(f"{mode}: runs failed: {outcome.failed}")
    return {"mode": mode if mode != "jobs" else f"jobs {args.jobs}", "runs": runs,
            "clients": args.clients, "rounds": args.rounds, "model": args.model,
            "device": args.device, "seconds": round(seconds, 3),
            "rounds_per_second": round(runs * args.rounds / seconds, 3),
            "phases_replayed": REPLAYS["phases"] - replayed,
            **{key: round(SPENT[key] - spent[key], 3) for key in SPENT}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
    parser.add_argument("--data", choices=("fashion_mnist", "synthetic"),
                        default="fashion_mnist")
    parser.add_argument("--dim", type=int, default=784,
                        help="--data synthetic: the samples' dimension")
    parser.add_argument("--hidden", type=int, nargs="+", default=[200],
                        help="--data synthetic: the mlp's hidden widths (16 8: arithmetic so "
                             "small that the host's work bounds the study, as on a GPU)")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--local-steps", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--lrs", type=float, nargs="+", default=[0.05, 0.1])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--out", help="JSON lines, one per mode")
    parser.add_argument("--warmup", type=int, default=1, choices=(0, 1),
                        help="first an untimed sweep of one round one at a time (1, the "
                             "default), which pays the process's one-time costs: imports, "
                             "the device's context, kernels' first loads, the figures' fonts")
    args = parser.parse_args(argv)
    _count_replays()
    _time_fixed_costs()
    if args.warmup:
        measure("alone", argparse.Namespace(**{**vars(args), "rounds": 1, "seeds": 1,
                                               "lrs": args.lrs[:1]}))
    rows = []
    for mode in args.modes:
        rows.append(measure(mode, args))
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps({**rows[-1], "warmup": args.warmup}) + "\n")
    base = next((r for r in rows if r["mode"] == "alone"), None)
    print(f"\n{rows[0]['runs']} runs × {args.rounds} rounds, {args.clients} clients, "
          f"{args.model}, {args.device}\n")
    print("| mode | seconds | rounds/s | vs one at a time | building | runs' figures | "
          "report |\n|---|---|---|---|---|---|---|")
    for row in rows:
        ratio = f"{row['rounds_per_second'] / base['rounds_per_second']:.2f}×" if base else "–"
        print(f"| {row['mode']} | {row['seconds']:.1f} | {row['rounds_per_second']:.2f} | "
              f"{ratio} | {row['build_s']:.1f} | {row['run_figures_s']:.1f} | "
              f"{row['report_s']:.1f} |")


if __name__ == "__main__":
    main()
