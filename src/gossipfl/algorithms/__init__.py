"""Algorithms, registered by name.

Each algorithm is one short module whose docstring cites its paper and writes its update
equations; :func:`register` adds it to :data:`ALGORITHMS`. Every module of this package's
subpackages is imported on first use (no hand-kept list), and a researcher's own module
registers the same way (see :mod:`gossipfl.plugins`). Shared pieces (local directions as a
chain of terms, the local optimizer, server optimizers) live in
:mod:`gossipfl.algorithms.terms`, :mod:`gossipfl.algorithms.local` and
:mod:`gossipfl.algorithms.server`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

from gossipfl.algorithms.base import Algorithm, Batch, Context, Phase, Work
from gossipfl.errors import unknown_choice

ALGORITHMS: dict[str, type[Algorithm]] = {}
FAMILIES = ("decentralized", "centralized", "personalized")


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    from gossipfl.plugins import replaceable

    existing = ALGORITHMS.get(cls.name, cls)
    if existing is not cls and not replaceable(existing):
        raise ValueError(f"algorithm name {cls.name!r} is gossipfl's own; choose another")
    ALGORITHMS[cls.name] = cls
    return cls


def _load_all() -> None:
    for family in FAMILIES:
        if importlib.util.find_spec(f"{__name__}.{family}") is None:
            continue
        package = importlib.import_module(f"{__name__}.{family}")
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm class registered as ``name`` (GossipflError naming algorithm.name)."""
    _load_all()
    if name not in ALGORITHMS:
        raise unknown_choice("algorithm.name", name, ALGORITHMS)
    return ALGORITHMS[name]


def available_algorithms() -> dict[str, type[Algorithm]]:
    _load_all()
    return dict(sorted(ALGORITHMS.items()))


__all__ = ["ALGORITHMS", "Algorithm", "Batch", "Context", "Phase", "Work",
           "available_algorithms", "get_algorithm", "register"]
