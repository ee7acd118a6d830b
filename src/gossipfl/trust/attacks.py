"""Byzantine attacks (``byzantine: {clients: ..., attack: <name>, <parameters>}``).

The Byzantine clients B run the configured algorithm like everyone else (their rows are
plausible models), but in every gossip step each message m_{j→i} they send to an honest
receiver i is the attack's instead of their z_j. Honest clients send z_j and aggregate with
``topology.robust``'s rule. In receiver i's neighbourhood, H_i are its honest senders
(itself included) and B_i = N_i ∩ B its Byzantine neighbours.

Each attack says in its docstring what it sees (its knowledge model): its own row only; the
messages of the receiver's honest neighbourhood H_i (``view: neighbourhood``, the attack per
receiver); every honest client's message (``view: all``, an omniscient attacker, the same
message to every receiver); or only what the Byzantine sender itself receives (``view: own``,
the non-omniscient attacker of Baruch et al.: sender j's statistics over its own z_j and its
in-neighbours' true messages, the same message to all of j's receivers). A per-receiver attack
sends the same message from all of B_i.

- ``none``: the clients are marked Byzantine but send their true rows (a baseline);
- ``sign_flip``: −s z_j;
- ``gaussian``: s ξ, ξ ~ N(0, I) (Blanchard et al., NeurIPS 2017);
- ``alie``: μ − z σ, "A Little Is Enough" (Baruch, Baruch & Goldberg, NeurIPS 2019);
- ``ipm``: −ε μ, inner product manipulation (Xie, Koyejo & Gupta, UAI 2020);
- ``dissensus``: z_i − ε Σ_{j∈H_i} w_ij (z_j − z_i) / Σ_{k∈B_i} w_ik (He, Karimireddy & Jaggi
  2022);
- ``spectral``: z_i + ε u_i Σ_{k∈H} u_k z_k, u the Fiedler vector of the honest graph, ε
  searched per receiver (Gaucher, Dieuleveut & Hendrikx 2025); ``direction: random``, a
  control, pushes along a random direction of the same norm instead;
- ``label_flip``: data poisoning; the Byzantine clients train on labels c ↦ C − 1 − c and
  send their rows unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from gossipfl.common.rng import torch_generator
from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.plugins import Registry
from gossipfl.validation import Params, Rule, one_of, typed

_NUMBER = Rule(lambda v: not isinstance(v, (bool, str)) and float(v) == v, "a number", quoted=True)
_POSITIVE = Rule(lambda v: not isinstance(v, (bool, str)) and v > 0, "a number > 0", quoted=True)
_VIEW = one_of("neighbourhood", "all", "own")
_AMPLITUDE = Rule(lambda v: v == "search" or (not isinstance(v, (bool, str)) and float(v) == v),
                  "a number or 'search'", quoted=True)

ATTACKS: Registry = Registry("attack", "byzantine.attack")


def register_attack(cls: type[Attack]) -> type[Attack]:
    """Class decorator: make ``cls`` available as ``byzantine.attack: <cls.name>``."""
    from gossipfl.plugins import check_params_class

    check_params_class(cls, f"attack {cls.name!r}")
    return ATTACKS.add(cls.name, cls)


@dataclass
class Step:
    """What one gossip step shows every attacker: all true messages ``z [M, P]``, the
    Byzantine ids, the honest mask ``[M]``, the step's stream key (round, call, step), the
    round's mixing matrix W ``[M, M]`` (read-only NumPy; None for a topology built as edges,
    where an attack declaring ``reads_matrix`` is refused), the honest receivers' robust rule,
    the round's neighbourhoods (``hoods``: the buckets of :mod:`gossipfl.trust.neighbourhoods`,
    every client's own id and in-neighbours), and a cache for what the step's buckets share (the
    omniscient mean, the noise)."""

    z: Tensor
    byzantine: Tensor
    honest: Tensor
    seed: int
    key: tuple
    matrix: np.ndarray | None = None
    rule: Any = None
    hoods: list | None = None
    cache: dict = field(default_factory=dict)

    def honest_moments(self) -> tuple[Tensor, Tensor]:
        """μ and σ (population) of every honest message, ``[1, 1, P]`` each."""
        if "moments" not in self.cache:
            rows = self.z[self.honest]
            self.cache["moments"] = (rows.mean(dim=0)[None, None],
                                     rows.std(dim=0, correction=0)[None, None])
        return self.cache["moments"]

    def own_moments(self) -> tuple[Tensor, Tensor]:
        """μ_j and σ_j (population) ``[M, P]`` each, on the Byzantine rows j: over what j itself
        holds in this step, its own z_j and the true messages z_k of its in-neighbours
        k ∈ N_j (honest or Byzantine; a Byzantine receiver aggregates true messages), from
        ``hoods``; zero on the honest rows."""
        if "own" not in self.cache:
            mean, std = torch.zeros_like(self.z), torch.zeros_like(self.z)
            for bucket in self.hoods:
                pick = ~self.honest[bucket.receivers]
                if bool(pick.any()):
                    held = self.z[bucket.senders[pick]]  # [nb, d + 1, P]
                    ids = bucket.receivers[pick]
                    mean[ids] = held.mean(dim=1)
                    std[ids] = held.std(dim=1, correction=0)
            self.cache["own"] = (mean, std)
        return self.cache["own"]


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
        """μ and σ as the ``view`` sees them: H_i's ``[n, 1, P]`` (``neighbourhood``), every
        honest client's ``[1, 1, P]`` (``all``), or each sender's own ``[n, d + 1, P]``
        (``own``: slot (i, j) holds sender j's, :meth:`Step.own_moments`)."""
        if view == "own":
            mean, std = self.step.own_moments()
            return mean[self.senders], std[self.senders]
        return self.neighbourhood_moments() if view == "neighbourhood" \
            else self.step.honest_moments()


class Attack:
    """A Byzantine attack. ``Params``: the parameters a config may give it, declared once (a
    frozen :class:`~gossipfl.validation.Params` dataclass: fields, defaults, rules); an
    attack is built from n = M, f = |B| and them (``ALIE(m, f, params)``, as
    :func:`build_attack` does; in Python also ``ALIE(m, f, z=1.0)``, unchecked) and reads
    each as an attribute (``self.z``). :meth:`craft` returns the messages, broadcastable to
    ``[n, d + 1, P]`` (``[n, 1, P]``: one per receiver), or None (messages unchanged)."""

    name: ClassVar[str]
    paper: ClassVar[str]
    Params: ClassVar[type[Params]] = Params  # none
    #: old parameter names refused with a hint: {old: new}
    renamed: ClassVar[dict[str, str]] = {}
    poisons_labels: ClassVar[bool] = False
    #: reads the round's dense W (``Step.matrix``): refused on a topology built as edges
    reads_matrix: ClassVar[bool] = False

    def __init__(self, clients: int, byzantine: int, params: Params | None = None,
                 /, **given: Any):
        self.clients, self.byzantine = clients, byzantine  # n = M and f = |B|
        self.params = params if params is not None else self.Params(**given)
        vars(self).update(self.params.given())

    @property
    def sends(self) -> bool:
        """Whether the attack replaces messages (label flipping does not)."""
        return type(self).craft is not Attack.craft

    def craft(self, scene: Scene) -> Tensor | None:
        return None


@register_attack
class NoAttack(Attack):
    """No attack: the clients are marked Byzantine (the ``honest_*`` columns leave them out,
    the honest-connectivity check and a rule's oracle inputs see them) but send their true
    rows, as honest clients do; the baseline of an attacked run. Sees nothing."""

    name, paper = "none", "no attack: the Byzantine clients send their true rows (a baseline)"


@register_attack
class SignFlip(Attack):
    """Sign flipping: m_{j→i} = −s z_j. Sees its own row only."""

    name, paper = "sign_flip", "sign flipping of the own message, m = −s z_j"

    @dataclass(frozen=True)
    class Params(Params):
        scale: float = 1.0  # s
        rules: ClassVar = {"scale": _POSITIVE}

    scale: float

    def craft(self, scene):
        return -self.scale * scene.messages


@register_attack
class Gaussian(Attack):
    """Gaussian (Blanchard et al., NeurIPS 2017): m_{j→i} = s ξ_j, ξ_j ~ N(0, I) drawn per
    sender and gossip step from (seed, "byzantine", round, call, step), the same to all its
    receivers; ``scale`` s is the noise's standard deviation (the attack's magnitude, the key
    ``sign_flip`` uses too; the old ``sigma`` is refused with a hint). Sees nothing."""

    name, paper = "gaussian", "Blanchard et al. 2017, Gaussian Byzantine vectors"
    renamed: ClassVar[dict[str, str]] = {"sigma": "scale"}

    @dataclass(frozen=True)
    class Params(Params):
        scale: float = 200.0  # s
        rules: ClassVar = {"scale": _POSITIVE}

    scale: float

    def craft(self, scene):
        step = scene.step
        if "noise" not in step.cache:
            z = step.z
            gen = torch_generator(step.seed, "byzantine", *step.key, device=z.device)
            noise = torch.zeros_like(z)
            noise[step.byzantine] = self.scale * torch.randn(
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
    coordinate-wise, μ and σ the mean and (population) standard deviation of the messages it
    sees: H_i's honest ones (``view: neighbourhood``, default), every honest client's
    (``view: all``, an omniscient attacker), or, with ``view: own``, what the sender j itself
    holds, its z_j and its in-neighbours' messages (the paper's non-omniscient attacker, which
    estimates μ and σ from the corrupted workers' own data; here from what a Byzantine client
    receives in gossip), so that m_{j→i} = μ_j − z σ_j for every receiver i of j. ``z``
    default: the paper's z_max from n = M clients and f = |B| (:func:`alie_z`)."""

    name, paper = "alie", "Baruch, Baruch & Goldberg 2019, A Little Is Enough"

    @dataclass(frozen=True)
    class Params(Params):
        z: float | None = None  # None: z_max
        view: str = "neighbourhood"
        rules: ClassVar = {"z": _NUMBER.or_none(), "view": _VIEW}

    z: float | None
    view: str

    def z_max(self) -> float:
        return alie_z(self.clients, self.byzantine) if self.z is None else float(self.z)

    def craft(self, scene):
        mean, std = scene.moments(self.view)
        return mean - self.z_max() * std


@register_attack
class IPM(Attack):
    """Inner product manipulation (Xie, Koyejo & Gupta, UAI 2020): m_{→i} = −ε μ, μ the mean
    of the messages it sees (``view`` as for ``alie``: the receiver's H_i by default, every
    honest client's with ``all``, and with ``own`` the sender's own z_j and in-neighbours',
    m_{j→i} = −ε μ_j; the paper's attacker knows the honest mean, ``own`` estimates it)."""

    name, paper = "ipm", "Xie, Koyejo & Gupta 2020, Fall of Empires (inner product manipulation)"

    @dataclass(frozen=True)
    class Params(Params):
        epsilon: float = 0.1  # ε
        view: str = "neighbourhood"
        rules: ClassVar = {"epsilon": _NUMBER, "view": _VIEW}

    epsilon: float
    view: str

    def craft(self, scene):
        return -self.epsilon * scene.moments(self.view)[0]


@register_attack
class Dissensus(Attack):
    """Dissensus (He, Karimireddy & Jaggi 2022): every Byzantine neighbour of i sends
    m_{→i} = z_i − ε Σ_{j∈H_i} w_ij (z_j − z_i) / Σ_{k∈B_i} w_ik, so that under the mean
    x_i = z_i + (1 − ε) Σ_{j∈H_i} w_ij (z_j − z_i): ε > 1 pushes i away from its honest
    neighbours. Sees the receiver's neighbourhood and W."""

    name, paper = "dissensus", "He, Karimireddy & Jaggi 2022, dissensus attack"

    @dataclass(frozen=True)
    class Params(Params):
        epsilon: float = 1.5  # ε
        rules: ClassVar = {"epsilon": _NUMBER}

    epsilon: float

    def craft(self, scene):
        own = scene.messages[:, :1]
        honest = (scene.weights * scene.honest).unsqueeze(1)
        pull = torch.bmm(honest, scene.messages - own)  # [n, 1, P]
        weight = (scene.weights * ~scene.honest).sum(dim=1).clamp_min(1e-30)
        return own - self.epsilon * pull / weight[:, None, None]


def fiedler_vector(W: np.ndarray, honest: np.ndarray) -> np.ndarray:
    """``[M]`` u: on the honest clients H, the unit eigenvector of the second smallest
    eigenvalue of the honest graph's Laplacian L_H = diag(A 1) − A, A the off-diagonal part of
    (W_HH + W_HHᵀ)/2 (W_HH itself for a symmetric W); 0 on the Byzantine clients (and
    everywhere with a single honest client). u is defined up to its sign, which the spectral
    attack's messages do not depend on; where that eigenvalue is repeated, u is the vector of
    its eigenspace that LAPACK's symmetric solver returns."""
    from gossipfl.trust.breakdown import honest_laplacian

    ids = np.flatnonzero(honest)
    u = np.zeros(len(honest))
    if len(ids) < 2:
        return u
    u[ids] = np.linalg.eigh(honest_laplacian(W, honest))[1][:, 1]
    return u


#: the line search of ``spectral``'s ``epsilon: search``: evaluations, first step, contraction
SEARCH_EVALS, SEARCH_STEP, SEARCH_RATIO = 16, 1.0, 0.8


def line_search(score: Callable[[Tensor], Tensor], like: Tensor, evals: int = SEARCH_EVALS,
                step: float = SEARCH_STEP, ratio: float = SEARCH_RATIO) -> Tensor:
    """``[n]`` a best-effort maximizer ε ≥ 0 of each row's ``score(ε [n]) -> [n]``, by
    exploration, all rows at once (``like [n]``: the dtype and device). From ε = 0 a row
    grows: it proposes best + s and doubles s while that improves; at its first failure s
    shrinks by ``ratio`` and the row contracts: it proposes (its last proposal) + s if that
    is below its best, else (its last proposal) − s (halved back towards the last proposal
    while negative), keeps a proposal that improves, and shrinks s by ``ratio`` every time.
    ``evals`` evaluations of ``score`` in all, the first at ε = 0 (the line search of the
    EPFL Byzantine-learning code, which Gaucher et al.'s code runs with 16)."""
    best = torch.zeros_like(like)
    best_score = score(best)
    proposal, size = best.clone(), torch.full_like(like, step)
    growing = torch.ones_like(like, dtype=torch.bool)
    for _ in range(evals - 1):
        back = ~growing & (proposal >= best)
        below = torch.where(back, proposal - size, proposal)
        for _ in range(64):  # proposal > 0 where back, so a few halvings reach [0, proposal]
            if not bool((below < 0).any()):
                break
            below = torch.where(below < 0, (below + proposal) / 2, below)
        proposal = torch.where(growing, best + size,
                               torch.where(back, below.clamp_min(0.0), proposal + size))
        value = score(proposal)
        better = value > best_score
        best = torch.where(better, proposal, best)
        best_score = torch.where(better, value, best_score)
        size = torch.where(growing & better, size * 2, size * ratio)
        growing &= better
    return best


@register_attack
class Spectral(Attack):
    """Spectral heterogeneity (Gaucher, Dieuleveut & Hendrikx, ICML 2025, the authors'
    ``spectral`` attack): every Byzantine neighbour of honest i sends

        m_{→i} = z_i + ε u_i Σ_{k∈H} u_k z_k,

    u the Fiedler vector of the honest graph (:func:`fiedler_vector`, from the round's W):
    since u ⟂ 1, Σ_k u_k z_k is the honest models' disagreement along the graph's slowest
    mode, and i is pushed along it on its own side of the graph's sparsest cut. With
    ``epsilon`` a number, that ε for every receiver; with ``search`` (default, as the authors'
    experiments), per receiver and gossip step the ε ≥ 0 that :func:`line_search` (16
    evaluations) finds to maximize ‖x_i(ε) − x̂_i‖², x_i(ε) the receiver's robust rule on
    these messages and x̂_i = z_i + γ Σ_{j∈H_i} w_ij (z_j − z_i) its honest gossip step (γ the
    rule's step, 1 for a rule without one). The authors' code means this objective but
    discards the subtraction of x̂_i, maximizing ‖x_i(ε)‖²; that is not reproduced.

    ``direction``: ``fiedler`` (default, the paper's attack) or ``random``, a control that
    is not from the paper: u_i Σ_{k∈H} u_k z_k is replaced by d_i = ‖u_i Σ_{k∈H} u_k z_k‖
    ξ_i / ‖ξ_i‖, ξ_i ~ N(0, I_P) drawn per receiver i and gossip step from (seed,
    "spectral", round, call, step), with the same ε (fixed, or searched along d_i). It keeps
    the push's size per receiver and step and the tuning, and drops only its direction, so
    it isolates what the Fiedler vector contributes.

    Stated from the authors' code (only the paper's abstract was readable here). Sees every
    honest message, the round's W (the honest graph) and, with ``search``, the honest
    receivers' rule and its parameters (it simulates their aggregation)."""

    name, paper = "spectral", ("Gaucher, Dieuleveut & Hendrikx 2025, spectral heterogeneity "
                               "(Fiedler vector of the honest graph)")
    reads_matrix = True

    @dataclass(frozen=True)
    class Params(Params):
        epsilon: float | str = "search"  # ε, or searched per receiver
        direction: str = "fiedler"  # u_i Σ_k u_k z_k, or a random one of its norm (a control)
        rules: ClassVar = {"epsilon": _AMPLITUDE, "direction": one_of("fiedler", "random")}

    epsilon: float | str
    direction: str

    def __init__(self, clients: int, byzantine: int, params: Params | None = None,
                 /, **given: Any):
        super().__init__(clients, byzantine, params, **given)
        self._fiedler: tuple[np.ndarray, np.ndarray] | None = None  # (W, u) of the last W

    def craft(self, scene):
        own = scene.messages[:, :1]
        direction = self.fiedler_push(scene)
        if self.direction == "random":
            direction = self.random_push(scene, direction)
        if self.epsilon != "search":
            return own + float(self.epsilon) * direction
        epsilon = line_search(lambda e: self.damage(scene, own + e[:, None, None] * direction),
                              own[:, 0, 0])
        return own + epsilon[:, None, None] * direction

    def fiedler_push(self, scene: Scene) -> Tensor:
        """``[n, 1, P]`` u_i Σ_{k∈H} u_k z_k for the scene's receivers."""
        step = scene.step
        if "fiedler" not in step.cache:
            if self._fiedler is None or self._fiedler[0] is not step.matrix:
                honest = step.honest.cpu().numpy()
                self._fiedler = (step.matrix, fiedler_vector(step.matrix, honest))
            u = torch.as_tensor(self._fiedler[1], device=step.z.device, dtype=step.z.dtype)
            step.cache["fiedler"] = (u, u @ step.z)
        u, mode = step.cache["fiedler"]
        return u[scene.senders[:, 0]][:, None, None] * mode[None, None]

    def random_push(self, scene: Scene, fiedler: Tensor) -> Tensor:
        """``[n, 1, P]`` d_i = ‖f_i‖ ξ_i / ‖ξ_i‖ for the scene's receivers, f = ``fiedler``
        (:meth:`fiedler_push`) and ξ_i ~ N(0, I_P) receiver i's row of the step's draw
        ``[M, P]`` from (seed, "spectral", round, call, step): a receiver's direction depends
        on its id and the step only, not on how the receivers are bucketed."""
        step = scene.step
        if "random" not in step.cache:
            z = step.z
            gen = torch_generator(step.seed, "spectral", *step.key, device=z.device)
            xi = torch.randn(z.shape, generator=gen, device=z.device, dtype=z.dtype)
            step.cache["random"] = xi / torch.linalg.vector_norm(xi, dim=1, keepdim=True)
        unit = step.cache["random"][scene.senders[:, 0]][:, None]
        return torch.linalg.vector_norm(fiedler, dim=2, keepdim=True) * unit

    def damage(self, scene: Scene, crafted: Tensor) -> Tensor:
        """``[n]`` ‖x_i − x̂_i‖² with every Byzantine neighbour sending ``crafted [n, 1, P]``."""
        rule, byzantine = scene.step.rule, ~scene.honest
        messages = torch.where(byzantine.unsqueeze(2), crafted, scene.messages)
        own = scene.messages[:, :1]
        honest = (scene.weights * scene.honest).unsqueeze(1)
        ideal = own + getattr(rule, "gamma", 1.0) * torch.bmm(honest, scene.messages - own)
        return (rule.aggregate(messages, scene.weights, byzantine) - ideal[:, 0]).pow(2).sum(1)


@register_attack
class LabelFlip(Attack):
    """Label flipping (data poisoning): the Byzantine clients train honestly on their samples
    relabelled c ↦ C − 1 − c (C classes) and send their rows unchanged. Sees its own data."""

    name, paper = "label_flip", "label flipping, c -> C - 1 - c on the Byzantine clients' data"
    poisons_labels = True


def check_attack(name: Any, params: dict, key: str = "byzantine") -> type[Attack]:
    """The attack class of ``name``, its parameters checked: one sentence naming
    ``key.param`` for a missing or unknown attack, an unknown or renamed parameter or a bad
    value. The attack is required: a default (once ``sign_flip``) would be an experiment's
    main variable chosen silently, and ``none`` a silently honest federation."""
    cls, _ = attack_params(name, params, key)
    return cls


def build_attack(name: Any, params: dict, clients: int, byzantine: int,
                 key: str = "byzantine") -> Attack:
    """The attack ``name`` on n = ``clients`` clients of which f = ``byzantine`` are
    Byzantine, from the parameters a config gives it (checked as :func:`check_attack`)."""
    cls, typed_params = attack_params(name, params, key)
    return cls(clients, byzantine, typed_params)


def attack_params(name: Any, params: dict, key: str = "byzantine"
                  ) -> tuple[type[Attack], Params]:
    """The attack class of ``name`` and its typed parameters (:func:`check_attack`)."""
    if name is None:
        raise GossipflError(f"{key}.attack: required with {key}.clients; name the attack "
                            f"({', '.join(ATTACKS)}), or none for Byzantine clients that "
                            f"send their true rows (a baseline).")
    if not isinstance(name, str) or name not in ATTACKS:
        raise unknown_choice(f"{key}.attack", name, ATTACKS)
    cls = ATTACKS[name]
    for old, value in params.items():
        if old in cls.renamed:
            new = cls.renamed[old]
            raise GossipflError(f"{key}.{old}: attack {name} calls this parameter {new} now "
                                f"(the attack's magnitude, one name across attacks), so "
                                f"write {new}: {value!r} instead.")
    return cls, typed(cls.Params, params, key, "attack", name)


__all__ = [
    "ALIE",
    "ATTACKS",
    "IPM",
    "Attack",
    "Dissensus",
    "Gaussian",
    "LabelFlip",
    "NoAttack",
    "Scene",
    "SignFlip",
    "Spectral",
    "Step",
    "alie_z",
    "attack_params",
    "build_attack",
    "check_attack",
    "fiedler_vector",
    "line_search",
    "register_attack",
]
