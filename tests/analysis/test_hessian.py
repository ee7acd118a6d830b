"""Hessian-vector products, top eigenvalues and trace against exactly known Hessians."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipfl.analysis import hutchinson_trace, top_eigenvalues
from gossipfl.engine.hvp import HessianOperator
from gossipfl.engine.params import ParamLayout
from gossipfl.errors import GossipflError
from gossipfl.models import build_model
from tests.hessian_cases import dense_hessian

#: Every warning is an error here, but torch's own: its forward-mode (JVP) decompositions,
#: loaded on a process's first Hessian-vector product, go through the deprecated
#: torch.jit.script (pyproject.toml ignores it for the whole suite).
pytestmark = pytest.mark.filterwarnings(
    "error", "ignore:`torch.jit.script` is deprecated:DeprecationWarning")


def lsq_operator(A: np.ndarray, b: np.ndarray, **kwargs) -> HessianOperator:
    """L(x) = (1/n) Σ (a_jᵀx − b_j)²: H = (2/n) AᵀA, in float64."""
    model = build_model("linear", (A.shape[1],), 1, bias=False).double()
    return HessianOperator(model, torch.tensor(A), torch.tensor(b), loss="mse", **kwargs)


def lsq(n: int = 40, d: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=n)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def mlp_problem(M: int = 3, seed: int = 0):
    """A 5-4-3 MLP in float64, M random models and 12 shared samples."""
    torch.manual_seed(seed)
    model = build_model("mlp", (5,), 3, hidden=[4]).double()
    P = sum(p.numel() for p in model.parameters())
    X = torch.randn(M, P, dtype=torch.float64)
    inputs = torch.randn(12, 5, dtype=torch.float64)
    targets = torch.randint(0, 3, (12,))
    return model, X, inputs, targets


def test_lsq_hvp_is_the_exact_hessian_times_v():
    A, b = lsq()
    op = lsq_operator(A, b, batch_size=7)  # several data batches are summed
    X, V = torch.randn(3, 6, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    H = 2 / len(b) * A.T @ A
    np.testing.assert_allclose(op.hvp(X, V).numpy(), V.numpy() @ H, rtol=1e-10, atol=1e-12)
    expected = [np.mean((A @ x - b) ** 2) for x in X.numpy()]
    np.testing.assert_allclose(op.loss(X).numpy(), expected, rtol=1e-12)


@pytest.mark.slow
def test_lsq_top_eigenvalues_match_numpy():
    A, b = lsq()
    truth = np.linalg.eigvalsh(2 / len(b) * A.T @ A)[::-1]
    X = torch.randn(4, 6, dtype=torch.float64)
    eig = top_eigenvalues(lsq_operator(A, b), X, k=3, tol=1e-10, max_iter=2000,
                          generator=gen())
    assert eig.values.shape == (4, 3)
    np.testing.assert_allclose(eig.values.numpy(), np.tile(truth[:3], (4, 1)), rtol=1e-4)
    assert bool(eig.converged.all())
    assert (eig.iterations > 1).all() and (eig.iterations <= 2000).all()
    assert (eig.residual < 1e-10).all()
    for j in range(3):  # the vectors are unit eigenvectors
        v = eig.vectors[j].numpy()
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-8)


def test_lsq_trace_with_diagonal_hessian_is_exact():
    """Orthogonal columns make AᵀA diagonal, where Rademacher vᵀHv = tr H for every v."""
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.normal(size=(30, 5)))
    A, b = Q * np.array([1.0, 2.0, 3.0, 0.5, 4.0]), rng.normal(size=30)
    truth = np.trace(2 / 30 * A.T @ A)
    trace = hutchinson_trace(lsq_operator(A, b), torch.zeros(2, 5, dtype=torch.float64),
                             generator=gen())
    np.testing.assert_allclose(trace.values.numpy(), truth, rtol=1e-4)
    assert trace.iterations == 10  # min_iter: zero variance converges at once
    assert bool(trace.converged.all())


@pytest.mark.slow
def test_lsq_trace_estimate_is_within_its_standard_error():
    A, b = lsq(d=8, seed=2)
    truth = np.trace(2 / len(b) * A.T @ A)
    trace = hutchinson_trace(lsq_operator(A, b), torch.zeros(3, 8, dtype=torch.float64),
                             tol=1e-3, max_iter=400, generator=gen(5))
    assert trace.iterations == 400 and not trace.converged.any()
    err = np.abs(trace.values.numpy() - truth)
    assert (err < 4 * trace.std_error.numpy()).all()
    assert (trace.std_error.numpy() < 0.05 * truth).all()


@pytest.mark.slow
def test_mlp_hvp_matches_dense_autograd_hessian():
    model, X, inputs, targets = mlp_problem()
    op = HessianOperator(model, inputs, targets, batch_size=5)
    V = torch.randn_like(X)
    got = op.hvp(X, V)
    for i in range(X.shape[0]):
        H = dense_hessian(model, X[i], inputs, targets)
        torch.testing.assert_close(got[i], H @ V[i], rtol=1e-9, atol=1e-10)


@pytest.mark.slow
def test_mlp_top_eigenvalue_is_the_largest_in_magnitude():
    model, X, inputs, targets = mlp_problem(M=2, seed=1)
    eig = top_eigenvalues(HessianOperator(model, inputs, targets), X, k=2, tol=1e-12,
                          max_iter=3000, generator=gen())
    for i in range(2):
        w = np.linalg.eigvalsh(dense_hessian(model, X[i], inputs, targets).numpy())
        by_magnitude = w[np.argsort(-np.abs(w))]
        np.testing.assert_allclose(eig.values[i].numpy(), by_magnitude[:2], rtol=1e-4)


@pytest.mark.represented
@pytest.mark.parametrize("chunk_size", [None, 2])
def test_batched_equals_per_model_loop(chunk_size):
    model, X, inputs, targets = mlp_problem(M=5)
    batched = HessianOperator(model, inputs, targets, mode="batched", chunk_size=chunk_size)
    loop = HessianOperator(model, inputs, targets, mode="loop")
    assert (batched.mode, loop.mode) == ("batched", "loop")
    V = torch.randn_like(X)
    torch.testing.assert_close(batched.hvp(X, V), loop.hvp(X, V), rtol=1e-10, atol=1e-12)
    e1 = top_eigenvalues(batched, X, k=2, max_iter=30, generator=gen(3))
    e2 = top_eigenvalues(loop, X, k=2, max_iter=30, generator=gen(3))
    torch.testing.assert_close(e1.values, e2.values, rtol=1e-9, atol=1e-12)
    t1 = hutchinson_trace(batched, X, max_iter=12, generator=gen(4))
    t2 = hutchinson_trace(loop, X, max_iter=12, generator=gen(4))
    torch.testing.assert_close(t1.values, t2.values, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
def test_each_model_gets_its_own_hessian():
    """Batched over M: row i is model i's spectrum, whatever the other rows are."""
    model, X, inputs, targets = mlp_problem(M=3)
    op = HessianOperator(model, inputs, targets)
    together = top_eigenvalues(op, X, k=1, tol=1e-9, max_iter=500, generator=gen())
    alone = top_eigenvalues(op, X[1:2], k=1, tol=1e-9, max_iter=500, generator=gen())
    torch.testing.assert_close(together.values[1], alone.values[0], rtol=1e-6, atol=1e-9)


