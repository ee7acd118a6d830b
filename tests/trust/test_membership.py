"""Membership inference that measures membership (issue 51): each client's own held-out
non-members, the loss-threshold attack's AUC and pooled TPR at low FPR, and offline LiRA
(Carlini et al., S&P 2022) against shadow federations; each statistic against a float64
re-derivation on synthetic scores, the split against its definition, the refusals in one
sentence, and exact resumption."""

from __future__ import annotations

import copy
import math
from statistics import NormalDist

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.trust import membership as mia
from tests.helpers import TINY, interrupted_and_resumed, stopped_and_resumed


# -- the statistics against float64 re-derivations ------------------------------------------------
def test_auc_with_masked_non_members_is_the_mann_whitney_statistic():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 6, size=(4, 9)).astype(np.float64)  # ties on purpose
    b = rng.integers(0, 6, size=(4, 7)).astype(np.float64)
    ma, mb = rng.random((4, 9)) < 0.7, rng.random((4, 7)) < 0.6
    ma[:, 0] = mb[:, 0] = True
    got = mia.auc(torch.tensor(a), torch.tensor(ma), torch.tensor(b), torch.tensor(mb))
    for i in range(4):
        x, y = a[i][ma[i]], b[i][mb[i]]
        wins = sum(1.0 if u < v else 0.5 if u == v else 0.0 for u in x for v in y)
        assert got[i].item() == pytest.approx(wins / (len(x) * len(y)), abs=1e-15)


def _tpr_reference(members, others, fpr):
    """The largest TPR over every threshold t (each score and −∞) with FPR(t) ≤ fpr, where
    a score above t says member."""
    best = 0.0
    for t in [-math.inf, *others, *members]:
        if np.mean(others > t) <= fpr + 1e-12:
            best = max(best, float(np.mean(members > t)))
    return best


@pytest.mark.parametrize("fpr", [0.0, 0.001, 0.01, 0.1, 0.5])
def test_tpr_at_low_fpr_is_the_best_admissible_threshold(fpr):
    rng = np.random.default_rng(1)
    members = rng.normal(0.8, 1.0, size=(5, 60)).round(1)  # ties across and within the sets
    others = rng.normal(0.0, 1.0, size=(5, 60)).round(1)
    ma, mb = rng.random((5, 60)) < 0.8, rng.random((5, 60)) < 0.9
    got = mia.tpr_at_fpr(torch.tensor(members), torch.tensor(ma), torch.tensor(others),
                         torch.tensor(mb), fpr)
    assert got == pytest.approx(_tpr_reference(members[ma], others[mb], fpr), abs=1e-15)
    # pooled over the clients, one threshold: not the mean of per-client values
    assert 0.0 <= got <= 1.0


