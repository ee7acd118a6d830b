"""The round loop: build an experiment from a config, run rounds, evaluate, checkpoint.

Data flows one way (docs/design.md): config → data + partition → model + parameter stack →
algorithm rounds (oracle, mixer) → metrics. The runner owns no algorithm logic: each round it
asks the algorithm for the working iterates, feeds it the clients' minibatches, lets it
communicate, and measures.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import torch

from gossipfl.algorithms import Batch, Context, Phase, Work, get_algorithm
from gossipfl.algorithms.local import LocalOptimizer
from gossipfl.config import Config
from gossipfl.data import (
    ClientSampler,
    Dataset,
    apply_crop_flip,
    build_partitioner,
    from_tensors,
    hashed_crop_flip_params,
    load_dataset,
    local_test_split,
    natural_split,
    summarize_partition,
)
from gossipfl.distributed import start_processes
from gossipfl.engine import (
    ParamLayout,
    evaluate_per_client,
    evaluate_stack,
    keep_freed_memory,
    make_oracle,
)
from gossipfl.engine.groups import ParamGroups
from gossipfl.engine.memory import require_memory
from gossipfl.errors import Diverged, GossipflError
from gossipfl.federation import Federation, LocalTraining
from gossipfl.models import build_model, check_model_fits, head_names
from gossipfl.rng import client_keys, derive_seed, numpy_generator
from gossipfl.sequential import sequential_round
from gossipfl.topology import Mixer, build_topology


@dataclass
class Result:
    """What a run produced.

    ``metrics``: one dict per evaluated round (``round``, ``test_acc`` of the average model,
    ``local_acc_mean``/``local_acc_std`` of the local models, ``train_loss``, ``consensus``,
    ``bytes_round``/``bytes_total``, ``seconds`` per round, ...). ``params``: the final
    per-client parameters ``[M, P]``; ``server_params``: the server model ``[P]`` of a
    centralized algorithm (None otherwise).
    """

    config: Config | None
    metrics: list[dict]
    params: torch.Tensor | None
    server_params: torch.Tensor | None = None
    layout: Any = None
    info: dict = field(default_factory=dict)

    def column(self, key: str) -> list:
        """The values of one metric over the evaluated rounds (None where absent)."""
        return [row.get(key) for row in self.metrics]

    def summary(self, metric: str = "test_acc") -> dict:
        """Final and best value of ``metric``, the round of the best, time and bytes."""
        values = [(row[metric], row["round"]) for row in self.metrics if metric in row]
        last = self.metrics[-1] if self.metrics else {}
        best = max(values) if values else (None, None)
        rounds = last.get("round", 0)
        return {"metric": metric, "final": values[-1][0] if values else None,
                "best": best[0], "best_round": best[1], "rounds": rounds,
                "seconds_per_round": last.get("elapsed", 0.0) / max(rounds, 1),
                "bytes_total": last.get("bytes_total", 0)}


class StabilityWarning(UserWarning):
    """The chosen extrapolation coefficient diverges on the chosen topology."""


# --------------------------------------------------------------------------------------------
# Building an experiment
# --------------------------------------------------------------------------------------------
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
    topology: Any
    fed: Federation
    algorithm: Any
    x0: torch.Tensor
    eval_subset: torch.Tensor | None = None
    local_test_parts: list[np.ndarray] | None = None
    info: dict = field(default_factory=dict)


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
        dataset = load_dataset(data.dataset, root=data.root, download=data.download,
                               verify=data.verify, **data.options)
    if data.clients > len(dataset.train_y):
        raise GossipflError(f"data.clients: {data.clients} clients but the dataset has only "
                            f"{len(dataset.train_y)} training samples.")
    if data.partition == "natural":
        return dataset, natural_split(dataset.train_users, len(dataset.users), data.clients,
                                      dataset.name)
    params = {"iid": {}, "dirichlet": {"alpha": data.alpha, "balanced": data.balanced,
                                       "min_size": data.min_size},
              "pathological": {"classes_per_client": data.classes_per_client}}[data.partition]
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
#: dataset`` with the same sample count (gossipfl.stability_study's neighbouring datasets).
Perturbation = Callable[[Dataset, list[np.ndarray]], Dataset]


def build_experiment(config: Config, perturb: Perturbation | None = None) -> Experiment:
    """Everything a run needs; ``perturb`` replaces the dataset right after the partition
    (the clients keep their index sets, so sample sizes, minibatch streams and client
    sampling are those of the unperturbed run)."""
    processes = start_processes(config)  # torchrun's ranks when distributed, else one
    device = processes.place(resolve_device(config.device))
    if device.type == "cpu" and config.engine.keep_freed_memory:
        keep_freed_memory()  # process-wide; see gossipfl.engine.memory
    dataset, parts = build_data(config)
    if perturb is not None:
        dataset = perturb(dataset, parts)
    dataset = dataset.to(device)
    m = len(parts)
    train = config.train
    sampler = ClientSampler(parts, None if train.full_batch else train.batch_size,
                            seed=derive_seed(config.seed, "sampler"), device=device)
    model = build_model_for(config, dataset).to(device)
    check_model_fits(model, dataset)  # token ids, vocabulary, output size: one sentence
    layout = ParamLayout.from_module(model)
    require_memory(2 * 4 * m * layout.P, f"holding the [M, P] = [{m}, {layout.P}] parameter stacks "
                   f"(X and X^0)", "data.clients", device)
    oracle = make_oracle(config.engine.oracle, model, loss=train.loss,
                         chunk_size=config.engine.chunk_size, device=device)
    algo_cls = get_algorithm(config.algorithm.name)
    topology = mixer = None
    if not algo_cls.centralized:
        topo = config.topology
        options = {"k": topo.k, "p": topo.p, "path": topo.path, "array": topo.matrix}
        topology = build_topology(topo.name, m, mixing=topo.mixing, seed=config.seed,
                                  **options)
        mixer = Mixer(topology, device=device, sparse=topo.sparse)
    sizes = torch.as_tensor([len(p) for p in parts], dtype=torch.float32, device=device)
    personal = config.model.personal
    groups = ParamGroups.build(layout, head_names(model) if personal is None else personal)
    local = LocalTraining(weight_decay=train.weight_decay, momentum=train.momentum,
                          clip_norm=train.clip_norm)
    fed = processes.federation(m, oracle, groups, sizes, seed=config.seed, train=local,
                               mixer=mixer, label_counts=label_counts(dataset, parts))
    algorithm = algo_cls(config.algorithm.params, fed)
    groups.check_used(algorithm)  # a personalized split needs a shared and a personal part
    refusal = algorithm.order_error(config.topology.order)
    if config.topology.order == "sequential" and processes.distributed:
        refusal = (f"topology.order: sequential sweeps the clients one wave after another "
                   f"through the whole [M, P] stack, which engine.backend: distributed splits "
                   f"over {processes.world} processes; run it with engine.backend: single.")
    if refusal:
        raise GossipflError(refusal)
    if topology is not None:
        topology.order = config.topology.order  # read by the stability guard
    for message in algorithm.check(topology):
        warnings.warn(message, StabilityWarning, stacklevel=2)
    x0 = fed.block(initial_stack(config, layout, model, device)).clone()
    exp = Experiment(config=config, device=device, dataset=dataset, parts=parts,
                     sampler=sampler, model=model, layout=layout, oracle=oracle,
                     topology=topology, fed=fed, algorithm=algorithm, x0=x0)
    n_test = len(dataset.test_y)
    subset = config.eval.local_subset
    if n_test and subset is not None and subset < n_test:
        pick = np.sort(numpy_generator(config.seed, "eval_subset").choice(
            n_test, size=subset, replace=False))
        exp.eval_subset = torch.as_tensor(pick, device=device)
    declared = "personalized" in algo_cls.evaluations and not dataset.train_y.is_floating_point()
    if (config.eval.personalized or declared) and n_test:
        exp.local_test_parts = local_test_split(
            parts, dataset.train_y.cpu().numpy(), dataset.test_y.cpu().numpy(),
            dataset.num_classes, numpy_generator(config.seed, "local_test"),
            size=config.data.local_test_size)
    if dataset.num_classes and dataset.train_y.dtype == torch.int64:
        exp.info["partition"] = summarize_partition(parts, dataset.train_y.cpu().numpy(),
                                                    dataset.num_classes)
    exp.info["P"] = layout.P
    return exp


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------
Callback = Callable[["Runner", int, "dict | None"], None]


class Runner:
    """Runs the rounds of one experiment; resumable from :meth:`state_dict`.

    :meth:`run` is :meth:`step` for every round left, then :meth:`result`; a caller that
    advances several runners in lockstep (gossipfl.stability_study) calls :meth:`step`
    itself. ``perturb``: see :func:`build_experiment`.
    """

    def __init__(self, config: Config, callbacks: Sequence[Callback] = (),
                 perturb: Perturbation | None = None):
        self.config = config
        self.exp = build_experiment(config, perturb)
        self.callbacks = list(callbacks)
        self.round = 0  # rounds completed
        self.rows: list[dict] = []
        self.bytes_total = 0
        self.train_seconds = 0.0
        self.client_steps = 0  # client-steps computed (rows handed to the oracle, per step)
        self.trained: torch.Tensor | None = None  # personalized models before gossip
        self._train_subsets: dict[int, torch.Tensor] = {}  # the gap's train samples, by size
        self.exp.algorithm.init(self.exp.x0)

    # -- one round -----------------------------------------------------------------------
    def lr(self, t: int) -> float:
        train = self.config.train
        return train.lr * train.lr_decay ** t

    def phase_lr(self, phase: Phase, t: int) -> float:
        train = self.config.train
        return (train.lr if phase.lr is None else phase.lr) * train.lr_decay ** t

    def phase_batches(self, t: int, index: int, phase: Phase, rows: torch.Tensor,
                      stream: str = "phase"):
        """Index batches ``(idx [S, B], mask [S, B])`` of a phase of round t for the clients
        ``rows`` (in that order), from the sampler's ``stream``."""
        exp, train = self.exp, self.config.train
        if phase.steps is not None or phase.epochs is not None:
            kind, count = ("steps", phase.steps) if phase.steps is not None else \
                ("epochs", phase.epochs)
        elif train.local_steps:
            kind, count = "steps", train.local_steps
        else:
            kind, count = "epochs", train.local_epochs
        if train.full_batch:
            return [exp.sampler.full_batch(rows)] * count
        if kind == "steps":
            return exp.sampler.steps(t, count, stream, index, clients=rows)
        return [b for e in range(count)
                for b in exp.sampler.epoch(t, e, stream, index, clients=rows)]

    def make_batch(self, idx: torch.Tensor, mask: torch.Tensor,
                   augment: tuple[torch.Tensor, torch.Tensor] | None) -> Batch:
        """The minibatch of the rows ``idx [S, B]``. With ``augment = (keys [S], drawn [S])``
        the image in column b of row s is cropped and flipped by the hash of (client s's key,
        drawn[s] + b), where drawn[s] counts the samples client s has drawn this round."""
        data = self.exp.dataset
        inputs = data.train_x[idx]
        if augment is not None:
            keys, drawn = augment
            counters = drawn[:, None] + torch.arange(idx.shape[1], device=idx.device)
            dy, dx, flip = hashed_crop_flip_params(keys, counters)
            inputs = apply_crop_flip(inputs, dy, dx, flip)
        return Batch(inputs=inputs, targets=data.train_y[idx], mask=mask)

    def augment_keys(self, t: int, rows: torch.Tensor) -> torch.Tensor | None:
        augment, data = self.config.data.augment, self.exp.dataset
        if not (augment if augment is not None else data.augment):
            return None
        return client_keys(self.config.seed, rows.tolist(), "augment", t, device=rows.device)

    def run_round(self, t: int) -> dict:
        """Train and communicate for round t; returns the round's training measurements."""
        exp, algo = self.exp, self.exp.algorithm
        start = time.perf_counter()
        ctx = Context(round=t, lr=self.lr(t), rounds=self.config.train.rounds)
        extra = {}
        if self.config.topology.order == "sequential":
            loss_sum, loss_count, extra["waves"] = sequential_round(self, ctx)
        else:
            work = algo.begin_round(ctx)
            loss_sum, loss_count = self.train_work(t, work)
            if self.measures_before_gossip(t):
                self.trained = algo.trained_models(work).clone()
            algo.end_round(ctx, work)
        sent = exp.fed.traffic.take()
        totals = exp.fed.total(torch.stack(  # every process's clients
            [loss_sum, torch.tensor(float(loss_count), device=loss_sum.device)]))
        loss_sum, loss_count = totals[0], int(totals[1])
        self.client_steps += loss_count
        train_loss = float(loss_sum / max(loss_count, 1))
        seconds = time.perf_counter() - start
        self.train_seconds += seconds
        self.bytes_total += int(sent)
        return {"round": t + 1, "lr": ctx.lr, "train_loss": train_loss, "bytes_round": int(sent),
                "bytes_total": self.bytes_total, "seconds": seconds, **extra}

    def measures_before_gossip(self, t: int) -> bool:
        """Round t is evaluated on the personalized models as they leave local training."""
        return (self.exp.local_test_parts is not None and not self.exp.algorithm.centralized
                and self.config.eval.personalized_point == "before_gossip"
                and self.should_evaluate(t))

    def train_work(self, t: int, work: Work, phases: Sequence[Phase] | None = None,
                   stream: str = "phase") -> tuple[torch.Tensor, int]:
        """Round t's local phases (``phases``, default the algorithm's) on the rows of
        ``work`` (in place), minibatches from the sampler's ``stream``; returns the summed
        per-row loss and the number of client-steps computed.

        The rows are ordered by data size (largest first), so that at every local step the
        clients that still have a minibatch are a prefix of the rows: the algorithm is handed
        that prefix only (views), and clients whose data ran out (or that sit out the round)
        cost nothing. Minibatches and augmentation are drawn per client, so the rows of any
        subset of clients come out as they would with all the others.
        """
        exp, algo = self.exp, self.exp.algorithm
        clients = work.clients
        ids = exp.fed.own_clients(work.y.device) if clients is None else clients
        order = torch.argsort(exp.fed.sample_sizes[ids], descending=True, stable=True)
        permuted = not bool((order == torch.arange(len(order), device=order.device)).all())
        inner = work.take(order, None if clients is None else clients[order]) if permuted \
            else work
        rows = ids[order]
        keys = self.augment_keys(t, rows)
        drawn = torch.zeros(len(rows), dtype=torch.int64, device=rows.device)
        loss_sum = torch.zeros((), device=exp.device)
        loss_count = 0
        for index, phase in enumerate(algo.phases() if phases is None else phases):
            lr = self.phase_lr(phase, t)
            momentum = self.config.train.momentum if phase.momentum is None else phase.momentum
            optimizer = LocalOptimizer(exp.fed.groups[phase.group], lr, momentum, len(inner),
                                       inner.y)
            algo.begin_phase(Context(round=t, lr=lr, phase=phase, phase_index=index,
                                     optimizer=optimizer), inner)
            for step, (idx, mask) in enumerate(self.phase_batches(t, index, phase, rows,
                                                                  stream)):
                active = int(mask.any(dim=1).sum())
                if active == 0:
                    continue
                augment = None if keys is None else (keys[:active], drawn[:active])
                batch = self.make_batch(idx[:active], mask[:active], augment)
                drawn[:active] += mask[:active].sum(dim=1)
                step_ctx = Context(round=t, lr=lr, phase=phase, phase_index=index, step=step,
                                   optimizer=optimizer)
                loss = algo.local_step(step_ctx, inner.head(active), batch)
                loss_sum += loss.sum()
                loss_count += active
        if permuted:
            work.restore(inner, torch.argsort(order))
        return loss_sum, loss_count

    def evaluate(self) -> dict:
        """All enabled evaluation protocols on the current models."""
        exp, ev = self.exp, self.config.eval
        data, algo = exp.dataset, exp.algorithm
        start = time.perf_counter()
        fed, x = exp.fed, algo.client_models()  # x: the rows this process holds
        row: dict = {"consensus": consensus_distance(x, fed)}
        n_test = len(data.test_y)
        if ev.average_model and n_test:
            row["test_acc"], row["test_loss"] = self.global_fit(data.test_x, data.test_y)
            if ev.generalization is not None:
                row.update(self.generalization(ev.generalization, row["test_acc"],
                                               row["test_loss"]))
        if ev.local_models and n_test and "local" in algo.evaluations:
            sub = exp.eval_subset
            inputs = data.test_x if sub is None else data.test_x[sub]
            targets = data.test_y if sub is None else data.test_y[sub]
            acc, _ = evaluate_stack(exp.oracle, x, inputs, targets, batch_size=ev.batch_size)
            acc = fed.gather(acc)
            row["local_acc_mean"], row["local_acc_std"] = float(acc.mean()), float(acc.std())
        if exp.local_test_parts is not None:
            acc, _ = evaluate_per_client(exp.oracle, self.personalized_models(), data.test_x,
                                         data.test_y, fed.block(exp.local_test_parts),
                                         batch_size=ev.batch_size)
            acc = fed.gather(acc)
            row["personalized_acc"] = float(acc.mean())
            row["personalized_acc_std"] = float(acc.std())
        row["eval_seconds"] = time.perf_counter() - start
        return row

    def global_fit(self, inputs: torch.Tensor, targets: torch.Tensor) -> tuple[float, float]:
        """Accuracy and mean loss of the algorithm's global model (the server model, or the
        average of the clients) on ``inputs``/``targets``; each process takes its share."""
        exp = self.exp
        fed, n = exp.fed, len(targets)
        share = fed.share(n)
        acc, loss = evaluate_stack(exp.oracle, exp.algorithm.global_model().unsqueeze(0),
                                   inputs[share], targets[share],
                                   batch_size=self.config.eval.batch_size)
        weight = (share.stop - share.start) / n
        acc, loss = fed.total(torch.stack([acc[0], loss[0]]) * weight).tolist()
        return acc, loss

    def generalization(self, size: int, test_acc: float, test_loss: float) -> dict:
        """The generalization-gap columns (gossipfl.analysis.columns.generalization_gap:
        train minus test) of the global model, its train side measured on a fixed random
        subset of ``size`` training samples (the same every round)."""
        from gossipfl.analysis.columns import generalization_gap, train_subset

        data = self.exp.dataset
        if size not in self._train_subsets:
            pick = train_subset(len(data.train_y), size, self.config.seed)
            self._train_subsets[size] = torch.as_tensor(pick, device=data.train_y.device)
        sub = self._train_subsets[size]
        train_acc, train_loss = self.global_fit(data.train_x[sub], data.train_y[sub])
        return generalization_gap(train_acc, train_loss, test_acc, test_loss)

    def personalized_models(self) -> torch.Tensor:
        """What the personalized protocol measures: the algorithm's personalized models, as
        they left local training (``eval.personalized_point: before_gossip``) or now, after
        its fine-tuning phases (FedBABU), if any."""
        algo = self.exp.algorithm
        models = algo.personalized_models() if self.trained is None else self.trained
        self.trained = None
        phases = algo.finetune_phases()
        if phases:
            work = Work(models.clone())
            self.train_work(self.round, work, phases, stream="finetune")
            models = work.y
        return models

    def should_evaluate(self, t: int) -> bool:
        rounds, every = self.config.train.rounds, self.config.eval.every
        return (t + 1) % every == 0 or t + 1 == rounds

    def run(self) -> Result:
        for t in range(self.round, self.config.train.rounds):
            self.step(t)
        return self.result()

    def step(self, t: int, evaluate: bool | None = None) -> dict | None:
        """Round t (the next one, ``self.round``): train and communicate, stop with
        :class:`Diverged` on a blow-up, evaluate when due (``evaluate`` True/False: always
        / never), call the callbacks; returns the round's metrics row, None when it was not
        evaluated."""
        with torch.no_grad():
            measured = self.run_round(t)
            self.check_divergence(t, measured)
            row = None
            if self.should_evaluate(t) if evaluate is None else evaluate:
                row = {**measured, **self.evaluate(), "elapsed": self.train_seconds}
                self.rows.append(row)
        self.round = t + 1
        for callback in self.callbacks:
            callback(self, t, row)
        return row

    def result(self) -> Result:
        """The :class:`Result` of the rounds run so far."""
        algo = self.exp.algorithm
        server = algo.server_model()
        return Result(config=self.config, metrics=list(self.rows),
                      params=self.exp.fed.gather(algo.client_models()).detach().clone(),
                      server_params=None if server is None else server.detach().clone(),
                      layout=self.exp.layout, info=dict(self.exp.info))

    def check_divergence(self, t: int, measured: dict) -> None:
        """Raise :class:`Diverged` when round t left a non-finite loss or parameters, or a
        consensus distance above ``train.max_consensus``."""
        x, fed = self.exp.algorithm.client_models(), self.exp.fed
        loss, bound = measured["train_loss"], self.config.train.max_consensus
        what = None
        held = x[:1] if x.stride(0) == 0 else x  # a replicated server model: check one row
        nonfinite = fed.total(torch.tensor(float(has_nonfinite(held)),
                                           device=x.device))  # every process decides alike
        if not math.isfinite(loss):
            what = f"the training loss is {loss}"
        elif nonfinite > 0:
            what = "the parameters hold NaN or inf"
        elif bound is not None and self.exp.topology is not None:
            distance = consensus_distance(x, fed)
            if distance > bound:
                what = (f"the consensus distance {distance:.3g} exceeds train.max_consensus "
                        f"{bound:g}")
        if what:
            raise Diverged(f"{self.config.algorithm.name} diverged at round {t + 1}: {what}.")

    # -- checkpointing ------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The run's state; per-client state with all M rows, however many processes hold
        them (so any number of processes can resume it)."""
        algo, fed = self.exp.algorithm, self.exp.fed
        state = {k: (fed.gather(v) if k in algo.client_state else v).cpu()
                 for k, v in algo.state_dict().items()}
        return {"round": self.round, "rows": list(self.rows), "bytes_total": self.bytes_total,
                "train_seconds": self.train_seconds, "algorithm": state}

    def load_state_dict(self, state: dict) -> None:
        self.round = int(state["round"])
        self.rows = list(state["rows"])
        self.bytes_total = int(state["bytes_total"])
        self.train_seconds = float(state["train_seconds"])
        algo, fed = self.exp.algorithm, self.exp.fed
        algo.load_state_dict({k: fed.block(v) if k in algo.client_state else v
                              for k, v in state["algorithm"].items()})


def has_nonfinite(x: torch.Tensor) -> bool:
    """Whether ``x`` holds NaN or inf, from its sum: NaN and inf make the sum non-finite, and
    one reduction costs about 1/50 of an elementwise ``isfinite`` over ``[M, P]`` (which cost
    more than a whole round at 2 % participation). Finite entries can make the sum overflow
    only when they average above ~1e38 / (M P): diverged as well."""
    return not bool(torch.isfinite(x.sum()))


def label_counts(dataset: Dataset, parts: list[np.ndarray]) -> torch.Tensor | None:
    """``[M, C]`` float: client i's number of training samples of class c (None for
    regression targets)."""
    labels = dataset.train_y
    if not dataset.num_classes or labels.is_floating_point():
        return None
    return torch.stack([torch.bincount(labels[torch.as_tensor(p, device=labels.device)],
                                       minlength=dataset.num_classes)[:dataset.num_classes]
                        for p in parts]).float()


def consensus_distance(x: torch.Tensor, fed: Federation) -> float:
    """(1/M) Σ_i ‖x_i − x̄‖² for the models ``x`` (the rows ``fed`` holds) and their mean;
    exactly 0, without touching M·P values, when every row is one tensor (a server model
    replicated to all clients: row stride 0)."""
    if fed.total(torch.tensor(float(x.stride(0) != 0), device=x.device)) == 0:
        return 0.0  # the same answer on every process (a block of one row may be a view)
    return float(fed.mean((x - fed.mean(x)).pow(2).sum(dim=1)))
