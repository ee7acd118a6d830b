"""What other parts of gossipfl read from an analysis: study-table columns, and the
generalization gap the runner can log over rounds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from gossipfl.analysis.write import ANALYSIS_DIR
from gossipfl.common.rng import numpy_generator

#: The study-table columns :func:`analysis_columns` may return, with their descriptions.
COLUMNS = {
    "top_eigenvalue": "largest Hessian eigenvalue of the average model",
    "trace": "Hessian trace of the average model (Hutchinson)",
    "top_eigenvalue_local_mean": "largest Hessian eigenvalue, mean over local models",
    "trace_local_mean": "Hessian trace, mean over local models",
}


def analysis_columns(run_dir: str | Path) -> dict[str, float]:
    """The columns of :data:`COLUMNS` found in ``RUN_DIR/analysis/hessian.json`` (an empty
    dict when the run was not analyzed or the file cannot be read)."""
    path = Path(run_dir) / ANALYSIS_DIR / "hessian.json"
    try:
        models = json.loads(path.read_text())["models"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    out: dict[str, float] = {}
    average = models.get("average", {})
    if average.get("eigenvalues"):
        out["top_eigenvalue"] = float(average["eigenvalues"][0])
    if "trace" in average:
        out["trace"] = float(average["trace"])
    local = [entry for label, entry in models.items() if label != "average"]
    tops = [e["eigenvalues"][0] for e in local if e.get("eigenvalues")]
    traces = [e["trace"] for e in local if "trace" in e]
    if tops:
        out["top_eigenvalue_local_mean"] = float(np.mean(tops))
    if traces:
        out["trace_local_mean"] = float(np.mean(traces))
    return out


def train_subset(n_train: int, size: int, seed: int) -> np.ndarray:
    """Sorted indices of a fixed random subset of ``size`` train samples (all when ``size``
    is at least ``n_train``), the same every round: the train side of the gap."""
    if size >= n_train:
        return np.arange(n_train)
    return np.sort(numpy_generator(seed, "generalization_subset").choice(
        n_train, size=size, replace=False))


def generalization_gap(train_acc: float, train_loss: float, test_acc: float,
                       test_loss: float) -> dict[str, float]:
    """The metrics row entries of the generalization gap, train minus test:
    ``train_acc``, ``train_eval_loss`` (on the fixed subset, model in eval mode; named apart
    from the running ``train_loss`` of the local steps), ``gap_acc`` = train_acc − test_acc
    and ``gap_loss`` = train_loss − test_loss (usually negative: a model fits its training
    data better). NaN inputs (no accuracy for regression) give NaN gaps."""
    def minus(a: float, b: float) -> float:
        return float(a) - float(b) if math.isfinite(a) and math.isfinite(b) else math.nan

    return {"train_acc": float(train_acc), "train_eval_loss": float(train_loss),
            "gap_acc": minus(train_acc, test_acc), "gap_loss": minus(train_loss, test_loss)}
