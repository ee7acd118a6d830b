"""A refactor changes no number: every grid point of the committed studies, run for a few
rounds, before and after.

    python -m benchmarks.same_numbers record  before.json      # on the old code
    python -m benchmarks.same_numbers compare before.json      # on the new code
    python -m benchmarks.same_numbers diff before.json after.json   # two records (run the
                                                                    # two trees side by side)

Each grid point of ``examples/studies/*.yaml`` (first seed) runs ``--rounds`` rounds (default
2), evaluated every round, with ``--clients`` clients (default: the study's); the metrics of
every round and the final models' per-client sums (float64) are recorded. ``compare`` prints
the largest relative difference per point and exits 1 when one exceeds ``--rel`` (default
1e-6); 0.0 everywhere means bit-identical metrics. A point that diverges is recorded by its
message (the same message after the change counts as the same numbers). ``record`` writes the
file after every point, so an interrupted record keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
VOLATILE = ("seconds", "elapsed", "eval_seconds")


def points(rounds: int, clients: int | None, per_study: int | None = None) -> dict[str, object]:
    from gossipfl.studies.sweep import expand, load_study

    configs = {}
    for path in sorted((ROOT / "examples" / "studies").glob("*.yaml")):
        study = load_study(path)
        study.seeds = study.seeds[:1]
        overrides = [f"train.rounds={rounds}", "eval.every=1", "output.checkpoint_every=0"]
        for variant in expand(study)[:per_study]:
            from gossipfl.assembly.loading import load_config

            sized = variant.config.topology.name != "custom"  # a custom W fixes M
            more = [f"data.clients={clients}"] if clients is not None and sized else []
            configs[f"{path.stem}/{variant.dirname}"] = load_config(variant.config,
                                                                    overrides + more)
    return configs


def measure(config) -> dict:
    from gossipfl.core.runner import Runner
    from gossipfl.errors import Diverged, GossipflError

    try:
        result = Runner(config).run()
    except Diverged as exc:
        return {"diverged": str(exc)}
    except GossipflError as exc:  # a point refused at this size (the same sentence after the
        return {"refused": str(exc)}  # change counts as the same numbers)
    rows = [{k: v for k, v in row.items() if k not in VOLATILE} for row in result.metrics]
    sums = result.params.double().sum(dim=1).tolist()
    return {"rows": rows, "row_sums": sums}


def largest_difference(old, new) -> float:
    if isinstance(old, dict):
        if set(old) != set(new):
            return math.inf
        return max((largest_difference(old[k], new[k]) for k in old), default=0.0)
    if isinstance(old, list):
        if len(old) != len(new):
            return math.inf
        return max((largest_difference(a, b) for a, b in zip(old, new)), default=0.0)
    if isinstance(old, (int, float)) and isinstance(new, (int, float)):
        if old == new or (math.isnan(old) and math.isnan(new)):
            return 0.0
        return abs(old - new) / max(abs(old), abs(new), 1e-12)
    return 0.0 if old == new else math.inf


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["record", "compare", "diff"])
    parser.add_argument("file")
    parser.add_argument("other", nargs="?", help="diff: the record after the change")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=None)
    parser.add_argument("--rel", type=float, default=1e-6)
    parser.add_argument("--only", default=None, help="substring of the point names to run")
    parser.add_argument("--skip", action="append", default=[],
                        help="leave out the points whose names hold this substring (repeatable)")
    parser.add_argument("--per-study", type=int, default=None,
                        help="the first N grid points of each study (default: all)")
    parser.add_argument("--configs", action="store_true",
                        help="record each point's resolved config (config.yaml's dict) "
                             "instead of running it: every grid point, in seconds")
    args = parser.parse_args()
    if args.mode == "diff":
        return report(json.loads(Path(args.file).read_text()),
                      json.loads(Path(args.other).read_text()).items(), args.rel)
    torch.set_num_threads(1)
    configs = points(args.rounds, args.clients, args.per_study)
    if args.only:
        configs = {k: v for k, v in configs.items() if args.only in k}
    configs = {k: v for k, v in configs.items() if not any(s in k for s in args.skip)}
    record = (lambda config: config.to_dict()) if args.configs else measure
    if args.mode == "record":
        out: dict = {}
        for name, config in configs.items():
            out[name] = record(config)
            Path(args.file).write_text(json.dumps(out, indent=1))
            print(f"{len(out)}/{len(configs)} {name}", flush=True)
        print(f"recorded {len(out)} points in {args.file}")
        return 0
    before = json.loads(Path(args.file).read_text())
    return report(before, ((name, json.loads(json.dumps(record(config))))
                           for name, config in configs.items() if name in before), args.rel,
                  missing=[name for name in configs if name not in before])


def report(before: dict, after, rel: float, missing: list[str] = ()) -> int:
    """Print the largest relative difference of every point of ``after`` ((name, record)
    pairs) from ``before``; exit status 1 when one exceeds ``rel``."""
    worst, seen = 0.0, 0
    for name in missing:
        print(f"{name}: not recorded")
    for name, record in after:
        if name not in before:
            print(f"{name}: not recorded before")
            continue
        diff = largest_difference(before[name], record)
        worst, seen = max(worst, diff), seen + 1
        print(f"{name}: largest relative difference {diff:.3g}")
    print(f"worst over {seen} points: {worst:.3g}")
    return 0 if worst <= rel else 1


if __name__ == "__main__":
    sys.exit(main())
