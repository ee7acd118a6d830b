"""One registry pattern (gossipfl.plugins.Registry) for every kind of piece: gossipfl's own
names kept, a plugin's replaced by the one loaded last, a lookup that names its key and the
closest name."""

from __future__ import annotations

import pytest

from gossipfl.algorithms import ALGORITHMS
from gossipfl.algorithms.server import SERVER_OPTIMIZERS
from gossipfl.compression import COMPRESSORS
from gossipfl.data.datasets import USER_DATASETS
from gossipfl.data.partition import PARTITIONERS
from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.models import MODELS
from gossipfl.plugins import Registry
from gossipfl.schedules import SCHEDULES
from gossipfl.topology.graphs import TOPOLOGY_KINDS
from gossipfl.topology.mixing import MIXING_RULE_KINDS
from gossipfl.trust.attacks import ATTACKS
from gossipfl.trust.rules import RULES

EVERY_KIND = {"algorithm": ALGORITHMS, "model": MODELS, "dataset": USER_DATASETS,
              "partition": PARTITIONERS, "server optimizer": SERVER_OPTIMIZERS,
              "schedule": SCHEDULES, "topology": TOPOLOGY_KINDS,
              "mixing rule": MIXING_RULE_KINDS, "compressor": COMPRESSORS,
              "robust rule": RULES, "attack": ATTACKS}


def test_every_kind_of_piece_lives_in_one_registry_pattern():
    assert all(isinstance(r, Registry) and r.kind == kind for kind, r in EVERY_KIND.items())
    assert len({r.key for r in EVERY_KIND.values()}) == len(EVERY_KIND)
    for registry in EVERY_KIND.values():
        assert registry.names(), registry.kind


@pytest.mark.parametrize("kind", list(EVERY_KIND))
def test_a_lookup_names_its_key_and_the_closest_name(kind):
    registry = EVERY_KIND[kind]
    name = next(n for n in registry.names() if len(n) > 3)
    with pytest.raises(GossipflError, match=rf"^{registry.key}: unknown value "
                                            rf"'{name[:-1]}x'.*did you mean '{name}'"):
        registry.lookup(name[:-1] + "x")


def plugin_piece():
    """A function whose module is not gossipfl's (a plugin's)."""
    def piece():
        return 1

    piece.__module__ = "my_plugin"
    return piece


def test_own_names_are_kept_a_plugins_is_replaced_and_reserved_names_refused():
    loads = []
    registry = Registry("widget", "section.widget", load=lambda: loads.append(1),
                        reserved=("builtin",))
    own = registry.add("own", unknown_choice)  # a function of gossipfl's own
    assert own is unknown_choice and loads == []  # gossipfl's own do not trigger the load
    with pytest.raises(GossipflError, match=r"^widget name 'own' is gossipfl's own"):
        registry.add("own", plugin_piece())
    first, second = plugin_piece(), plugin_piece()
    registry.add("mine", first)
    assert loads == [1]  # a plugin's registration loads gossipfl's own first (once)
    assert registry.add("mine", second) is second and registry["mine"] is second
    with pytest.raises(GossipflError, match=r"^widget name 'builtin' is gossipfl's own; "
                                            r"choose another for my_plugin\.piece\.$"):
        registry.add("builtin", first, owner="my_plugin.piece")
    assert registry.names() == ("builtin", "own", "mine")
    assert registry.lookup("mine") is second


def test_a_plugin_cannot_take_gossipfls_own_names():
    with pytest.raises(GossipflError, match=r"^robust rule name 'median' is gossipfl's own"):
        RULES.add("median", plugin_piece())
    with pytest.raises(GossipflError, match=r"^partition name 'natural' is gossipfl's own"):
        PARTITIONERS.add("natural", plugin_piece())
    with pytest.raises(GossipflError, match=r"^server optimizer name 'adam' is gossipfl's "):
        SERVER_OPTIMIZERS.add("adam", plugin_piece())
