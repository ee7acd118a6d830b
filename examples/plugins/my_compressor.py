"""A compressor of one's own (docs/design.md, "Adding a piece"): low-precision gossip, each
message's values rounded to 16 bits.

Q(x) = round_f(x), f = ``format``: ``float16`` (IEEE half: 10-bit mantissa, overflow to ±inf
past 65 504) or ``bfloat16`` (8-bit mantissa, float32's range); round to nearest, ties to
even. Deterministic (``keyed`` False) and biased. Wire: the P values in f, 2 bytes each;
width 2P. A config names it like gossipfl's own, with its parameter checked before training:

    topology: {compression: {compressor: half, format: bfloat16, gamma: 1.0}}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.compression import Compressor, register_compressor
from gossipfl.plugins import Params
from gossipfl.validation import one_of

FORMATS = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@register_compressor
class Half(Compressor):
    name, unbiased, keyed = "half", False, False

    @dataclass(frozen=True)
    class Params(Params):  # its parameters, declared once: fields, defaults, rules
        format: str = "bfloat16"
        rules: ClassVar = {"format": one_of(*FORMATS)}

    def setup(self):  # self.format is set (from Params)
        self.dtype = FORMATS[self.format]

    def width(self, numel):
        return 2 * numel

    def compress(self, x, keys=None):
        return x.to(self.dtype).to(x.dtype)

    def encode(self, x, keys=None):
        return x.to(self.dtype).contiguous().view(torch.uint8)

    def decode(self, payload, keys, numel, dtype=torch.float32):
        return payload.contiguous().view(self.dtype).to(dtype)
