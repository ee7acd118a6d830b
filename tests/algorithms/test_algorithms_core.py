"""D-PSGD, DFedAvg, DFedAvgM and FedAvg against float64 re-derivations of their equations."""

from __future__ import annotations

import numpy as np
import pytest

from gossipfl.common.rng import numpy_generator
from tests.algorithms_core_cases import dfedavg_reference, dpsgd_reference, lr_at
from tests.lsq import Problem, assert_close, random_doubly_stochastic, ring_mh

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")


@pytest.mark.parametrize("W_fn", [ring_mh, random_doubly_stochastic])
def test_dfedavg_matches_equations(W_fn):
    p = Problem(clients=6)
    W = W_fn(6)
    result = p.run({"name": "dfedavg"}, W=W, rounds=4, steps=3, lr=0.05, decay=0.9, wd=1e-2)
    expected = dfedavg_reference(p, W, rounds=4, steps=3, lr=0.05, decay=0.9, wd=1e-2)
    assert_close(result.params, expected)
    # the update is not trivial: the models moved and did not reach consensus
    assert np.abs(expected - p.x0).max() > 0.1


def test_dfedavg_gossip_steps_is_w_to_the_q():
    p = Problem(clients=5)
    W = ring_mh(5)
    result = p.run({"name": "dfedavg", "gossip_steps": 3}, W=W, rounds=2, steps=2)
    assert_close(result.params, dfedavg_reference(p, W, 2, 2, 0.05, 0.9, gossip_steps=3))


def test_dfedavgm_heavy_ball_reset_each_round():
    p = Problem(clients=5)
    W = random_doubly_stochastic(5)
    result = p.run({"name": "dfedavgm", "momentum": 0.7}, W=W, rounds=3, steps=4, wd=1e-3)
    expected = dfedavg_reference(p, W, 3, 4, 0.05, 0.9, wd=1e-3, momentum=0.7)
    assert_close(result.params, expected)
    # momentum matters: differs from plain DFedAvg
    plain = dfedavg_reference(p, W, 3, 4, 0.05, 0.9, wd=1e-3)
    assert np.abs(expected - plain).max() > 1e-3


def test_dpsgd_lian_gradient_at_pre_gossip_point():
    p = Problem(clients=6)
    W = random_doubly_stochastic(6)
    result = p.run({"name": "dpsgd"}, W=W, rounds=5, steps=7, wd=1e-2)  # steps ignored: one
    assert_close(result.params, dpsgd_reference(p, W, 5, 0.05, 0.9, wd=1e-2))


def test_dpsgd_local_epoch_variant_is_dfedavg_with_one_epoch():
    p = Problem(clients=4)
    W = ring_mh(4)
    result = p.run({"name": "dpsgd", "variant": "local_epoch"}, W=W, rounds=3, steps=5)
    # full batch: one epoch is one full-batch step
    assert_close(result.params, dfedavg_reference(p, W, 3, 1, 0.05, 0.9))


@pytest.mark.parametrize("participation", [1.0, 0.5])
def test_fedavg_weighted_server_average(participation):
    p = Problem(clients=6)
    seed = 3  # Problem.config's seed
    rounds, steps, lr, decay, wd, global_lr = 4, 3, 0.05, 0.9, 1e-2, 0.8
    result = p.run({"name": "fedavg", "participation": participation, "global_lr": global_lr},
                   rounds=rounds, steps=steps, lr=lr, decay=decay, wd=wd,
                   topology={"name": "ring"}, x0=np.repeat(p.x0[:1], 6, axis=0))
    x = p.x0[0].copy()
    count = max(1, round(participation * 6))
    for t in range(rounds):
        eta = lr_at(lr, decay, t)
        chosen = np.sort(numpy_generator(seed, "participation", t).choice(6, count, False))
        ys = []
        for i in chosen:
            y = x.copy()
            for _ in range(steps):
                y = y - eta * (p.grad(i, y) + wd * y)
            ys.append(y)
        weights = p.n[chosen] / p.n[chosen].sum()
        x = x + global_lr * (weights @ (np.stack(ys) - x))
    assert result.server_params is not None
    assert_close(result.server_params, x)
    assert_close(result.params, np.repeat(x[None], 6, axis=0))
    # bytes: model down + up for each sampled client, every round
    assert result.metrics[-1]["bytes_total"] == rounds * 2 * count * 4 * p.d


def test_bytes_and_consensus_for_gossip():
    p = Problem(clients=5)
    W = ring_mh(5)
    result = p.run({"name": "dfedavg", "gossip_steps": 2}, W=W, rounds=2, steps=1)
    # ring of 5: 10 directed messages per gossip step, 2 steps, P = d floats of 4 bytes
    assert result.metrics[0]["bytes_round"] == 10 * 2 * p.d * 4
    X = result.params.double().numpy()
    expected = ((X - X.mean(0)) ** 2).sum(1).mean()
    assert result.metrics[-1]["consensus"] == pytest.approx(expected, rel=1e-5)
