"""SGP (Stochastic Gradient Push) against a float64 re-derivation of Assran et al.'s
Algorithm 1 on a directed column-stochastic matrix; its reduction to D-PSGD; what it refuses."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from gossipfl.algorithms import get_algorithm
from gossipfl.errors import GossipflError
from gossipfl.testing import least_squares, run_round
from gossipfl.topology import build_topology
from tests.lsq import Problem, assert_close, push_matrix, ring_mh

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")


def sgp_reference(p: Problem, P, rounds, lr, decay, wd=0.0):
    """(x, w) after ``rounds`` rounds of SGP in float64, from x^0 = p.x0 and w^0 = 1."""
    x, w = p.x0.astype(np.float64), np.ones((p.M, 1))
    for t in range(rounds):
        z = x / w
        x = x - lr * decay**t * (p.grads(z) + wd * z)
        x, w = P @ x, P @ w
    return x, w


def test_sgp_matches_push_sum_equations_on_a_directed_graph():
    p = Problem(clients=6)
    P = push_matrix(6)
    result = p.run({"name": "sgp"}, W=P, rounds=6, steps=3, wd=1e-2)  # steps: one per round
    x, w = sgp_reference(p, P, 6, 0.05, 0.9, wd=1e-2)
    assert not np.allclose(w, 1.0)  # the weights really move on this graph
    assert_close(result.params, x / w)  # what is evaluated is the de-biased z = x / w


def test_sgp_round_by_round_with_the_testbed():
    p = Problem(clients=5, seed=4)
    P = push_matrix(5, seed=2)
    bed = least_squares(p.A, p.b, P, lr=0.1, lr_decay=0.95)
    algo = get_algorithm("sgp")(None, bed.env, bed.fed)
    state = algo.init(torch.as_tensor(p.x0, dtype=torch.float32))
    for t in range(8):
        run_round(bed, algo, state, t)
        x, w = sgp_reference(p, P, t + 1, 0.1, 0.95)
        assert_close(state["x"], x)
        assert_close(state["w"], w)
        assert_close(algo.client_models(state), x / w)
    # Σ_i x_i changes only by the gradient steps, Σ_i w_i = M always
    assert float(state["w"].sum()) == pytest.approx(5.0, rel=1e-6)
    # the average model is Σ_i x_i / Σ_i w_i = mean of x
    assert_close(algo.global_model(state), x.sum(0) / w.sum())


def test_sgp_reaches_the_minimizer_of_the_mean_objective():
    """Push-sum on a non-doubly-stochastic P still optimizes (1/M) Σ F_i: with a decaying
    step the de-biased models approach its minimizer (plain gossip x ← Px would not)."""
    p = Problem(clients=5, seed=7)
    P = push_matrix(5, seed=3)
    x, w = sgp_reference(p, P, 3000, 0.05, 0.998)
    H = sum(2 / len(b) * A.T @ A for A, b in zip(p.A, p.b, strict=True))
    g = sum(2 / len(b) * A.T @ b for A, b in zip(p.A, p.b, strict=True))
    star = np.linalg.solve(H, g)
    assert np.abs(x / w - star).max() < 2e-3
    rows = P / P.sum(1, keepdims=True)  # the same graph, pulled: x ← R(x − η∇F(x))
    y = p.x0.copy()
    for t in range(3000):
        y = rows @ (y - 0.05 * 0.998**t * p.grads(y))
    assert np.abs(y - star).max() > 1e-2  # biased towards R's Perron weights


@pytest.mark.parametrize("topology", [None, {"name": "one_peer_exponential"},
                                      {"name": "base_k", "k": 2}])
def test_sgp_on_a_doubly_stochastic_matrix_is_dpsgd_local_epoch(topology):
    """w ≡ 1 and z = x: x ← W(x − η∇F(x)), D-PSGD's ``local_epoch`` variant (gradient step,
    then gossip) with one full-batch step; ``lian`` (gradient at the pre-gossip point,
    W x − η∇F(x)) differs."""
    p = Problem(clients=6)
    kwargs = {"W": ring_mh(6)} if topology is None else {"topology": topology}
    sgp = p.run({"name": "sgp"}, rounds=5, steps=1, **kwargs).params.numpy()
    local = p.run({"name": "dpsgd", "variant": "local_epoch"}, rounds=5, steps=1,
                  **kwargs).params.numpy()
    lian = p.run({"name": "dpsgd"}, rounds=5, steps=1, **kwargs).params.numpy()
    np.testing.assert_allclose(sgp, local, rtol=1e-6, atol=1e-6)
    assert np.abs(sgp - lian).max() > 1e-4


def test_sgp_sends_the_model_and_its_weight_to_each_out_neighbour():
    p = Problem(clients=6)
    P = push_matrix(6)
    result = p.run({"name": "sgp"}, W=P, rounds=2, steps=1)
    messages = int((P != 0).sum() - (np.diag(P) != 0).sum())  # j → i for p_ij ≠ 0, i ≠ j
    assert result.metrics[0]["bytes_round"] == messages * 4 * (p.d + 1)


def test_sgp_refuses_a_row_stochastic_only_matrix():
    p = Problem(clients=6)
    with pytest.raises(GossipflError, match=r"^topology.name: algorithm sgp is push-sum .*"
                       r"epidemic topology's uniform matrix is row-stochastic only"):
        p.run({"name": "sgp"}, topology={"name": "epidemic", "s": 2})
    W = ring_mh(6)
    W[0] = [0.5, 0.5, 0, 0, 0, 0]  # rows sum to 1, column 1 does not
    with pytest.raises(GossipflError, match="row-stochastic only"):
        p.run({"name": "sgp"}, W=W)


def test_gossip_algorithms_refuse_a_column_stochastic_only_matrix():
    p = Problem(clients=6)
    with pytest.raises(GossipflError, match=r"^topology.name: algorithm dfedavg mixes .* "
                       r"column-stochastic only \(a push-sum matrix, for algorithm sgp\)\.$"):
        p.run({"name": "dfedavg"}, W=push_matrix(6))


def test_doubly_stochastic_algorithms_warn_only_on_a_static_row_stochastic_matrix():
    p = Problem(clients=6)
    with pytest.warns(UserWarning, match="dfedavg assumes a doubly stochastic W, but the star "
                      "topology's uniform matrix is row-stochastic only"):
        p.run({"name": "dfedavg"}, topology={"name": "star", "mixing": "uniform"}, rounds=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p.run({"name": "dfedavg"}, topology={"name": "epidemic", "s": 2}, rounds=1)
        p.run({"name": "dfedavg"}, topology={"name": "ring", "mixing": "uniform"}, rounds=1)
        p.run({"name": "sgp"}, W=push_matrix(6), rounds=1, steps=None)


def test_column_stochastic_custom_topology():
    P = push_matrix(7)
    topo = build_topology("custom", 7, mixing="custom", array=P)
    assert topo.stochastic == "column" and topo.directed
    assert not topo.describe()["doubly_stochastic"]
    bad = P.copy()
    bad[0, 0] += 0.3  # neither rows nor columns sum to 1
    with pytest.raises(GossipflError, match=r"custom matrix row 0 sums to"):
        build_topology("custom", 7, mixing="custom", array=bad)


@pytest.mark.slow
def test_sgp_resumes_from_a_checkpoint(tmp_path, monkeypatch):
    from tests.helpers import interrupted_and_resumed

    monkeypatch.setattr("gossipfl.results.lifecycle.write_run_figures", lambda run_dir: [])
    np.save(tmp_path / "push.npy", push_matrix(6))
    config = {
        "data": {"dataset": "synthetic", "clients": 6,
                 "options": {"dim": 6, "train_size": 120, "test_size": 40, "num_classes": 3}},
        "model": {"name": "logistic"},
        "algorithm": {"name": "sgp"},
        "topology": {"name": "custom", "mixing": "custom", "path": str(tmp_path / "push.npy")},
        "train": {"rounds": 5, "batch_size": 8, "lr": 0.1},
        "eval": {"every": 1}, "output": {"checkpoint_every": 2},
    }
    reference, resumed = interrupted_and_resumed(config, tmp_path)
    assert resumed.status == "finished"
    assert np.array_equal(resumed.result.params, reference.result.params)
