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

**The order matters** (``topology.order``, gossipfl.schedules.sequential). The authors' code replaces
each client's row in place while it loops over the clients, so Ole becomes the sweep
z_i ← z_i + ω (Σ_j w_ij z_j − z_i) with ω = 1+β over the current rows: successive
over-relaxation (SOR) of the Gauss–Seidel kind, which for a symmetric W (I − W positive
semidefinite) contracts disagreement for every ω in (0, 2), i.e. every β < 1 (the
Householder–John theorem), where the synchronous (Jacobi) form needs every eigenvalue of W
above (β−1)/(1+β). For the sequential order the guard builds the sweep's round operator
(applied to the unit vectors) and takes its spectral radius without the consensus eigenvalue 1
(static graph), or runs the sweep over the graph's own rounds (time-varying); for Catalyst the
operator acts on (z, previous mixed models) and its radius includes the decaying
mean-momentum mode. :func:`growth_factors` gives both orders' factors, and the warning names
``topology.order: sequential`` when only that order is stable.
"""

from __future__ import annotations

import numpy as np

from gossipfl.topology.mixing import (
    _disagreement_eigenvalues,
    disagreement_radius,
    largest_safe_beta,
)
from gossipfl.topology.waves import sweep_waves

ORDERS = ("synchronous", "sequential")


def gradient_free_round(W: np.ndarray, z: np.ndarray, mixed: np.ndarray, beta: float,
                        kind: str, order: str = "synchronous",
                        waves: list[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One round of the extrapolated gossip without gradients on probes ``z [M, n]`` (the
    local results) and ``mixed [M, n]`` (last round's mixed models, read by Catalyst);
    returns both after the round. ``sequential``: wave by wave (``waves``: the schedule of W),
    which equals the client-by-client in-place loop."""
    if order == "synchronous":
        x = W @ z
        return ((1 + beta) * x - beta * z if kind == "ole" else x + beta * (x - mixed)), x
    z, mixed = z.copy(), mixed.copy()
    for rows in sweep_waves(W) if waves is None else waves:
        x = W[rows] @ z
        z[rows] = (1 + beta) * x - beta * z[rows] if kind == "ole" else \
            x + beta * (x - mixed[rows])
        mixed[rows] = x
    return z, mixed


def sequential_radius(W: np.ndarray, beta: float, kind: str) -> float:
    """Spectral radius of the sequential sweep's round operator (on z, or on (z, mixed) for
    Catalyst), without the consensus eigenvalue 1."""
    m = len(W)
    size = m if kind == "ole" else 2 * m
    basis = np.eye(size)
    z, mixed = basis[:m], basis[m:] if kind != "ole" else np.zeros((m, size))
    z, mixed = gradient_free_round(np.asarray(W, dtype=np.float64), z, mixed, beta, kind,
                                   "sequential")
    operator = z if kind == "ole" else np.vstack([z, mixed])
    ev = np.linalg.eigvals(operator)
    ev = np.delete(ev, int(np.argmin(np.abs(ev - 1.0))))
    return float(np.abs(ev).max()) if len(ev) else 0.0


def effective_radius(W: np.ndarray, beta: float, kind: str,
                     order: str = "synchronous") -> float:
    """Spectral radius of the gradient-free extrapolated recursion on disagreement."""
    if order == "sequential":
        return sequential_radius(W, beta, kind)
    if kind == "ole":
        return disagreement_radius(W, beta)
    mu = _disagreement_eigenvalues(W).astype(np.complex128)
    if len(mu) == 0:
        return 0.0
    disc = np.sqrt(((1 + beta) * mu) ** 2 - 4 * beta * mu)
    roots = np.concatenate([((1 + beta) * mu + disc) / 2, ((1 + beta) * mu - disc) / 2])
    return float(np.abs(roots).max())


def safe_beta(W: np.ndarray, kind: str, tol: float = 1e-4, order: str = "synchronous") -> float:
    """Largest β in [0, 1) with radius < 1 (closed form for synchronous Ole, else
    bisection)."""
    if kind == "ole" and order == "synchronous":
        return float(min(max(largest_safe_beta(W), 0.0), 1.0))
    return _largest_stable(lambda beta: effective_radius(W, beta, kind, order), tol)


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
                     probes: int = 8, seed: int = 0, order: str = "synchronous") -> float:
    """Per-round growth factor of disagreement under the recursion driven by ``matrices``
    (geometric mean over the second half of the rounds, several random probes)."""
    m = len(matrices[0])
    z = np.random.default_rng(seed).normal(size=(m, probes))
    mixed = z.copy()
    waves = [sweep_waves(W) for W in matrices] if order == "sequential" else [None] * len(matrices)
    logs = []
    for W, schedule_of_W in zip(matrices, waves, strict=True):
        z, mixed = gradient_free_round(W, z, mixed, beta, kind, order, schedule_of_W)
        center = z.mean(axis=0)
        spread = max(np.linalg.norm(z - center, axis=0).sum(), 1e-300)
        logs.append(np.log(spread))
        # drop the consensus part (a fixed point of both recursions: W is row-stochastic) and
        # renormalize; the log keeps the growth
        z, mixed = (z - center) / spread, (mixed - center) / spread
    half = len(logs) // 2
    return float(np.exp(np.mean(logs[half:])))


def growth_factors(topology, beta: float, kind: str, rounds: int = 60) -> dict[str, float]:
    """Growth factor of disagreement per round without gradients, for each order."""
    if topology.time_varying:
        matrices = [topology.matrix(t, "the extrapolation stability check") for t in range(rounds)]
        return {order: simulated_growth(matrices, beta, kind, order=order) for order in ORDERS}
    W = topology.matrix(0, "the extrapolation stability check")
    return {order: effective_radius(W, beta, kind, order) for order in ORDERS}


def _safe_beta(topology, kind: str, order: str, rounds: int) -> float:
    if topology.time_varying:
        matrices = [topology.matrix(t, "the extrapolation stability check") for t in range(rounds)]
        return _largest_stable(lambda b: simulated_growth(matrices, b, kind, order=order), 1e-3)
    return safe_beta(topology.matrix(0, "the extrapolation stability check"), kind, order=order)


def stability_warning(topology, beta: float, kind: str, order: str = "synchronous",
                      rounds: int = 60) -> str | None:
    """A warning sentence when (topology, β) makes the extrapolation diverge in the gossip
    ``order`` the run uses (``topology.order``), else None."""
    if not beta:
        return None
    factors = growth_factors(topology, beta, kind, rounds)
    if factors[order] < 1:
        return None
    limit = _safe_beta(topology, kind, order, rounds)
    other = "sequential" if order == "synchronous" else "synchronous"
    if factors[other] < 1 and order == "synchronous":
        advice = (f"with topology.order: sequential (the authors' in-place client loop) the "
                  f"same beta shrinks it by {factors[other]:.4f} per round")
    else:
        advice = f"in the {other} order the factor is {factors[other]:.4f}"
    return (f"algorithm.beta: {beta} makes the {kind} extrapolation diverge on topology "
            f"'{topology.name}' in the {order} order (disagreement between clients grows by a "
            f"factor {factors[order]:.4f} per round without gradients; beta must stay below "
            f"about {limit:.3f} here, and with local training lower values can diverge too); "
            f"{advice}.")


def stability_messages(topology, beta: float, kind: str,
                       order: str = "synchronous") -> list[str]:
    """:func:`stability_warning` as the list an :meth:`Algorithm.check` returns."""
    message = stability_warning(topology, beta, kind, order)
    return [message] if message else []
