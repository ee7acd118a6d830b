"""Compressed gossip with public copies: CHOCO-Gossip (Koloskova, Stich & Jaggi, ICML 2019,
"Decentralized Stochastic Optimization and Gossip Algorithms with Compressed Communication",
Algorithm 2's consensus part) as one operation every decentralized algorithm can use.

Every client i keeps a public copy x̂_i of the vector it gossips, known to its neighbours
(they receive every change of it), and s_i = Σ_j w_ij x̂_j, the mix of its neighbours' public
copies. One gossip step of z, with the compression operator C and consensus step γ:

    q_i   = C(z_i − x̂_i)                      (the only message: client i sends q_i)
    x̂_i  ← x̂_i + q_i,    s_i ← s_i + Σ_j w_ij q_j
    x_i   = z_i + γ (s_i − x̂_i)               (= z_i + γ Σ_j w_ij (x̂_j − x̂_i))

with x̂⁰ = s⁰ = 0. Keeping s (the memory-efficient form of the paper's appendix) rather than
recomputing W x̂ is what a client can do with the messages it receives, and what the
distributed backend does; on a fixed W the two are equal (up to float rounding). With the
identity compressor and γ = 1 a step is x = W z, plain gossip.

**A fixed graph.** The public copies x̂_j live at j's neighbours, so CHOCO-Gossip is defined
for a static topology; a topology drawn anew every round is refused (one sentence, before
training).

**Without error feedback** (``error_feedback: false``, the naive scheme the CHOCO papers
measure against): each client sends C(z_i) itself and x_i = z_i + γ (Σ_j w_ij C(z_j) − C(z_i));
no public copies, and the compression error is never corrected.

**Where it applies.** ``topology.compression: {compressor: top_k, fraction: 0.01, gamma:
0.2}`` replaces every :meth:`~gossipfl.network.federation.Federation.gossip` of a decentralized
algorithm (DFedAvg, DFedSAM, OledFL, DFedCata, the tracking methods, the personalized ones on
their shared group) by this step. Each channel has its own public copies: a channel is the
variable the algorithm gossips (its ``gossip_channels``:
DSGT's ``x`` and ``tracker`` are two channels, Q gossip steps share one). Algorithms that
gossip otherwise (push-sum's ``sgp``, DisPFL's masked gossip), the sequential order and
centralized algorithms refuse it (:mod:`gossipfl.assembly.compat`, from this stage's
:class:`~gossipfl.topology.stages.Needs`); ``choco``, ``deepsqueeze`` and ``beer`` compress
their own messages (``algorithm.compressor``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from gossipfl.common.state import Namespace, gossip_namespace
from gossipfl.compression.compressors import Compressor, build_compressor
from gossipfl.errors import GossipflError
from gossipfl.topology.stages import Channel, Needs, Stage
from gossipfl.validation import BOOLEAN, FRACTION, Params, typed


@dataclass(frozen=True)
class CompressionParams(Params):
    """The keys of ``topology.compression`` besides ``compressor`` and the compressor's own
    parameters (its ``Params``): the consensus step γ, and whether the step keeps public
    copies (error feedback)."""

    gamma: float = 1.0  # γ
    error_feedback: bool = True
    rules: ClassVar = {"gamma": FRACTION, "error_feedback": BOOLEAN}


#: keys of ``topology.compression`` besides the compressor's own
GOSSIP_KEYS = tuple(CompressionParams.parameter_rules())


@dataclass
class ChocoGossip:
    """The compressed gossip step above with compressor C and consensus step γ (with
    ``error_feedback`` False: the naive step without public copies)."""

    compressor: Compressor
    gamma: float
    error_feedback: bool = True

    def step(self, wire, z: Tensor, hat: Tensor, mixed: Tensor, t: int, key: tuple
             ) -> tuple[Tensor, Tensor, Tensor]:
        """(x, x̂, s) after one step on ``z`` (``hat`` = x̂, ``mixed`` = s, updated in place)
        over ``wire`` (:class:`gossipfl.network.wire.Wire`: the compressed sends and their bytes);
        ``key`` names the channel for the compressor's randomness."""
        if not self.error_feedback:
            q, mixed_q = wire.send_compressed(z, t, self.compressor, key)
            return z + self.gamma * (mixed_q - q), hat, mixed
        return wire.publish(z, t, self.compressor, key, hat, mixed, self.gamma), hat, mixed


def build_choco(spec: Any, key: str = "topology.compression") -> ChocoGossip | None:
    """The ChocoGossip of a ``topology.compression`` mapping (None: no compression)."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise GossipflError(f"{key}: must be a mapping such as {{compressor: top_k, fraction: "
                            f"0.01, gamma: 0.2}}, got {spec!r}.")
    section = typed(CompressionParams, {k: v for k, v in spec.items() if k in GOSSIP_KEYS},
                    key, "compression", "choco")
    compressor = build_compressor({k: v for k, v in spec.items() if k not in GOSSIP_KEYS}, key,
                                  also=GOSSIP_KEYS)
    return ChocoGossip(compressor, section.gamma, section.error_feedback)


class Channels(Stage):
    """The compression stage of the gossip pipeline (``topology.compression``): each channel
    of the algorithm (:class:`~gossipfl.topology.stages.Channel`, the variable it gossips)
    has its own public copies (x̂, s). The copies live in the run's gossip namespace
    ``state`` (:func:`gossipfl.common.state.gossip_namespace`; a fresh one when none is given):
    ``"k.hat"`` / ``"k.mixed"`` for the channel declared k-th, this process's rows
    ``[M, n]``, made at the channel's first use. The compressor's streams are keyed by
    (k, round, step)."""

    kind = "compression"
    key = "topology.compression"
    form = "compressed"
    whole = False  # the messages are C(z − x̂)
    #: x̂ lives at the neighbours (a fixed graph), s = W x̂ is kept incrementally (the same W
    #: every round), a step is x ← W x (synchronous: every row's new public copy at once)
    needs = Needs(static_graph=True, same_w=True)

    def __init__(self, choco: ChocoGossip, state: Namespace | None = None):
        self.choco = choco
        self.state = gossip_namespace() if state is None else state

    def mix(self, z: Tensor, t: int, steps: int, channel: Channel, link) -> Tensor:
        """``steps`` compressed gossip steps of z on ``channel`` in round t."""
        self.claim(channel, t)
        name = str(channel.index)
        if f"{name}.hat" not in self.state:
            self.state[f"{name}.hat"] = torch.zeros_like(z)
            self.state[f"{name}.mixed"] = torch.zeros_like(z)
        hat, mixed = self.state[f"{name}.hat"], self.state[f"{name}.mixed"]
        if hat.shape != z.shape:
            raise GossipflError(f"topology.compression: gossip channel {channel.name} carried "
                                f"{hat.shape[1]} values per client and now {z.shape[1]}.")
        x = z
        for step in range(steps):
            x, hat, mixed = self.choco.step(link.wire, x, hat, mixed, t, (name, t, step))
        return x


__all__ = ["GOSSIP_KEYS", "Channels", "ChocoGossip", "CompressionParams", "build_choco"]
