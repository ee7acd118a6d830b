"""Loss landscapes: 1-D interpolation between models and 2-D surfaces along random directions.

Every point of a line or a grid is a model, so a landscape is a parameter stack: the points
are evaluated together through the run's oracle (:func:`gossipfl.engine.evaluate_stack`, all
models of a block on the same samples), in blocks that keep the stack within a memory budget.

Directions are filter-normalized as in Li, Xu, Taylor, Studer, Goldstein 2018, "Visualizing
the Loss Landscape of Neural Nets" (NeurIPS), §4: a Gaussian direction d is rescaled filter
by filter, d_f ← d_f · ‖θ_f‖ / ‖d_f‖, where a *filter* is one slice along the first dimension
of a weight tensor of two or more dimensions (a convolution's output filter; a linear layer's
row, i.e. one neuron's incoming weights). Parameters of one dimension (biases, GroupNorm and
LayerNorm scales and shifts) get direction 0, as the paper does for biases and BatchNorm
parameters ("we do not perturb" them), so they stay at the model's values on the whole grid.
One Gaussian draw is shared by all M models and rescaled to each model's own filters, so the
surfaces of different models (or runs with one seed) use the same random directions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gossipfl.engine import Oracle, ParamLayout, evaluate_stack

#: ``stack [K, P] → (accuracy [K], loss [K])`` on a fixed set of samples.
Evaluator = Callable[[Tensor], tuple[Tensor, Tensor]]

BUDGET = 256 * 2**20  # bytes of landscape points built at once


@dataclass
class Landscape:
    """``loss`` and ``accuracy`` ``[M, *grid]`` at the coordinates ``axes`` (one array per
    grid dimension): a line ``[M, A]`` or a surface ``[M, A, B]``."""

    axes: tuple[np.ndarray, ...]
    loss: np.ndarray
    accuracy: np.ndarray


def make_evaluator(oracle: Oracle, inputs: Tensor, targets: Tensor,
                   batch_size: int = 1000) -> Evaluator:
    """Accuracy and mean loss of every model of a stack on ``inputs, targets``."""
    def evaluate(stack: Tensor) -> tuple[Tensor, Tensor]:
        return evaluate_stack(oracle, stack, inputs, targets, batch_size=batch_size)
    return evaluate


def filter_normalized(layout: ParamLayout, X: Tensor, noise: Tensor) -> Tensor:
    """``[M, P]``: the raw direction ``noise [P]`` filter-normalized to each row of X."""
    D = torch.zeros_like(X)
    noise = noise.to(device=X.device, dtype=X.dtype)
    for shape, offset, numel in zip(layout.shapes, layout.offsets, layout.numels, strict=True):
        if len(shape) < 2:
            continue  # biases and norm parameters: not perturbed
        cols = slice(offset, offset + numel)
        theta = X[:, cols].reshape(X.shape[0], shape[0], -1)
        d = noise[cols].reshape(shape[0], -1)
        scale = theta.norm(dim=2, keepdim=True) / d.norm(dim=1, keepdim=True).clamp_min(1e-12)
        D[:, cols] = (d * scale).reshape(X.shape[0], -1)
    return D


def random_directions(layout: ParamLayout, X: Tensor, count: int,
                      generator: torch.Generator) -> list[Tensor]:
    """``count`` filter-normalized Gaussian directions ``[M, P]`` for the models X."""
    return [filter_normalized(layout, X, torch.randn(layout.P, generator=generator,
                                                     dtype=torch.float64))
            for _ in range(count)]


def _evaluate_points(evaluate: Evaluator, point: Callable[[Tensor], Tensor], total: int,
                     bytes_per_point: int, budget_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Accuracy and loss ``[total]`` of the models ``point(indices) [K, P]``, built and
    evaluated in blocks of at most ``budget_bytes``."""
    block = max(1, budget_bytes // max(bytes_per_point, 1))
    accs, losses = [], []
    for a in range(0, total, block):
        acc, loss = evaluate(point(torch.arange(a, min(a + block, total))))
        accs.append(acc.cpu().numpy())
        losses.append(loss.cpu().numpy())
    return np.concatenate(accs), np.concatenate(losses)


def interpolation(evaluate: Evaluator, start: Tensor, end: Tensor, alphas: np.ndarray,
                  budget_bytes: int = BUDGET) -> Landscape:
    """Loss along (1 − α)·start_i + α·end_i for every row i of ``start, end [M, P]``:
    a line ``[M, len(alphas)]``."""
    M, A = start.shape[0], len(alphas)
    alpha = torch.as_tensor(alphas, dtype=start.dtype, device=start.device)
    delta = end - start

    def point(idx: Tensor) -> Tensor:
        m, j = idx // A, idx % A
        return start[m] + alpha[j].unsqueeze(1) * delta[m]

    acc, loss = _evaluate_points(evaluate, point, M * A, _bytes(start), budget_bytes)
    return Landscape((np.asarray(alphas, dtype=float),), loss.reshape(M, A),
                     acc.reshape(M, A))


def surface(evaluate: Evaluator, X: Tensor, d1: Tensor, d2: Tensor, coords: np.ndarray,
            budget_bytes: int = BUDGET) -> Landscape:
    """Loss at x_i + a·d1_i + b·d2_i for a, b in ``coords``: a grid ``[M, len, len]`` whose
    first grid index is a."""
    M, A = X.shape[0], len(coords)
    c = torch.as_tensor(coords, dtype=X.dtype, device=X.device)

    def point(idx: Tensor) -> Tensor:
        m, r = idx // (A * A), idx % (A * A)
        return X[m] + c[r // A].unsqueeze(1) * d1[m] + c[r % A].unsqueeze(1) * d2[m]

    acc, loss = _evaluate_points(evaluate, point, M * A * A, _bytes(X), budget_bytes)
    return Landscape((np.asarray(coords, dtype=float),) * 2, loss.reshape(M, A, A),
                     acc.reshape(M, A, A))


def _bytes(X: Tensor) -> int:
    """Bytes of one model of the stack X (the point, plus the temporaries that build it)."""
    return 3 * X.shape[1] * X.element_size()
