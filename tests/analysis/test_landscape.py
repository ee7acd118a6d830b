"""Loss landscapes: filter normalization, interpolation and surfaces."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipfl.analysis import filter_normalized, interpolation, make_evaluator, surface
from gossipfl.analysis.landscape import random_directions
from gossipfl.engine import ParamLayout, make_oracle
from gossipfl.engine.hvp import HessianOperator
from gossipfl.models import build_model


def cnn_stack(M: int = 3):
    torch.manual_seed(0)
    model = build_model("cnn", (1, 16, 16), 4)
    layout = ParamLayout.from_module(model)
    return model, layout, torch.randn(M, layout.P)


def problem(M: int = 3):
    """An MLP, M models, 30 samples and an evaluator through the stacked oracle."""
    torch.manual_seed(1)
    model = build_model("mlp", (6,), 3, hidden=[8])
    layout = ParamLayout.from_module(model)
    X = torch.randn(M, layout.P) * 0.5
    inputs, targets = torch.randn(30, 6), torch.randint(0, 3, (30,))
    evaluate = make_evaluator(make_oracle("auto", model), inputs, targets, batch_size=7)
    return model, layout, X, inputs, targets, evaluate


def test_filter_normalization_matches_every_filter_norm():
    _, layout, X = cnn_stack()
    noise = torch.randn(layout.P, dtype=torch.float64)
    D = filter_normalized(layout, X, noise)
    theta, d = layout.views(X), layout.views(D)
    checked = 0
    for name, shape, offset, numel in zip(layout.names, layout.shapes, layout.offsets,
                                          layout.numels, strict=True):
        if len(shape) < 2:
            assert torch.count_nonzero(d[name]) == 0, name  # biases and norms: not perturbed
            continue
        model_norms = theta[name].flatten(2).norm(dim=2)  # [M, filters]
        torch.testing.assert_close(d[name].flatten(2).norm(dim=2), model_norms)
        direction = noise[offset:offset + numel]
        cosine = torch.nn.functional.cosine_similarity(  # each filter keeps its direction
            d[name].flatten(2).double(), direction.view(shape[0], -1).expand_as(
                d[name].flatten(2)), dim=2)
        torch.testing.assert_close(cosine, torch.ones_like(cosine))
        checked += 1
    assert checked >= 3  # conv filters and linear rows were covered


@pytest.mark.slow
def test_random_directions_are_deterministic():
    _, layout, X = cnn_stack(M=2)
    a = random_directions(layout, X, 2, torch.Generator().manual_seed(3))
    b = random_directions(layout, X, 2, torch.Generator().manual_seed(3))
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))
    assert not torch.equal(a[0], a[1])


def test_interpolation_ends_are_the_models_losses():
    model, _, X, inputs, targets, evaluate = problem()
    start, end = X[:1].expand(2, -1), X[1:]
    alphas = np.linspace(-0.5, 1.5, 5)  # contains 0 and 1
    line = interpolation(evaluate, start, end, alphas, budget_bytes=1)  # one point per block
    loss = HessianOperator(model, inputs, targets).loss(X.double()).numpy()
    np.testing.assert_allclose(line.loss[:, 1], loss[0], rtol=1e-5)
    np.testing.assert_allclose(line.loss[:, 3], loss[1:], rtol=1e-5)
    np.testing.assert_allclose(line.accuracy[:, 3], evaluate(end)[0].numpy())
    assert line.loss.shape == line.accuracy.shape == (2, 5)


def test_surface_center_is_the_model_loss_and_grid_is_laid_out():
    _, layout, X, _, _, evaluate = problem(M=2)
    d1, d2 = random_directions(layout, X, 2, torch.Generator().manual_seed(0))
    coords = np.linspace(-1, 1, 5)
    grid = surface(evaluate, X, d1, d2, coords)
    assert grid.loss.shape == (2, 5, 5)
    np.testing.assert_allclose(grid.loss[:, 2, 2], evaluate(X)[1].numpy(), rtol=1e-6)
    # grid[m, i, j] is at x + coords[i]·d1 + coords[j]·d2
    corner = X + coords[0] * d1 + coords[4] * d2
    np.testing.assert_allclose(grid.loss[:, 0, 4], evaluate(corner)[1].numpy(), rtol=1e-6)
    blocked = surface(evaluate, X, d1, d2, coords, budget_bytes=1)
    np.testing.assert_allclose(blocked.loss, grid.loss, rtol=1e-6)
