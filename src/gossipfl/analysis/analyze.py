"""``analyze(run_dir, ...)``: the Hessian spectrum and loss landscapes of a run's saved models.

Outputs in ``RUN_DIR/analysis/`` (every file written atomically):

- ``hessian.json``, ``hessian.csv``: per model, the top-k eigenvalues (with the iterations
  and last relative change of each), the Hutchinson trace (with its standard error and
  samples), the tolerances, iteration limits and seconds;
- ``landscape1d.csv`` / ``.png``: loss and accuracy along the interpolation from the average
  model to each local model (``--models local|all``) and to another run's average model
  (``other``); α = 0 is the average model, α = 1 the other end;
- ``landscape2d.csv`` and one ``landscape2d_<model>.png`` per model (surface and contour):
  loss and accuracy on a grid around each selected model along two filter-normalized random
  directions (:mod:`gossipfl.analysis.landscape`).

The loss is the run's training loss (``train.loss``) on a fixed random subset of ``samples``
samples of the train or test split, the model in eval mode; the average model is the mean of
the clients' models (the server model for a centralized run).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from gossipfl.analysis import write
from gossipfl.analysis.hessian import hutchinson_trace, top_eigenvalues
from gossipfl.analysis.landscape import (
    interpolation,
    make_evaluator,
    random_directions,
    surface,
)
from gossipfl.analysis.models import (
    CONFIG_FILE,
    RunModels,
    analysis_samples,
    load_run_models,
)
from gossipfl.analysis.options import check_device, check_options
from gossipfl.common.rng import torch_generator
from gossipfl.engine import ParamLayout, make_oracle
from gossipfl.engine.hvp import HessianOperator
from gossipfl.errors import GossipflError
from gossipfl.io import check_writable
from gossipfl.output.progress import CountedProducts, WorkBar
from gossipfl.validation import check_flags, check_path

#: A file to write once everything is computed: returns its path.
Pending = Callable[[], Path]


@dataclass
class Selection:
    """The models analyzed: labels and their stack ``[K, P]``."""

    labels: list[str]
    X: Tensor


def select_models(run: RunModels, models: str) -> Selection:
    """The average model, the local models, or both (a centralized run has only the
    average, i.e. server, model: ``local`` is an error there, ``all`` gives the average)."""
    labels, rows = [], []
    if models in ("average", "all"):
        labels.append("average")
        rows.append(run.average.unsqueeze(0))
    if models in ("local", "all"):
        if run.local is None:
            if models == "local":
                raise GossipflError(f"--models: '{run.algorithm}' is centralized and its run "
                                    f"saved only the server model; use --models average.")
        else:
            labels += [f"client{i}" for i in range(run.local.shape[0])]
            rows.append(run.local)
    return Selection(labels, torch.cat(rows))


# --------------------------------------------------------------------------------------------
# Hessian
# --------------------------------------------------------------------------------------------
def hessian_report(op: HessianOperator, sel: Selection, top_k: int | None, trace: bool,
                   seed: int, tol: float, max_iter: int, trace_tol: float,
                   trace_max_iter: int) -> dict:
    """Top-k eigenvalues and/or trace of every selected model, as a JSON-ready dict."""
    report: dict = {"models": {label: {} for label in sel.labels}}
    if top_k:
        start, before = time.perf_counter(), op.products
        eig = top_eigenvalues(op, sel.X, top_k, tol=tol, max_iter=max_iter,
                              generator=torch_generator(seed, "hessian_eigen"))
        seconds = time.perf_counter() - start
        report["eigen"] = {"k": top_k, "tol": tol, "max_iter": max_iter,
                           "method": "power iteration with deflation; stops at relative residual "
                                     "|Hv - lambda v| / |lambda| < tol",
                           "seconds": seconds, "seconds_per_eigenvalue": seconds / top_k,
                           "hessian_vector_products": op.products - before}
        for i, label in enumerate(sel.labels):
            report["models"][label].update({
                "eigenvalues": eig.values[i].tolist(), "iterations": eig.iterations[i].tolist(),
                "residual": eig.residual[i].tolist(), "converged": eig.converged[i].tolist()})
    if trace:
        start, before = time.perf_counter(), op.products
        tr = hutchinson_trace(op, sel.X, tol=trace_tol, max_iter=trace_max_iter,
                              generator=torch_generator(seed, "hessian_trace"))
        report["trace"] = {"tol": trace_tol, "max_iter": trace_max_iter,
                           "method": "Hutchinson, Rademacher vectors",
                           "iterations": tr.iterations, "seconds": time.perf_counter() - start,
                           "hessian_vector_products": op.products - before}
        for i, label in enumerate(sel.labels):
            report["models"][label].update({
                "trace": float(tr.values[i]), "trace_std_error": float(tr.std_error[i]),
                "trace_converged": bool(tr.converged[i])})
    return report


def hessian_rows(report: dict) -> list[dict]:
    """One CSV row per model: eigenvalues and trace."""
    rows = []
    for label, entry in report["models"].items():
        row: dict = {"model": label}
        for j, value in enumerate(entry.get("eigenvalues", []), start=1):
            row[f"eigenvalue_{j}"] = value
        for key in ("trace", "trace_std_error"):
            if key in entry:
                row[key] = entry[key]
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------
# Landscapes
# --------------------------------------------------------------------------------------------
NO_END = ("--landscape: '1d' interpolates from the average model to another model; add "
          "--models local or --other RUN_DIR.")


def interpolation_ends(run: RunModels, sel: Selection, other: RunModels | None
                       ) -> Selection:
    """The far ends of the 1-D interpolations from the average model: the selected local
    models and the other run's average model."""
    labels = [label for label in sel.labels if label != "average"]
    rows = [sel.X[i] for i, label in enumerate(sel.labels) if label != "average"]
    if other is not None:
        if other.average.shape != run.average.shape:
            raise GossipflError(f"--other: '{other.path}' has models of "
                                f"{other.average.shape[0]} parameters, this run "
                                f"{run.average.shape[0]}; they cannot be interpolated.")
        labels.append(f"other:{other.path.name}")
        rows.append(other.average)
    if not rows:
        raise GossipflError(NO_END)
    return Selection(labels, torch.stack(rows))


