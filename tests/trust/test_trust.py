"""Byzantine clients and robust gossip (issue 40): every rule and every attack against a float64
NumPy re-derivation on least squares (DFedAvg, full-batch gradients, several rounds and
clients, receivers of several degrees), the exact reductions, the honest-only metrics, the
refusals in one sentence, and exact resumption under attack."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.common.rng import numpy_generator, torch_generator
from gossipfl.core.runner import Runner
from gossipfl.engine import evaluate_stack
from gossipfl.errors import GossipflError
from gossipfl.trust.attacks import alie_z
from tests.helpers import TINY, stopped_and_resumed
from tests.lsq import Problem, assert_close, ring_mh
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

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")


# -- float64 re-derivations, in the papers' notation ----------------------------------------------
def rule_reference(rule, msgs, w, byz_weight):
    """One receiver: msgs [d + 1, P] (row 0 its own), w [d + 1]."""
    name, own, d = rule["rule"], msgs[0], len(msgs) - 1
    if name == "mean":
        return w @ msgs
    if name == "trimmed_mean":
        b = rule["b"]
        kept = np.sort(msgs[1:], axis=0)[b:d - b]
        return (own + kept.sum(0)) / (d - 2 * b + 1)
    if name == "median":
        return np.median(msgs, axis=0)
    if name == "krum":
        n, b = len(msgs), rule["b"]
        dist = ((msgs[:, None] - msgs[None]) ** 2).sum(-1)
        scores = [np.sort(np.delete(dist[a], a))[:n - b - 2].sum() for a in range(n)]
        return msgs[int(np.argmin(scores))]
    if name == "clipped_gossip":
        diffs = msgs - own
        norms = np.linalg.norm(diffs, axis=1)
        tau = rule.get("tau", "practical")
        if tau == "inf":
            tau = math.inf
        elif tau == "practical":  # the b farthest clipped to the (b + 1)-th largest distance
            tau = np.sort(norms)[max(d - rule.get("b", 1), 0)]
        elif tau in ("adaptive", "oracle"):
            delta = rule["delta"] if tau == "adaptive" else byz_weight
            order = np.argsort(-norms[1:], kind="stable")
            dropped = np.cumsum(w[1:][order]) <= delta + 1e-12
            kept = order[~dropped]
            tau = math.sqrt((w[1:][kept] * norms[1:][kept] ** 2).sum() / delta) \
                if delta > 0 else math.inf
        scale = np.where(norms > tau, tau / np.maximum(norms, 1e-300), 1.0)
        return own + (w * scale) @ diffs
    raise AssertionError(name)


def robust_gossip_reference(Z, W, rule, attack, byz, t, noise):
    X = np.empty_like(Z)
    for i in range(len(Z)):
        hood = neighbourhood(W, i)
        msgs = Z[hood].copy()
        if attack is not None and i not in byz:
            crafted = attack_reference(attack, Z, W, i, hood, byz, t, noise)
            for k, j in enumerate(hood):
                if j in crafted:
                    msgs[k] = crafted[j]
        byz_weight = sum(W[i, j] for j in hood[1:] if j in byz)
        X[i] = rule_reference(rule, msgs, W[i, hood], byz_weight)
    return X


def dfedavg_reference(p, W, rule, attack=None, byz=(), noise=None):
    X = p.x0.copy()
    for t in range(ROUNDS):
        Y = X.copy()
        for _ in range(STEPS):
            Y = Y - LR * DECAY**t * p.grads(Y)
        X = robust_gossip_reference(Y, W, rule, attack, list(byz), t, noise)
    return X


def gaussian_noise(p, sigma, seed=3):
    """What ``gaussian`` draws for each round's one gossip call and step: σ ξ per sender."""
    out = []
    for t in range(ROUNDS):
        gen = torch_generator(seed, "byzantine", t, 0, 0)
        draw = sigma * torch.randn(len(BYZANTINE), p.d, generator=gen)
        noise = np.zeros((M, p.d))
        noise[BYZANTINE] = draw.double().numpy()
        out.append(noise)
    return out


RULES = [{"rule": "mean"}, {"rule": "trimmed_mean", "b": 1},
         {"rule": "trimmed_mean", "b": 2},  # d_i = 4 = 2b on some receivers: only z_i left
         {"rule": "median"},
         {"rule": "krum", "b": 1}, {"rule": "clipped_gossip", "tau": 0.3},
         {"rule": "clipped_gossip", "tau": "oracle"},
         {"rule": "clipped_gossip", "tau": "adaptive", "delta": 0.3},
         {"rule": "clipped_gossip"}, {"rule": "clipped_gossip", "tau": "practical", "b": 2}]
