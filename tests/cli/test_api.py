"""End-to-end behaviour of gossipfl.run: determinism, config errors, every algorithm runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.algorithms import available_algorithms
from gossipfl.assembly.loading import load_config
from gossipfl.errors import GossipflError

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")

TIMING = {"seconds", "eval_seconds", "elapsed"}


def small(**changes) -> dict:
    config = {
        "data": {"dataset": "synthetic", "clients": 8, "partition": "dirichlet", "alpha": 0.5,
                 "min_size": 5, "options": {"num_classes": 4, "dim": 12, "train_size": 400,
                                            "test_size": 200, "seed": 1}},
        "model": {"name": "mlp", "options": {"hidden": [16]}},
        "topology": {"name": "ring"},
        "algorithm": {"name": "dfedavg"},
        "train": {"rounds": 4, "local_epochs": 1, "batch_size": 16, "lr": 0.1},
        "eval": {"every": 2, "personalized": True},
        "seed": 7,
    }
    for key, value in changes.items():
        node = config
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return config


def strip(rows):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


@pytest.mark.slow
def test_result_shapes_and_metrics():
    result = gossipfl.run(small())
    assert [row["round"] for row in result.metrics] == [2, 4]
    row = result.metrics[-1]
    for key in ("test_acc", "local_acc_mean", "local_acc_std", "personalized_acc",
                "train_loss", "consensus", "bytes_round", "bytes_total", "seconds", "lr"):
        assert key in row and math.isfinite(row[key]), key
    P = result.layout.P
    assert result.params.shape == (8, P)
    assert row["bytes_round"] == 16 * P * 4  # ring of 8: 16 directed messages
    assert row["lr"] == pytest.approx(0.1)
    assert result.summary()["best"] >= result.summary()["final"]


@pytest.mark.slow
def test_same_seed_same_numbers_and_chunking_does_not_matter():
    a = gossipfl.run(small())
    b = gossipfl.run(small())
    c = gossipfl.run(small(**{"engine.chunk_size": 3}))
    assert strip(a.metrics) == strip(b.metrics)
    assert torch.equal(a.params, b.params)
    torch.testing.assert_close(c.params, a.params, rtol=1e-5, atol=1e-6)
    for x, y in zip(strip(a.metrics), strip(c.metrics), strict=True):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key] == pytest.approx(y[key], rel=1e-4, abs=1e-6), key


@pytest.mark.slow
def test_different_seed_different_numbers():
    a = gossipfl.run(small())
    b = gossipfl.run(small(seed=8))
    assert not torch.equal(a.params, b.params)


@pytest.mark.slow
def test_loop_and_vmap_oracles_agree_end_to_end():
    a = gossipfl.run(small(**{"engine.oracle": "loop"}))
    b = gossipfl.run(small(**{"engine.oracle": "vmap"}))
    torch.testing.assert_close(a.params, b.params, rtol=1e-4, atol=1e-5)


@pytest.mark.represented
@pytest.mark.parametrize("name", sorted(n for n in available_algorithms()
                                         if not n.startswith("test_")))  # tests' own
def test_every_algorithm_learns_on_synthetic_data(name):
    """Registry contract: each algorithm runs from a config by name and reduces the loss
    (a personalized one: its clients' own models learn)."""
    order = available_algorithms()[name].orders[0]  # adpsgd: asynchronous
    result = gossipfl.run(small(**{"algorithm.name": name, "train.rounds": 6,
                                   "topology.name": "full", "topology.order": order,
                                   "eval.every": 1}))
    personalized = "personalized" in available_algorithms()[name].evaluations
    losses = result.column("train_loss" if personalized else "test_loss")
    assert losses[-1] < losses[0]
    accuracy = "personalized_acc" if personalized else "test_acc"
    assert result.metrics[-1][accuracy] > 0.4  # 4 classes: chance is 0.25


@pytest.mark.slow
def test_lr_decay_schedule():
    result = gossipfl.run(small(**{"train.lr_decay": 0.5, "eval.every": 1}))
    assert result.column("lr") == pytest.approx([0.1 * 0.5**t for t in range(4)])


def test_user_tensors_module_factory_and_explicit_matrix():
    rng = np.random.default_rng(0)
    clients = [(rng.normal(size=(20, 5)).astype(np.float32), rng.integers(0, 3, 20))
               for _ in range(4)]
    W = np.full((4, 4), 0.25)
    result = gossipfl.run({
        "data": {"clients": 4, "tensors": {"train": clients, "test": clients[0]}},
        "model": {"factory": lambda shape, classes: torch.nn.Linear(shape[0], classes)},
        "topology": {"name": "custom", "mixing": "custom", "matrix": W},
        "train": {"rounds": 2, "batch_size": "full", "lr": 0.1},
    })
    assert result.params.shape == (4, 5 * 3 + 3)
    # a full-averaging W leaves every client with the same model
    assert float((result.params - result.params[0]).abs().max()) < 1e-6


@pytest.mark.parametrize("changes, message", [
    ({"train.rouns": 3}, "train.rouns: unknown key (did you mean 'rounds'?)"),
    ({"algorithm.name": "dfedav"}, "algorithm.name: unknown value 'dfedav' (did you mean"),
    ({"data.alpha": 0}, "data.alpha: must be > 0, got 0"),
    ({"train.lr": -1}, "train.lr: must be >= 0, got -1"),
    ({"train.rounds": 0}, "train.rounds: must be an integer >= 1, got 0"),
    ({"algorithm.momentun": 0.9, "algorithm.name": "dfedavgm"},
     "algorithm.momentun: unknown key (did you mean 'momentum'?)"),
    ({"topology.k": 8, "topology.name": "random_k"}, "topology.k"),
    ({"train.batch_size": "fulll"}, "train.batch_size"),
])
def test_bad_config_names_key_and_value(changes, message):
    with pytest.raises(GossipflError) as info:
        gossipfl.run(small(**changes))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_overrides_and_yaml_round_trip(tmp_path):
    config = load_config(small(), ["train.lr=5e-2", "algorithm.name=dfedavgm"])
    assert config.train.lr == 0.05 and config.algorithm.name == "dfedavgm"
    assert config.algorithm.params.momentum == 0.9
    path = tmp_path / "c.yaml"
    path.write_text(config.to_yaml())
    again = load_config(path)
    assert again.to_dict() == config.to_dict()


def test_partition_summary_from_a_config():
    summary = gossipfl.partition_summary(small())
    assert summary.samples.sum() <= 400 and len(summary.samples) == 8
    assert (summary.class_counts.sum(1) == summary.samples).all()
    assert (summary.classes_per_client == (summary.class_counts > 0).sum(1)).all()
