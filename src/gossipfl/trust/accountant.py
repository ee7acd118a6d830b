"""The privacy spent, ε(δ) per client, by Google's ``dp-accounting`` RDP accountant.

Client i's private gradient evaluations are each a sampled Gaussian mechanism: noise
multiplier σ, sampling probability q_i = B_i / n_i (B_i the nominal batch size of
:mod:`gossipfl.trust.dpsgd`; q_i = 1 with full batches). After k_i evaluations its guarantee
is that of ``SelfComposed(PoissonSampledDpEvent(q_i, GaussianDpEvent(σ)), k_i)`` under
``dp_accounting.rdp.RdpAccountant`` (add-or-remove-one neighbours), converted to ε at δ.

gossipfl samples without replacement, by shuffling (fixed-size batches, each sample once per
epoch); the accountant treats every step as Poisson sampling with q = B/n, the usual
approximation (Opacus' too). It counts every gradient evaluation that touches the data (two
per step for SAM, one more for each fine-tuning step), and nothing else: the n_i, the loss
values in the logs and the evaluation metrics are taken as public.

The accountant's state is the evaluation counts k_i alone: ε is recomputed from them (and
they are what a checkpoint keeps). The RDP of k compositions is k times one's, so the RDP
curve of one step is computed once per distinct q and reused for every k (the library does
the same multiplication when it composes k steps).
"""

from __future__ import annotations

import logging
import math
from contextlib import contextmanager

import numpy as np


@contextmanager
def _quiet():
    """dp-accounting logs through absl a warning per RDP order where a series converges
    slowly (it leaves that order out, as it should): not the user's business."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class Accountant:
    """ε(δ) of each client from its evaluation count; ``sigma`` σ, ``delta`` δ, ``rates``
    ``[M]`` the sampling probabilities q_i."""

    def __init__(self, sigma: float, delta: float, rates: np.ndarray):
        from dp_accounting import rdp

        self.sigma, self.delta = float(sigma), float(delta)
        self.rates = np.asarray(rates, dtype=np.float64)
        self.orders = np.asarray(rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
        self._curves: dict[float, np.ndarray] = {}  # q -> RDP of one step, per order
        self._epsilons: dict[tuple[float, int], float] = {}

    def curve(self, q: float) -> np.ndarray:
        """The RDP of one step at sampling probability q, per order (the accountant's own
        computation: one ``PoissonSampledDpEvent`` composed once)."""
        if q not in self._curves:
            import dp_accounting
            from dp_accounting import rdp

            accountant = rdp.RdpAccountant(list(self.orders))
            with _quiet():
                accountant.compose(dp_accounting.PoissonSampledDpEvent(
                    q, dp_accounting.GaussianDpEvent(self.sigma)))
            # the RDP it composed (a private attribute; tests check ε against the public path)
            self._curves[q] = np.asarray(accountant._rdp, dtype=np.float64)
        return self._curves[q]

    def epsilon(self, q: float, steps: int) -> float:
        """ε(δ) after ``steps`` evaluations at sampling probability q (0 before any, ∞ with
        σ = 0)."""
        if steps == 0:
            return 0.0
        if self.sigma == 0:
            return math.inf
        key = (q, steps)
        if key not in self._epsilons:
            from dp_accounting import rdp

            with _quiet():
                eps, _ = rdp.rdp_privacy_accountant.compute_epsilon(
                    self.orders, steps * self.curve(q), self.delta)
            self._epsilons[key] = float(eps)
        return self._epsilons[key]

    def epsilons(self, steps: np.ndarray) -> np.ndarray:
        """``[M]`` ε(δ) of every client after ``steps[i]`` evaluations."""
        pairs = np.stack([self.rates, np.asarray(steps, dtype=np.float64)], axis=1)
        unique, inverse = np.unique(pairs, axis=0, return_inverse=True)
        values = np.array([self.epsilon(float(q), int(k)) for q, k in unique])
        return values[inverse.reshape(-1)]

    def columns(self, steps: np.ndarray) -> dict:
        """The metric columns: ``epsilon`` (the largest ε over the clients, the run's
        guarantee) and ``epsilon_mean``."""
        eps = self.epsilons(steps)
        return {"epsilon": float(eps.max()), "epsilon_mean": float(eps.mean())}


__all__ = ["Accountant"]
