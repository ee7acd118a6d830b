"""Evaluation of a run's models (docs/design.md, *Evaluation*): the average (or server) model
on the test set, every local model, each client's personalized model on its own local test
split, the consensus distance and the generalization gap; with Byzantine clients, the same
over the honest clients only (``honest_*`` columns); with ``eval.membership``, the
membership-inference AUC of the local models (``mia_auc``; with held-out non-members also
``mia_tpr_1pct``, ``mia_tpr_01pct``)."""

from __future__ import annotations

import time

import numpy as np
import torch

from gossipfl.algorithms.base import Algorithm, State, Work
from gossipfl.config import Config
from gossipfl.data import Dataset
from gossipfl.engine import evaluate_per_client, evaluate_stack
from gossipfl.network.federation import Federation
from gossipfl.schedules.training import LocalTrainer


class Evaluator:
    """Measures the algorithm's models in a state; ``eval_subset`` (test indices) restricts
    the local models' evaluation, ``eval_clients`` (client ids, one process) the clients it
    measures; ``local_test_parts`` (per-client test indices) turns the
    personalized protocol on."""

    def __init__(self, config: Config, algorithm: Algorithm, fed: Federation, oracle,
                 dataset: Dataset, trainer: LocalTrainer,
                 eval_subset: torch.Tensor | None = None,
                 local_test_parts: list[np.ndarray] | None = None,
                 honest: np.ndarray | None = None,
                 eval_clients: torch.Tensor | None = None, members: tuple | None = None):
        self.config = config
        self.algorithm = algorithm
        self.fed = fed
        self.oracle = oracle
        self.dataset = dataset
        self.trainer = trainer
        self.eval_subset = eval_subset
        self.local_test_parts = local_test_parts
        self.honest = None if honest is None else torch.as_tensor(honest)  # [M] bool
        self.eval_clients = eval_clients  # the clients whose local models are measured
        self.members = members  # eval.membership's (members, mask, non-members)
        self._train_subsets: dict[int, torch.Tensor] = {}  # the gap's train samples, by size

    def measures_before_gossip(self) -> bool:
        """Whether the personalized models are measured as they leave local training."""
        return (self.local_test_parts is not None and not self.algorithm.centralized
                and self.config.eval.personalized_point == "before_gossip")

    def evaluate(self, state: State, t: int, trained: torch.Tensor | None = None) -> dict:
        """All enabled evaluation protocols on the models of ``state`` after round ``t``;
        ``trained``: the personalized models as they left round t's local training."""
        ev, data, algo, fed = self.config.eval, self.dataset, self.algorithm, self.fed
        start = time.perf_counter()
        x = algo.client_models(state)  # the rows this process holds
        row: dict = {"consensus": consensus_distance(x, fed)}
        n_test = len(data.test_y)
        if ev.average_model and n_test:
            row["test_acc"], row["test_loss"] = self.global_fit(state, data.test_x,
                                                                data.test_y)
            if ev.generalization is not None:
                row.update(self.generalization(state, ev.generalization, row["test_acc"],
                                               row["test_loss"]))
        if ev.local_models and n_test and "local" in algo.evaluations:
            sub = self.eval_subset
            inputs = data.test_x if sub is None else data.test_x[sub]
            targets = data.test_y if sub is None else data.test_y[sub]
            models = x if self.eval_clients is None else x[self.eval_clients]
            acc, _ = evaluate_stack(self.oracle, models, inputs, targets,
                                    batch_size=ev.batch_size)
            acc = fed.gather(acc)
            row["local_acc_mean"], row["local_acc_std"] = float(acc.mean()), float(acc.std())
            if self.honest is not None:  # of the measured clients, the honest ones
                honest = self.honest if self.eval_clients is None \
                    else self.honest[self.eval_clients.cpu()]
                kept = acc[honest.to(acc.device)]
                row["honest_local_acc_mean"] = float(kept.mean())
                row["honest_local_acc_std"] = float(kept.std())
        if self.local_test_parts is not None:
            acc, _ = evaluate_per_client(self.oracle, self.personalized_models(state, t, trained),
                                         data.test_x, data.test_y,
                                         fed.block(self.local_test_parts),
                                         batch_size=ev.batch_size)
            acc = fed.gather(acc)
            row["personalized_acc"] = float(acc.mean())
            row["personalized_acc_std"] = float(acc.std())
        if isinstance(self.members, tuple):
            row["mia_auc"] = self.membership_auc(x)
        elif self.members is not None:  # the holdout form (one process)
            from gossipfl.trust.membership import loss_attack

            rows = self.eval_clients
            row.update(loss_attack(self.oracle, x if rows is None else x[rows], data.train_x,
                                   data.train_y, self.members, rows))
        if self.honest is not None:
            row.update(self.honest_columns(x, ev.average_model and n_test > 0))
        row["eval_seconds"] = time.perf_counter() - start
        return row

    def membership_auc(self, x: torch.Tensor) -> float:
        """The mean over the evaluated clients of the loss-threshold membership-inference
        AUC of their local models (gossipfl.trust.membership)."""
        from gossipfl.trust.membership import membership_auc

        members, mask, others = self.members
        members, mask = self.fed.block(members), self.fed.block(mask)  # this process's rows
        if self.eval_clients is not None:
            x, on = x[self.eval_clients], self.eval_clients.cpu()
            members, mask = members[on], mask[on]
        data = self.dataset
        values = membership_auc(self.oracle, x, data.train_x, data.train_y, members, mask,
                                data.test_x, data.test_y, others)
        return float(self.fed.gather(values).mean())

    def honest_columns(self, x: torch.Tensor, average: bool) -> dict:
        """The honest clients H alone: their consensus distance (1/|H|) Σ_{i∈H} ‖x_i − x̄_H‖²
        and (``average``) the test accuracy and loss of their average x̄_H."""
        rows = x[self.honest.to(x.device)]
        mean = rows.mean(dim=0)
        out = {"honest_consensus": float((rows - mean).pow(2).sum(dim=1).mean())}
        if average:
            data = self.dataset
            acc, loss = evaluate_stack(self.oracle, mean.unsqueeze(0), data.test_x,
                                       data.test_y, batch_size=self.config.eval.batch_size)
            out["honest_test_acc"], out["honest_test_loss"] = float(acc[0]), float(loss[0])
        return out

    def global_fit(self, state: State, inputs: torch.Tensor,
                   targets: torch.Tensor) -> tuple[float, float]:
        """Accuracy and mean loss of the algorithm's global model (the server model, or the
        average of the clients) on ``inputs``/``targets``; each process takes its share."""
        fed, n = self.fed, len(targets)
        share = fed.share(n)
        acc, loss = evaluate_stack(self.oracle,
                                   self.algorithm.global_model(state).unsqueeze(0),
                                   inputs[share], targets[share],
                                   batch_size=self.config.eval.batch_size)
        weight = (share.stop - share.start) / n
        acc, loss = fed.total(torch.stack([acc[0], loss[0]]) * weight).tolist()
        return acc, loss

    def generalization(self, state: State, size: int, test_acc: float,
                       test_loss: float) -> dict:
        """The generalization-gap columns (gossipfl.analysis.columns.generalization_gap:
        train minus test) of the global model, its train side measured on a fixed random
        subset of ``size`` training samples (the same every round)."""
        from gossipfl.analysis.columns import generalization_gap, train_subset

        data = self.dataset
        if size not in self._train_subsets:
            pick = train_subset(len(data.train_y), size, self.config.seed)
            self._train_subsets[size] = torch.as_tensor(pick, device=data.train_y.device)
        sub = self._train_subsets[size]
        train_acc, train_loss = self.global_fit(state, data.train_x[sub], data.train_y[sub])
        return generalization_gap(train_acc, train_loss, test_acc, test_loss)

    def personalized_models(self, state: State, t: int,
                            trained: torch.Tensor | None = None) -> torch.Tensor:
        """What the personalized protocol measures: the algorithm's personalized models, as
        they left local training (``trained``) or now, after its fine-tuning phases
        (FedBABU), if any, run in round ``t``'s ``finetune`` stream."""
        algo = self.algorithm
        models = algo.personalized_models(state) if trained is None else trained
        phases = algo.finetune_phases()
        if phases:
            work = Work(models.clone())
            self.trainer.train(t, work, phases, stream="finetune")
            models = work.y
        return models