def test_confidence_logit_is_log_p_over_one_minus_p():
    rng = np.random.default_rng(2)
    logits = rng.normal(0, 4, size=(3, 5, 4))
    labels = rng.integers(0, 4, size=(3, 5))
    got = mia.confidence_logit(torch.tensor(logits, dtype=torch.float32),
                               torch.tensor(labels)).numpy()
    z = logits.astype(np.float32).astype(np.float64)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    py = np.take_along_axis(p, labels[..., None], -1)[..., 0]
    assert np.allclose(got, np.log(py) - np.log1p(-py), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("variance", ["per_example", "global"])
def test_offline_lira_is_the_papers_one_sided_gaussian_test(variance):
    """Λ = Φ((φ − μ_out)/σ_out) over each candidate's out shadows (float64, NormalDist)."""
    rng = np.random.default_rng(3)
    S, K, N = 2, 6, 5
    target = rng.normal(size=(S, N))
    shadow = rng.normal(size=(S, K, N))
    out = rng.random((S, K, N)) < 0.5
    out[:, 0] = out[:, 1] = True  # at least two out shadows each
    out[1, :, 4] = False  # a candidate without out shadow: ½
    got = mia.lira_offline(torch.tensor(target), torch.tensor(shadow), torch.tensor(out),
                           variance).numpy()
    var = np.full((S, N), np.nan)
    for s in range(S):
        for n in range(N):
            values = shadow[s, :, n][out[s, :, n]]
            if len(values):
                var[s, n] = values.var()
    pooled = np.nanmean(var)
    for s in range(S):
        for n in range(N):
            values = shadow[s, :, n][out[s, :, n]]
            if not len(values):
                assert got[s, n] == 0.5
                continue
            sd = math.sqrt(pooled if variance == "global" else var[s, n])
            want = NormalDist(values.mean(), sd).cdf(target[s, n])
            assert got[s, n] == pytest.approx(want, abs=1e-12)


# -- the split ----------------------------------------------------------------------------------
def test_holdout_split_partitions_each_client_and_refuses_empty_sides():
    parts = [np.arange(0, 10), np.arange(10, 30), np.arange(30, 33)]
    trained, held = mia.holdout_split(parts, 0.3, seed=5)
    for part, t, h in zip(parts, trained, held):
        assert len(h) == round(0.3 * len(part)) and not np.intersect1d(t, h).size
        assert sorted([*t, *h]) == part.tolist()
    again = mia.holdout_split(parts, 0.3, seed=5)
    assert all(np.array_equal(a, b) for a, b in zip(held, again[1]))
    assert [len(h) for h in mia.holdout_split(parts, 2, seed=5)[1]] == [2, 2, 2]
    with pytest.raises(GossipflError, match="of client 2's 3 samples leaves it nothing to "
                                            "train on"):
        mia.holdout_split(parts, 3, seed=5)
    with pytest.raises(GossipflError, match="holds out no sample"):
        mia.holdout_split(parts, 0.01, seed=5)


def _config(membership, **extra):
    cfg = copy.deepcopy(TINY)
    cfg["model"] = {"name": "mlp", "options": {"hidden": [8]}}
    cfg["train"] = {**cfg["train"], "rounds": 3}
    cfg["eval"] = {"every": 1, "membership": membership}
    cfg.update(extra)
    return cfg


@pytest.mark.slow
def test_held_out_samples_never_enter_training():
    """The run with held-out samples is the run on the trained samples alone, bit for bit;
    the attacked members are trained on, the non-members are the held-out ones."""
    spec = {"holdout": 0.25, "samples": 6}
    runner = Runner(load_config(_config(spec)))
    runner.run()
    exp, c = runner.exp, runner.exp.members
    train_x, train_y = exp.dataset.train_x, exp.dataset.train_y
    same = copy.deepcopy(TINY)
    same.update(model={"name": "mlp", "options": {"hidden": [8]}},
                train={**TINY["train"], "rounds": 3}, eval={"every": 1})
    same["data"] = {"clients": 4, "tensors": {
        "train": [(train_x[p], train_y[p]) for p in exp.parts], "num_classes": 3}}
    alone = Runner(load_config(same))
    alone.run()
    assert torch.equal(runner.client_models(), alone.client_models())
    for i, part in enumerate(exp.parts):
        members = c.members[i][c.member_mask[i]].numpy()
        others = c.others[i][c.other_mask[i]].numpy()
        assert np.isin(members, part).all() and not np.isin(others, part).any()
        assert np.isin(others, c.parts[i]).all() and len(members) == len(others) == 6
    row = runner.rows[-1]
    assert {"mia_auc", "mia_tpr_1pct", "mia_tpr_01pct"} <= set(row)


def test_lira_columns_come_from_shadows_that_replay_the_run():
    spec = {"holdout": 0.3, "samples": 8, "shadows": 2}
    runner = Runner(load_config(_config(spec)))
    runner.run()
    c = runner.exp.members
    halves = mia.shadow_halves(c, TINY.get("seed", 0))
    member_out, other_out = mia.shadow_out(c, halves)
    assert member_out.shape == other_out.shape == (4, 2, c.members.shape[1])
    for s, half in enumerate(halves):
        for i, part in enumerate(c.parts):
            assert len(half[i]) == len(part) // 2 and np.isin(half[i], part).all()
            for n in range(c.members.shape[1]):  # out: shadow s's client i never saw it
                assert bool(member_out[i, s, n]) == (int(c.members[i, n]) not in half[i])
                assert bool(other_out[i, s, n]) == (int(c.others[i, n]) not in half[i])
    assert not np.array_equal(halves[0][0], halves[1][0])  # different halves per shadow
    last = runner.rows[-1]
    for key in ("mia_lira_auc", "mia_lira_tpr_1pct", "mia_lira_tpr_01pct"):
        assert 0.0 <= last[key] <= 1.0
    assert "mia_lira_auc" not in runner.rows[0]  # at the last round only


@pytest.mark.slow
def test_membership_metrics_and_epsilon_survive_resume_exactly():
    cfg = _config({"holdout": 0.3, "samples": 8, "shadows": 2},
                  privacy={"clip": 1.0, "noise_multiplier": 1.0, "delta": 1e-3})
    whole = Runner(load_config(cfg))
    whole.run()
    _, resumed = stopped_and_resumed(cfg, k=1)
    assert torch.equal(whole.client_models(), resumed.client_models())
    keys = [k for k in whole.rows[-1] if k.startswith(("mia", "epsilon"))]
    assert len(keys) >= 8
    for key in keys:
        assert whole.rows[-1][key] == resumed.rows[-1][key], key


@pytest.mark.slow
def test_a_run_directory_interrupted_and_resumed_records_the_same_metrics(tmp_path):
    """Stopped by Ctrl-C after round 3 of 4 and resumed from its checkpoint: the metrics rows
    (the membership columns, LiRA's, ε) and the summary's final ε are the uninterrupted
    run's, exactly."""
    cfg = _config({"holdout": 0.3, "samples": 8, "shadows": 2},
                  privacy={"clip": 1.0, "noise_multiplier": 1.0, "delta": 1e-3})
    cfg["train"]["rounds"] = 4
    cfg["output"] = {"checkpoint_every": 1}
    reference, resumed = interrupted_and_resumed(cfg, tmp_path, k=3)
    assert resumed.status == "finished"
    want, got = reference.result.metrics, resumed.result.metrics
    assert len(want) == len(got) == 4
    for a, b in zip(want, got):
        for key in a:
            if key.startswith(("mia", "epsilon")):
                assert a[key] == b[key], key
    assert "mia_lira_auc" in got[-1]
    assert resumed.summary["final_epsilon"] == reference.summary["final_epsilon"]


BAD = [
    ({"holdout": 1.5}, "eval.membership.holdout: must be a fraction in (0, 1) or an integer"),
    ({"samples": 5}, "eval.membership.holdout: required in the mapping form"),
    ({"holdout": 0.2, "shadows": 1},
     "eval.membership.shadows: must be 0 (no LiRA) or an integer >= 2"),
    ({"holdout": 0.2, "samples": 0}, "eval.membership.samples: must be an integer >= 1"),
    ({"holdout": 0.2, "variance": "x"}, "eval.membership.variance: must be one of global"),
    ({"holdout": 0.2, "shadow": 2}, "eval.membership.shadow: unknown key"),
    (0, "eval.membership: must be an integer >= 1, null or a mapping"),
    ("many", "eval.membership: must be an integer or a mapping or null, got 'many'"),
]


@pytest.mark.parametrize("spec,sentence", BAD, ids=[s for _, s in BAD])
def test_bad_membership_settings_are_one_sentence(spec, sentence):
    with pytest.raises(GossipflError) as info:
        load_config(_config(spec))
    assert sentence in str(info.value) and str(info.value).count(". ") == 0


def test_a_split_that_leaves_a_client_nothing_is_refused_before_training():
    with pytest.raises(GossipflError, match=r"eval.membership.holdout: 40 of client \d's \d+ "
                                            r"samples leaves it nothing to train on"):
        Runner(load_config(_config({"holdout": 40})))


def test_shadows_that_do_not_fit_in_memory_are_refused(monkeypatch):
    from gossipfl.engine import memory

    monkeypatch.setattr(memory, "available_memory", lambda device=None: 10 ** 6)
    with pytest.raises(GossipflError, match=r"eval.membership.shadows: LiRA's 1000 shadow "
                                            r"federations of 4 clients"):
        Runner(load_config(_config({"holdout": 0.2, "shadows": 1000})))


def test_lira_on_regression_targets_is_refused():
    rng = np.random.default_rng(0)
    cfg = {"data": {"clients": 2, "tensors": {"train": [
               (rng.normal(size=(10, 3)).astype(np.float32),
                rng.normal(size=10).astype(np.float32)) for _ in range(2)],
               "num_classes": 1}},
           "model": {"name": "linear"}, "topology": {"name": "ring"},
           "algorithm": {"name": "dfedavg"},
           "train": {"rounds": 1, "local_steps": 1, "batch_size": 2, "lr": 0.1, "loss": "mse"},
           "eval": {"membership": {"holdout": 0.2, "shadows": 2}}}
    with pytest.raises(GossipflError, match="eval.membership.shadows: LiRA needs class labels"):
        gossipfl.run(cfg)
