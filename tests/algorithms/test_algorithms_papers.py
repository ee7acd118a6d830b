"""DFedSAM(-MGS), OledFL, DFedCata, FedSAM, FedProx, SCAFFOLD against float64
re-derivations on least squares with full-batch gradients, and their special cases."""

from __future__ import annotations

import numpy as np
import pytest

from gossipfl.algorithms.stability import (
    effective_radius,
    safe_beta,
    simulated_growth,
    stability_warning,
)
from gossipfl.topology import build_topology
from tests.algorithms_papers_cases import decentralized_states, server_states
from tests.lsq import Problem, assert_close, random_doubly_stochastic, ring_mh


def decentralized_reference(p: Problem, W, rounds, steps, **kwargs):
    """The models X after ``rounds`` rounds of the DFedAvg family (:func:`decentralized_states`)."""
    return decentralized_states(p, W, rounds, steps, **kwargs)["x"]


@pytest.fixture
def problem():
    return Problem(clients=5, dim=4, seed=2)


def test_dfedsam_perturbed_gradient(problem):
    W = random_doubly_stochastic(5)
    result = problem.run({"name": "dfedsam", "rho": 0.2}, W=W, rounds=3, steps=3, wd=1e-2)
    expected = decentralized_reference(problem, W, 3, 3, rho=0.2, wd=1e-2)
    assert_close(result.params, expected)
    plain = decentralized_reference(problem, W, 3, 3, wd=1e-2)
    assert np.abs(expected - plain).max() > 1e-3  # SAM changed the trajectory


def test_dfedsam_mgs_is_w_to_the_q_and_counts_q_exchanges(problem):
    W = ring_mh(5)
    result = problem.run({"name": "dfedsam_mgs", "rho": 0.1}, W=W, rounds=2, steps=2)
    assert_close(result.params, decentralized_reference(problem, W, 2, 2, rho=0.1, q=4))
    assert result.metrics[0]["bytes_round"] == 4 * 10 * problem.d * 4  # Q=4, 10 messages


def test_mgs_with_q1_is_dfedsam(problem):
    W = ring_mh(5)
    a = problem.run({"name": "dfedsam_mgs", "rho": 0.1, "gossip_steps": 1}, W=W, rounds=3)
    b = problem.run({"name": "dfedsam", "rho": 0.1}, W=W, rounds=3)
    assert_close(a.params, b.params.double().numpy(), rtol=0, atol=0)


@pytest.mark.parametrize("lam", [0.0, 0.3])
def test_oledfl_ole_anchor_is_own_last_local_model(problem, lam):
    W = random_doubly_stochastic(5)
    result = problem.run({"name": "oledfl", "beta": 0.6, "lam": lam}, W=W, rounds=4, steps=2,
                         wd=1e-3)
    expected = decentralized_reference(problem, W, 4, 2, rho=lam, wd=1e-3, ole_beta=0.6)
    assert_close(result.params, expected)
    # Ole mattered, and the anchor is not the previous mixed model (that is Catalyst)
    cata = decentralized_reference(problem, W, 4, 2, rho=lam, wd=1e-3, cata_beta=0.6)
    assert np.abs(expected - cata).max() > 1e-3


def test_oledfl_round_zero_has_no_extrapolation(problem):
    from gossipfl.assembly.experiment import StabilityWarning

    W = ring_mh(5)
    with pytest.warns(StabilityWarning, match="algorithm.beta: 0.9 makes the ole extrapolation"):
        one = problem.run({"name": "oledfl", "beta": 0.9, "lam": 0.0}, W=W, rounds=1, steps=2)
    assert_close(one.params, decentralized_reference(problem, W, 1, 2))


@pytest.mark.parametrize("lam, other", [(0.0, {"name": "dfedavg"}),
                                        (0.1, {"name": "dfedsam", "rho": 0.1})])
