"""The one-pass CPU update (gossipfl.engine.fused_update) against its torch definition, bit for
bit: d = g + μ_wd·y, then y ← y − η d, or v ← μ v − η d, y ← y + v — on whole rows, on one
parameter's columns of a stack (rows of stride P), on odd widths, and on inf, NaN, signed
zeros and subnormals; and where it declines (the torch code runs instead)."""

from __future__ import annotations

import pytest
import torch

from gossipfl.algorithms.local import LocalOptimizer
from gossipfl.algorithms.terms import _decayed
from gossipfl.engine import fused_update
from gossipfl.engine.fused_update import sgd_update

pytest.importorskip("numba")

LR = 0.0371


def torch_update(g, y, v, decay, momentum):
    """The definition: the unfused ops, in place."""
    opt = LocalOptimizer(None, LR, momentum, y.shape[0], y, velocity=v)  # v given: no group
    opt.update(_decayed(g, y, decay, inplace=True), y, *(() if v is None else (v,)))


def special(shape, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * torch.logspace(-40, 30, shape[-1]).to(torch.float32)
    flat = x.view(-1)
    picks = torch.randint(0, flat.numel(), (12,), generator=gen)
    values = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 1e-45,
                           -1e-45, 3e38, -3e38, 1e-39, 65504.0, 1.0])
    flat[picks] = values
    return x


@pytest.mark.parametrize("decay, momentum", [(5e-4, 0.0), (5e-4, 0.9), (0.0, 0.9),
                                             (1e-2, 0.5)])
@pytest.mark.parametrize("layout", ["rows", "columns", "odd", "shaped", "special"])
def test_the_one_pass_update_is_the_torch_definition_bitwise(decay, momentum, layout):
    gen = torch.Generator().manual_seed(1)
    if layout == "columns":  # one parameter's columns of a [M, P] stack
        stack = torch.randn(7, 1000, generator=gen)
        y = stack[:, 123:123 + 517]
        v = torch.randn(7, 1000, generator=gen)[:, 123:123 + 517] if momentum else None
        g = torch.randn(7, 517, generator=gen)
    else:
        shape = {"rows": (5, 4096), "odd": (3, 33), "shaped": (4, 6, 5, 3),
                 "special": (6, 301)}[layout]
        maker = (lambda s: special(s, 2)) if layout == "special" else \
            (lambda s: torch.randn(s, generator=gen))
        y, g = maker(shape), maker(shape)
        v = maker(shape) if momentum else None
    expected_y, expected_v, g0 = y.clone(), None if v is None else v.clone(), g.clone()
    torch_update(g0.clone(), expected_y, expected_v, decay, momentum)
    assert sgd_update(g.clone(), y, v, decay, LR, momentum)
    assert _same_bits(y, expected_y)
    if v is not None:
        assert _same_bits(v, expected_v)


def _same_bits(a, b):
    """Equal bit patterns, NaNs compared by their bits too."""
    return torch.equal(a.contiguous().view(torch.int32), b.contiguous().view(torch.int32))


def test_it_declines_where_it_does_not_apply(monkeypatch):
    y, g = torch.randn(3, 8), torch.randn(3, 8)
    before = y.clone()
    assert not sgd_update(g, y, None, 0.0, LR, 0.0)  # plain SGD: one torch kernel already
    assert not sgd_update(g.double(), y.double(), None, 5e-4, LR, 0.0)  # float64
    assert not sgd_update(g, y.requires_grad_(True), None, 5e-4, LR, 0.0)
    y = before.clone()
    strided = torch.randn(3, 16)[:, ::2]  # columns of stride 2
    assert not sgd_update(g, strided, None, 5e-4, LR, 0.0)
    assert not sgd_update(torch.randn(3, 9), y, None, 5e-4, LR, 0.0)  # shapes differ
    monkeypatch.setenv("GOSSIPFL_KERNELS", "torch")
    assert not sgd_update(g, y, None, 5e-4, LR, 0.0)
    assert torch.equal(y, before)


def test_without_numba_the_torch_code_runs(monkeypatch):
    monkeypatch.setattr(fused_update, "_kernels", lambda: None)
    y, g = torch.randn(3, 8), torch.randn(3, 8)
    before = y.clone()
    assert not sgd_update(g, y, None, 5e-4, LR, 0.0)
    assert torch.equal(y, before)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_rows_split_among_threads_give_the_same_bits(momentum, monkeypatch):
    from gossipfl.engine import threads

    gen = torch.Generator().manual_seed(4)
    y, g = torch.randn(7, 301, generator=gen), torch.randn(7, 301, generator=gen)
    v = torch.randn(7, 301, generator=gen) if momentum else None
    expected_y, expected_v = y.clone(), None if v is None else v.clone()
    torch_update(g.clone(), expected_y, expected_v, 5e-4, momentum)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    monkeypatch.setattr(threads, "PARALLEL_NUMEL", 1)
    assert sgd_update(g, y, v, 5e-4, LR, momentum)
    assert _same_bits(y, expected_y)
    if v is not None:
        assert _same_bits(v, expected_v)


def test_the_fused_step_takes_whole_rows_only_where_the_kernel_runs(monkeypatch):
    y = torch.zeros(4, 8)
    assert fused_update.takes(y, 5e-4, 0.0) and fused_update.takes(y, 0.0, 0.9)
    assert not fused_update.takes(y, 0.0, 0.0)  # plain SGD: torch's one kernel, in pieces
    assert not fused_update.takes(y.double(), 5e-4, 0.0)
    monkeypatch.setenv("GOSSIPFL_KERNELS", "torch")
    assert not fused_update.takes(y, 5e-4, 0.0)
