"""Byzantine attacks (``byzantine: {clients: ..., attack: <name>, <parameters>}``).

The Byzantine clients B run the configured algorithm like everyone else (their rows are
plausible models), but in every gossip step each message m_{j→i} they send to an honest
receiver i is the attack's instead of their z_j. Honest clients send z_j and aggregate with
``topology.robust``'s rule. In receiver i's neighbourhood, H_i are its honest senders
(itself included) and B_i = N_i ∩ B its Byzantine neighbours.

Each attack says in its docstring what it sees (its knowledge model): its own row only; the
messages of the receiver's honest neighbourhood H_i (``view: neighbourhood``, the attack per
receiver); or every honest client's message (``view: all``, an omniscient attacker, the same
message to every receiver). A per-receiver attack sends the same message from all of B_i.

- ``sign_flip``: −s z_j;
- ``gaussian``: N(0, σ² I) (Blanchard et al., NeurIPS 2017);
- ``alie``: μ − z σ, "A Little Is Enough" (Baruch, Baruch & Goldberg, NeurIPS 2019);
- ``ipm``: −ε μ, inner product manipulation (Xie, Koyejo & Gupta, UAI 2020);
- ``dissensus``: z_i − ε Σ_{j∈H_i} w_ij (z_j − z_i) / Σ_{k∈B_i} w_ik (He, Karimireddy & Jaggi
  2022);
- ``label_flip``: data poisoning; the Byzantine clients train on labels c ↦ C − 1 − c and
  send their rows unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, ClassVar

import torch
from torch import Tensor

from gossipfl.errors import unknown_choice
from gossipfl.rng import torch_generator
from gossipfl.validation import Rule, check_piece_params, one_of

_NUMBER = Rule(lambda v: not isinstance(v, (bool, str)) and float(v) == v, "a number", quoted=True)
_POSITIVE = Rule(lambda v: not isinstance(v, (bool, str)) and v > 0, "a number > 0", quoted=True)
_VIEW = one_of("neighbourhood", "all")

ATTACKS: dict[str, type[Attack]] = {}


def register_attack(cls: type[Attack]) -> type[Attack]:
    """Class decorator: make ``cls`` available as ``byzantine.attack: <cls.name>``."""
    from gossipfl.plugins import register_piece

    return register_piece(ATTACKS, cls, "attack")


@dataclass
class Step:
    """What one gossip step shows every attacker: all true messages ``z [M, P]``, the
    Byzantine ids, the honest mask ``[M]``, the step's stream key (round, call, step), and
    a cache for what the step's buckets share (the omniscient mean, the noise)."""

    z: Tensor
    byzantine: Tensor
    honest: Tensor
    seed: int
    key: tuple
    cache: dict = field(default_factory=dict)

    def honest_moments(self) -> tuple[Tensor, Tensor]:
        """μ and σ (population) of every honest message, ``[1, 1, P]`` each."""
        if "moments" not in self.cache:
            rows = self.z[self.honest]
            self.cache["moments"] = (rows.mean(dim=0)[None, None],
                                     rows.std(dim=0, correction=0)[None, None])
        return self.cache["moments"]


@dataclass
class Scene:
    """One bucket of receivers in a step: the true ``messages [n, d + 1, P]`` (column 0: the
    receiver's own), ``weights [n, d + 1]``, ``honest [n, d + 1]`` (the sender is honest),
    ``senders [n, d + 1]`` (ids)."""

    step: Step
    messages: Tensor
    weights: Tensor
    honest: Tensor
    senders: Tensor

    def neighbourhood_moments(self) -> tuple[Tensor, Tensor]:
        """μ_i and σ_i (population) over H_i, ``[n, 1, P]`` each."""
        w = self.honest.unsqueeze(2).to(self.messages.dtype)
        count = w.sum(dim=1, keepdim=True).clamp_min(1)
        mean = (w * self.messages).sum(dim=1, keepdim=True) / count
        var = (w * (self.messages - mean).pow(2)).sum(dim=1, keepdim=True) / count
        return mean, var.sqrt()

    def moments(self, view: str) -> tuple[Tensor, Tensor]:
        return self.neighbourhood_moments() if view == "neighbourhood" \
            else self.step.honest_moments()


class Attack:
    """A Byzantine attack; ``rules`` are the parameters a config may give (defaults: the
    class attributes). :meth:`craft` returns the messages, broadcastable to
    ``[n, d + 1, P]`` (``[n, 1, P]``: one per receiver), or None (messages unchanged)."""

    name: ClassVar[str]
    paper: ClassVar[str]
    rules: ClassVar[dict[str, Rule]] = {}
    poisons_labels: ClassVar[bool] = False

    def __init__(self, clients: int, byzantine: int, **params: Any):
        self.clients, self.byzantine = clients, byzantine  # n = M and f = |B|
        for key, value in params.items():
            setattr(self, key, value)

    @property
    def sends(self) -> bool:
        """Whether the attack replaces messages (label flipping does not)."""
        return type(self).craft is not Attack.craft

    def craft(self, scene: Scene) -> Tensor | None:
        return None


@register_attack
class SignFlip(Attack):
    """Sign flipping: m_{j→i} = −s z_j. Sees its own row only."""

    name, paper = "sign_flip", "sign flipping of the own message, m = −s z_j"
    rules: ClassVar[dict[str, Rule]] = {"scale": _POSITIVE}
    scale: float = 1.0

    def craft(self, scene):
        return -self.scale * scene.messages