ATTACKS = [{"attack": "sign_flip", "scale": 2.0}, {"attack": "gaussian", "scale": 0.5},
           {"attack": "alie"}, {"attack": "alie", "z": 1.5, "view": "all"},
           {"attack": "alie", "view": "own"}, {"attack": "ipm", "epsilon": 0.5, "view": "own"},
           {"attack": "ipm", "epsilon": 0.5}, {"attack": "ipm", "view": "all"},
           {"attack": "dissensus"}]
CASES = [(rule, {"attack": "alie"}) for rule in RULES] + \
    [(rule, attack) for rule in ({"rule": "mean"}, {"rule": "trimmed_mean", "b": 1})
     for attack in ATTACKS]


def _id(case):
    rule, attack = case
    return "-".join(str(v) for v in (*rule.values(), *attack.values()))


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_rule_under_attack_matches_its_equations(case):
    rule, attack = case
    p = Problem(clients=M)
    result = run(p, W7, rule, {"clients": BYZANTINE, **attack})
    noise = gaussian_noise(p, attack.get("scale", 0.0)) if attack["attack"] == "gaussian" \
        else None
    expected = dfedavg_reference(p, W7, rule, attack, BYZANTINE, noise)
    assert_close(result.params, expected, rtol=1e-4, atol=2e-5)
    honest = [i for i in range(M) if i not in BYZANTINE]
    plain = dfedavg_reference(p, W7, {"rule": "mean"})
    assert np.abs(expected[honest] - plain[honest]).max() > 1e-3  # the attack or rule matters


@pytest.mark.parametrize("rule", RULES[1:], ids=[_id((r, {})) for r in RULES[1:]])
def test_rule_without_attackers_matches_its_equations(rule):
    p = Problem(clients=M)
    result = run(p, W7, rule)
    assert_close(result.params, dfedavg_reference(p, W7, rule), rtol=1e-4, atol=2e-5)


# -- exact reductions ---------------------------------------------------------------------------
def test_mean_rule_is_todays_gossip_bit_for_bit():
    p = Problem(clients=M)
    plain = run(p, W7)
    assert torch.equal(run(p, W7, {"rule": "mean"}).params, plain.params)
    config = p.config({"name": "dfedavg"}, W=W7)
    config["topology"]["robust"] = {"rule": "mean"}
    assert not Runner(load_config(config)).exp.fed.pipeline.stages  # the wire's own W z


@pytest.mark.filterwarnings("ignore:algorithm dfedavg assumes a doubly stochastic W")
def test_trimmed_mean_with_b_zero_is_the_uniform_mean_of_the_neighbourhood():
    p = Problem(clients=M)
    pattern = W7 != 0
    uniform = pattern / pattern.sum(axis=1, keepdims=True)  # 1/(d_i + 1) on i's neighbourhood
    trimmed = run(p, W7, {"rule": "trimmed_mean", "b": 0})
    assert_close(trimmed.params, run(p, uniform).params.double().numpy())
    assert np.abs(uniform - W7).max() > 0.05  # not W itself


def test_clipping_with_infinite_radius_is_w_x():
    p = Problem(clients=M)
    clipped = run(p, W7, {"rule": "clipped_gossip", "tau": "inf"})
    assert_close(clipped.params, run(p, W7).params.double().numpy())


def test_oracle_clipping_without_byzantine_neighbours_does_not_clip():
    """δ_i = 0 (no Byzantine neighbour, ``tau: oracle``): τ_i = ∞, the mean."""
    p = Problem(clients=M)
    assert_close(run(p, W7, {"rule": "clipped_gossip", "tau": "oracle"}).params,
                 run(p, W7).params.double().numpy())


def test_practical_clipping_is_the_default_and_needs_no_oracle():
    """The default radius is the authors' experiments' rule: it clips without knowing B (the
    same models whoever is marked Byzantine, as long as nobody attacks)."""
    from gossipfl.trust.rules import build_rule

    assert build_rule({"rule": "clipped_gossip"}).tau == "practical"
    p = Problem(clients=M)
    plain = run(p, W7, {"rule": "clipped_gossip"})
    marked = run(p, W7, {"rule": "clipped_gossip"}, {"clients": BYZANTINE, "attack": "none"})
    assert torch.equal(plain.params, marked.params)
    assert np.abs(plain.params.double().numpy() - run(p, W7).params.double().numpy()).max() \
        > 1e-4  # it does clip


