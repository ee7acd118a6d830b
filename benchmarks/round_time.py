"""Time a DFedAvg / DFedSAM round: gossipfl (stacked, vmap, loop oracles) against the
sequential reference (benchmarks/reference_sequential.py), interleaved in one process.

For every case, each implementation is built once; then the rounds run A, B, C, … , A, B, C, …
(``--reps`` times), each round followed by the evaluation of the average model, as the
research code does. Reported per implementation: median (min–max) seconds per round, the split
into local training / gossip / evaluation / data, achieved GFLOP/s (FLOPs counted by
``torch.utils.flop_counter`` on the plain model × samples actually trained) against the fp32
matmul peak measured in the same run, and the speed-up over the reference.

    python -m benchmarks.round_time --quick              # a few minutes
    python -m benchmarks.round_time --cases headline     # one group of the full run
    python -m benchmarks.round_time --memory             # peak memory per client (subprocesses)

OMP_WAIT_POLICY=PASSIVE is set unless ``--omp-spin``: on a machine shared with other jobs,
spinning OpenMP threads lose whole scheduler slices (measured 2–4× slower rounds under load).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and "--omp-spin" not in sys.argv:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts OpenMP

import argparse
import gc
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    Stopwatch,
    cifar_like,
    current_rss,
    flops_per_sample,
    load_average,
    machine,
    markdown_table,
    matmul_peak,
    median,
    peak_rss,
    set_threads,
    spread,
)
from benchmarks.reference_sequential import SequentialReference
from gossipfl.assembly.loading import load_config
from gossipfl.config import Config
from gossipfl.core.runner import Runner, build_experiment
from gossipfl.engine import keep_freed_memory
from gossipfl.models import build_model

IMPLEMENTATIONS = ("stacked", "vmap", "loop", "reference")
SECTIONS = ("local", "gossip", "eval", "data")


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One benchmark setting."""

    name: str
    model: str = "cnn"
    clients: int = 100
    batch_size: int = 32
    algorithm: str = "dfedavg"
    local_steps: int | None = None  # None: one local epoch
    data: str = "fashion_mnist"  # or "cifar_like" (random 3×32×32)
    impls: tuple[str, ...] = IMPLEMENTATIONS
    reps: int = 3
    isolate: bool = False  # one implementation at a time (when two would not fit in memory)
    extra: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)  # more train settings (e.g. weight_decay)

    def config(self, oracle: str) -> Config:
        train: dict[str, Any] = {"rounds": 1, "batch_size": self.batch_size, "lr": 0.1,
                                 **self.train}
        train.update({"local_steps": self.local_steps} if self.local_steps else
                     {"local_epochs": 1})
        data: dict[str, Any] = {"clients": self.clients, "partition": "iid"}
        if self.data == "cifar_like":
            data["tensors"] = cifar_like(train=max(50 * self.clients, 2000), test=1000)
        else:
            data["dataset"] = self.data
        return load_config({
            "data": data, "model": {"name": self.model}, "topology": {"name": "ring"},
            "algorithm": {"name": self.algorithm}, "train": train,
            "eval": {"local_models": False}, "engine": {"oracle": oracle}, **self.extra,
        })


def cases(full: bool) -> dict[str, list[Case]]:
    """Groups of cases: the full run, or (``full=False``) a few-minute subset."""
    if not full:
        return {
            "quick": [
                Case("mlp, epoch", model="mlp", impls=("stacked", "loop", "reference")),
                Case("cnn, 2 steps", local_steps=2, impls=("stacked", "vmap", "loop",
                                                           "reference")),
                Case("resnet18, 1 step", model="resnet18", clients=4, batch_size=16,
                     local_steps=1, data="cifar_like", reps=2,
                     impls=("stacked", "loop", "reference")),
            ],
        }
    scaling = [Case(f"cnn M={m} B={b}", clients=m, batch_size=b, local_steps=1,
                    impls=("stacked", "loop", "reference"), reps=3, isolate=m >= 1000)
               for b in (32, 128) for m in (10, 100, 1000) if m * b <= 32000]
    return {
        "headline": [
            Case("mlp, 1 epoch", model="mlp"),
            Case("cnn, 1 epoch", impls=("stacked", "loop", "reference")),
        ],
        "vmap": [Case("cnn, 3 steps (vmap)", local_steps=3, reps=2)],
        "sam": [Case("cnn DFedSAM, 3 steps", algorithm="dfedsam", local_steps=3,
                     impls=("stacked", "loop", "reference"))],
        "sam-mlp": [Case("mlp DFedAvg, 1 epoch", model="mlp", impls=("stacked", "reference")),
                    Case("mlp DFedSAM, 1 epoch", model="mlp", algorithm="dfedsam",
                         impls=("stacked", "reference"))],
        "scaling": scaling,
        "resnet": [Case("resnet18 M=10 B=32, 1 step", model="resnet18", clients=10,
                        local_steps=1, data="cifar_like", reps=2,
                        impls=("stacked", "vmap", "loop", "reference"))],
    }


