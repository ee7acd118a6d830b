"""The stacked oracle against per-row autograd and the loop oracle, on every built-in model and
on small models that exercise each layer and layout path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gossipfl.assembly.loading import load_config
from gossipfl.engine import (
    LoopOracle,
    StackedOracle,
    StackedUnsupported,
    VmapOracle,
    evaluate_stack,
    init_stack,
    make_oracle,
)
from gossipfl.engine import stacked as stacked_module
from gossipfl.errors import GossipflError
from gossipfl.models import build_model
from tests.oracle_reference import (
    BUILTIN,
    F64,
    MASK,
    assert_rel,
    gen,
    predictions,
    reference,
    rows_and_batch,
)

# ---------------------------------------------------------------- built-in models


@pytest.mark.represented
@pytest.mark.parametrize("name", list(BUILTIN))
def test_builtin_models_match_reference_and_loop(name):
    """fp32 to 1e-5 (small models), fp64 to 1e-9 (vgg11, resnet18); empty rows exactly 0.
    The loop oracle is compared on the small models (test_oracle.py checks it on all)."""
    shape, outputs, loss, dtype, mask = BUILTIN[name]
    model = build_model(name, shape, outputs, seed=0)
    X, inputs, targets = rows_and_batch(model, shape, outputs, loss, dtype, mask)
    oracle = StackedOracle(model, loss)
    value, grad = oracle.loss_and_grad(X, inputs, targets, mask)
    assert grad.dtype == dtype and grad.shape == X.shape and grad.is_contiguous()
    rel = 1e-5 if dtype == torch.float32 else 1e-9
    ref_value, ref_grad = reference(model, loss, X, inputs, targets, mask)
    assert_rel(value[None], ref_value[None], rel)
    assert_rel(grad, ref_grad, rel)
    empty = ~mask.any(1)
    assert (grad[empty] == 0).all() and (value[empty] == 0).all()
    if dtype == F64:
        return
    loop_value, loop_grad = LoopOracle(model, loss).loss_and_grad(X, inputs, targets, mask)
    assert_rel(grad, loop_grad, rel)
    assert_rel(value[None], loop_value[None], rel)


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_predict_own_and_shared_inputs(name):
    shape, outputs, loss, dtype, mask = BUILTIN[name]
    model = build_model(name, shape, outputs, seed=1)
    X, inputs, _ = rows_and_batch(model, shape, outputs, loss, dtype, mask, seed=1)
    oracle = StackedOracle(model, loss)
    own = oracle.predict(X, inputs)
    shared = oracle.predict(X, inputs[0], shared=True)
    assert own.shape == (4, 4, outputs) and not own.requires_grad
    assert_rel(own, predictions(model, X, inputs, shared=False), 1e-5)
    assert_rel(shared, predictions(model, X, inputs[0], shared=True), 1e-5)


@pytest.mark.slow
def test_chunks_and_memory_budget_give_the_same_numbers(monkeypatch):
    """Explicit chunk sizes, and an activation budget so small that every block is one
    client and predict() splits the samples too: identical results up to rounding."""
    shape, outputs, loss, _, mask = BUILTIN["cnn"]
    model = build_model("cnn", shape, outputs, seed=2)
    X, inputs, targets = rows_and_batch(model, shape, outputs, loss, F64, mask, seed=2)
    whole = StackedOracle(model, loss, chunk_size=100).loss_and_grad(X, inputs, targets, mask)
    whole_pred = StackedOracle(model, loss, chunk_size=100).predict(X, inputs[0], shared=True)
    for chunk in (1, 3):
        value, grad = StackedOracle(model, loss, chunk_size=chunk).loss_and_grad(
            X, inputs, targets, mask)
        assert_rel(grad, whole[1], 1e-12)
        assert_rel(value[None], whole[0][None], 1e-12)
    monkeypatch.setattr(stacked_module, "CPU_ACTIVATION_BUDGET", 1)
    tiny = StackedOracle(model, loss)
    assert tiny.block_size(4, shape, 4, X) == 1 and tiny.max_rows(shape, X) == 1
    value, grad = tiny.loss_and_grad(X, inputs, targets, mask)
    assert_rel(grad, whole[1], 1e-12)
    assert_rel(tiny.predict(X, inputs[0], shared=True), whole_pred, 1e-12)


def test_block_size_follows_the_budget():
    model = build_model("cnn", (1, 28, 28), 10)
    oracle = StackedOracle(model)
    X = torch.zeros(100, oracle.layout.P)
    sizes = [oracle.block_size(100, (1, 28, 28), b, X) for b in (1, 32, 128, 10**6)]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] == 100 and sizes[-1] == 1
    per_sample, largest = oracle.program.activation_numel((1, 28, 28), torch.float32)
    # conv1's output, 64·24·24 values per sample, is the largest value
    assert largest == 64 * 24 * 24 < per_sample < 4 * 64 * 24 * 24
    assert oracle.max_rows((1, 28, 28), X, training=False) > oracle.max_rows((1, 28, 28), X)
    assert StackedOracle(model, chunk_size=7).block_size(100, (1, 28, 28), 32, X) == 7


def test_relu_runs_after_maxpool_in_the_traced_graph():
    oracle = StackedOracle(build_model("cnn", (1, 28, 28), 10))
    order = [type(oracle.program.modules[n.target]).__name__ for n in oracle.program.nodes
             if n.op == "call_module"]
    assert order[:6] == ["Conv2d", "MaxPool2d", "ReLU", "Conv2d", "MaxPool2d", "ReLU"]


# ---------------------------------------------------------------- layer and layout coverage


class Mixed(nn.Module):
    """Conv (circular padding, groups, no bias), functional ops, GroupNorm on 2-d features,
    LayerNorm, Linear on 3-d input, view(size(0), -1) and a residual add."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1, padding_mode="circular", groups=2,
                              bias=False)
        self.norm = nn.GroupNorm(2, 4)
        self.seq = nn.Conv1d(4, 4, 3, padding=1)
        self.tokens = nn.Linear(4, 6)
        self.ln = nn.LayerNorm(6)
        self.fc = nn.Linear(6 * 4, 8)
        self.gn = nn.GroupNorm(2, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.norm(self.conv(x))), 2)  # [n, 4, 2, 2]
        h = h.view(h.size(0), 4, -1)  # [n, 4, 4]
        h = torch.tanh(self.seq(h)) + h  # residual on a Conv1d
        t = self.ln(self.tokens(h.transpose(1, 2)))  # Linear on [n, 4, 4] → [n, 4, 6]
        z = F.relu(self.gn(self.fc(t.flatten(1))))
        return self.head(z)


