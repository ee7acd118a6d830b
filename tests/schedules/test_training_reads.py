"""A round's local training reads nothing from the device (issue 48: "nothing syncs with the
host inside a round").

On a GPU every read of a tensor's value on the host (``int(t)``, ``bool(t)``, ``t.item()``,
``t.tolist()``, ``t.cpu()``) waits until the device has run everything queued before it.
With all the clients at work, the rows' order, the minibatch streams' shapes and the rows
with a sample at each step follow from the clients' data sizes, which the host keeps
(``ClientSampler.host_sizes``): the local loop reads none of them from the device, in any
round, step by step or replayed from a graph. On the CPU the reads are counted where they would be on a GPU: every
``aten._local_scalar_dense`` (``item``, ``int``, ``bool``), every ``Tensor.tolist`` and
every ``Tensor.cpu`` (``Tensor.numpy`` is not counted: it refuses a tensor on a GPU).
"""

from __future__ import annotations

import collections
import warnings
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gossipfl.algorithms.base import Phase
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.engine.compiled import TracedGraph
from gossipfl.schedules.phase_graph import PhaseGraphs
from gossipfl.schedules.training import _active_rows, host_active_rows
from tests.schedules.phase_cases import ragged_config, tiny_config


class Reads(TorchDispatchMode):
    """Counts the reads of a tensor's value on the host."""

    def __init__(self):
        super().__init__()
        self.count = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ == "_local_scalar_dense":
            self.count["item"] += 1
        return func(*args, **(kwargs or {}))


def counting_reads(call, monkeypatch, items: bool = True) -> Callable:
    """``call`` that appends the reads it made to its ``rounds`` list (``items``: the reads
    of a value too, else the copies to the host alone)."""
    real = {name: getattr(torch.Tensor, name) for name in ("tolist", "cpu")}
    counter: collections.Counter = collections.Counter()

    def counted(name):
        def read(self, *args, **kwargs):
            counter[name] += 1
            return real[name](self, *args, **kwargs)
        return read

    def wrapped(*args, **kwargs):
        counter.clear()
        for name in real:
            monkeypatch.setattr(torch.Tensor, name, counted(name))
        try:
            with Reads() as reads:
                out = call(*args, **kwargs)
        finally:
            for name, method in real.items():
                monkeypatch.setattr(torch.Tensor, name, method)
        wrapped.rounds.append(reads.count["item"] * items + sum(counter.values()))
        return out

    wrapped.rounds = []
    return wrapped


def reads_of_training(config: dict, graphs: bool, monkeypatch) -> list[int]:
    """The reads of each round's ``LocalTrainer.train`` over 3 rounds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = Runner(load_config(config))
    if graphs:
        runner.trainer.phase_graphs = PhaseGraphs(runner.trainer, capture=TracedGraph)
    runner.trainer.train = counting_reads(runner.trainer.train, monkeypatch)
    with torch.no_grad():
        for t in range(3):
            runner.run_round(t)
    return runner.trainer.train.rounds


def with_an_empty_client() -> dict:
    """Four clients of 9, 6, 0 and 3 samples (their own tensors), whole epochs."""
    config = ragged_config("dfedavgm")
    gen = torch.Generator().manual_seed(1)
    config["data"] = {"tensors": {"train": [(torch.randn(n, 1, 4, 4, generator=gen),
                                             torch.randint(0, 3, (n,), generator=gen))
                                            for n in (9, 6, 0, 3)],
                                  "test": (torch.randn(8, 1, 4, 4, generator=gen),
                                           torch.randint(0, 3, (8,), generator=gen)),
                                  "num_classes": 3},
                      "clients": 4}
    return config


def cnn_augmented() -> dict:
    config = tiny_config("dfedavgm", model="cnn", momentum=0.5)
    config["data"]["augment"] = True
    return config


@pytest.mark.parametrize("graphs", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["step by step", "graph"])
@pytest.mark.parametrize("case", ["local steps", "unequal epochs", "an empty client",
                                  "full batch", "augmented cnn", "sampled clients"])
def test_a_rounds_local_training_reads_nothing_from_the_device(case, graphs, monkeypatch):
    """Local steps, clients of unequal data in whole epochs (one without data), full batch,
    the augmented cnn, a server's sampled clients of unequal data (their ids drawn on the
    host, kept there beside the device's: ``Federation.host_ids``): no read of the device in
    any round's local training, step by step or from a graph."""
    config = {"sampled clients": lambda: ragged_config("fedavg",
                                                       algorithm={"participation": 0.5}),
              "local steps": lambda: tiny_config("dfedavgm", momentum=0.5),
              "unequal epochs": lambda: ragged_config("dfedavgm"),
              "an empty client": with_an_empty_client,
              "full batch": lambda: tiny_config("dfedavgm", batch_size="full"),
              "augmented cnn": cnn_augmented}[case]()
    assert reads_of_training(config, graphs, monkeypatch) == [0, 0, 0]


