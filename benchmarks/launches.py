"""What a small model's round costs the host: device operations launched and host time, for
one run alone and for a packed study of 8 runs (``gossipfl sweep --pack``), on the CPU.

A small model's GPU round is launch-bound (issue 48): the device waits for the host, which
spends its time launching operations (each a kernel on a GPU) and in the Python around
them. Both are counted here on the CPU, where they are the same code:

- **operations** a round dispatches, counted with a ``TorchDispatchMode`` (views, which launch
  nothing, left out), per round and per local step (the difference between a round of 2
  and of 4 local steps, halved);
- **host time** of a round of an mlp so small (16 features, 8 hidden units) that its
  arithmetic is negligible, one thread: what the host does per round, which bounds a
  launch-bound GPU round from below.

A run of clients of unequal data over whole epochs (a ragged phase: at step k only the
clients with a minibatch left step) is counted too, step by step and with its phase a graph.

With its local phase replayed from one graph (``engine.cuda_graphs`` on a GPU,
:mod:`gossipfl.schedules.phase_graph`), a run launches the graph once a phase: the mode
``alone, phase graph`` records the phase with the CPU's stand-in of a CUDA graph
(:class:`gossipfl.engine.compiled.TracedGraph`) and counts each replay as one launch, the
operations around it as they are. Its host time is not measured: on the CPU a replay runs the
recorded operations one by one.

The study: DFedAvg on a ring of 20 clients, iid, batch 32, ``--steps`` local steps; packed,
4 seeds x 2 learning rates (the learning rates differ: each row steps at its run's rate,
``gossipfl.studies.packing.joint.PackedTrainer.row_rates``). The host times alternate alone (the 8 runs one
after the other) and packed, best of ``--repeats``; time it on a quiet machine.

    PYTHONPATH=src python -m benchmarks.launches --out benchmarks/results/launches.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import time
import warnings

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.data import from_tensors
from gossipfl.engine.compiled import TracedGraph
from gossipfl.schedules.phase_graph import PhaseGraphs
from gossipfl.studies.packing.joint import Pack

#: dispatched operations that launch no kernel besides the views
NO_KERNEL = frozenset({"empty", "empty_strided", "detach", "lift_fresh"})


class Launches(TorchDispatchMode):
    """Counts the dispatched operations that launch work (not views) by name; a graph's
    replay (:class:`OneLaunch`) counts as one."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not func.is_view and name not in NO_KERNEL and not OneLaunch.replaying:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


class OneLaunch(TracedGraph):
    """The CPU's stand-in of a CUDA graph, whose replay a :class:`Launches` counts as the one
    launch a CUDA graph's replay is (its static inputs' copies counted as they are)."""

    replaying = False

    def replay(self):
        OneLaunch.replaying = True
        try:
            self.outputs = self.trace(*self.inputs)
        finally:
            OneLaunch.replaying = False
        torch.empty(1).zero_()  # the graph's launch, counted as one operation
        return self.outputs


def data(features: int):
    gen = torch.Generator().manual_seed(0)
    return from_tensors(torch.randn(2000, features, generator=gen),
                        torch.randint(0, 10, (2000,), generator=gen),
                        torch.randn(100, features, generator=gen),
                        torch.randint(0, 10, (100,), generator=gen))


def runner(tensors, seed: int, lr: float, steps: int, hidden: int) -> Runner:
    config = {"data": {"tensors": tensors, "clients": 20, "partition": "iid"},
              "model": {"name": "mlp", "options": {"hidden": [hidden]}},
              "topology": {"name": "ring"}, "algorithm": {"name": "dfedavg"},
              "train": {"rounds": 1000, "batch_size": 32, "lr": lr, "local_steps": steps},
              "eval": {"local_models": False, "every": 100000}, "device": "cpu",
              "seed": seed}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Runner(load_config(config))


def study(steps: int, hidden: int = 8, features: int = 16):
    """(the 8 runs alone, the same 8 packed)."""
    tensors = data(features)
    specs = [(seed, lr) for seed in range(4) for lr in (0.05, 0.1)]
    alone = [runner(tensors, s, lr, steps, hidden) for s, lr in specs]
    packed = Pack([runner(tensors, s, lr, steps, hidden) for s, lr in specs])
    return alone, packed


def count(steps: int) -> dict[str, int]:
    """Operations of round 1 (round 0 warms up and records): one run alone and the packed 8,
    each also with its phase replayed from a graph."""
    alone, packed = study(steps)
    graphed = alone[1]
    graphed.trainer.phase_graphs = PhaseGraphs(graphed.trainer, capture=OneLaunch)
    _, packed_graphed = study(steps)
    packed_graphed.trainer.phase_graphs = PhaseGraphs(packed_graphed.trainer,
                                                      capture=OneLaunch)
    out = {}
    with torch.no_grad():
        for mode, run in (("alone", alone[0].run_round),
                          ("alone, phase graph", graphed.run_round),
                          ("packed", packed.round),
                          ("packed, phase graph", packed_graphed.round)):
            run(0)
            with Launches() as ops:
                run(1)
            out[mode] = sum(ops.counts.values())
    for runner in (graphed, packed_graphed):
        assert runner.trainer.phase_graphs.replays == 2, "the phase was not replayed"
    return out


