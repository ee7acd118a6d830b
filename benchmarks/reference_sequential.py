"""A sequential DFedAvg / DFedSAM / FedAvg round in the style of today's (D)FL research code.

The structure of the papers' public code and of sequential FL frameworks: one ``nn.Module`` per
client, trained one client after the other; a new ``torch.optim.SGD`` and a new ``DataLoader``
per client every round; synchronous neighbour averaging over ``state_dict`` snapshots in Python
loops (FedAvg: the server model copied into each sampled client's module, and the trained
modules' ``state_dict``s averaged with weights n_i / Σ n_j); the average (or server) model
evaluated every round. Our own straightforward implementation, built
from the same :class:`gossipfl.core.runner.Experiment` as gossipfl (same data, partition, initial
model, mixing matrix W, FedAvg's sampled clients, learning rate, decay, weight decay, batch size,
local epochs/steps), so that only the way of computing differs.

Run ``python -m benchmarks.reference_sequential --rounds 3`` to compare its test accuracy with
gossipfl's on the same config (they use different minibatch orders, so they agree in
distribution, not bit for bit).
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Collection, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.common import Stopwatch, set_threads
from gossipfl.assembly.loading import load_config
from gossipfl.common.rng import derive_seed
from gossipfl.config import Config
from gossipfl.core.runner import Experiment, Runner, build_experiment

ALGORITHMS = ("dfedavg", "dfedsam", "fedavg")


class SequentialReference:
    """DFedAvg (train, then gossip x_i ← Σ_j w_ij z_j), DFedSAM, or FedAvg (the sampled
    clients train from the server model, the server averages them), one client at a time.
    A subclass that trains other algorithms lists them in ``algorithms``."""

    algorithms: tuple[str, ...] = ALGORITHMS

    def __init__(self, config: Config, exp: Experiment | None = None):
        if config.algorithm.name not in self.algorithms:
            raise ValueError(f"the reference implements {self.algorithms}, not "
                             f"{config.algorithm.name!r}")
        exp = exp if exp is not None else build_experiment(config)
        self.config, self.device = config, exp.device
        self.topology = exp.topology
        self.rho = getattr(config.algorithm.params, "rho", 0.0)
        self.sam = config.algorithm.name == "dfedsam"
        self.centralized = config.algorithm.name == "fedavg"
        self.gossip_steps = getattr(config.algorithm.params, "gossip_steps", 1)
        self.fed = exp.fed  # FedAvg's client sampling: the same clients as gossipfl
        self.sizes = [len(ix) for ix in exp.parts]
        self.client_steps = 0  # minibatch steps trained, all clients together
        data = exp.dataset
        self.client_data = [(data.train_x[torch.as_tensor(ix, device=data.train_x.device)],
                             data.train_y[torch.as_tensor(ix, device=data.train_y.device)])
                            for ix in exp.parts]
        self.test = (data.test_x, data.test_y)
        self.models: list[nn.Module] = []
        for i in range(1 if self.centralized else len(exp.parts)):  # FedAvg: the server's
            model = copy.deepcopy(exp.model)
            exp.layout.load_into(model, exp.x0[i])
            self.models.append(model)
        self.worker = copy.deepcopy(exp.model)  # FedAvg: the module a sampled client trains
        self.eval_model = copy.deepcopy(exp.model)
        self.watch = Stopwatch(self.device)

    # -- one round ---------------------------------------------------------------------------
    def lr(self, t: int) -> float:
        return self.config.train.lr * self.config.train.lr_decay ** t

    def loader(self, t: int, i: int) -> DataLoader:
        """Client i's shuffled minibatches for round t (a new DataLoader, as research code)."""
        x, y = self.client_data[i]
        gen = torch.Generator().manual_seed(derive_seed(self.config.seed, "reference", t, i))
        batch = self.config.train.batch_size
        batch = len(y) if batch == "full" else batch
        return DataLoader(TensorDataset(x, y), batch_size=batch, shuffle=True, generator=gen)

    def batches(self, t: int, i: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Local epochs (or ``local_steps`` batches, cycling) of client i; fetching is timed
        as "data"."""
        train = self.config.train
        steps = train.local_steps
        done = 0
        for _ in range(10**9 if steps else train.local_epochs):
            iterator = iter(self.loader(t, i))
            while True:
                with self.watch.section("data"):
                    item = next(iterator, None)
                    if item is not None:
                        item = (item[0].to(self.device), item[1].to(self.device))
                if item is None:
                    break
                yield item
                done += 1
                if steps and done >= steps:
                    return

    def train_client(self, t: int, i: int, model: nn.Module) -> None:
        model.train()
        optimizer = torch.optim.SGD(model.parameters(), lr=self.lr(t),
                                    weight_decay=self.config.train.weight_decay)
        for x, y in self.batches(t, i):
            self.client_steps += 1
            with self.watch.section("local"):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                if self.sam:
                    self._sam_gradient(model, x, y)
                optimizer.step()

    def _sam_gradient(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
        """Replace .grad by the gradient at w + ρ g/‖g‖ (the usual two-pass SAM step)."""
        params = [p for p in model.parameters() if p.grad is not None]
        norm = torch.sqrt(sum((p.grad ** 2).sum() for p in params)).clamp_min(1e-12)
        shifts = []
        with torch.no_grad():
            for p in params:
                e = self.rho * p.grad / norm
                p.add_(e)
                shifts.append(e)
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        with torch.no_grad():
            for p, e in zip(params, shifts, strict=True):
                p.sub_(e)

    def gossip(self, t: int, keys: Collection[str] | None = None) -> None:
        """x_i ← Σ_j w_ij z_j over state_dict snapshots, Q times; with ``keys``, only those
        entries of the state_dict are sent and mixed (the others stay the client's own)."""
        W = self.topology.matrix(t)
        for _ in range(self.gossip_steps):
            states = [copy.deepcopy(m.state_dict()) for m in self.models]
            for i, model in enumerate(self.models):
                mixed = dict(states[i])
                for key in states[i] if keys is None else keys:
                    mixed[key] = sum(float(W[i, j]) * states[j][key]
                                     for j in range(len(states)) if W[i, j] != 0)
                model.load_state_dict(mixed)

    def fedavg(self, t: int) -> None:
        """One FedAvg round: each sampled client trains a copy of the server model; the server
        takes Σ_i p_i x_i, p_i = n_i / Σ_j n_j over the sampled clients (global lr 1)."""
        server = self.models[0]
        clients = self.fed.sample(t, self.config.algorithm.params.participation).tolist()
        total = sum(self.sizes[i] for i in clients)
        start = copy.deepcopy(server.state_dict())
        average = {k: torch.zeros_like(v) for k, v in start.items()}
        for i in clients:
            self.worker.load_state_dict(start)
            self.train_client(t, i, self.worker)
            with self.watch.section("gossip"):
                for key, value in self.worker.state_dict().items():
                    average[key] += self.sizes[i] / total * value
        server.load_state_dict(average)

    def run_round(self, t: int) -> dict[str, float]:
        """Train every client, then gossip (FedAvg: the sampled clients, then the server
        average); returns the round's time split (seconds, "gossip" = communication)."""
        start = time.perf_counter()
        if self.centralized:
            self.fedavg(t)
        else:
            for i, model in enumerate(self.models):
                self.train_client(t, i, model)
            with self.watch.section("gossip"):
                self.gossip(t)
        split = self.watch.reset()
        split["total"] = time.perf_counter() - start
        return split

    # -- evaluation --------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, batch_size: int = 1000) -> dict[str, float]:
        """Accuracy and loss of the average model on the test set."""
        states = [m.state_dict() for m in self.models]
        average = {k: sum(s[k] for s in states) / len(states) for k in states[0]}
        self.eval_model.load_state_dict(average)
        self.eval_model.eval()
        x, y = self.test
        correct, loss = 0.0, 0.0
        for xb, yb in DataLoader(TensorDataset(x, y), batch_size=batch_size):
            out = self.eval_model(xb.to(self.device))
            correct += float((out.argmax(1) == yb.to(self.device)).sum())
            loss += float(F.cross_entropy(out, yb.to(self.device), reduction="sum"))
        return {"test_acc": correct / len(y), "test_loss": loss / len(y)}


def benchmark_config(model: str = "cnn", clients: int = 100, batch_size: int = 32,
                     algorithm: str = "dfedavg", oracle: str = "auto",
                     local_steps: int | None = None, **data) -> Config:
    """The config of the benchmarks: Fashion-MNIST (iid, n_i = 60000/M), ring topology,
    1 local epoch (or ``local_steps``), lr 0.1, only the average model evaluated."""
    train = {"rounds": 1, "batch_size": batch_size, "lr": 0.1,
             **({"local_steps": local_steps} if local_steps else {"local_epochs": 1})}
    return load_config({
        "data": {"dataset": "fashion_mnist", "clients": clients, "partition": "iid", **data},
        "model": {"name": model}, "topology": {"name": "ring"},
        "algorithm": {"name": algorithm}, "train": train,
        "eval": {"local_models": False}, "engine": {"oracle": oracle},
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--algorithm", default="dfedavg", choices=ALGORITHMS)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    set_threads(args.threads)
    config = benchmark_config(args.model, args.clients, args.batch_size, args.algorithm)
    runner = Runner(config)
    reference = SequentialReference(config, build_experiment(config))
    print("round  gossipfl_acc  reference_acc  gossipfl_s  reference_s")
    for t in range(args.rounds):
        with torch.no_grad():
            start = time.perf_counter()
            runner.run_round(t)
            ours_s = time.perf_counter() - start
            ours = runner.evaluate()["test_acc"]
        ref_s = reference.run_round(t)["total"]
        ref = reference.evaluate()["test_acc"]
        print(f"{t + 1:5d}  {ours:12.4f}  {ref:13.4f}  {ours_s:10.1f}  {ref_s:11.1f}", flush=True)


if __name__ == "__main__":
    main()
