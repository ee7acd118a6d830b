"""Differential privacy (issue 40): DP-SGD on every client against a float64 NumPy
re-derivation on least squares (full batch and minibatches, several clients and rounds, the
noise drawn from gossipfl's streams), the noise by its statistics, the exact reductions, the
accountant against dp-accounting itself, exact resumption, and every refusal in one
sentence."""

from __future__ import annotations

import copy
import functools
import math

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.common.rng import client_keys, counter_bits, counter_normal, derive_seed
from gossipfl.core.runner import Runner
from gossipfl.data import ClientSampler
from gossipfl.engine import make_oracle
from gossipfl.errors import GossipflError
from gossipfl.trust.dpsgd import PrivateGradient
from tests.helpers import TINY, stopped_and_resumed
from tests.lsq import Problem, assert_close, ring_mh

M, ROUNDS, STEPS, LR, DECAY, SEED = 5, 3, 2, 0.05, 0.9, 3
W = ring_mh(M)


# -- float64 re-derivation ---------------------------------------------------------------------
def noise(i: int, k: int, P: int) -> np.ndarray:
    """gossipfl's N(0, I) for client i's k-th private evaluation (its documented stream)."""
    key = counter_bits(client_keys(SEED, [i], "privacy"), torch.tensor([k]), 63)
    return counter_normal(key, P)[0].double().numpy()  # drawn in the run's float32


def private_gradient(p: Problem, i: int, x, rows, clip, sigma, nominal, k):
    """(Σ_b clip_C(2 (a_bᵀx − b_b) a_b) + σ C z) / B_i over the samples ``rows``."""
    A, b = p.A[i][rows], p.b[i][rows]
    per_sample = 2.0 * (A @ x - b)[:, None] * A
    norms = np.linalg.norm(per_sample, axis=1)
    factor = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
    total = (factor[:, None] * per_sample).sum(0)
    if sigma:
        total = total + sigma * clip * noise(i, k, p.d)
    return total / nominal


def batches(p: Problem, t: int, batch, epochs: bool):
    """Each step's local sample indices per client (None: the whole data), as gossipfl's
    sampler draws them (per client, so in client order)."""
    if batch is None:
        return [[np.arange(int(n)) for n in p.n]] * STEPS
    bounds = np.concatenate([[0], np.cumsum(p.n.astype(int))])
    parts = [np.arange(bounds[i], bounds[i + 1]) for i in range(M)]
    sampler = ClientSampler(parts, batch, seed=derive_seed(SEED, "sampler"))
    drawn = sampler.epoch(t, 0, "phase", 0) if epochs else sampler.steps(t, STEPS, "phase", 0)
    out = []
    for idx, mask in drawn:
        out.append([idx[i][mask[i]].numpy() - bounds[i] for i in range(M)])
    return out


def dfedavg_reference(p: Problem, clip, sigma, batch=None, epochs=False):
    X, counts = p.x0.copy(), np.zeros(M, dtype=int)
    for t in range(ROUNDS):
        Y = X.copy()
        for rows in batches(p, t, batch, epochs):
            for i in range(M):
                if len(rows[i]) == 0:
                    continue
                nominal = p.n[i] if batch is None else min(batch, p.n[i])
                g = private_gradient(p, i, Y[i], rows[i], clip, sigma, nominal, counts[i])
                counts[i] += 1
                Y[i] = Y[i] - LR * DECAY**t * g
        X = W @ Y
    return X, counts


def config(p: Problem, privacy=None, batch=None, epochs=False, rounds=ROUNDS):
    out = p.config({"name": "dfedavg"}, W=W, rounds=rounds, steps=STEPS, lr=LR, decay=DECAY)
    if batch is not None:
        out["train"]["batch_size"] = batch
    if epochs:
        del out["train"]["local_steps"]
        out["train"]["local_epochs"] = 1
    if privacy is not None:
        out["privacy"] = {"delta": 1e-3, **privacy}
    return out


CASES = [(0.5, 0.0, None, False, False), (0.5, 0.7, None, False, False),
         (0.3, 0.0, 4, False, False), (0.3, 1.3, 4, False, False), (0.4, 0.9, 4, True, False),
         (0.3, 1.3, 4, False, True), (0.4, 0.9, 4, True, True)]


