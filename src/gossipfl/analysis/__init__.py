"""Flatness analysis of a run's saved models: Hessian spectrum and loss landscapes.

- :func:`analyze` (``gossipfl analyze RUN_DIR``): top-k Hessian eigenvalues, Hutchinson
  trace, 1-D and 2-D loss landscapes, written to ``RUN_DIR/analysis/``;
- :func:`top_eigenvalues`, :func:`hutchinson_trace` on a
  :class:`~gossipfl.engine.hvp.HessianOperator` (batched over the M models of a stack);
- :func:`filter_normalized`, :func:`interpolation`, :func:`surface` (Li et al. 2018);
- :func:`analysis_columns` (study-table columns) and :func:`generalization_gap`.
"""

import sys
import types

# Imported on first use (the CLI starts without torch or matplotlib): name -> submodule.
_LAZY = {
    "analyze": "analyze",
    **dict.fromkeys(("COLUMNS", "analysis_columns", "generalization_gap", "train_subset"),
                    "columns"),
    **dict.fromkeys(("Eigenvalues", "Trace", "hutchinson_trace", "top_eigenvalues"), "hessian"),
    **dict.fromkeys(("Landscape", "filter_normalized", "interpolation", "make_evaluator",
                     "random_directions", "surface"), "landscape"),
    **dict.fromkeys(("RunModels", "load_run_models"), "models"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """Importing the submodule ``analyze`` must not hide the function ``analyze``."""

    def __setattr__(self, name: str, value) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

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
