"""topology.order: sequential — waves against a plain Python loop over clients (the authors'
in-place loop, re-derived in float64), the wave schedule, bytes, refusals."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.algorithms.stability import (
    effective_radius,
    gradient_free_round,
    growth_factors,
    safe_beta,
    simulated_growth,
    stability_warning,
)
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.schedules.sequential import one_by_one
from gossipfl.topology import build_topology
from gossipfl.topology.waves import sweep_waves, wave_numbers
from tests.lsq import Problem, assert_close, ring_mh
from tests.sequential_cases import CASES, M, literal_loop, round_matrix, row_stochastic

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")


def authors_graph(p: Problem) -> dict:
    return {"name": "authors_random", "k": 4, "mixing": "uniform"}


GRAPHS = {
    "row_stochastic": lambda p: {"name": "custom", "mixing": "custom",
                                 "matrix": row_stochastic(p.M)},
    "authors_random": authors_graph,
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_waves_equal_the_literal_client_loop(case, graph):
    p = Problem(clients=M, dim=3, seed=5)
    algorithm, kwargs = CASES[case]
    steps = 1 if case.startswith("dpsgd") else 3
    topology = {**GRAPHS[graph](p), "order": "sequential"}
    result = p.run(algorithm, topology=topology, rounds=3, steps=steps, wd=1e-2)
    expected = literal_loop(p, graph, 3, steps, wd=1e-2, **kwargs)
    assert_close(result.params, expected)
    assert result.column("waves")[0] == len(sweep_waves(round_matrix(p, graph, 0)))
    synchronous = p.run(algorithm, topology=GRAPHS[graph](p), rounds=3, steps=steps, wd=1e-2)
    assert np.abs(synchronous.params.numpy() - expected).max() > 1e-4  # the order matters
    assert result.column("bytes_round") == synchronous.column("bytes_round")


def test_wave_schedule():
    W = row_stochastic(9)
    waves = wave_numbers(W)
    linked = (W != 0) & ~np.eye(9, dtype=bool)
    for i in range(9):
        lower = [j for j in range(i) if linked[i, j]]
        assert waves[i] == (max(waves[lower]) + 1 if lower else 0)
        assert not any(waves[j] == waves[i] for j in range(9) if linked[i, j])
    assert len(sweep_waves(ring_mh(6))) == 6  # a ring is a chain: fully sequential
    assert len(sweep_waves(np.eye(4))) == 1  # no edges: one wave
    assert [list(w) for w in one_by_one(3)] == [[0], [1], [2]]


def minibatch_config(order: str) -> dict:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 1, 4, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=240)
    sizes = [30, 20, 40, 25, 35, 30, 60]
    bounds = np.cumsum([0, *sizes])
    train = [(x[a:b], y[a:b]) for a, b in itertools.pairwise(bounds)]
    return {"data": {"clients": 7, "tensors": {"train": train, "test": (x[:20], y[:20]),
                                               "num_classes": 3}, "augment": False},
            "model": {"name": "mlp", "options": {"hidden": [8]}},
            "topology": {"name": "authors_random", "k": 4, "mixing": "uniform",
                         "order": order},
            "algorithm": {"name": "oledfl", "beta": 0.9, "lam": 0.05},
            "train": {"rounds": 3, "local_epochs": 1, "batch_size": 8, "lr": 0.1,
                      "clip_norm": 1.0, "weight_decay": 1e-3},
            "eval": {"local_models": False}, "seed": 1}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_waves_equal_one_client_at_a_time_with_minibatches(monkeypatch):
    """Unequal data sizes, minibatches, clipping, SAM: the batched waves give what the
    literal loop (one client per wave) gives."""
    waved = gossipfl.run(minibatch_config("sequential"))
    from gossipfl.schedules import sequential

    monkeypatch.setattr(sequential, "sweep_waves", lambda W: one_by_one(len(W)))
    literal = gossipfl.run(minibatch_config("sequential"))
    assert literal.column("waves")[0] == 7 > waved.column("waves")[0]
    torch.testing.assert_close(waved.params, literal.params, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("algorithm, words", [
    ({"name": "dpsgd"}, "variant lian"),
    ({"name": "dfedsam_mgs"}, "algorithm.gossip_steps: 1, got 4"),
    ({"name": "fedavg"}, "not defined for algorithm fedavg"),
])
def test_orders_that_are_not_defined_are_refused(algorithm, words):
    p = Problem(clients=4)
    topology = {"name": "ring", "order": "sequential"}
    with pytest.raises(GossipflError, match=f"topology.order: sequential.*{words}"):
        Runner(gossipfl.assembly.loading.load_config(p.config(algorithm, topology=topology)))


def test_unknown_order():
    with pytest.raises(GossipflError, match="topology.order: unknown value 'gauss'"):
        gossipfl.assembly.loading.load_config({"topology": {"order": "gauss"}})


# -- the stability guard knows the order -------------------------------------------------------
def literal_sweep(W, z, mixed, beta, kind):
    """The gradient-free sequential round, one client after the other (float64)."""
    z, mixed = z.copy(), mixed.copy()
    for i in range(len(W)):
        x = W[i] @ z
        z[i] = (1 + beta) * x - beta * z[i] if kind == "ole" else x + beta * (x - mixed[i])
        mixed[i] = x
    return z, mixed


@pytest.mark.parametrize("kind, beta", [("ole", 0.9), ("catalyst", 0.9), ("catalyst", 0.5)])
def test_sequential_radius_is_the_observed_growth_of_the_literal_sweep(kind, beta):
    W = row_stochastic(10)
    rng = np.random.default_rng(0)
    z = rng.normal(size=10)
    mixed = z.copy()
    norms = []
    for _ in range(400):
        z, mixed = literal_sweep(W, z, mixed, beta, kind)
        center = z.mean()
        scale = np.linalg.norm(z - center)
        norms.append(np.log(scale))
        z, mixed = (z - center) / scale, (mixed - center) / scale
    observed = np.exp(np.mean(norms[200:]))
    assert observed == pytest.approx(effective_radius(W, beta, kind, "sequential"), rel=1e-3)
    probes = rng.normal(size=(10, 3))
    waved = gradient_free_round(W, probes, probes, beta, kind, "sequential")
    literal = [literal_sweep(W, probes[:, c], probes[:, c], beta, kind) for c in range(3)]
    np.testing.assert_allclose(waved[0], np.stack([a for a, _ in literal], axis=1))


def test_sequential_ole_is_stable_for_every_beta_where_synchronous_is_not():
    """SOR with ω = 1 + β on a symmetric W: contracting for every β < 1 (Householder–John);
    the synchronous (Jacobi) form on the 1/3 ring only below β = 0.5."""
    W = build_topology("ring", 40).matrix(0)
    for beta in (0.3, 0.6, 0.9, 0.99):
        assert effective_radius(W, beta, "ole", "sequential") < 1
    assert effective_radius(W, 0.9, "ole", "synchronous") > 1
    assert safe_beta(W, "ole", order="sequential") > 0.99


def test_guard_gives_both_orders_and_names_the_sequential_order():
    ring = build_topology("ring", 30)
    factors = growth_factors(ring, 0.9, "ole")
    assert factors["synchronous"] > 1 > factors["sequential"]
    message = stability_warning(ring, 0.9, "ole")
    assert "in the synchronous order" in message and "topology.order: sequential" in message
    assert f"{factors['sequential']:.4f}" in message
    assert stability_warning(ring, 0.9, "ole", "sequential") is None
    catalyst = stability_warning(ring, 0.9, "catalyst", "sequential")  # the paper's Catalyst step in place
    assert catalyst is not None and "in the sequential order" in catalyst
    assert "topology.order: sequential" not in catalyst


def test_time_varying_guard_runs_the_sweep_over_the_graphs_rounds():
    topo = build_topology("authors_random", 40, mixing="uniform", k=6)
    matrices = [topo.matrix(t) for t in range(30)]
    factors = growth_factors(topo, 0.95, "ole", rounds=30)
    assert factors["sequential"] == pytest.approx(
        simulated_growth(matrices, 0.95, "ole", order="sequential"))
    assert factors["sequential"] < 1