@pytest.mark.parametrize("clip,sigma,batch,epochs,materialized", CASES)
def test_dp_sgd_matches_its_equations(clip, sigma, batch, epochs, materialized, monkeypatch):
    """DFedAvg with DP-SGD: full batch, minibatch steps, and an epoch whose last batch is
    short (divided by the nominal B all the same); the noise from gossipfl's streams; the
    ghost norms of the linear model, and the materialized per-sample gradients."""
    if materialized:
        from gossipfl.trust import ghost

        monkeypatch.setattr(ghost, "supported", lambda oracle: False)
    p = Problem(clients=M)
    X, counts = dfedavg_reference(p, clip, sigma, batch, epochs)
    runner = Runner(load_config(config(p, {"clip": clip, "noise_multiplier": sigma}, batch,
                                       epochs)))
    runner.run()
    assert_close(runner.client_models().numpy(), X)
    assert runner.exp.privacy.gradient.steps.tolist() == counts.tolist()


def test_the_noise_has_the_stated_statistics():
    """g̃_σ − g̃_0 = σ C z / B with z ~ N(0, I), over many clients; a client's noise is its
    own (any subset of rows draws it alike) and new at every evaluation."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 1, bias=False))
    oracle = make_oracle("stacked", model, loss="mse")
    m, B, C, sigma = 600, 5, 0.2, 1.7
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(m, 3, generator=gen)
    inputs, targets = torch.randn(m, B, 3, generator=gen), torch.randn(m, B, generator=gen)
    mask = torch.ones(m, B, dtype=torch.bool)
    clients = torch.arange(m)
    sizes = torch.full((m,), float(B))
    plain = PrivateGradient(C, 0.0, sizes, seed=4)
    noisy = PrivateGradient(C, sigma, sizes, seed=4)
    _, g0 = plain.gradient(oracle, y, inputs, targets, mask, clients, None)
    _, g1 = noisy.gradient(oracle, y, inputs, targets, mask, clients, None)
    z = ((g1 - g0) * B / (sigma * C)).double().reshape(-1)
    assert abs(float(z.mean())) < 4 / math.sqrt(len(z))
    assert abs(float(z.var()) - 1) < 0.12
    # the same client's evaluation drawn with other rows: the same noise; the next: new
    again = PrivateGradient(C, sigma, sizes, seed=4)
    _, part = again.gradient(oracle, y[7:9], inputs[7:9], targets[7:9], mask[7:9],
                             clients[7:9], None)
    assert torch.equal(part, g1[7:9])
    _, later = noisy.gradient(oracle, y, inputs, targets, mask, clients, None)
    assert not torch.allclose(later, g1)
    assert noisy.steps.tolist() == [2] * m


def test_a_group_s_gradient_gets_noise_on_its_columns_only():
    oracle, y, inputs, targets, mask = _mechanism_inputs()
    columns = torch.zeros(10, dtype=torch.bool)
    columns[8:] = True  # the bias of Linear(4, 2)
    mechanism = PrivateGradient(0.3, 2.0, torch.full((6,), 5.0), seed=0)
    _, grad = mechanism.gradient(oracle, y, inputs, targets, mask, torch.arange(6), ("0.bias",),
                                 columns)
    assert bool((grad[:, :8] == 0).all()) and bool((grad[:, 8:] != 0).all())


ALGORITHMS = [("dfedsam", {}), ("ditto", {}), ("fedper", {}), ("dispfl", {}), ("fedavg", {}),
              ("scaffold", {}), ("choco", {}), ("dsgt", {}), ("fedbabu", {}),
              ("adpsgd", {"topology": {"name": "ring", "order": "asynchronous"}}),
              ("dfedavg", {"topology": {"name": "ring", "order": "sequential"}})]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("name,sections", ALGORITHMS, ids=[a for a, _ in ALGORITHMS])
def test_every_kind_of_algorithm_trains_privately(name, sections):
    """SAM (two private gradients a step), a group's phases, DisPFL's raw gradients, a server,
    compressed gossip, gradient tracking, fine-tuning at evaluation, the asynchronous and
    sequential orders: each gradient goes through the mechanism and is counted."""
    cfg = _tiny(algorithm={"name": name}, model={"name": "mlp", "options": {"hidden": [8]}},
                train={"rounds": 2}, **sections)
    runner = Runner(load_config(cfg))
    runner.run()
    steps = runner.exp.privacy.gradient.steps
    assert int(steps.max()) > 0 and runner.rows[-1]["epsilon"] > 0  # (a server samples)
    assert math.isfinite(runner.rows[-1]["train_loss"])


def _mechanism_inputs():
    model = torch.nn.Sequential(torch.nn.Linear(4, 2))
    oracle = make_oracle("stacked", model, loss="cross_entropy")
    gen = torch.Generator().manual_seed(1)
    y = torch.randn(6, 10, generator=gen)
    inputs = torch.randn(6, 5, 4, generator=gen)
    targets = torch.randint(0, 2, (6, 5), generator=gen)
    return oracle, y, inputs, targets, torch.ones(6, 5, dtype=torch.bool)


@pytest.mark.parametrize("materialized", [False, True])
def test_sigma_zero_is_per_sample_clipping_alone_bit_for_bit(materialized):
    from gossipfl.trust import ghost

    oracle, y, inputs, targets, mask = _mechanism_inputs()
    mechanism = PrivateGradient(0.3, 0.0, torch.full((6,), 5.0), seed=0)
    if materialized:
        mechanism._ghost = False
    _, grad = mechanism.gradient(oracle, y, inputs, targets, mask, torch.arange(6), None)
    _, clipped = (mechanism._clipped_sum(oracle, y, inputs, targets, mask, None) if materialized
                  else ghost.clipped_sum(oracle, y, inputs, targets, mask, None, 0.3))
    assert torch.equal(grad, clipped / 5.0)
    per_sample = torch.stack([torch.stack([oracle.loss_and_grad(
        y[i:i + 1], inputs[i:i + 1, b:b + 1], targets[i:i + 1, b:b + 1])[1][0]
        for b in range(5)]) for i in range(6)])
    factor = (0.3 / per_sample.norm(dim=2, keepdim=True)).clamp(max=1)
    torch.testing.assert_close(grad, (per_sample * factor).sum(1) / 5, rtol=1e-5, atol=1e-7)


MODELS = {
    "mlp": lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 6),
                                       torch.nn.ReLU(), torch.nn.Linear(6, 5, bias=False),
                                       torch.nn.Tanh(), torch.nn.Linear(5, 3)),
    "conv": lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 2, 2), torch.nn.ReLU(),
                                        torch.nn.Flatten(), torch.nn.Linear(2, 3)),
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("wrt", [None, ("5.weight", "5.bias")])
def test_ghost_norms_give_the_materialized_clipped_sum(name, wrt):
    """The MLP's norms from activations and output gradients (gossipfl.trust.ghost) against
    the per-sample gradients written out, with padded samples and a group's parameters; the
    convolution takes the materialized path itself."""
    from gossipfl.trust import ghost

    torch.manual_seed(0)
    model = MODELS[name]()
    oracle = make_oracle("stacked", model)
    layout = oracle.layout
    if name == "conv":
        wrt = None if wrt is None else ("3.weight", "3.bias")
    y = layout.flatten(model).detach().expand(4, -1) + 0.3 * torch.randn(4, layout.P)
    inputs = torch.randn(4, 7, 3, 2, 2)  # flattened to 12 features by the MLP
    targets = torch.randint(0, 3, (4, 7))
    mask = torch.rand(4, 7) < 0.7
    mask[0] = False  # a client without samples
    clients = torch.arange(4)
    fast = PrivateGradient(0.5, 0.0, torch.full((4,), 7.0), seed=0)
    slow = PrivateGradient(0.5, 0.0, torch.full((4,), 7.0), seed=0)
    slow._ghost = False
    assert ghost.supported(oracle) == (name == "mlp")
    loss_a, a = fast.gradient(oracle, y, inputs, targets, mask, clients, wrt)
    loss_b, b = slow.gradient(oracle, y, inputs, targets, mask, clients, wrt)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(loss_a, loss_b)
    assert bool((a[0] == 0).all())


def test_infinite_clip_without_noise_is_the_non_private_gradient():
    oracle, y, inputs, targets, mask = _mechanism_inputs()
    mechanism = PrivateGradient(math.inf, 0.0, torch.full((6,), 5.0), seed=0)
    loss, grad = mechanism.gradient(oracle, y, inputs, targets, mask, torch.arange(6), None)
    plain_loss, plain = oracle.loss_and_grad(y, inputs, targets, mask)
    torch.testing.assert_close(grad, plain, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(loss, plain_loss)


@pytest.mark.parametrize("batch", [None, 4])
def test_a_clip_nobody_reaches_without_noise_is_the_non_private_run(batch):
    """Through the config: C far above every gradient, σ = 0, full batches (minibatches of
    local_steps, never short): the non-private run to float rounding."""
    p = Problem(clients=M)
    private = gossipfl.run(config(p, {"clip": 1e30, "noise_multiplier": 0.0}, batch))
    plain = gossipfl.run(config(p, None, batch))
    np.testing.assert_allclose(private.params.numpy(), plain.params.numpy(), rtol=1e-5,
                               atol=1e-6)


def test_without_privacy_nothing_changes_bit_for_bit():
    """No privacy section: no columns, the same bits as the fused step (tests/test_fused_step
    checks every algorithm); here the run's rows are free of ε."""
    result = gossipfl.run(copy.deepcopy(TINY))
    assert "epsilon" not in result.metrics[-1]