@register_attack
class Gaussian(Attack):
    """Gaussian (Blanchard et al., NeurIPS 2017): m_{j→i} = σ ξ_j, ξ_j ~ N(0, I) drawn per
    sender and gossip step from (seed, "byzantine", round, call, step), the same to all its
    receivers. Sees nothing."""

    name, paper = "gaussian", "Blanchard et al. 2017, Gaussian Byzantine vectors"
    rules: ClassVar[dict[str, Rule]] = {"sigma": _POSITIVE}
    sigma: float = 200.0

    def craft(self, scene):
        step = scene.step
        if "noise" not in step.cache:
            z = step.z
            gen = torch_generator(step.seed, "byzantine", *step.key, device=z.device)
            noise = torch.zeros_like(z)
            noise[step.byzantine] = self.sigma * torch.randn(
                len(step.byzantine), z.shape[1], generator=gen, device=z.device, dtype=z.dtype)
            step.cache["noise"] = noise
        return step.cache["noise"][scene.senders]


def alie_z(n: int, f: int) -> float:
    """Baruch et al.'s z_max: s = ⌊n/2 + 1⌋ − f supporters needed (at least 1), z_max =
    Φ⁻¹((n − s)/n)."""
    s = max(math.floor(n / 2 + 1) - f, 1)
    return NormalDist().inv_cdf((n - s) / n)


@register_attack
class ALIE(Attack):
    """A Little Is Enough (Baruch, Baruch & Goldberg, NeurIPS 2019): m_{→i} = μ − z σ,
    coordinate-wise, μ and σ the mean and (population) standard deviation of the honest
    messages it sees: H_i's (``view: neighbourhood``, default) or every honest client's
    (``view: all``, the paper's omniscient attacker). ``z`` default: the paper's z_max from
    n = M clients and f = |B| (:func:`alie_z`)."""

    name, paper = "alie", "Baruch, Baruch & Goldberg 2019, A Little Is Enough"
    rules: ClassVar[dict[str, Rule]] = {"z": _NUMBER.or_none(), "view": _VIEW}
    z: float | None = None
    view: str = "neighbourhood"

    def z_max(self) -> float:
        return alie_z(self.clients, self.byzantine) if self.z is None else float(self.z)

    def craft(self, scene):
        mean, std = scene.moments(self.view)
        return mean - self.z_max() * std


@register_attack
class IPM(Attack):
    """Inner product manipulation (Xie, Koyejo & Gupta, UAI 2020): m_{→i} = −ε μ, μ the mean
    of the honest messages it sees (``view`` as for ``alie``; default the receiver's H_i)."""

    name, paper = "ipm", "Xie, Koyejo & Gupta 2020, Fall of Empires (inner product manipulation)"
    rules: ClassVar[dict[str, Rule]] = {"epsilon": _NUMBER, "view": _VIEW}
    epsilon: float = 0.1
    view: str = "neighbourhood"

    def craft(self, scene):
        return -self.epsilon * scene.moments(self.view)[0]


@register_attack
class Dissensus(Attack):
    """Dissensus (He, Karimireddy & Jaggi 2022): every Byzantine neighbour of i sends
    m_{→i} = z_i − ε Σ_{j∈H_i} w_ij (z_j − z_i) / Σ_{k∈B_i} w_ik, so that under the mean
    x_i = z_i + (1 − ε) Σ_{j∈H_i} w_ij (z_j − z_i): ε > 1 pushes i away from its honest
    neighbours. Sees the receiver's neighbourhood and W."""

    name, paper = "dissensus", "He, Karimireddy & Jaggi 2022, dissensus attack"
    rules: ClassVar[dict[str, Rule]] = {"epsilon": _NUMBER}
    epsilon: float = 1.5

    def craft(self, scene):
        own = scene.messages[:, :1]
        honest = (scene.weights * scene.honest).unsqueeze(1)
        pull = torch.bmm(honest, scene.messages - own)  # [n, 1, P]
        weight = (scene.weights * ~scene.honest).sum(dim=1).clamp_min(1e-30)
        return own - self.epsilon * pull / weight[:, None, None]


@register_attack
class LabelFlip(Attack):
    """Label flipping (data poisoning): the Byzantine clients train honestly on their samples
    relabelled c ↦ C − 1 − c (C classes) and send their rows unchanged. Sees its own data."""

    name, paper = "label_flip", "label flipping, c -> C - 1 - c on the Byzantine clients' data"
    poisons_labels = True


def check_attack(name: Any, params: dict, key: str = "byzantine") -> type[Attack]:
    """The attack class of ``name``, its parameters checked: one sentence naming
    ``key.param`` for an unknown attack, an unknown parameter or a bad value."""
    if not isinstance(name, str) or name not in ATTACKS:
        raise unknown_choice(f"{key}.attack", name, ATTACKS)
    cls = ATTACKS[name]
    check_piece_params(key, "attack", name, params, cls.rules)
    return cls


__all__ = [
    "ALIE",
    "ATTACKS",
    "IPM",
    "Attack",
    "Dissensus",
    "Gaussian",
    "LabelFlip",
    "Scene",
    "SignFlip",
    "Step",
    "alie_z",
    "check_attack",
    "register_attack",
]
