"""CS+-RG (Gaucher, Dieuleveut & Hendrikx, ICML 2025; issue 40) against a float64 NumPy
re-derivation on least squares (DFedAvg, several rounds, receivers of several degrees, with and
without attackers), its exact reductions, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from tests.lsq import Problem, assert_close
from tests.trust_cases import (
    BYZANTINE,
    DECAY,
    LR,
    ROUNDS,
    STEPS,
    W7,
    M,
    attack_reference,
    neighbourhood,
    run,
)


def cs_plus_reference(msgs, w, b, gamma):
    """One receiver: x_i = z_i + γ Σ_j w_ij CLIP(m_j − z_i, τ_i), τ_i the (2b + 1)-th largest
    of the d + 1 distances (its own 0 included)."""
    diffs = msgs - msgs[0]
    norms = np.linalg.norm(diffs, axis=1)
    tau = np.sort(norms)[::-1][2 * b]
    scale = np.where(norms > tau, tau / np.maximum(norms, 1e-300), 1.0)
    return msgs[0] + gamma * (w * scale) @ diffs


def reference(p, W, b, gamma, attack=None, byz=()):
    X = p.x0.copy()
    for t in range(ROUNDS):
        Y = X.copy()
        for _ in range(STEPS):
            Y = Y - LR * DECAY ** t * p.grads(Y)
        X = np.empty_like(Y)
        for i in range(len(Y)):
            hood = neighbourhood(W, i)
            msgs = Y[hood].copy()
            if attack is not None and i not in byz:
                crafted = attack_reference(attack, Y, W, i, hood, list(byz), t, None)
                for k, j in enumerate(hood):
                    if j in crafted:
                        msgs[k] = crafted[j]
            X[i] = cs_plus_reference(msgs, W[i, hood], b, gamma)
    return X


@pytest.mark.parametrize("b,gamma", [(1, 1.0), (2, 0.5), (1, 0.7)])
def test_cs_plus_matches_its_equations(b, gamma):
    p = Problem(clients=M)
    rule = {"rule": "cs_plus", "b": b, "gamma": gamma}
    assert_close(run(p, W7, rule).params, reference(p, W7, b, gamma), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("attack", [{"attack": "alie"}, {"attack": "sign_flip", "scale": 2.0},
                                    {"attack": "dissensus"}])
def test_cs_plus_under_attack_matches_its_equations(attack):
    p = Problem(clients=M)
    result = run(p, W7, {"rule": "cs_plus", "b": 1}, {"clients": BYZANTINE, **attack})
    expected = reference(p, W7, 1, 1.0, attack, BYZANTINE)
    assert_close(result.params, expected, rtol=1e-4, atol=2e-5)
    honest = [i for i in range(M) if i not in BYZANTINE]
    plain = reference(p, W7, 0, 1.0)
    assert np.abs(expected[honest] - plain[honest]).max() > 1e-3


def test_cs_plus_clips_somebody():
    """The re-derivations above exercise clipping: with b = 1 some receiver's 2 farthest
    neighbours are moved (x differs from the unclipped γ-step)."""
    p = Problem(clients=M)
    assert np.abs(reference(p, W7, 1, 1.0) - reference(p, W7, 0, 1.0)).max() > 1e-3


def test_b_zero_is_the_plain_gossip_step():
    p = Problem(clients=M)
    plain = run(p, W7).params
    assert_close(run(p, W7, {"rule": "cs_plus", "b": 0}).params, plain.double().numpy(),
                 rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spec,words", [
    ({"rule": "cs_plus", "b": 3}, ("topology.robust.b: rule cs_plus with b = 3 needs at "
                                   "least 2b = 6 neighbours per client, but client")),
    ({"rule": "cs_plus", "b": -1}, "topology.robust.b: must be an integer >= 0"),
    ({"rule": "cs_plus", "gamma": 0}, "topology.robust.gamma: must be a number > 0"),
    ({"rule": "cs_plus", "gamma": "big"}, "topology.robust.gamma: must be a number > 0"),
])
def test_cs_plus_refusals(spec, words):
    p = Problem(clients=M)
    config = p.config({"name": "dfedavg"}, W=W7)
    config["topology"]["robust"] = spec
    with pytest.raises(GossipflError) as info:
        Runner(load_config(config))
    assert words in str(info.value)


def test_list_names_cs_plus(capsys):
    from gossipfl import cli

    assert cli.main(["list"]) == 0
    assert "  cs_plus " in capsys.readouterr().out