def consensus_distance(x: torch.Tensor, fed: Federation) -> float:
    """(1/M) Σ_i ‖x_i − x̄‖² for the models ``x`` (the rows ``fed`` holds) and their mean;
    exactly 0, without touching M·P values, when every row is one tensor (a server model
    replicated to all clients: row stride 0)."""
    if fed.total(torch.tensor(float(x.stride(0) != 0), device=x.device)) == 0:
        return 0.0  # the same answer on every process (a block of one row may be a view)
    center = fed.mean(x)
    return float(fed.mean(squared_distances(x, center)))


def squared_distances(x: torch.Tensor, center: torch.Tensor) -> torch.Tensor:
    """``[M]`` ‖x_i − c‖², row by row (the same floats however the rows are chunked): on the
    CPU in chunks of ~4 MB through one reused buffer, so that x − c never leaves the cache
    (one pass over x: 10× faster than 64 MB chunks at 60 000 × 7 850); elsewhere ~64 MB."""
    width = max(1, x[0].numel())
    rows = max(1, (1 << (20 if x.device.type == "cpu" else 24)) // width)
    out = torch.empty(len(x), dtype=x.dtype, device=x.device)
    buffer = torch.empty((min(rows, len(x)), *x.shape[1:]), dtype=x.dtype, device=x.device)
    for i in range(0, len(x), rows):
        chunk = x[i:i + rows]
        diff = buffer[:len(chunk)]
        torch.sub(chunk, center, out=diff)
        diff.mul_(diff)
        torch.sum(diff, dim=tuple(range(1, diff.dim())), out=out[i:i + len(chunk)])
    return out
