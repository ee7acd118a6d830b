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
from gossipfl.analysis.models import RunModels, analysis_samples, load_run_models
from gossipfl.engine import ParamLayout, make_oracle
from gossipfl.engine.hvp import HessianOperator
from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.rng import torch_generator

MODEL_CHOICES = ("average", "local", "all")
LANDSCAPES = ("1d", "2d")


@dataclass
class Selection:
    """The models analyzed: labels and their stack ``[K, P]``."""

    labels: list[str]
    X: Tensor


def _positive(flag: str, value: object, allow_zero: bool = False) -> None:
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        kind = "a non-negative" if allow_zero else "a positive"
        raise GossipflError(f"{flag}: must be {kind} integer, got {value!r}.")


def _check(top_k: int, landscape: str | None, models: str, samples: int | None,
           grid: int, span: float) -> None:
    _positive("--top-k", top_k)
    if samples is not None:
        _positive("--samples", samples)
    _positive("--grid", grid)
    if grid < 2:
        raise GossipflError(f"--grid: needs at least 2 points per axis, got {grid}.")
    if not isinstance(span, (int, float)) or not span > 0:
        raise GossipflError(f"--span: must be a positive number, got {span!r}.")
    if landscape is not None and landscape not in LANDSCAPES:
        raise unknown_choice("--landscape", landscape, LANDSCAPES)
    if models not in MODEL_CHOICES:
        raise unknown_choice("--models", models, MODEL_CHOICES)


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
        raise GossipflError("--landscape: '1d' interpolates from the average model to "
                            "another model; add --models local or --other RUN_DIR.")
    return Selection(labels, torch.stack(rows))


def landscape_1d(evaluate, run: RunModels, sel: Selection, other: RunModels | None,
                 grid: int, span: float, out: Path) -> dict:
    ends = interpolation_ends(run, sel, other)
    alphas = np.linspace(-span / 2, 1 + span / 2, grid)
    start = time.perf_counter()
    line = interpolation(evaluate, run.average.expand(len(ends.labels), -1), ends.X, alphas)
    seconds = time.perf_counter() - start
    rows = [{"end": label, "alpha": float(a), "loss": float(line.loss[i, j]),
             "accuracy": float(line.accuracy[i, j])}
            for i, label in enumerate(ends.labels) for j, a in enumerate(alphas)]
    files = [write.write_csv(out / "landscape1d.csv", rows),
             write.line_plot(out / "landscape1d.png", alphas,
                             {f"average → {lbl}": line.loss[i]
                              for i, lbl in enumerate(ends.labels)},
                             xlabel="α  (0: average model, 1: the other end)",
                             title=f"{run.path.name}: linear interpolation")]
    return {"ends": ends.labels, "points": len(alphas), "seconds": seconds,
            "seconds_per_line": seconds / len(ends.labels), "files": files}


def landscape_2d(evaluate, run: RunModels, sel: Selection, grid: int, span: float,
                 seed: int, out: Path) -> dict:
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
    files = [write.write_csv(out / "landscape2d.csv", rows)]
    for m, label in enumerate(sel.labels):
        files.append(write.surface_plot(
            out / f"landscape2d_{label}.png", coords, grid_values.loss[m],
            title=f"{run.path.name}, {label} model: loss along two filter-normalized "
                  f"directions"))
    return {"models": sel.labels, "points": grid * grid, "seconds": seconds,
            "seconds_per_grid": seconds / len(sel.labels), "files": files}


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------
def analyze(run_dir: str | Path, *, hessian: bool = False, top_k: int = 1,
            trace: bool = False, landscape: str | None = None, models: str = "average",
            data: str = "train", samples: int | None = 1000, round: int | None = None,
            other: str | Path | None = None, grid: int = 21, span: float = 1.0,
            seed: int = 0, tol: float = 1e-2, max_iter: int = 100, trace_tol: float = 1e-2,
            trace_max_iter: int = 100, batch_size: int = 1000, device: str = "cpu",
            mode: str = "auto") -> dict:
    """Analyze the models saved in ``run_dir``; returns what was written and measured.

    With nothing asked (no ``hessian``, ``trace`` or ``landscape``), the top eigenvalue is
    computed. ``grid`` points per axis: 2-D coordinates span [−span, span]; the 1-D α runs
    over [−span/2, 1 + span/2]. ``samples=None`` uses the whole split. ``mode`` is the HVP
    batching: "auto", "batched" (vmap over models) or "loop".
    """
    _check(top_k, landscape, models, samples, grid, span)
    if other is not None and landscape != "1d":
        raise GossipflError("--other: the other run's model is an end of the 1-D "
                            "interpolation; use it with --landscape 1d.")
    if not (hessian or trace or landscape):
        hessian = True
    run = load_run_models(run_dir, round)
    other_run = load_run_models(other) if other is not None else None
    sel = select_models(run, models)
    inputs, targets = analysis_samples(run.dataset, data, samples, seed)
    config, dev = run.config, torch.device(device)
    out = run.path / write.ANALYSIS_DIR
    result: dict = {"run": str(run.path), "round": run.round, "algorithm": run.algorithm,
                    "data": data, "samples": len(targets), "seed": seed,
                    "models": sel.labels, "files": []}
    sel.X = sel.X.to(dev)
    if hessian or trace:
        op = HessianOperator(run.model.to(dev), inputs, targets, loss=config.train.loss,
                             batch_size=batch_size, mode=mode)
        report = hessian_report(op, sel, top_k if hessian else None, trace, seed, tol,
                                max_iter, trace_tol, trace_max_iter)
        report.update({k: result[k] for k in ("run", "round", "algorithm", "data", "samples",
                                             "seed")}, hvp_mode=op.mode)
        result["hessian"] = report
        result["files"] += [write.write_json(out / "hessian.json", report),
                            write.write_csv(out / "hessian.csv", hessian_rows(report))]
    if landscape:
        oracle = make_oracle(config.engine.oracle, run.model, loss=config.train.loss,
                             chunk_size=config.engine.chunk_size, device=dev)
        evaluate = make_evaluator(oracle, inputs, targets, batch_size=batch_size)
        if other_run is not None:
            other_run.average = other_run.average.to(dev)
        run.average = run.average.to(dev)
        info = (landscape_1d(evaluate, run, sel, other_run, grid, span, out)
                if landscape == "1d" else landscape_2d(evaluate, run, sel, grid, span, seed,
                                                       out))
        files = info.pop("files")
        info.update({k: result[k] for k in ("run", "round", "algorithm", "data", "samples",
                                           "seed")}, grid=grid, span=span)
        result["files"] += [*files, write.write_json(out / f"landscape{landscape}.json", info)]
        result[f"landscape{landscape}"] = info
    return result