class SharedResidual(nn.Module):
    """Adds a function of the raw input to a per-client value: shared predict must expand."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 3)

    def forward(self, x):
        return self.fc(x) + x[:, :3]


@pytest.mark.represented
@pytest.mark.parametrize("factory, shape", [(Mixed, (2, 4, 4)), (SharedResidual, (5,))])
def test_layer_and_layout_paths_match_reference(factory, shape):
    torch.manual_seed(0)
    model = factory().to(F64)
    mask = MASK
    X, inputs, targets = rows_and_batch(model, shape, 3, "cross_entropy", F64, mask, seed=3)
    oracle = make_oracle("stacked", model)
    value, grad = oracle.loss_and_grad(X, inputs, targets, mask)
    ref_value, ref_grad = reference(model, "cross_entropy", X, inputs, targets, mask)
    assert_rel(grad, ref_grad, 1e-10)
    assert_rel(value[None], ref_value[None], 1e-10)
    assert_rel(oracle.predict(X, inputs[1], shared=True),
               predictions(model, X, inputs[1], shared=True), 1e-10)
    assert_rel(oracle.predict(X, inputs), predictions(model, X, inputs, shared=False), 1e-10)


# ---------------------------------------------------------------- choice of oracle


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x) if x.sum() > 0 else -self.fc(x)  # torch.fx cannot trace this


def test_auto_choice_and_fallbacks():
    for name, (shape, outputs, *_rest) in BUILTIN.items():
        assert isinstance(make_oracle("auto", build_model(name, shape, outputs)), StackedOracle)
    batchnorm = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    assert isinstance(make_oracle("auto", batchnorm), LoopOracle)
    prelu = nn.Sequential(nn.Linear(4, 3), nn.PReLU(), nn.Linear(3, 2))
    assert isinstance(make_oracle("auto", prelu), VmapOracle)
    assert isinstance(make_oracle("auto", DataDependent()), VmapOracle)
    with pytest.raises(StackedUnsupported, match=r"engine\.oracle: 'stacked' .*'1' "
                                                 r"\(BatchNorm1d\)"):
        make_oracle("stacked", batchnorm)
    with pytest.raises(GossipflError, match=r"engine\.oracle: 'stacked' .*torch\.fx"):
        StackedOracle(DataDependent())


def test_config_and_factory_accept_stacked():
    assert load_config({"engine": {"oracle": "stacked"}}).engine.oracle == "stacked"
    with pytest.raises(GossipflError, match=r"engine\.oracle: .*did you mean 'stacked'"):
        load_config({"engine": {"oracle": "stacket"}})
    with pytest.raises(GossipflError, match=r"engine\.oracle: .*did you mean 'stacked'"):
        make_oracle("stacket", nn.Linear(2, 2))


def test_evaluate_stack_equals_per_model_loop():
    model = build_model("cnn", (1, 28, 28), 10, seed=4)
    X = init_stack(model, 3) + 0.05 * torch.randn(3, sum(p.numel() for p in model.parameters()),
                                                   generator=gen(4))
    inputs = torch.randn(10, 1, 28, 28, generator=gen(5))
    targets = torch.randint(0, 10, (10,), generator=gen(6))
    acc, loss = evaluate_stack(make_oracle("stacked", model), X, inputs, targets, batch_size=4)
    out = predictions(model, X, inputs, shared=True)
    ref_acc = (out.argmax(-1) == targets).double().mean(1)
    ref_loss = torch.stack([F.cross_entropy(o, targets) for o in out]).double()
    torch.testing.assert_close(acc.double(), ref_acc)
    torch.testing.assert_close(loss.double(), ref_loss, rtol=1e-5, atol=1e-6)