def test_attack_none_marks_byzantine_clients_that_send_their_rows():
    """``attack: none``: the models are plain gossip's bit for bit; the honest columns
    leave the marked clients out."""
    config = {**TINY, "byzantine": {"clients": [1], "attack": "none"},
              "topology": {"name": "full"}, "train": {**TINY["train"], "rounds": 2}}
    runner = Runner(load_config(config))
    runner.run()
    assert not runner.exp.fed.pipeline.stages  # no robust stage: plain gossip
    clean = Runner(load_config({**config, "byzantine": None}))
    clean.run()
    assert torch.equal(runner.client_models(), clean.client_models())
    x = runner.client_models().double().numpy()[[0, 2, 3]]
    expected = ((x - x.mean(0)) ** 2).sum(1).mean()
    assert runner.rows[-1]["honest_consensus"] == pytest.approx(expected, rel=1e-4)


def test_trimmed_mean_at_degree_2b_keeps_the_own_value():
    """A ring with b = 1: both neighbours trimmed, x_i = z_i (no communication)."""
    p = Problem(clients=M)
    trimmed = run(p, ring_mh(M), {"rule": "trimmed_mean", "b": 1})
    assert_close(trimmed.params, dfedavg_reference(p, np.eye(M), {"rule": "mean"}))


def test_alie_z_max_is_the_papers():
    """Baruch et al.: n = 50, f = 12: s = 26 − 12 = 14, z = Φ⁻¹(36/50) ≈ 0.5828."""
    assert alie_z(50, 12) == pytest.approx(0.582842, abs=1e-5)
    assert alie_z(7, 2) == pytest.approx(0.565949, abs=1e-5)  # s = 2, Φ⁻¹(5/7)


# -- honest-only metrics ---------------------------------------------------------------------------
def test_honest_columns_measure_the_honest_clients_only():
    config = {**TINY, "byzantine": {"clients": [1], "attack": "sign_flip"},
              "topology": {"name": "full", "robust": {"rule": "median"}},
              "train": {**TINY["train"], "rounds": 2}}
    result = gossipfl.run(config)
    row = result.metrics[-1]
    for column in ("honest_test_acc", "honest_test_loss", "honest_consensus",
                   "honest_local_acc_mean", "honest_local_acc_std"):
        assert column in row
    x = result.params.double().numpy()[[0, 2, 3]]
    expected = ((x - x.mean(0)) ** 2).sum(1).mean()
    assert row["honest_consensus"] == pytest.approx(expected, rel=1e-4)
    runner = Runner(load_config(config))
    runner.run()
    honest_mean = runner.client_models()[[0, 2, 3]].mean(dim=0, keepdim=True)
    acc, loss = evaluate_stack(runner.exp.oracle, honest_mean, runner.exp.dataset.test_x,
                               runner.exp.dataset.test_y)
    assert runner.rows[-1]["honest_test_acc"] == pytest.approx(float(acc[0]))
    assert runner.rows[-1]["honest_test_loss"] == pytest.approx(float(loss[0]))
    clean = gossipfl.run({**config, "byzantine": None})  # attackers' bytes: as the honest's
    assert clean.metrics[-1]["bytes_total"] == row["bytes_total"]
    assert "honest_consensus" not in gossipfl.run({**TINY, "train": {
        **TINY["train"], "rounds": 1}}).metrics[-1]


def test_label_flip_poisons_only_the_byzantine_clients_labels():
    config = load_config({**TINY, "byzantine": {"clients": [2], "attack": "label_flip"}})
    runner = Runner(config)
    exp, clean = runner.exp, Runner(load_config(TINY)).exp
    classes = exp.dataset.num_classes
    for i, part in enumerate(exp.parts):
        index = torch.as_tensor(part)
        want = classes - 1 - clean.dataset.train_y[index] if i == 2 \
            else clean.dataset.train_y[index]
        assert torch.equal(exp.dataset.train_y[index], want)
    assert not exp.fed.pipeline.stages  # the messages are the rows themselves
    runner.run()
    assert "honest_test_acc" in runner.rows[-1]


