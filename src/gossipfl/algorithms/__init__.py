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
from gossipfl.errors import GossipflError
from gossipfl.plugins import Registry

FAMILIES = ("decentralized", "centralized", "personalized")


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: make ``cls`` available under ``cls.name`` (an Algorithm subclass
    with a name of its own; one sentence naming the class, else)."""
    from gossipfl.plugins import origin, replaceable

    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise GossipflError(f"@register takes a subclass of gossipfl.algorithms.Algorithm, "
                            f"got {origin(cls)}.")
    name = cls.__dict__.get("name", cls.name)
    if not isinstance(name, str) or not name or name.split() != [name]:
        raise GossipflError(f"algorithm class {origin(cls)} has no name: give it one, "
                            f"e.g. name = \"my_algorithm\" (the algorithm.name configs use; "
                            f"got {name!r}).")
    if replaceable(cls):
        ALGORITHMS.ensure_loaded()  # gossipfl's own first: a plugin cannot take their names
    if "name" not in cls.__dict__ and ALGORITHMS.get(name) not in (None, cls):
        raise GossipflError(f"algorithm class {origin(cls)} inherits the name {name!r} of "
                            f"{origin(ALGORITHMS[name])}: give it one of its own, e.g. "
                            f"name = \"my_algorithm\".")
    return ALGORITHMS.add(name, cls, owner=origin(cls))


def _load_all() -> None:
    for family in FAMILIES:
        if importlib.util.find_spec(f"{__name__}.{family}") is None:
            continue
        package = importlib.import_module(f"{__name__}.{family}")
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")


ALGORITHMS: Registry = Registry("algorithm", "algorithm.name", load=_load_all)


def get_algorithm(name: str) -> type[Algorithm]:
    """The algorithm class registered as ``name`` (GossipflError naming algorithm.name)."""
    return ALGORITHMS.lookup(name)


def available_algorithms() -> dict[str, type[Algorithm]]:
    ALGORITHMS.ensure_loaded()
    return dict(sorted(ALGORITHMS.items()))


__all__ = ["ALGORITHMS", "Algorithm", "Batch", "Context", "Phase", "Work",
           "available_algorithms", "get_algorithm", "register"]
