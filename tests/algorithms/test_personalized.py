"""Personalized algorithms (DFedMDC / DFedSMDC and the baselines of their tables), each
against a float64 NumPy re-derivation on a two-layer linear model (tests/two_layer.py):
full-batch gradients, several clients and rounds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.common.rng import numpy_generator
from gossipfl.core.runner import Runner
from tests.helpers import stopped_and_resumed
from tests.lsq import random_doubly_stochastic
from tests.personalized_cases import dfedmdc_reference, lr_at
from tests.two_layer import TwoLayer, assert_close, sgd_phase

SEED = 3  # TwoLayer.config's seed


@pytest.mark.parametrize("algorithm, sam", [("dfedmdc", None), ("dfedsmdc", "body"),
                                            ("dfedsmdc", "head"), ("dfedsmdc", "both")])
def test_dfedmdc_head_then_body_then_body_gossip(algorithm, sam):
    p = TwoLayer(clients=4, dim=3, hidden=2)
    W = random_doubly_stochastic(4, seed=2)
    params = {"name": algorithm, "head_lr": 0.03, "head_epochs": 2, "momentum": 0.5}
    if sam:
        params.update(sam=sam, rho=0.2)
    result = gossipfl.run(p.config(params, W=W, rounds=3, steps=3, lr=0.05, wd=0.01))
    rho_head = 0.2 if sam in ("head", "both") else 0.0
    rho_body = 0.2 if sam in ("body", "both") else 0.0
    X = dfedmdc_reference(p, W, 3, head_steps=2, head_lr=0.03, steps=3, lr=0.05, momentum=0.5,
                          wd=0.01, rho_head=rho_head, rho_body=rho_body)
    assert_close(result.params, X)
    assert np.abs(X[:, p.personal] - X[0, p.personal]).max() > 1e-3  # heads differ
    messages = np.count_nonzero(W) - np.count_nonzero(np.diag(W))
    assert result.metrics[0]["bytes_round"] == messages * 4 * int((~p.personal).sum())


def test_dfedmdc_head_steps_count_the_head_phase_in_steps():
    """``head_steps`` = 3 runs three head steps (full batch: head_epochs would run one each)."""
    p = TwoLayer(clients=4, dim=3, hidden=2)
    W = random_doubly_stochastic(4, seed=2)
    params = {"name": "dfedsmdc", "head_lr": 0.03, "head_steps": 3, "momentum": 0.5,
              "sam": "both", "rho": 0.2}
    result = gossipfl.run(p.config(params, W=W, rounds=3, steps=2, lr=0.05, wd=0.01))
    X = dfedmdc_reference(p, W, 3, head_steps=3, head_lr=0.03, steps=2, lr=0.05, momentum=0.5,
                          wd=0.01, rho_head=0.2, rho_body=0.2)
    assert_close(result.params, X)


def test_dfedmdc_refuses_head_steps_with_head_epochs():
    p = TwoLayer(clients=4, dim=3, hidden=2)
    config = p.config({"name": "dfedmdc", "head_steps": 3, "head_epochs": 2})
    with pytest.raises(gossipfl.GossipflError, match=r"algorithm\.head_epochs: 2 and "
                       r"algorithm\.head_steps: 3 are both set; set only one of them\."):
        gossipfl.run(config)


class Trained:
    """The trained algorithm with its final state (to read its personalized models)."""

    def __init__(self, runner):
        self.runner = runner

    def personalized_models(self):
        return self.runner.exp.algorithm.personalized_models(self.runner.state)


def run_with_algorithm(config):
    """The Result and the trained algorithm (to read its personalized models)."""
    runner = Runner(load_config(config))
    return runner.run(), Trained(runner)


def server_rounds(p, rounds, local, exchanged, kept, participation=0.5, own=None):
    """The PersonalServer protocol in NumPy: sampled clients start from the server model
    with their own ``kept`` columns, overwritten by the ``exchanged`` ones; ``local(i, y, t)``
    trains; the server averages the exchanged columns (n_i-weighted, η_g = 1)."""
    x = p.x0[0].copy()
    own = np.tile(x, (p.M, 1)) if own is None else own
    count = max(1, round(participation * p.M))
    for t in range(rounds):
        chosen = np.sort(numpy_generator(SEED, "participation", t).choice(p.M, count, False))
        ys = []
        for i in chosen:
            y = np.where(kept, own[i], x)
            y = np.where(exchanged, x, y)
            y = local(i, y, t)
            own[i] = np.where(kept, y, own[i])
            ys.append(y)
        weights = p.n[chosen] / p.n[chosen].sum()
        x = x + (weights @ (np.stack(ys) - x)) * exchanged
    return x, own


@pytest.mark.parametrize("name", ["fedavg_personal", "fedsam_personal", "fedper", "fedrep",
                                  "fedbabu"])
def test_centralized_personalized_baselines(name):
    p = TwoLayer(clients=6, dim=3, hidden=2)
    every = np.ones(p.P, dtype=bool)
    body = ~p.personal
    params = {"name": name, "participation": 0.5}
    if name == "fedsam_personal":
        params["rho"] = 0.3
    if name == "fedrep":
        params.update(head_epochs=2, head_lr=0.02)
    grad = lambda i: (lambda y: p.grad(i, y))

    def local(i, y, t):
        if name == "fedrep":
            y = sgd_phase(y, grad(i), p.personal, 2, lr_at(0.02, t))
            return sgd_phase(y, grad(i), body, 3, lr_at(0.05, t))
        moving = body if name == "fedbabu" else every
        return sgd_phase(y, grad(i), moving, 3, lr_at(0.05, t),
                         rho=0.3 if name == "fedsam_personal" else 0.0)

    split = name in ("fedper", "fedrep", "fedbabu")
    exchanged, kept = (body, p.personal) if split else (every, every)
    config = p.config(params, rounds=3, steps=3, topology={"name": "ring"})
    result, algorithm = run_with_algorithm(config)
    x, own = server_rounds(p, 3, local, exchanged, kept)
    assert_close(result.server_params, x)
    personalized = np.where(kept, own, x)
    if name != "fedbabu":
        assert_close(algorithm.personalized_models(), personalized)
    else:  # the head never trains: every client's model is the global one
        assert_close(personalized, np.tile(x, (p.M, 1)))
        assert_close(x[p.personal], p.x0[0, p.personal])
    assert np.abs(personalized - personalized[0]).max() > 1e-3 or name == "fedbabu"
    sent = int(exchanged.sum())
    assert result.metrics[0]["bytes_round"] == 2 * 3 * 4 * sent  # 3 down + 3 up


def test_fedbabu_fine_tunes_the_global_model_before_personalized_evaluation():
    p = TwoLayer(clients=4, dim=3, hidden=2, classes=3, bias=True)
    config = p.config({"name": "fedbabu", "participation": 0.5, "finetune_epochs": 2,
                       "finetune_lr": 0.2}, rounds=2, steps=2, topology={"name": "ring"})
    runner = Runner(load_config(config))
    runner.run()
    tuned = runner.personalized_models().double().numpy()
    x = runner.state["server"].double().numpy()
    every = np.ones(p.P, dtype=bool)
    expected = np.stack([sgd_phase(x, lambda y, i=i: p.grad(i, y), every, 2, lr_at(0.2, 2))
                         for i in range(p.M)])
    assert_close(tuned, expected)
    assert_close(runner.state["server"], x)  # the fine-tuned models are not kept


def test_ditto_global_by_fedavg_personal_with_proximal_pull():
    p = TwoLayer(clients=6, dim=3, hidden=2)
    every = np.ones(p.P, dtype=bool)
    config = p.config({"name": "ditto", "participation": 0.5, "lam": 0.75,
                       "personal_epochs": 2}, rounds=3, steps=3, wd=0.01,
                      topology={"name": "ring"})
    result, algorithm = run_with_algorithm(config)
    x, own = p.x0[0].copy(), p.x0.copy()
    for t in range(3):
        chosen = np.sort(numpy_generator(SEED, "participation", t).choice(6, 3, False))
        ys = []
        for i in chosen:
            ys.append(sgd_phase(x, lambda y, i=i: p.grad(i, y), every, 3, lr_at(0.05, t),
                                wd=0.01))
            prox = lambda y, i=i, w=x: p.grad(i, y) + 0.75 * (y - w)
            own[i] = sgd_phase(own[i], prox, every, 2, lr_at(0.05, t), wd=0.01)
        weights = p.n[chosen] / p.n[chosen].sum()
        x = x + weights @ (np.stack(ys) - x)
    assert_close(result.server_params, x)
    assert_close(algorithm.personalized_models(), own)


def test_fedrod_balanced_generic_model_and_personal_head_on_summed_logits():
    p = TwoLayer(clients=6, dim=3, hidden=2, classes=3, bias=True)
    config = p.config({"name": "fedrod", "participation": 0.5}, rounds=3, steps=3,
                      wd=0.01, momentum=0.5, topology={"name": "ring"})
    result, algorithm = run_with_algorithm(config)
    x = p.x0[0].copy()
    heads = np.zeros((6, int(p.personal.sum())))
    for t in range(3):
        chosen = np.sort(numpy_generator(SEED, "participation", t).choice(6, 3, False))
        ys = []
        for i in chosen:
            eta, y, h = lr_at(0.05, t), x.copy(), heads[i].copy()
            vy, vh = np.zeros_like(y), np.zeros_like(h)
            with np.errstate(divide="ignore"):
                shift = np.log(p.counts(i))
            for _ in range(3):
                g = p.grad(i, y, shift=shift) + 0.01 * y  # balanced softmax, generic
                combined = y.copy()
                combined[p.personal] += h
                gh = p.grad(i, combined)[p.personal] + 0.01 * h  # CE on summed logits
                vy, vh = 0.5 * vy - eta * g, 0.5 * vh - eta * gh
                y, h = y + vy, h + vh
            heads[i] = h
            ys.append(y)
        weights = p.n[chosen] / p.n[chosen].sum()
        x = x + weights @ (np.stack(ys) - x)
    assert_close(result.server_params, x)
    expected = np.tile(x, (6, 1))
    expected[:, p.personal] += heads
    assert_close(algorithm.personalized_models(), expected)
    assert (np.stack([p.counts(i) for i in range(6)]) == 0).any()  # log n_ic = −∞ somewhere


def prune_regrow(y, mask, score, layers, rate):
    """DisPFL's mask update of one client, per layer, in NumPy."""
    new = mask.copy()
    for cols in layers:
        held = np.flatnonzero(mask[cols])
        count = int(np.ceil(rate * len(held)))
        drop = held[np.argsort(np.abs(y[cols][held]), kind="stable")[:count]]
        new[cols][drop] = False
        free = np.flatnonzero(~new[cols])
        grow = free[np.argsort(-score[cols][free], kind="stable")[:count]]
        new[cols][grow] = True
    return new


