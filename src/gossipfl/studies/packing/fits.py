"""Which runs of a study can be packed, and into which groups.

A group is the runs whose configs differ only in the seed, the topology's graph (name, mixing
rule, parameters) and, for the algorithms of :data:`RATE_PACKABLE`, ``train.lr``: the same
model shape, client count, data, algorithm and other hyperparameters (a run's own data
partition, initial model, graph and minibatches come from its seed and its topology, its
learning rate is its rows' own, and all stay its own). A grid point
is run one run at a time instead when :func:`refusal` names a reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The algorithms whose rounds touch the other clients only through the federation's gossip
#: (no server, no global state, no per-round randomness of their own), tested equal packed
#: and alone (tests/studies/test_pack.py).
PACKABLE = ("dfedavg", "dfedavgm", "dfedsam", "dfedsam_mgs", "dpsgd")

#: Those whose update takes the learning rate only through the phase's local optimizer, so
#: that runs with different ``train.lr`` pack (dpsgd's lian step scales by ``ctx.lr``
#: itself: its learning rates pack apart).
RATE_PACKABLE = ("dfedavg", "dfedavgm", "dfedsam", "dfedsam_mgs")

#: The topology keys the runs of a pack share; the graph (name, mixing, its parameters, the
#: sparse mode) may differ: each run mixes its block with its own mixer.
TOPOLOGY_SHARED = ("order", "compression", "robust", "stages", "matrix")


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
        (getattr(config.topology, "stages", None) is not None, "topology.stages"),
        (config.topology.matrix is not None, "topology.matrix"),
        (config.systems is not None, "a systems section"),
        (config.byzantine is not None, "a byzantine section"),
        (getattr(config, "privacy", None) is not None, "a privacy section"),
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
    """The variants in groups, in the study's order of each group's first run: ``(variants,
    None)`` for runs that pack, ``([variant], reason)`` for a run that runs alone (its grid
    point cannot be packed, or no other run to do packs with it)."""
    by_key: dict[str, list[Any]] = {}
    for variant in variants:
        by_key.setdefault(pack_key(variant.config), []).append(variant)
    groups: list[tuple[list[Any], str | None]] = []
    for members in by_key.values():
        why = refusal(members[0].config)
        if why is None and len(members) == 1:
            why = "no other run to pack with"
        if why is None:
            groups.append((members, None))
        else:
            groups.extend(([variant], why) for variant in members)
    return groups


def pack_key(config: Any) -> str:
    """What the runs of a pack share: the config but the seed, the run's name and (for
    :data:`RATE_PACKABLE`) ``train.lr``."""
    import yaml

    from gossipfl.assembly.comparable import comparable_config

    data = comparable_config(config)
    data.pop("seed", None)
    if config.algorithm.name in RATE_PACKABLE:
        data.get("train", {}).pop("lr", None)
    topology = data.get("topology", {})
    for key in [k for k in topology if k not in TOPOLOGY_SHARED]:
        topology.pop(key)  # the graph is each run's own (PackedFederation: its own mixer)
    return yaml.safe_dump(data, sort_keys=True)

