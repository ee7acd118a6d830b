"""An attack of one's own (docs/design.md, "Adding a piece"): mimic, with a parameter of its
own.

Every Byzantine client sends, to every receiver, the true message of one honest client, the
``target`` t:

    m_{j→i} = z_t    for every j ∈ B and every receiver i.

The mimic attack of Karimireddy, He & Jaggi (ICLR 2022, "Byzantine-Robust Learning on
Heterogeneous Datasets via Bucketing"): on heterogeneous data, over-representing one honest
client's direction biases the aggregate without any outlying message. The paper chooses t by
a warm-up heuristic (the direction of largest variance); here t is a parameter, the simplest
mimic. It sees every honest message (an omniscient attacker). A config names it with its
parameter, checked before training (``byzantine.target: must be an integer >= 0, got
-1.``):

    byzantine: {clients: [1, 4], attack: mimic, target: 0}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.errors import GossipflError
from gossipfl.plugins import Params
from gossipfl.trust import Attack, register_attack
from gossipfl.validation import Rule

CLIENT = Rule(lambda v: not isinstance(v, bool) and v >= 0 and int(v) == v, "an integer >= 0")


@register_attack
class Mimic(Attack):
    name, paper = "mimic", "Karimireddy, He & Jaggi 2022, mimic (copies an honest client)"

    @dataclass(frozen=True)
    class Params(Params):
        target: int = 0  # t, an honest client's id
        rules: ClassVar = {"target": CLIENT}

    def __init__(self, clients, byzantine, params=None, /, **given):
        super().__init__(clients, byzantine, params, **given)
        if self.target >= clients:  # a rule between the parameter and the run: at build time
            raise GossipflError(f"byzantine.target: must be a client id below data.clients "
                                f"= {clients}, got {self.target}.")

    def craft(self, scene):
        # one message for every receiver: [1, 1, P], broadcast over [n, d + 1, P]
        return scene.step.z[self.target][None, None]
