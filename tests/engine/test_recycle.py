"""Buffers kept from round to round (gossipfl.engine.recycle): handed out again only once
nothing refers to them, and the numbers of the Mixer and of DFedAvg unchanged by them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipfl.algorithms import get_algorithm
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg, GossipParams
from gossipfl.engine import recycle
from gossipfl.engine.recycle import Recycler
from gossipfl.testing import least_squares, run_round
from gossipfl.topology import Mixer, build_topology


def test_a_buffer_is_handed_out_again_only_when_nothing_refers_to_it():
    buffers = Recycler(limit=2, min_bytes=0)
    a = buffers.empty((4, 3), torch.float32, "cpu")
    pointer = a.data_ptr()
    b = buffers.empty((4, 3), torch.float32, "cpu")  # a is in use: a second buffer
    assert b.data_ptr() != pointer and len(buffers) == 2
    view = a[1:]
    del a
    c = buffers.empty((12,), torch.float32, "cpu")  # a view still holds a's buffer, b is b
    assert c.data_ptr() not in (pointer, b.data_ptr())
    assert len(buffers) == 2  # full: c took the place of the oldest (a's, still viewed)
    del b
    again = buffers.empty((2, 6), torch.float32, "cpu")  # b's is free: the same memory
    assert again.shape == (2, 6) and len(buffers) == 2
    storage = again.untyped_storage()
    kept = again.data_ptr()
    del again
    # a storage object still refers to it: not handed out
    assert buffers.empty((12,), torch.float32, "cpu").data_ptr() != kept
    del storage, view
    assert buffers.nbytes() == 2 * 12 * 4
    assert buffers.empty((4, 3), torch.float64, "cpu").dtype == torch.float64  # by dtype


def test_the_oldest_buffer_gives_way_and_is_freed_with_its_holder():
    """A caller that holds every output (an algorithm that keeps x^t while it mixes) leaves
    nothing waiting in the recycler: the buffer it holds is no longer kept."""
    buffers = Recycler(limit=1, min_bytes=0)
    x = buffers.empty((5,), torch.float32, "cpu")
    y = buffers.empty((5,), torch.float32, "cpu")  # x held: y takes its place
    assert x.data_ptr() != y.data_ptr() and len(buffers) == 1
    assert all(base.data_ptr() != x.data_ptr() for base in buffers._bases)
    del x
    z = buffers.empty((5,), torch.float32, "cpu")  # y held too: z takes y's place
    assert all(base.data_ptr() != y.data_ptr() for base in buffers._bases)
    del y
    pointer = z.data_ptr()
    del z
    assert buffers.empty((5,), torch.float32, "cpu").data_ptr() == pointer  # free: again


def test_small_buffers_are_not_kept_and_a_clone_copies():
    buffers = Recycler(min_bytes=1024)
    x = torch.arange(10.0)
    y = buffers.clone(x)
    assert torch.equal(x, y) and y.data_ptr() != x.data_ptr() and len(buffers) == 0
    big = torch.randn(300, 2)  # 2400 bytes: kept
    first = buffers.clone(big)
    assert torch.equal(first, big) and len(buffers) == 1
    first.add_(1.0)  # the copy is its own memory
    assert not torch.equal(first, big)


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_the_mixers_kept_outputs_give_the_same_numbers_and_spare_the_held_ones(monkeypatch,
                                                                               steps):
    monkeypatch.setattr(recycle, "MIN_BYTES", 0)
    m = 2000  # a topology built as edges: mixed as CSR
    topology = build_topology("epidemic", m, seed=3, s=4)
    mixer = Mixer(topology, dtype=torch.float64)
    W = mixer.matrix(0)
    E = topology.edges(0)
    held = []
    X = torch.randn(m, 5, dtype=torch.float64)
    for t in range(4):
        mixed = mixer.mix(X, 0, steps)
        expected = X.clone()
        for _ in range(steps):
            expected = W @ expected  # torch's own product: the same kernel, bit for bit
        assert torch.equal(mixed, expected)
        reference = X.numpy()
        for _ in range(steps):  # float64 NumPy: Σ_l w_il x_l
            out = np.zeros_like(reference)
            np.add.at(out, E.rows, E.values[:, None] * reference[E.cols])
            reference = out
        np.testing.assert_allclose(mixed.numpy(), reference, rtol=1e-12, atol=1e-12)
        held.append((mixed, mixed.clone()))
        X = mixed if t % 2 else torch.randn(m, 5, dtype=torch.float64)
    for kept, copy in held:  # an output someone holds is never written into again
        assert torch.equal(kept, copy)
    assert len(mixer._outputs) == 1


def _rounds(monkeypatch, min_bytes: int, name: str = "dfedavg", rounds: int = 5):
    monkeypatch.setattr(recycle, "MIN_BYTES", min_bytes)
    rng = np.random.default_rng(0)
    m, d = 1200, 3
    inputs = [rng.standard_normal((2, d)) for _ in range(m)]
    targets = [rng.standard_normal(2) for _ in range(m)]
    topology = build_topology("epidemic", m, seed=1, s=3)
    bed = least_squares(inputs, targets, topology, steps=2, lr=0.1)
    algo = get_algorithm(name)(None, bed.env, bed.fed)
    state = algo.init(torch.as_tensor(rng.standard_normal((m, d)), dtype=torch.float32))
    pointers = []
    for t in range(rounds):
        run_round(bed, algo, state, t)
        pointers.append(state["x"].data_ptr())
    return state, pointers


def test_dfedavg_with_kept_buffers_equals_dfedavg_without(monkeypatch):
    kept, pointers = _rounds(monkeypatch, 0)
    fresh, _ = _rounds(monkeypatch, 2**62)
    assert torch.equal(kept["x"], fresh["x"])
    assert len(set(pointers[1:])) == 1  # x^t's buffer takes W Z^t once it is let go


@pytest.mark.parametrize("name", ["dfedcata", "oledfl", "dpsgd", "dfedavgm", "dfedsam"])
def test_algorithms_that_hold_their_rows_longer_keep_their_numbers(monkeypatch, name):
    """DFedCata keeps x^t as its reference, OledFL the trained rows, D-PSGD mixes x before it
    trains: a buffer they still hold is never handed out again."""
    kept, _ = _rounds(monkeypatch, 0, name)
    fresh, _ = _rounds(monkeypatch, 2**62, name)
    assert kept.keys() == fresh.keys()
    for key in kept:
        assert torch.equal(kept[key], fresh[key]), key


def test_dfedavg_round_with_kept_buffers_against_numpy(monkeypatch):
    """Two rounds of x ← W (x − η ∇F_i(x)) (K = 2 full-batch steps of F_i = mean squared
    error) in float64 NumPy, the rounds' buffers recycled."""
    monkeypatch.setattr(recycle, "MIN_BYTES", 0)
    rng = np.random.default_rng(0)
    m, d = 1200, 3
    inputs = [rng.standard_normal((2, d)) for _ in range(m)]
    targets = [rng.standard_normal(2) for _ in range(m)]
    topology = build_topology("epidemic", m, seed=1, s=3)
    bed = least_squares(inputs, targets, topology, steps=2, lr=0.1)
    algo = DFedAvg(GossipParams(), bed.env, bed.fed)
    x0 = rng.standard_normal((m, d)).astype(np.float32)
    state = algo.init(torch.as_tensor(x0))
    x = x0.astype(np.float64)
    for t in range(3):
        work = run_round(bed, algo, state, t)
        del work  # a runner drops the round's rows: their buffer is free for the next
        y = x.copy()
        for _ in range(2):
            for i in range(m):
                A, b = inputs[i], targets[i]
                y[i] -= 0.1 * (2 / len(b)) * A.T @ (A @ y[i] - b)
        E = topology.edges(t)
        x = np.zeros_like(y)
        np.add.at(x, E.rows, E.values[:, None] * y[E.cols])
        np.testing.assert_allclose(state["x"].numpy(), x, rtol=1e-4, atol=1e-5)
