"""A packed study's local phase replayed from one graph (gossipfl.schedules.phase_graph): each
run's rows step at their own rate (a column of rates, one per row) and each run's loss is
summed on the device in its own order, so every run keeps the numbers it has alone.

The phases are recorded by the CPU's stand-in of a CUDA graph
(:class:`gossipfl.engine.compiled.TracedGraph`: the Python runs once, a host read fails it),
and compared with the runs alone, computed eagerly, bit for bit."""

from __future__ import annotations

import warnings

import pytest
import torch

from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.data import from_tensors
from gossipfl.engine.compiled import TracedGraph
from gossipfl.schedules.phase_graph import PhaseGraphs
from gossipfl.studies.packing.joint import Pack

ROUNDS = 3


def config(seed: int, lr: float, graphs: bool, **train) -> dict:
    gen = torch.Generator().manual_seed(0)
    data = from_tensors(torch.randn(64, 1, 4, 4, generator=gen),
                        torch.randint(0, 3, (64,), generator=gen),
                        torch.randn(16, 1, 4, 4, generator=gen),
                        torch.randint(0, 3, (16,), generator=gen))
    return {"data": {"tensors": data, "clients": 4, "partition": "iid"},
            "model": {"name": "mlp", "options": {"hidden": [16]}},
            "topology": {"name": "ring"}, "algorithm": {"name": "dfedavgm", "momentum": 0.5},
            "train": {"rounds": ROUNDS, "batch_size": 4, "lr": lr, "lr_decay": 0.9,
                      "local_steps": 3, "weight_decay": 5e-4, **train},
            "eval": {"local_models": False, "every": 1000}, "device": "cpu", "seed": seed,
            "engine": {"cuda_graphs": graphs}}


def runner(cfg: dict) -> Runner:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Runner(load_config(cfg))


@pytest.fixture
def traced(monkeypatch):
    """Every PhaseGraphs made records with TracedGraph; the ones made, in a list."""
    made = []
    real = PhaseGraphs.__init__

    def init(self, trainer, capture=None):
        real(self, trainer, TracedGraph)
        made.append(self)

    monkeypatch.setattr(PhaseGraphs, "__init__", init)
    return made


@pytest.mark.parametrize("rates", [(0.05, 0.05), (0.05, 0.1)], ids=["one rate", "two rates"])
def test_a_packed_phase_replayed_from_a_graph_gives_each_run_its_numbers_alone(traced, rates):
    specs = [(seed, lr) for seed in (0, 1) for lr in rates]
    alone = [runner(config(seed, lr, graphs=False)) for seed, lr in specs]
    want = [[r.run_round(t) for t in range(ROUNDS)] for r in alone]
    pack = Pack([runner(config(seed, lr, graphs=True)) for seed, lr in specs])
    got = list(zip(*[pack.round(t) for t in range(ROUNDS)], strict=True))
    assert pack.trainer.phase_graphs.replays == ROUNDS
    for r, run in enumerate(pack.runners):
        assert torch.equal(run.state["x"], alone[r].state["x"]), specs[r]
        for mine, theirs in zip(got[r], want[r], strict=True):
            assert mine["train_loss"] == theirs["train_loss"], specs[r]
        assert run.client_steps == alone[r].client_steps


def test_a_packed_tally_is_the_graphs_and_the_loss_tally_the_eager_paths(traced):
    """Eagerly (no graphs) the packed step is the loss tally's; with graphs the tally is
    taken on the device, and the eager tally's step is what the graph records."""
    pack = Pack([runner(config(seed, 0.05, graphs=True)) for seed in (0, 1)])
    assert pack.trainer.graph_step is pack.tally.step
    rows = torch.arange(8)
    assert pack.trainer.graph_refusal(rows) is None
    assert pack.trainer.graph_refusal(rows[:6]) == "the runs have unequal rows at work"
    # rows that run out of minibatches: each run's prefix tallied step by step
    assert pack.trainer.graph_refusal(rows, ragged=True) is None
    assert pack.trainer.graph_key(rows, ragged=False) is None
    assert pack.trainer.graph_key(rows, ragged=True) == ((0, 1, 2, 3), (4, 5, 6, 7))


@pytest.mark.parametrize("graphs", [False, True], ids=["step by step", "graph"])
@pytest.mark.parametrize("length", ["local_steps", "local_epochs"])
def test_packed_runs_of_unequal_clients_equal_the_runs_alone(traced, graphs, length):
    """5 clients of 13 or 12 samples: the joint rows, sorted by size, interleave the runs
    (run 0's smaller client after run 1's larger ones), so each run's rates and losses must
    follow its clients, not its positions; two learning rates, local steps and one epoch
    (the last step without a minibatch for the smaller clients: a ragged phase, recorded at
    its second round, each run's loss tallied over its own rows with a minibatch)."""
    def cfg(seed, lr, graphs):
        c = config(seed, lr, graphs=graphs)
        c["data"]["clients"] = 5
        if length == "local_epochs":
            del c["train"]["local_steps"]
            c["train"]["local_epochs"] = 1
        return c

    specs = [(seed, lr) for seed in (0, 1) for lr in (0.05, 0.1)]
    alone = [runner(cfg(seed, lr, False)) for seed, lr in specs]
    want = [[r.run_round(t)["train_loss"] for t in range(ROUNDS)] for r in alone]
    pack = Pack([runner(cfg(seed, lr, graphs)) for seed, lr in specs])
    sizes = pack.env.sample_sizes
    assert not bool((sizes[:-1] >= sizes[1:]).all())  # the joint rows are reordered
    got = [pack.round(t) for t in range(ROUNDS)]
    if graphs:  # a ragged phase runs step by step at its first round
        assert pack.trainer.phase_graphs.replays == ROUNDS - (length == "local_epochs")
    for r, run in enumerate(pack.runners):
        assert run.client_steps == alone[r].client_steps, specs[r]
    for r, run in enumerate(pack.runners):
        assert torch.equal(run.state["x"], alone[r].state["x"]), specs[r]
        assert [g[r]["train_loss"] for g in got] == want[r], specs[r]
