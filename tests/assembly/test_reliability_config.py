"""Issue 24: every key a run accepts is checked (also where the algorithm ignores it, which
warns), and sizes that cannot fit are refused with the estimate before anything of that size
is allocated. Nothing here allocates much: the available memory is monkeypatched."""

from __future__ import annotations

import errno
import warnings

import pytest
import torch

from gossipfl import io as gossipfl_io
from gossipfl.assembly.loading import load_config
from gossipfl.engine import memory
from gossipfl.errors import GossipflError
from gossipfl.io import FolderLock, WriteError
from gossipfl.topology import Mixer, build_topology
from tests.helpers import SRC_ENV, one_sentence

GiB = 2 ** 30


def tight_memory(monkeypatch, available: int = GiB) -> None:
    monkeypatch.setattr("gossipfl.engine.memory.available_memory",
                        lambda device="cpu": available)


# --------------------------------------------------------------------------------------------
# Names never checked: every key validated, ignored ones warned about
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("key", "value", "words"), [
    ("name", "rnig", "topology.name: unknown value 'rnig' (did you mean 'ring'?); choose one"),
    ("mixing", "metropolis", "topology.mixing: unknown value 'metropolis'"),
    ("sparse", "maybe", "topology.sparse: unknown value 'maybe'"),
    ("p", 2.0, "topology.p: must be in (0, 1], got 2.0."),
    ("k", 0, "topology.k: must be an integer >= 1, got 0."),
])
def test_a_centralized_algorithm_checks_the_topology_it_ignores(key, value, words):
    with pytest.raises(GossipflError) as info:
        load_config({"algorithm": "fedavg", "topology": {key: value}})
    assert str(info.value).startswith(words)


def test_the_cli_refuses_an_unknown_topology_for_a_centralized_algorithm(work, capsys):
    err = one_sentence(capsys, "run", "tiny.yaml", "--set", "algorithm.name=fedavg",
                       "--set", "topology.name=bogus")
    assert err.startswith("error: topology.name: unknown value 'bogus'; choose one of: ")
    assert not (work / "runs").exists()


def test_settings_a_centralized_algorithm_ignores_draw_one_warning():
    with pytest.warns(UserWarning) as caught:
        load_config({"algorithm": "fedavg", "topology": {"name": "full", "k": 3}})
    assert [str(w.message) for w in caught] == [
        ("topology.name, topology.k: ignored, because fedavg is a centralized algorithm and "
        "has no communication graph.")]


@pytest.mark.parametrize("raw", [{"algorithm": "fedavg"},
                                 {"algorithm": "dfedavg", "topology": {"name": "full"}},
                                 {"algorithm": "fedavg", "topology": {"order": "synchronous"}}])
