"""One round of DFedSMDC: gossipfl against the sequential style of research code (issue 13).

The task of ``examples/studies/fmnist_personalized.yaml``: Fashion-MNIST, 100 clients,
Dirichlet(0.3) labels, the MLP 784-64-10 whose last Linear is the personal head (body
784-64, head 64-10; ``--model cnn``: the cnn, head = its last Linear), the papers' random
topology (10 neighbours per round, uniform weights), lr 0.1 × 0.998^t, momentum 0.9, weight
decay 5e-4, batch 32. DFedSMDC (``sam: body``): per client, K_v = 1 epoch on the head (body
frozen, lr 0.001), then K_u = 10 SAM steps on the body (``--local-epochs E``: E epochs; ρ
over the body gradient only, both gradients on the same minibatch; head frozen), then the
bodies are gossiped with the round's W; the head is never sent.

Two implementations of the same round, interleaved (gossipfl, reference, gossipfl, ...) in
one process:

- ``gossipfl``: :meth:`gossipfl.core.runner.Runner.run_round`, what ``gossipfl run`` does every
  round (all clients as rows of the ``[M, P]`` stack, local steps batched);
- ``reference``: :class:`DecoupledReference`, research code's style: a list of M
  ``nn.Module`` copies; per client and phase, ``requires_grad`` switched to the phase's
  parameters, a new ``torch.optim.SGD`` (momentum, weight decay) and a ``DataLoader``; the
  head epoch, then the body's SAM steps one by one (two backward passes); then the bodies'
  ``state_dict`` entries averaged over the neighbours with W's weights in Python loops.

The reference is fed the minibatches gossipfl draws (the sampler's index batches of the
round, replayed through each client's ``DataLoader`` as its ``batch_sampler``; computing them
is not timed), so the two compute the same models: the maximum absolute difference of all
M × P parameters is printed after every round. The first round is a warm-up; the table gives
the median (min–max) of the others, and the medians of the round's parts: the head phase,
the body phase (each with its minibatch sampling or loading) and the rest (the gossip;
gossipfl: also the round's copy of the models).

    python -m benchmarks.personalized --threads 1 --clock cpu
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP

import argparse
import warnings
from collections.abc import Iterator
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.common import CLOCKS, load_average, markdown_table, median, spread, start_cpu_run
from benchmarks.reference_sequential import SequentialReference
from gossipfl.assembly.loading import load_config
from gossipfl.config import Config
from gossipfl.core.runner import Experiment, Runner

IMPLEMENTATIONS = ("gossipfl", "reference")


def config(model: str = "mlp", clients: int = 100, local_epochs: int | None = None,
           rho: float = 0.7, oracle: str = "auto", device: str = "cpu") -> Config:
    """The study's base and its ``dfedsmdc`` (``sam: body``) entry."""
    train = {"rounds": 100, "batch_size": 32, "lr": 0.1, "lr_decay": 0.998, "momentum": 0.9,
             "weight_decay": 5.0e-4,
             **({"local_epochs": local_epochs} if local_epochs else {"local_steps": 10})}
    return load_config({
        "data": {"dataset": "fashion_mnist", "clients": clients, "partition": "dirichlet",
                 "alpha": 0.3, "local_test_size": 100},
        "model": {"name": "mlp", "options": {"hidden": [64]}} if model == "mlp"
        else {"name": model},
        "topology": {"name": "random_k", "k": 10, "mixing": "uniform"},
        "algorithm": {"name": "dfedsmdc", "head_epochs": 1, "rho": rho, "sam": "body"},
        "train": train,
        "eval": {"every": 10, "local_models": False, "personalized": True},
        "output": {"checkpoint_every": 0},
        "engine": {"oracle": oracle},
        "device": device,
    })