def landscape_1d(evaluate, run: RunModels, ends: Selection, grid: int, span: float,
                 out: Path) -> tuple[dict, list[Pending]]:
    """The interpolations from the average model to ``ends`` (:func:`interpolation_ends`);
    the files are returned to be written, not written."""
    alphas = np.linspace(-span / 2, 1 + span / 2, grid)
    start = time.perf_counter()
    line = interpolation(evaluate, run.average.expand(len(ends.labels), -1), ends.X, alphas)
    seconds = time.perf_counter() - start
    rows = [{"end": label, "alpha": float(a), "loss": float(line.loss[i, j]),
             "accuracy": float(line.accuracy[i, j])}
            for i, label in enumerate(ends.labels) for j, a in enumerate(alphas)]
    files: list[Pending] = [
        lambda: write.write_csv(out / "landscape1d.csv", rows),
        lambda: write.line_plot(out / "landscape1d.png", alphas,
                                {f"average → {lbl}": line.loss[i]
                                 for i, lbl in enumerate(ends.labels)},
                                xlabel="α  (0: average model, 1: the other end)",
                                title=f"{run.path.name}: linear interpolation")]
    return {"ends": ends.labels, "points": len(alphas), "seconds": seconds,
            "seconds_per_line": seconds / len(ends.labels)}, files


