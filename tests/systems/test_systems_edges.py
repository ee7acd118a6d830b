"""The systems model on a topology built as edges (issue 42): the renormalized W'_t on edges
equals the dense one, link failures are drawn per undirected link, and a run of many clients
(here: the edge form forced at a few clients) keeps the clocks of the hand derivation and the
models of the dense run."""

from __future__ import annotations

import numpy as np
import pytest

from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.systems import SystemsModel, renormalize, renormalize_edges
from gossipfl.topology import graphs
from gossipfl.topology.sparse import Edges
from tests.lsq import Problem, random_doubly_stochastic

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")

M = 8


def run(config: dict) -> Runner:
    runner = Runner(load_config(config))
    runner.run()
    return runner


@pytest.mark.parametrize("column", [False, True])
def test_renormalized_edges_equal_the_dense_renormalized_matrix(column):
    rng = np.random.default_rng(0)
    W = random_doubly_stochastic(M, rng) * (rng.random((M, M)) < 0.6)
    np.fill_diagonal(W, 0.3)
    offline = rng.random(M) < 0.3
    failed = np.triu(rng.random((M, M)) < 0.3, 1)
    failed |= failed.T
    E = Edges.from_dense(W)
    got = renormalize_edges(E, offline, failed[E.rows, E.cols], column=column)
    np.testing.assert_allclose(got.to_dense(), renormalize(W, offline, failed, column=column),
                               rtol=0, atol=1e-15)
    assert (got.rows != got.cols).sum() == ((renormalize(W, offline, failed, column=column)
                                              != 0).sum() - (np.diag(W) != 0).sum())


def test_a_links_failure_is_one_draw_for_both_directions_at_the_configured_rate():
    config = Problem(clients=4).config({"name": "dfedavg"}, topology={"name": "ring"})
    config["systems"] = {"availability": {"links": {"fail": 0.25}}}
    model = SystemsModel(load_config(config).systems, 2000, seed=5)
    rows = np.repeat(np.arange(2000), 2)
    cols = np.stack([(np.arange(2000) + 1) % 2000, (np.arange(2000) - 1) % 2000], 1).ravel()
    failed = model.failed_edges(3, rows, cols)
    back = model.failed_edges(3, cols, rows)
    np.testing.assert_array_equal(failed, back)
    assert abs(failed.mean() - 0.25) < 0.03  # 2000 links: 3 standard deviations is 0.029
    assert not np.array_equal(failed, model.failed_edges(4, rows, cols))
    assert model.failed_edges(3, rows[:10], cols[:10]).tolist() == failed[:10].tolist()


def config_with(systems: dict) -> dict:
    p = Problem(clients=M)
    config = p.config({"name": "dfedavg"}, topology={"name": "ring"}, rounds=5, steps=2)
    config["systems"] = systems
    return config


CHURN = {"compute": {"seconds_per_step": 0.1, "stragglers": 0.25, "slowdown": 5},
         "network": {"latency": 0.5}, "availability": {"offline": 0.3}}


def test_churn_on_edges_keeps_the_dense_runs_clocks_and_models(monkeypatch):
    dense = run(config_with(CHURN))
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 4)
    edges = run(config_with(CHURN))
    assert edges.exp.topology.sparse and not dense.exp.topology.sparse
    np.testing.assert_array_equal(edges.exp.systems.clock.T, dense.exp.systems.clock.T)
    assert dense.exp.systems.clock.T.max() > 0
    x_dense, x_edges = dense.client_models(), edges.client_models()
    np.testing.assert_allclose(x_edges.numpy(), x_dense.numpy(), rtol=0, atol=1e-6)
    assert [r["bytes_total"] for r in edges.rows] == [r["bytes_total"] for r in dense.rows]


def test_failed_links_on_edges_match_the_hand_derived_clocks(monkeypatch):
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 4)
    systems = {**CHURN, "availability": {"offline": 0.2, "links": {"fail": 0.3}}}
    config = config_with(systems)
    runner = run(config)
    model = SystemsModel(load_config(config).systems, M, config["seed"])
    rows = np.repeat(np.arange(M), 2)
    cols = np.stack([(np.arange(M) - 1) % M, (np.arange(M) + 1) % M], 1).ravel()
    c = model.compute(0)
    T = np.zeros(M)
    failures = 0
    for t in range(5):
        off = model.offline(t)
        failed = model.failed_edges(t, rows, cols)
        failures += failed.sum()
        ready = T + 2 * c
        new = ready.copy()
        for i, j, f in zip(rows, cols, failed):
            if not (f or off[i] or off[j]):
                new[i] = max(new[i], ready[j] + 0.5)
        T = np.where(off, T, new)
    assert failures > 0
    np.testing.assert_allclose(runner.exp.systems.clock.T, T, rtol=0, atol=1e-12)


# -- the sequential and asynchronous orders on edges -----------------------------------------------
@pytest.mark.parametrize(("order", "algorithm", "name"), [
    ("sequential", "dfedavg", "ring"), ("sequential", "dfedavg", "one_peer_exponential"),
    ("sequential", "dfedsam", "exponential"), ("asynchronous", "adpsgd", "ring"),
    ("asynchronous", "adpsgd", "exponential")])
def test_the_gossip_orders_on_edges_give_the_dense_runs_numbers(monkeypatch, order, algorithm,
                                                                name):
    """(The deterministic graphs: a random graph draws from another stream as edges.)"""
    p = Problem(clients=M)
    config = p.config({"name": algorithm}, topology={"name": name, "order": order}, rounds=3,
                      steps=2)
    if algorithm == "adpsgd":
        config["train"]["local_steps"] = 1
    dense = run(config)
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 4)
    edges = run(config)
    assert edges.exp.topology.sparse and not dense.exp.topology.sparse
    np.testing.assert_allclose(edges.client_models().numpy(), dense.client_models().numpy(),
                               rtol=0, atol=1e-6)
    for got, want in zip(edges.rows, dense.rows, strict=True):
        assert got["bytes_total"] == want["bytes_total"]
        assert got.get("waves") == want.get("waves")


def test_waves_from_edges_equal_the_waves_from_the_matrix():
    from gossipfl.topology.waves import sweep_waves, wave_numbers

    rng = np.random.default_rng(3)
    for _ in range(5):
        W = (rng.random((30, 30)) < 0.1) * rng.random((30, 30))
        np.fill_diagonal(W, 1.0)
        linked = (W != 0) | (W.T != 0)
        want = np.zeros(30, dtype=np.int64)
        for i in range(30):  # the definition, client by client
            lower = np.flatnonzero(linked[i, :i])
            want[i] = want[lower].max() + 1 if len(lower) else 0
        np.testing.assert_array_equal(wave_numbers(Edges.from_dense(W)), want)
        np.testing.assert_array_equal(wave_numbers(W), want)
        assert [w.tolist() for w in sweep_waves(Edges.from_dense(W))] == [
            np.flatnonzero(want == k).tolist() for k in range(want.max() + 1)]