# -- the accountant -------------------------------------------------------------------------------
@functools.lru_cache
def direct_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    import dp_accounting
    from dp_accounting import rdp

    accountant = rdp.RdpAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(sigma)), steps)
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize("batch", [None, 3])
def test_epsilon_is_dp_accountings_for_every_client(batch):
    p = Problem(clients=M)
    sigma, delta = 1.1, 1e-3
    result = gossipfl.run(config(p, {"clip": 1.0, "noise_multiplier": sigma, "delta": delta},
                                 batch))
    for row in result.metrics:
        steps = STEPS * row["round"]
        eps = [direct_epsilon(1.0 if batch is None else batch / n, sigma, steps, delta)
               for n in p.n]
        assert row["epsilon"] == pytest.approx(max(eps), rel=1e-12)
        assert row["epsilon_mean"] == pytest.approx(float(np.mean(eps)), rel=1e-12)


def test_epsilon_is_in_the_run_summary(tmp_path):
    from gossipfl.results.rundir import summarize_rows

    cfg = copy.deepcopy(TINY)
    cfg["privacy"] = {"clip": 1.0, "noise_multiplier": 1.0, "delta": 1e-3}
    result = gossipfl.run(cfg)
    summary = summarize_rows(result.metrics)
    assert summary["final_epsilon"] == result.metrics[-1]["epsilon"] > 0
    assert summary["final_epsilon_mean"] <= summary["final_epsilon"]