def test_a_servers_sampled_clients_are_known_on_the_host():
    """A server draws its clients on the host and keeps that draw beside the tensor it hands
    out (``Federation.host_ids``: the very array, not a read of the tensor); the local loop
    asks the federation for the rows' ids, and gets that array, in every round."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = Runner(load_config(ragged_config("fedavg",
                                                  algorithm={"participation": 0.5})))
    fed = runner.exp.fed
    clients = fed.sample(3, 0.5)
    kept = fed.host_ids(clients)
    assert kept is fed.host_ids(clients) and np.array_equal(kept, clients.numpy())
    trainer, answers = runner.trainer, []
    real = trainer._host_rows
    trainer._host_rows = lambda ids: answers.append((ids, real(ids))) or answers[-1][1]
    with torch.no_grad():
        for t in range(3):
            runner.run_round(t)
            drawn = fed._sampled
            assert [(ids is drawn[0], host is drawn[1]) for ids, host in answers] == \
                [(True, True)]
            answers.clear()


@pytest.mark.parametrize("graphs", [False, True], ids=["step by step", "graph"])
def test_a_packed_round_reads_the_device_once(graphs, monkeypatch):
    """A packed study of 4 runs (two seeds, two learning rates): its local training reads
    nothing after the first round, and its round copies one tensor to the host, every run's
    loss sum together (each runner then reads its own there: not counted)."""
    from gossipfl.studies.packing.joint import Pack

    def pack() -> Pack:
        runners = []
        for seed in (0, 1):
            for lr in (0.05, 0.1):
                config = tiny_config("dfedavgm", momentum=0.5, lr=lr)
                config["seed"] = seed
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    runners.append(Runner(load_config(config)))
        joint = Pack(runners)
        if graphs:
            joint.trainer.phase_graphs = PhaseGraphs(joint.trainer, capture=TracedGraph)
        return joint

    training, whole = pack(), pack()
    training.trainer.train = counting_reads(training.trainer.train, monkeypatch)
    rounds = counting_reads(whole.round, monkeypatch, items=False)
    with torch.no_grad():
        for t in range(3):
            training.round(t)
            rounds(t)
    assert training.trainer.train.rounds[1:] == [0, 0]
    assert rounds.rounds[1:] == [1, 1]


@pytest.mark.parametrize("case", ["local steps", "unequal epochs", "an empty client",
                                  "full batch"])
def test_the_host_knows_the_rows_with_a_sample_at_every_step(case):
    """``host_active_rows`` (from the sizes on the host) is what the sampler's masks say
    (:func:`_active_rows`, read from them) at every step of a phase: local steps, clients of
    unequal data in whole epochs (one of them without data), full batch."""
    config = {"local steps": lambda: tiny_config("dfedavgm"),
              "unequal epochs": lambda: ragged_config("dfedavgm"),
              "an empty client": with_an_empty_client,
              "full batch": lambda: tiny_config("dfedavgm", batch_size="full")}[case]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = Runner(load_config(config)).trainer
    sizes = trainer.sampler.host_sizes
    if case == "an empty client":
        assert (sizes == 0).any(), sizes
    rows = np.argsort(-sizes, kind="stable")
    phase = Phase()
    _, mask = trainer.phase_batches(0, 0, phase, torch.as_tensor(rows))
    kind, count = trainer.phase_length(phase)
    batch = None if trainer.train_config.full_batch else trainer.sampler.batch_size
    assert host_active_rows(kind, count, sizes[rows], batch) == _active_rows(mask)
