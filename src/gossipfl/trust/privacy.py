"""The ``privacy:`` section: its checks, the combinations refused before training, and what a
private run holds (:class:`Privacy`: the DP-SGD mechanism and its accountant).

What it means is in :mod:`gossipfl.trust.dpsgd` (the gradient) and
:mod:`gossipfl.trust.accountant` (ε). Refused, in one sentence each: several processes
(``engine.backend: distributed``), algorithms that read their clients' data other than
through gradients (their label counts: ``fedrod``) and models with BatchNorm (no per-sample
gradient), by :mod:`gossipfl.assembly.compat`; here δ ≥ 1/n for the smallest client, and
``train.local_steps`` with a batch larger than a client's data (its minibatches would repeat
samples, q = B/n > 1).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gossipfl.common.state import Namespace
from gossipfl.errors import GossipflError
from gossipfl.trust.accountant import Accountant
from gossipfl.trust.dpsgd import PrivateGradient
from gossipfl.validation import check_all


def check_privacy(section: Any) -> None:
    """The section's own values, by the rules its dataclass declares
    (:class:`gossipfl.config.PrivacyConfig`; NaN and ∞ are refused when the config is
    read)."""
    rules = type(section).rules
    check_all("privacy", {key: getattr(section, key) for key in rules}, rules)


class Privacy:
    """A private run's mechanism (``gradient``, which every client's gradient goes through)
    and accountant; its state is the evaluation counts (``gradient.steps``, in the run's
    privacy namespace)."""

    def __init__(self, gradient: PrivateGradient, accountant: Accountant):
        self.gradient = gradient
        self.accountant = accountant

    def columns(self) -> dict:
        """``epsilon`` (max over the clients) and ``epsilon_mean`` now."""
        return self.accountant.columns(self.gradient.steps.cpu().numpy())


def nominal_batch_sizes(sizes: np.ndarray, batch_size: int | None) -> np.ndarray:
    """B_i: n_i with full batches (``batch_size`` None), else min(B, n_i)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    return sizes.copy() if batch_size is None else np.minimum(sizes, batch_size)


def build_privacy(config: Any, model: torch.nn.Module, sizes: np.ndarray,
                  device: torch.device,
                  state: Namespace | None = None) -> Privacy | None:
    """The run's :class:`Privacy` (None without a ``privacy`` section), after the refusals of
    the module docstring. ``sizes`` ``[M]``: the clients' sample counts n_i; ``state``: the
    run's privacy namespace, where the counts live."""
    section = config.privacy
    if section is None:
        return None
    sizes = np.asarray(sizes, dtype=np.int64)
    held = np.flatnonzero(sizes > 0)
    smallest = int(held[np.argmin(sizes[held])])
    if section.delta >= 1 / sizes[smallest]:
        raise GossipflError(f"privacy.delta: {section.delta:g} must be below 1/n = "
                            f"{1 / sizes[smallest]:.3g}, n = {sizes[smallest]} the sample count "
                            f"of the smallest client (client {smallest}).")
    train = config.train
    batch = None if train.full_batch else int(train.batch_size)
    if batch is not None and train.local_steps and batch > sizes[smallest]:
        raise GossipflError(f"train.batch_size: {batch} is larger than client {smallest}'s "
                            f"{sizes[smallest]} samples, so with train.local_steps its "
                            f"minibatches repeat samples (q = B/n > 1); with privacy use "
                            f"train.batch_size ≤ {sizes[smallest]} or train.local_epochs.")
    nominal = nominal_batch_sizes(sizes, batch)
    rates = np.where(sizes > 0, nominal / np.maximum(sizes, 1), 1.0)
    gradient = PrivateGradient(section.clip, section.noise_multiplier,
                               torch.as_tensor(nominal, dtype=torch.float32, device=device),
                               config.seed, state=state)
    return Privacy(gradient, Accountant(section.noise_multiplier, section.delta, rates))


__all__ = ["Privacy", "build_privacy", "check_privacy", "nominal_batch_sizes"]
