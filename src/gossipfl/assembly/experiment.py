"""Building an experiment from a config: the data and its partition, the model and its
parameter layout, the oracle, the topology, what the clients have (:class:`ClientEnv`), what
crosses them (:class:`Federation`), the algorithm, and the run's state (:class:`RunState`,
made first, each stateful component handed its namespace). Data flows one way
(docs/design.md): config → data + partition → model + parameter stack → algorithm."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import torch

from gossipfl.algorithms import Algorithm, get_algorithm
from gossipfl.assembly.compat import check, features, mixing_check, model_refusal
from gossipfl.common.rng import derive_seed, numpy_generator
from gossipfl.common.state import RunState
from gossipfl.compression.gossip import Channels, build_choco
from gossipfl.config import Config
from gossipfl.data import (
    ClientSampler,
    Dataset,
    build_partitioner,
    from_tensors,
    load_dataset,
    local_test_split,
    natural_split,
    partitioner_params,
    summarize_partition,
)
from gossipfl.distributed import start_processes
from gossipfl.distributed.federation import federation_of
from gossipfl.engine import ParamLayout, keep_freed_memory, make_oracle
from gossipfl.engine.compiled import resolve_compile, resolve_graphs
from gossipfl.engine.groups import ParamGroups
from gossipfl.engine.memory import require_memory
from gossipfl.engine.oracle import check_loss_fits
from gossipfl.errors import GossipflError
from gossipfl.models import build_model, check_model_fits, head_names
from gossipfl.network.clients import ClientEnv, LocalTraining
from gossipfl.network.federation import Federation
from gossipfl.schedules import get_schedule
from gossipfl.systems import Systems, build_systems, mixing_topology, systems_model
from gossipfl.topology import Mixer, Topology, build_topology
from gossipfl.topology.stages import asked_stages
from gossipfl.trust.attacks import ATTACKS
from gossipfl.trust.byzantine import flip_labels
from gossipfl.trust.gossip import build_trust, byzantine_of
from gossipfl.trust.membership import Membership, holdout_split, parse_membership
from gossipfl.trust.privacy import Privacy, build_privacy


class StabilityWarning(UserWarning):
    """The chosen extrapolation coefficient diverges on the chosen topology."""


@dataclass
class Experiment:
    """Everything a run needs, built once from a config."""

    config: Config
    device: torch.device
    dataset: Dataset
    parts: list[np.ndarray]
    sampler: ClientSampler
    model: torch.nn.Module
    layout: ParamLayout
    oracle: Any
    topology: Topology | None
    env: ClientEnv
    fed: Federation
    algorithm: Algorithm
    x0: torch.Tensor
    eval_subset: torch.Tensor | None = None
    eval_clients: torch.Tensor | None = None  # the clients whose local models are evaluated
    local_test_parts: list[np.ndarray] | None = None
    systems: Systems | None = None  # gossipfl.systems: clocks and failures (systems section)
    honest: np.ndarray | None = None  # [M] bool with a byzantine section (gossipfl.trust)
    # eval.membership: (members [M, N], mask, non-members), or the holdout form's Candidates
    members: Any = None
    privacy: Privacy | None = None  # DP-SGD and its accountant (privacy section)
    info: dict = field(default_factory=dict)
    #: the run's state, one namespace per owner (gossipfl.common.state); the runner holds it
    state: RunState = field(default_factory=RunState)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise GossipflError(f"device: '{name}' was asked for but no CUDA device is available.")
    return torch.device(name)


def build_data(config: Config) -> tuple[Dataset, list[np.ndarray]]:
    """The dataset and each client's train indices."""
    data = config.data
    given = data.tensors
    if isinstance(given, dict) and "train" in given:
        return _per_client_tensors(given, config)
    if isinstance(given, Dataset):
        dataset = given
    elif given is not None:
        raise GossipflError("data.tensors: expected a gossipfl Dataset or a dict with 'train' "
                            "(a list of per-client (x, y)) and 'test' (x, y).")
    else:
        if data.dataset == "synthetic":
            check_synthetic_size(data.options)
        dataset = load_dataset(data.dataset, root=data.root, download=data.download,
                               verify=data.verify, **data.options)
    if data.clients > len(dataset.train_y):
        sizes = (" (data.options.train_size sets it)" if data.dataset == "synthetic"
                 else "")
        raise GossipflError(f"data.clients: {data.clients} clients but the dataset has only "
                            f"{len(dataset.train_y)} training samples{sizes}; each client "
                            f"needs at least one.")
    if data.partition == "natural":
        return dataset, natural_split(dataset.train_users, len(dataset.users), data.clients,
                                      dataset.name)
    params = partitioner_params(data.partition, vars(data))
    partitioner = build_partitioner(data.partition, **params)
    labels = dataset.train_y.cpu().numpy()
    parts = partitioner.split(labels, data.clients, numpy_generator(config.seed, "partition"))
    return dataset, parts


