"""Run the runs of several studies on worker processes that share one device, seed by seed.

    python examples/studies/run_parallel.py STUDY.yaml [STUDY.yaml ...] --jobs 6
        [--device cuda] [--out DIR] [--stop-after SECONDS] [--only GLOB ...]
        [--set KEY=VALUE ...]

A small model leaves a GPU idle between its kernel launches; several processes keep it busy.
Every run goes to the directory ``gossipfl sweep`` gives it and is analyzed as the study's
``analysis`` section asks, so ``gossipfl sweep STUDY.yaml`` afterwards skips the finished
runs. Runs are handed out seed 0 of every study first, then seed 1, ...: a job stopped early
leaves whole seeds. No run starts after ``--stop-after`` seconds; those are left for a later
sweep. ``--only`` keeps the runs whose directory name matches one of the patterns
(``fnmatch``: ``dfedsam_rho_0.1_*-seed[12]``). At the end each study's table and figures are
written from the runs that finished.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from fnmatch import fnmatch
from pathlib import Path

import torch
import yaml

from gossipfl.errors import GossipflError
from gossipfl.io import atomic_write_text
from gossipfl.sweep import (
    DONE,
    STUDY_FILE,
    analyze_run,
    expand,
    load_study,
    report_study,
    run_variant,
    study_path,
)

_STUDIES: dict = {}


def _study(source: str, overrides: tuple[str, ...]):
    """The study and its runs, parsed once per worker process."""
    if source not in _STUDIES:
        study = load_study(source, overrides)
        _STUDIES[source] = (study, expand(study))
    return _STUDIES[source]


def _threads(count: int) -> None:
    torch.set_num_threads(count)


def _one_run(task: tuple) -> tuple[str, str, str]:
    """Run (or skip) run ``index`` of the study ``source``; returns (run, what, why)."""
    source, overrides, out, index, device, deadline = task
    study, variants = _study(source, overrides)
    variant = variants[index]
    path = study_path(study, out) / variant.dirname
    if time.time() > deadline:
        return variant.dirname, "not started", "--stop-after passed"
    log = lambda message: print(f"[{variant.dirname}] {message.strip()}", flush=True)
    try:
        what, outcome = run_variant(variant, path, device, None, log, log)
        if outcome is not None and outcome.status == "failed":
            return variant.dirname, "failed", str(outcome.error)
        if study.analysis is not None:
            analyze_run(path, study.analysis, log, device)
    except GossipflError as exc:
        return variant.dirname, "failed", str(exc)
    return variant.dirname, what, ""


def write_tables(source: str, overrides: tuple[str, ...], out: str | None) -> Path:
    """The study's table and figures from its runs that finished or diverged (as ``gossipfl
    sweep`` ends; a run stopped part-way is left out, not reported with its first rounds)."""
    study, variants = _study(source, overrides)
    path = study_path(study, out)
    path.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path / STUDY_FILE, yaml.safe_dump(study.to_dict(), sort_keys=False))
    report_study(study, variants, path, statuses=DONE)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("studies", nargs="+", help="study YAML files")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--out", default=None, help="parent folder of the study folders")
    parser.add_argument("--stop-after", type=float, default=float("inf"),
                        help="seconds after which no run starts")
    parser.add_argument("--only", action="append", default=[], metavar="GLOB",
                        help="run only the runs whose directory name matches (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of every study's base config (repeatable)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        print(f"--jobs: must be at least 1, got {args.jobs}.", file=sys.stderr)
        return 2
    overrides = tuple(args.set)
    deadline = time.time() + args.stop_after
    try:
        order = []  # (seed's place, study's place, run's place): seed 0 of every study first
        for place, source in enumerate(args.studies):
            study, variants = _study(source, overrides)
            order += [(study.seeds.index(v.seed), place, i, source)
                      for i, v in enumerate(variants)
                      if not args.only or any(fnmatch(v.dirname, g) for g in args.only)]
    except GossipflError as exc:
        print(exc, file=sys.stderr)
        return 2
    tasks = [(source, overrides, args.out, i, args.device, deadline)
             for *_, i, source in sorted(order, key=lambda t: t[:3])]
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    context = multiprocessing.get_context("spawn")
    counts: dict[str, int] = {}
    with context.Pool(args.jobs, initializer=_threads, initargs=(threads,)) as pool:
        for run, what, why in pool.imap_unordered(_one_run, tasks):
            counts[what] = counts.get(what, 0) + 1
            print(f"{run}: {what}" + (f" ({why})" if why else ""), flush=True)
    for source in args.studies:
        print(f"table: {write_tables(source, overrides, args.out)}", flush=True)
    print(", ".join(f"{n} {what}" for what, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