def test_the_finished_run_says_the_privacy_spent(tmp_path):
    from pathlib import Path

    from gossipfl.cli import format_summary

    text = format_summary({"final_epsilon": 3.21, "final_epsilon_mean": 2.5, "delta": 1e-5,
                           "rounds": 2}, Path("run"))
    assert "privacy spent        ε = 3.21 at δ = 1e-05  (largest over the clients; mean 2.5)" \
        in text
    assert "privacy" not in format_summary({"rounds": 2}, Path("run"))


def test_no_noise_spends_infinite_privacy():
    cfg = copy.deepcopy(TINY)
    cfg["privacy"] = {"clip": 1.0, "noise_multiplier": 0.0, "delta": 1e-3}
    assert gossipfl.run(cfg).metrics[-1]["epsilon"] == math.inf


def test_resume_is_exact_with_noise_and_the_accountant():
    p = Problem(clients=M)
    cfg = config(p, {"clip": 0.5, "noise_multiplier": 1.0}, batch=4, rounds=5)
    cfg["eval"] = {"average_model": False, "local_models": False, "every": 1}
    whole = Runner(load_config(cfg))
    whole.run()
    saved, resumed = stopped_and_resumed(cfg)
    assert saved["privacy"]["steps"].tolist() == [2 * STEPS] * M
    assert torch.equal(whole.client_models(), resumed.client_models())
    assert whole.rows[-1]["epsilon"] == resumed.rows[-1]["epsilon"]


