"""The Hessian spectrum of the loss at M models at once: top-k eigenvalues and the trace.

Both estimators only need Hessian-vector products (:class:`~gossipfl.engine.hvp.
HessianOperator`), which they request for all M models in one call, as PyHessian does for
one model (Yao, Gholami, Keutzer, Mahoney 2020, "PyHessian: Neural Networks Through the Lens
of the Hessian", IEEE BigData):

- :func:`top_eigenvalues`: power iteration with deflation. Eigenvalue j is found by iterating
  v ← H v / ‖H v‖ with v kept orthogonal to eigenvectors 1..j−1 (Gram–Schmidt, which deflates
  them away); the estimate is the Rayleigh quotient λ = vᵀHv. It stops for a model when the
  relative residual ‖Hv − λv‖ / |λ| falls below ``tol``, or after ``max_iter`` products.
  (PyHessian stops when λ changes by less than ``tol`` between iterations; with a small
  eigengap that rule stopped after 7 iterations on a Fashion-MNIST MLP with the second
  eigenvalue found larger than the "top" one. A residual below ``tol`` guarantees that λ is
  within tol·|λ| of an eigenvalue of the symmetric H.) Power iteration converges to the
  eigenvalue of largest *magnitude*, so at a saddle the "top" eigenvalue may be negative (as
  in PyHessian); the k values of each model are returned sorted by magnitude.
- :func:`hutchinson_trace`: tr H = E[vᵀHv] for Rademacher v (Hutchinson 1989). Samples are
  drawn until the standard error of the mean is below ``tol`` times |mean| (at least
  ``min_iter`` samples) or ``max_iter`` samples were used.

Randomness comes from a ``torch.Generator`` the caller seeds, so results are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from gossipfl.engine.hvp import HessianOperator

_EPS = 1e-6


@dataclass
class Eigenvalues:
    """Top-k eigenvalues of M Hessians: ``values [M, k]`` by decreasing magnitude;
    ``iterations [M, k]`` products used; ``residual [M, k]`` the last relative residual
    ‖Hv − λv‖/|λ|; ``converged [M, k]`` whether it fell below ``tol``; ``vectors`` the unit
    eigenvectors, k tensors ``[M, P]`` in the same order."""

    values: Tensor
    iterations: Tensor
    residual: Tensor
    converged: Tensor
    tol: float
    max_iter: int
    vectors: list[Tensor] = field(default_factory=list, repr=False)  # k × [M, P]


@dataclass
class Trace:
    """Hutchinson estimates of tr H for M models: ``values [M]``, ``std_error [M]`` of the
    mean, ``iterations`` samples used (the same for all models), ``converged [M]``."""

    values: Tensor
    std_error: Tensor
    iterations: int
    converged: Tensor
    tol: float
    max_iter: int


def _orthogonalize(V: Tensor, basis: list[Tensor]) -> Tensor:
    """Each row of V minus its projections on the same row of every basis tensor."""
    for E in basis:
        V = V - (V * E).sum(1, keepdim=True) * E
    return V


def _normalize(V: Tensor) -> Tensor:
    return V / V.norm(dim=1, keepdim=True).clamp_min(torch.finfo(V.dtype).tiny)


def _power_iteration(op: HessianOperator, X: Tensor, basis: list[Tensor], tol: float,
                     max_iter: int, generator: torch.Generator) -> tuple[Tensor, ...]:
    """One eigenpair per model, orthogonal to ``basis``: (value, vector, iterations, residual,
    converged). Models that converged keep their value and vector while the others go on."""
    M = X.shape[0]
    V = torch.randn(X.shape, generator=generator, dtype=X.dtype, device="cpu").to(X.device)
    V = _normalize(_orthogonalize(V, basis))
    value = torch.zeros(M, dtype=X.dtype, device=X.device)
    residual = torch.full((M,), float("inf"), dtype=X.dtype, device=X.device)
    iterations = torch.zeros(M, dtype=torch.long, device=X.device)
    done = torch.zeros(M, dtype=torch.bool, device=X.device)
    for _ in range(max_iter):
        HV = _orthogonalize(op.hvp(X, V), basis)
        new = (V * HV).sum(1)
        error = (HV - new.unsqueeze(1) * V).norm(dim=1) / (new.abs() + _EPS)
        residual = torch.where(done, residual, error)
        active = ~done
        value = torch.where(active, new, value)
        iterations += active.long()
        V = torch.where(active.unsqueeze(1), _normalize(HV), V)
        done = done | (residual < tol)
        if bool(done.all()):
            break
    return value, V, iterations, residual, done


def top_eigenvalues(op: HessianOperator, X: Tensor, k: int = 1, tol: float = 1e-2,
                    max_iter: int = 100, generator: torch.Generator | None = None
                    ) -> Eigenvalues:
    """The k eigenvalues of largest magnitude of H(x_i) for every row of ``X [M, P]``."""
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    basis: list[Tensor] = []
    columns: list[tuple[Tensor, ...]] = []
    for _ in range(k):
        value, vector, its, res, conv = _power_iteration(op, X, basis, tol, max_iter,
                                                          generator)
        basis.append(vector)
        columns.append((value, its, res, conv))
    values, *rest = (torch.stack(c, dim=1) for c in zip(*columns, strict=True))
    order = values.abs().argsort(dim=1, descending=True, stable=True)  # [M, k]
    vectors = torch.stack(basis, dim=1)  # [M, k, P]
    vectors = vectors.gather(1, order.unsqueeze(2).expand_as(vectors))
    return Eigenvalues(values.gather(1, order), *(r.gather(1, order) for r in rest), tol=tol,
                       max_iter=max_iter, vectors=list(vectors.unbind(1)))


def hutchinson_trace(op: HessianOperator, X: Tensor, tol: float = 1e-2, max_iter: int = 100,
                     min_iter: int = 10, generator: torch.Generator | None = None) -> Trace:
    """tr H(x_i) for every row of ``X [M, P]`` by Hutchinson's estimator."""
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    M = X.shape[0]
    total = torch.zeros(M, dtype=torch.float64, device=X.device)
    squares = torch.zeros_like(total)
    mean = stderr = total
    n = 0
    converged = torch.zeros(M, dtype=torch.bool, device=X.device)
    for n in range(1, max_iter + 1):
        bits = torch.randint(0, 2, X.shape, generator=generator, device="cpu")
        V = (2 * bits - 1).to(dtype=X.dtype, device=X.device)
        sample = (V * op.hvp(X, V)).sum(1).double()
        total, squares = total + sample, squares + sample.square()
        mean = total / n
        if n > 1:
            var = (squares - n * mean.square()).clamp_min(0) / (n - 1)
            stderr = (var / n).sqrt()
            converged = stderr <= tol * mean.abs()
            if n >= min_iter and bool(converged.all()):
                break
    return Trace(mean.to(X.dtype), stderr.to(X.dtype), n, converged, tol, max_iter)
