"""A gossip stage of one's own (docs/design.md, "The gossip pipeline"): relaxed gossip, with a
parameter of its own.

Each gossip step moves every client a step γ towards its neighbours' mix instead of all the
way,

    x = z + γ (W_t z − z) = ((1 − γ) I + γ W_t) z,

the consensus step of CHOCO-Gossip (Koloskova, Stich & Jaggi, ICML 2019, Algorithm 1) with
exact messages; γ = 1 is plain gossip. A stage has one method over the messages, ``mix(z, t,
steps, channel, link)``: ``link.mix`` is the rest of the pipeline (robust aggregation,
compression, at the end W_t z with its bytes), so the stage composes with them. What it needs
of the run (:class:`~gossipfl.topology.stages.Needs`: an algorithm whose gossip is x ← W x,
the synchronous order) is checked by :mod:`gossipfl.assembly.compat` before training. A config asks
for it in ``topology.stages``, its parameter checked (``topology.stages[0].gamma: must be in
(0, 1], got 0.``):

    topology: {name: ring, stages: [{stage: relaxed, gamma: 0.5}]}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.plugins import Params
from gossipfl.topology import Stage, register_stage
from gossipfl.validation import FRACTION


@register_stage
class Relaxed(Stage):
    kind = "relaxed"
    form = "relaxed"  # an operation that mixes without the pipeline (push-sum) is refused

    @dataclass(frozen=True)
    class Params(Params):
        gamma: float = 0.5  # γ
        rules: ClassVar = {"gamma": FRACTION}

    def mix(self, z, t, steps, channel, link):
        for _ in range(steps):
            z = z + self.gamma * (link.mix(z, t, 1, channel) - z)
        return z
