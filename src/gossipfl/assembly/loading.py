"""Loading a config: the levels layered (a file, ``--set``, a study's grid) and every section
checked against the registries of its pieces.

:mod:`gossipfl.config` is the schema (one dataclass per section, YAML in and out, the typed
parse); it imports no component, so that every component may read its section's type. This
module sits above the components: :func:`load_config` parses with the schema, types the
algorithm's hyperparameters through the algorithm registry, then checks each section by the
registries of its pieces (partitioners, topologies, mixing rules, schedules, compressors,
robust rules, losses, oracles, models, datasets, attacks, the systems model, DP-SGD) and warns
once for each setting that no chosen component reads (:func:`ignored_settings`).

The components are imported when a config is checked, not when this module is: a key or type
error is one sentence before torch loads (the CLI's start-up, ``tests/cli/test_startup.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from gossipfl import plugins
from gossipfl.common.sections import SHARED_TOPOLOGY_PARAMS
from gossipfl.config import (
    DEFAULT,
    EXCLUSIVE,
    PERSONALIZED_POINTS,
    AlgorithmConfig,
    ByzantineConfig,
    Config,
    DataConfig,
    EngineConfig,
    EvalConfig,
    OutputConfig,
    PrivacyConfig,
    Replace,
    SystemsConfig,
    TopologyConfig,
    TrainConfig,
    as_list,
    build_section,
    check_exclusive,
    deep_copy_dicts,
    parse_config,
    parse_yaml,
    read_yaml,
)
from gossipfl.errors import GossipflError, IgnoredSetting
from gossipfl.validation import (
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    UNIT_INTERVAL,
    Rule,
    check_all,
    one_of,
)


def load_config(source: Config | dict | str | Path | None = None,
                overrides: list[str] | None = None) -> Config:
    """Parse and validate a config from a dict, a YAML path or a Config.

    ``overrides`` are ``"key.path=value"`` strings (values parsed as YAML scalars) applied
    before validation, as the CLI's ``--set`` does (one string alone is one override).
    """
    overrides = as_list(overrides, "overrides", "'key.path=value' strings")
    if isinstance(source, Config):
        if overrides:
            source = source.to_dict(api_values=True)
        else:
            check_config(source)
            return source
    if source is None:
        raw: dict = {}
    elif isinstance(source, (str, Path)):
        raw = read_yaml(Path(source))
        if "plugins" in raw:
            raw["plugins"] = plugins.resolve(raw["plugins"], Path(source).parent)
    elif isinstance(source, dict):
        raw = deep_copy_dicts(source)
    else:
        raise GossipflError(
            f"config: expected a dict, a YAML path or a Config, got {type(source).__name__}.")
    raw = plain(raw)  # a file's own !replace and !default mean nothing at its level
    check_exclusive(raw)
    given: dict = {}
    for item in overrides or []:
        apply_override(given, item, replace=False)
    check_exclusive(given, " on the command line", typed=True)
    for item in overrides or []:
        apply_override(raw, item)  # a switched model.name drops the old model's options
    config = parse_config(raw)
    check_config(config)
    return config


# --------------------------------------------------------------------------------------------
# Layering: a later level's setting over an earlier level's (docs/guide/configuration.md)
# --------------------------------------------------------------------------------------------
def split_override(item: Any) -> tuple[str, Any]:
    """``(key, value)`` of one ``key.path=value`` override (the key stripped, the value read
    as YAML, :func:`override_value`); one sentence else."""
    if not isinstance(item, str) or "=" not in item:
        shown = f"'{item}'" if isinstance(item, str) else f"{item!r:.80}"
        raise GossipflError(f"--set: expected key.path=value, got {shown}.")
    key, _, text = item.partition("=")
    return key.strip(), override_value(text)


def override_value(text: str) -> Any:
    """The value of a ``KEY=VALUE`` override: its text read as YAML (None when empty; the
    text itself when it is not YAML)."""
    try:
        return parse_yaml(text) if text.strip() else None
    except yaml.YAMLError:
        return text


def apply_override(raw: dict, item: str, replace: bool = True) -> None:
    """Apply one ``key.path=value`` override to a raw config dict in place, by the one
    layering rule (:func:`layer`); ``replace``: the rules between keys apply (a set key of an
    :data:`~gossipfl.config.EXCLUSIVE` pair removes the other one, a switched piece drops
    the previous piece's parameters)."""
    key, value = split_override(item)
    parts = key.split(".")
    if not key:
        raise GossipflError(f"--set: empty key in '{item}'.")
    if not all(parts):
        raise GossipflError(f"--set: the key '{key}' has an empty part (two dots, or a dot at "
                            f"an end) in '{item}'.")
    layer(raw, parts, value, replace=replace, where="--set")


def layer(raw: dict, parts: Sequence[str], value: Any, replace: bool = True,
          where: str = "--set") -> None:
    """Layer ``value`` over the key ``parts`` of ``raw`` (in place), the one rule of the
    command line, the Python API and a study's grid: a mapping over a mapping merges, key by
    key, by this same rule; :class:`~gossipfl.config.Replace` (YAML ``!replace {...}``)
    replaces the whole mapping; :data:`~gossipfl.config.DEFAULT` (``!default``) removes the
    key, so that its default applies; anything else replaces the value. ``where`` names the
    level in a sentence about a path through a value that is not a section."""
    node = raw
    for n, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            if value is DEFAULT:
                return  # nothing to remove
            child = node[part] = {}
        if not isinstance(child, dict):
            raise GossipflError(f"{where}: '{'.'.join(parts)}' goes through "
                                f"'{'.'.join(parts[:n + 1])}', which is not a section.")
        node = child
    leaf = parts[-1]
    if value is DEFAULT:
        node.pop(leaf, None)
        return
    if isinstance(value, dict) and not isinstance(value, Replace) \
            and isinstance(node.get(leaf), dict):
        for key in sorted(value, key=lambda k: k not in NAME_KEYS):  # a switch first
            layer(raw, [*parts, str(key)], value[key], replace, where)
        return
    if replace:
        replace_partner(node, parts, value)
    node[leaf] = plain(value)


def plain(value: Any) -> Any:
    """``value`` without layering markers: a Replace as a dict, DEFAULT keys left out."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if v is not DEFAULT}
    return value


def _partner(path: Sequence[str]) -> str | None:
    """The other key of ``path``'s :data:`~gossipfl.config.EXCLUSIVE` pair, if it is in one."""
    for section, *pair, _ in EXCLUSIVE:
        if len(path) == 2 and path[0] == section and path[1] in pair:
            return pair[1 - pair.index(path[1])]
    return None


def replace_partner(node: dict, path: Sequence[str], value: Any) -> None:
    """Before ``node[path[-1]] = value`` (``node`` the mapping at ``path[:-1]``): a set value
    of one key of an :data:`~gossipfl.config.EXCLUSIVE` pair removes the other key from
    ``node``; a switched piece (:data:`PIECES`: ``model.name``, ``topology.name``,
    ``topology.robust.rule``, ``topology.compression.compressor``, ``byzantine.attack``,
    ``algorithm.name``) drops the previous piece's parameters the new one does not take."""
    partner = _partner(path)
    if partner is not None and value is not None:
        node.pop(partner, None)
    if tuple(path) in (("model", "name"), ("data", "dataset")) \
            and value != node.get(path[-1]):
        _drop_foreign_options(node, path[0], value)
        return
    piece = PIECES.get(tuple(path[:-1]))
    if piece is not None and path[-1] == piece.name_key and isinstance(value, str) \
            and value != node.get(piece.name_key, piece.default):
        piece.drop_foreign(node, list(path[:-1]), value)


def _drop_foreign_options(node: dict, section: str, name: Any) -> None:
    """A later level switching ``model.name`` or ``data.dataset``: the earlier level's
    ``options`` that the new model or dataset does not take belonged to the old one; they
    are dropped, with a note."""
    from gossipfl.data.datasets import dataset_options
    from gossipfl.models import MODELS, model_options

    options = node.get("options")
    if section == "model":
        key, old = "name", f"model {node.get('name', 'cnn')}"
        allowed = model_options(name) if isinstance(name, str) and name in MODELS else None
    else:
        key, old = "dataset", f"dataset {node.get('dataset', 'fashion_mnist')}"
        allowed = dataset_options(name) if isinstance(name, str) else None
    if not isinstance(options, dict) or not options or allowed is None:
        return
    foreign = [option for option in options if option not in allowed]
    if foreign:
        node["options"] = {k: v for k, v in options.items() if k in allowed}
        _note_dropped([f"{section}.options.{option}" for option in foreign],
                      f"{section}.{key}", name, old)


def _note_dropped(keys: list[str], switch: str, name: str, old: str,
                  noun: str = "an option") -> None:
    warnings.warn(f"{', '.join(keys)}: dropped, because {switch} is now {name}, which does not "
                  f"take {'it' if len(keys) == 1 else 'them'} ({noun} of {old}).",
                  IgnoredSetting, stacklevel=1)


class Piece:
    """A piece chosen by name whose parameters sit beside the name in the same mapping."""

    def __init__(self, name_key: str, default: str | None, fixed: Sequence[str], kind: str,
                 params: Any):
        self.name_key, self.default, self.fixed = name_key, default, tuple(fixed)
        self.kind = kind  # "rule", "attack", ... (the note's words)
        self.params = params  # name -> the parameter names it takes (None: unknown name)

    def drop_foreign(self, node: dict, section: list[str], name: str) -> None:
        allowed = self.params(name)
        old = node.get(self.name_key, self.default)
        if allowed is None or old is None:
            return  # an unknown name (its check says so), or no previous piece
        foreign = [key for key in node if key != self.name_key and key not in self.fixed
                   and key not in allowed]
        if not foreign:
            return
        for key in foreign:
            del node[key]
        prefix = ".".join(section)
        _note_dropped([f"{prefix}.{key}" for key in foreign], f"{prefix}.{self.name_key}",
                      name, f"{self.kind} {old}", "a parameter")


def _topology_params(name: str) -> set[str] | None:
    from gossipfl.topology.graphs import topology_kind, topology_names

    return set(topology_kind(name).rules) if name in topology_names() else None


def _registry_params(module: str, registry: str) -> Any:
    def params(name: str) -> set[str] | None:
        import importlib

        table = getattr(importlib.import_module(module), registry)
        return set(table[name].Params.parameter_rules()) if name in table else None

    return params


def _algorithm_params(name: str) -> set[str] | None:
    import dataclasses

    from gossipfl.algorithms import available_algorithms

    algo = available_algorithms().get(name)
    return None if algo is None else {f.name for f in dataclasses.fields(algo.Params)}


#: The pieces a later level may switch by name, at the path of their mapping: switching one
#: drops the parameters of the previous one that the new one does not take, with a note.
PIECES: dict[tuple[str, ...], Piece] = {
    ("topology",): Piece("name", "ring", [f.name for f in TopologyConfig.__dataclass_fields__
                                         .values() if f.name not in SHARED_TOPOLOGY_PARAMS
                                         and f.name != "options"],
                         "topology", _topology_params),
    ("topology", "robust"): Piece("rule", "mean", [], "rule",
                                  _registry_params("gossipfl.trust.rules", "RULES")),
    ("topology", "compression"): Piece(
        "compressor", None, ["gamma", "error_feedback"], "compressor",
        _registry_params("gossipfl.compression.compressors", "COMPRESSORS")),
    ("byzantine",): Piece("attack", "sign_flip", ByzantineConfig.KEYS, "attack",
                          _registry_params("gossipfl.trust.attacks", "ATTACKS")),
    ("algorithm",): Piece("name", "dfedavg", [], "algorithm", _algorithm_params),
}
NAME_KEYS = {"name", "rule", "compressor", "attack"}


# --------------------------------------------------------------------------------------------
# Checking: every section against its pieces' registries
# --------------------------------------------------------------------------------------------
def check_config(config: Config) -> None:
    """Type the algorithm's hyperparameters (a mapping from the parse) through the algorithm
    registry, then check every section; one sentence on the first mistake. ``config`` is
    changed in place: its algorithm's and model's and dataset's options typed."""
    from gossipfl.assembly.compat import check_config as check_combination
    from gossipfl.data.datasets import check_dataset_options
    from gossipfl.models import check_options

    _type_algorithm_params(config.algorithm)
    if config.model.factory is None:
        config.model.options = check_options(config.model.name, config.model.options)
    if config.data.tensors is None:
        config.data.options = check_dataset_options(config.data.dataset, config.data.options)
    _check_data(config.data)
    _check_topology(config.topology)
    _check_train(config.train)
    _check_eval(config.eval)
    _check_engine(config.engine)
    _check_output(config.output)
    if config.systems is not None:
        _check_systems(config.systems)
    if config.byzantine is not None:
        _check_byzantine(config.byzantine, config.data.clients)
    if config.privacy is not None:
        _check_privacy(config.privacy)
    if config.algorithm.params is not None and hasattr(config.algorithm.params, "validate"):
        config.algorithm.params.validate()
    _warn_ignored(config)
    check_combination(config)  # what the config alone decides of which features combine
    if not isinstance(config.device, str) or not (
            config.device in ("cpu", "auto", "cuda") or (
                config.device.startswith("cuda:") and config.device[5:].isdigit())):
        raise GossipflError(f"device: must be cpu, cuda, cuda:N or auto, got {config.device!r}.")


def _type_algorithm_params(algorithm: AlgorithmConfig) -> None:
    """``algorithm.params`` as the algorithm's ``Params`` dataclass: the parse leaves the
    section's other keys as a mapping (the schema does not know the algorithms)."""
    from gossipfl.algorithms import get_algorithm

    algo_cls = get_algorithm(algorithm.name)
    if isinstance(algorithm.params, dict):
        algorithm.params = build_section(algo_cls.Params, algorithm.params, "algorithm.")


def _check_section(name: str, section: Any, rules: dict[str, Rule]) -> None:
    """Check the fields of a config section against its rules (in the rules' order)."""
    check_all(name, {key: getattr(section, key) for key in rules}, rules)


def _check_data(data: DataConfig) -> None:
    from gossipfl.data.partition import PARTITIONERS

    _check_section("data", data, {
        "clients": COUNT, "alpha": POSITIVE, "classes_per_client": COUNT,
        "min_size": NON_NEGATIVE, "partition": one_of(*PARTITIONERS, "natural"),
        "local_test_size": COUNT.or_none()})


def _check_topology(topology: TopologyConfig) -> None:
    """Every key, also where the algorithm ignores the graph (centralized)."""
    from gossipfl.compression.gossip import build_choco
    from gossipfl.schedules import get_schedule
    from gossipfl.topology.graphs import topology_kind, topology_names  # with plugins'
    from gossipfl.topology.mixer import SPARSE_MODES
    from gossipfl.topology.mixing import mixing_rule_names
    from gossipfl.topology.stages import asked_stages
    from gossipfl.trust.rules import build_rule

    get_schedule(topology.order)  # its registry's names
    _check_section("topology", topology, {
        "name": one_of(*topology_names()), "mixing": one_of(*mixing_rule_names()),
        "sparse": one_of(*SPARSE_MODES), **SHARED_TOPOLOGY_PARAMS})
    kind = topology_kind(topology.name)
    kind.check({**{key: getattr(topology, key) for key in kind.rules
                   if key in SHARED_TOPOLOGY_PARAMS}, **topology.options})
    build_choco(topology.compression)  # one sentence on a bad compressor or gamma
    build_rule(topology.robust)  # one sentence on a bad rule or parameter
    asked_stages(topology.stages)  # one sentence on a bad stage or parameter


def _check_train(train: TrainConfig) -> None:
    from gossipfl.engine.oracle import LOSSES

    _check_section("train", train, {
        "rounds": COUNT, "local_epochs": COUNT, "local_steps": COUNT.or_none(),
        "batch_size": Rule(lambda v: v == "full" or COUNT.holds(v),
                           "a positive integer or 'full'"),
        "lr": NON_NEGATIVE, "lr_decay": FRACTION, "weight_decay": NON_NEGATIVE,
        "momentum": UNIT_INTERVAL, "clip_norm": POSITIVE.or_none(),
        "loss": one_of(*LOSSES), "max_consensus": POSITIVE.or_none()})


def _check_eval(evaluation: EvalConfig) -> None:
    _check_section("eval", evaluation, {
        "personalized_point": one_of(*PERSONALIZED_POINTS), "every": COUNT,
        "batch_size": COUNT, "local_subset": COUNT.or_none(),
        "local_clients": COUNT.or_none(), "local_clients_seed": NON_NEGATIVE.or_none(),
        "generalization": COUNT.or_none()})
    from gossipfl.trust.membership import parse_membership

    parse_membership(evaluation.membership)


def _check_engine(engine: EngineConfig) -> None:
    from gossipfl.distributed.launch import BACKENDS
    from gossipfl.distributed.shm import EXCHANGES
    from gossipfl.engine.compiled import check_switch
    from gossipfl.engine.oracle import ORACLES
    from gossipfl.engine.precision import PRECISIONS

    _check_section("engine", engine, {
        "oracle": one_of(*ORACLES), "backend": one_of(*BACKENDS),
        "exchange": one_of(*EXCHANGES),
        "timeout": Rule(lambda v: v > 0, "> 0 seconds"), "chunk_size": COUNT.or_none(),
        "block_clients": COUNT.or_none(), "precision": one_of(*PRECISIONS)})
    check_switch("engine.compile", engine.compile)
    check_switch("engine.cuda_graphs", engine.cuda_graphs, "blocks")


def _check_output(output: OutputConfig) -> None:
    from gossipfl.output.trackers import check_wandb

    _check_section("output", output, {"checkpoint_every": NON_NEGATIVE})
    check_wandb(output.wandb)


def _check_systems(systems: SystemsConfig) -> None:
    from gossipfl.systems.model import check_systems

    _check_section("systems", systems, {"deadline": POSITIVE.or_none()})
    check_systems(systems)


def _check_byzantine(byzantine: ByzantineConfig, num_clients: int) -> None:
    from gossipfl.trust.attacks import check_attack
    from gossipfl.trust.byzantine import check_clients

    check_clients(byzantine.clients, num_clients)
    check_attack(byzantine.attack, byzantine.options)


def _check_privacy(privacy: PrivacyConfig) -> None:
    from gossipfl.trust.privacy import check_privacy

    check_privacy(privacy)


# --------------------------------------------------------------------------------------------
# Settings nobody reads
# --------------------------------------------------------------------------------------------
#: Topology keys a centralized algorithm ignores (it has no communication graph; the order
#: is not among them: a schedule decides who trains for every algorithm).
GRAPH_KEYS = ("name", "mixing", "k", "p", "s", "path", "sparse", "matrix")


def _warn_ignored(config: Config) -> None:
    """The one rule for settings nobody reads: each setting a config sets that the chosen
    components do not read (it is checked all the same) gets one warning naming it and the
    reason (:class:`~gossipfl.errors.IgnoredSetting`)."""
    for settings, reason in ignored_settings(config):  # from one place, so that the default
        # filter shows each message once however many times a config is loaded (a study)
        warnings.warn(f"{', '.join(settings)}: ignored, because {reason}.", IgnoredSetting,
                      stacklevel=1)


def ignored_settings(config: Config) -> list[tuple[list[str], str]]:
    """``(settings, reason)`` for every group of set keys no component of ``config`` reads."""
    from gossipfl.algorithms import get_algorithm
    from gossipfl.topology.graphs import topology_kind

    name = config.algorithm.name
    centralized = get_algorithm(name).centralized
    default, topology = TopologyConfig(), config.topology
    out: list[tuple[list[str], str]] = []

    def changed(keys: Sequence[str]) -> list[str]:
        return [f"topology.{key}" for key in keys
                if getattr(topology, key) is not getattr(default, key)
                and not _same(getattr(topology, key), getattr(default, key))]

    length = _fixed_length(get_algorithm(name), config.algorithm.params)
    train = [key for key, default in (("local_steps", None), ("local_epochs", 1))
             if getattr(config.train, key) != default]
    if length is not None and train:
        out.append(([f"train.{key}" for key in train],
                    f"{name} takes {length} a round, as its paper does"))
    systems = config.systems
    availability = (systems.availability if systems is not None else None) or {}
    links = availability.get("links") if isinstance(availability, dict) else None
    if centralized:
        graph = changed(GRAPH_KEYS) + [f"topology.{key}" for key in topology.options]
        if graph:
            reason = f"{name} is a centralized algorithm and has no communication graph"
            out.append((graph, reason))
        if isinstance(links, dict) and links.get("fail", 0):
            reason = (f"{name} is a centralized algorithm: its clients talk only to the "
                      f"server, so there are no links between clients to fail")
            out.append((["systems.availability.links.fail"], reason))
        return out
    kind = topology_kind(topology.name)
    reads = kind.rules  # the parameters its registration declares
    params = changed([key for key in SHARED_TOPOLOGY_PARAMS if key not in reads])
    if params:
        reason = (f"topology.name is {topology.name}, which does not read "
                  f"{'it' if len(params) == 1 else 'them'}")
        out.append((params, reason))
    if kind.weights is not None and changed(["mixing"]):
        reason = f"topology.name is {topology.name}, whose weights are {kind.weights}"
        out.append((["topology.mixing"], reason))
    if systems is not None and systems.deadline is not None:
        reason = (f"{name} is a decentralized algorithm: the deadline is how long a server "
                  f"waits for its sampled clients, and there is no server")
        out.append((["systems.deadline"], reason))
    return out


def _fixed_length(algo_cls: Any, params: Any) -> str | None:
    """"1 local step" where every phase of the algorithm's round sets its own length, so that
    ``train.local_steps`` and ``train.local_epochs`` are not read (None: they are, or its
    phases need a built algorithm to say)."""
    probe = object.__new__(algo_cls)  # phases() reads the hyperparameters only
    probe.params = params if params is not None else algo_cls.Params()
    try:
        phases = probe.phases()
    except Exception:  # noqa: BLE001 - phases that read the built algorithm: not known here
        return None
    if not phases or any(p.steps is None and p.epochs is None for p in phases):
        return None
    steps = sum(p.steps or 0 for p in phases)
    epochs = sum(p.epochs or 0 for p in phases)
    words = [f"{n} local {unit}{'s' * (n != 1)}" for n, unit in ((steps, "step"),
                                                                   (epochs, "epoch")) if n]
    return " and ".join(words)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an API matrix (array): not the default None
        return False


