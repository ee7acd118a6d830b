"""Which runs of a study can be packed, and into which groups.

A group is the seeds of one grid point: the same config but the seed, so the same model
shape, client count, data, algorithm and hyperparameters (a run's own data partition, initial
model, topology and minibatches come from its seed, and stay its own). A grid point is run
one run at a time instead when :func:`refusal` names a reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The algorithms whose rounds touch the other clients only through the federation's gossip
#: (no server, no global state, no per-round randomness of their own), tested equal packed
#: and alone (tests/test_pack.py).
PACKABLE = ("dfedavg", "dfedavgm", "dfedsam", "dfedsam_mgs", "dpsgd")


def refusal(config: Any) -> str | None:
    """Why the runs of ``config``'s grid point cannot be packed (None: they can)."""
    from gossipfl.algorithms import get_algorithm

    name = config.algorithm.name
    reasons = [
        (name not in PACKABLE or get_algorithm(name).global_state,
         f"algorithm '{name}' is not one that packs ({', '.join(PACKABLE)})"),
        (config.topology.order != "synchronous",
         f"topology.order: {config.topology.order}"),
        (config.topology.compression is not None, "topology.compression"),
        (config.topology.robust is not None, "topology.robust"),
        (config.topology.matrix is not None, "topology.matrix"),
        (config.systems is not None, "a systems section"),
        (config.byzantine is not None, "a byzantine section"),
        (config.engine.backend == "distributed", "engine.backend: distributed"),
        (config.engine.block_clients is not None, "engine.block_clients"),
        (config.engine.precision != "fp32", f"engine.precision: {config.engine.precision}"),
        (config.train.full_batch, "train.batch_size: full"),
        (config.init_params is not None, "init_params"),
    ]
    for refused, why in reasons:
        if refused:
            return why
    return None


def pack_groups(variants: Sequence[Any]) -> list[tuple[list[Any], str | None]]:
    """The variants in groups, in the study's order: ``(variants, None)`` for the seeds of a
    grid point that pack, ``([variant], reason)`` for a run that runs alone (its grid point
    cannot be packed, or it is its grid point's only run to do)."""
    by_label: dict[str, list[Any]] = {}
    for variant in variants:
        by_label.setdefault(variant.label, []).append(variant)
    groups: list[tuple[list[Any], str | None]] = []
    for members in by_label.values():
        why = refusal(members[0].config)
        if why is None and len(members) == 1:
            why = "the only run of its grid point"
        if why is None:
            groups.append((members, None))
        else:
            groups.extend(([variant], why) for variant in members)
    return groups
