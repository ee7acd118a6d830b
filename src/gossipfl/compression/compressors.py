"""Message compressors on a batch of rows, with their exact wire formats.

Every compressor works on ``x [n, P]``, one message per row, with ``keys [n]`` int64 the
rows' stream keys (e.g. ``rng.client_keys(seed, clients, "compress", round, channel)``):

- ``compress(x, keys)``: Q(x), dense ``[n, P]`` in ``x.dtype`` (float64 stays float64);
- ``encode(x, keys)``: uint8 ``[n, width(P)]``, the bytes actually sent;
- ``decode(payload, keys, P, dtype)``: the receiver's ``[n, P]``.

A deterministic compressor (``keyed`` False: identity, top_k, sign) ignores the keys, and
the simulator gives it None rather than draw them.

Contract: for float32 ``x``, ``decode(encode(x, keys), keys, P)`` equals ``compress(x, keys)``
bitwise, and ``encode(x, keys).shape[1] == width(P)``. A row's result depends only on its
own values and its own key, never on the other rows. Wire conventions: values are float32
(4 bytes) and indices int32, both little-endian (the byte order of the platforms PyTorch
runs on); bits are packed 8 per byte, the first bit in a byte's least significant bit
(:func:`pack_bits`). Randomness comes from :func:`gossipfl.common.rng.counter_bits` on the row's
key, so a receiver holding the key regenerates it (rand_k's indices are never sent).
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from gossipfl.common.rng import counter_bits
from gossipfl.compression import kernels
from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.plugins import Registry
from gossipfl.validation import BOOLEAN, COUNT, Params, Rule, typed

_COUNT = dataclasses.replace(COUNT, quoted=True)
_FRACTION = Rule(lambda v: not isinstance(v, bool) and 0 < v <= 1, "a number in (0, 1]",
                 quoted=True)
_BOOLEAN = dataclasses.replace(BOOLEAN, quoted=True)


def pack_bits(values: Tensor, bits: int) -> Tensor:
    """uint8 ``[n, ⌈P·bits/8⌉]``: the low ``bits`` bits of each of ``values [n, P]`` (integers
    in ``[0, 2^bits)`` or bool) as one bit stream, value j's bit b at position j·bits + b,
    position t in byte t // 8 at bit t % 8 (least significant first); the last byte is
    zero-padded."""
    n, p = values.shape
    v = values.long()
    stream = torch.stack([((v >> b) & 1).to(torch.uint8) for b in range(bits)], dim=2)
    width = -(-p * bits // 8)
    stream = torch.nn.functional.pad(stream.reshape(n, p * bits), (0, 8 * width - p * bits))
    shifts = torch.arange(8, dtype=torch.uint8, device=values.device)
    return (stream.view(n, width, 8) << shifts).sum(dim=2, dtype=torch.uint8)


def unpack_bits(packed: Tensor, bits: int, numel: int) -> Tensor:
    """int64 ``[n, numel]``: the inverse of :func:`pack_bits` (padding bits ignored)."""
    n = packed.shape[0]
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    stream = ((packed.unsqueeze(2) >> shifts) & 1).reshape(n, 8 * packed.shape[1])
    stream = stream[:, :numel * bits].reshape(n, numel, bits)
    out = torch.zeros(n, numel, dtype=torch.int64, device=packed.device)
    for b in range(bits):
        out |= stream[:, :, b].long() << b
    return out


def _to_bytes(t: Tensor) -> Tensor:
    """uint8 ``[n, 4m]``: the bytes of a 4-byte-element ``[n, m]`` tensor."""
    if t.numel() == 0:  # an empty batch's strides need not allow the view
        return t.new_empty(t.shape[0], 4 * t.shape[1], dtype=torch.uint8)
    return t.contiguous().view(torch.uint8)


def _from_bytes(b: Tensor, dtype: torch.dtype) -> Tensor:
    """``[n, m]`` of ``dtype`` (4 bytes) read from uint8 ``[n, 4m]``."""
    return b.clone(memory_format=torch.contiguous_format).view(dtype)


def _stream(keys: Tensor, numel: int, bits: int, device: torch.device) -> Tensor:
    """int64 ``[n, numel]`` in ``[0, 2^bits)``: elements 0..numel-1 of each row's stream."""
    counters = torch.arange(numel, device=device)[None, :]
    return counter_bits(keys.to(device)[:, None], counters, bits)


def _dense(values: Tensor, idx: Tensor, numel: int) -> Tensor:
    """``[n, numel]``: ``values [n, k]`` at columns ``idx [n, k]``, zeros elsewhere."""
    return values.new_zeros(values.shape[0], numel).scatter(1, idx, values)


#: name -> compressor class; :func:`register_compressor` adds to it (gossipfl's and plugins').
COMPRESSORS: Registry = Registry("compressor", "topology.compression.compressor")


