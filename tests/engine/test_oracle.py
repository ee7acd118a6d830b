"""Parameter stack, gradient oracles and batched evaluation against independent computations."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from gossipfl.engine import (
    LoopOracle,
    ParamLayout,
    VmapOracle,
    evaluate_per_client,
    evaluate_stack,
    init_stack,
    make_oracle,
)
from gossipfl.errors import GossipflError
from gossipfl.models import build_model
from tests.oracle_reference import assert_rel, gen, reference, rows_and_batch

F64 = torch.float64
MASK4 = torch.tensor([[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
MASK_BIG = torch.tensor([[1, 0, 1], [0, 0, 0]], dtype=torch.bool)

# name, input shape, outputs, loss, mask [M, B] (the big models get M=2, B=3)
CASES = {
    "linear": ((1, 6, 6), 1, "mse", MASK4),
    "logistic": ((1, 6, 6), 5, "cross_entropy", MASK4),
    "mlp": ((1, 28, 28), 10, "cross_entropy", MASK4),
    "cnn": ((3, 32, 32), 10, "cross_entropy", MASK4),
    "vgg11": ((3, 8, 8), 10, "cross_entropy", MASK_BIG),
    "resnet18": ((3, 8, 8), 10, "cross_entropy", MASK_BIG),
}


def problem(name: str, dtype=torch.float32, seed: int = 0):
    """Model, distinct rows X [M, P], inputs, targets and mask for a CASES entry."""
    shape, out, loss, mask = CASES[name]
    model = build_model(name, shape, out, seed=seed)
    X, inputs, targets = rows_and_batch(model, shape, out, loss, dtype, mask, seed)
    return model, loss, X, inputs, targets, mask


# ---------------------------------------------------------------- parameter stack


def test_views_are_views_and_roundtrip():
    model = build_model("cnn", (1, 28, 28), 10, seed=0)
    layout = ParamLayout.from_module(model)
    assert layout.P == sum(p.numel() for p in model.parameters())
    assert layout.offsets[1] == layout.numels[0]
    X = init_stack(model, 4)
    assert X.shape == (4, layout.P) and X.is_contiguous()
    assert torch.equal(X[2], parameters_to_vector(model.parameters()).detach())
    views = layout.views(X)
    w = views["head.weight"]
    assert w.shape == (4, 10, 192)
    X[1, layout.offsets[-2]] = 123.0  # first element of head.weight, row 1
    assert w[1, 0, 0] == 123.0
    views["head.bias"][3].fill_(-7.0)
    assert (X[3, -10:] == -7.0).all()
    single = layout.views(X[3])
    assert single["head.bias"].shape == (10,) and single["head.bias"].data_ptr() == (
        X[3, -10:].data_ptr()
    )
    layout.load_into(model, X[1])
    assert model.head.weight[0, 0] == 123.0
    assert torch.equal(layout.flatten(model), X[1])


def test_mask_selects_named_coordinates():
    model = build_model("mlp", (1, 4, 4), 3, hidden=[5])
    layout = ParamLayout.from_module(model)
    mask = layout.mask(model.head_names)
    assert mask.sum() == 5 * 3 + 3 and mask[-18:].all() and not mask[:-18].any()
    with pytest.raises(KeyError):
        layout.mask(["nope"])


# ---------------------------------------------------------------- oracles


@pytest.mark.represented
@pytest.mark.parametrize("name", list(CASES))
def test_oracles_match_autograd_reference(name):
    """float64 so that ReLU kinks cannot amplify rounding: agreement to 1e-9; chunk sizes
    agree to 1e-12."""
    model, loss, X, inputs, targets, mask = problem(name, dtype=F64)
    ref_loss, ref_grad = reference(model, loss, X, inputs, targets, mask)
    assert (ref_grad[-1] == 0).all() and ref_loss[-1] == 0
    chunks = (None, 1, 2) if name not in ("vgg11", "resnet18") else (None,)  # keep them fast
    vmapped = [VmapOracle(model, loss, c).loss_and_grad(X, inputs, targets, mask) for c in chunks]
    looped = LoopOracle(model, loss).loss_and_grad(X, inputs, targets, mask)
    for value, grad in [vmapped[0], looped]:
        assert grad.shape == X.shape and grad.dtype == F64
        assert_rel(value, ref_loss, 1e-9)
        assert_rel(grad, ref_grad, 1e-9)
    for value, grad in vmapped[1:]:
        assert_rel(value, vmapped[0][0], 1e-12)
        assert_rel(grad, vmapped[0][1], 1e-12)


@pytest.mark.represented
@pytest.mark.parametrize("name", ["logistic", "mlp", "cnn"])
def test_fp32_vmap_and_loop_agree(name):
    model, loss, X, inputs, targets, mask = problem(name, seed=5)
    v_loss, v_grad = VmapOracle(model, loss, chunk_size=2).loss_and_grad(X, inputs, targets, mask)
    l_loss, l_grad = LoopOracle(model, loss).loss_and_grad(X, inputs, targets, mask)
    assert v_grad.dtype == torch.float32 and v_grad.is_contiguous()
    assert_rel(v_loss, l_loss, 1e-5)
    assert_rel(v_grad, l_grad, 1e-5)
    r_loss, r_grad = reference(model, loss, X, inputs, targets, mask)
    assert_rel(v_loss, r_loss, 1e-5)
    assert_rel(v_grad, r_grad, 1e-5)


@pytest.mark.parametrize("outputs", [1, 3])
def test_linear_mse_closed_form(outputs):
    """grad_Θ = (2 / (n K)) Rᵀ diag(m) Ã with Ã = [A, 1], R = Ã Θᵀ − Y, n = max(1, Σ m)."""
    M, B, D = 3, 4, 5
    model = build_model("linear", (D,), outputs)
    X = torch.randn(M, (D + 1) * outputs, generator=gen(1), dtype=F64)
    A = torch.randn(M, B, D, generator=gen(2), dtype=F64)
    Y = torch.randn(M, B, outputs, generator=gen(3), dtype=F64)
    targets = Y.squeeze(-1) if outputs == 1 else Y
    for oracle in (VmapOracle(model, "mse"), LoopOracle(model, "mse")):
        loss, grad = oracle.loss_and_grad(X, A, targets, MASK4)
        for i in range(M):
            m = MASK4[i].to(F64)
            n = max(1.0, float(m.sum()))
            theta = torch.cat([X[i, : D * outputs].view(outputs, D),
                               X[i, D * outputs :].view(outputs, 1)], dim=1)
            A1 = torch.cat([A[i], torch.ones(B, 1, dtype=F64)], dim=1)
            R = A1 @ theta.T - Y[i]
            expect_loss = (m[:, None] * R**2).sum() / (n * outputs)
            G = 2.0 / (n * outputs) * R.T @ (m[:, None] * A1)
            expect = torch.cat([G[:, :D].reshape(-1), G[:, D]])
            torch.testing.assert_close(loss[i], expect_loss, rtol=1e-12, atol=1e-14)
            torch.testing.assert_close(grad[i], expect, rtol=1e-12, atol=1e-14)


def test_mask_none_means_all_samples():
    model, loss, X, inputs, targets, _ = problem("mlp")
    oracle = VmapOracle(model, loss)
    a = oracle.loss_and_grad(X, inputs, targets)
    b = oracle.loss_and_grad(X, inputs, targets, torch.ones(3, 4, dtype=torch.bool))
    torch.testing.assert_close(a, b)


@pytest.mark.represented
@pytest.mark.parametrize("oracle_cls", [VmapOracle, LoopOracle])
def test_predict_own_and_shared_inputs(oracle_cls):
    model, loss, X, inputs, _, _ = problem("cnn")
    oracle = oracle_cls(model, loss)
    net = copy.deepcopy(model)
    out = oracle.predict(X, inputs)
    shared = oracle.predict(X, inputs[0], shared=True)
    assert out.shape == (3, 4, 10) and not out.requires_grad
    for i in range(3):
        vector_to_parameters(X[i].clone(), net.parameters())
        with torch.no_grad():
            assert_rel(out[i], net(inputs[i]), 1e-5)
            assert_rel(shared[i], net(inputs[0]), 1e-5)


def test_loop_oracle_runs_batchnorm_models_and_auto_picks_it():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    X = init_stack(model, 2)
    inputs = torch.randn(2, 5, 4, generator=gen(0))
    targets = torch.randint(0, 2, (2, 5), generator=gen(1))
    oracle = make_oracle("auto", model)
    assert isinstance(oracle, LoopOracle)
    _, grad = oracle.loss_and_grad(X, inputs, targets)
    _, ref = reference(model, "cross_entropy", X, inputs, targets, torch.ones(2, 5, dtype=bool))
    assert_rel(grad, ref, 1e-5)
    from gossipfl.engine.stacked import StackedOracle

    assert isinstance(make_oracle("auto", build_model("mlp", (4,), 2)), StackedOracle)
    with pytest.raises(GossipflError, match="engine.oracle: 'vmap' cannot batch"):
        make_oracle("vmap", model)


def test_user_errors():
    model = build_model("mlp", (4,), 2)
    with pytest.raises(GossipflError, match=r"train\.loss: .*'mse'"):
        VmapOracle(model, loss="mes")
    with pytest.raises(GossipflError, match=r"train\.loss"):
        LoopOracle(model, loss="hinge")
    with pytest.raises(GossipflError, match=r"engine\.oracle: .*did you mean 'vmap'"):
        make_oracle("vmapp", model)
    with pytest.raises(GossipflError, match=r"engine\.chunk_size: .* got 0"):
        make_oracle("vmap", model, chunk_size=0)


# ---------------------------------------------------------------- evaluation


def loop_scores(model, X, inputs, targets):
    """Accuracy and mean cross-entropy of each row's model, one model at a time."""
    net = copy.deepcopy(model)
    acc, loss = [], []
    for i in range(X.shape[0]):
        vector_to_parameters(X[i].clone(), net.parameters())
        with torch.no_grad():
            out = net(inputs if inputs.dim() == 4 else inputs[i])
        acc.append((out.argmax(1) == targets).double().mean())
        loss.append(F.cross_entropy(out, targets).double())
    return torch.stack(acc), torch.stack(loss)


