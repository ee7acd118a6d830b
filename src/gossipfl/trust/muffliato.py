"""Muffliato's gossip and its pairwise network DP guarantee (Cyffers, Even, Bellet &
Massoulié, NeurIPS 2022, "Muffliato: Peer-to-Peer Privacy Amplification for Decentralized
Optimization and Averaging"), as functions of the mixing matrix W.

**The gossip.** Each client adds Gaussian noise to its value once, y^0 = x + η, then runs K
gossip steps: plain, y^{k+1} = W y^k; or Chebyshev-accelerated (the paper's Algorithm 1),

    y^1 = W y^0,    y^{k+1} = ω W y^k + (1 − ω) y^{k−1}   (k ≥ 1),
    ω = 2 (1 − √(λ_W (1 − λ_W/4))) / (1 − λ_W/2)²,

with λ_W the spectral gap of W, the second smallest eigenvalue of I − W (W symmetric). Both
are y^k = P_k(W) y^0 for the polynomials P_0 = I, P_1 = W, P_{k+1} = ω W P_k + (1 − ω) P_{k−1}
(ω = 1: P_k = W^k).

**The guarantee** (the paper's Theorem on Muffliato's pairwise network DP, in Rényi DP of
order α): node v sees, at every gossip step k = 0..K−1, the message y_w^k = (P_k y^0)_w of
each neighbour w ∈ N_v = {w ≠ v : W_vw ≠ 0}; each is a Gaussian mechanism on x_u with
sensitivity |(P_k)_wu| Δ and noise σ ‖(P_k)_w‖, and their composition leaks from u to v

    ε_{u→v} = α Δ² / (2σ²) · S_uv,     S_uv = Σ_{k=0}^{K−1} Σ_{w ∈ N_v} (P_k)_wu² / ‖(P_k)_w‖²,

composed over rounds by summing (each round draws fresh noise; a time-varying topology
contributes its own W_t). :func:`pairwise_sums` computes S for one W in O(K M³); the
:class:`Ledger` sums it over the rounds run, recomputed from the round count alone (nothing
to checkpoint). Matrices of at most :data:`MAX_CLIENTS` clients only.
"""

from __future__ import annotations

import math

import numpy as np

#: The largest M for which the M × M guarantee is computed.
MAX_CLIENTS = 1024


def spectral_gap(W: np.ndarray) -> float:
    """λ_W: the second smallest eigenvalue of I − W (W symmetric), as Algorithm 1 uses it."""
    eigenvalues = np.linalg.eigvalsh((W + W.T) / 2)  # ascending
    return float(1.0 - eigenvalues[-2])


def chebyshev_omega(gap: float) -> float:
    """ω = 2 (1 − √(λ (1 − λ/4))) / (1 − λ/2)² for the spectral gap λ (in [1, 2))."""
    return 2.0 * (1.0 - math.sqrt(gap * (1.0 - gap / 4.0))) / (1.0 - gap / 2.0) ** 2


def polynomials(W: np.ndarray, steps: int, omega: float = 1.0) -> list[np.ndarray]:
    """[P_0(W), ..., P_{steps−1}(W)]: the maps from y^0 to what is sent at each step."""
    out = [np.eye(len(W))]
    if steps > 1:
        out.append(np.array(W, dtype=np.float64))
    while len(out) < steps:
        out.append(omega * (W @ out[-1]) + (1.0 - omega) * out[-2])
    return out


def pairwise_sums(W: np.ndarray, steps: int, omega: float = 1.0) -> np.ndarray:
    """``[M, M]`` S with S[u, v] = Σ_k Σ_{w ∈ N_v} (P_k)_wu² / ‖(P_k)_w‖² (zero diagonal)."""
    W = np.asarray(W, dtype=np.float64)
    neighbours = (W != 0).astype(np.float64)
    np.fill_diagonal(neighbours, 0.0)
    total = np.zeros_like(W)
    for P in polynomials(W, steps, omega):
        rows = (P ** 2).sum(axis=1, keepdims=True)
        share = np.divide(P ** 2, rows, out=np.zeros_like(P), where=rows > 0)  # [w, u]
        total += (neighbours @ share).T  # [u, v] = Σ_w N[v, w] share[w, u]
    np.fill_diagonal(total, 0.0)
    return total


class Ledger:
    """ε_{u→v} after the rounds run, for ``matrix(t)`` round t's W; ``steps`` K,
    ``chebyshev`` whether ω is used, ``scale`` α Δ²/(2σ²) (∞ with σ = 0); ``time_varying``:
    whether W changes with t (else one S serves every round)."""

    def __init__(self, matrix, steps: int, chebyshev: bool, scale: float, time_varying: bool):
        self.matrix, self.steps, self.chebyshev = matrix, steps, chebyshev
        self.scale, self.time_varying = scale, time_varying
        self._rounds, self._total = 0, None  # S summed over rounds 0.._rounds−1

    def sums(self, t: int) -> np.ndarray:
        """S of round t."""
        W = np.asarray(self.matrix(t), dtype=np.float64)
        omega = chebyshev_omega(spectral_gap(W)) if self.chebyshev else 1.0
        return pairwise_sums(W, self.steps, omega)

    def total(self, rounds: int) -> np.ndarray:
        """Σ_{t < rounds} S_t."""
        if not self.time_varying:
            if self._total is None:
                self._total = self.sums(0)
            return rounds * self._total
        if rounds < self._rounds or self._total is None:
            self._rounds, self._total = 0, np.zeros_like(np.asarray(self.matrix(0), float))
        for t in range(self._rounds, rounds):
            self._total = self._total + self.sums(t)
        self._rounds = rounds
        return self._total

    def epsilons(self, rounds: int) -> np.ndarray:
        """``[M, M]`` ε_{u→v} (row u, column v; the diagonal is 0)."""
        total = self.total(rounds)
        if math.isinf(self.scale):
            return np.where(total > 0, math.inf, 0.0)
        return self.scale * total

    def columns(self, rounds: int) -> dict:
        """``pndp_max`` (the largest ε_{u→v} over pairs u ≠ v) and ``pndp_mean`` (their mean)."""
        eps = self.epsilons(rounds)
        m = len(eps)
        off = eps[~np.eye(m, dtype=bool)]
        return {"pndp_max": float(off.max()), "pndp_mean": float(off.mean())}


__all__ = ["MAX_CLIENTS", "Ledger", "chebyshev_omega", "pairwise_sums", "polynomials",
           "spectral_gap"]
