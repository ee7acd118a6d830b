"""The experiment configuration's schema: one dataclass per section, YAML in and out, the
typed parse.

A config is a nested mapping with the sections ``data``, ``model``, ``topology``,
``algorithm``, ``train``, ``eval``, ``engine``, the optional ``systems``, ``byzantine`` and
``privacy``, and the scalars ``seed``, ``device``, ``name``. :func:`parse_config` types a raw
mapping (an unknown key or a value of the wrong type is one
:class:`~gossipfl.errors.GossipflError` sentence naming the dotted key and the value).

This module imports no component: every component may read its section's type from here.
:func:`gossipfl.assembly.loading.load_config`, above the components, layers the levels (a file,
``--set``) and checks each section against the registries of its pieces.

Values that only the Python API can carry (tensors, an ``nn.Module`` factory, a mixing
matrix, initial parameters) are accepted where documented and left out of YAML dumps.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gossipfl import plugins
from gossipfl.common.sections import SHARED_TOPOLOGY_DEFAULTS, SHARED_TOPOLOGY_PARAMS
from gossipfl.errors import GossipflError, did_you_mean
from gossipfl.io import read_text
from gossipfl.validation import NON_NEGATIVE, POSITIVE, Rule, check_finite, coerce


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------
@dataclass
class DataConfig:
    """Dataset, partition and where the files are."""

    dataset: str = "fashion_mnist"
    root: str | None = None  # set: the only folder looked in (never replaced by another)
    download: bool = True
    verify: bool = True  # false: accept files whose SHA-256 is not the official files'
    clients: int = 100
    partition: str = "dirichlet"
    alpha: float = 0.3
    balanced: bool = True
    min_size: int = 10
    classes_per_client: int = 2
    augment: bool | None = None  # None: the dataset's default (on for CIFAR)
    local_test_size: int | None = None  # label-matched local test split size per client
    options: dict = field(default_factory=dict)  # dataset options (synthetic: dim, ...)
    # API only: a gossipfl.data.Dataset, or per-client data
    # {"train": [(x_i, y_i), ...], "test": (x, y), "num_classes": C}
    tensors: Any = None



@dataclass
class ModelConfig:
    """Model architecture by name (or, from the API, a factory returning an nn.Module)."""

    name: str = "cnn"
    options: dict = field(default_factory=dict)  # e.g. {"hidden": [200, 200]}, {"groups": 2}
    personal: list | None = None  # personal parameters by name pattern; None: the head
    factory: Any = None  # API only: callable(input_shape, num_classes) -> nn.Module



@dataclass
class TopologyConfig:
    """Communication graph and mixing rule (ignored by centralized algorithms).

    ``k``, ``p``, ``s``, ``path`` (and the API's ``matrix``) are the shared parameters
    (:data:`SHARED_TOPOLOGY_PARAMS`); a topology's own parameters (a plugin's ``hops``) sit
    beside the keys in a config, and here in ``options``. Which of them a topology reads, and
    what each must be, its registration says (``gossipfl.topology.topology_kind``)."""

    name: str = "ring"
    mixing: str = "metropolis_hastings"
    k: int = SHARED_TOPOLOGY_DEFAULTS["k"]  # random_k, k_regular, authors_random, base_k
    p: float = SHARED_TOPOLOGY_DEFAULTS["p"]  # erdos_renyi
    s: int = SHARED_TOPOLOGY_DEFAULTS["s"]  # epidemic: peers each client sends to per round
    path: str | None = SHARED_TOPOLOGY_DEFAULTS["path"]  # custom graph or matrix file
    sparse: str = "auto"  # dense | sparse | auto
    matrix: Any = None  # API only: explicit mixing matrix [M, M]
    # synchronous: every client mixes the same snapshot (the papers' algorithm boxes);
    # sequential: clients in index order, each row replaced in place (the authors' code)
    order: str = "synchronous"
    # CHOCO-Gossip for every gossip: {compressor: top_k, fraction: 0.01, gamma: 0.2}
    # (gossipfl.compression); None: exact gossip
    compression: Any = None
    # a robust aggregation rule for every gossip: {rule: trimmed_mean, b: 1} (gossipfl.trust);
    # None: plain W X
    robust: Any = None
    # gossip stages of one's own, outermost first (plugins: gossipfl.topology.register_stage):
    # [{stage: name, <its parameters>}]; None: none
    stages: Any = None
    # the topology's own parameters, beside the keys in a config ({name: x, hops: 2})
    options: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Any, prefix: str = "topology.") -> TopologyConfig:
        """The section from its flat mapping: the keys above are typed as fields, every other
        key is one of the topology's own parameters (checked against the topology's
        registration by :mod:`gossipfl.assembly.loading`)."""
        section = prefix.rstrip(".")
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise GossipflError(f"{section}: must be a mapping, got {raw!r}.")
        keys = [f.name for f in dataclasses.fields(cls) if f.name != "options"]
        options = {k: v for k, v in raw.items() if k not in keys}
        for key, value in options.items():
            check_finite(f"{prefix}{key}", value)
        topology = build_section(cls, {k: v for k, v in raw.items() if k in keys}, prefix)
        topology.options = options
        return topology

    def parameters(self) -> dict[str, Any]:
        """The parameters given to ``build_topology``: the shared ones, then the topology's
        own (``build_topology`` keeps those the topology reads)."""
        return {**{key: getattr(self, key) for key in SHARED_TOPOLOGY_PARAMS}, **self.options}



@dataclass
class TrainConfig:
    """Rounds, local work and the local optimizer shared by all algorithms."""

    rounds: int = 100
    local_epochs: int = 1  # passes over the client's data per round
    local_steps: int | None = None  # K local steps instead (a config sets only one: EXCLUSIVE)
    batch_size: int | str = 32  # or "full" for full-batch local gradients
    lr: float = 0.1
    lr_decay: float = 1.0  # lr_t = lr * lr_decay ** t (decayed per round)
    weight_decay: float = 0.0
    momentum: float = 0.0  # local heavy-ball momentum, reset every round
    clip_norm: float | None = None  # per-client gradient-norm clipping (before weight decay)
    loss: str = "cross_entropy"
    # a run whose consensus distance (1/M) Σ‖x_i − x̄‖² passes this bound stops as diverged
    max_consensus: float | None = 1.0e6

    @property
    def full_batch(self) -> bool:
        return self.batch_size == "full"


#: eval.personalized_point: the models right after gossip, or right after training.
PERSONALIZED_POINTS = ("after_gossip", "before_gossip")


@dataclass
class EvalConfig:
    """Which evaluation protocols run, and how often (docs/design.md, "Evaluation")."""

    every: int = 1  # evaluate every N rounds, and always at the last round
    batch_size: int = 1000
    average_model: bool = True
    local_models: bool = True  # mean/std of each local model on (a subset of) the test set
    local_subset: int | None = 2000  # test samples used for local models; None = all
    # clients whose local models are evaluated: None = all of them up to LOCAL_CLIENTS_AUTO
    # clients and a sample of that many above (the run summary says so); N = a sample of N
    local_clients: int | None = None
    local_clients_seed: int | None = None  # the sample's seed (None: the run's seed)
    personalized: bool = False  # each client on its label-matched local test split
    # (always on for algorithms declaring "personalized")
    personalized_point: str = "after_gossip"  # or before_gossip: models right after training
    # N: the average model also on a fixed random subset of N training samples, logging the
    # generalization gap, train minus test (train_acc, train_eval_loss, gap_acc, gap_loss)
    generalization: int | None = None
    # N: the loss-threshold membership-inference AUC of the local models (mia_auc), N of each
    # client's training samples against N held-out test samples; or {holdout, samples,
    # shadows, variance}: each client's own held-out samples, and LiRA (gossipfl.trust.membership)
    membership: int | dict | None = None



@dataclass
class EngineConfig:
    """How the simulation is computed (never what it computes)."""

    oracle: str = "auto"  # auto | stacked | vmap | loop
    chunk_size: int | None = None  # clients per block (None: chosen from memory)
    # block-major local training: this many clients run all their local steps before the
    # next block starts (None: step-major, every client's step t before anyone's step t + 1);
    # the same numbers either way to float rounding, ~1e-7, not bit for bit (the batched
    # products run over fewer rows); docs/benchmarks.md measures which is faster where
    block_clients: int | None = None
    # CUDA arithmetic: fp32 (TF32 off, the tests' numbers), tf32 or bf16 (autocast local steps);
    # see gossipfl.engine.precision
    precision: str = "fp32"
    # the stacked oracle's GPU paths (gossipfl.engine.compiled), each true, false or auto:
    # the local step's forward and backward compiled by torch.compile (the numbers to float
    # rounding, not bit for bit; auto: on for CUDA and a GroupNorm model, the ResNet-18-GN
    # measured 1.5-2x faster on an H200), and a whole local phase (or, where it cannot be,
    # each block's step; "blocks": the blocks alone) replayed from a CUDA graph (the same
    # kernels: the same bits for matmuls, cuDNN rounding for convolutions; auto: on for CUDA)
    compile: bool | str = "auto"
    cuda_graphs: bool | str = "auto"
    # on CPU: glibc reuses freed pages (10-30 % faster rounds), while one [M, P] stack is at
    # most 256 MiB (above, the heap fragments and the peak outgrows the memory plan)
    keep_freed_memory: bool = True
    # gossipfl.distributed: one process (single), torch.distributed ranks each owning a block
    # of clients (distributed), or distributed exactly when launched by torchrun (auto)
    backend: str = "auto"  # auto | single | distributed
    timeout: float = 300.0  # seconds a rank waits for the others before the job ends
    # how the ranks move gossip rows: through shared memory when every rank runs on this
    # machine's CPU (auto; shm: that or refuse), or the process group's point-to-point
    # messages (process_group; gloo's TCP on CPU, NCCL on CUDA); the same rows either way
    exchange: str = "auto"  # auto | shm | process_group



@dataclass
class OutputConfig:
    """Where the CLI writes run directories, and how often it checkpoints."""

    dir: str = "runs"
    checkpoint_every: int = 10  # rounds between checkpoints (0 = only at the end)
    tensorboard: bool = False  # also log to TensorBoard when the package is installed
    # also log to Weights & Biases (gossipfl[wandb]): true, or {project, entity, mode, tags,
    # name}; offline (files under the run directory) unless mode or $WANDB_API_KEY says online
    wandb: bool | dict = False



@dataclass
class SystemsConfig:
    """The systems model (:mod:`gossipfl.systems`): per-client compute speeds, network
    latency and bandwidth, availability and link failures, a server's deadline. Absent
    (``systems: null``, the default): no clock, no failures, every number as without it.

    ``compute``: ``{seconds_per_step: c}``; ``{distribution: lognormal, mean: c, sigma: s,
    vary: false}``; ``{stragglers: f, slowdown: s, seconds_per_step: c}``; ``{path: f.csv}``.
    ``network``: ``{latency: ..., bandwidth: ...}``, each a number or a lognormal mapping.
    ``availability``: ``{offline: p}`` or ``{markov: {p_off: a, p_on: b}}``, and
    ``links: {fail: q}``. ``deadline``: seconds a server waits for its sampled clients."""

    compute: dict | None = None
    network: dict | None = None
    availability: dict | None = None
    deadline: float | None = None



@dataclass
class ByzantineConfig:
    """Byzantine clients and their attack (:mod:`gossipfl.trust`). In a config the attack's
    parameters sit beside the other keys: ``{clients: 0.1, attack: alie, z: 1.0}``; here
    they are ``options``. Absent (the default): every client honest."""

    clients: Any = 0.1  # a fraction in [0, 1) of data.clients, or a list of client ids
    attack: str | None = None  # required (gossipfl list names them; none: a baseline)
    seed: int | None = None  # draws the fraction's clients and the attack's noise; None: seed
    options: dict = field(default_factory=dict)  # the attack's parameters

    KEYS = ("clients", "attack", "seed")

    @classmethod
    def parse(cls, raw: Any) -> ByzantineConfig | None:
        """The section from its flat mapping (the attack's parameters beside the keys)."""
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise GossipflError(f"byzantine: must be a mapping such as {{clients: 0.1, "
                                f"attack: sign_flip}}, got {raw!r}.")
        given = {k: v for k, v in raw.items() if k in cls.KEYS}
        if isinstance(raw.get("options"), dict):  # a section dumped by to_dict(api_values)
            given["options"] = raw["options"]
        section = build_section(cls, given, "byzantine.")
        section.options = {**section.options,
                           **{k: v for k, v in raw.items() if k not in (*cls.KEYS, "options")}}
        return section

    def flat(self) -> dict:
        return {"clients": self.clients, "attack": self.attack, "seed": self.seed,
                **self.options}


@dataclass
class PrivacyConfig:
    """DP-SGD on every client (:mod:`gossipfl.trust.dpsgd`) and its accountant
    (:mod:`gossipfl.trust.accountant`). Absent (the default): no clipping, no noise, every
    number as without it. ``clip`` C > 0 (finite): each per-sample gradient's L2 bound;
    ``noise_multiplier`` σ ≥ 0: the Gaussian noise's standard deviation is σ C; ``delta`` δ:
    the ε(δ) reported, in (0, 1/n) with n the smallest client's sample count."""

    clip: float = 1.0
    noise_multiplier: float = 1.0
    delta: float = 1.0e-5
    #: what each must be (its values' rules, declared with the fields; checked by
    #: gossipfl.trust.privacy.check_privacy when a config is read)
    rules: typing.ClassVar = {"clip": POSITIVE, "noise_multiplier": NON_NEGATIVE,
                              "delta": Rule(lambda v: 0 < v < 1, "in (0, 1)")}



@dataclass
class AlgorithmConfig:
    """Algorithm name plus its own hyperparameters: after :func:`parse_config` a mapping, after
    :func:`gossipfl.assembly.loading.load_config` the algorithm's ``Params`` dataclass (typed and
    checked through the algorithm registry)."""

    name: str = "dfedavg"
    params: Any = None  # the algorithm's Params instance (a mapping before it is checked)


@dataclass
class Config:
    """A whole experiment."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    systems: SystemsConfig | None = None  # gossipfl.systems; None: no clock, no failures
    byzantine: ByzantineConfig | None = None  # gossipfl.trust; None: every client honest
    privacy: PrivacyConfig | None = None  # gossipfl.trust (DP-SGD); None: not private
    seed: int = 0
    device: str = "cpu"  # cpu | cuda | cuda:N | auto
    name: str | None = None  # run name (run directory prefix)
    plugins: list = field(default_factory=list)  # the researcher's own modules (plugins.py)
    init_params: Any = None  # API only: tensor [P] or [M, P]

    def to_dict(self, *, api_values: bool = False) -> dict:
        """Plain nested dict (YAML-safe unless ``api_values``)."""
        out = _dataclass_to_dict(self, api_values)
        out["topology"].update(out["topology"].pop("options"))  # beside the keys, as given
        if self.topology.stages is None:
            del out["topology"]["stages"]  # absent, as before the key existed
        if self.systems is None:
            del out["systems"]  # absent, as before the section existed
        if self.privacy is None:
            del out["privacy"]
        if self.byzantine is None:
            del out["byzantine"]
        else:
            out["byzantine"] = self.byzantine.flat()
        params = self.algorithm.params
        if dataclasses.is_dataclass(params):
            params = dataclasses.asdict(params)
        out["algorithm"] = {"name": self.algorithm.name, **(params or {})}
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


#: Top-level keys of a config that are not sections.
SCALAR_KEYS = ("seed", "device", "name", "plugins")

API_ONLY = {("data", "tensors"), ("model", "factory"), ("topology", "matrix"),
            ("init_params",)}

#: Keys that say one thing two ways, (section, first, second, first's default): a config sets
#: at most one key of each pair. A setting from a later level (--set over the file or the
#: quickstart, a study's grid over its base) replaces the other key of its pair from the
#: earlier level. Within one level both set is an error, except (in a file or dict) the first
#: at its default, which is how a resolved config (a run directory's config.yaml) reads.
EXCLUSIVE = (("train", "local_epochs", "local_steps", 1),
             ("algorithm", "head_epochs", "head_steps", 1))  # dfedmdc, dfedsmdc


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------
def as_list(value: Any, key: str, what: str) -> list:
    """``value`` as a list: a lone string (or number) is a list of one; anything that is not
    a list, tuple or other sequence of values is one sentence naming ``key``."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, int, float)):
        return [value]
    if isinstance(value, dict) or not isinstance(value, (list, tuple, Sequence)):
        raise GossipflError(f"{key}: must be a list of {what}, got {value!r}.")
    return list(value)


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, line: int):
        super().__init__(f"duplicate key {key!r}")
        self.key, self.line = key, line


class YamlLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys and reads ``1e0``/``5e-4`` as numbers (YAML 1.1
    wants a dot), so a number means the same in a file and in ``--set``."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                continue
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class Replace(dict):
    """A mapping that replaces the earlier level's whole mapping instead of merging into it
    (YAML ``!replace {...}``; see docs/guide/configuration.md, "Layering")."""


class _Default:
    """The marker that removes a key, so that its default applies (YAML ``!default``)."""

    def __repr__(self) -> str:
        return "DEFAULT"


#: Layered over a key, removes it (its default applies): ``--set train.local_steps=!default``.
DEFAULT = _Default()


def _replace(loader: yaml.SafeLoader, node: yaml.Node) -> Replace:
    if not isinstance(node, yaml.MappingNode):
        raise yaml.constructor.ConstructorError(None, None, "!replace goes before a mapping",
                                                node.start_mark)
    return Replace(loader.construct_mapping(node, deep=True))


YamlLoader.add_constructor("!replace", _replace)
YamlLoader.add_constructor("!default", lambda loader, node: DEFAULT)
yaml.SafeDumper.add_representer(  # a study file written back keeps its markers
    Replace, lambda dumper, value: dumper.represent_mapping("!replace", dict(value)))
yaml.SafeDumper.add_representer(
    _Default, lambda dumper, value: dumper.represent_scalar("!default", ""))

YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."))


def parse_yaml(text: str) -> Any:
    """Parse YAML text with :class:`YamlLoader`."""
    return yaml.load(text, Loader=YamlLoader)  # a SafeLoader subclass


def read_yaml(path: Path) -> dict:
    """Read a YAML mapping, with one clear sentence for a missing or malformed file."""
    text = read_text(path)
    try:
        raw = parse_yaml(text)
    except _DuplicateKey as exc:
        raise GossipflError(f"config: '{path}' sets the key '{exc.key}' twice "
                            f"(again at line {exc.line}).") from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" at line {line + 1}" if line is not None else ""
        raise GossipflError(f"config: '{path}' is not valid YAML{where}.") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise GossipflError(f"config: '{path}' must hold a mapping of sections, not a "
                            f"{type(raw).__name__}.")
    return raw


def check_exclusive(raw: dict, where: str = "", typed: bool = False) -> None:
    """One sentence when one level of a raw config sets both keys of an :data:`EXCLUSIVE`
    pair (``typed``: the user typed the level, so the first at its default counts too)."""
    for section, first, second, default in EXCLUSIVE:
        node = raw.get(section)
        if not isinstance(node, dict):
            continue
        a, b = node.get(first), node.get(second)
        if a is not None and b is not None and (typed or a != default):
            raise GossipflError(
                f"{section}.{first}: {a} and {section}.{second}: {b} are both set{where}; "
                f"set only one of them.")