@pytest.mark.represented
@pytest.mark.parametrize("kind", ["vmap", "loop"])
def test_evaluate_stack_equals_per_model_loop(kind):
    model, _, X, _, _, _ = problem("cnn")
    inputs = torch.randn(10, 3, 32, 32, generator=gen(7))
    targets = torch.randint(0, 10, (10,), generator=gen(8))
    oracle = make_oracle(kind, model, chunk_size=2)
    acc, loss = evaluate_stack(oracle, X, inputs, targets, batch_size=4)
    ref_acc, ref_loss = loop_scores(model, X, inputs, targets)
    assert acc.shape == loss.shape == (3,)
    torch.testing.assert_close(acc.double(), ref_acc)
    torch.testing.assert_close(loss.double(), ref_loss, rtol=1e-5, atol=1e-6)
    avg_acc, _ = evaluate_stack(oracle, X.mean(0, keepdim=True), inputs, targets)
    ref_avg, _ = loop_scores(model, X.mean(0, keepdim=True), inputs, targets)
    torch.testing.assert_close(avg_acc.double(), ref_avg)


def test_evaluate_per_client_equals_loop():
    model, _, X, _, _, _ = problem("mlp")
    inputs = torch.randn(12, 1, 28, 28, generator=gen(9))
    targets = torch.randint(0, 10, (12,), generator=gen(10))
    subsets = [np.array([0, 3, 5, 7, 11]), torch.tensor([2, 4]), np.array([], dtype=np.int64)]
    acc, loss = evaluate_per_client(make_oracle("vmap", model), X, inputs, targets, subsets,
                                    batch_size=2)
    for i in range(2):
        idx = torch.as_tensor(subsets[i])
        ref_acc, ref_loss = loop_scores(model, X[i : i + 1], inputs[idx], targets[idx])
        torch.testing.assert_close(acc[i].double(), ref_acc[0])
        torch.testing.assert_close(loss[i].double(), ref_loss[0], rtol=1e-5, atol=1e-6)
    assert torch.isnan(acc[2]) and torch.isnan(loss[2])


