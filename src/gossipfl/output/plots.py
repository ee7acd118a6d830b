"""Figures as PNG files, drawn with matplotlib's Agg canvas (no display, no pyplot state).

- :func:`line_figure`: curves with a mean ± std band (accuracy vs round or vs bytes sent,
  consensus distance vs round; one curve per configuration, the band over seeds);
  :func:`lines` returns that Figure instead of writing it.
- :func:`partition_figure`: samples per client, stacked by class.
- :func:`topology_figure`: the communication graph.

Inputs are plain arrays; :mod:`gossipfl.results` turns run directories into them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch
from matplotlib.ticker import MaxNLocator

from gossipfl.io import atomic_write_bytes


@dataclass
class Curve:
    """One line: ``mean`` over ``x`` with an optional ± ``std`` band."""

    label: str
    x: np.ndarray
    mean: np.ndarray
    std: np.ndarray | None = None
    style: str = "-"


def png(fig: Figure) -> bytes:
    """``fig`` rendered as PNG."""
    import io

    buffer = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buffer)
    return buffer.getvalue()


def save(fig: Figure, path: str | Path) -> Path:
    """Render ``fig`` to PNG and write it atomically."""
    path = Path(path)
    atomic_write_bytes(path, png(fig))
    return path


def displayable(fig: Figure) -> Figure:
    """``fig`` that Jupyter shows as an image when it is a cell's value, whichever
    matplotlib backend is active (a Figure made without pyplot otherwise shows as text)."""
    fig._repr_png_ = lambda: png(fig)
    return fig


def line_figure(curves: Sequence[Curve], path: str | Path, *, xlabel: str, ylabel: str,
                title: str | None = None, y_scale: float = 1.0, log_y: bool = False,
                bytes_x: bool = False) -> Path:
    """Curves with shaded ± std bands, written as PNG to ``path`` (:func:`lines`)."""
    return save(lines(curves, xlabel=xlabel, ylabel=ylabel, title=title, y_scale=y_scale,
                      log_y=log_y, bytes_x=bytes_x), path)


def lines(curves: Sequence[Curve], *, xlabel: str, ylabel: str, title: str | None = None,
          y_scale: float = 1.0, log_y: bool = False, bytes_x: bool = False) -> Figure:
    """The :class:`~matplotlib.figure.Figure` of curves with shaded ± std bands; ``y_scale``
    multiplies y (100 for percent)."""
    below = _legend_below(curves)
    # below the axes, the figure grows by a line per curve and widens to the longest label
    # (≤ 0.07 inch a character at the legend's size), so the axes keep their size
    size = (max(7.0, 1.0 + 0.07 * max(len(c.label) for c in curves)), 4.5 + 0.2 * len(curves)
            ) if below else (7.0, 4.5)
    fig = Figure(figsize=size, layout="constrained")
    ax = fig.add_subplot()
    x_div, x_unit = _bytes_unit(max(float(np.max(c.x)) for c in curves)) if bytes_x else (1, "")
    for i, curve in enumerate(curves):
        x = np.asarray(curve.x, dtype=np.float64) / x_div
        y = np.asarray(curve.mean, dtype=np.float64) * y_scale
        (line,) = ax.plot(x, y, _style(curve.style, i), label=curve.label, linewidth=1.6)
        if curve.std is not None and np.any(curve.std > 0):
            s = np.asarray(curve.std, dtype=np.float64) * y_scale
            low = np.maximum(y - s, y[y > 0].min() * 0.5) if log_y and np.any(y > 0) else y - s
            ax.fill_between(x, low, y + s, color=line.get_color(), alpha=0.2, linewidth=0)
    if log_y and all(np.all(np.asarray(c.mean) > 0) for c in curves):
        ax.set_yscale("log")
    ax.set_xlabel(f"{xlabel} ({x_unit})" if x_unit else xlabel)
    ax.set_ylabel(ylabel + (" (%)" if y_scale == 100 else ""))
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if below:
        fig.legend(loc="outside lower center", fontsize="small")
    elif len(curves) > 1 or curves[0].label:
        ax.legend(fontsize="small")
    return fig


def _legend_below(curves: Sequence[Curve]) -> bool:
    """Whether the legend goes below the axes: inside it would cover the curves (more than
    eight of them, or labels longer than about half the axes' width)."""
    return len(curves) > 8 or max(len(c.label) for c in curves) > 45


#: the line styles of the curves past each round of the 10-colour cycle (tab10)
_PAST_THE_COLOURS = ("--", ":", "-.")


def _style(style: str, i: int) -> str:
    """Curve i's line style: its own, except that a solid line that reuses an earlier
    curve's colour (i ≥ 10) is drawn dashed, then dotted, then dash-dotted."""
    if i < 10 or style != "-":
        return style
    return _PAST_THE_COLOURS[(i // 10 - 1) % len(_PAST_THE_COLOURS)]


def _bytes_unit(largest: float) -> tuple[float, str]:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if largest >= size:
            return size, unit
    return 1.0, "B"


def partition_figure(class_counts: np.ndarray, path: str | Path, title: str = "") -> Path:
    """Bars of samples per client (``class_counts`` ``[M, C]``), stacked by class."""
    counts = np.asarray(class_counts)
    m, c = counts.shape
    fig = Figure(figsize=(min(max(6.0, 0.12 * m + 2), 16), 4.5), layout="constrained")
    ax = fig.add_subplot()
    colors = _class_colors(c)
    bottom = np.zeros(m)
    clients = np.arange(m)
    for k in range(c):
        ax.bar(clients, counts[:, k], bottom=bottom, width=0.9, color=colors[k],
               label=str(k) if c <= 20 else None, linewidth=0)
        bottom += counts[:, k]
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("client")
    ax.set_ylabel("training samples")
    ax.set_xlim(-0.6, m - 0.4)
    if title:
        ax.set_title(title)
    if c <= 20:
        ax.legend(title="class", fontsize="x-small", ncols=2, loc="upper left",
                  bbox_to_anchor=(1.0, 1.0))
    return save(fig, path)


def _class_colors(c: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if c <= 10 else "tab20" if c <= 20 else "viridis"]
    return [cmap(k if c <= 20 else k / max(c - 1, 1)) for k in range(c)]


def topology_positions(adjacency: np.ndarray, layout: str = "circular",
                       grid: tuple[int, int] | None = None, seed: int = 0) -> np.ndarray:
    """Node coordinates ``[M, 2]``: on a circle, on a rows × cols grid, or spring-placed."""
    m = len(adjacency)
    if layout == "grid" and grid is not None:
        cols = grid[1]
        return np.array([[i % cols, -(i // cols)] for i in range(m)], dtype=np.float64)
    if layout == "spring":
        import networkx as nx

        graph = nx.from_numpy_array((np.asarray(adjacency) != 0).astype(np.int8))
        pos = nx.spring_layout(graph, seed=seed)
        return np.array([pos[i] for i in range(m)], dtype=np.float64)
    angle = 2 * np.pi * np.arange(m) / m
    return np.stack([np.cos(angle), np.sin(angle)], axis=1)


def topology_figure(adjacency: np.ndarray, path: str | Path, *, title: str = "",
                    layout: str = "circular", grid: tuple[int, int] | None = None,
                    seed: int = 0) -> Path:
    """Nodes and the edges of ``adjacency`` (an edge where ``A_ij`` or ``A_ji`` is set)."""
    a = np.asarray(adjacency) != 0
    pos = topology_positions(a, layout, grid, seed)
    i, j = np.nonzero(np.triu(a | a.T, k=1))
    m = len(a)
    fig = Figure(figsize=(6, 6), layout="constrained")
    ax = fig.add_subplot()
    # on a grid, wrap-around edges (torus) would hide behind the rows: draw them as arcs
    wrap = (np.abs(pos[i] - pos[j]).sum(axis=1) > 1.5) if layout == "grid" else np.zeros(
        len(i), dtype=bool)
    segments = np.stack([pos[i[~wrap]], pos[j[~wrap]]], axis=1)
    ax.add_collection(LineCollection(segments, colors="0.55", linewidths=0.8, zorder=1))
    for a_, b_ in zip(i[wrap], j[wrap]):
        ax.add_patch(FancyArrowPatch(pos[a_], pos[b_], arrowstyle="-", color="0.7",
                                     linewidth=0.8, connectionstyle="arc3,rad=0.25", zorder=1))
    ax.scatter(pos[:, 0], pos[:, 1], s=max(12.0, 2000.0 / m), color="tab:blue", zorder=2)
    if m <= 40:
        for k, (x, y) in enumerate(pos):
            ax.annotate(str(k), (x, y), fontsize=7, ha="center", va="center", color="white",
                        zorder=3)
    ax.set_aspect("equal")
    ax.margins(0.08)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return save(fig, path)