# -- every decentralized algorithm, resumption ---------------------------------------------------
@pytest.mark.parametrize("algorithm", ["dpsgd", "dsgt", "kgt", "d2", "dfedsam", "qgm",
                                       pytest.param("dfedmdc", marks=pytest.mark.slow)])
def test_every_gossiping_algorithm_runs_robust_gossip_under_attack(algorithm):
    config = {**TINY, "algorithm": {"name": algorithm},
              "topology": {"name": "full", "robust": {"rule": "trimmed_mean", "b": 1}},
              "byzantine": {"clients": [3], "attack": "gaussian", "scale": 1.0},
              "train": {**TINY["train"], "rounds": 2}}
    if algorithm == "dfedmdc":  # gossips its shared body only
        config["model"] = {"name": "mlp", "options": {"hidden": [8]}}
    if algorithm == "d2":
        config["topology"].update(name="custom", mixing="custom",
                                  matrix=(np.eye(4) + np.full((4, 4), 0.25)) / 2)
    row = gossipfl.run(config).metrics[-1]
    assert math.isfinite(row["honest_test_loss"])


@pytest.mark.parametrize("attack", [{"attack": "gaussian", "scale": 0.5}, {"attack": "alie"},
                                    {"attack": "dissensus"}, {"attack": "sign_flip"},
                                    {"attack": "ipm", "view": "all"},
                                    {"attack": "alie", "view": "own"}])
def test_resume_is_exact_under_attack(attack):
    p = Problem(clients=M)
    config = p.config({"name": "dsgt"}, W=W7, rounds=5)  # two gossip calls per round
    config["topology"]["robust"] = {"rule": "clipped_gossip", "tau": "oracle"}
    config["byzantine"] = {"clients": BYZANTINE, **attack}
    whole = Runner(load_config(config))
    whole.run()
    _, resumed = stopped_and_resumed(config)
    assert torch.equal(whole.client_models(), resumed.client_models())
    assert whole.bytes_total == resumed.bytes_total


def test_chunks_of_receivers_give_the_same_bits(monkeypatch):
    """Receivers gathered a few at a time (a small block budget) or all at once."""
    from gossipfl.trust import neighbourhoods

    p = Problem(clients=M)
    rule, attack = {"rule": "krum", "b": 1}, {"clients": BYZANTINE, "attack": "alie"}
    whole = run(p, W7, rule, attack)
    monkeypatch.setattr(neighbourhoods, "BLOCK_ELEMENTS", 2 * 7 * p.d)
    assert torch.equal(run(p, W7, rule, attack).params, whole.params)


def test_time_varying_graph_checks_every_round_s_degrees():
    config = _config(topology={"name": "random_matching", "robust": {"rule": "krum",
                                                                     "b": 0}})
    with pytest.raises(GossipflError, match=r"client \d+ has 1 in round 0"):
        Runner(load_config(config))


def test_a_researchers_own_rule_registers_and_runs(capsys):
    from gossipfl import cli
    from gossipfl.trust.rules import RULES, RobustRule, register_rule

    @register_rule
    class KeepOwn(RobustRule):
        """x_i = z_i: a client that ignores every message."""

        name, paper = "keep_own", "no gossip at all"

        def aggregate(self, messages, weights, byzantine=None):
            return messages[:, 0]

    try:
        p = Problem(clients=M)
        result = run(p, W7, {"rule": "keep_own"})
        assert_close(result.params, dfedavg_reference(p, np.eye(M), {"rule": "mean"}))
        cli.main(["list"])
        assert "  keep_own  " in capsys.readouterr().out
    finally:
        RULES.pop("keep_own")


def test_byzantine_fraction_draws_from_its_seed():
    p = Problem(clients=10)
    config = p.config({"name": "dfedavg"}, W=ring_mh(10))
    config["topology"] = {"name": "full"}
    config["byzantine"] = {"clients": 0.2, "attack": "ipm", "seed": 11}
    honest = Runner(load_config(config)).exp.honest
    drawn = np.sort(numpy_generator(11, "byzantine").choice(10, size=2, replace=False))
    assert np.flatnonzero(~honest).tolist() == drawn.tolist()


# -- bad input, one sentence each -----------------------------------------------------------------
def _config(**sections):
    p = Problem(clients=6)
    config = p.config({"name": "dfedavg"}, W=ring_mh(6))
    config["topology"] = {"name": "full"}
    for key, value in sections.items():
        if key == "topology":
            config["topology"].update(value)
        else:
            config[key] = value
    return config