def _per_client_tensors(given: dict, config: Config) -> tuple[Dataset, list[np.ndarray]]:
    train = given["train"]
    if not train:
        raise GossipflError("data.tensors: 'train' holds no clients.")
    if len(train) != config.data.clients:
        raise GossipflError(f"data.clients: {config.data.clients} but data.tensors holds "
                            f"{len(train)} clients.")
    xs = [torch.as_tensor(x) for x, _ in train]
    ys = [torch.as_tensor(y) for _, y in train]
    test_x, test_y = given.get("test", (xs[0][:0], ys[0][:0]))
    dataset = from_tensors(torch.cat(xs), torch.cat(ys), torch.as_tensor(test_x),
                           torch.as_tensor(test_y), num_classes=given.get("num_classes"))
    bounds = np.cumsum([0] + [len(y) for y in ys])
    parts = [np.arange(a, b) for a, b in pairwise(bounds)]
    return dataset, parts


# --------------------------------------------------------------------------------------------
# Sizes, estimated before anything of that size is allocated
# --------------------------------------------------------------------------------------------
def check_synthetic_size(options: dict) -> None:
    """The synthetic data's float64 draw and float32 copy must fit: ``8 (C + n) d + 4 n d``
    bytes for n samples of d features and C class means."""
    import inspect

    from gossipfl.data.datasets import make_synthetic

    args = {name: p.default for name, p in inspect.signature(make_synthetic).parameters.items()}
    args.update(options)
    n, dim, classes = args["train_size"] + args["test_size"], args["dim"], args["num_classes"]
    largest = max(("dim", dim), ("num_classes", classes), ("train_size", args["train_size"]),
                  ("test_size", args["test_size"]), key=lambda item: item[1])
    require_memory((8 * (classes + n) + 4 * n) * dim,
                   f"synthetic data of {n} samples × {dim} features ({classes} classes)",
                   f"data.options.{largest[0]}")


def count_parameters(config: Config, dataset: Dataset) -> int | None:
    """P of the config's model, from a build on the meta device (no memory behind the
    tensors); None where the model cannot be built there."""
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"):
            model = _build_model(config, dataset)
        return sum(p.numel() for p in model.parameters())
    except Exception:  # noqa: BLE001 - a model that needs real tensors: built for real, checked
        return None


def check_model_size(config: Config, dataset: Dataset, device: torch.device) -> None:
    """Refuse a model whose parameters cannot fit: once for the model and its flat copy (key
    model.options, or model.name), then the [M, P] stacks of every client (key data.clients)."""
    P = count_parameters(config, dataset)
    if P is None:
        return
    model = config.model
    key = "model.factory" if model.factory is not None else (
        "model.options" if model.options else "model.name")
    shown = ", ".join(f"{k}={v}" for k, v in model.options.items())
    what = f"model '{model.name}'" + (f" ({shown})" if shown else "")
    require_memory(2 * 4 * P, f"{what} with P = {P} parameters", key)
    m = config.data.clients
    require_memory(2 * 4 * m * P, f"holding the [M, P] = [{m}, {P}] parameter stacks "
                   f"(X and X^0)", "data.clients", device)


