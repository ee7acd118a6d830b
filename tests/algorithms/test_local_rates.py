"""The local optimizer's learning rate as a tensor (gossipfl.algorithms.local): a 0-dim η, as a
phase replayed from a CUDA graph takes it, and a column of one η per row, as the runs of a
packed study take it, move the rows as the number η does, bit for bit."""

from __future__ import annotations

import pytest
import torch

from gossipfl.algorithms.base import Work
from gossipfl.algorithms.local import LocalOptimizer, descend
from gossipfl.engine import ParamLayout
from gossipfl.engine.groups import ParamGroups
from gossipfl.models import build_model


@pytest.mark.parametrize("n", [7, 1000, 100_003])
@pytest.mark.parametrize("lr", [0.05, 0.0449, 0.123456])
def test_a_tensor_rate_descends_as_the_number_does(n, lr):
    """y − η d: ``addcmul_(d, η, value=-1)`` is the fused multiply-add of ``add_(d, alpha=-η)``
    on the CPU, in the vectorized body and the scalar tail alike; y − (η·d), rounded twice,
    is not (the check can fail)."""
    gen = torch.Generator().manual_seed(n)
    y, d = torch.randn(n, generator=gen), torch.randn(n, generator=gen) * 1e-3
    want = y.clone().add_(d, alpha=-lr)
    for rate in (torch.tensor(lr), torch.full((n,), lr)):
        got = y.clone()
        descend(got, d, rate)
        assert torch.equal(got, want)
    if n > 1000:
        assert not torch.equal(y - d * torch.tensor(lr), want)


def groups_of_a_model():
    model = build_model("mlp", (1, 4, 4), 3, hidden=[5])
    layout = ParamLayout.from_module(model)
    return layout, ParamGroups.build(layout, ["head.*"])


@pytest.mark.parametrize("group", ["all", "personal"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_one_rate_per_row_steps_each_row_as_its_own_rate_does(group, momentum):
    """Rows 0-2 at η = 0.05, rows 3-5 at 0.1, two steps: each block as a LocalOptimizer of
    its own number moves it (heavy ball too; the whole model, and the personal columns)."""
    layout, groups = groups_of_a_model()
    gen = torch.Generator().manual_seed(1)
    Y = torch.randn(6, layout.P, generator=gen)
    D = [torch.randn(6, layout.P, generator=gen) for _ in range(2)]
    rates = torch.tensor([[0.05]] * 3 + [[0.1]] * 3)
    joint = LocalOptimizer(groups[group], rates, momentum, 6, Y)
    got = Y.clone()
    for d in D:
        joint.step(Work(got), d)
    for rows, lr in ((slice(0, 3), 0.05), (slice(3, 6), 0.1)):
        alone = LocalOptimizer(groups[group], lr, momentum, 3, Y)
        want = Y[rows].clone()
        for d in D:
            alone.step(Work(want), d[rows].clone())
        assert torch.equal(got[rows], want)


def test_per_row_rates_travel_with_the_state_into_any_piece_of_it():
    """The fused step updates pieces of the state (blocks of rows, one parameter's columns):
    the rates ride along as a broadcast view of the rows, so a piece carries its rows'."""
    layout, groups = groups_of_a_model()
    Y = torch.zeros(4, layout.P)
    rates = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    state = LocalOptimizer(groups["all"], rates, 0.9, 4, Y).state(Work(Y))
    assert len(state) == 3 and state[2].shape == Y.shape and state[2].stride(1) == 0
    piece = layout.views(state[2][1:3])[layout.names[0]]
    assert piece.shape[0] == 2 and torch.equal(piece.amax(dim=tuple(range(1, piece.dim()))),
                                               torch.tensor([2.0, 3.0]))