def test_oledfl_with_beta_zero_reduces(problem, lam, other):
    W = ring_mh(5)
    a = problem.run({"name": "oledfl", "beta": 0.0, "lam": lam}, W=W, rounds=3)
    b = problem.run(other, W=W, rounds=3)
    assert_close(a.params, b.params.double().numpy(), rtol=0, atol=0)


@pytest.mark.parametrize("ref", ["prev_mixed", "own_local"])
def test_dfedcata_extrapolation_and_proximal_step(problem, ref):
    W = random_doubly_stochastic(5)
    result = problem.run({"name": "dfedcata", "beta": 0.5, "lam": 0.4,
                          "extrapolation_ref": ref}, W=W, rounds=4, steps=3, wd=1e-3)
    expected = decentralized_reference(problem, W, 4, 3, wd=1e-3, cata_beta=0.5,
                                       lam_prox=0.4, own_local=ref == "own_local")
    assert_close(result.params, expected)


def test_dfedcata_own_local_without_prox_is_oledfl_sgd(problem):
    W = ring_mh(5)
    a = problem.run({"name": "dfedcata", "beta": 0.4, "lam": 0.0,
                     "extrapolation_ref": "own_local"}, W=W, rounds=3)
    b = problem.run({"name": "oledfl", "beta": 0.4, "lam": 0.0}, W=W, rounds=3)
    assert_close(a.params, b.params.double().numpy(), rtol=0, atol=0)


def test_dfedcata_special_cases(problem):
    W = ring_mh(5)
    both_zero = problem.run({"name": "dfedcata", "beta": 0.0, "lam": 0.0}, W=W, rounds=3)
    dfedavg = problem.run({"name": "dfedavg"}, W=W, rounds=3)
    assert_close(both_zero.params, dfedavg.params.double().numpy(), rtol=0, atol=0)
    moreau = problem.run({"name": "dfedcata", "beta": 0.0, "lam": 0.5}, W=W, rounds=3)
    assert_close(moreau.params, decentralized_reference(problem, W, 3, 2, lam_prox=0.5))
    nesterov = problem.run({"name": "dfedcata", "beta": 0.5, "lam": 0.0}, W=W, rounds=3)
    assert_close(nesterov.params, decentralized_reference(problem, W, 3, 2, cata_beta=0.5))


def test_dfedcata_local_phase_closed_form():
    """Spec 002 §2.1 (Lemma 2): K proximal SGD steps anchored at x_0 give
    x_K − x_0 = −Σ_k η (1 − ηλ)^{K−1−k} g_k, with g_k the gradients along the trajectory."""
    p = Problem(clients=2, dim=3, seed=5)
    eta, lam, steps = 0.05, 0.7, 6
    result = p.run({"name": "dfedcata", "beta": 0.0, "lam": lam}, W=np.full((2, 2), 0.5),
                   rounds=1, steps=steps, lr=eta, decay=1.0)
    finals = []
    for i in range(2):
        x0 = x = p.x0[i]
        grads = []
        for _ in range(steps):  # trajectory, only to know the g_k
            grads.append(p.grad(i, x))
            x = x - eta * (grads[-1] + lam * (x - x0))
        finals.append(x0 - sum(eta * (1 - eta * lam) ** (steps - 1 - k) * g
                               for k, g in enumerate(grads)))
    assert_close(result.params, np.repeat(np.mean(finals, 0)[None], 2, axis=0))


def server_reference(p: Problem, rounds, steps, participation, **kwargs):
    """The server model after ``rounds`` rounds (:func:`server_states`)."""
    return server_states(p, rounds, steps, participation, **kwargs)["server"]