def parse_config(raw: dict) -> Config:
    """The typed sections of a raw config (one sentence for an unknown key or a value of the
    wrong type), with the plugins it names loaded. The algorithm's hyperparameters stay a
    mapping: the algorithm registry types them (:func:`gossipfl.assembly.loading.check_config`)."""
    raw = dict(raw)
    raw["plugins"] = plugins.resolve([*plugins.resolve(raw.get("plugins")),
                                      *plugins.session_plugins()])
    plugins.load(raw["plugins"])
    algo_raw = raw.pop("algorithm", {}) or {}
    if isinstance(algo_raw, str):
        algo_raw = {"name": algo_raw}
    if not isinstance(algo_raw, dict):
        raise GossipflError(f"algorithm: must be a mapping or a name, got {algo_raw!r}.")
    byzantine = ByzantineConfig.parse(raw.pop("byzantine", None))
    config = build_section(Config, raw, "")
    config.byzantine = byzantine
    algo_raw = dict(algo_raw)
    name = str(algo_raw.pop("name", "dfedavg"))
    config.algorithm = AlgorithmConfig(name=name, params=algo_raw)
    return config


def build_section(cls: type, raw: Any, prefix: str) -> Any:
    """Instantiate dataclass ``cls`` from ``raw`` with type checks and did-you-mean (a key
    ``prefix`` + key names each value in a sentence)."""
    section = prefix.rstrip(".") or "config"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise GossipflError(f"{section}: must be a mapping, got {raw!r}.")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    names = [n for n in fields if n not in ("algorithm",) or cls is not Config]
    kwargs = {}
    for key, value in raw.items():
        if key not in fields or (cls is Config and key == "algorithm"):
            raise _unknown_key(cls, prefix, key, names)
        hint = _optional_dataclass(hints[key])
        if value is None and hint is not hints[key]:
            kwargs[key] = None  # an optional section left out (systems: null)
        elif hint is TopologyConfig:  # the topology's own parameters beside its keys
            kwargs[key] = TopologyConfig.parse(value, f"{prefix}{key}.")
        elif dataclasses.is_dataclass(hint):
            kwargs[key] = build_section(hint, value, f"{prefix}{key}.")
        else:
            kwargs[key] = coerce(f"{prefix}{key}", value, hints[key])
    return cls(**kwargs)


