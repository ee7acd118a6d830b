"""``gossipfl analyze RUN_DIR``: the subcommand (its parser and what it prints).

    gossipfl analyze RUN_DIR [--hessian] [--top-k K] [--trace] [--landscape 1d|2d]
                     [--models average|local|all] [--data train|test] [--samples N]
                     [--round R] [--other RUN_DIR] [--grid N] [--span S] [--seed S]
                     [--tol T] [--max-iter N] [--trace-tol T] [--trace-max-iter N]
                     [--batch-size B] [--device cpu|cuda]

Every option is checked (:mod:`gossipfl.analysis.options`) before the run is loaded.

Nothing here imports torch until the command runs (the CLI starts fast).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``analyze`` on the CLI's subparsers."""
    p = sub.add_parser("analyze", help="Hessian spectrum and loss landscapes of a run's models")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with checkpoint.pt")
    p.add_argument("--hessian", action="store_true",
                   help="top Hessian eigenvalues (the default when nothing else is asked)")
    p.add_argument("--top-k", type=int, default=None, metavar="K",
                   help="how many eigenvalues (default 1; implies --hessian)")
    p.add_argument("--trace", action="store_true", help="Hessian trace (Hutchinson)")
    p.add_argument("--landscape", metavar="1d|2d",
                   help="1d: interpolation from the average model; 2d: surface")
    p.add_argument("--models", default="average", metavar="average|local|all")
    p.add_argument("--data", default="train", metavar="train|test")
    p.add_argument("--samples", type=int, default=1000, metavar="N",
                   help="samples of the split the loss is taken on (default 1000)")
    p.add_argument("--round", type=int, default=None, metavar="R",
                   help="the checkpoint's round (runs keep their latest checkpoint)")
    p.add_argument("--other", metavar="RUN_DIR",
                   help="with --landscape 1d: interpolate to this run's average model")
    p.add_argument("--grid", type=int, default=21, metavar="N", help="points per axis")
    p.add_argument("--span", type=float, default=1.0,
                   help="2d: coordinates in [-S, S]; 1d: alpha in [-S/2, 1+S/2]")
    p.add_argument("--seed", type=int, default=0, help="samples, directions, probe vectors")
    p.add_argument("--tol", type=float, default=1e-2, metavar="T",
                   help="eigenvalues: relative residual to stop at, in (0, 1) (default 0.01)")
    p.add_argument("--max-iter", type=int, default=100, metavar="N",
                   help="eigenvalues: most Hessian-vector products each (default 100)")
    p.add_argument("--trace-tol", type=float, default=1e-2, metavar="T",
                   help="trace: relative standard error to stop at, in (0, 1) (default 0.01)")
    p.add_argument("--trace-max-iter", type=int, default=100, metavar="N",
                   help="trace: most probe vectors (default 100)")
    p.add_argument("--batch-size", type=int, default=1000, metavar="B",
                   help="samples per forward pass (default 1000)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    from gossipfl.analysis.analyze import analyze

    result = analyze(args.run_dir, hessian=args.hessian or args.top_k is not None,
                     top_k=1 if args.top_k is None else args.top_k, trace=args.trace,
                     landscape=args.landscape, models=args.models, data=args.data,
                     samples=args.samples, round=args.round, other=args.other,
                     grid=args.grid, span=args.span, seed=args.seed, tol=args.tol,
                     max_iter=args.max_iter, trace_tol=args.trace_tol,
                     trace_max_iter=args.trace_max_iter, batch_size=args.batch_size,
                     device=args.device)
    print(format_result(result))
    return 0


def format_result(result: dict) -> str:
    """What ``gossipfl analyze`` prints: the eigenvalues and traces, then the files."""
    head = (f"analyzed {result['run']} (round {result['round']}, {result['algorithm']}) on "
            f"{result['samples']} {result['data']} samples")
    lines = [head]
    report = result.get("hessian")
    if report:
        for label, entry in report["models"].items():
            parts = []
            if "eigenvalues" in entry:
                parts.append("eigenvalues " + ", ".join(f"{v:.4g}" for v in
                                                       entry["eigenvalues"]))
            if "trace" in entry:
                parts.append(f"trace {entry['trace']:.4g} ± {entry['trace_std_error']:.2g}")
            lines.append(f"  {label:<10} {';  '.join(parts)}")
        for key, what in (("eigen", "per eigenvalue"), ("trace", "for the trace")):
            if key in report:
                seconds = report[key].get("seconds_per_eigenvalue", report[key]["seconds"])
                lines.append(f"  {seconds:.2f} s {what} "
                             f"({report[key]['hessian_vector_products']} Hessian-vector "
                             f"products, tol {report[key]['tol']:g})")
    for key in ("landscape1d", "landscape2d"):
        if key in result:
            info = result[key]
            per = info.get("seconds_per_grid", info.get("seconds_per_line"))
            lines.append(f"  {key}: {info['points']} points per model, {per:.2f} s per model")
    names = ", ".join(p.name for p in result["files"])
    lines.append(f"written to {result['run']}/analysis: {names}")
    return "\n".join(lines)