def check_batch_size(config: Config, parts: list[np.ndarray], sample_numel: int,
                     device: torch.device) -> None:
    """A round's minibatch index streams (int64, several copies while they are shuffled)
    and one client's batch of inputs must fit."""
    train = config.train
    if train.full_batch or not parts:
        return
    batch, m = train.batch_size, len(parts)
    largest = max(len(p) for p in parts)
    per_epoch = max(-(-largest // batch), 1)
    steps = train.local_steps or per_epoch
    key = "train.local_steps" if train.local_steps and batch <= largest else "train.batch_size"
    length = steps * batch
    require_memory(3 * 8 * m * length + 4 * batch * sample_numel,
                   f"drawing {steps} minibatch(es) of {batch} samples for each of {m} clients",
                   key, device)


def check_local_test_size(config: Config, dataset: Dataset, m: int) -> None:
    """Each client's label-matched test split (``data.local_test_size``) draws from the test
    set: at most its size, and the splits (int64: the splits and their padded [M, size] copy,
    one client's draw being sorted) must fit."""
    size, n_test = config.data.local_test_size, len(dataset.test_y)
    if size is None or not n_test:
        return
    declared = "personalized" in get_algorithm(config.algorithm.name).evaluations
    if not (config.eval.personalized or declared) or dataset.train_y.is_floating_point():
        return
    if size > n_test:
        raise GossipflError(f"data.local_test_size: {size} samples per client, but the test "
                            f"set has only {n_test}; a client's split is drawn from it, so at "
                            f"most {n_test}.")
    require_memory(8 * (2 * m + 4) * size, f"local test splits of {size} samples for "
                   f"each of {m} clients", "data.local_test_size")


def _build_model(config: Config, dataset: Dataset) -> torch.nn.Module:
    out_dim = dataset.num_classes or 1  # regression targets (num_classes 0): one output
    if config.model.factory is not None:
        model = config.model.factory(dataset.input_shape, out_dim)
        if not isinstance(model, torch.nn.Module):
            raise GossipflError("model.factory: must return a torch.nn.Module.")
        return model
    return build_model(config.model.name, dataset.input_shape, out_dim, **config.model.options)


def build_model_for(config: Config, dataset: Dataset) -> torch.nn.Module:
    """The model, initialized from the seed without touching the global RNG."""
    out_dim = dataset.num_classes or 1  # regression targets (num_classes 0): one output
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(config.seed, "init"))
        if config.model.factory is not None:
            model = config.model.factory(dataset.input_shape, out_dim)
            if not isinstance(model, torch.nn.Module):
                raise GossipflError("model.factory: must return a torch.nn.Module.")
        else:
            model = build_model(config.model.name, dataset.input_shape, out_dim,
                                **config.model.options)
    return model


def initial_stack(config: Config, layout: ParamLayout, model: torch.nn.Module,
                  device: torch.device) -> torch.Tensor:
    """X^0 ``[M, P]``: the same initialization on every client, or the user's parameters
    (a view: take the rows a process holds, then copy)."""
    m = config.data.clients
    given = config.init_params
    if given is None:
        return layout.flatten(model).detach().to(device).expand(m, -1)
    x0 = torch.as_tensor(given, dtype=torch.float32, device=device)
    if x0.shape == (layout.P,):
        return x0.expand(m, -1)
    if x0.shape == (m, layout.P):
        return x0
    raise GossipflError(f"init_params: expected shape [{layout.P}] or [{m}, {layout.P}], "
                        f"got {list(x0.shape)}.")


#: A change of the training data before anything is derived from it: ``(dataset, parts) ->
#: dataset`` with the same sample count (gossipfl.studies.stability's neighbouring datasets).
Perturbation = Callable[[Dataset, list[np.ndarray]], Dataset]


def build_experiment(config: Config, perturb: Perturbation | None = None) -> Experiment:
    """Everything a run needs; ``perturb`` replaces the dataset right after the partition
    (the clients keep their index sets, so sample sizes, minibatch streams and client
    sampling are those of the unperturbed run)."""
    processes = start_processes(config)  # torchrun's ranks when distributed, else one
    device = processes.place(resolve_device(config.device))
    state = RunState.for_config(config, device)  # each stateful piece gets its namespace
    dataset, parts = build_data(config)
    held = None  # eval.membership's held-out non-members: the clients never train on them
    membership = parse_membership(config.eval.membership)
    if isinstance(membership, Membership):
        parts, held = holdout_split(parts, membership.holdout, config.seed)
    if perturb is not None:
        dataset = perturb(dataset, parts)
    if config.byzantine is not None and ATTACKS[config.byzantine.attack].poisons_labels:
        dataset = flip_labels(dataset, parts, byzantine_of(config))
    dataset = dataset.to(device)
    m = len(parts)
    train = config.train
    check_model_size(config, dataset, device)
    check_batch_size(config, parts, int(np.prod(dataset.input_shape)), device)
    check_local_test_size(config, dataset, m)
    sampler = ClientSampler(parts, None if train.full_batch else train.batch_size,
                            seed=derive_seed(config.seed, "sampler"), device=device)
    model = build_model_for(config, dataset).to(device)
    check_model_fits(model, dataset)  # token ids, vocabulary, output size: one sentence
    check_loss_fits(train.loss, dataset.name, dataset.num_classes)
    layout = ParamLayout.from_module(model)
    if device.type == "cpu" and config.engine.keep_freed_memory and (
            4 * m * layout.P <= KEEP_FREED_MAX_BYTES):
        keep_freed_memory()  # process-wide; see gossipfl.engine.memory
    require_memory(2 * 4 * m * layout.P, f"holding the [M, P] = [{m}, {layout.P}] parameter stacks "
                   f"(X and X^0)", "data.clients", device)
    oracle = make_oracle(config.engine.oracle, model, loss=train.loss,
                         chunk_size=config.engine.chunk_size, device=device,
                         compile=resolve_compile(config.engine.compile, device, model),
                         cuda_graphs=resolve_graphs(config.engine.cuda_graphs, device)[0])
    algo_cls = get_algorithm(config.algorithm.name)
    world = processes.world if processes.distributed else None
    draws = systems_model(config, m)
    topology = mixer = None
    if not algo_cls.centralized:
        topo = config.topology
        topology = build_topology(topo.name, m, mixing=topo.mixing, seed=config.seed,
                                  **topo.parameters())
        mixer = Mixer(mixing_topology(topology, draws), device=device, sparse=topo.sparse)
    sizes = torch.as_tensor([len(p) for p in parts], dtype=torch.float32, device=device)
    personal = config.model.personal
    groups = ParamGroups.build(layout, head_names(model) if personal is None else personal)
    # which features combine, from the declarations of the algorithm's class, the schedule,
    # the stages asked for, the backend and the systems draws (gossipfl.assembly.compat)
    check(features(config, algo_cls, topology, world, draws))
    # the robust rule and the attack (byzantine, topology.robust): the honest graph, degrees
    trust = build_trust(config, topology)
    reason = model_refusal(config, model)  # DP-SGD against the model's BatchNorm layers
    if reason:
        raise GossipflError(reason)
    privacy = build_privacy(config, model, np.array([len(p) for p in parts]), device,
                            state.privacy)
    fed = federation_of(processes, m, groups, sizes, seed=config.seed, mixer=mixer,
                        stages=gossip_stages(config, trust, state),
                        channels=algo_cls.gossip_channels, exchange=config.engine.exchange)
    local = LocalTraining(weight_decay=train.weight_decay, momentum=train.momentum,
                          clip_norm=train.clip_norm)
    counts = label_counts(dataset, parts)
    env = ClientEnv(oracle=oracle, layout=layout, groups=groups, sample_sizes=sizes,
                    seed=config.seed, train=local,
                    label_counts=None if counts is None else fed.block(counts),
                    privacy=None if privacy is None else privacy.gradient)
    algorithm = algo_cls(config.algorithm.params, env, fed)
    state.algorithm.declare(f"algorithm {algorithm.name}", rows=algorithm.client_state,
                            kept=(*algorithm.client_state, *algorithm.global_state))
    # the schedule's own rows (topology.order: asynchronous), declared by the schedule
    state.schedule = get_schedule(config.topology.order).namespace(len(fed.own_clients()),
                                                                   device)
    groups.check_used(algorithm)  # a personalized split needs a shared and a personal part
    check(features(config, algorithm, topology, world, draws))  # its hooks read its params
    caution = None if topology is None else mixing_check(algorithm, topology)[1]
    systems = build_systems(config, draws, fed, algorithm, layout.P, state.systems)
    for message in [caution] * bool(caution) + algorithm.check(topology, config.topology.order):
        warnings.warn(message, StabilityWarning, stacklevel=2)
    x0 = fed.block(initial_stack(config, layout, model, device))
    if x0.stride(0) != 0:  # the same model on every client stays a [P] view (issue 42: one
        x0 = x0.clone()    # [M, P] copy less for the whole run; algorithm.init copies it)
    evaluation = _evaluation_inputs(config, dataset, parts, m, algo_cls, processes, device)
    evaluation["info"]["P"] = layout.P
    if trust is not None and len(trust.byzantine) and topology is not None \
            and not topology.sparse and not topology.time_varying:  # the run summary's
        from gossipfl.trust.breakdown import run_breakdown

        evaluation["info"]["breakdown"] = run_breakdown(
            topology.matrix(0), trust.byzantine,
            None if trust.gossip is None else trust.gossip.rule)
    if held is not None:
        evaluation["members"] = membership_inputs(config, membership, dataset, parts, held,
                                                  processes, layout.P)
    return Experiment(config=config, device=device, dataset=dataset, parts=parts,
                      sampler=sampler, model=model, layout=layout, oracle=oracle,
                      topology=topology, env=env, fed=fed, algorithm=algorithm, x0=x0,
                      systems=systems, honest=None if trust is None else trust.honest,
                      privacy=privacy, state=state, **evaluation)


def gossip_stages(config: Config, trust, state: RunState) -> list:
    """The gossip pipeline's stages, outermost first (gossipfl.topology.stages): robust
    aggregation under attack (``byzantine``, ``topology.robust``; none with the plain mean
    and no attack that sends: the same W z), then compression with error feedback
    (``topology.compression``: CHOCO-Gossip's channels, their public copies in the run's
    gossip namespace); the plugins' stages (``topology.stages``, registered with
    :func:`gossipfl.topology.register_stage`) wrap them, in the config's order."""
    stages = [entry.stage.build(entry.params, entry.key)
              for entry in asked_stages(config.topology.stages)]
    if trust is not None and trust.gossip is not None:
        stages.append(trust.gossip)
    choco = build_choco(config.topology.compression)  # checked when the config was read
    if choco is not None:
        stages.append(Channels(choco, state.gossip))
    return stages


def _evaluation_inputs(config: Config, dataset, parts, m: int, algo_cls, processes,
                       device) -> dict:
    """The Experiment's evaluation fields: the test subset of the local models, the
    membership-inference samples, the evaluated clients, the label-matched local test
    splits, and what the run summary says of them and of the partition."""
    out: dict = {"info": {}}
    n_test = len(dataset.test_y)
    subset = config.eval.local_subset
    if n_test and subset is not None and subset < n_test:
        pick = np.sort(numpy_generator(config.seed, "eval_subset").choice(
            n_test, size=subset, replace=False))
        out["eval_subset"] = torch.as_tensor(pick, device=device)
    if isinstance(config.eval.membership, int) and n_test:
        from gossipfl.trust.membership import membership_samples

        out["members"] = membership_samples(parts, n_test, config.eval.membership, config.seed)
    out["eval_clients"] = evaluated_clients(config, m, processes.distributed, device)
    if out["eval_clients"] is not None:
        out["info"]["eval_clients"] = len(out["eval_clients"])
    declared = "personalized" in algo_cls.evaluations and not dataset.train_y.is_floating_point()
    if (config.eval.personalized or declared) and n_test:
        out["local_test_parts"] = local_test_split(
            parts, dataset.train_y.cpu().numpy(), dataset.test_y.cpu().numpy(),
            dataset.num_classes, numpy_generator(config.seed, "local_test"),
            size=config.data.local_test_size)
    if dataset.num_classes and dataset.train_y.dtype == torch.int64:
        out["info"]["partition"] = summarize_partition(parts, dataset.train_y.cpu().numpy(),
                                                       dataset.num_classes)
    return out


def membership_inputs(config: Config, spec, dataset, trained, held, processes, P: int):
    """eval.membership's holdout form: the attacked samples (gossipfl.trust.membership); its
    shadows refused in one sentence where they cannot replay the run or do not fit."""
    from gossipfl.trust.membership import candidates

    key = "eval.membership"
    if processes.distributed:
        raise GossipflError(f"{key}: the holdout form is not implemented under "
                            f"engine.backend: distributed yet; use engine.backend: single.")
    if spec.shadows:
        if not dataset.num_classes or dataset.train_y.is_floating_point():
            raise GossipflError(f"{key}.shadows: LiRA needs class labels (it scales the true "
                                f"class's confidence), but the dataset has regression "
                                f"targets; set shadows: 0.")
        m, width = len(trained), int(np.prod(dataset.input_shape))
        data = 4 * width * sum(len(t) + len(h) for t, h in zip(trained, held)) // 2
        require_memory(4 * spec.shadows * m * P + 3 * 4 * m * P + data,
                       f"LiRA's {spec.shadows} shadow federations of {m} clients × {P} "
                       f"parameters (their models kept, one run's state and half of each "
                       f"client's data at a time)", f"{key}.shadows")
    found = candidates(trained, held, spec, config.seed)
    if spec.shadows:  # the first shadow federation built now, so that it refuses before training
        from gossipfl.assembly.loading import load_config
        from gossipfl.trust.membership import shadow_config, shadow_halves

        half = shadow_halves(found, config.seed)[0]
        shadow = shadow_config(config.to_dict(api_values=True), half, dataset.train_x,
                               dataset.train_y, dataset.num_classes)
        try:
            build_experiment(load_config(shadow))
        except GossipflError as error:
            raise GossipflError(f"{key}.shadows: a shadow federation (each client on half "
                                f"of its samples) is refused: {error}") from None
    return found


#: engine.keep_freed_memory applies while one [M, P] float32 stack is at most this large:
#: above it glibc's heap, kept whole, fragments and the peak ran 19-66 % over the memory plan
#: (docs/benchmarks.md, "Gossip learning at scale"); big blocks are then mmapped and returned.
KEEP_FREED_MAX_BYTES = 256 * 2**20


#: Above this many clients the local models are evaluated on a sample of this many clients
#: unless ``eval.local_clients`` says otherwise (every client's model on 2 000 test samples is
#: M × 2 000 predictions: minutes at 10⁵ clients).
LOCAL_CLIENTS_AUTO = 1000


def evaluated_clients(config: Config, m: int, distributed: bool,
                      device) -> torch.Tensor | None:
    """The sorted ids of the clients whose local models are evaluated (None: all):
    ``eval.local_clients`` of them, or LOCAL_CLIENTS_AUTO when there are more clients and it
    is not set, drawn from (``eval.local_clients_seed`` or the run's seed, "eval_clients").
    Under several processes every client is evaluated (each rank its block)."""
    size = config.eval.local_clients
    if size is None:
        size = LOCAL_CLIENTS_AUTO if m > LOCAL_CLIENTS_AUTO else None
    if size is None or size >= m or distributed:
        return None
    seed = config.eval.local_clients_seed
    rng = numpy_generator(config.seed if seed is None else seed, "eval_clients")
    return torch.as_tensor(np.sort(rng.choice(m, size=size, replace=False)), device=device)


def label_counts(dataset: Dataset, parts: list[np.ndarray]) -> torch.Tensor | None:
    """``[M, C]`` float: client i's number of training samples of class c (None for
    regression targets)."""
    labels = dataset.train_y
    if not dataset.num_classes or labels.is_floating_point():
        return None
    # one bincount over (client, label) pairs: O(n + M C), no per-client tensors
    c = dataset.num_classes
    sizes = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    index = torch.as_tensor(np.concatenate(parts) if len(parts) else np.zeros(0, np.int64),
                            dtype=torch.int64, device=labels.device)
    owner = torch.repeat_interleave(torch.arange(len(parts), device=labels.device),
                                    torch.as_tensor(sizes, device=labels.device))
    picked = labels[index]
    seen = picked < c  # a label past num_classes counts nowhere (as the slice did)
    flat = owner[seen] * c + picked[seen]
    return torch.bincount(flat, minlength=len(parts) * c).reshape(len(parts), c).float()
