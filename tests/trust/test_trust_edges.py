"""Robust gossip on a topology built as edges (above DENSE_MAX_CLIENTS clients): the
neighbourhoods read from the edges, the run equal to the dense one, the honest-connectivity
check and the refusals in the same words, and a run at a scale no dense W reaches."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.topology import graphs
from gossipfl.topology.sparse import Edges
from gossipfl.trust.neighbourhoods import buckets, degrees
from tests.lsq import Problem, assert_close


def random_sparse_w(m: int, seed: int) -> np.ndarray:
    """A row-stochastic W with in-degrees 0 to 4 (an isolated client, a zero diagonal)."""
    rng = np.random.default_rng(seed)
    W = np.zeros((m, m))
    for i in range(m):
        others = rng.choice([j for j in range(m) if j != i], size=i % 5, replace=False)
        W[i, others] = rng.uniform(0.1, 1.0, size=len(others))
        W[i, i] = 0.0 if i == 3 else rng.uniform(0.1, 1.0)
        if W[i].sum() == 0:
            W[i, i] = 1.0
        W[i] /= W[i].sum()
    return W


@pytest.mark.parametrize("given", ["dense", "edges"])
def test_buckets_hold_each_receiver_and_its_in_neighbours_in_ascending_order(given):
    """Bucket of degree d: [i] + N_i ascending and W[i, those], every receiver once,
    the degrees ascending; from the dense W or its edges."""
    W = random_sparse_w(11, seed=2)
    source = W if given == "dense" else Edges.from_dense(W)
    found = buckets(source, torch.device("cpu"), torch.float64)
    assert [b.degree for b in found] == sorted({int(d) for d in degrees(W)})
    seen = []
    for bucket in found:
        for i, senders, weights in zip(bucket.receivers.tolist(), bucket.senders.tolist(),
                                       bucket.weights.tolist()):
            hood = [i] + [j for j in range(11) if j != i and W[i, j] != 0]
            assert senders == hood and weights == W[i, hood].tolist()
            seen.append(i)
    assert sorted(seen) == list(range(11))
    assert degrees(source).tolist() == [sum(1 for j in range(11) if j != i and W[i, j])
                                        for i in range(11)]


def robust_run(p: Problem, **byzantine):
    config = p.config({"name": "dfedavg"}, rounds=3, steps=2,
                      topology={"name": "exponential",  # the same graph dense or as edges
                                "robust": {"rule": "trimmed_mean", "b": 1}})
    config["byzantine"] = {"clients": [1, 4], "attack": "alie", **byzantine}
    return gossipfl.run(config)


@pytest.mark.parametrize("view", ["neighbourhood", "own"])
def test_robust_gossip_on_edges_equals_the_dense_run(monkeypatch, view):
    """The same run, the topology dense (12 clients) or built as edges (the threshold
    lowered): the same models to the rounding of W's diagonal (summed in another order);
    also for the attacker that reads only what it receives itself (``view: own``)."""
    p = Problem(clients=12)
    dense = robust_run(p, view=view)
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 4)
    edges = robust_run(p, view=view)
    runner = Runner(load_config(p.config({"name": "dfedavg"},
                                         topology={"name": "exponential"})))
    assert runner.exp.fed.mixer.topology.sparse  # really built as edges
    assert_close(edges.params, dense.params, rtol=1e-6, atol=1e-7)
    assert [r["bytes_round"] for r in edges.metrics] == [r["bytes_round"]
                                                        for r in dense.metrics]


def test_honest_graph_cut_by_the_byzantine_clients_is_refused_alike_on_edges(monkeypatch):
    """A ring of 8 without clients 2 and 6 falls apart: the same sentence either way."""
    def refusal() -> str:
        config = {"data": {"dataset": "synthetic", "clients": 8, "partition": "iid",
                           "options": {"train_size": 64, "test_size": 16, "dim": 4}},
                  "model": {"name": "logistic"}, "topology": {"name": "ring"},
                  "byzantine": {"clients": [2, 6], "attack": "sign_flip"},
                  "train": {"rounds": 1, "batch_size": 8}, "eval": {"local_models": False}}
        with pytest.raises(GossipflError) as info:
            Runner(load_config(config))
        return str(info.value)

    dense = refusal()
    assert "e.g. [3, 4, 5] are cut off" in dense
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 4)
    assert refusal() == dense


def test_an_attack_that_reads_w_is_refused_on_edges(monkeypatch):
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 4)
    p = Problem(clients=12)
    with pytest.raises(GossipflError) as info:
        robust_run(p, attack="spectral")
    assert str(info.value).startswith(
        "topology.name: byzantine.attack: spectral (it reads the round's W) needs the dense "
        "12×12 mixing matrix")


def test_robust_gossip_beyond_the_dense_threshold():
    """2 000 clients (no dense W is formed): trimmed mean against ALIE on a 6-regular graph
    trains, and the honest clients' metrics are measured."""
    config = {"data": {"dataset": "synthetic", "clients": 2000, "partition": "iid",
                       "options": {"train_size": 20_000, "test_size": 200, "dim": 8}},
              "model": {"name": "logistic"},
              "topology": {"name": "k_regular", "k": 6,
                           "robust": {"rule": "trimmed_mean", "b": 1}},
              "byzantine": {"clients": 0.05, "attack": "alie"},
              "train": {"rounds": 2, "batch_size": 10, "lr": 0.1},
              "eval": {"local_clients": 50}}
    runner = Runner(load_config(config))
    assert runner.exp.fed.mixer.topology.sparse
    row = runner.run().metrics[-1]
    assert math.isfinite(row["honest_test_loss"]) and row["bytes_round"] > 0