def test_no_warning_when_nothing_is_ignored(raw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(raw)


def test_choice_lists_come_from_the_registries():
    from gossipfl.data.partition import PARTITIONERS
    from gossipfl.topology.mixing import mixing_rule_names

    with pytest.raises(GossipflError) as info:
        load_config({"data": {"partition": "shards"}})
    for name in (*PARTITIONERS, "natural"):
        assert name in str(info.value)
    with pytest.raises(GossipflError) as info:
        load_config({"topology": {"mixing": "nope"}})
    assert str(info.value).endswith(f"choose one of: {', '.join(sorted(mixing_rule_names()))}.")


def test_the_validation_vocabulary_imports_no_config_models_or_data():
    import subprocess
    import sys

    code = ("import sys, gossipfl.validation; "
            "print(sorted(m for m in sys.modules if m.startswith(('gossipfl.config', "
            "'gossipfl.models', 'gossipfl.data'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=SRC_ENV, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------
# Numbers the run's tensors cannot hold
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("key", "value", "words"), [
    ("train.lr", 1e308, ("train.lr: must be at most 3.403e+38 in magnitude (the largest "
                        "float32), got 1e+308.")),
    ("train.lr", "1e308", "train.lr: must be at most 3.403e+38"),
    ("engine.timeout", 1e300, "engine.timeout: must be at most 3.403e+38"),
    ("train.rounds", 1e30, ("train.rounds: must be at most 9223372036854775807 in magnitude "
                           "(the largest int64), got 1e+30.")),
    ("algorithm.momentum", 1e300, "algorithm.momentum: must be at most 3.403e+38"),
])
def test_numbers_beyond_float32_or_int64_are_refused(key, value, words):
    section, name = key.split(".")
    raw = {"algorithm": {"name": "dfedavgm"}} if section == "algorithm" else {}
    raw.setdefault(section, {})[name] = value
    with pytest.raises(GossipflError) as info:
        load_config(raw)
    assert str(info.value).startswith(words)


def test_a_huge_learning_rate_on_the_cli_is_one_sentence(work, capsys):
    err = one_sentence(capsys, "run", "tiny.yaml", "--set", "train.lr=1e308")
    assert err.startswith("error: train.lr: must be at most 3.403e+38")


# --------------------------------------------------------------------------------------------
# Sizes that cannot fit: estimated before allocation
# --------------------------------------------------------------------------------------------
def test_the_address_space_limit_bounds_the_available_memory(monkeypatch):
    import resource

    monkeypatch.setattr("gossipfl.engine.memory._physical_available", lambda: 100 * GiB)
    monkeypatch.setattr("gossipfl.engine.memory._virtual_size", lambda: 2 * GiB)
    monkeypatch.setattr(resource, "getrlimit", lambda which: (6 * GiB, resource.RLIM_INFINITY))
    assert memory.available_memory("cpu") == 4 * GiB
    monkeypatch.setattr(resource, "getrlimit",
                        lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert memory.available_memory("cpu") == 100 * GiB


def test_ranks_on_one_machine_share_its_memory(monkeypatch):
    """Two ranks of a torchrun job on one host each check against half of what is free, so
    that together they fit (each alone would see all of it, and both allocate)."""
    monkeypatch.setattr("gossipfl.engine.memory.available_memory", lambda device="cpu": 8 * GiB)
    memory.require_memory(6 * GiB, "X", "data.clients")  # one process: fits
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(GossipflError) as info:
        memory.require_memory(6 * GiB, "X", "data.clients")
    assert str(info.value) == ("data.clients: X needs at least 6.0 GiB, but only 8.0 GiB of "
                               "memory is available on cpu (shared by the 2 processes of this "
                               "job on this machine: 4.0 GiB each).")
    memory.require_memory(6 * GiB, "X", "data.clients", device="cuda")  # its own GPU


def test_a_dense_topology_counts_adjacency_and_mixing_matrix(monkeypatch):
    tight_memory(monkeypatch, 10 * 2 ** 20)  # 10 MiB: a 1000×1000 float64 matrix fits once
    with pytest.raises(GossipflError) as info:
        build_topology("ring", 1000)
    assert str(info.value) == ("data.clients: a dense 1000×1000 mixing matrix (ring) needs at "
                               "least 15.3 MiB, but only 10.0 MiB of memory is available on "
                               "cpu.")


def test_the_mixer_checks_its_device_copy(monkeypatch):
    topology = build_topology("ring", 100)
    tight_memory(monkeypatch, 1000)
    with pytest.raises(GossipflError, match=r"data.clients: a dense 100×100 mixing matrix in "
                                            r"torch.float32 needs at least 39.1 KiB"):
        Mixer(topology).mix(torch.zeros(100, 3), 0)


@pytest.mark.parametrize(("args", "start"), [
    (["model.name=mlp", "model.options.hidden=[100000000]"],
     ("error: model.options: model 'mlp' (hidden=[100000000]) with P = 1000000003 parameters "
     "needs at least 7.5 GiB, but only 1.0 GiB")),
    (["data.options.dim=1000000000"],
     ("error: data.options.dim: synthetic data of 160 samples × 1000000000 features "
      "(3 classes) needs at least 1.8 TiB")),
    (["data.options.train_size=1000000000"],
     ("error: data.options.train_size: synthetic data of 1000000040 samples × 6 features "
      "(3 classes)")),
    (["data.options.num_classes=1000000000"],
     ("error: data.options.num_classes: synthetic data of 160 samples × 6 features "
     "(1000000000 classes) needs at least")),
    (["data.local_test_size=1000000000", "eval.personalized=true"],
     ("error: data.local_test_size: 1000000000 samples per client, but the test set has "
      "only 40")),
    (["train.batch_size=1000000000"],
     ("error: train.batch_size: drawing 2 minibatch(es) of 1000000000 samples for each of 4 "
     "clients needs at least")),
    (["train.local_steps=1000000000"],
     "error: train.local_steps: drawing 1000000000 minibatch(es) of 8 samples"),
])
def test_sizes_that_cannot_fit_are_one_sentence_before_allocation(work, capsys, monkeypatch,
                                                                  args, start):
    tight_memory(monkeypatch)
    sets = [a for arg in args for a in ("--set", arg)]
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "big", *sets)
    assert err.startswith(start), err
    assert not (work / "big" / "metrics.csv").exists()


@pytest.mark.parametrize(("name", "options", "shape"), [
    ("mlp", {"hidden": [7, 5]}, (1, 6, 6)), ("cnn", {}, (1, 28, 28)),
    ("resnet18", {}, (3, 32, 32)), ("lstm", {}, (80,)),
])
def test_the_parameter_count_comes_without_allocation(name, options, shape):
    from gossipfl.assembly.experiment import count_parameters
    from gossipfl.data import from_tensors
    from gossipfl.models import build_model

    x = torch.zeros((4, *shape)) if name != "lstm" else torch.zeros((4, *shape), dtype=torch.long)
    data = from_tensors(x, torch.arange(4) % 2, x, torch.arange(4) % 2)
    config = load_config({"model": {"name": name, "options": options}})
    real = build_model(name, data.input_shape, data.num_classes, **options)
    assert count_parameters(config, data) == sum(p.numel() for p in real.parameters())


# --------------------------------------------------------------------------------------------
# The disk full while the lock file is written
# --------------------------------------------------------------------------------------------
def _no_space(fd: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_while_the_lock_is_written_leaves_no_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(gossipfl_io, "_write_pid", _no_space)
    with pytest.raises(WriteError) as info:
        FolderLock.acquire(tmp_path, "--out")
    assert info.value.no_space
    assert str(info.value) == f"no space left on device while writing {tmp_path / '.lock'}"
    assert not (tmp_path / ".lock").exists()
    monkeypatch.undo()
    FolderLock.acquire(tmp_path, "--out").release()  # the lock was not kept


def test_a_full_disk_while_the_lock_is_written_is_one_sentence(work, capsys, monkeypatch):
    monkeypatch.setattr(gossipfl_io, "_write_pid", _no_space)
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "full")
    assert err == "error: no space left on device while writing full/.lock\n", err
    assert not (work / "full" / ".lock").exists()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
def test_a_write_error_crosses_a_process_boundary_whole(tmp_path, code):
    """A worker process hands a WriteError back pickled (a packed study's figures): its
    sentence, path and whether the disk was full survive the trip."""
    import os
    import pickle

    error = WriteError(tmp_path / "a.png", OSError(code, os.strerror(code)))
    again = pickle.loads(pickle.dumps(error))
    assert isinstance(again, WriteError) and str(again) == str(error)
    assert again.path == error.path and again.no_space == (code == errno.ENOSPC)