def test_dispfl_masked_training_prune_regrow_and_mask_aware_gossip():
    from gossipfl.algorithms.personalized.dispfl import erk_densities

    p = TwoLayer(clients=4, dim=4, hidden=3)
    W = random_doubly_stochastic(4, seed=5)
    config = p.config({"name": "dispfl"}, W=W, rounds=3, steps=3, wd=0.01, momentum=0.5)
    runner = Runner(load_config(config))
    masks = runner.state["mask"].numpy().copy()
    X = runner.state["x"].double().numpy()
    layers = [slice(0, 12), slice(12, 15)]
    densities = erk_densities([(3, 4), (1, 3)], 0.5)
    assert [int(d * (c.stop - c.start)) for d, c in zip(densities, layers)] == [4, 2]
    assert (masks[:, layers[0]].sum(1) == 4).all() and (masks[:, layers[1]].sum(1) == 2).all()
    assert_close(X, p.x0 * masks)
    result = runner.run()
    sent = 0
    for t in range(3):
        Y = np.stack([sgd_phase(X[i], lambda y, i=i: p.grad(i, y), masks[i], 3,
                                lr_at(0.05, t), 0.5, wd=0.01) for i in range(4)])
        rate = 0.25 * (1 + np.cos(np.pi * t / 3))
        new = np.stack([prune_regrow(Y[i], masks[i], np.abs(p.grad(i, Y[i])), layers, rate)
                        for i in range(4)])
        assert (new != masks).any() and (new.sum(1) == masks.sum(1)).all()
        numerator, denominator = W @ (masks * Y), W @ masks
        mixed = np.where(denominator > 0, numerator / np.maximum(denominator, 1e-30), Y)
        nnz = masks.sum(1)
        sent += int(((np.count_nonzero(W, axis=0) - 1) * (4 * nnz + np.minimum(4 * nnz, 2))).sum())
        X, masks = mixed * new, new
    assert_close(result.params, X)
    assert_close(runner.state["mask"], masks)
    assert result.metrics[-1]["bytes_total"] == sent


