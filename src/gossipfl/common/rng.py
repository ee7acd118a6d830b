"""Counter-based randomness.

The random stream for a (seed, purpose, round, client, ...) tuple is derived by hashing the
tuple, never drawn from a global generator. The same seed therefore gives the same numbers
whatever the chunk size, the number of processes or the order in which parts are built.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from gossipfl.common.transfer import to_device


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


# -- counter-based streams per client, vectorized ------------------------------------------------
_MASK63 = (1 << 63) - 1


def _signed(value: int) -> int:
    """A 64-bit constant as the int64 torch stores."""
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """The splitmix64 finalizer on int64 tensors (wrapping arithmetic): a bijection of 64-bit
    words whose outputs for consecutive inputs look independent."""
    x = (x ^ _shift_right(x, 30)) * _MIX1
    x = (x ^ _shift_right(x, 27)) * _MIX2
    return x ^ _shift_right(x, 31)


#: Runs of at most this many clients derive each client's key by hashing its own
#: (seed, keys, client) string (every committed number was made that way); larger runs
#: (``vectorized``) by one hash of (seed, keys) mixed with the client ids as int64 tensors —
#: no Python per client (a million clients: 1.5 s a call the other way).
HASHED_KEYS_MAX_CLIENTS = 1024


def vectorized_keys(num_clients: int) -> bool:
    """Whether a run of ``num_clients`` clients derives its client keys vectorized."""
    return num_clients > HASHED_KEYS_MAX_CLIENTS


def client_keys(seed: int, clients, *keys: object,
                device: str | torch.device = "cpu", counters=None,
                vectorized: bool = False) -> torch.Tensor:
    """``[len(clients)]`` int64: the stream key of each client for (seed, *keys, client), or
    with ``counters`` (one integer per client, e.g. its update count in an asynchronous
    order) for (seed, *keys, counter, client).

    A client's key depends only on its own id and the keys, never on the other clients
    drawn with it. ``clients`` (and ``counters``): a tensor or a sequence of ints. ``vectorized`` (a run's choice, :func:`vectorized_keys`): the key is
    splitmix64 of (blake2b(seed, *keys), counter, client), computed on int64 tensors; the
    default hashes each client's string (other keys: a run uses one way throughout)."""
    if vectorized:
        base = _signed(derive_seed(seed, *keys))  # a number: no copy to the device
        ids = to_device(clients, device, torch.int64)
        x = mix64((ids + 1) * _GOLDEN + base)
        if counters is not None:
            x = mix64(x + (to_device(counters, device, torch.int64) + 1) * _MIX1)
        return _shift_right(mix64(x), 1)  # 63 bits, as derive_seed's
    if isinstance(clients, torch.Tensor | np.ndarray):  # ids as Python ints: one string each
        clients = clients.tolist()
    if counters is not None:
        if isinstance(counters, torch.Tensor | np.ndarray):
            counters = counters.tolist()
        values = [derive_seed(seed, *keys, int(k), int(c)) for c, k in zip(clients, counters)]
        return to_device(values, device, torch.int64)
    values = [derive_seed(seed, *keys, int(c)) for c in clients]
    return to_device(values, device, torch.int64)


def counter_bits(keys: torch.Tensor, counters: torch.Tensor, bits: int) -> torch.Tensor:
    """Random integers in ``[0, 2^bits)``: element n of stream k is a hash of (k, n).

    ``keys`` and ``counters`` broadcast against each other (int64); ``bits`` ≤ 63."""
    return _shift_right(mix64(mix64(keys) + counters * _GOLDEN), 64 - bits)


def _mix64_(x: torch.Tensor) -> torch.Tensor:
    """:func:`mix64` in place on a tensor of one's own (the same words, fewer allocations)."""
    for bits, factor in ((30, _MIX1), (27, _MIX2), (31, None)):
        x.bitwise_xor_(_shift_right(x, bits))
        if factor is not None:
            x.mul_(factor)
    return x


def counter_normal(keys: torch.Tensor, width: int, dtype: torch.dtype = torch.float32
                   ) -> torch.Tensor:
    """``[len(keys), width]`` standard normal draws: entries 2j and 2j + 1 of row k are the
    Box–Muller pair of one 62-bit hash of (keys[k], j) (:func:`counter_bits`), split into two
    31-bit uniforms (so |z| < 6.7: a tail of probability 2·10⁻¹¹ is cut), computed in
    ``dtype`` (float32 or float64, like ``torch.randn``'s samples); a row never depends on
    the rows drawn with it."""
    pairs = (width + 1) // 2
    j = torch.arange(pairs, dtype=torch.int64, device=keys.device)[None, :] * _GOLDEN
    bits = _mix64_(mix64(keys)[:, None] + j)
    bits = _shift_right(bits, 2)  # the top 62 bits, as counter_bits(keys, j, 62)
    scale = 2.0 ** -31
    radius = _shift_right(bits, 31).to(dtype).add_(0.5).mul_(scale)  # u1 in (0, 1]
    radius = radius.log_().mul_(-2.0).sqrt_()
    angle = bits.bitwise_and_((1 << 31) - 1).to(dtype).mul_(2.0 * torch.pi * scale)
    out = torch.empty(len(keys), pairs, 2, dtype=dtype, device=keys.device)
    torch.mul(radius, torch.cos(angle), out=out[:, :, 0])
    torch.mul(radius, angle.sin_(), out=out[:, :, 1])
    return out.reshape(len(keys), 2 * pairs)[:, :width]