@pytest.mark.parametrize("algorithm, kwargs", [
    ({"name": "fedsam", "rho": 0.2, "participation": 0.6}, {"rho": 0.2}),
    ({"name": "fedprox", "mu": 0.5, "participation": 0.6}, {"mu": 0.5}),
    ({"name": "scaffold", "participation": 0.6}, {"scaffold": True}),
])
def test_server_algorithms(algorithm, kwargs):
    p = Problem(clients=5, dim=3, seed=4)
    x0 = np.repeat(p.x0[:1], 5, axis=0)
    result = p.run(algorithm, rounds=4, steps=3, wd=1e-3, topology={"name": "ring"}, x0=x0)
    expected = server_reference(p, 4, 3, 0.6, wd=1e-3, **kwargs)
    assert_close(result.server_params, expected)
    plain = server_reference(p, 4, 3, 0.6, wd=1e-3)
    assert np.abs(expected - plain).max() > 1e-4


def test_scaffold_sends_twice_fedavg_bytes():
    p = Problem(clients=4, dim=3)
    x0 = np.repeat(p.x0[:1], 4, axis=0)
    a = p.run({"name": "scaffold", "participation": 0.5}, topology={"name": "ring"}, x0=x0)
    b = p.run({"name": "fedavg", "participation": 0.5}, topology={"name": "ring"}, x0=x0)
    assert a.metrics[-1]["bytes_total"] == 2 * b.metrics[-1]["bytes_total"] > 0


# -- stability guard ---------------------------------------------------------------------------
def test_ole_on_ring_diverges_from_beta_one_half():
    W = build_topology("ring", 100).matrix(0)
    assert effective_radius(W, 0.49, "ole") < 1 < effective_radius(W, 0.51, "ole")
    assert effective_radius(W, 0.5, "ole") == pytest.approx(1.0, abs=1e-9)
    assert safe_beta(W, "ole") == pytest.approx(0.5, abs=1e-6)


def test_catalyst_radius_matches_simulation():
    """The predicted growth factor equals the observed one of the gradient-free recursion."""
    W = ring_mh(12)
    beta = 0.9
    radius = effective_radius(W, beta, "catalyst")
    rng = np.random.default_rng(0)
    z_prev = z = rng.normal(size=12)
    norms = []
    for _ in range(400):
        z, z_prev = (1 + beta) * W @ z - beta * W @ z_prev, z
        d = z - z.mean()
        norms.append(np.linalg.norm(d))
    observed = (norms[-1] / norms[-101]) ** (1 / 100)
    assert observed == pytest.approx(radius, rel=1e-3)
    assert radius < 1  # Catalyst on this ring is stable for β < 1 ...
    swap = np.array([[0.05, 0.95], [0.95, 0.05]])  # ... but not with an eigenvalue near −1
    limit = safe_beta(swap, "catalyst")
    assert 0 < limit < 0.9
    assert effective_radius(swap, limit - 1e-3, "catalyst") < 1 <= effective_radius(
        swap, limit + 1e-3, "catalyst")


@pytest.mark.parametrize("beta, kind", [(0.6, "ole"), (0.3, "ole"), (0.9, "catalyst")])
def test_simulated_growth_matches_spectral_radius_on_a_static_graph(beta, kind):
    W = ring_mh(30)
    assert simulated_growth([W] * 300, beta, kind) == pytest.approx(
        effective_radius(W, beta, kind), rel=2e-3)


def test_time_varying_guard_uses_the_graph_sequence():
    """random_k with uniform 1/11 weights: the per-round spectrum says β = 0.9 diverges, the
    sequence of graphs damps disagreement (the papers run β = 0.99 there)."""
    topo = build_topology("random_k", 60, mixing="uniform", k=10)
    assert effective_radius(topo.matrix(0), 0.9, "ole") > 1
    assert stability_warning(topo, 0.9, "ole") is None


def test_stability_warning_message():
    ring = build_topology("ring", 100)
    message = stability_warning(ring, 0.99, "ole")
    assert message is not None and "0.99" in message and "0.500" in message
    assert stability_warning(ring, 0.3, "ole") is None
    full = build_topology("full", 20)
    assert stability_warning(full, 0.99, "ole") is None