def test_deterministic_for_a_seed():
    model, X, inputs, targets = mlp_problem(M=2)
    op = HessianOperator(model, inputs, targets)
    a = top_eigenvalues(op, X, k=1, max_iter=10, generator=gen(7)).values
    b = top_eigenvalues(op, X, k=1, max_iter=10, generator=gen(7)).values
    assert torch.equal(a, b)
    assert 0 < op.products <= 2 * 2 * 10  # M products per call, at most max_iter calls


def test_auto_mode_batches_where_it_measured_faster():
    inputs, targets = torch.randn(4, 1, 16, 16), torch.randint(0, 3, (4,))
    cnn = build_model("cnn", (1, 16, 16), 3)
    mlp = build_model("mlp", (1, 16, 16), 3, hidden=[4])
    assert HessianOperator(cnn, inputs, targets).mode == "loop"  # vmap convs: slower on CPU
    assert HessianOperator(mlp, inputs, targets).mode == "batched"
    with pytest.raises(Exception, match="mode: unknown value 'fast'"):
        HessianOperator(mlp, inputs, targets, mode="fast")


@pytest.mark.slow
def test_small_eigengap_converges_by_residual_and_sorts_by_magnitude():
    """H = diag(1, 0.97, 0.5, 0.2) in a random basis: every value reported as converged is
    within tol·|λ| of an eigenvalue, and the k values come sorted by magnitude."""
    rng = np.random.default_rng(4)
    Q, _ = np.linalg.qr(rng.normal(size=(40, 4)))
    R, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    truth = np.array([1.0, 0.97, 0.5, 0.2])
    A = Q * np.sqrt(truth * 40 / 2) @ R  # (2/n) AᵀA = Rᵀ diag(truth) R
    tol = 1e-3
    eig = top_eigenvalues(lsq_operator(A, rng.normal(size=40)),
                          torch.zeros(3, 4, dtype=torch.float64), k=3, tol=tol,
                          max_iter=1000, generator=gen(2))
    values = eig.values.numpy()
    assert bool(eig.converged.all())
    assert np.all(np.abs(values[:, :-1]) >= np.abs(values[:, 1:]))
    distance = np.abs(values[..., None] - truth).min(-1)
    assert np.all(distance <= tol * np.abs(values))
    np.testing.assert_allclose(values[:, 2], 0.5, rtol=1e-4)


@pytest.mark.slow
def test_recurrent_model_products_by_reverse_over_reverse_equal_double_backward():
    """An LSTM has no forward-mode rule for its fused kernel: H·v is taken as vjp(grad(L))
    in a loop over models, and equals autograd's double backward."""
    model = build_model("lstm", (6,), 80, seed=0, hidden=5, embed=3, layers=1)
    layout = ParamLayout.from_module(model)
    gen = torch.Generator().manual_seed(0)
    X = layout.flatten(model).detach().expand(2, -1).clone()
    X[1] += 0.1 * torch.randn(layout.P, generator=gen)
    V = torch.randn(X.shape, generator=gen)
    inputs = torch.randint(0, 80, (3, 6), generator=gen)
    targets = torch.randint(0, 80, (3,), generator=gen)
    op = HessianOperator(model, inputs, targets, mode="auto")
    assert op.mode == "loop"
    with pytest.raises(GossipflError, match="mode: 'batched' cannot run a model with recurrent"):
        HessianOperator(model, inputs, targets, mode="batched")
    expected = []
    for x, v in zip(X, V):
        x = x.clone().requires_grad_(True)
        out = torch.func.functional_call(model, layout.views(x), (inputs,))
        loss = torch.nn.functional.cross_entropy(out, targets)
        (g,) = torch.autograd.grad(loss, x, create_graph=True)
        expected.append(torch.autograd.grad(g, x, grad_outputs=v)[0])
    torch.testing.assert_close(op.hvp(X, V), torch.stack(expected), rtol=1e-4, atol=1e-6)
