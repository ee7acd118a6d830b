"""FedSAGD (Algorithm 1) and its baselines — FedDyn, FedCM, MimeLite, FedLNAG, FedANAG, FedACG —
against float64 re-derivations on heterogeneous least squares with full-batch gradients,
several rounds, with partial (the sampled sets of the participation stream) and full
participation. FedAvgM and FedAdam/Yogi/Adagrad: tests/algorithms/test_phases_and_servers.py."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import gossipfl
from tests.algorithms_fedsagd_cases import (
    BASELINES,
    CASES,
    LR,
    ROUNDS,
    STEPS,
    WD,
    D,
    M,
    fedcm_reference,
    fedsagd_states,
    sampled_rounds,
    sgd,
)
from tests.lsq import Problem, assert_close


def run(p: Problem, algorithm: dict, participation: float, wd: float = 0.0):
    x0 = np.repeat(p.x0[:1], p.M, axis=0)
    return p.run({**algorithm, "participation": participation}, rounds=ROUNDS, steps=STEPS,
                 wd=wd, topology={"name": "ring"}, x0=x0)


@pytest.fixture
def problem():
    return Problem(clients=M, dim=D, seed=4)


# -- FedSAGD -----------------------------------------------------------------------------------
def fedsagd_reference(p, participation, **params):
    """The server model x after ROUNDS rounds (:func:`fedsagd_states`)."""
    return fedsagd_states(p, participation, **params)["server"]


@pytest.mark.parametrize("participation", [0.6, 1.0])
@pytest.mark.parametrize("params", [
    {},  # the paper's defaults β = 0.9, λ = 0.01, μ = 0.001
    {"beta": 0.5, "lam": 0.3, "mu": 0.2, "global_lr": 0.8},
    {"beta": 0.0},  # Table 17: no momentum
    {"lam": 0.0, "mu": 0.0},  # Table 17: no hybrid proximal term
])
def test_fedsagd_algorithm_1(problem, participation, params):
    result = run(problem, {"name": "fedsagd", **params}, participation)
    expected = fedsagd_reference(problem, participation, **params)
    assert_close(result.server_params, expected)


def test_fedsagd_switches_matter_and_bytes(problem):
    strong = {"beta": 0.5, "lam": 0.3, "mu": 0.2}
    full = fedsagd_reference(problem, 0.6, **strong)
    for switched in ({"beta": 0.0}, {"lam": 0.0, "mu": 0.0}):
        assert np.abs(fedsagd_reference(problem, 0.6, **{**strong, **switched}) - full).max() \
            > 1e-3
    result = run(problem, {"name": "fedsagd"}, 0.6)
    s = 3  # 60 % of 5
    # x and v down, Δ up (and each client's step count, one float)
    assert result.metrics[0]["bytes_round"] == s * (3 * D * 4 + 4)


@pytest.mark.parametrize("name", ["fedsagd", "fedcm", "fedanag", "mimelite", "fedlnag"])
def test_own_momentum_ignores_train_momentum_with_a_warning(problem, name):
    config = problem.config({"name": name, "participation": 0.6}, rounds=2,
                            topology={"name": "ring"}, x0=np.repeat(problem.x0[:1], M, axis=0))
    plain = gossipfl.run(config).server_params
    config["train"]["momentum"] = 0.9
    with pytest.warns(Warning, match="train.momentum = 0.9"):
        assert_close(gossipfl.run(config).server_params, plain.double().numpy(), rtol=0, atol=0)


def test_fedsagd_ignores_train_weight_decay_with_a_warning(problem):
    with pytest.warns(Warning, match="weight_decay"):
        result = run(problem, {"name": "fedsagd"}, 0.6, wd=0.1)
    assert_close(result.server_params, fedsagd_reference(problem, 0.6))
    # the same weight decay as μ: nothing to warn about, and μ is not added twice
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = run(problem, {"name": "fedsagd", "mu": 0.1}, 0.6, wd=0.1)
    assert_close(same.server_params, fedsagd_reference(problem, 0.6, mu=0.1))


# -- the baselines -----------------------------------------------------------------------------
def fedavg_reference(p, participation):
    return fedcm_reference(p, participation, alpha=1.0)  # α = 1: plain local SGD


@pytest.mark.parametrize("participation", [0.6, 1.0])
@pytest.mark.parametrize("name, params", CASES)
def test_baseline_matches_its_equations(problem, name, params, participation):
    reference = BASELINES[name][0]
    result = run(problem, {"name": name, **params}, participation, wd=WD)
    expected = reference(problem, participation, **params)
    assert_close(result.server_params, expected, rtol=1e-4, atol=1e-5)
    # the rule is not FedAvg in disguise
    assert np.abs(expected - fedavg_reference(problem, participation)).max() > 1e-4


@pytest.mark.parametrize("name, vectors_down, vectors_up, step_count", [
    ("fedcm", 2, 1, True), ("fedanag", 2, 1, True), ("mimelite", 2, 2, False),
    ("fedlnag", 2, 2, False), ("feddyn", 1, 1, False), ("fedacg", 1, 1, False),
])
def test_baseline_bytes(problem, name, vectors_down, vectors_up, step_count):
    result = run(problem, {"name": name}, 0.6, wd=WD)
    per_client = (vectors_down + vectors_up) * D * 4 + (4 if step_count else 0)
    assert result.metrics[0]["bytes_round"] == 3 * per_client


# -- minibatches: K as taken, Mime's exact full-batch gradient ---------------------------------
def first_round_state(p: Problem, algorithm: dict, wd=WD, batch_size=4, epochs=2):
    """Run one round with minibatches over ``epochs`` epochs; (x_0, the sampled clients,
    the algorithm's state after the round)."""
    x0 = np.repeat(p.x0[:1], p.M, axis=0)
    config = p.config({**algorithm, "participation": 0.6}, rounds=1, wd=wd,
                      topology={"name": "ring"}, x0=x0)
    config["train"].update(local_steps=None, local_epochs=epochs, batch_size=batch_size)
    seen = {}
    gossipfl.run(config, callbacks=[lambda runner, t, row: seen.update(
        {k: v.double().numpy().copy() for k, v in runner.state.items()})])
    chosen = next(sampled_rounds(p, 1, 0.6))[2]
    return p.x0[0], chosen, seen


def test_fedsagd_k_counts_the_steps_taken(problem):
    """Unequal client sizes (6, 9, 12, …) with batches of 4: K_i = epochs · ⌈n_i / 4⌉, and
    v_1 = −Δ_0 / ((1 + β) K η_l) with K the sampled clients' mean."""
    x0, chosen, state = first_round_state(problem, {"name": "fedsagd", "beta": 0.5}, wd=0.0)
    steps = 2 * np.ceil(problem.n[chosen] / 4)
    assert len(set(steps)) > 1  # the clients took different numbers of steps
    delta = state["server"] - x0  # η = 1
    assert_close(state["momentum"], -delta / (1.5 * steps.mean() * LR))


def test_mimelite_momentum_is_built_from_full_batch_gradients(problem):
    """With minibatches, the gradient pass still gives each client's exact ∇f_i(x_t)."""
    x0, chosen, state = first_round_state(problem, {"name": "mimelite", "beta": 0.3})
    full_batch = np.mean([sgd(problem, i, x0) for i in chosen], axis=0)
    assert_close(state["momentum"], 0.7 * full_batch)


# -- checkpoints: the declared state is the whole state ----------------------------------------
@pytest.mark.represented
@pytest.mark.parametrize("name", ["fedsagd", "feddyn", "mimelite", "fedlnag", "fedacg"])
def test_resume_from_a_checkpoint_repeats_the_run(tmp_path, monkeypatch, name):
    from tests.helpers import interrupted_and_resumed

    monkeypatch.setattr("gossipfl.results.lifecycle.write_run_figures", lambda run_dir: [])
    config = {
        "data": {"dataset": "synthetic", "clients": 6,
                 "options": {"dim": 6, "train_size": 120, "test_size": 40, "num_classes": 3}},
        "model": {"name": "logistic"},
        "algorithm": {"name": name, "participation": 0.5},
        "train": {"rounds": 5, "local_steps": 2, "batch_size": 8, "lr": 0.1},
        "eval": {"every": 1}, "output": {"checkpoint_every": 2},
    }
    reference, resumed = interrupted_and_resumed(config, tmp_path)
    assert resumed.status == "finished"
    assert np.array_equal(resumed.result.server_params, reference.result.server_params)
