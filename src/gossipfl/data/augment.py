"""Batched CIFAR-style augmentation: random crop of the zero-padded image, horizontal flip.

For a sample with offsets ``(dy, dx)`` in ``[0, 2p]`` and flip bit ``f`` the output is

    out[c, i, j] = x[c, i + dy - p, j' + dx - p],  j' = W - 1 - j if f else j,

and 0 where the source falls outside the image: the crop of ``pad(x, p)`` back to H x W,
flipped after cropping. All samples are done at once with one gather (no loop over samples).
Padding is with zeros in whatever space ``x`` is in; datasets here are normalized at load time,
so this pads in normalized space like the FL-Simulator code (DisPFL pads raw pixels).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gossipfl.common.rng import counter_bits


def crop_flip_params(num: int, generator: torch.Generator, padding: int = 4,
                     crop_prob: float = 1.0, flip_prob: float = 0.5
                     ) -> tuple[Tensor, Tensor, Tensor]:
    """Random ``(dy [num], dx [num], flip [num] bool)`` on the generator's device.

    Offsets are uniform in ``0..2p``; with probability ``1 - crop_prob`` a sample is not
    cropped (offsets ``p, p``); flips happen with probability ``flip_prob``.
    """
    device = generator.device
    offsets = torch.randint(0, 2 * padding + 1, (num, 2), generator=generator, device=device)
    flip = torch.rand(num, generator=generator, device=device) < flip_prob
    if crop_prob < 1.0:
        crop = torch.rand(num, generator=generator, device=device) < crop_prob
        offsets = torch.where(crop[:, None], offsets, padding)
    return offsets[:, 0], offsets[:, 1], flip


def apply_crop_flip(x: Tensor, dy: Tensor, dx: Tensor, flip: Tensor, padding: int = 4
                    ) -> Tensor:
    """Crop-and-flip each image of ``x [..., C, H, W]`` with its own ``(dy, dx, flip)``
    (one entry per image, images counted over the leading dimensions in row-major order)."""
    *lead, channels, height, width = x.shape
    flat = x.reshape(-1, channels, height * width)
    num = flat.shape[0]
    dy, dx, flip = dy.to(x.device), dx.to(x.device), flip.to(x.device)
    rows = torch.arange(height, device=x.device)[None, :] + dy[:, None] - padding   # [B, H]
    base = torch.arange(width, device=x.device)[None, :]
    cols = torch.where(flip[:, None], width - 1 - base, base) + dx[:, None] - padding  # [B, W]
    valid = ((rows >= 0) & (rows < height))[:, :, None] & ((cols >= 0) & (cols < width))[:, None]
    source = rows.clamp(0, height - 1)[:, :, None] * width + cols.clamp(0, width - 1)[:, None]
    source = source.reshape(num, 1, height * width).expand(num, channels, height * width)
    out = torch.gather(flat, 2, source).reshape(num, channels, height, width)
    out = torch.where(valid[:, None], out, torch.zeros((), dtype=x.dtype, device=x.device))
    return out.reshape(*lead, channels, height, width)


def random_crop_flip(x: Tensor, generator: torch.Generator, padding: int = 4,
                     crop_prob: float = 1.0) -> Tensor:
    """Random crop (zero pad ``padding``, crop back to H x W) and horizontal flip (p = 0.5)
    of every image in ``x [..., C, H, W]``, drawn from ``generator``."""
    num = x[..., 0, 0, 0].numel()
    dy, dx, flip = crop_flip_params(num, generator, padding, crop_prob)
    return apply_crop_flip(x, dy, dx, flip, padding)


def hashed_crop_flip_params(keys: Tensor, counters: Tensor, padding: int = 4
                            ) -> tuple[Tensor, Tensor, Tensor]:
    """``(dy, dx, flip)`` for image n of client stream k from a hash of (keys[k], counters[n])
    (:func:`gossipfl.common.rng.counter_bits`): offsets uniform in ``0..2p``, flips with p = 0.5.

    ``keys [S]`` and ``counters [S, B]`` int64 give ``[S * B]`` parameters, so each client's
    augmentation depends only on its own key, whatever clients are drawn with it."""
    bits = counter_bits(keys[:, None], counters, 60).reshape(-1)
    field = (1 << 20) - 1
    span = 2 * padding + 1
    dy = ((bits & field) * span) >> 20
    dx = (((bits >> 20) & field) * span) >> 20
    flip = ((bits >> 40) & 1).bool()
    return dy, dx, flip
