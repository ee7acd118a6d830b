"""What the compressed-communication algorithms (``choco``, ``deepsqueeze``, ``beer``) share:
the compressor as flat parameters, e.g. ``{name: choco, compressor: top_k, fraction: 0.01,
gamma: 0.2}`` (gossipfl.compression: ``identity``, ``top_k`` / ``rand_k`` with ``k`` or
``fraction`` (default fraction 0.01), ``rand_k``'s ``scaled``, ``qsgd``'s ``levels``,
``sign``), and the consensus step γ (``gamma``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

from gossipfl.algorithms.base import Algorithm, Hyperparams
from gossipfl.compression.compressors import Compressor, build_compressor
from gossipfl.validation import FRACTION

DEFAULT_FRACTION = 0.01  # top_k / rand_k without k or fraction


@dataclass
class CompressedParams(Hyperparams):
    compressor: str = "top_k"
    k: int | None = None
    fraction: float | None = None
    scaled: bool | None = None
    levels: int | None = None
    gamma: float = 1.0  # γ, the consensus step
    rules: ClassVar = {"gamma": FRACTION}

    def spec(self) -> dict:
        """The ``build_compressor`` mapping of these parameters."""
        given = {"k": self.k, "fraction": self.fraction, "scaled": self.scaled,
                 "levels": self.levels}
        spec = {"compressor": self.compressor}
        spec.update({key: value for key, value in given.items() if value is not None})
        if self.compressor in ("top_k", "rand_k") and "k" not in spec and "fraction" not in spec:
            spec["fraction"] = DEFAULT_FRACTION
        return spec

    def build(self) -> Compressor:
        return build_compressor(self.spec(), key="algorithm")

    def validate(self) -> None:
        super().validate()
        self.build()


class CompressedAlgorithm(Algorithm):
    """Base of the algorithms that compress their own messages: their public copies live at
    each client's neighbours, so the graph must be fixed."""

    Params = CompressedParams
    own_compression = True
    static_graph = True  # the public copies live at the neighbours (gossipfl.assembly.compat)

    @cached_property
    def compressor(self) -> Compressor:
        """C, built once from the (fixed) parameters."""
        return self.params.build()