# -- refusals ---------------------------------------------------------------------------------------
def _tiny(privacy=None, **sections):
    cfg = copy.deepcopy(TINY)
    cfg["privacy"] = {"clip": 1.0, "noise_multiplier": 1.0, "delta": 1e-3, **(privacy or {})}
    for key, value in sections.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    return cfg


BAD = [
    ({"clip": 0}, "privacy.clip: must be > 0, got 0"),
    ({"clip": -1.0}, "privacy.clip: must be > 0, got -1.0"),
    ({"clip": float("nan")}, "privacy.clip: must be a finite number, got nan"),
    ({"clip": float("inf")}, "privacy.clip: must be a finite number, got inf"),
    ({"noise_multiplier": -0.5}, "privacy.noise_multiplier: must be >= 0, got -0.5"),
    ({"noise_multiplier": float("nan")},
     "privacy.noise_multiplier: must be a finite number, got nan"),
    ({"delta": 0}, "privacy.delta: must be in (0, 1), got 0"),
    ({"delta": 1.5}, "privacy.delta: must be in (0, 1), got 1.5"),
    ({"delta": "small"}, "privacy.delta: must be a number"),
    ({"epsilon": 1.0}, "privacy.epsilon: unknown key"),
]


@pytest.mark.parametrize("privacy,sentence", BAD, ids=[s for _, s in BAD])
def test_bad_settings_are_one_sentence(privacy, sentence):
    with pytest.raises(GossipflError) as info:
        load_config(_tiny(privacy))
    assert sentence in str(info.value) and str(info.value).count(". ") == 0


REFUSED = [
    ({"delta": 0.1}, {}, "privacy.delta: 0.1 must be below 1/n ="),
    ({}, {"algorithm": {"name": "fedrod"}},
     "privacy: algorithm fedrod reads each client's label counts"),
    ({}, {"model": {"name": "bn", "factory": lambda shape, out: torch.nn.Sequential(
        torch.nn.Linear(shape[0], 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, out))}},
     "privacy: model bn has BatchNorm, which mixes the samples of a batch"),
    ({}, {"train": {"batch_size": 1000}},
     "train.batch_size: 1000 is larger than client"),
]


@pytest.mark.parametrize("privacy,sections,sentence", REFUSED, ids=[s[:40] for *_, s in REFUSED])
def test_undefined_settings_are_refused_before_training(privacy, sections, sentence):
    with pytest.raises(GossipflError) as info:
        Runner(load_config(_tiny(privacy, **sections)))
    assert sentence in str(info.value) and str(info.value).count(". ") == 0


def test_a_bad_privacy_setting_exits_2(capsys, tmp_path):
    import yaml

    from tests.helpers import gossipfl as cli

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_tiny({"noise_multiplier": -1})))
    code, _, err = cli(capsys, "run", str(path))
    assert code == 2 and "privacy.noise_multiplier: must be >= 0" in err


def test_config_round_trips_through_yaml():
    config = load_config(_tiny({"clip": 0.7}))
    again = load_config(config.to_dict())
    assert again.privacy == config.privacy
    assert "privacy" not in load_config(copy.deepcopy(TINY)).to_dict()


# -- reports ------------------------------------------------------------------------------------------
def test_a_private_table_shows_the_accuracy_within_each_budget():
    from gossipfl.results.reporting import (
        Run,
        best_within_budget,
        comparison_table,
        table_csv,
        table_markdown,
    )

    rows = [{"round": r, "test_acc": acc, "epsilon": eps}
            for r, (acc, eps) in enumerate([(0.5, 0.6), (0.7, 2.0), (0.65, 3.9), (0.9, 9.0)], 1)]
    assert best_within_budget(rows, "test_acc", 1.0) == 0.5
    assert best_within_budget(rows, "test_acc", 4.0) == 0.7
    assert best_within_budget(rows, "test_acc", 8.0) == 0.7  # 0.9 came at ε = 9
    assert best_within_budget(rows, "test_acc", 0.5) is None
    other = [{**row, "test_acc": row["test_acc"] - 0.1} for row in rows]
    runs = [Run(None, {"seed": s}, r, {"status": "done"}) for s, r in enumerate([rows, other])]
    plain = [Run(None, {"seed": 0}, [{"round": 1, "test_acc": 0.8}], {"status": "done"})]
    table = comparison_table({"private": runs, "plain": plain}, "test_acc", [])
    text = table_markdown(table)
    assert "test_acc at ε = 1 (%) | test_acc at ε = 4 (%) | test_acc at ε = 8 (%)" in text
    assert "| private | 2 | 85.00 ± 7.07 | 85.00 ± 7.07 | 45.00 ± 7.07 | 65.00 ± 7.07 | " \
        "65.00 ± 7.07 |" in text
    assert "| plain | 1 | 80.00 | 80.00 | — | — | — |" in text
    assert "at_epsilon_4_mean" in table_csv(table)
    assert "ε" not in table_markdown(comparison_table({"plain": plain}, "test_acc", []))