def ragged_count(epochs: int = 2) -> dict[str, int]:
    """Operations of round 2 of one run whose clients hold unequal data (the classic
    Dirichlet split, natural sizes) over whole local epochs: at step k only the clients that
    still have a minibatch step. Step by step, and its phase replayed from a graph (recorded
    with its prefixes at round 1, the second time they come)."""
    tensors = data(16)
    out = {}
    for mode in ("unequal clients", "unequal clients, phase graph"):
        config = {"data": {"tensors": tensors, "clients": 20, "partition": "dirichlet",
                           "alpha": 0.5, "balanced": False},
                  "model": {"name": "mlp", "options": {"hidden": [8]}},
                  "topology": {"name": "ring"}, "algorithm": {"name": "dfedavg"},
                  "train": {"rounds": 1000, "batch_size": 32, "lr": 0.05,
                            "local_epochs": epochs},
                  "eval": {"local_models": False, "every": 100000}, "device": "cpu"}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = Runner(load_config(config))
        if "graph" in mode:
            run.trainer.phase_graphs = PhaseGraphs(run.trainer, capture=OneLaunch)
        with torch.no_grad():
            run.run_round(0)
            run.run_round(1)
            with Launches() as ops:
                run.run_round(2)
        out[mode] = sum(ops.counts.values())
        if "graph" in mode:
            assert run.trainer.phase_graphs.replays == 2, "the ragged phase was not replayed"
        sizes = run.trainer.env.sample_sizes
        out["steps"] = int(epochs * ((sizes.max() + 31) // 32))
    return out


def host_ms(steps: int, rounds: int, repeats: int) -> dict[str, float]:
    """Best host time of a round, in ms: the 8 runs alone (all 8), and packed."""
    alone, packed = study(steps)
    best = {"alone": float("inf"), "packed": float("inf")}
    with torch.no_grad():
        for r in alone:
            r.run_round(0)
        packed.round(0)
        t = 1
        for _ in range(repeats):
            start = time.perf_counter()
            for s in range(t, t + rounds):
                for r in alone:
                    r.run_round(s)
            best["alone"] = min(best["alone"], (time.perf_counter() - start) / rounds)
            start = time.perf_counter()
            for s in range(t, t + rounds):
                packed.round(s)
            best["packed"] = min(best["packed"], (time.perf_counter() - start) / rounds)
            t += rounds
    return {k: 1e3 * v for k, v in best.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", help="append the results as JSON lines here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    two, four, at = count(2), count(4), count(args.steps)
    ms = host_ms(args.steps, args.rounds, args.repeats)
    rows = []
    for mode, runs in (("alone", 1), ("alone, phase graph", 1), ("packed", 8),
                       ("packed, phase graph", 8)):
        per_step = (four[mode] - two[mode]) / 2
        row = {"mode": mode, "runs": runs, "local_steps": args.steps,
               "ops_per_round": at[mode], "ops_per_step": per_step,
               "ops_per_round_fixed": at[mode] - args.steps * per_step}
        if mode in ms:
            row["host_ms_per_round"] = round(ms[mode] / (8 if mode == "alone" else 1), 3)
        rows.append(row)
    alone, alone_graph, packed, packed_graph = rows
    summary = {"packed_vs_8_alone_ops": round(8 * alone["ops_per_round"]
                                              / packed["ops_per_round"], 2),
               "packed_vs_8_alone_host": round(8 * alone["host_ms_per_round"]
                                               / packed["host_ms_per_round"], 2),
               "graphs_packed_vs_8_alone_ops": round(8 * alone_graph["ops_per_round"]
                                                     / packed_graph["ops_per_round"], 2)}
    print(f"{args.steps} local steps, 20 clients, mlp 16-8-10, one thread\n")
    print("| mode | ops a round | ops a step | ops a round, fixed | host ms a round |")
    print("|---|---|---|---|---|")
    labels = {"alone": "one run", "alone, phase graph": "one run, its phase a graph",
              "packed": "8 runs packed", "packed, phase graph": "8 runs packed, a graph"}
    for row in rows:
        host = row.get("host_ms_per_round")
        print(f"| {labels[row['mode']]} | {row['ops_per_round']} | {row['ops_per_step']:g} | "
              f"{row['ops_per_round_fixed']:g} | {'—' if host is None else f'{host:.2f}'} |")
    print(f"\npacked against the 8 runs alone: {summary['packed_vs_8_alone_ops']}x fewer "
          f"operations, {summary['packed_vs_8_alone_host']}x less host time; with phase "
          f"graphs, {summary['graphs_packed_vs_8_alone_ops']}x fewer launches")
    ragged = ragged_count()
    summary["ragged"] = ragged
    print(f"\none run of 20 clients of unequal data (Dirichlet 0.5, natural sizes), 2 local "
          f"epochs ({ragged['steps']} steps): {ragged['unequal clients']} operations a round "
          f"step by step, {ragged['unequal clients, phase graph']} with its phase a graph")
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
            f.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main()
