"""GTS-RG and the spectral attack (Gaucher, Dieuleveut & Hendrikx, ICML 2025; issue 40)
against float64 NumPy re-derivations on least squares (DFedAvg, full-batch gradients, several
rounds, receivers of several degrees, with and without attackers), their exact reductions
and their refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipfl.config import load_config
from gossipfl.errors import GossipflError
from gossipfl.runner import Runner
from tests.lsq import Problem, assert_close, ring_mh
from tests.test_trust import (
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


# -- float64 re-derivations ------------------------------------------------------------------------
def gts_reference(msgs, w, b=None, gamma=1.0, delta=None, byz_weight=0.0):
    """One receiver, msgs [d + 1, P] (row 0 its own), w [d + 1]: x_i = z_i + γ Σ_j ω_ij
    (m_j − z_i), ω = w with the farthest neighbours trimmed: b of them, or a weight budget δ
    spent from the farthest down (the last one cut in part)."""
    diffs = msgs - msgs[0]
    norms = np.linalg.norm(diffs, axis=1)
    farthest = 1 + np.argsort(-norms[1:], kind="stable")  # ties: the lower position first
    kept = np.array(w, dtype=float)
    if delta is None:
        kept[farthest[:b]] = 0.0
    else:
        budget = byz_weight if delta == "byzantine" else delta
        for j in farthest:
            cut = min(kept[j], budget)
            kept[j] -= cut
            budget -= cut
    return msgs[0] + gamma * kept @ diffs


def gossip_reference(Z, W, combine, attack=None, byz=()):
    """One robust gossip step: every honest receiver's Byzantine neighbours send the attack's
    message (:func:`attack_reference`, or ``attack`` itself when it is a function)."""
    X = np.empty_like(Z)
    for i in range(len(Z)):
        hood = neighbourhood(W, i)
        msgs = Z[hood].copy()
        if attack is not None and i not in byz:
            crafted = attack(Z, W, i, hood) if callable(attack) else \
                attack_reference(attack, Z, W, i, hood, list(byz), 0, None)
            for k, j in enumerate(hood):
                if j in crafted:
                    msgs[k] = crafted[j]
        byz_weight = sum(W[i, j] for j in hood[1:] if j in byz)
        X[i] = combine(msgs, W[i, hood], byz_weight)
    return X


def dfedavg(p, W, combine, attack=None, byz=()):
    X = p.x0.copy()
    for t in range(ROUNDS):
        Y = X.copy()
        for _ in range(STEPS):
            Y = Y - LR * DECAY ** t * p.grads(Y)
        X = gossip_reference(Y, W, combine, attack, byz)
    return X


def gts(b=None, gamma=1.0, delta=None):
    return lambda msgs, w, byz_weight: gts_reference(msgs, w, b, gamma, delta, byz_weight)


def mean(msgs, w, byz_weight):
    return w @ msgs


# -- gts ---------------------------------------------------------------------------------------------
GTS_CASES = [{"b": 1}, {"b": 2, "gamma": 0.5}, {"b": 1, "gamma": 1.3}, {"delta": 0.3},
             {"delta": 0.45, "gamma": 0.8}]


@pytest.mark.parametrize("params", GTS_CASES, ids=str)
def test_gts_matches_its_equations(params):
    p = Problem(clients=M)
    result = run(p, W7, {"rule": "gts", **params})
    assert_close(result.params, dfedavg(p, W7, gts(**params)), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("params", [{"b": 1}, {"b": 2}, {"delta": "byzantine"}], ids=str)
@pytest.mark.parametrize("attack", [{"attack": "alie"}, {"attack": "sign_flip", "scale": 2.0},
                                    {"attack": "dissensus"}], ids=lambda a: a["attack"])
def test_gts_under_attack_matches_its_equations(params, attack):
    p = Problem(clients=M)
    result = run(p, W7, {"rule": "gts", **params}, {"clients": BYZANTINE, **attack})
    expected = dfedavg(p, W7, gts(**params), attack, BYZANTINE)
    assert_close(result.params, expected, rtol=1e-4, atol=2e-5)
    honest = [i for i in range(M) if i not in BYZANTINE]
    plain = dfedavg(p, W7, mean)
    assert np.abs(expected[honest] - plain[honest]).max() > 1e-3


def test_gts_trims_somebody():
    """The re-derivations above exercise the trimming: b = 1 and a weight δ move some x."""
    p = Problem(clients=M)
    plain = dfedavg(p, W7, gts(b=0))
    assert np.abs(dfedavg(p, W7, gts(b=1)) - plain).max() > 1e-3
    assert np.abs(dfedavg(p, W7, gts(delta=0.3)) - plain).max() > 1e-3


def test_gts_with_b_zero_is_the_plain_gossip_step():
    p = Problem(clients=M)
    plain = run(p, W7).params
    assert_close(run(p, W7, {"rule": "gts", "b": 0}).params, plain.double().numpy(),
                 rtol=1e-5, atol=1e-6)


def test_gts_with_b_zero_is_cs_plus_with_b_zero_bit_for_bit():
    """Neither trims nor clips: both are z_i + γ Σ_j w_ij (m_{j→i} − z_i), the same bits."""
    p = Problem(clients=M)
    attack = {"clients": BYZANTINE, "attack": "alie"}
    for gamma in (0.5, 1.0):
        assert torch.equal(run(p, W7, {"rule": "gts", "b": 0, "gamma": gamma}, attack).params,
                           run(p, W7, {"rule": "cs_plus", "b": 0, "gamma": gamma},
                               attack).params)


def nna_reference(msgs, w, byz_weight, f):
    """NNA (Farhadkhani et al. 2023): the average of the n − f received vectors nearest to
    the receiver's own (its own included)."""
    distance = np.linalg.norm(msgs - msgs[0], axis=1)
    return msgs[np.argsort(distance, kind="stable")[:len(msgs) - f]].mean(axis=0)