def test_evaluate_mse_has_nan_accuracy_and_mean_squared_error():
    model = build_model("linear", (3,), 1)
    X = torch.randn(2, 4, generator=gen(0), dtype=F64)
    A = torch.randn(5, 3, generator=gen(1), dtype=F64)
    y = torch.randn(5, generator=gen(2), dtype=F64)
    acc, loss = evaluate_stack(make_oracle("vmap", model, loss="mse"), X, A, y, batch_size=2)
    expect = torch.stack([((A @ X[i, :3] + X[i, 3] - y) ** 2).mean() for i in range(2)])
    assert torch.isnan(acc).all()
    torch.testing.assert_close(loss, expect)


@pytest.mark.represented
@pytest.mark.parametrize("kind", ["stacked", "vmap", "loop"])
@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_gradient_of_some_parameters_is_those_columns_of_the_full_gradient(kind, name):
    """``wrt`` (a phase that trains only the head, or only the body): the same columns as the
    full gradient, 0 elsewhere; the loss unchanged."""
    model, loss, X, inputs, targets, mask = problem(name, F64)
    oracle = make_oracle(kind, model, loss)
    full_loss, full = oracle.loss_and_grad(X, inputs, targets, mask)
    layout = oracle.layout
    head = [n for n in layout.names if n.startswith("head")]
    body = [n for n in layout.names if n not in head]
    assert head and body
    for wrt in (head, body):
        part_loss, part = oracle.loss_and_grad(X, inputs, targets, mask, wrt)
        assert torch.equal(part_loss, full_loss)
        picked = layout.mask(tuple(wrt))
        assert_rel(part[:, picked], full[:, picked], 1e-10)
        assert not part[:, ~picked].any()
