"""The loss of 2-D landscapes at the centre and on circles around it, as a markdown table.

    python examples/studies/report_landscapes.py RUN_DIR [RUN_DIR ...] [--radii 0.5 1]

Reads each run's ``analysis/landscape2d.csv`` (``gossipfl analyze RUN --landscape 2d``: loss
on a grid of filter-normalized directions, Li et al. 2018) and prints, per run and model, the
loss at the centre, the mean loss of the grid points within half a grid step of each radius,
and how much the loss rises from the centre to the largest radius. Filter normalization
removes the scale of the weights, so the rise compares sharpness across models of different
norms (unlike the Hessian's eigenvalues).
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import defaultdict
from pathlib import Path


def ring_losses(path: Path, radii: list[float]) -> dict[str, list[float]]:
    """model -> [loss at the centre, mean loss on each radius] from one landscape2d.csv."""
    points: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    with path.open() as handle:
        for row in csv.DictReader(handle):
            points[row["model"]].append((float(row["a"]), float(row["b"]), float(row["loss"])))
    result = {}
    for model, grid in points.items():
        step = min(abs(a) for a, _, _ in grid if a != 0)
        centre = min(grid, key=lambda p: math.hypot(p[0], p[1]))[2]
        rings = []
        for radius in radii:
            near = [loss for a, b, loss in grid if abs(math.hypot(a, b) - radius) <= step / 2]
            rings.append(sum(near) / len(near) if near else math.nan)
        result[model] = [centre, *rings]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    parser.add_argument("--radii", nargs="+", type=float, default=[0.5, 1.0])
    args = parser.parse_args(argv)
    header = ["run", "model", "loss at the centre", *(f"r = {r:g}" for r in args.radii),
              f"rise to r = {args.radii[-1]:g}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in args.runs:
        path = run / "analysis" / "landscape2d.csv"
        if not path.is_file():
            print(f"{run}: no analysis/landscape2d.csv (run `gossipfl analyze {run} "
                  f"--landscape 2d` first).", file=sys.stderr)
            return 2
        for model, (centre, *rings) in ring_losses(path, args.radii).items():
            cells = [run.name, model, f"{centre:.3f}", *(f"{v:.3f}" for v in rings),
                     f"+{rings[-1] - centre:.3f} ({rings[-1] / centre:.2f}×)"]
            lines.append("| " + " | ".join(cells) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