def register_compressor(cls: type[Compressor]) -> type[Compressor]:
    """Class decorator: make ``cls`` available as ``compressor: <cls.name>`` (in
    ``topology.compression`` and the compressed algorithms); its ``Params`` are the
    parameters a config may give it, typed and checked before training."""
    from gossipfl.plugins import check_params_class

    check_params_class(cls, f"compressor {cls.name!r}")
    return COMPRESSORS.add(cls.name, cls)


class Compressor(ABC):
    """A message compressor Q (see the module docstring for the contract).

    ``Params``: its parameters, declared once (a frozen :class:`~gossipfl.validation.Params`
    dataclass with their rules and defaults); a compressor is built from them
    (``TopK(params)``, as :func:`build_compressor` does) or, in Python, from them by name
    (``TopK(k=3)``, unchecked), reads each as an attribute (``self.k``), and derives what it
    needs from them in :meth:`setup`."""

    name: ClassVar[str]
    unbiased: ClassVar[bool]  # E[Q(x)] = x over the keys
    keyed: ClassVar[bool] = True  # Q draws on the keys (False: deterministic, keys may be None)
    Params: ClassVar[type[Params]] = Params  # the parameters a config may give (none)

    def __init__(self, params: Params | None = None, /, **given: Any):
        self.params = params if params is not None else self.Params(**given)
        vars(self).update(self.params.given())
        self.setup()

    def setup(self) -> None:
        """What the compressor derives from its parameters (after they are set)."""

    @abstractmethod
    def width(self, numel: int) -> int:
        """Exact bytes of one encoded row of ``numel`` values."""

    def sparse(self, x: Tensor, keys: Tensor, copy: Tensor | None = None
               ) -> tuple[Tensor, Tensor] | None:
        """Q(x − copy) (``copy`` None: Q(x)) as (indices, values) ``[n, k]`` each, indices
        ascending, when it keeps k coordinates per row (the simulator mixes those without
        densifying), else None. x − copy is never formed in full."""
        return None

    @abstractmethod
    def compress(self, x: Tensor, keys: Tensor) -> Tensor:
        """Q(x), ``[n, P]`` in ``x.dtype``."""

    @abstractmethod
    def encode(self, x: Tensor, keys: Tensor) -> Tensor:
        """uint8 ``[n, width(P)]``: the wire format."""

    @abstractmethod
    def decode(self, payload: Tensor, keys: Tensor, numel: int,
               dtype: torch.dtype = torch.float32) -> Tensor:
        """``[n, numel]`` of ``dtype`` from the bytes :meth:`encode` wrote."""


@register_compressor
class Identity(Compressor):
    """Q(x) = x (returned as is, no copy). Wire: the P values as float32; width 4P."""

    name, unbiased, keyed = "identity", True, False

    def width(self, numel):
        return 4 * numel

    def compress(self, x, keys=None):
        return x

    def encode(self, x, keys=None):
        return _to_bytes(x.float())

    def decode(self, payload, keys, numel, dtype=torch.float32):
        return _from_bytes(payload, torch.float32).to(dtype)


@dataclass(frozen=True)
class SparseParams(Params):
    """k of the P coordinates: ``k`` (an integer >= 1) or ``fraction`` f in (0, 1], exactly
    one of them."""

    k: int | None = None
    fraction: float | None = None
    rules: ClassVar = {"k": _COUNT, "fraction": _FRACTION}

    @classmethod
    def check_together(cls, key, given, name):
        if ("k" in given) == ("fraction" in given):
            got = (f"k={given['k']!r} and fraction={given['fraction']!r}" if "k" in given
                   else "neither")
            raise GossipflError(f"{key}: give exactly one of k and fraction for compressor "
                                f"'{name}', got {got}.")


class _Sparse(Compressor):
    """k of the P coordinates: ``k`` (an integer >= 1; k_eff = min(k, P)) or ``fraction``
    f in (0, 1] (k_eff = max(1, ⌈f·P⌉), f·P rounded to 9 decimals first so that
    0.07·100 gives 7), exactly one of them."""

    k: int | None
    fraction: float | None

    def setup(self):
        if (self.k is None) == (self.fraction is None):
            raise GossipflError(f"{self.name}: give exactly one of k and fraction.")
        self.k = None if self.k is None else int(self.k)

    def k_of(self, numel: int) -> int:
        """k_eff for rows of ``numel`` values."""
        if self.k is not None:
            return min(self.k, numel)
        return min(numel, max(1, math.ceil(round(self.fraction * numel, 9))))


