"""DP-SGD's gradient (Abadi et al., CCS 2016) for every client at once (``privacy:``).

Each gradient evaluation of client i on its minibatch ξ_i (mask m_ib) becomes

    g̃_i = ( Σ_b m_ib · clip_C(∇ℓ(y_i; ξ_ib)) + σ C z_i ) / B_i,
    clip_C(g) = g · min(1, C / ‖g‖₂),      z_i ~ N(0, I) on the gradient's coordinates,

with C = ``privacy.clip``, σ = ``privacy.noise_multiplier`` and B_i the client's *nominal*
batch size: ``min(train.batch_size, n_i)``, or n_i with ``train.batch_size: full``. A padded
(masked) sample counts as absent, and the sum is still divided by B_i, as Opacus divides by
the expected batch size: the last, short batch of an epoch is not scaled up, so B_i does not
depend on the data. The per-client loss returned beside g̃_i is the usual masked mean (it is
what the logs show, not part of the mechanism).

**Per-sample gradients**, batched over the clients: models whose per-client layers are all
Linear on per-sample vectors (MLPs, logistic and linear regression), under the stacked
oracle, get their per-sample norms without materializing the gradients and the clipped sum
from one weighted backward (:mod:`gossipfl.trust.ghost`). Every other model takes the
materialized path: the rows of the ``[S, P]`` stack are repeated once per sample
(``[S·B, P]``, each row a "client" with one sample) and the run's own oracle computes every
row's gradient in one call, in blocks of clients whose per-sample gradients fit
``budget``. No loop over clients or samples either way. Any oracle (stacked, vmap, loop)
runs the materialized path; models that mix the samples of a batch (BatchNorm) have no
per-sample gradient and are refused before training.

**Noise** comes from counter-based streams (:func:`gossipfl.common.rng.counter_normal`): the noise
of client i's k-th private gradient evaluation is a function of (seed, i, k) alone, and k is
the evaluation count the accountant keeps (:attr:`PrivateGradient.steps`, in the run's
privacy namespace, so in checkpoints), so a resumed run draws what the uninterrupted one drew, whatever the order,
the blocks or the other clients. With σ = 0 no noise is drawn: the step is per-sample
clipping alone, bit for bit. With C = ∞ (allowed only with σ = 0) nothing is clipped and
g̃_i = Σ_b ∇ℓ_b / B_i, the non-private minibatch gradient for a full batch (to float
rounding: the per-sample sum runs in another order).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gossipfl.common.rng import client_keys, counter_bits, counter_normal, vectorized_keys
from gossipfl.common.state import Namespace, privacy_namespace
from gossipfl.trust import ghost


class PrivateGradient:
    """The DP-SGD gradient of any rows (see the module docstring): ``clip`` C, ``sigma`` σ,
    ``batch_sizes`` ``[M]`` the nominal B_i, ``seed`` the run's seed, ``budget`` the bytes
    of per-sample gradients one block may hold. ``steps`` ``[M]`` int64 counts each client's
    private gradient evaluations (the accountant's state and the noise counter), kept in the
    run's privacy namespace ``state`` (:func:`gossipfl.common.state.privacy_namespace`; a fresh one
    when none is given)."""

    def __init__(self, clip: float, sigma: float, batch_sizes: Tensor, seed: int,
                 budget: int = 256 * 2**20, state: Namespace | None = None):
        self.clip, self.sigma = float(clip), float(sigma)
        self.batch_sizes = batch_sizes.clamp_min(1)  # an empty client never divides
        self.budget = budget
        m, device = len(batch_sizes), batch_sizes.device
        self.state = privacy_namespace() if state is None else state
        self.state["steps"] = torch.zeros(m, dtype=torch.int64, device=device)
        self._keys = client_keys(seed, torch.arange(m), "privacy", device=device,  # one each,
                                 vectorized=vectorized_keys(m))  # derived as the run's others
        self._ghost: bool | None = None  # False: always materialize (gossipfl.trust.ghost)

    @property
    def steps(self) -> Tensor:
        """``[M]`` each client's private gradient evaluations: the namespace's ``"steps"``."""
        return self.state["steps"]

    def gradient(self, oracle, y: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor,
                 clients: Tensor, wrt, columns: Tensor | None = None
                 ) -> tuple[Tensor, Tensor]:
        """Loss ``[S]`` (masked mean) and g̃ ``[S, P]`` of the rows ``y`` (clients
        ``clients``) on their batch; ``wrt``: the parameters differentiated (None: all),
        ``columns`` ``[P]`` bool: the coordinates that get noise (None: all). Counts one
        evaluation for every row with a sample."""
        S, B = mask.shape
        loss = torch.zeros(S, dtype=y.dtype, device=y.device)
        grad = torch.zeros(S, y.shape[1], dtype=y.dtype, device=y.device)
        fast = self._ghost is not False and ghost.supported(oracle)
        if fast:  # blocks of the oracle's activation budget
            step = oracle.block_size(S, tuple(inputs.shape[2:]), B, y)
        else:  # blocks whose per-sample gradients fit the budget
            step = max(1, self.budget // max(1, B * y.shape[1] * y.element_size() * 3))
        for a in range(0, S, step):
            b = min(a + step, S)
            part = ghost.clipped_sum(oracle, y[a:b], inputs[a:b], targets[a:b], mask[a:b],
                                     wrt, self.clip) if fast else None
            if part is None:
                part = self._clipped_sum(oracle, y[a:b], inputs[a:b], targets[a:b],
                                         mask[a:b], wrt)
            loss[a:b], grad[a:b] = part
        active = mask.any(dim=1)
        ids = clients.to(self.steps.device)
        if self.sigma:
            noise = self.noise(ids, y.shape[1], y.dtype)
            if columns is not None:  # a group's gradient: noise on its coordinates only
                noise.mul_(columns)
            if not bool(active.all()):  # a row without samples touches no data
                noise.mul_(active[:, None])
            grad.add_(noise, alpha=self.sigma * self.clip)
        steps = self.steps
        steps[ids[active]] += 1
        sizes = self.batch_sizes[ids].to(y.dtype)
        return loss, grad.div_(sizes[:, None])

    def noise(self, clients: Tensor, width: int, dtype: torch.dtype) -> Tensor:
        """``[S, width]`` N(0, I) of each client's next evaluation (its count ``steps``)."""
        keys = counter_bits(self._keys[clients], self.steps[clients], 63)
        return counter_normal(keys, width, dtype)

    def _clipped_sum(self, oracle, y: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor,
                     wrt) -> tuple[Tensor, Tensor]:
        """Masked mean loss ``[s]`` and Σ_b m_b clip_C(∇ℓ_b) ``[s, P]`` of a block of rows."""
        s, B = mask.shape
        rows = y.repeat_interleave(B, dim=0)  # [s·B, P]: row (k, b) is y_k
        flat_inputs = inputs.reshape(s * B, 1, *inputs.shape[2:])
        flat_targets = targets.reshape(s * B, 1, *targets.shape[2:])
        losses, grads = oracle.loss_and_grad(rows, flat_inputs, flat_targets,
                                             mask.reshape(s * B, 1), wrt)
        weights = mask.reshape(s * B).to(y.dtype)
        if self.clip != float("inf"):
            factor = (self.clip / grads.norm(dim=1)).clamp(max=1.0)  # ‖g‖ = 0: inf → 1
            weights = weights * factor
        total = torch.bmm(weights.reshape(s, 1, B), grads.reshape(s, B, -1)).squeeze(1)
        count = mask.sum(dim=1).clamp_min(1).to(y.dtype)
        loss = (losses.reshape(s, B) * mask).sum(dim=1) / count
        return loss, total


__all__ = ["PrivateGradient"]
