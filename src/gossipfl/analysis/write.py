"""Analysis outputs: JSON, CSV and PNG files in ``RUN_DIR/analysis/``, each written atomically
(:mod:`gossipfl.io`: a temporary file beside the target, then a rename)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from gossipfl.io import atomic_write_text
from gossipfl.output.plots import save

ANALYSIS_DIR = "analysis"


def write_json(path: Path, data: dict) -> Path:
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    return path


def write_csv(path: Path, rows: Sequence[dict]) -> Path:
    """Rows of equal keys as CSV (floats with full precision)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else [],
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buffer.getvalue())
    return path


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def line_plot(path: Path, x: np.ndarray, curves: dict[str, np.ndarray], *, xlabel: str,
              title: str) -> Path:
    """Loss against one coordinate, one line per curve."""
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for label, y in curves.items():
        ax.plot(x, y, label=label, linewidth=1.4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if 1 < len(curves) <= 12:
        ax.legend(fontsize="small")
    return save(fig, path)


def surface_plot(path: Path, coords: np.ndarray, loss: np.ndarray, *, title: str) -> Path:
    """A loss surface ``loss [A, B]`` over ``coords`` (a: first index): 3-D surface on the
    left, contour lines on the right."""
    a, b = np.meshgrid(coords, coords, indexing="ij")
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    ax3 = fig.add_subplot(1, 2, 1, projection="3d")
    ax3.plot_surface(a, b, loss, cmap="viridis", linewidth=0, antialiased=True)
    ax3.set_xlabel("direction 1")
    ax3.set_ylabel("direction 2")
    ax3.set_zlabel("loss")
    ax2 = fig.add_subplot(1, 2, 2)
    lines = ax2.contour(a, b, loss, levels=15, cmap="viridis")
    ax2.clabel(lines, fontsize="x-small")
    ax2.plot([0], [0], "r+", markersize=10)
    ax2.set_xlabel("direction 1")
    ax2.set_ylabel("direction 2")
    ax2.set_aspect("equal")
    fig.suptitle(title)
    return save(fig, path)
