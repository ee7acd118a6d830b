"""One file plus its test (issue 49): the plugin examples of a robust rule
(examples/plugins/my_rule.py), an attack (my_attack.py) and a gossip stage (my_stage.py),
each with a parameter of its own declared once (its ``Params``). Each is loaded through a
config's ``plugins:``, runs a tiny federation (DFedAvg on least squares, full-batch
gradients, several clients and rounds) checked against a float64 NumPy re-derivation of its
equation, refuses a bad parameter in one sentence naming the key, and is listed with its
parameter by ``gossipfl list``. (The compressor and the topology examples are tested in
tests/assembly/test_plugins.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gossipfl
from gossipfl import cli
from gossipfl.assembly.loading import load_config
from gossipfl.errors import GossipflError
from tests.lsq import Problem, assert_close, ring_mh
from tests.trust_cases import BYZANTINE, DECAY, LR, ROUNDS, STEPS, W7, M, neighbourhood

PLUGINS = Path(__file__).resolve().parents[2] / "examples" / "plugins"


def plugin(name: str) -> str:
    return str(PLUGINS / f"my_{name}.py")


def config(p: Problem, W, plugins: list[str], **sections) -> dict:
    """DFedAvg on ``p`` over the custom W, naming ``plugins`` (as a config file would)."""
    out = p.config({"name": "dfedavg"}, W=W, rounds=ROUNDS, steps=STEPS, lr=LR, decay=DECAY)
    out["plugins"] = plugins
    for key, value in sections.items():
        if key in ("robust", "stages"):
            out["topology"][key] = value
        else:
            out[key] = value
    return out


def dfedavg_reference(p: Problem, gossip) -> np.ndarray:
    """K local full-batch steps of lr η·decay^t, then X ← gossip(Y, t), every round."""
    X = p.x0.copy()
    for t in range(ROUNDS):
        Y = X.copy()
        for _ in range(STEPS):
            Y = Y - LR * DECAY**t * p.grads(Y)
        X = gossip(Y, t)
    return X


def robust_reference(Z, W, aggregate, crafted=None):
    """Every receiver's ``aggregate(messages [d + 1, P], w [d + 1])`` over its own row and
    its in-neighbours' messages, a Byzantine neighbour of an honest receiver sending
    ``crafted(Z, i, j)`` (None: the true rows)."""
    X = np.empty_like(Z)
    for i in range(len(Z)):
        hood = neighbourhood(W, i)
        msgs = Z[hood].copy()
        if crafted is not None and i not in BYZANTINE:
            for k, j in enumerate(hood):
                if j in BYZANTINE:
                    msgs[k] = crafted(Z, i, j)
        X[i] = aggregate(msgs, W[i, hood])
    return X


def listed(capsys, *plugins: str) -> list[str]:
    assert cli.main(["list", *[a for p in plugins for a in ("--plugin", p)]]) == 0
    return capsys.readouterr().out.splitlines()


# -- a robust rule -----------------------------------------------------------------------------
def test_plugin_rule_filters_by_distance_as_its_equation_says(capsys):
    """x_i = Σ_{j∈K_i} w_ij m_j / Σ_{j∈K_i} w_ij, K_i the messages within ρ of z_i, under
    sign flipping from clients 1 and 4 on a W with receivers of degrees 4, 5 and 6."""
    p, radius = Problem(clients=M), 1.0
    seen = []  # every message's distance to its receiver, and whether it was kept

    def distance_filter(msgs, w):
        distance = np.linalg.norm(msgs - msgs[0], axis=1)
        keep = distance <= radius
        seen.extend(zip(distance[1:], keep[1:], strict=True))
        return w[keep] @ msgs[keep] / w[keep].sum()

    result = gossipfl.run(config(p, W7, [plugin("rule")],
                                 robust={"rule": "distance_filter", "radius": radius},
                                 byzantine={"clients": BYZANTINE, "attack": "sign_flip"}))
    expected = dfedavg_reference(p, lambda Y, t: robust_reference(
        Y, W7, distance_filter, lambda Z, i, j: -Z[j]))
    assert_close(result.params, expected)
    kept = [k for _, k in seen]
    assert 0 < sum(kept) < len(kept)  # the radius keeps some messages and drops others
    assert min(abs(d - radius) for d, _ in seen) > 1e-3  # no float32 tie at the boundary

    with pytest.raises(GossipflError) as info:
        load_config(config(p, W7, [plugin("rule")],
                           robust={"rule": "distance_filter", "radius": 0}))
    assert str(info.value) == "topology.robust.radius: must be > 0, got 0."
    assert any(line.split()[:1] == ["distance_filter"] and "radius = 1.0 (> 0)" in line
               for line in listed(capsys, plugin("rule")))


# -- an attack ---------------------------------------------------------------------------------
def test_plugin_attack_mimics_its_target():
    """m_{j→i} = z_t for every Byzantine j and honest receiver i, mixed by the mean rule
    (x_i = Σ_j w_ij m_{j→i}); the Byzantine receivers mix the true rows."""
    p, target = Problem(clients=M), 2
    result = gossipfl.run(config(p, W7, [plugin("attack")],
                                 byzantine={"clients": BYZANTINE, "attack": "mimic",
                                            "target": target}))
    expected = dfedavg_reference(p, lambda Y, t: robust_reference(
        Y, W7, lambda msgs, w: w @ msgs, lambda Z, i, j: Z[target]))
    assert_close(result.params, expected)
    honest = dfedavg_reference(p, lambda Y, t: W7 @ Y)
    assert not np.allclose(expected, honest, atol=1e-3)  # the attack moves the models


def test_plugin_attack_refuses_bad_targets(capsys):
    p = Problem(clients=M)
    for target, words in [
            (-1, "byzantine.target: must be an integer >= 0, got -1."),
            (1.5, "byzantine.target: must be an integer >= 0, got 1.5."),
            (7, "byzantine.target: must be a client id below data.clients = 7, got 7.")]:
        with pytest.raises(GossipflError) as info:
            gossipfl.run(config(p, W7, [plugin("attack")],
                                byzantine={"clients": BYZANTINE, "attack": "mimic",
                                           "target": target}))
        assert str(info.value) == words
    assert any(line.split()[:1] == ["mimic"] and "target = 0 (an integer >= 0)" in line
               for line in listed(capsys, plugin("attack")))


# -- a gossip stage ----------------------------------------------------------------------------
def test_plugin_stage_relaxes_every_gossip_step(capsys):
    """X ← ((1 − γ) I + γ W)^Q Y with Q = 2 gossip steps a round; the bytes of plain gossip."""
    p, gamma = Problem(clients=5), 0.3
    W = ring_mh(5)
    run = config(p, W, [plugin("stage")], stages=[{"stage": "relaxed", "gamma": gamma}])
    run["algorithm"] = {"name": "dfedavg", "gossip_steps": 2}
    result = gossipfl.run(run)
    relaxed = (1 - gamma) * np.eye(5) + gamma * W
    assert_close(result.params, dfedavg_reference(p, lambda Y, t: relaxed @ relaxed @ Y))
    plain = dict(run, topology=dict(run["topology"], stages=None))
    assert result.metrics[-1]["bytes_round"] == \
        gossipfl.run(plain).metrics[-1]["bytes_round"]
    assert any(line.split()[:1] == ["relaxed"] and "gamma = 0.5 (in (0, 1])" in line
               for line in listed(capsys, plugin("stage")))


@pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")  # fedavg's graph keys
@pytest.mark.parametrize(("stages", "algorithm", "words"), [
    ([{"stage": "relaxed", "gamma": 0}], "dfedavg",
     "topology.stages[0].gamma: must be in (0, 1], got 0."),
    ([{"stage": "relaxed", "gama": 0.5}], "dfedavg",
     ("topology.stages[0].gama: unknown parameter of gossip stage 'relaxed' (value 0.5) (did "
      "you mean 'gamma'?); allowed: gamma.")),
    ([{"stage": "relaxd"}], "dfedavg",
     ("topology.stages[0].stage: unknown value 'relaxd' (did you mean 'relaxed'?); choose "
      "one of: relaxed.")),
    ({"stage": "relaxed"}, "dfedavg",
     ("topology.stages: must be a list of stages such as [{stage: name, <parameters>}], got "
      "{'stage': 'relaxed'}.")),
    ([{"stage": "relaxed"}], "fedavg",
     "topology.stages[0]: algorithm fedavg is centralized and does not gossip."),
    ([{"stage": "relaxed"}], "sgp",
     "topology.stages[0]: algorithm sgp does not gossip x <- W x; remove topology.stages[0]."),
])
def test_plugin_stage_refusals_are_one_sentence(stages, algorithm, words):
    """Its parameter, its name and what it needs of the run (gossipfl.assembly.compat, from its
    Needs), each one sentence naming the key."""
    p = Problem(clients=5)
    run = config(p, ring_mh(5), [plugin("stage")], stages=stages)
    run["algorithm"] = {"name": algorithm}
    with pytest.raises(GossipflError) as info:
        gossipfl.run(run)
    assert str(info.value) == words
