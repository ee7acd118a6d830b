"""Algorithms, registered by name.

Each algorithm is one short module whose docstring cites its paper and writes its update
equations; :func:`register` adds it to :data:`ALGORITHMS`. Shared pieces (SGD direction,
heavy-ball momentum, gossip, server aggregation) live in :mod:`gossipfl.algorithms.steps`.
"""

from __future__ import annotations

import importlib

from gossipfl.algorithms.base import Algorithm, Batch, Federation
from gossipfl.errors import unknown_choice

ALGORITHMS: dict[str, type[Algorithm]] = {}

_MODULES = (
    "gossipfl.algorithms.decentralized.dpsgd",
    "gossipfl.algorithms.decentralized.dfedavg",
    "gossipfl.algorithms.decentralized.dfedavgm",
    "gossipfl.algorithms.decentralized.dfedsam",
    "gossipfl.algorithms.decentralized.oledfl",
    "gossipfl.algorithms.decentralized.dfedcata",
    "gossipfl.algorithms.centralized.fedavg",
    "gossipfl.algorithms.centralized.fedsam",
    "gossipfl.algorithms.centralized.fedprox",
    "gossipfl.algorithms.centralized.scaffold",
)


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if cls.name in ALGORITHMS and ALGORITHMS[cls.name] is not cls:
        raise ValueError(f"algorithm name {cls.name!r} registered twice")
    ALGORITHMS[cls.name] = cls
    return cls


def _load_all() -> None:
    for module in _MODULES:
        importlib.import_module(module)


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm class registered as ``name`` (GossipflError naming algorithm.name)."""
    _load_all()
    if name not in ALGORITHMS:
        raise unknown_choice("algorithm.name", name, ALGORITHMS)
    return ALGORITHMS[name]


def available_algorithms() -> dict[str, type[Algorithm]]:
    _load_all()
    return dict(sorted(ALGORITHMS.items()))


__all__ = ["ALGORITHMS", "Algorithm", "Batch", "Federation", "available_algorithms",
           "get_algorithm", "register"]
