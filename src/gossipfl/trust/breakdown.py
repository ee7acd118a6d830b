"""The graph quantities the breakdown results of robust gossip are stated in, for a mixing
matrix W and a Byzantine set B (H the honest clients).

Gaucher, Dieuleveut & Hendrikx (ICML 2025, "Unified Breakdown Analysis for Byzantine Robust
Gossip") state their breakdown point over the class of graphs Γ_{μ_min, b}: the honest
subgraph's Laplacian has algebraic connectivity at least μ_min, and every honest client's
Byzantine neighbours weigh at most b (b counts them with unit weights). He, Karimireddy &
Jaggi (2022) state ClippedGossip's guarantee with the same largest Byzantine weight, their
δ_max. This module computes, in float64:

- the honest Laplacian L_H = diag(A 1) − A, A the off-diagonal part of
  (W_HH + W_HHᵀ)/2 (W_HH itself for a symmetric W; the same matrix the ``spectral`` attack's
  Fiedler vector comes from);
- μ_min = λ₂(L_H), its second smallest eigenvalue (0 when H is disconnected or a single
  client);
- b_i = Σ_{j ∈ B, j ≠ i} w_ij for each honest i, and b = max_{i∈H} b_i (with the count of
  Byzantine neighbours beside it);
- the ratio b / μ_min, which does not change when the gossip step scales W − I (a W of the
  form I − η L gives the unit-weight ratio whatever η).

What is **not** here: the theorems' constants (at which ratio each rule provably breaks).
Only the paper's abstract and the authors' code could be read for this work, so gossipfl
reports the quantities and their ratio in a Byzantine run's summary (``breakdown``), not a
verdict on whether a run is past a proved breakdown point.
"""

from __future__ import annotations

import numpy as np


def honest_laplacian(W: np.ndarray, honest: np.ndarray) -> np.ndarray:
    """``[|H|, |H|]`` L_H of the module docstring (float64), H in ascending id order."""
    ids = np.flatnonzero(honest)
    A = np.asarray(W, dtype=np.float64)[np.ix_(ids, ids)]
    A = (A + A.T) / 2
    np.fill_diagonal(A, 0.0)
    return np.diag(A.sum(axis=1)) - A


def algebraic_connectivity(W: np.ndarray, honest: np.ndarray) -> float:
    """μ_min = λ₂(L_H); 0 with fewer than two honest clients."""
    if int(np.sum(honest)) < 2:
        return 0.0
    values = np.linalg.eigvalsh(honest_laplacian(W, honest))
    return max(float(values[1]), 0.0)


def byzantine_weights(W: np.ndarray, honest: np.ndarray) -> np.ndarray:
    """``[M]`` b_i = Σ_{j∈B, j≠i} w_ij on the honest rows (0 on the Byzantine ones)."""
    honest = np.asarray(honest, dtype=bool)
    out = (np.asarray(W, dtype=np.float64) * ~honest[None, :]).sum(axis=1)  # j ≠ i: i ∈ H
    return np.where(honest, out, 0.0)


def breakdown_quantities(W: np.ndarray, byzantine: np.ndarray) -> dict:
    """For a Byzantine run's summary: ``mu_min``, ``b_max`` (the largest honest Byzantine
    weight), ``byzantine_neighbours_max`` (the largest count) and ``ratio`` = b / μ_min
    (None where μ_min = 0: the honest graph is cut)."""
    m = len(W)
    honest = np.ones(m, dtype=bool)
    honest[np.asarray(byzantine, dtype=np.int64)] = False
    mu = algebraic_connectivity(W, honest)
    b = byzantine_weights(W, honest)
    pattern = (np.asarray(W) != 0) & ~honest[None, :] & honest[:, None]
    np.fill_diagonal(pattern, False)
    b_max = float(b.max()) if m else 0.0
    return {"mu_min": mu, "b_max": b_max,
            "byzantine_neighbours_max": int(pattern.sum(axis=1).max()) if m else 0,
            "ratio": b_max / mu if mu > 0 else None}


__all__ = ["algebraic_connectivity", "breakdown_quantities", "byzantine_weights",
           "honest_laplacian"]
