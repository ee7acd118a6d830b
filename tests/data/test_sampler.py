"""Per-client minibatch sampler and batched crop/flip augmentation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gossipfl.data import (
    ClientSampler,
    apply_crop_flip,
    crop_flip_params,
    random_crop_flip,
    shuffled_streams,
)
from gossipfl.errors import GossipflError

# Unequal clients over a train set of 100 samples (global indices, disjoint).
PERM = np.random.default_rng(0).permutation(100)
CLIENTS = [np.sort(PERM[:23]), np.sort(PERM[23:30]), np.sort(PERM[30:31]), np.sort(PERM[31:71])]
SIZES = [23, 7, 1, 40]


def as_rows(batches):
    idx = torch.cat([b[0] for b in batches], dim=1)
    mask = torch.cat([b[1] for b in batches], dim=1)
    return idx, mask


def test_epoch_covers_each_sample_exactly_once_with_right_masks():
    sampler = ClientSampler(CLIENTS, batch_size=8, seed=1)
    assert sampler.sizes.dtype == torch.int64 and sampler.sizes.tolist() == SIZES
    assert sampler.steps_per_epoch() == math.ceil(40 / 8)
    batches = sampler.epoch(round=0, epoch=0)
    assert len(batches) == 5
    for idx, mask in batches:
        assert idx.shape == mask.shape == (4, 8)
        assert idx.dtype == torch.int64 and mask.dtype == torch.bool
    idx, mask = as_rows(batches)
    for i, own in enumerate(CLIENTS):
        assert sorted(idx[i][mask[i]].tolist()) == own.tolist()  # each sample exactly once
        assert set(idx[i].tolist()) <= set(own.tolist())           # padding stays in-client
        # Valid entries come first: full batches, a partial one, then all-False rows.
        np.testing.assert_array_equal(mask[i].numpy(), np.arange(40) < SIZES[i])
    assert not batches[-1][1][1].any() and batches[0][1][1].sum() == 7


def test_epoch_determinism_and_variation():
    a = ClientSampler(CLIENTS, 8, seed=1).epoch(3, 1)
    b = ClientSampler(CLIENTS, 8, seed=1).epoch(3, 1)
    assert all(torch.equal(x[0], y[0]) for x, y in zip(a, b, strict=True))
    for other in (ClientSampler(CLIENTS, 8, seed=1).epoch(4, 1),
                  ClientSampler(CLIENTS, 8, seed=1).epoch(3, 2),
                  ClientSampler(CLIENTS, 8, seed=2).epoch(3, 1)):
        assert not torch.equal(as_rows(a)[0], as_rows(other)[0])


def test_permutations_look_uniform():
    # 2000 consecutive permutations of 0..9: each value lands in each position ~200 times.
    perms = shuffled_streams(torch.tensor([10]), torch.tensor([20000]), torch.tensor([5]))
    perms = perms.view(2000, 10)
    assert all(sorted(p) == list(range(10)) for p in perms.tolist())
    counts = torch.stack([(perms == v).sum(0) for v in range(10)])
    assert counts.min() > 140 and counts.max() < 260


def test_steps_cycle_with_fresh_permutations():
    sampler = ClientSampler(CLIENTS, batch_size=5, seed=3)
    batches = sampler.steps(round=2, num_steps=7)
    assert len(batches) == 7
    idx, mask = as_rows(batches)
    assert idx.shape == (4, 35) and mask.all()
    for i, own in enumerate(CLIENTS):
        n = SIZES[i]
        stream = idx[i].tolist()
        for start in range(0, 35, n):  # every full wrap is a permutation of the client's data
            chunk = stream[start:start + n]
            if len(chunk) == n:
                assert sorted(chunk) == own.tolist()
            else:
                assert len(set(chunk)) == len(chunk) and set(chunk) <= set(own.tolist())
    # Client 1 (7 samples) wraps 5 times; its permutations are not all the same.
    wraps = {tuple(idx[1, s:s + 7].tolist()) for s in range(0, 35, 7)}
    assert len(wraps) > 1
    again = sampler.steps(round=2, num_steps=7)
    assert all(torch.equal(x[0], y[0]) for x, y in zip(batches, again, strict=True))
    assert not torch.equal(idx, as_rows(sampler.steps(round=3, num_steps=7))[0])


def test_full_batch_mode():
    sampler = ClientSampler(CLIENTS, batch_size=None, seed=0)
    idx, mask = sampler.full_batch()
    assert idx.shape == mask.shape == (4, 40) and sampler.steps_per_epoch() == 1
    np.testing.assert_array_equal(mask.sum(1).numpy(), SIZES)
    for i, own in enumerate(CLIENTS):
        np.testing.assert_array_equal(idx[i][mask[i]].numpy(), own)
    (e_idx, e_mask), = sampler.epoch(0, 0)
    assert torch.equal(e_idx, idx) and torch.equal(e_mask, mask)
    steps = sampler.steps(0, 3)
    assert len(steps) == 3 and all(torch.equal(s[1], mask) for s in steps)


def test_empty_client_is_fully_masked():
    sampler = ClientSampler([np.array([4, 5, 6]), np.array([], dtype=np.int64)], 2, seed=0)
    idx, mask = as_rows(sampler.epoch(0, 0))
    assert mask[1].sum() == 0 and mask[0].sum() == 3
    idx, mask = as_rows(sampler.steps(0, 2))
    assert mask[0].all() and not mask[1].any() and idx.max() <= 6


def test_shuffled_streams_rows():
    sizes = torch.tensor([3, 1, 4, 0])
    lengths = torch.tensor([7, 2, 4, 0])
    out = shuffled_streams(sizes, lengths, torch.tensor([1, 2, 3, 4]))
    assert out.shape == (4, 7)
    assert sorted(out[0, :3].tolist()) == [0, 1, 2] and sorted(out[0, 3:6].tolist()) == [0, 1, 2]
    assert out[0, 6].item() in (0, 1, 2)
    assert out[1, :2].tolist() == [0, 0] and sorted(out[2, :4].tolist()) == [0, 1, 2, 3]
    assert out[3].tolist() == [0] * 7


def test_shapes_from_the_hosts_sizes_give_the_same_streams():
    """``shuffled_streams`` with the sizes and lengths on the host (``host``: no read of the
    device) gives the streams it computes from the device's; and the sampler with the host's
    ids (a NumPy array, or none: all clients) gives the minibatches of the ids as a tensor
    (whose values it reads), in any order of the clients."""
    sizes, lengths = torch.tensor([3, 1, 4, 0, 5]), torch.tensor([7, 2, 4, 0, 5])
    keys = torch.tensor([1, 2, 3, 4, 5])
    want = shuffled_streams(sizes, lengths, keys)
    got = shuffled_streams(sizes, lengths, keys, (sizes.numpy(), lengths.numpy()))
    assert torch.equal(got, want)
    sampler = ClientSampler(CLIENTS, 4, seed=3)
    reading = ClientSampler(CLIENTS, 4, seed=3)
    reading.host_ids = lambda clients: None  # as for ids on a GPU: their values are read
    order = np.array([3, 0, 1, 2])
    for clients in (order, None):
        ids = None if clients is None else torch.as_tensor(order)
        for draw in ("step_streams", "epoch_streams"):
            want = getattr(reading, draw)(2, 3, "s", clients=ids)
            got = getattr(sampler, draw)(2, 3, "s", clients=clients)
            for a, b in zip(got, want, strict=True):
                assert torch.equal(a, b)
        assert sampler.steps_per_epoch(clients) == reading.steps_per_epoch(ids)


def test_sampler_validation():
    with pytest.raises(GossipflError, match="data.batch_size: .* got 0"):
        ClientSampler(CLIENTS, 0, seed=0)
    with pytest.raises(GossipflError, match="local_steps: .* got 0"):
        ClientSampler(CLIENTS, 4, seed=0).steps(0, 0)


# --------------------------------------------------------------------------------------------
# Augmentation
# --------------------------------------------------------------------------------------------


def by_hand(image: torch.Tensor, dy: int, dx: int, flip: bool, padding: int) -> torch.Tensor:
    """torch.nn.functional.pad, slice, flip: the textbook crop of one [C, H, W] image."""
    height, width = image.shape[-2:]
    crop = F.pad(image, (padding,) * 4)[:, dy:dy + height, dx:dx + width]
    return crop.flip(-1) if flip else crop


@pytest.mark.parametrize("padding", [0, 1, 4])
def test_random_crop_flip_matches_hand_crop(padding):
    x = torch.randn(2, 6, 3, 7, 5)  # leading dims [2, 6], images 3 x 7 x 5 (H != W)
    out = random_crop_flip(x, torch.Generator().manual_seed(11), padding=padding)
    dy, dx, flip = crop_flip_params(12, torch.Generator().manual_seed(11), padding)
    assert out.shape == x.shape
    images = x.reshape(12, 3, 7, 5)
    for n, got in enumerate(out.reshape(12, 3, 7, 5)):
        expected = by_hand(images[n], int(dy[n]), int(dx[n]), bool(flip[n]), padding)
        assert torch.equal(got, expected)
    if padding:
        assert 0 < flip.sum() < 12 and len(set(dy.tolist())) > 1


def test_crop_flip_edge_cases():
    x = torch.arange(2 * 1 * 4 * 4, dtype=torch.float32).reshape(2, 1, 4, 4)
    same = apply_crop_flip(x, torch.tensor([2, 2]), torch.tensor([2, 2]),
                           torch.tensor([False, True]), padding=2)
    assert torch.equal(same[0], x[0]) and torch.equal(same[1], x[1].flip(-1))
    corner = apply_crop_flip(x, torch.tensor([0, 4]), torch.tensor([0, 4]),
                             torch.tensor([False, False]), padding=2)
    assert torch.equal(corner[0, 0, 2:, 2:], x[0, 0, :2, :2]) and corner[0, 0, :2].sum() == 0
    assert torch.equal(corner[1, 0, :2, :2], x[1, 0, 2:, 2:]) and corner[1, 0, 2:].sum() == 0


def test_crop_probability_zero_only_flips():
    x = torch.randn(50, 3, 8, 8)
    dy, dx, _ = crop_flip_params(50, torch.Generator().manual_seed(0), 4, crop_prob=0.0)
    assert (dy == 4).all() and (dx == 4).all()
    out = random_crop_flip(x, torch.Generator().manual_seed(0), crop_prob=0.0)
    for a, b in zip(out, x, strict=True):
        assert torch.equal(a, b) or torch.equal(a, b.flip(-1))
