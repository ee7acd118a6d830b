"""Work proportional to the real samples (issue 11): the local loop advances only the clients
that still have a minibatch, partial participation touches only the sampled clients, and the
per-client evaluation runs only the models that still have test samples — with the same
numbers as a straightforward computation (every client advanced alone, every model evaluated
on its own samples alone)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch

from gossipfl.algorithms.base import Work
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.data import from_tensors
from gossipfl.engine import evaluate_per_client, make_oracle
from gossipfl.models import build_model
from tests.oracle_reference import gen

ORACLES = ("stacked", "vmap", "loop")


def config(balanced: bool, algorithm: dict, oracle: str, personalized: bool = False) -> dict:
    train_x = torch.randn(240, 1, 5, 5, generator=gen(0))
    train_y = torch.randint(0, 4, (240,), generator=gen(1))
    data = from_tensors(train_x, train_y, train_x[:60], train_y[:60], num_classes=4)
    return {"data": {"tensors": data, "clients": 8, "partition": "dirichlet", "alpha": 0.3,
                     "balanced": balanced, "min_size": 2},
            "model": {"name": "mlp", "options": {"hidden": [6]}},
            "topology": {"name": "ring"}, "algorithm": algorithm,
            "train": {"rounds": 3, "local_epochs": 2, "batch_size": 7, "lr": 0.1,
                      "momentum": 0.5},
            "eval": {"local_subset": None, "personalized": personalized},
            "engine": {"oracle": oracle}, "seed": 3}


class OneAtATime(Runner):
    """The reference: each client of a round's work advanced alone, one after the other."""

    def __init__(self, config):
        super().__init__(config)
        together = self.trainer.train

        def one_at_a_time(t, work, phases, stream="phase", offline=None, plan=None):
            ids = torch.arange(len(work)) if work.clients is None else work.clients
            loss_sum, steps = torch.zeros(()), 0
            for row in range(len(work)):
                alone = Work(work.y[row:row + 1], ids[row:row + 1],
                             **{k: v[row:row + 1] for k, v in work.scratch.items()})
                loss, count = together(t, alone, phases, stream, offline=offline, plan=plan)
                loss_sum, steps = loss_sum + loss, steps + count
            return loss_sum, steps

        self.trainer.train = one_at_a_time


class CountingOracle:
    """Wraps an oracle; records the rows of every loss_and_grad and (fused) loss_and_step
    call."""

    def __init__(self, oracle):
        self.oracle, self.rows = oracle, 0

    def loss_and_grad(self, X, inputs, targets, mask=None, wrt=None):
        self.rows += X.shape[0]
        return self.oracle.loss_and_grad(X, inputs, targets, mask, wrt)

    def loss_and_step(self, X, inputs, targets, mask, update, into=None,
                      every_row_active=False):
        self.rows += X.shape[0]
        return self.oracle.loss_and_step(X, inputs, targets, mask, update, into,
                                         every_row_active)

    def __getattr__(self, name):
        return getattr(self.oracle, name)


ALGORITHMS = {"fedavg": {"name": "fedavg", "participation": 0.5}, "dfedavg": {"name": "dfedavg"}}