@register_compressor
class TopK(_Sparse):
    """Top-k sparsification (Stich, Cordonnier & Jaggi, "Sparsified SGD with memory",
    NeurIPS 2018): Q(x) keeps the k coordinates of largest |x_j| and zeroes the rest;
    biased. k from ``k`` or ``fraction`` (:class:`_Sparse`).

    The selection is :func:`gossipfl.compression.kernels.top_k`: a NaN counts as the largest,
    ties at the k-th value go to the lowest indices (so a row's message depends on its values
    alone), and on the CPU one compiled pass per row finds it.

    Wire: the k values as float32, then the cheaper of the k int32 indices (4k bytes) or a
    P-bit bitmap (⌈P/8⌉ bytes; chosen when strictly cheaper), values in ascending index
    order; width = 4k + min(4k, ⌈P/8⌉), fixed by (k, P)."""

    name, unbiased, keyed = "top_k", False, False
    Params = SparseParams

    def _bitmap(self, numel):
        return -(-numel // 8) < 4 * self.k_of(numel)

    def width(self, numel):
        k = self.k_of(numel)
        return 4 * k + min(4 * k, -(-numel // 8))

    def sparse(self, x, keys=None, copy=None):
        return kernels.top_k(x, self.k_of(x.shape[1]), copy)

    def compress(self, x, keys=None):
        idx, values = self.sparse(x, keys)
        return _dense(values, idx, x.shape[1])

    def encode(self, x, keys=None):
        idx, values = self.sparse(x, keys)
        if self._bitmap(x.shape[1]):
            mask = torch.zeros_like(x, dtype=torch.bool).scatter(1, idx, True)
            tail = pack_bits(mask, 1)
        else:
            tail = _to_bytes(idx.int())
        return torch.cat([_to_bytes(values.float()), tail], dim=1)

    def decode(self, payload, keys, numel, dtype=torch.float32):
        k = self.k_of(numel)
        values = _from_bytes(payload[:, :4 * k], torch.float32).to(dtype)
        if not self._bitmap(numel):
            return _dense(values, _from_bytes(payload[:, 4 * k:], torch.int32).long(), numel)
        out = values.new_zeros(payload.shape[0], numel)
        out[unpack_bits(payload[:, 4 * k:], 1, numel).bool()] = values.reshape(-1)
        return out  # a boolean mask fills row by row, each row in ascending index order


@register_compressor
class RandK(_Sparse):
    """Random-k sparsification (Stich, Cordonnier & Jaggi, NeurIPS 2018): k distinct
    coordinates drawn uniformly per row (the k smallest of 62-bit hashes of (key, j)), kept
    and, with ``scaled`` (default), multiplied by P/k so that E[Q(x)] = x, with per-coordinate
    variance x_j²(P/k − 1); unscaled, E[Q(x)] = (k/P)·x (``unbiased`` is then False). The
    coordinates depend only on the key and P, not on x or its dtype.

    Wire: only the k (scaled) values as float32 in ascending index order, the receiver
    regenerating the indices from the shared key; width = 4k."""

    name, unbiased = "rand_k", True

    @dataclass(frozen=True)
    class Params(SparseParams):
        scaled: bool = True
        rules: ClassVar = {"scaled": _BOOLEAN}

    def setup(self):
        super().setup()
        self.scaled = self.unbiased = bool(self.scaled)

    def width(self, numel):
        return 4 * self.k_of(numel)

    def _indices(self, keys, numel, device):
        hashes = _stream(keys, numel, 62, device)
        idx = hashes.topk(self.k_of(numel), dim=1, largest=False).indices
        return idx.sort(dim=1).values

    def _values(self, x, idx, copy=None):
        values = x.gather(1, idx) if copy is None else x.gather(1, idx) - copy.gather(1, idx)
        return values * (x.shape[1] / idx.shape[1]) if self.scaled else values

    def sparse(self, x, keys, copy=None):
        idx = self._indices(keys, x.shape[1], x.device)
        return idx, self._values(x, idx, copy)

    def compress(self, x, keys):
        idx, values = self.sparse(x, keys)
        return _dense(values, idx, x.shape[1])

    def encode(self, x, keys):
        return _to_bytes(self._values(x, self._indices(keys, x.shape[1], x.device)).float())

    def decode(self, payload, keys, numel, dtype=torch.float32):
        values = _from_bytes(payload, torch.float32).to(dtype)
        return _dense(values, self._indices(keys, numel, payload.device), numel)


@register_compressor
class QSGD(Compressor):
    """QSGD stochastic quantization (Alistarh et al., "QSGD: Communication-Efficient SGD via
    Gradient Quantization and Encoding", NeurIPS 2017) with s = ``levels`` (default 4):
    Q_s(x)_j = ‖x‖₂ · sgn(x_j) · ξ_j(x, s) / s, where ξ_j = ℓ + 1 with probability
    s|x_j|/‖x‖₂ − ℓ and ℓ otherwise, ℓ = ⌊s|x_j|/‖x‖₂⌋ (the uniform is element j of the
    row's key stream). Unbiased, Var(Q_j) = (‖x‖₂/s)² p_j(1 − p_j) ≤ (‖x‖₂/s)²/4.

    Wire: ‖x‖₂ as float32, then per coordinate a code (ξ_j << 1) | [x_j < 0] of
    1 + b bits, b = ⌈log2(s + 1)⌉, packed (:func:`pack_bits`);
    width = 4 + ⌈P(1 + b)/8⌉. This is a fixed-width packing; the paper's Elias coding of
    the levels would be shorter. A zero row encodes to norm 0 and all-zero levels."""

    name, unbiased = "qsgd", True

    @dataclass(frozen=True)
    class Params(Params):
        levels: int = 4  # s
        rules: ClassVar = {"levels": _COUNT}

    def setup(self):
        self.levels = int(self.levels)

    def _code_bits(self):
        return 1 + self.levels.bit_length()  # bit_length(s) = ⌈log2(s + 1)⌉

    def width(self, numel):
        return 4 + -(-numel * self._code_bits() // 8)

    def _quantize(self, x, keys):
        """(‖x‖ [n, 1] in x.dtype, x < 0, ξ int64 [n, P])."""
        s = self.levels
        norm = torch.linalg.vector_norm(x, dim=1, keepdim=True)
        r = s * x.abs() / torch.where(norm > 0, norm, torch.ones_like(norm))
        low = r.floor()
        uniform = _stream(keys, x.shape[1], 53, x.device).double() * 2.0 ** -53
        up = uniform < (r - low).double()  # float64 so float32 and float64 x draw alike
        return norm, x < 0, (low.long() + up).clamp(max=s)

    def _value(self, norm, negative, xi):
        return norm * torch.where(negative, -xi, xi).to(norm.dtype) / self.levels

    def compress(self, x, keys):
        return self._value(*self._quantize(x, keys))

    def encode(self, x, keys):
        norm, negative, xi = self._quantize(x, keys)
        codes = pack_bits((xi << 1) | negative, self._code_bits())
        return torch.cat([_to_bytes(norm.float()), codes], dim=1)

    def decode(self, payload, keys, numel, dtype=torch.float32):
        norm = _from_bytes(payload[:, :4], torch.float32).to(dtype)
        codes = unpack_bits(payload[:, 4:], self._code_bits(), numel)
        return self._value(norm, (codes & 1).bool(), codes >> 1)


@register_compressor
class Sign(Compressor):
    """Scaled sign compression of EF-SignSGD (Karimireddy et al., "Error Feedback Fixes
    SignSGD and other Gradient Compression Schemes", ICML 2019):
    C(x) = (‖x‖₁/d) · sign(x), d = P, with sign(0) := +1 so one bit per coordinate
    suffices; biased.

    Wire: the scale ‖x‖₁/P as float32, then one bit per coordinate, 1 for x_j < 0
    (:func:`pack_bits`); width = 4 + ⌈P/8⌉."""

    name, unbiased, keyed = "sign", False, False

    def width(self, numel):
        return 4 + -(-numel // 8)

    def compress(self, x, keys=None):
        scale = x.abs().mean(dim=1, keepdim=True)
        return torch.where(x < 0, -scale, scale)

    def encode(self, x, keys=None):
        scale = x.abs().mean(dim=1, keepdim=True).float()
        return torch.cat([_to_bytes(scale), pack_bits(x < 0, 1)], dim=1)

    def decode(self, payload, keys, numel, dtype=torch.float32):
        scale = _from_bytes(payload[:, :4], torch.float32).to(dtype)
        return torch.where(unpack_bits(payload[:, 4:], 1, numel).bool(), -scale, scale)


def build_compressor(spec: dict, key: str = "topology.compression",
                     also: tuple[str, ...] = ()) -> Compressor:
    """The compressor a config mapping names, e.g. ``{compressor: top_k, fraction: 0.01}``;
    a bad name, an unknown parameter or a bad value raises a one-sentence
    :class:`GossipflError` naming ``key.param`` (``also``: the other keys the mapping may
    hold, listed with the compressor's and suggested alike)."""
    if not isinstance(spec, dict):
        raise GossipflError(f"{key}: must be a mapping with a 'compressor' name, got {spec!r}.")
    if "compressor" not in spec:
        raise GossipflError(f"{key}.compressor: missing; choose one of: "
                            f"{', '.join(sorted(COMPRESSORS))}.")
    name = spec["compressor"]
    if not isinstance(name, str) or name not in COMPRESSORS:
        raise unknown_choice(f"{key}.compressor", name, COMPRESSORS)
    cls = COMPRESSORS[name]
    given = {p: v for p, v in spec.items() if p != "compressor"}
    return cls(typed(cls.Params, given, key, "compressor", name, also))