# --------------------------------------------------------------------------------------------
# Implementations under a common interface
# --------------------------------------------------------------------------------------------
class GossipflRound:
    """gossipfl's Runner with one oracle; its phases timed by wrapping its methods."""

    def __init__(self, config: Config):
        self.runner = Runner(config)
        exp = self.runner.exp
        self.watch = Stopwatch(exp.device)
        self.samples = 0
        trainer = self.runner.trainer
        make_batch = trainer.make_batch

        def counted_batch(*args, **kwargs):
            batch = make_batch(*args, **kwargs)
            self.samples += int(batch.mask.sum())
            return batch

        trainer.phase_batches = self.watch.wrap("data", trainer.phase_batches)
        trainer.make_batch = self.watch.wrap("data", counted_batch)
        trainer.local_step = self.watch.wrap("local", trainer.local_step)
        exp.algorithm.end_round = self.watch.wrap("gossip", exp.algorithm.end_round)
        exp.oracle.loss_and_grad = self.watch.wrap("oracle", exp.oracle.loss_and_grad)

    def round(self, t: int) -> dict[str, float]:
        self.samples = 0
        start = time.perf_counter()
        with torch.no_grad():
            self.runner.run_round(t)
            with self.watch.section("eval"):
                acc = self.runner.evaluate()["test_acc"]
        split = self.watch.reset()
        split.update(total=time.perf_counter() - start, samples=self.samples, acc=acc)
        return split


class ReferenceRound:
    """The sequential reference with the same interface."""

    def __init__(self, config: Config):
        self.ref = SequentialReference(config, build_experiment(config))
        self.samples_per_round = None

    def round(self, t: int) -> dict[str, float]:
        samples = [0]
        batches = self.ref.batches

        def counted(t_, i):
            for x, y in batches(t_, i):
                samples[0] += len(y)
                yield x, y

        self.ref.batches = counted
        start = time.perf_counter()
        split = self.ref.run_round(t)
        with self.ref.watch.section("eval"):
            acc = self.ref.evaluate()["test_acc"]
        split.update(self.ref.watch.reset())
        split.pop("total")
        split.update(total=time.perf_counter() - start, samples=samples[0], acc=acc)
        self.ref.batches = batches
        return split


def build(impl: str, case: Case) -> GossipflRound | ReferenceRound:
    if impl == "reference":
        return ReferenceRound(case.config("loop"))
    return GossipflRound(case.config(impl))


# --------------------------------------------------------------------------------------------
# Running a case
# --------------------------------------------------------------------------------------------
def _timed_round(run: GossipflRound | ReferenceRound, rep: int, case: Case,
                 impl: str) -> dict[str, float]:
    row = run.round(rep)
    print(f"  {case.name:28s} {impl:9s} rep {rep}: {row['total']:.2f} s "
          f"(load {load_average():.1f})", flush=True)
    return row


def run_case(case: Case, impls: tuple[str, ...], device: torch.device) -> dict[str, Any]:
    """Repetitions of every implementation (interleaved unless ``case.isolate``); statistics
    per implementation. The matmul peak is measured just before and after the case (the best
    of the two is used: other jobs on the machine change it)."""
    peak = matmul_peak(device)
    load = [load_average()]
    config = case.config("loop")
    dataset = config.data.tensors
    shape = dataset.input_shape if dataset is not None else (1, 28, 28)
    model = build_model(case.model, shape, 10)
    train_flops, forward_flops = flops_per_sample(model, shape, 10)
    test_samples = len(dataset.test_y) if dataset is not None else 10000
    per_sample = train_flops * (2 if case.algorithm == "dfedsam" else 1)
    rows = {impl: [] for impl in impls}
    if case.isolate:  # build, time and free each implementation in turn
        for impl in impls:
            run = build(impl, case)
            for rep in range(case.reps):
                rows[impl].append(_timed_round(run, rep, case, impl))
            del run
            gc.collect()
    else:  # interleaved: A, B, C, B, C, A, ... (rotating who goes first)
        runs = {impl: build(impl, case) for impl in impls}
        for rep in range(case.reps):
            for impl in impls[rep % len(impls):] + impls[:rep % len(impls)]:
                rows[impl].append(_timed_round(runs[impl], rep, case, impl))
    peak = max(peak, matmul_peak(device))
    load.append(load_average())
    result = {"case": case.__dict__ | {"impls": list(impls)}, "impls": {},
              "matmul_peak_gflops": peak, "load_average": load}
    for impl, reps in rows.items():
        flop = [r["samples"] * per_sample + test_samples * forward_flops for r in reps]
        gflops = [f / r["total"] / 1e9 for f, r in zip(flop, reps, strict=True)]
        result["impls"][impl] = {
            "total": [r["total"] for r in reps],
            **{s: [r.get(s, 0.0) for r in reps] for s in (*SECTIONS, "oracle")},
            "gflops": gflops, "peak_fraction": [g / peak for g in gflops],
            "samples": reps[-1]["samples"], "acc": [r["acc"] for r in reps],
        }
    return result


