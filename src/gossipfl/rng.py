"""Counter-based randomness.

The random stream for a (seed, purpose, round, client, ...) tuple is derived by hashing the
tuple, never drawn from a global generator. The same seed therefore gives the same numbers
whatever the chunk size, the number of processes or the order in which parts are built.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(seed: int, *keys: object) -> int:
    """A 63-bit integer seed derived from ``seed`` and any number of keys (str or int)."""
    text = "/".join([str(int(seed)), *[str(k) for k in keys]])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def torch_generator(seed: int, *keys: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded from (seed, *keys)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, *keys))
    return gen


def numpy_generator(seed: int, *keys: object) -> np.random.Generator:
    """A NumPy ``Generator`` seeded from (seed, *keys)."""
    return np.random.default_rng(derive_seed(seed, *keys))
