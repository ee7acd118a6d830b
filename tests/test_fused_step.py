"""The fused SGD step (issue 23): ``Oracle.loss_and_step`` applies y ← y − η ∇F(a) (a = y, or
SAM's ascent point) from the gradients autograd returns instead of writing a gradient stack
``[M, P]`` and reading it back.
The numbers are bit for bit those of the unfused step, on the oracle (every small built-in
model, empty rows, several blocks) and on whole runs of every registered algorithm (the
runner takes the fused step wherever a phase's step is plain SGD)."""

from __future__ import annotations

import pytest
import torch

from gossipfl.clients import ClientEnv
from gossipfl.engine import LoopOracle, StackedOracle
from gossipfl.models import build_model
from tests import distributed_cases as cases
from tests.oracle_reference import rows_and_batch
from tests.test_stacked_oracle import BUILTIN


def unfused(oracle, X, inputs, targets, mask, lr):
    losses, grads = oracle.loss_and_grad(X, inputs, targets, mask)
    X.add_(grads, alpha=-lr)
    return losses


@pytest.mark.parametrize("name", ["linear", "logistic", "mlp", "cnn"])
@pytest.mark.parametrize("oracle_kind", ["stacked", "stacked-blocks", "loop"])
def test_loss_and_step_is_the_unfused_step_bitwise(name, oracle_kind):
    shape, outputs, loss, dtype, mask = BUILTIN[name]
    model = build_model(name, shape, outputs, seed=0)
    X, inputs, targets = rows_and_batch(model, shape, outputs, loss, dtype, mask)
    oracle = {"stacked": lambda: StackedOracle(model, loss),
              "stacked-blocks": lambda: StackedOracle(model, loss, chunk_size=1),
              "loop": lambda: LoopOracle(model, loss)}[oracle_kind]()
    fused, reference = X.clone(), X.clone()
    for _ in range(3):  # several steps from the moved rows
        got = oracle.loss_and_step(fused, inputs, targets, mask, 0.1)
        want = unfused(oracle, reference, inputs, targets, mask, 0.1)
        assert torch.equal(got, want)
        assert torch.equal(fused, reference)
    at = X + 0.01  # the gradient at another point, the step applied to the rows (SAM)
    got = oracle.loss_and_step(at, inputs, targets, mask, 0.1, into=fused)
    losses, grads = oracle.loss_and_grad(at, inputs, targets, mask)
    reference.add_(grads, alpha=-0.1)
    assert torch.equal(got, losses) and torch.equal(fused, reference)
    empty = ~mask.any(1)
    assert torch.equal(fused[empty], X[empty])  # rows without samples do not move
    assert not torch.equal(fused[~empty], X[~empty])


def plain(algorithm: str) -> dict:
    """The tests' unbalanced federation without weight decay: plain SGD steps."""
    setup = cases.config(algorithm)
    setup["train"] = {**setup["train"], "weight_decay": 0.0}
    return setup


@pytest.mark.parametrize("algorithm", cases.builtin_algorithms())
def test_every_algorithm_gives_the_unfused_numbers_bitwise(algorithm, monkeypatch):
    setup = plain(algorithm)
    fused = cases.measure_config(setup)
    monkeypatch.setattr(ClientEnv, "plain_sgd", property(lambda self: False))  # unfused
    want = cases.measure_config(setup)
    assert fused["rows"] == want["rows"], algorithm
    assert torch.equal(fused["params"], want["params"]), algorithm
    if want["server"] is not None:
        assert torch.equal(fused["server"], want["server"]), algorithm


def test_the_fused_step_is_taken_for_plain_sgd_and_sam_only(monkeypatch):
    calls = []
    original = ClientEnv.sgd_step

    def spy(self, y, batch, lr, at=None):
        calls.append(at is not None)  # SAM's step: the gradient at the ascent point
        return original(self, y, batch, lr, at)

    monkeypatch.setattr(ClientEnv, "sgd_step", spy)
    for algorithm, change, expect in (("dfedavg", {}, {False}), ("dfedsam", {}, {True}),
                                      ("dfedavg", {"momentum": 0.9}, set()),
                                      ("dfedavg", {"weight_decay": 1e-3}, set()),
                                      ("dfedsam", {"clip_norm": 1.0}, set())):
        calls.clear()
        setup = plain(algorithm)
        cases.measure_config({**setup, "train": {**setup["train"], **change}})
        assert set(calls) == expect, (algorithm, change)
