"""Randomness per client: a client's minibatches and augmentation in round t depend only on
(seed, round, client, purpose), so any subset of clients advanced alone gives the same
numbers as the same clients advanced with all the others."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.algorithms import register
from gossipfl.algorithms.base import Work
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg
from gossipfl.common.rng import client_keys, counter_bits
from gossipfl.data import ClientSampler, from_tensors


def unbalanced_sampler(batch_size=4):
    sizes = [13, 5, 9, 1, 0, 7]
    starts = np.cumsum([0] + sizes)
    parts = [np.arange(a, a + n) for a, n in zip(starts, sizes, strict=False)]
    return ClientSampler(parts, batch_size, seed=5)


def per_client(batches, row):
    """The valid indices client ``row`` gets over a list of (idx, mask) batches."""
    return [i for idx, mask in batches for i in idx[row][mask[row]].tolist()]


@pytest.mark.parametrize("subset", [[2], [5, 0], [3, 1, 4], [0, 1, 2, 3, 4, 5]])
def test_sampler_subset_matches_full(subset):
    sampler = unbalanced_sampler()
    full_epoch = sampler.epoch(3, 1, "phase", 0)
    sub_epoch = sampler.epoch(3, 1, "phase", 0, clients=subset)
    full_steps = sampler.steps(2, 5, "phase", 1)
    sub_steps = sampler.steps(2, 5, "phase", 1, clients=subset)
    for row, client in enumerate(subset):
        assert per_client(sub_epoch, row) == per_client(full_epoch, client)
        assert per_client(sub_steps, row) == per_client(full_steps, client)
    # Each client's own batch count, and only as many steps as the subset's largest client.
    assert len(sub_epoch) == sampler.steps_per_epoch(subset)
    counts = sampler.batches_per_epoch(subset).tolist()
    assert counts == [-(-int(sampler.sizes[c]) // 4) for c in subset]


def test_streams_differ_between_clients_rounds_and_purposes():
    sampler = ClientSampler([np.arange(50), np.arange(50, 100)], 50, seed=1)
    (idx, _), = sampler.epoch(0, 0)
    assert sorted(idx[0].tolist()) == list(range(50))
    assert idx[0].tolist() != list(range(50))
    assert (idx[1] - 50).tolist() != idx[0].tolist()           # clients: own permutations
    (again, _), = sampler.epoch(1, 0)
    assert again[0].tolist() != idx[0].tolist()                # rounds
    (other, _), = sampler.epoch(0, 0, "phase", 1)
    assert other[0].tolist() != idx[0].tolist()                # phases


def test_client_keys_depend_on_own_id_only():
    a = client_keys(7, [4, 9, 2], "sampler", 3)
    b = client_keys(7, [2, 4], "sampler", 3)
    assert a[0] == b[1] and a[2] == b[0]
    assert len(set(client_keys(7, range(100), "x").tolist())) == 100


@pytest.mark.parametrize("counters", [None, [0, 5, 5, 2]])
def test_vectorized_keys_depend_on_own_id_only_and_hash_once(monkeypatch, counters):
    from gossipfl.common import rng

    calls = []
    real = rng.derive_seed
    monkeypatch.setattr(rng, "derive_seed", lambda *a: calls.append(a) or real(*a))
    ids = [4, 9, 2, 70000]
    a = client_keys(7, ids, "sampler", 3, vectorized=True, counters=counters)
    assert len(calls) == 1  # one hash per call, whatever the number of clients
    order = [3, 0]
    b = client_keys(7, [ids[i] for i in order], "sampler", 3, vectorized=True,
                    counters=None if counters is None else [counters[i] for i in order])
    assert a[3] == b[0] and a[0] == b[1]
    assert (a >= 0).all()  # 63 bits, like derive_seed's
    assert client_keys(7, ids, "sampler", 4, vectorized=True, counters=counters)[0] != a[0]
    if counters is not None:  # the counter enters: equal ids, other counters, other keys
        again = client_keys(7, [9, 9], "sampler", 3, vectorized=True, counters=[5, 6])
        assert again[0] == a[1] and again[1] != a[1]
    many = client_keys(7, torch.arange(200_000), "x", vectorized=True)
    assert len(torch.unique(many)) == 200_000


def test_runs_of_many_clients_derive_keys_vectorized_and_subsets_still_match():
    parts = [np.arange(3 * i, 3 * i + 3) for i in range(1100)]
    sampler = ClientSampler(parts, 2, seed=5)
    assert sampler.vectorized and not unbalanced_sampler().vectorized
    full = sampler.steps(2, 3, "phase", 0)
    subset = [1099, 3, 500]
    sub = sampler.steps(2, 3, "phase", 0, clients=subset)
    for row, client in enumerate(subset):
        assert per_client(sub, row) == per_client(full, client)
    hashed = ClientSampler(parts, 2, seed=5, vectorized=False).steps(2, 3, "phase", 0)
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(full, hashed))


def test_counter_bits_range_and_balance():
    bits = counter_bits(torch.tensor([3, 8])[:, None], torch.arange(20000)[None, :], 10)
    assert bits.min() >= 0 and bits.max() < 1024
    assert abs(bits.float().mean().item() - 511.5) < 10
    assert not torch.equal(bits[0], bits[1])


@register
class SubsetDFedAvg(DFedAvg):
    """Test algorithm: only the clients named in ``SUBSET`` train (in that order); their
    trained rows are recorded; no one communicates and x stays x0."""

    name = "test_subset_training"
    SUBSET: ClassVar[list[int] | None] = None
    trained: ClassVar[dict] = {}

    def begin_round(self, ctx, state):
        if self.SUBSET is None:
            return super().begin_round(ctx, state)
        clients = torch.as_tensor(self.SUBSET)
        return Work(state["x"][clients].clone(), clients)

    def end_round(self, ctx, state, work):
        ids = range(len(work)) if work.clients is None else work.clients.tolist()
        for row, client in enumerate(ids):
            SubsetDFedAvg.trained[(ctx.round, client)] = work.y[row].clone()


def image_config():
    gen = torch.Generator().manual_seed(0)
    train_x = torch.randn(120, 1, 6, 6, generator=gen)
    train_y = torch.randint(0, 3, (120,), generator=gen)
    data = from_tensors(train_x, train_y, train_x[:30], train_y[:30], num_classes=3)
    return {"data": {"tensors": data, "clients": 6, "partition": "dirichlet", "alpha": 0.5,
                     "balanced": False, "min_size": 3, "augment": True},
            "model": {"name": "mlp", "options": {"hidden": [8]}},
            "topology": {"name": "ring"},
            "algorithm": {"name": "test_subset_training"},
            "train": {"rounds": 2, "local_epochs": 2, "batch_size": 5, "lr": 0.1,
                      "momentum": 0.5},
            "eval": {"average_model": False, "local_models": False},
            "seed": 4}


@pytest.mark.represented
@pytest.mark.parametrize("oracle", ["stacked", "loop"])
@pytest.mark.parametrize("subset", [[4], [5, 1], [2, 0, 3]])
def test_subset_trained_alone_equals_trained_with_all(oracle, subset):
    config = image_config()
    config["engine"] = {"oracle": oracle}
    SubsetDFedAvg.SUBSET, SubsetDFedAvg.trained = None, {}
    gossipfl.run(config)
    together = dict(SubsetDFedAvg.trained)
    SubsetDFedAvg.SUBSET, SubsetDFedAvg.trained = subset, {}
    gossipfl.run(config)
    alone = dict(SubsetDFedAvg.trained)
    SubsetDFedAvg.SUBSET = None
    assert set(alone) == {(t, c) for t in range(2) for c in subset}
    for key, value in alone.items():  # every round starts from x0 (end_round writes no x)
        assert not torch.equal(value, together[(key[0], (key[1] + 1) % 6)])
        torch.testing.assert_close(value, together[key], rtol=1e-6, atol=1e-7)
