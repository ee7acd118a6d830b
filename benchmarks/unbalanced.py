"""Unbalanced clients and partial participation: gossipfl against the sequential reference
(benchmarks/reference_sequential.py) on the task of issue 11.

Fashion-MNIST, MLP 784-200-200-10, Dirichlet(0.3) labels with equal sizes
(``data.balanced=true``) or natural sizes (``data.balanced=false``), 1 local epoch, batch 32,
lr 0.1. Cases: FedAvg at 10 % and 100 % participation and DFedAvg (ring) on 100 clients, and
FedAvg at 2 % and 100 % of 500 clients. Every implementation of a case is built once; then
the rounds run interleaved (gossipfl, reference, gossipfl, reference, …); the first round is a
warm-up, the others give the median (min–max).

Reported per round: seconds (wall-clock, or with ``--clock cpu`` this process's CPU time) of
training and communication (evaluation apart), of local training alone, client-steps computed against the steps one epoch needs (Σ_i ⌈n_i / B⌉ over
the clients that train), and the test accuracy after the last round (the two implementations
draw different minibatches, so accuracies agree in distribution, not bit for bit).

    python -m benchmarks.unbalanced --rounds 4          # a few minutes on 2 cores

OMP_WAIT_POLICY=PASSIVE is set (as in round_time.py): spinning OpenMP threads on a shared
machine lose whole scheduler slices.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP

import argparse
from dataclasses import dataclass

import torch

from benchmarks.common import CLOCKS, load_average, markdown_table, median, spread, start_cpu_run
from benchmarks.reference_sequential import SequentialReference
from gossipfl.assembly.loading import load_config
from gossipfl.config import Config
from gossipfl.core.runner import Runner, build_experiment

PARTITIONS = {"equal": True, "natural": False}  # data.balanced


@dataclass(frozen=True)
class Case:
    algorithm: str  # fedavg | dfedavg
    partition: str  # equal | natural
    participation: float = 1.0
    clients: int = 100

    @property
    def name(self) -> str:
        share = "" if self.algorithm == "dfedavg" else f" {self.participation:.0%}"
        return f"{self.algorithm}{share}, M={self.clients}, {self.partition} sizes"

    def config(self) -> Config:
        algorithm: dict = {"name": self.algorithm}
        if self.algorithm == "fedavg":
            algorithm["participation"] = self.participation
        return load_config({
            "data": {"dataset": "fashion_mnist", "clients": self.clients,
                     "partition": "dirichlet", "alpha": 0.3,
                     "balanced": PARTITIONS[self.partition]},
            "model": {"name": "mlp", "options": {"hidden": [200, 200]}},
            "topology": {"name": "ring"}, "algorithm": algorithm,
            "train": {"rounds": 1000, "local_epochs": 1, "batch_size": 32, "lr": 0.1},
            "eval": {"local_models": False},
        })


def groups() -> list[list[Case]]:
    """Cases whose rounds are interleaved with each other (so their ratios are measured
    together): one group per partition and number of clients."""
    out = []
    for clients, partial, dfedavg in ((100, 0.1, True), (500, 0.02, False)):
        for partition in PARTITIONS:
            group = [Case("fedavg", partition, partial, clients),
                     Case("fedavg", partition, 1.0, clients)]
            out.append(group + ([Case("dfedavg", partition, 1.0, clients)] if dfedavg else []))
    return out


class Timed:
    """One implementation: ``train(t)`` runs a round (training and communication), ``local``
    is the name of its method that trains clients (timed apart), ``evaluate()`` the test
    accuracy of its average / server model, ``steps()`` its client-steps so far."""

    def __init__(self, target, local: str, clock: str):
        self.clock, self.local = CLOCKS[clock], 0.0
        self.target = target
        inner = getattr(target, local)

        def timed(*args):
            start = self.clock()
            out = inner(*args)
            self.local += self.clock() - start
            return out

        setattr(target, local, timed)

    def round(self, t: int) -> dict:
        self.local, steps = 0.0, self.steps()
        start = self.clock()
        self.train(t)
        total = self.clock() - start
        start = self.clock()
        acc = self.evaluate()
        return {"total": total, "local": self.local, "eval": self.clock() - start,
                "steps": self.steps() - steps, "acc": acc}


class Ours(Timed):
    """gossipfl's Runner; local training is its trainer's ``train``."""

    def __init__(self, config: Config, clock: str):
        self.runner = Runner(config)
        super().__init__(self.runner.trainer, "train", clock)
        self.train = torch.no_grad()(self.runner.run_round)
        self.evaluate = torch.no_grad()(lambda: self.runner.evaluate()["test_acc"])
        self.steps = lambda: self.runner.client_steps


class Reference(Timed):
    """The sequential reference; local training is ``train_client`` (batches included)."""

    def __init__(self, config: Config, clock: str):
        self.ref = SequentialReference(config, build_experiment(config))
        super().__init__(self.ref, "train_client", clock)
        self.train = self.ref.run_round
        self.evaluate = lambda: self.ref.evaluate()["test_acc"]
        self.steps = lambda: self.ref.client_steps


def needed_steps(runner: Runner, case: Case, t: int) -> int:
    """Σ_i ⌈n_i / B⌉ over round t's training clients (one local epoch)."""
    exp = runner.exp
    clients = exp.fed.sample(t, case.participation) if case.algorithm == "fedavg" else None
    return int(exp.sampler.batches_per_epoch(clients).sum())


