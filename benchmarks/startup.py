"""Start-up time of the quick commands (issue 23), as whole processes.

Times ``gossipfl --help``, ``gossipfl list`` and a config error (``gossipfl run --set
train.lrr=0.1``, exit status 2) from the process's start to its exit, against the yardstick
``python -c "import torch"`` measured in the same run: machines are noisy, so the figure to
compare across machines is the ratio. Wall and CPU (user + system, of the child process)
seconds are both given: on a shared machine CPU time is the steadier of the two. All commands run interleaved (one of each, then the next
repetition; the first round is a warm-up), each ratio is taken against the yardstick of the
same round, and the table gives the median with the (min–max) spread.

    python -m benchmarks.startup                      # this checkout's src/
    python -m benchmarks.startup --reps 15 --compare /tmp/before/src   # before/after, interleaved

``--compare SRC`` adds the same commands run with another checkout's ``src`` folder (e.g. the
commit before a change), interleaved with these. This script imports neither torch nor
gossipfl itself.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

#: (label, arguments after ``python -m gossipfl``, expected exit status)
COMMANDS = [("gossipfl --help", ["--help"], 0),
            ("gossipfl list", ["list"], 0),
            ("config error", ["run", "--set", "train.lrr=0.1"], 2)]
YARDSTICK = "import torch"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(argv: list[str], env: dict, cwd: str, expected: int) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run of ``argv``."""
    cpu, start = _children_cpu(), time.perf_counter()
    proc = subprocess.run(argv, check=False, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
    if proc.returncode != expected:
        sys.exit(f"{' '.join(argv)} exited with {proc.returncode} (expected {expected}):\n"
                 f"{proc.stderr.decode(errors='replace')[-2000:]}")
    return seconds, cpu


def cases(sources: dict[str, Path]) -> list[tuple[str, list[str], dict, int]]:
    """(label, argv, env, expected exit status) for the yardstick and every command."""
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = [(YARDSTICK, [sys.executable, "-c", "import torch"], base, 0)]
    for tag, src in sources.items():
        env = {**base, "PYTHONPATH": str(src)}
        for label, args, expected in COMMANDS:
            out.append((f"{label} ({tag})" if len(sources) > 1 else label,
                        [sys.executable, "-m", "gossipfl", *args], env, expected))
    return out


def measure(sources: dict[str, Path], reps: int,
            warmup: int) -> dict[str, dict[str, list[float]]]:
    """{"wall": {label: seconds per round}, "cpu": {...}}."""
    todo = cases(sources)
    times: dict[str, dict[str, list[float]]] = {
        clock: {label: [] for label, *_ in todo} for clock in ("wall", "cpu")}
    with tempfile.TemporaryDirectory() as cwd:  # a config error writes nothing; checked here
        for rep in range(warmup + reps):
            for label, argv, env, expected in todo:
                wall, cpu = time_once(argv, env, cwd, expected)
                if rep >= warmup:
                    times["wall"][label].append(wall)
                    times["cpu"][label].append(cpu)
        if any(Path(cwd).iterdir()):
            sys.exit(f"a command wrote into its working folder: {sorted(os.listdir(cwd))}")
    return times


def _cell(values: list[float], digits: int) -> str:
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}–{max(values):.{digits}f})")


def table(times: dict[str, dict[str, list[float]]]) -> str:
    """Median (min–max) wall and CPU seconds, and each as a ratio to ``import torch``."""
    lines = ["| command | wall s | × import torch (wall) | CPU s | × import torch (CPU) |",
             "|---|---|---|---|---|"]
    for label in times["wall"]:
        cells = []
        for clock in ("wall", "cpu"):
            seconds, torch_seconds = times[clock][label], times[clock][YARDSTICK]
            ratios = [s / t for s, t in zip(seconds, torch_seconds, strict=True)]
            cells += [_cell(seconds, 3), _cell(ratios, 2)]
        lines.append(f"| `{label}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=10, help="timed rounds (default 10)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--src", type=Path, default=SRC, help="gossipfl's src folder to time")
    parser.add_argument("--compare", type=Path, metavar="SRC",
                        help="another checkout's src folder, timed interleaved as 'other'")
    parser.add_argument("--json", type=Path, help="also write the raw seconds here")
    args = parser.parse_args(argv)
    sources = {"this": args.src.resolve()}
    if args.compare:
        sources["other"] = args.compare.resolve()
    for src in sources.values():
        if not (src / "gossipfl" / "__init__.py").is_file():
            parser.error(f"{src} has no gossipfl package")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    times = measure(sources, args.reps, args.warmup)
    print(f"{platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {load:.1f} at the start; "
          f"{args.reps} interleaved rounds after {args.warmup} warm-up")
    for tag, src in sources.items():
        print(f"  {tag}: {src}")
    print(table(times))
    if args.json:
        args.json.write_text(json.dumps({"sources": {k: str(v) for k, v in sources.items()},
                                         "seconds": times}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