BAD = [
    ({"byzantine": {"clients": 1.0}}, "byzantine.clients: a fraction must be in [0, 1), got 1.0"),
    ({"byzantine": {"clients": 0.05, "attack": "ipm"}},
     "byzantine.clients: a fraction of 0.05 of data.clients: 6 rounds to no Byzantine client"),
    ({"byzantine": {"clients": [1]}}, "byzantine.attack: required with byzantine.clients"),
    ({"byzantine": {"clients": [1], "attack": "gaussian", "sigma": 2}},
     "byzantine.sigma: attack gaussian calls this parameter scale now"),
    ({"topology": {"robust": {"rule": "clipped_gossip", "tau": "adaptive"}}},
     "topology.robust.delta: tau: adaptive needs the Byzantine weight delta"),
    ({"topology": {"robust": {"rule": "clipped_gossip", "tau": 0.3, "delta": 0.2}}},
     "topology.robust.delta: only tau: adaptive reads delta"),
    ({"topology": {"robust": {"rule": "clipped_gossip", "tau": "oracle", "b": 2}}},
     "topology.robust.b: only tau: practical reads b"),
    ({"byzantine": {"clients": -0.1}}, "byzantine.clients: a fraction must be in [0, 1)"),
    ({"byzantine": {"clients": [0, 6]}}, "client id 6 is out of range for data.clients: 6"),
    ({"byzantine": {"clients": [2, 2]}}, "name a client twice"),
    ({"byzantine": {"clients": 0.95}}, "makes all 6 clients Byzantine"),
    ({"byzantine": {"clients": "some"}}, "byzantine.clients: must be a fraction in [0, 1)"),
    ({"byzantine": {"attack": "flip"}}, "byzantine.attack: unknown value 'flip'"),
    ({"byzantine": {"attack": "gaussian", "scale": "big"}},
     "byzantine.scale: must be a number > 0, got 'big'"),
    ({"byzantine": {"attack": "alie", "view": "some"}}, "byzantine.view: unknown value 'some'"),
    ({"byzantine": {"attack": "ipm", "scale": 1}},
     "byzantine.scale: unknown parameter of attack 'ipm'"),
    ({"byzantine": {"seed": "x"}}, "byzantine.seed: must be an integer"),
    ({"byzantine": 3}, "byzantine: must be a mapping"),
    ({"topology": {"robust": {"rule": "mode"}}}, "topology.robust.rule: unknown value 'mode'"),
    ({"topology": {"robust": {"rule": "trimmed_mean", "b": -1}}},
     "topology.robust.b: must be an integer >= 0, got -1"),
    ({"topology": {"robust": {"rule": "median", "b": 1}}},
     "topology.robust.b: unknown parameter of rule 'median'"),
    ({"topology": {"robust": {"rule": "clipped_gossip", "tau": -1}}},
     ("topology.robust.tau: must be a number > 0, 'inf' (no clipping), 'practical', "
      "'adaptive' or 'oracle', got -1")),
    ({"topology": {"robust": {"rule": "clipped_gossip", "tau": "adaptive", "delta": 1.0}}},
     "topology.robust.delta: must be in (0, 1) or null, got 1.0"),
]


@pytest.mark.parametrize("sections,sentence", BAD, ids=[s for _, s in BAD])
def test_bad_settings_are_one_sentence(sections, sentence):
    with pytest.raises(GossipflError, match=None) as info:
        load_config(_config(**sections))
    assert sentence in str(info.value) and str(info.value).count(". ") == 0


REFUSED = [
    ({"topology": {"name": "ring", "robust": {"rule": "trimmed_mean", "b": 2}}},
     ("rule trimmed_mean with b = 2 needs at least 2b = 4 neighbours per client, but "
     "client 0 has 2")),
    ({"topology": {"name": "ring", "robust": {"rule": "krum", "b": 1}}},
     "needs at least b + 2 = 3 neighbours per client, but client 0 has 2"),
    ({"algorithm": {"name": "sgp"}, "topology": {"robust": {"rule": "median"}}},
     "algorithm sgp gossips with push-sum weights"),
    ({"algorithm": {"name": "dispfl"}, "byzantine": {"clients": [1], "attack": "ipm"}},
     "algorithm dispfl gossips with push-sum weights, masks"),
    ({"topology": {"robust": {"rule": "median"}, "compression": {
        "compressor": "top_k", "k": 2}}}, "not defined for compressed gossip"),
    ({"algorithm": {"name": "choco", "compressor": "top_k", "k": 2},
      "byzantine": {"clients": [1], "attack": "ipm"}}, "not defined for compressed gossip (choco"),
    ({"algorithm": {"name": "fedavg"}, "byzantine": {"clients": [1], "attack": "ipm"}},
     "byzantine: algorithm fedavg is centralized"),
    ({"topology": {"order": "sequential", "robust": {"rule": "median"}}},
     "topology.robust: needs topology.order: synchronous"),
    ({"topology": {"name": "ring"}, "byzantine": {"clients": [1, 4], "attack": "ipm"}},
     ("without the Byzantine clients [1, 4] the honest clients of topology ring are not "
     "connected")),
]