def test_gts_on_the_complete_graph_is_nna():
    """Uniform weights 1/M, b = f and γ = M/(M − f): x_i = (z_i + Σ_{M−1−f nearest} m)/(M − f)."""
    p, f = Problem(clients=M), 2
    uniform = np.full((M, M), 1.0 / M)
    attack = {"attack": "sign_flip", "scale": 3.0}
    result = run(p, uniform, {"rule": "gts", "b": f, "gamma": M / (M - f)},
                 {"clients": BYZANTINE, **attack})
    expected = dfedavg(p, uniform, lambda m, w, bw: nna_reference(m, w, bw, f), attack,
                       BYZANTINE)
    assert_close(result.params, expected, rtol=1e-4, atol=2e-5)


def test_gts_trimming_weight_b_w_is_trimming_b_neighbours():
    p = Problem(clients=M)
    uniform = np.full((M, M), 1.0 / M)
    by_count = run(p, uniform, {"rule": "gts", "b": 2}).params
    by_weight = run(p, uniform, {"rule": "gts", "delta": 2 / M}).params
    assert_close(by_weight, by_count.double().numpy(), rtol=1e-5, atol=1e-6)


def test_gts_at_degree_b_does_not_communicate():
    """A ring with b = 2: both neighbours trimmed, x_i = z_i."""
    p = Problem(clients=M)
    trimmed = run(p, ring_mh(M), {"rule": "gts", "b": 2})
    assert_close(trimmed.params, dfedavg(p, np.eye(M), mean))


@pytest.mark.parametrize("spec,words", [
    ({"rule": "gts", "b": 7}, ("topology.robust.b: rule gts with b = 7 needs at least b = 7 "
                               "neighbours per client, but client")),
    ({"rule": "gts", "b": -1}, "topology.robust.b: must be an integer >= 0, got -1."),
    ({"rule": "gts", "b": 1.5}, "topology.robust.b: must be an integer >= 0, got 1.5."),
    ({"rule": "gts", "gamma": 0}, "topology.robust.gamma: must be a number > 0, got 0."),
    ({"rule": "gts", "gamma": "big"}, "topology.robust.gamma: must be a number > 0"),
    ({"rule": "gts", "delta": 1.0}, "topology.robust.delta: must be in (0, 1), 'byzantine'"),
    ({"rule": "gts", "delta": "known"}, "got 'known'."),
    ({"rule": "gts", "b": 1, "delta": 0.2}, ("topology.robust.delta: rule gts trims either b "
                                             "neighbours or the weight delta, got both b = 1 "
                                             "and delta = 0.2; remove one.")),
    ({"rule": "gts", "tau": 1.0}, "topology.robust.tau: unknown parameter of rule 'gts'"),
])
def test_gts_refusals(spec, words):
    p = Problem(clients=M)
    config = p.config({"name": "dfedavg"}, W=W7)
    config["topology"]["robust"] = spec
    with pytest.raises(GossipflError) as info:
        Runner(load_config(config))
    assert words in str(info.value) and str(info.value).count(". ") == 0


def test_gts_with_delta_has_no_degree_requirement():
    p = Problem(clients=M)
    result = run(p, ring_mh(M), {"rule": "gts", "delta": 0.5})
    assert_close(result.params, dfedavg(p, ring_mh(M), gts(delta=0.5)), rtol=1e-4, atol=2e-5)


def test_list_names_gts(capsys):
    from gossipfl import cli

    assert cli.main(["list"]) == 0
    assert "  gts " in capsys.readouterr().out