def landscape_2d(evaluate, run: RunModels, sel: Selection, grid: int, span: float,
                 seed: int, out: Path) -> tuple[dict, list[Pending]]:
    layout = ParamLayout.from_module(run.model)
    d1, d2 = random_directions(layout, sel.X, 2, torch_generator(seed, "landscape_directions"))
    coords = np.linspace(-span, span, grid)
    start = time.perf_counter()
    grid_values = surface(evaluate, sel.X, d1, d2, coords)
    seconds = time.perf_counter() - start
    rows = [{"model": label, "a": float(a), "b": float(b),
             "loss": float(grid_values.loss[m, i, j]),
             "accuracy": float(grid_values.accuracy[m, i, j])}
            for m, label in enumerate(sel.labels)
            for i, a in enumerate(coords) for j, b in enumerate(coords)]
    files: list[Pending] = [lambda: write.write_csv(out / "landscape2d.csv", rows)]
    for m, label in enumerate(sel.labels):
        files.append(lambda m=m, label=label: write.surface_plot(
            out / f"landscape2d_{label}.png", coords, grid_values.loss[m],
            title=f"{run.path.name}, {label} model: loss along two filter-normalized "
                  f"directions"))
    return {"models": sel.labels, "points": grid * grid, "seconds": seconds,
            "seconds_per_grid": seconds / len(sel.labels)}, files


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------
def analyze(run_dir: str | Path, *, hessian: bool = False, top_k: int = 1,
            trace: bool = False, landscape: str | None = None, models: str = "average",
            data: str = "train", samples: int | None = 1000, round: int | None = None,
            other: str | Path | None = None, grid: int = 21, span: float = 1.0,
            seed: int = 0, tol: float = 1e-2, max_iter: int = 100, trace_tol: float = 1e-2,
            trace_max_iter: int = 100, batch_size: int = 1000, device: str = "cpu",
            mode: str = "auto", quiet: bool = False) -> dict:
    """Analyze the models saved in ``run_dir``; returns what was written and measured.

    With nothing asked (no ``hessian``, ``trace`` or ``landscape``), the top eigenvalue is
    computed. ``grid`` points per axis: 2-D coordinates span [−span, span]; the 1-D α runs
    over [−span/2, 1 + span/2]. ``samples=None`` uses the whole split. ``mode`` is the HVP
    batching: "auto", "batched" (vmap over models) or "loop". Progress on stderr (the
    Hessian-vector products, the landscape's batches of points: :mod:`gossipfl.output.progress`)
    unless ``quiet``.

    Every option, the device, the run directory, the output folder's writability and
    ``top_k`` against the model's size are checked before anything is computed; the files
    are written only once everything is computed, so an error leaves the previous analysis
    as it was.
    """
    check_options({"hessian": hessian, "top_k": top_k, "trace": trace,
                   "landscape": landscape, "models": models, "data": data,
                   "samples": samples, "round": round, "grid": grid, "span": span,
                   "seed": seed, "tol": tol, "max_iter": max_iter, "trace_tol": trace_tol,
                   "trace_max_iter": trace_max_iter, "batch_size": batch_size})
    check_path(run_dir, "run_dir")
    check_flags(quiet=quiet)
    if other is not None:
        check_path(other, "other")
    if other is not None and landscape != "1d":
        raise GossipflError("--other: the other run's model is an end of the 1-D "
                            "interpolation; use it with --landscape 1d.")
    if landscape == "1d" and models == "average" and other is None:
        raise GossipflError(NO_END)
    if not (hessian or trace or landscape):
        hessian = True
    dev = check_device(device)
    path = Path(run_dir)
    out = path / write.ANALYSIS_DIR
    if path.is_dir() and (path / CONFIG_FILE).is_file():
        check_writable(out, "RUN_DIR")  # before the data are loaded (load_run_models)
    run = load_run_models(run_dir, round)
    P = run.average.shape[0]
    if hessian and top_k > P:
        raise GossipflError(f"--top-k: must be at most P = {P} (the model's parameters), "
                            f"got {top_k}.")
    other_run = load_run_models(other, key="--other") if other is not None else None
    sel = select_models(run, models)
    ends = interpolation_ends(run, sel, other_run) if landscape == "1d" else None
    if hessian or trace:
        HessianOperator.check_model(run.model, mode)
    inputs, targets = analysis_samples(run.dataset, data, samples, seed)
    config = run.config
    result: dict = {"run": str(run.path), "round": run.round, "algorithm": run.algorithm,
                    "data": data, "samples": len(targets), "seed": seed,
                    "models": sel.labels, "files": []}
    pending: list[Pending] = []
    sel.X = sel.X.to(dev)
    if hessian or trace:
        op = HessianOperator(run.model.to(dev), inputs, targets, loss=config.train.loss,
                             batch_size=batch_size, mode=mode)
        bar = WorkBar("Hessian-vector products", "call", disable=quiet)
        try:
            report = hessian_report(CountedProducts(op, bar), sel, top_k if hessian else None,
                                    trace, seed, tol, max_iter, trace_tol, trace_max_iter)
        finally:
            bar.close()
        report.update({k: result[k] for k in ("run", "round", "algorithm", "data", "samples",
                                             "seed")}, hvp_mode=op.mode)
        result["hessian"] = report
        pending += [lambda: write.write_json(out / "hessian.json", report),
                    lambda: write.write_csv(out / "hessian.csv", hessian_rows(report))]
    if landscape:
        oracle = make_oracle(config.engine.oracle, run.model, loss=config.train.loss,
                             chunk_size=config.engine.chunk_size, device=dev)
        bar = WorkBar(f"landscape {landscape}", "batch", disable=quiet)
        evaluate = bar.counting(make_evaluator(oracle, inputs, targets, batch_size=batch_size))
        run.average = run.average.to(dev)
        if ends is not None:
            ends.X = ends.X.to(dev)
            info, files = landscape_1d(evaluate, run, ends, grid, span, out)
        else:
            info, files = landscape_2d(evaluate, run, sel, grid, span, seed, out)
        info.update({k: result[k] for k in ("run", "round", "algorithm", "data", "samples",
                                           "seed")}, grid=grid, span=span)
        bar.close()
        pending += [*files, lambda: write.write_json(out / f"landscape{landscape}.json", info)]
        result[f"landscape{landscape}"] = info
    result["files"] = [write_file() for write_file in pending]
    return result