@pytest.mark.filterwarnings("ignore:topology.name. ignored")
@pytest.mark.parametrize("sections,sentence", REFUSED, ids=[s[:40] for _, s in REFUSED])
def test_undefined_settings_are_refused_before_training(sections, sentence):
    with pytest.raises(GossipflError) as info:
        Runner(load_config(_config(**sections)))
    assert sentence in str(info.value)


def test_list_names_the_rules_and_attacks(capsys):
    from gossipfl import cli

    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("trimmed_mean", "median", "krum", "clipped_gossip", "sign_flip", "gaussian",
                 "alie", "ipm", "dissensus", "label_flip", "none"):
        assert f"  {name} " in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "scale = 200.0 (a number > 0)" in lines["gaussian"]  # each piece's parameters
    assert "tau = practical" in lines["clipped_gossip"]
    assert "view = neighbourhood (one of neighbourhood, all, own)" in lines["alie"]


def test_config_round_trips_through_yaml():
    config = load_config(_config(byzantine={"clients": [1], "attack": "alie", "z": 1.0},
                                 topology={"robust": {"rule": "krum", "b": 1}}))
    again = load_config(load_config(config.to_dict(api_values=True)).to_dict(api_values=True))
    assert again.byzantine.flat() == {"clients": [1], "attack": "alie", "seed": None, "z": 1.0}
    assert again.topology.robust == {"rule": "krum", "b": 1}
    assert "options" not in config.to_dict()["byzantine"]


def test_reports_take_the_honest_accuracy_first():
    from gossipfl.results.rundir import primary_metric

    rows = [{"test_acc": 0.5, "honest_test_acc": 0.6, "local_acc_mean": 0.4}]
    assert primary_metric(rows) == "honest_test_acc"
    assert primary_metric([{"test_acc": 0.5}]) == "test_acc"


def test_a_study_refuses_an_undefined_robust_point_before_any_run_trains(tmp_path, capsys):
    """A grid point whose rule or Byzantine set is undefined for the graph (here Krum on the
    ring; the ring cut by its Byzantine clients, seed by seed) stops the sweep before the
    first run trains, in one sentence naming the point and the seed, exit status 2."""
    from gossipfl.cli import main
    from gossipfl.studies.sweep import expand, load_study

    base = {"data": {"dataset": "synthetic", "clients": 10,
                     "options": {"dim": 8, "train_size": 200, "test_size": 50,
                                 "num_classes": 2}},
            "model": {"name": "logistic"}, "algorithm": {"name": "dfedavg"},
            "train": {"rounds": 1, "local_steps": 1}}
    grid = {"topology": [{"name": "full", "robust": {"rule": "trimmed_mean", "b": 1}},
                         {"name": "ring", "robust": {"rule": "krum", "b": 1}}]}
    with pytest.raises(GossipflError, match=r"needs at least b \+ 2 = 3 neighbours.*"
                       r"grid point 'ring, rule=krum', seed 0\)\.$"):
        expand(load_study({"name": "t", "base": base, "grid": grid, "seeds": [0]}))
    cut = {"name": "t", "base": {**base, "topology": {"name": "ring"}},
           "grid": {"byzantine.clients": [0.2], "byzantine.attack": ["ipm"]}, "seeds": [0, 1]}
    with pytest.raises(GossipflError, match=r"are not connected.*seed 0\)\.$"):
        expand(load_study(cut))
    study = tmp_path / "study.yaml"
    import yaml

    study.write_text(yaml.safe_dump({"name": "t", "base": base, "grid": grid, "seeds": [0]}))
    assert main(["sweep", str(study), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "grid point 'ring, rule=krum', seed 0" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("metrics.csv"))
