"""Message compressors: Q(x) on a batch of rows, and the exact bytes each row costs on the
wire (:mod:`gossipfl.compression.compressors`)."""

from gossipfl.compression.compressors import (
    COMPRESSORS,
    QSGD,
    Compressor,
    Identity,
    RandK,
    Sign,
    TopK,
    build_compressor,
    pack_bits,
    register_compressor,
    unpack_bits,
)

__all__ = [
    "COMPRESSORS",
    "QSGD",
    "Compressor",
    "Identity",
    "RandK",
    "Sign",
    "TopK",
    "build_compressor",
    "pack_bits",
    "register_compressor",
    "unpack_bits",
]