PERSONALIZED = ["dfedmdc", "dfedsmdc", "local", "fedavg_personal", "fedsam_personal",
                "fedper", "fedrep", "fedbabu", "fedrod", "ditto", "dispfl"]


def synthetic(algorithm, **eval_options):
    return {"data": {"dataset": "synthetic", "clients": 6, "partition": "dirichlet",
                     "alpha": 0.3, "options": {"num_classes": 4, "dim": 10,
                                               "train_size": 300}},
            "model": {"name": "mlp", "options": {"hidden": [8]}},
            "topology": {"name": "ring"},
            "algorithm": algorithm,
            "train": {"rounds": 2, "local_epochs": 1, "batch_size": 16, "lr": 0.1},
            "eval": {"local_subset": 50, **eval_options}}


@pytest.mark.represented
@pytest.mark.parametrize("name", PERSONALIZED)
def test_every_personalized_algorithm_runs_with_the_personalized_protocol(name):
    shorter = {"fedrep": {"head_epochs": 1}, "fedbabu": {"finetune_epochs": 1}}
    params = {"name": name, **shorter.get(name, {})}
    result = gossipfl.run(synthetic(params))  # eval.personalized not asked: declared
    row = result.metrics[-1]
    assert 0 <= row["personalized_acc"] <= 1 and "personalized_acc_std" in row
    assert result.summary("personalized_acc")["final"] == row["personalized_acc"]