def replayed_batches(runner: Runner, t: int) -> list[list[list[list[int]]]]:
    """``[phase][client]``: the lists of training-set indices of the minibatches gossipfl's
    runner draws for each client in round t's phases (each client's rows are its own: the
    sampler hashes them from (seed, round, client, phase), whatever the other clients)."""
    exp = runner.exp
    if runner.trainer.augment_keys(t, torch.arange(1)) is not None:
        raise ValueError("replaying augmented minibatches is not implemented")
    rows = torch.arange(exp.fed.num_clients, device=exp.device)
    out = []
    for index, phase in enumerate(exp.algorithm.phases()):
        batches = runner.trainer.phase_batches(t, index, phase, rows)
        out.append([[idx[i][mask[i]].tolist() for idx, mask in batches if bool(mask[i].any())]
                    for i in range(len(rows))])
    return out


class DecoupledReference(SequentialReference):
    """DFedMDC / DFedSMDC one client at a time: head phase, body phase (SAM with the body's
    ρ), then gossip of the body entries of the ``state_dict``s. ``replay[phase][client]``:
    the round's minibatch index lists (:func:`replayed_batches`), set before each round."""

    algorithms = ("dfedmdc", "dfedsmdc")

    def __init__(self, config: Config, exp: Experiment):
        super().__init__(config, exp)
        params = config.algorithm.params
        self.head_lr, self.momentum = params.head_lr, params.momentum
        sam = getattr(params, "sam", "body")
        rho = getattr(params, "rho", 0.0)
        self.rho_head = rho if sam in ("head", "both") else 0.0
        self.rho_body = rho if sam in ("body", "both") else 0.0
        self.head = set(exp.env.groups.personal_names)
        self.body = [n for n, _ in exp.model.named_parameters() if n not in self.head]
        self.layout = exp.layout
        data = exp.dataset
        self.train_set = TensorDataset(data.train_x, data.train_y)
        self.replay: list[list[list[list[int]]]] = []
        self.clock = CLOCKS["wall"]
        self.phase_seconds = [0.0, 0.0]  # head, body: summed over the clients

    def replayed(self, phase: int, i: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Client i's minibatches of the phase, through a new DataLoader (timed as "data")."""
        iterator = iter(DataLoader(self.train_set, batch_sampler=self.replay[phase][i]))
        while True:
            with self.watch.section("data"):
                item = next(iterator, None)
            if item is None:
                return
            yield item[0].to(self.device), item[1].to(self.device)

    def train_client(self, t: int, i: int, model: torch.nn.Module) -> None:
        model.train()
        named = dict(model.named_parameters())
        decay = self.config.train.lr_decay ** t
        phases = ((self.head, self.head_lr * decay, self.rho_head),
                  (self.body, self.config.train.lr * decay, self.rho_body))
        for phase, (names, lr, rho) in enumerate(phases):
            start = self.clock()
            for name, param in named.items():
                param.requires_grad_(name in names)
            optimizer = torch.optim.SGD([named[n] for n in named if n in names], lr=lr,
                                        momentum=self.momentum,
                                        weight_decay=self.config.train.weight_decay)
            self.rho = rho
            for x, y in self.replayed(phase, i):
                self.client_steps += 1
                with self.watch.section("local"):
                    model.zero_grad()
                    F.cross_entropy(model(x), y).backward()
                    if rho:
                        self._sam_gradient(model, x, y)  # ‖g‖ over the phase's parameters
                    optimizer.step()
            self.phase_seconds[phase] += self.clock() - start
        for param in named.values():
            param.requires_grad_(True)

    def gossip(self, t: int, keys=None) -> None:
        super().gossip(t, self.body if keys is None else keys)  # the head is never sent

    def stack(self) -> torch.Tensor:
        """``[M, P]`` the clients' models, in gossipfl's layout."""
        return torch.stack([self.layout.flatten(m) for m in self.models])


class PhaseMarks:
    """The clock at the start of each of the algorithm's phases and of its communication:
    every phase's ``begin`` and the instance's ``end_round`` wrapped."""

    def __init__(self, algorithm, clock):
        self.times: list[float] = []
        phases, end_round = algorithm.phases, algorithm.end_round

        def mark(inner=None):
            def begin(ctx, work):
                self.times.append(clock())
                if inner is not None:
                    inner(ctx, work)
            return begin

        def marked_phases():
            return [replace(phase, begin=mark(phase.begin)) for phase in phases()]

        def marked_end_round(*args):
            self.times.append(clock())
            return end_round(*args)

        algorithm.phases, algorithm.end_round = marked_phases, marked_end_round

    def take(self) -> list[float]:
        """The head and body phases' seconds since the last call."""
        head, body, gossip = self.times
        self.times = []
        return [body - head, gossip - body]


def run(model: str, clients: int, local_epochs: int | None, rho: float, rounds: int,
        oracle: str, device: str, clock: str = "wall") -> tuple[list[list], dict]:
    """``rounds`` rounds of both implementations, interleaved; the first is a warm-up."""
    now = CLOCKS[clock]
    cfg = config(model, clients, local_epochs, rho, oracle, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = Runner(cfg)
    reference = DecoupledReference(cfg, runner.exp)
    reference.clock = now
    marks = PhaseMarks(runner.exp.algorithm, now)
    seconds: dict[str, list[float]] = {name: [] for name in IMPLEMENTATIONS}
    phases: dict[str, list[list[float]]] = {name: [] for name in IMPLEMENTATIONS}
    differences, loads = [], [load_average()]
    steps = 0
    for t in range(rounds):
        reference.replay = replayed_batches(runner, t)
        steps = sum(len(b) for phase in reference.replay for b in phase)
        for name in IMPLEMENTATIONS:
            start = now()
            if name == "gossipfl":
                with torch.no_grad():
                    runner.run_round(t)
                split = marks.take()
            else:
                reference.phase_seconds = [0.0, 0.0]
                reference.run_round(t)
                split = reference.phase_seconds
            if runner.exp.device.type == "cuda":
                torch.cuda.synchronize()
            elapsed = now() - start
            if t > 0:
                seconds[name].append(elapsed)
                phases[name].append([*split, elapsed - sum(split)])
        differences.append(float((runner.state["x"] - reference.stack())
                                 .abs().max()))
        loads.append(load_average())
        print(f"round {t}: gossipfl {round(seconds['gossipfl'][-1], 3) if t else '(warm-up)'}"
              f" reference {round(seconds['reference'][-1], 3) if t else '(warm-up)'}"
              f" max|diff| {differences[-1]:.2e}", flush=True)
    base = median(seconds["gossipfl"])
    rows = [[name, spread(seconds[name]),
             " / ".join(f"{median([r[k] for r in phases[name]]):.2f}" for k in range(3)),
             f"{median(seconds[name]) / base:.2f}×"]
            for name in IMPLEMENTATIONS]
    info = {"P": runner.exp.layout.P, "client-steps / round": steps,
            "max |gossipfl − reference| after round 1": f"{differences[0]:.2e}",
            f"after round {rounds}": f"{differences[-1]:.2e}",
            "reference / gossipfl": f"{median(seconds['reference']) / base:.2f}",
            "load": f"{min(loads):.1f}–{max(loads):.1f}"}
    return rows, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp", choices=("mlp", "cnn"),
                        help="mlp: 784-64-10 (the study's); cnn: the FL-lineage cnn")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--local-epochs", type=int, default=None,
                        help="body phase of E epochs instead of the study's 10 local steps")
    parser.add_argument("--rho", type=float, default=0.7)
    parser.add_argument("--reps", type=int, default=6,
                        help="timed rounds of each implementation (after one warm-up round)")
    parser.add_argument("--oracle", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall-clock, or this process's CPU time (steadier on a machine "
                             "shared with other jobs)")
    args = parser.parse_args()
    start_cpu_run(args.threads)
    rows, info = run(args.model, args.clients, args.local_epochs, args.rho, args.reps + 1,
                     args.oracle, args.device, args.clock)
    print(info)
    print(markdown_table(["implementation", f"{args.clock} s / round",
                          "head phase / body phase / rest (gossip)", "vs gossipfl"], rows))


if __name__ == "__main__":
    main()