def _optional_dataclass(hint: Any) -> Any:
    """``hint``, or the dataclass ``D`` of an optional section ``D | None``."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1 and dataclasses.is_dataclass(args[0]):
        return args[0]
    return hint


def _unknown_key(cls: type, prefix: str, key: Any, names: list[str]) -> GossipflError:
    hint = did_you_mean(str(key), names)
    if cls is not Config:
        section = prefix.rstrip(".")
        shown = [n for n in names if (section, n) not in API_ONLY]
        return GossipflError(f"{prefix}{key}: unknown key{hint}; the keys of {section} are "
                             f"{', '.join(shown)}.")
    sections = [f.name for f in dataclasses.fields(Config)
                if f.name not in SCALAR_KEYS and f.name != "init_params"]
    return GossipflError(f"{key}: unknown top-level key{hint}; the sections are "
                         f"{', '.join(sections)}, and the other keys "
                         f"{', '.join(SCALAR_KEYS)}.")


def _dataclass_to_dict(obj: Any, api_values: bool, path: tuple = ()) -> dict:
    out = {}
    for f in dataclasses.fields(obj):
        key = path + (f.name,)
        if key in API_ONLY and not api_values:
            continue
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            value = _dataclass_to_dict(value, api_values, key)
        out[f.name] = value
    return out


def deep_copy_dicts(raw: dict) -> dict:
    return {k: deep_copy_dicts(v) if isinstance(v, dict) else v for k, v in raw.items()}