def test_personalized_point_measures_the_models_as_they_leave_local_training():
    from gossipfl.engine import evaluate_per_client

    config = synthetic({"name": "dfedmdc", "head_lr": 0.05},
                       personalized_point="before_gossip")
    runner = Runner(load_config(config))
    algorithm, trained = runner.exp.algorithm, []
    end_round = algorithm.end_round

    def recording(ctx, state, work):
        trained.append(work.y.clone())
        end_round(ctx, state, work)

    algorithm.end_round = recording
    result = runner.run()
    data = runner.exp.dataset
    before, _ = evaluate_per_client(runner.exp.oracle, trained[-1], data.test_x, data.test_y,
                                    runner.exp.local_test_parts)
    after, _ = evaluate_per_client(runner.exp.oracle, algorithm.personalized_models(runner.state),
                                   data.test_x, data.test_y, runner.exp.local_test_parts)
    assert result.metrics[-1]["personalized_acc"] == pytest.approx(float(before.mean()))
    assert not torch.equal(trained[-1], algorithm.personalized_models(runner.state))
    assert after.shape == before.shape
    with pytest.raises(Exception, match="eval.personalized_point: unknown value 'middle'"):
        load_config(synthetic({"name": "dfedmdc"}, personalized_point="middle"))


def test_tables_report_personalized_accuracy_for_personalized_algorithms():
    from gossipfl.results.rundir import is_personalized, primary_metric

    rows = [{"test_acc": 0.5, "personalized_acc": 0.8}]
    assert primary_metric(rows) == "test_acc"
    assert primary_metric(rows, personalized=True) == "personalized_acc"
    assert primary_metric([{"test_acc": 0.5}], personalized=True) == "test_acc"
    assert is_personalized("dfedsmdc") and is_personalized("fedrod")
    assert not is_personalized("dfedavgm") and not is_personalized("no_such_algorithm")


def test_fedrod_needs_a_head_bias_and_class_labels():
    p = TwoLayer(clients=4, dim=3, hidden=2, classes=3, bias=False)
    with pytest.raises(Exception, match="model.personal: fedrod needs a head bias of 3"):
        gossipfl.run(p.config({"name": "fedrod"}, rounds=1, topology={"name": "ring"}))
    p = TwoLayer(clients=4, dim=3, hidden=2)
    with pytest.raises(Exception, match="fedrod needs class labels"):
        gossipfl.run(p.config({"name": "fedrod"}, rounds=1, topology={"name": "ring"}))


def test_dfedsmdc_rejects_an_unknown_sam_place():
    with pytest.raises(Exception, match="algorithm.sam: unknown value 'tail'"):
        gossipfl.run(synthetic({"name": "dfedsmdc", "sam": "tail"}))


@pytest.mark.represented
@pytest.mark.parametrize("name", ["dispfl", "fedrod", "ditto", "fedrep"])
def test_resuming_from_a_checkpoint_repeats_the_run(name):
    config = synthetic({"name": name}, personalized=True)
    config["train"]["rounds"] = 4
    whole = Runner(load_config(config))
    whole.run()
    _, resumed = stopped_and_resumed(config)  # the same run (T = 4), stopped after 2 rounds
    for key, value in whole.state_dict()["algorithm"].items():
        assert torch.equal(value, resumed.state_dict()["algorithm"][key]), key
    assert torch.equal(whole.personalized_models(), resumed.personalized_models())
