"""The fused local step (issues 23, 39): ``Oracle.loss_and_step`` applies the local update —
y ← y − η (∇F(a) + wd y), or with heavy-ball momentum v ← μ v − η (∇F(a) + wd y), y ← y + v
(a = y, or SAM's ascent point) — parameter by parameter from the gradients autograd returns,
instead of writing a gradient stack ``[M, P]`` and reading it back.
The numbers are bit for bit those of the unfused step, on the oracle (every small built-in
model, empty rows, several blocks) and on whole runs of every registered algorithm with and
without weight decay, momentum and clipping (the runner takes the fused step wherever a
phase's step is the default direction on the whole model; clipped, in two passes: the
gradient stack and its norms, then the update)."""

from __future__ import annotations

import pytest
import torch

from gossipfl.engine import LoopOracle, StackedOracle
from gossipfl.engine import oracle as oracle_module
from gossipfl.models import build_model
from gossipfl.network.clients import ClientEnv
from tests import distributed_cases as cases
from tests.oracle_reference import BUILTIN, rows_and_batch

#: every algorithm runs under one shared config: the settings some do not read are warned
#: (IgnoredSetting) and OledFL's β = 0.99 on a ring is warned unstable (StabilityWarning), as
#: designed and tested elsewhere (test_reliability_*, test_algorithms_papers)
pytestmark = [pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting"),
              pytest.mark.filterwarnings("ignore::gossipfl.assembly.experiment.StabilityWarning")]


def sgd(lr):
    def update(grad, y):
        y.add_(grad, alpha=-lr)
    return update


def decayed_heavy_ball(lr, wd=5e-4, mu=0.9):
    def update(grad, y, v):
        v.mul_(mu).add_(grad + wd * y, alpha=-lr)
        y.add_(v)
    return update


@pytest.mark.represented
@pytest.mark.parametrize("piece", [None, 5])
@pytest.mark.parametrize("name", ["linear", "logistic", "mlp", "cnn"])
@pytest.mark.parametrize("oracle_kind", ["stacked", "stacked-blocks", "loop"])
def test_loss_and_step_is_the_unfused_step_bitwise(name, oracle_kind, piece, monkeypatch):
    """``piece``: the update in pieces of rows of about that many elements (None: the
    default, larger than these models' parameters)."""
    if piece is not None:
        monkeypatch.setattr(oracle_module, "CPU_UPDATE_PIECE", piece)
    shape, outputs, loss, dtype, mask = BUILTIN[name]
    model = build_model(name, shape, outputs, seed=0)
    X, inputs, targets = rows_and_batch(model, shape, outputs, loss, dtype, mask)
    oracle = {"stacked": lambda: StackedOracle(model, loss),
              "stacked-blocks": lambda: StackedOracle(model, loss, chunk_size=1),
              "loop": lambda: LoopOracle(model, loss)}[oracle_kind]()
    batch = inputs, targets, mask
    fused, reference = X.clone(), X.clone()
    for _ in range(3):  # several steps from the moved rows
        got = oracle.loss_and_step(fused, *batch, sgd(0.1))
        losses, grads = oracle.loss_and_grad(reference, *batch)  # the unfused step
        sgd(0.1)(grads, reference)
        assert torch.equal(got, losses)
        assert torch.equal(fused, reference)
    empty = ~mask.any(1)
    assert torch.equal(fused[empty], X[empty])  # rows without samples do not move
    assert not torch.equal(fused[~empty], X[~empty])
    at = X + 0.01  # the gradient at another point, the step applied to the rows (SAM)
    velocity = [torch.full_like(X, 0.01), torch.full_like(X, 0.01)]
    for _ in range(2):  # weight decay and momentum: rows without samples decay, v moves
        got = oracle.loss_and_step(at, *batch, decayed_heavy_ball(0.1), (fused, velocity[0]))
        losses, grads = oracle.loss_and_grad(at, *batch)
        decayed_heavy_ball(0.1)(grads, reference, velocity[1])
        assert torch.equal(got, losses)
        assert torch.equal(fused, reference) and torch.equal(*velocity)


SETTINGS = {"sgd": {"weight_decay": 0.0}, "decay": {"weight_decay": 5e-4},
            "momentum": {"weight_decay": 5e-4, "momentum": 0.9},
            "clip": {"weight_decay": 5e-4, "momentum": 0.9, "clip_norm": 0.05}}


def train(algorithm: str, setting: str) -> dict:
    """The tests' unbalanced federation with the local-training ``setting``."""
    setup = cases.config(algorithm)
    setup["train"] = {**setup["train"], **SETTINGS[setting]}
    return setup


@pytest.mark.represented
@pytest.mark.parametrize("setting", list(SETTINGS))
@pytest.mark.parametrize("algorithm", cases.builtin_algorithms())
def test_every_algorithm_gives_the_unfused_numbers_bitwise(algorithm, setting, monkeypatch):
    setup = train(algorithm, setting)
    monkeypatch.setattr(oracle_module, "CPU_UPDATE_PIECE", 64)  # updates in several pieces
    fused = cases.measure_config(setup)
    monkeypatch.setattr(ClientEnv, "fused", False)  # the unfused reference
    want = cases.measure_config(setup)
    assert fused["rows"] == want["rows"], algorithm
    assert torch.equal(fused["params"], want["params"]), algorithm
    if want["server"] is not None:
        assert torch.equal(fused["server"], want["server"]), algorithm


@pytest.mark.slow
def test_the_fused_step_is_taken_for_every_setting(monkeypatch):
    calls = []
    original = ClientEnv.fused_step

    def spy(self, batch, update, state, at=None):
        calls.append((len(state), at is not None))  # (y, v) with momentum; SAM's point
        return original(self, batch, update, state, at)

    monkeypatch.setattr(ClientEnv, "fused_step", spy)
    for algorithm, setting, expect in (("dfedavg", "sgd", {(1, False)}),
                                       ("dfedsam", "sgd", {(1, True)}),
                                       ("dfedavg", "decay", {(1, False)}),
                                       ("dfedavg", "momentum", {(2, False)}),
                                       ("dfedsam", "momentum", {(2, True)}),
                                       ("dfedsam", "clip", {(2, True)})):
        calls.clear()
        cases.measure_config(train(algorithm, setting))
        assert set(calls) == expect, (algorithm, setting)
