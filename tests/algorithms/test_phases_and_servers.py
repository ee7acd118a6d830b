"""Local phases (parameter groups, per-phase lr and momentum), train.momentum, train.clip_norm
and the server optimizers, each against a float64 NumPy re-derivation on least squares."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import gossipfl
from gossipfl.algorithms import ALGORITHMS, Phase
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg, GossipParams
from gossipfl.common.rng import numpy_generator
from tests.lsq import Problem, assert_close, random_doubly_stochastic

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")

SEED = 3  # Problem.config's seed


@dataclass
class TwoPhaseParams(GossipParams):  # a DFedAvg subclass keeps DFedAvg's gossip_steps
    head_lr: float = 0.02


class TwoPhase(DFedAvg):
    """Test algorithm: head phase (personal, own lr, momentum), body phase, body gossip."""

    name = "test_two_phase"
    Params = TwoPhaseParams

    def phases(self):
        return [Phase("head", steps=2, lr=self.params.head_lr, group="personal", momentum=0.5),
                Phase("body", steps=3, group="shared")]

    def end_round(self, ctx, state, work):
        state["x"] = self.fed.gossip(work.y, ctx.round, group="shared")


def bias_problem(p: Problem):
    """The linear model with a bias: x = [w, b] and rows a' = [a, 1]."""
    A = [np.hstack([a, np.ones((len(a), 1))]) for a in p.A]
    grad = lambda i, x: 2.0 / len(p.b[i]) * A[i].T @ (A[i] @ x - p.b[i])
    return grad


@pytest.fixture
def two_phase():
    ALGORITHMS[TwoPhase.name] = TwoPhase  # registered for this test only
    yield
    del ALGORITHMS[TwoPhase.name]


def test_two_phases_move_only_their_group_and_gossip_only_the_body(two_phase):
    p = Problem(clients=5, dim=3)
    W = random_doubly_stochastic(5, seed=2)
    x0 = np.hstack([p.x0, 0.3 * np.ones((5, 1))])
    config = p.config({"name": "test_two_phase"}, W=W, rounds=3, lr=0.05, decay=0.9, x0=x0)
    config["model"] = {"name": "linear", "options": {"bias": True}, "personal": ["head.bias"]}
    result = gossipfl.run(config)
    grad = bias_problem(p)
    X = x0.copy()
    personal = np.array([False] * 3 + [True])
    for t in range(3):
        Y = X.copy()
        for i in range(5):
            v = np.zeros(4)
            for _ in range(2):  # head phase: lr 0.02 decayed, momentum 0.5, bias only
                v = 0.5 * v - 0.02 * 0.9**t * grad(i, Y[i]) * personal
                Y[i] += v
            for _ in range(3):  # body phase: train lr, weights only
                Y[i] -= 0.05 * 0.9**t * grad(i, Y[i]) * ~personal
        X = np.where(personal, Y, W @ Y)
    assert_close(result.params, X)
    assert np.abs(X[:, 3] - 0.3).max() > 1e-3  # the head moved
    # bytes: the 3 body coordinates only, to each neighbour
    messages = np.count_nonzero(W) - np.count_nonzero(np.diag(W))
    assert result.metrics[0]["bytes_round"] == messages * 3 * 4


def test_train_momentum_is_dfedavgm():
    p = Problem(clients=5)
    W = random_doubly_stochastic(5)
    config = p.config({"name": "dfedavg"}, W=W, rounds=3, steps=4)
    config["train"]["momentum"] = 0.7
    general = gossipfl.run(config)
    dfedavgm = p.run({"name": "dfedavgm", "momentum": 0.7}, W=W, rounds=3, steps=4)
    assert_close(general.params, dfedavgm.params.double().numpy())


def test_clip_norm_clips_each_clients_gradient_before_weight_decay():
    p = Problem(clients=4)
    W = random_doubly_stochastic(4)
    config = p.config({"name": "dfedavg"}, W=W, rounds=2, steps=3, wd=0.1)
    config["train"]["clip_norm"] = 0.5
    result = gossipfl.run(config)
    X = p.x0.copy()
    clipped = 0
    for t in range(2):
        Y = X.copy()
        for _ in range(3):
            G = p.grads(Y)
            norms = np.linalg.norm(G, axis=1, keepdims=True)
            clipped += int((norms > 0.5).sum())
            G = G * np.minimum(1.0, 0.5 / (norms + 1e-6))
            Y = Y - 0.05 * 0.9**t * (G + 0.1 * Y)
        X = W @ Y
    assert clipped > 0
    assert_close(result.params, X)


def server_reference(p: Problem, rule, rounds=4, steps=2, participation=0.5, lr=1.5):
    """FedAvg clients; the server applies ``rule(x, delta, state) -> x``."""
    x, state = p.x0[0].copy(), {}
    count = max(1, round(participation * p.M))
    for t in range(rounds):
        eta = 0.05 * 0.9**t
        chosen = np.sort(numpy_generator(SEED, "participation", t).choice(p.M, count, False))
        ys = []
        for i in chosen:
            y = x.copy()
            for _ in range(steps):
                y = y - eta * p.grad(i, y)
            ys.append(y)
        weights = p.n[chosen] / p.n[chosen].sum()
        x = rule(x, weights @ (np.stack(ys) - x), state, lr)
    return x


def momentum_rule(x, d, s, lr):
    s["v"] = 0.8 * s.get("v", 0) + d
    return x + lr * s["v"]


def adaptive_rule(kind):
    def rule(x, d, s, lr, b1=0.9, b2=0.99, tau=1e-3):
        s["m"] = b1 * s.get("m", 0) + (1 - b1) * d
        v = s.get("v", np.full_like(x, tau**2))
        if kind == "adagrad":
            v = v + d * d
        elif kind == "adam":
            v = b2 * v + (1 - b2) * d * d
        else:
            v = v - (1 - b2) * d * d * np.sign(v - d * d)
        s["v"] = v
        return x + lr * s["m"] / (np.sqrt(v) + tau)
    return rule


@pytest.mark.parametrize("name, params, rule", [
    ("fedavgm", {"server_momentum": 0.8}, momentum_rule),
    ("fedadagrad", {}, adaptive_rule("adagrad")),
    ("fedadam", {}, adaptive_rule("adam")),
    ("fedyogi", {}, adaptive_rule("yogi")),
])
def test_server_optimizers_match_their_rules(name, params, rule):
    p = Problem(clients=6)
    lr = 0.1 if name != "fedavgm" else 1.5
    result = p.run({"name": name, "participation": 0.5, "global_lr": lr, **params},
                   rounds=4, steps=2, topology={"name": "ring"},
                   x0=np.repeat(p.x0[:1], 6, axis=0))
    expected = server_reference(p, rule, lr=lr)
    assert_close(result.server_params, expected, rtol=1e-4, atol=1e-5)
    assert np.abs(expected - p.x0[0]).max() > 1e-2
