"""``gossipfl stability``: two runs on neighbouring datasets advanced in lockstep.

Identical data give a distance of exactly 0; on least squares with full-batch gradients the
recorded distances equal a float64 re-derivation of both FedAvg runs (the neighbouring data
built by the documented rule); the command writes its CSV and figures and refuses bad input
in one sentence."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
import yaml

import gossipfl
from gossipfl import cli
from gossipfl.assembly.loading import load_config
from gossipfl.common.rng import numpy_generator
from gossipfl.core.runner import build_data
from gossipfl.data import make_synthetic
from gossipfl.studies.stability import Neighbour, run_pair
from tests.helpers import TINY, assert_png
from tests.lsq import Problem, assert_close

CENTRAL = {"name": "fedavg", "participation": 0.5}


@pytest.mark.represented
@pytest.mark.parametrize("algorithm", [{"name": "dfedavg"}, CENTRAL])
def test_identical_data_stay_identical_and_neighbours_drift(algorithm):
    config = {**TINY, "algorithm": algorithm}
    same = run_pair(config, perturb="none", every=1)
    assert [row["distance"] for row in same.rows] == [0.0] * TINY["train"]["rounds"]
    moved = run_pair(config, perturb="client", every=1)
    assert moved.client == same.client
    assert all(row["distance"] > 1e-4 for row in moved.rows)


def test_default_client_trains_in_round_one():
    config = load_config({**TINY, "algorithm": CENTRAL, "seed": 5})
    sampled = np.sort(numpy_generator(5, "participation", 0).choice(4, 2, replace=False))
    assert run_pair(config, perturb="none", every=3).client == sampled[0]
    assert run_pair({**TINY, "algorithm": {"name": "dfedavg"}}, perturb="none").client == 0


def test_neighbouring_dataset_follows_the_documented_rule():
    config = load_config(TINY)
    dataset, parts = build_data(config)
    own = parts[2]
    test_y = dataset.test_y.numpy()
    client = Neighbour("client", 2)(dataset, parts)
    assert torch.equal(client.train_y, dataset.train_y)  # label counts kept
    rest = np.setdiff1d(np.arange(len(dataset.train_y)), own)
    assert torch.equal(client.train_x[rest], dataset.train_x[rest])
    for k in np.unique(dataset.train_y[own].numpy()):
        mine = own[dataset.train_y[own].numpy() == k]
        pool = np.flatnonzero(test_y == k)
        expected = pool[np.arange(len(mine)) % len(pool)]
        assert torch.equal(client.train_x[mine], dataset.test_x[expected])
    sample = Neighbour("sample", 2)(dataset, parts)
    changed = np.flatnonzero((sample.train_x != dataset.train_x).any(dim=1).numpy())
    assert changed.tolist() == [own[0]]
    first = np.flatnonzero(test_y == int(dataset.train_y[own[0]]))[0]
    assert torch.equal(sample.train_x[own[0]], dataset.test_x[first])


# -- least squares, full batch: FedAvg against float64 ------------------------------------------
ROUNDS, STEPS, LR, DECAY, SEED = 3, 2, 0.05, 0.9, 3  # Problem.config's lr, decay and seed


def fedavg_reference(p: Problem, A: list, b: list, participation: float) -> list[np.ndarray]:
    """The server model after each round: K full-batch steps per sampled client, then the
    n_i-weighted average."""
    x, out = p.x0[0].copy(), []
    count = max(1, round(participation * p.M))
    for t in range(ROUNDS):
        chosen = np.sort(numpy_generator(SEED, "participation", t).choice(p.M, count,
                                                                          replace=False))
        eta = LR * DECAY**t
        finals = []
        for i in chosen:
            y = x.copy()
            for _ in range(STEPS):
                y = y - eta * 2.0 / len(b[i]) * A[i].T @ (A[i] @ y - b[i])
            finals.append(y)
        n = np.array([len(b[i]) for i in chosen], dtype=float)
        x = (n / n.sum()) @ np.stack(finals)
        out.append(x)
    return out


@pytest.mark.parametrize("perturb", ["sample", "client"])
@pytest.mark.parametrize("participation", [0.5, 1.0])
def test_least_squares_distance_equals_float64_rederivation(perturb, participation):
    p = Problem(clients=4, dim=3, seed=7)
    rng = np.random.default_rng(11)
    test_A, test_b = rng.normal(size=(5, 3)) * 2, rng.normal(size=5) * 2
    config = p.config({"name": "fedavg", "participation": participation}, rounds=ROUNDS,
                      steps=STEPS, topology={"name": "ring"},
                      x0=np.repeat(p.x0[:1], p.M, axis=0))
    config["data"]["tensors"]["test"] = (test_A.astype(np.float32),
                                         test_b.astype(np.float32))
    pair = run_pair(config, perturb=perturb, every=1)
    # the perturbed client: the first sampled in round 1; float targets: test samples in order
    count = max(1, round(participation * p.M))
    c = int(np.sort(numpy_generator(SEED, "participation", 0).choice(p.M, count,
                                                                      replace=False))[0])
    assert pair.client == c
    A = [a.astype(np.float32).astype(np.float64) for a in p.A]
    b = [v.astype(np.float32).astype(np.float64) for v in p.b]
    test_A = test_A.astype(np.float32).astype(np.float64)
    test_b = test_b.astype(np.float32).astype(np.float64)
    A2, b2 = [a.copy() for a in A], [v.copy() for v in b]
    replaced = 1 if perturb == "sample" else len(b[c])
    source = np.arange(replaced) % len(test_b)
    A2[c][:replaced], b2[c][:replaced] = test_A[source], test_b[source]
    p.x0 = p.x0.astype(np.float32).astype(np.float64)
    xs, ys = fedavg_reference(p, A, b, participation), fedavg_reference(p, A2, b2, participation)
    expected = [np.linalg.norm(x - y) for x, y in zip(xs, ys)]
    assert min(expected) > 1e-2  # the perturbation matters from round 1
    assert [row["round"] for row in pair.rows] == [1, 2, 3]
    assert_close([row["distance"] for row in pair.rows], expected, rtol=1e-5, atol=1e-7)


# -- the generalization gap --------------------------------------------------------------------
def test_eval_generalization_logs_train_minus_test():
    result = gossipfl.run(TINY, overrides=["eval.generalization=50"])
    row = result.metrics[-1]
    assert row["gap_loss"] == pytest.approx(row["train_eval_loss"] - row["test_loss"])
    assert row["gap_acc"] == pytest.approx(row["train_acc"] - row["test_acc"])
    pair = run_pair(TINY, perturb="none", every=3)
    assert pair.rows[-1]["test_loss"] == pytest.approx(row["test_loss"], rel=1e-6)
    assert math.isfinite(pair.rows[-1]["gap_loss"])


# -- the command ---------------------------------------------------------------------------------
@pytest.fixture
def tiny_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    study = {"name": "pair", "base": "tiny.yaml", "seeds": [0, 1],
             "grid": {"algorithm": [{"name": "dfedavg"}, CENTRAL]}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    return tmp_path


def stability(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["stability", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_cli_study_writes_csv_table_and_figures(tiny_files, capsys):
    code, out, _ = stability(capsys, "study.yaml", "--every", "2", "--quiet")
    assert code == 0
    folder = tiny_files / "runs" / "pair-stability"
    with open(folder / "stability.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["label"], r["seed"]) for r in rows} == {
        (label, seed) for label in ("dfedavg", "fedavg") for seed in ("0", "1")}
    assert sorted({int(r["round"]) for r in rows}) == [2, 4, 6]
    assert all(float(r["distance"]) > 0 and r["gap_loss"] for r in rows)
    for name in ("stability_distance.png", "generalization_gap.png"):
        assert_png(folder / name)
    assert "| dfedavg | 2 | 0 | 6 |" in out and "| fedavg | 2 |" in out
    assert "written to runs/pair-stability" in out


@pytest.mark.parametrize("args, message", [
    (["--perturb", "pixel"], "error: --perturb: unknown value 'pixel'"),
    (["--set", "train.lrr=0.1"], "error: train.lrr: unknown key (did you mean 'lr'?); the keys of train "),
    (["--client", "4"], "error: --client: must be in 0..3 for 4 clients, got 4."),
    (["--every", "0"], "error: --every: must be an integer >= 1, got 0."),
    (["--out", "tiny.yaml/out"], "error: --out: cannot write to 'tiny.yaml/out'"),
    (["--set", "engine.backend=distributed"], "error: engine.backend: distributed splits"),
])
def test_cli_bad_input_is_one_sentence(tiny_files, capsys, args, message):
    code, out, err = stability(capsys, "tiny.yaml", "--quiet", *args)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err
    assert not (tiny_files / "runs").exists()


def test_sequential_order_runs_in_lockstep():
    config = {**TINY, "topology": {"name": "ring", "order": "sequential"}}
    assert [r["distance"] for r in run_pair(config, perturb="none", every=2).rows] == [0.0] * 3
    assert run_pair(config, perturb="sample", every=6).rows[-1]["distance"] > 0


def test_api_entry_point(tmp_path):
    data = make_synthetic(dim=4, train_size=40, test_size=20, num_classes=2, seed=0)
    config = {**TINY, "data": {"clients": 2, "tensors": data}, "name": "api"}
    outcome = gossipfl.stability(config, perturb="sample", out=tmp_path, log=lambda _: None)
    assert outcome.path == tmp_path and len(outcome.pairs) == 1
    assert (tmp_path / "stability.csv").is_file() and "| api | 1 | 0 | 6 |" in outcome.table
