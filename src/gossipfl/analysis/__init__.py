"""Flatness analysis of a run's saved models: Hessian spectrum and loss landscapes.

- :func:`analyze` (``gossipfl analyze RUN_DIR``): top-k Hessian eigenvalues, Hutchinson
  trace, 1-D and 2-D loss landscapes, written to ``RUN_DIR/analysis/``;
- :func:`top_eigenvalues`, :func:`hutchinson_trace` on a
  :class:`~gossipfl.engine.hvp.HessianOperator` (batched over the M models of a stack);
- :func:`filter_normalized`, :func:`interpolation`, :func:`surface` (Li et al. 2018);
- :func:`analysis_columns` (study-table columns) and :func:`generalization_gap`.
"""

from gossipfl.analysis.analyze import analyze
from gossipfl.analysis.columns import (
    COLUMNS,
    analysis_columns,
    generalization_gap,
    train_subset,
)
from gossipfl.analysis.hessian import Eigenvalues, Trace, hutchinson_trace, top_eigenvalues
from gossipfl.analysis.landscape import (
    Landscape,
    filter_normalized,
    interpolation,
    make_evaluator,
    random_directions,
    surface,
)
from gossipfl.analysis.models import RunModels, load_run_models

__all__ = [
    "COLUMNS",
    "Eigenvalues",
    "Landscape",
    "RunModels",
    "Trace",
    "analysis_columns",
    "analyze",
    "filter_normalized",
    "generalization_gap",
    "hutchinson_trace",
    "interpolation",
    "load_run_models",
    "make_evaluator",
    "random_directions",
    "surface",
    "top_eigenvalues",
    "train_subset",
]