@pytest.mark.represented
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("balanced", [True, False])
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_compact_rounds_equal_clients_advanced_one_at_a_time(oracle, balanced, algorithm):
    cfg = load_config(config(balanced, ALGORITHMS[algorithm], oracle))
    ours, reference = Runner(cfg), OneAtATime(cfg)
    sizes = [len(p) for p in ours.exp.parts]
    assert balanced == (len(set(sizes)) == 1)
    counter = CountingOracle(ours.exp.oracle)
    ours.exp.env.oracle = counter
    a, b = ours.run(), reference.run()
    torch.testing.assert_close(a.params, b.params, rtol=1e-5, atol=1e-6)
    for key in ("test_acc", "train_loss", "local_acc_mean"):
        if key in a.metrics[0]:
            assert a.column(key) == pytest.approx(b.column(key), rel=1e-5, abs=1e-6)
    # The oracle saw exactly the client-steps one local epoch needs: Σ_i ⌈n_i / B⌉ per
    # epoch over the clients that train (sampled ones for FedAvg).
    needed = 0
    for t in range(cfg.train.rounds):
        clients = ours.exp.fed.sample(t, 0.5) if algorithm == "fedavg" else range(8)
        needed += sum(-(-sizes[int(i)] // 7) for i in clients) * cfg.train.local_epochs
    assert counter.rows == ours.client_steps == reference.client_steps == needed


class CountingPredict:
    """Wraps an oracle; records (models × samples) of every per-client predict call."""

    def __init__(self, oracle):
        self.oracle, self.pairs = oracle, 0

    def predict(self, X, inputs, shared=False):
        self.pairs += X.shape[0] * inputs.shape[1]
        return self.oracle.predict(X, inputs, shared)

    def __getattr__(self, name):
        return getattr(self.oracle, name)


@pytest.mark.parametrize("oracle", ORACLES)
def test_per_client_evaluation_runs_only_models_with_samples_left(oracle):
    model = build_model("mlp", (1, 5, 5), 4, hidden=[6])
    X = 0.3 * torch.randn(5, sum(p.numel() for p in model.parameters()), generator=gen(2))
    inputs = torch.randn(40, 1, 5, 5, generator=gen(3))
    targets = torch.randint(0, 4, (40,), generator=gen(4))
    perm = torch.randperm(40, generator=gen(5)).numpy()
    sizes = [3, 17, 0, 9, 1]  # unsorted, one empty
    bounds = np.cumsum([0, *sizes])
    subsets = [perm[a:b] for a, b in pairwise(bounds)]
    counted = CountingPredict(make_oracle(oracle, model))
    acc, loss = evaluate_per_client(counted, X, inputs, targets, subsets, batch_size=4)
    for i, ix in enumerate(subsets):
        if not len(ix):
            assert torch.isnan(acc[i]) and torch.isnan(loss[i])
            continue
        alone_acc, alone_loss = evaluate_per_client(counted.oracle, X[i:i + 1], inputs,
                                                    targets, [ix], batch_size=len(ix))
        torch.testing.assert_close(acc[i], alone_acc[0])
        torch.testing.assert_close(loss[i], alone_loss[0], rtol=1e-6, atol=1e-7)
    # Work: at most each client's own steps of 4 samples (never 5 models × 17 samples).
    assert sum(sizes) <= counted.pairs <= sum(-(-n // 4) * 4 for n in sizes)


def test_personalized_metric_equals_one_model_at_a_time():
    cfg = load_config(config(False, {"name": "dfedavg"}, "stacked", personalized=True))
    runner = Runner(cfg)
    result = runner.run()
    exp = runner.exp
    accs = [evaluate_per_client(exp.oracle, result.params[i:i + 1], exp.dataset.test_x,
                                exp.dataset.test_y, [ix])[0][0]
            for i, ix in enumerate(exp.local_test_parts)]
    assert len({len(ix) for ix in exp.local_test_parts}) > 1  # unequal local test splits
    assert result.metrics[-1]["personalized_acc"] == pytest.approx(
        float(torch.stack(accs).mean()), rel=1e-6)


@pytest.mark.slow
def test_consensus_of_a_replicated_server_model_is_zero_without_work():
    from gossipfl.core.runner import consensus_distance
    from gossipfl.network.federation import Federation

    class Never(Federation):
        def mean(self, _):
            raise AssertionError("the mean of a replicated model is not needed")

    fed = Never(500, None, torch.ones(500), seed=0)
    server = torch.randn(7)
    assert consensus_distance(server.expand(500, -1), fed) == 0.0
    x = torch.randn(3, 7, generator=gen(6))
    expect = float(((x - x.mean(0)) ** 2).sum(1).mean())
    assert consensus_distance(x, Federation(3, None, torch.ones(3), seed=0)) == \
        pytest.approx(expect)
    cfg = load_config(config(False, ALGORITHMS["fedavg"], "stacked"))
    assert Runner(cfg).run().column("consensus") == [0.0, 0.0, 0.0]
