"""Communication topologies, mixing matrices and gossip as a matrix product.

``build_topology(name, M, mixing, seed, **params)`` gives a :class:`Topology` (per-round graph
and validated float64 mixing matrix W); ``Mixer(topology, device, dtype)`` applies
``X ← W^Q X`` to the ``[M, P]`` stack of client models.
"""

from gossipfl.topology import builders  # noqa: F401  (registers the built-in topologies)
from gossipfl.topology.dynamic import random_k_neighbours
from gossipfl.topology.graphs import (
    TOPOLOGIES,
    TOPOLOGY_KINDS,
    Topology,
    TopologyKind,
    build_topology,
    register_topology,
    topology_kind,
    topology_names,
)
from gossipfl.topology.loaders import load_matrix
from gossipfl.topology.mixer import Mixer
from gossipfl.topology.mixing import (
    MIXING_RULE_KINDS,
    MixingRule,
    check_connected,
    count_messages,
    disagreement_radius,
    largest_safe_beta,
    mixing_matrix,
    mixing_rule_names,
    register_mixing_rule,
    spectral_gap,
    validate_mixing,
)
from gossipfl.topology.stages import STAGES, Stage, register_stage

__all__ = [
    "MIXING_RULE_KINDS",
    "STAGES",
    "TOPOLOGIES",
    "TOPOLOGY_KINDS",
    "Mixer",
    "MixingRule",
    "Stage",
    "Topology",
    "TopologyKind",
    "build_topology",
    "check_connected",
    "count_messages",
    "disagreement_radius",
    "largest_safe_beta",
    "load_matrix",
    "mixing_matrix",
    "mixing_rule_names",
    "random_k_neighbours",
    "register_mixing_rule",
    "register_stage",
    "register_topology",
    "spectral_gap",
    "topology_kind",
    "topology_names",
    "validate_mixing",
]