def run_group(cases: list[Case], rounds: int, clock: str) -> list[dict]:
    """Each case's implementations, all rounds interleaved across the group."""
    impls = {case: {"gossipfl": Ours(case.config(), clock),
                    "reference": Reference(case.config(), clock)} for case in cases}
    rows = {case: {name: [] for name in impls[case]} for case in cases}
    needed = {case: [] for case in cases}
    for t in range(rounds):
        for case in cases:
            needed[case].append(needed_steps(impls[case]["gossipfl"].runner, case, t))
            for name, impl in impls[case].items():
                row = impl.round(t)
                rows[case][name].append(row)
                print(f"  {case.name:34s} {name:9s} round {t}: {row['total']:.2f} s, local "
                      f"{row['local']:.2f} s, steps {row['steps']}/{needed[case][-1]} "
                      f"(load {load_average():.1f})", flush=True)
    skip = 1 if rounds > 1 else 0  # round 0: warm-up
    return [{"case": case, "rows": {n: r[skip:] for n, r in rows[case].items()},
             "needed": sum(needed[case][skip:]),
             "acc": {n: r[-1]["acc"] for n, r in rows[case].items()}} for case in cases]


def report(results: list[dict]) -> str:
    table = []
    for res in results:
        case, rows = res["case"], res["rows"]
        totals = {n: [r["total"] for r in v] for n, v in rows.items()}
        speedup = median(totals["reference"]) / median(totals["gossipfl"])
        for name, values in rows.items():
            steps = sum(r["steps"] for r in values)
            table.append([
                case.name, name, spread(totals[name]),
                spread([r["local"] for r in values]),
                f"{median([r['eval'] for r in values]):.2f}",
                f"{steps}/{res['needed']} = {steps / res['needed']:.2f}",
                f"{res['acc'][name]:.3f}",
                f"{speedup:.2f}×" if name == "gossipfl" else "1.00×"])
    lines = [markdown_table(["case", "implementation", "s / round (train + comm.)",
                             "local training s", "eval s", "client-steps done/needed",
                             "test acc", "vs reference"], table), ""]
    local = {(r["case"].algorithm, r["case"].partition, r["case"].clients,
              r["case"].participation): median([x["local"] for x in r["rows"]["gossipfl"]])
             for r in results}
    share = []
    for (algo, partition, clients, part), seconds in local.items():
        full = local.get((algo, partition, clients, 1.0))
        if algo == "fedavg" and part < 1 and full:
            share.append([f"{part:.0%} of {clients}", partition, f"{seconds:.3f}",
                          f"{full:.3f}", f"{seconds / full:.1%}"])
    lines.append(markdown_table(["participation", "sizes", "local s (partial)",
                                 "local s (100 %)", "partial / full"], share))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="per case; the first is warm-up")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--only", default=None, help="run the cases whose name holds this")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="wall-clock, or this process's CPU time (steadier on a machine "
                             "shared with other jobs; use it with --threads 1)")
    args = parser.parse_args()
    start_cpu_run(args.threads)
    results = []
    for group in groups():
        chosen = [c for c in group if args.only is None or args.only in c.name]
        results += run_group(chosen, args.rounds, args.clock) if chosen else []
    print(f"\nclock: {args.clock}; load average now {load_average():.1f}")
    print(report(results), flush=True)


if __name__ == "__main__":
    main()
