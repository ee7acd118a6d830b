"""Stability guard for extrapolated gossip (Ole in OledFL, Nesterov in DFedCata).

Without gradients, the extrapolations are linear recursions on the local results z^t:

- Ole (OledFL; DFedCata ``own_local``): z^{t+1} = ((1+β)W − βI) z^t, so an eigenvalue μ of
  W on the disagreement subspace becomes (1+β)μ − β;
- Catalyst (DFedCata, paper's Algorithm 1): z^{t+1} = (1+β)W z^t − βW z^{t−1}, so μ becomes
  the roots r of r² − (1+β)μ r + βμ = 0.

If the largest such |·| is ≥ 1, disagreement between clients is not damped: training blows up
(e.g. a fixed ring of 100 with 1/3 weights under Ole for β ≥ 0.5). :func:`stability_warning`
computes it for the chosen topology and β before training and returns a message with the
largest β the recursion tolerates: a necessary condition only, since local training can
destabilize smaller β (docs/results/, OledFL at β = 0.9 on the random graph). For a time-varying graph no single W's spectrum decides (a product of random
matrices contracts better than any one of them suggests), so the growth factor per round is
measured instead by running the gradient-free recursion over the graph's own first rounds.
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
    return _largest_stable(lambda beta: effective_radius(W, beta, kind), tol)


def _largest_stable(growth, tol: float) -> float:
    """Bisection for the largest β in [0, 1) with ``growth(β) < 1`` (0 if none)."""
    if growth(0.0) >= 1:
        return 0.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if growth(mid) < 1 else (lo, mid)
    return lo


def simulated_growth(matrices: list[np.ndarray], beta: float, kind: str,
                     probes: int = 8, seed: int = 0) -> float:
    """Per-round growth factor of disagreement under the recursion driven by ``matrices``
    (geometric mean over the second half of the rounds, several random probes)."""
    m = len(matrices[0])
    z = np.random.default_rng(seed).normal(size=(m, probes))
    x_prev = z.copy()
    logs = []
    for W in matrices:
        x = W @ z
        z = (1 + beta) * x - beta * z if kind == "ole" else x + beta * (x - x_prev)
        x_prev = x
        spread = np.linalg.norm(z - z.mean(axis=0), axis=0).sum()
        logs.append(np.log(max(spread, 1e-300)))
        z = z / max(spread, 1e-300)  # renormalize; the log keeps the growth
        x_prev = x_prev / max(spread, 1e-300)
    half = len(logs) // 2
    return float(np.exp(np.mean(logs[half:])))


def _time_varying_safe_beta(matrices: list[np.ndarray], kind: str, tol: float = 1e-3) -> float:
    return _largest_stable(lambda beta: simulated_growth(matrices, beta, kind), tol)


def stability_warning(topology, beta: float, kind: str, rounds: int = 60) -> str | None:
    """A warning sentence when (topology, β) makes the extrapolation diverge, else None."""
    if not beta:
        return None
    if topology.time_varying:
        matrices = [topology.matrix(t) for t in range(rounds)]
        radius = simulated_growth(matrices, beta, kind)
        if radius < 1:
            return None
        limit = _time_varying_safe_beta(matrices, kind)
    else:
        W = topology.matrix(0)
        radius = effective_radius(W, beta, kind)
        if radius < 1:
            return None
        limit = safe_beta(W, kind)
    return (f"algorithm.beta: {beta} makes the {kind} extrapolation diverge on topology "
            f"'{topology.name}' (disagreement between clients grows by a factor {radius:.4f} "
            f"per round without gradients); beta must stay below about {limit:.3f} here, and "
            f"with local training lower values can diverge too.")


def stability_messages(topology, beta: float, kind: str) -> list[str]:
    """:func:`stability_warning` as the list an :meth:`Algorithm.check` returns."""
    message = stability_warning(topology, beta, kind)
    return [message] if message else []