def table(result: dict[str, Any]) -> str:
    """Markdown rows: one per implementation."""
    impls = result["impls"]
    ref = median(impls["reference"]["total"]) if "reference" in impls else None
    rows = []
    for impl, r in impls.items():
        total = median(r["total"])
        split = " / ".join(f"{median(r[s]):.2f}" for s in SECTIONS)
        rows.append([
            result["case"]["name"], f"{result['matmul_peak_gflops']:.0f}",
            "–".join(f"{x:.1f}" for x in result["load_average"]), impl, spread(r["total"]), split,
            f"{median(r['gflops']):.0f}", f"{100 * median(r['peak_fraction']):.0f}%",
            f"{ref / total:.2f}×" if ref else "–",
        ])
    return markdown_table(["case", "peak GFLOP/s", "load", "implementation", "s / round",
                           "local / gossip / eval / data",
                           "GFLOP/s", "of peak", "vs reference"], rows)


# --------------------------------------------------------------------------------------------
# Memory (one subprocess per measurement, so that peaks do not mix)
# --------------------------------------------------------------------------------------------
def memory_child(impl: str, model: str, clients: int, batch: int) -> None:
    """Build one implementation, run one 1-step round; print RSS figures as JSON."""
    case = Case("memory", model=model, clients=clients, batch_size=batch, local_steps=1)
    config = case.config("loop" if impl == "reference" else impl)
    exp = build_experiment(config)  # load the data once: its pages are reused below
    del exp
    gc.collect()
    base = current_rss()
    run = build(impl, case)
    run.round(0)
    P = sum(p.numel() for p in build_model(model, (1, 28, 28), 10).parameters())
    print(json.dumps({"impl": impl, "clients": clients, "base": base, "peak": peak_rss(),
                      "P": P}))


def memory_table(clients: list[int], impls: tuple[str, ...], model: str) -> str:
    rows = []
    for m in clients:
        for impl in impls:
            cmd = [sys.executable, "-m", "benchmarks.round_time", "--memory-child",
                   impl, model, str(m), "32"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                rows.append([model, m, impl, "failed", out.stderr.strip().splitlines()[-1:]])
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            per = (r["peak"] - r["base"]) / m
            rows.append([model, m, impl, f"{r['peak'] / 2**30:.2f}",
                         f"{per / 2**20:.2f} MiB ({per / (4 * r['P']):.1f}× 4P)"])
            print(rows[-1], flush=True)
    return markdown_table(["model", "M", "implementation", "peak RSS GiB",
                           "(peak − data) per client"], rows)


# --------------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few-minute subset")
    parser.add_argument("--cases", default="", help="comma-separated groups of the full run")
    parser.add_argument("--impls", default=",".join(IMPLEMENTATIONS))
    parser.add_argument("--reps", type=int, default=None, help="override repetitions")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-keep-memory", action="store_true",
                        help="leave glibc's default (unmap freed large blocks)")
    parser.add_argument("--omp-spin", action="store_true", help="keep OpenMP's default")
    parser.add_argument("--memory", action="store_true", help="peak memory per client")
    parser.add_argument("--memory-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="benchmarks/results/round_time.jsonl")
    args = parser.parse_args()
    set_threads(args.threads)
    if not args.no_keep_memory:
        keep_freed_memory()
    if args.memory_child:
        impl, model, clients, batch = args.memory_child
        memory_child(impl, model, int(clients), int(batch))
        return
    device = torch.device(args.device)
    print(json.dumps(machine(device)), flush=True)
    if args.memory:
        print(memory_table([10, 100, 1000], ("stacked", "loop", "reference"), "cnn"))
        return
    groups = cases(full=not args.quick)
    wanted = [g for g in args.cases.split(",") if g] or list(groups)
    chosen = [c for g in wanted for c in groups[g]]
    impls = tuple(i for i in args.impls.split(",") if i)
    results = []
    for case in chosen:
        if args.reps:
            case.reps = args.reps
        if args.device != "cpu":
            case.extra = {"device": args.device}
        result = run_case(case, tuple(i for i in case.impls if i in impls), device)
        results.append(result)
        print(table(result), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as f:
        f.write(json.dumps({"machine": machine(device),
                            "keep_freed_memory": not args.no_keep_memory,
                            "results": results}) + "\n")
    print("\n\n".join(table(r) for r in results))


if __name__ == "__main__":
    main()
