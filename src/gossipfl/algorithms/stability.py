"""Stability guard for extrapolated gossip (Ole in OledFL, Nesterov in DFedCata).

Without gradients, the extrapolations are linear recursions on the local results z^t:

- Ole (OledFL; DFedCata ``own_local``): z^{t+1} = ((1+β)W − βI) z^t, so an eigenvalue μ of
  W on the disagreement subspace becomes (1+β)μ − β;
- Catalyst (DFedCata, paper's Algorithm 1): z^{t+1} = (1+β)W z^t − βW z^{t−1}, so μ becomes
  the roots r of r² − (1+β)μ r + βμ = 0.

If the largest such |·| is ≥ 1, disagreement between clients is not damped: training blows up
(e.g. a fixed ring of 100 with 1/3 weights under Ole for β ≥ 0.5). :func:`stability_warning`
computes it for the chosen topology and β before training (for a time-varying graph, over its
first few rounds' matrices) and returns a message with the largest safe β.
"""

from __future__ import annotations

import numpy as np

from gossipfl.topology.mixing import (
    _disagreement_eigenvalues,
    disagreement_radius,
    largest_safe_beta,
)

KINDS = ("ole", "catalyst")


def effective_radius(W: np.ndarray, beta: float, kind: str) -> float:
    """Spectral radius of the gradient-free extrapolated recursion on disagreement."""
    if kind == "ole":
        return disagreement_radius(W, beta)
    mu = _disagreement_eigenvalues(W).astype(np.complex128)
    if len(mu) == 0:
        return 0.0
    disc = np.sqrt(((1 + beta) * mu) ** 2 - 4 * beta * mu)
    roots = np.concatenate([((1 + beta) * mu + disc) / 2, ((1 + beta) * mu - disc) / 2])
    return float(np.abs(roots).max())


def safe_beta(W: np.ndarray, kind: str, tol: float = 1e-4) -> float:
    """Largest β in [0, 1) with radius < 1 (closed form for Ole, bisection for Catalyst)."""
    if kind == "ole":
        return float(min(max(largest_safe_beta(W), 0.0), 1.0))
    if effective_radius(W, 0.0, kind) >= 1:
        return 0.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if effective_radius(W, mid, kind) < 1 else (lo, mid)
    return lo


def stability_warning(topology, beta: float, kind: str, rounds: int = 5) -> str | None:
    """A warning sentence when (topology, β) makes the extrapolation diverge, else None."""
    if not beta:
        return None
    count = rounds if topology.time_varying else 1
    matrices = [topology.matrix(t) for t in range(count)]
    radius = max(effective_radius(W, beta, kind) for W in matrices)
    if radius < 1:
        return None
    limit = min(safe_beta(W, kind) for W in matrices)
    return (f"algorithm.beta: {beta} makes the {kind} extrapolation diverge on topology "
            f"'{topology.name}' (spectral radius {radius:.4f} >= 1 on the disagreement "
            f"subspace); the largest safe beta here is about {limit:.3f}.")
