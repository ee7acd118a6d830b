"""One registry pattern (gossipfl.plugins.Registry) for every kind of piece: gossipfl's own
names kept, a plugin's replaced by the one loaded last, a lookup that names its key and the
closest name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

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
from gossipfl.topology.stages import STAGES
from gossipfl.trust.attacks import ATTACKS
from gossipfl.trust.rules import RULES

EVERY_KIND = {"algorithm": ALGORITHMS, "model": MODELS, "dataset": USER_DATASETS,
              "partition": PARTITIONERS, "server optimizer": SERVER_OPTIMIZERS,
              "schedule": SCHEDULES, "topology": TOPOLOGY_KINDS,
              "mixing rule": MIXING_RULE_KINDS, "compressor": COMPRESSORS,
              "robust rule": RULES, "attack": ATTACKS, "gossip stage": STAGES}


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


@pytest.mark.parametrize("name", ["a.b", "my model", "a/b", "", "-x", "2nd", "ü", 5, None])
@pytest.mark.parametrize("kind", sorted(EVERY_KIND))
def test_a_pieces_name_is_a_word(kind, name):
    """Every registry takes names as configs and ``--set`` write them (a dotted name or one
    with a space was registered, and a plugin's model ``a.b`` run; names of the wrong type
    failed later)."""
    registry = EVERY_KIND[kind]
    with pytest.raises(GossipflError, match=rf"^{kind} name {name!r:.60}: must be a word "
                                            r"of letters, digits, '_' and '-' that starts"):
        registry.add(name, plugin_piece())
    assert name not in registry


def test_every_own_name_is_a_word():
    from gossipfl.plugins import NAME

    assert all(NAME.match(n) for r in EVERY_KIND.values() for n in r.names())


def test_a_plugin_piece_replaced_by_another_is_a_warning_naming_both():
    """Two plugins registering one name: the later wins, said in a warning (it was silent);
    a plugin imported again (a notebook's cell run twice) replaces its own piece silently."""
    registry = Registry("widget", "section.widget")

    def first():
        return 1

    def second():
        return 2

    first.__module__ = second.__module__ = "my_plugin"
    registry.add("mine", first)
    with pytest.warns(UserWarning, match=r"^widget name 'mine': .*second in .* replaces .*"
                                         r"first in .*, registered under the same name before "
                                         r"\(the plugin loaded last wins\)\.$"):
        registry.add("mine", second)
    assert registry["mine"] is second
    again = plugin_piece()
    registry.add("again", plugin_piece())
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry.add("again", again)  # the same function made anew: no warning


def test_a_plugin_cannot_take_gossipfls_own_names():
    with pytest.raises(GossipflError, match=r"^robust rule name 'median' is gossipfl's own"):
        RULES.add("median", plugin_piece())
    with pytest.raises(GossipflError, match=r"^partition name 'natural' is gossipfl's own"):
        PARTITIONERS.add("natural", plugin_piece())
    with pytest.raises(GossipflError, match=r"^server optimizer name 'adam' is gossipfl's "):
        SERVER_OPTIMIZERS.add("adam", plugin_piece())


# -- every piece's parameters declared once (gossipfl.validation.Params) ------------------------
PARAMETRIZED = {"compressor": COMPRESSORS, "robust rule": RULES, "attack": ATTACKS,
                "gossip stage": STAGES}


def test_every_pieces_parameters_are_one_frozen_dataclass():
    """A compressor's, rule's, attack's, stage's and topology's parameters are a frozen
    Params dataclass: its fields are what a config may set, with their defaults and rules."""
    import dataclasses

    from gossipfl.validation import Params

    classes = [cls.Params for registry in PARAMETRIZED.values() for cls in registry.values()]
    classes += [kind.Params for kind in TOPOLOGY_KINDS.values()]
    for params in classes:
        assert issubclass(params, Params) and params.__dataclass_params__.frozen, params
        assert set(params.parameter_rules()) == {f.name for f in dataclasses.fields(params)}
        for key, value in params.defaults().items():
            rule = params.parameter_rules()[key]
            assert rule is None or value is None or rule.holds(value), (params, key)


@pytest.mark.parametrize("kind", list(PARAMETRIZED))
def test_a_piece_declaring_rules_beside_its_class_is_refused(kind):
    """The former form (a ``rules`` mapping on the piece, values set untyped) is one sentence
    at registration, naming the piece and the form to use."""
    from gossipfl.compression import Compressor, register_compressor
    from gossipfl.topology.stages import Stage, register_stage
    from gossipfl.trust import Attack, RobustRule, register_attack, register_rule
    from gossipfl.validation import COUNT

    base, register = {"compressor": (Compressor, register_compressor),
                      "robust rule": (RobustRule, register_rule),
                      "attack": (Attack, register_attack),
                      "gossip stage": (Stage, register_stage)}[kind]
    old = type("Old", (base,), {"name": "old_form", "kind": "old_form", "__module__": "mine",
                                "rules": {"k": COUNT}})
    with pytest.raises(GossipflError, match=r"declares its parameters as a 'rules' mapping; "
                                            r"declare them once as a frozen dataclass 'Params'"):
        register(old)
    assert "old_form" not in PARAMETRIZED[kind]


def test_typed_is_the_one_function_for_a_pieces_parameters():
    """Unknown keys with the allowed list, each rule, a missing required parameter, the
    rule between parameters, then the values as their fields' types."""
    from gossipfl.validation import COUNT, POSITIVE, Params, typed

    @dataclass(frozen=True, kw_only=True)
    class Widget(Params):
        hops: int
        scale: float = 1.0
        rules: ClassVar = {"hops": COUNT, "scale": POSITIVE}

        @classmethod
        def check_together(cls, key, given, name):
            if given.get("hops", 0) > 8 and "scale" in given:
                raise GossipflError(f"{key}.scale: {name} fixes its scale above 8 hops.")

    made = typed(Widget, {"hops": 2.0, "scale": 3}, "w", "widget", "mine")
    assert made == Widget(hops=2, scale=3.0)
    assert type(made.hops) is int and type(made.scale) is float
    for given, words in [
            ({"hops": 2, "scal": 1}, ("w.scal: unknown parameter of widget 'mine' (value 1) "
                                     "(did you mean 'scale'?); allowed: hops, scale.")),
            ({"hops": 0}, "w.hops: must be an integer >= 1, got 0."),
            ({}, "w.hops: widget 'mine' needs this parameter (an integer >= 1); set it."),
            ({"hops": 9, "scale": 2}, "w.scale: mine fixes its scale above 8 hops.")]:
        with pytest.raises(GossipflError) as info:
            typed(Widget, given, "w", "widget", "mine")
        assert str(info.value) == words
    assert Widget.describe() == "hops (an integer >= 1), scale = 1.0 (> 0)"