# -- membership inference -------------------------------------------------------------------------
def test_membership_auc_is_the_mann_whitney_statistic():
    from gossipfl.trust.membership import auc

    rng = np.random.default_rng(0)
    members = rng.integers(0, 5, size=(3, 7)).astype(np.float64)  # ties on purpose
    others = rng.integers(0, 5, size=(3, 6)).astype(np.float64)
    mask = rng.random((3, 7)) < 0.7
    mask[:, 0] = True
    got = auc(torch.tensor(members), torch.tensor(mask), torch.tensor(others)).numpy()
    for i in range(3):
        a, b = members[i][mask[i]], others[i]
        wins = (a[:, None] < b[None]).sum() + 0.5 * (a[:, None] == b[None]).sum()
        assert got[i] == pytest.approx(wins / (len(a) * len(b)), abs=1e-15)
    assert auc(torch.tensor([[1.0, 2.0]]), torch.tensor([[True, True]]),
               torch.tensor([[3.0, 4.0]])).item() == 1.0


def _membership_run(train, test, lr, x0):
    cfg = {"data": {"clients": len(train), "tensors": {
               "train": [(a.astype(np.float32), b.astype(np.float32)) for a, b in train],
               "test": (test[0].astype(np.float32), test[1].astype(np.float32)),
               "num_classes": 1}},
           "model": {"name": "linear", "options": {"bias": False}},
           "topology": {"name": "ring"}, "algorithm": {"name": "dfedavg"},
           "train": {"rounds": 2, "local_steps": 1, "batch_size": "full", "lr": lr,
                     "loss": "mse"},
           "eval": {"average_model": False, "local_models": False, "membership": 50},
           "init_params": x0.astype(np.float32)}
    return gossipfl.run(cfg).metrics[-1]["mia_auc"]


def test_a_model_that_fits_its_members_exactly_is_found_out():
    """Members fitted exactly (integer data, b = A x*, the models stay at x*) and held-out
    samples off the line: every member's loss is below every non-member's, AUC = 1."""
    rng = np.random.default_rng(1)
    x_star = np.array([1.0, -2.0, 3.0])
    train = []
    for n in (8, 12, 10):
        A = rng.integers(-3, 4, size=(n, 3)).astype(np.float64)
        train.append((A, A @ x_star))
    A = rng.integers(-3, 4, size=(20, 3)).astype(np.float64)
    test = (A, A @ x_star + rng.choice([-1.0, 1.0], size=20))
    assert _membership_run(train, test, 0.0, x_star) == 1.0


def test_held_out_samples_equal_to_the_members_give_chance():
    """Non-members that are the members themselves: the two loss sets are one multiset,
    so AUC = 1/2 exactly, for whatever model training made."""
    rng = np.random.default_rng(2)
    A, b = rng.normal(size=(9, 3)), rng.normal(size=9)
    auc_value = _membership_run([(A, b), (A, b)], (A, b), 0.05, np.zeros(3))
    assert auc_value == 0.5


def test_membership_auc_is_measured_on_the_sampled_clients_of_a_private_run():
    cfg = _tiny(eval={"every": 3, "membership": 10, "local_clients": 2})
    row = gossipfl.run(cfg).metrics[-1]
    assert 0 <= row["mia_auc"] <= 1 and row["epsilon"] > 0
    with pytest.raises(GossipflError, match=r"eval.membership: must be an integer >= 1, "
                                            r"null or a mapping .*, got 0"):
        load_config(_tiny(eval={"membership": 0}))
