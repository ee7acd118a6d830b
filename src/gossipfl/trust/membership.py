"""An empirical privacy measure beside the accountant: the loss-threshold membership-inference
attack (Yeom et al., CSF 2018) on each client's model (``eval.membership: N``).

The attacker guesses "member" when a sample's loss under client i's model is below a
threshold; over all thresholds its success is the AUC of the scores −ℓ(x_i; z) separating
client i's members (N of its training samples, drawn once) from non-members (N held-out test
samples, the same for every client):

    AUC_i = (1 / |A| |B|) Σ_{a ∈ A} Σ_{b ∈ B} ( [ℓ_a < ℓ_b] + ½ [ℓ_a = ℓ_b] )

(the Mann–Whitney statistic: 0.5 is chance, 1 a model that gives every member a lower loss
than every non-member). The metric ``mia_auc`` is its mean over the evaluated clients (the
``eval.local_clients`` sample when there is one), computed for all of them at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from gossipfl.engine.oracle import per_sample_loss
from gossipfl.rng import numpy_generator

PAIRS = 1 << 24  # member × non-member comparisons per block of clients


def membership_samples(parts: Sequence[np.ndarray], test_size: int, size: int, seed: int
                       ) -> tuple[Tensor, Tensor, Tensor]:
    """Members ``[M, N]`` (train indices, padded) and their mask: up to ``size`` of each
    client's samples drawn without replacement from (seed, "membership", client); and the
    non-members: up to ``size`` test indices from (seed, "membership", "test")."""
    width = max(1, min(size, max((len(p) for p in parts), default=1)))
    members = np.zeros((len(parts), width), dtype=np.int64)
    mask = np.zeros((len(parts), width), dtype=bool)
    for i, part in enumerate(parts):  # once per run, before training
        take = min(size, len(part))
        if take:
            pick = numpy_generator(seed, "membership", i).choice(len(part), take, replace=False)
            members[i, :take], mask[i, :take] = np.asarray(part)[np.sort(pick)], True
    test = numpy_generator(seed, "membership", "test").choice(
        test_size, min(size, test_size), replace=False)
    return torch.from_numpy(members), torch.from_numpy(mask), torch.from_numpy(np.sort(test))


def auc(member_loss: Tensor, mask: Tensor, other_loss: Tensor) -> Tensor:
    """``[S]`` AUC_i of the module docstring from the members' losses ``[S, A]`` (``mask``
    marks the real ones) and the non-members' ``[S, B]``."""
    S, A = member_loss.shape
    B = other_loss.shape[1]
    out = torch.empty(S, dtype=torch.float64, device=member_loss.device)
    step = max(1, PAIRS // max(1, A * B))
    for a in range(0, S, step):
        m, o = member_loss[a:a + step, :, None], other_loss[a:a + step, None, :]
        wins = (m < o).double() + 0.5 * (m == o).double()  # [s, A, B]
        kept = mask[a:a + step].double()
        out[a:a + step] = (wins.sum(2) * kept).sum(1) / (kept.sum(1).clamp_min(1) * B)
    return out


def membership_auc(oracle, X: Tensor, train_x: Tensor, train_y: Tensor, members: Tensor,
                   mask: Tensor, test_x: Tensor, test_y: Tensor, nonmembers: Tensor
                   ) -> Tensor:
    """``[S]`` each model's AUC: model i (row i of X) on its members ``members[i]`` (global
    train indices, ``mask[i]`` the real ones) and on the shared non-members."""
    device = X.device
    idx = members.to(train_x.device)
    own = oracle.predict(X, train_x[idx].to(device))
    member_loss = per_sample_loss(own, train_y[idx].to(device), oracle.loss, sample_dims=2)
    pick = nonmembers.to(test_x.device)
    shared = oracle.predict(X, test_x[pick].to(device), shared=True)
    targets = test_y[pick].to(device).expand(X.shape[0], -1)
    other_loss = per_sample_loss(shared, targets, oracle.loss, sample_dims=2)
    return auc(member_loss, mask.to(device), other_loss)


__all__ = ["auc", "membership_auc", "membership_samples"]
