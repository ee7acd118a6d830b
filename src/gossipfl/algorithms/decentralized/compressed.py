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

    @cached_property
    def compressor(self) -> Compressor:
        """C, built once from the (fixed) parameters."""
        return self.params.build()

    def mixing_check(self, topology):
        refusal, caution = super().mixing_check(topology)
        if refusal is None and topology is not None and topology.time_varying:
            refusal = (f"topology.name: algorithm {self.name} keeps each client's public copy "
                       f"at its neighbours, which needs a fixed graph, but the {topology.name} "
                       "topology changes every round; use a static one (ring, k_regular, "
                       "exponential, ...).")
        return refusal, caution
