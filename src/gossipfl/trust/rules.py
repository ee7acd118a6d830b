"""Robust aggregation rules for gossip (``topology.robust: {rule: ..., <parameters>}``).

A rule replaces receiver i's mix Σ_j w_ij z_j of one gossip step by a robust function of the
messages it holds: its own z_i and m_{j→i} from each in-neighbour j ∈ N_i (d_i = |N_i|). Every
rule works on a bucket of receivers of one degree d (:mod:`gossipfl.trust.neighbourhoods`):
``messages [n, d + 1, P]`` (column 0: the receiver's own) and ``weights [n, d + 1]`` (w_ij),
batched over the receivers (a sort or a reduction over dimension 1).

- ``mean``: Σ_j w_ij m_{j→i}, today's W z (without attackers the Federation keeps its plain
  W z, the same bits);
- ``trimmed_mean`` (b), BRIDGE-T of Yang & Bajwa 2019: per coordinate, the b largest and b
  smallest neighbours' values are removed, the rest averaged with the receiver's own,
  (z_i + Σ_{kept} m_{j→i}) / (d_i − 2b + 1);
- ``median``, BRIDGE-M: the coordinate-wise median of {z_i} ∪ {m_{j→i}} (the mean of the two
  middle values when d_i + 1 is even);
- ``krum`` (b), BRIDGE-K: Krum (Blanchard et al. 2017) on the neighbourhood's n = d_i + 1
  vectors: the one whose n − b − 2 nearest others are closest in total squared distance;
- ``clipped_gossip`` (τ, or the radius rules practical, adaptive and oracle), He, Karimireddy &
  Jaggi 2022 (self-centered clipping): x_i = z_i + Σ_j w_ij CLIP(m_{j→i} − z_i, τ_i),
  CLIP(v, τ) = min(1, τ/‖v‖) v;
- ``cs_plus`` (b, γ), Gaucher, Dieuleveut & Hendrikx 2025 (CS+-RG): the same clipped sum with
  step γ and τ_i the (2b + 1)-th largest distance, so that the 2b farthest are clipped;
- ``gts`` (b or δ, γ), the same authors' GTS-RG: z_i + γ Σ_{j kept} w_ij (m_{j→i} − z_i) with
  the b farthest neighbours (or the farthest of weight δ) trimmed; NNA on the complete graph.

The last three are one framework (the authors' F-RG, :class:`RobustSum`): a step γ along
Σ_j ω_ij (m_{j→i} − z_i), the weights ω_ij clipped or trimmed by distance.

BRIDGE's screening ignores W (a uniform average over what is kept); clipping and the mean use
it. A rule that needs b undefined on some receiver's degree refuses before training
(:meth:`RobustRule.min_degree`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.plugins import Registry
from gossipfl.validation import Params, Rule, typed

_COUNT0 = Rule(lambda v: not isinstance(v, bool) and v >= 0 and int(v) == v, "an integer >= 0",
               quoted=True)
_RADIUS = Rule(lambda v: v in RADII or (not isinstance(v, (bool, str)) and v > 0),
               "a number > 0, 'inf' (no clipping), 'practical', 'adaptive' or 'oracle'",
               quoted=True)
_STEP = Rule(lambda v: not isinstance(v, (bool, str)) and v > 0, "a number > 0", quoted=True)
_DELTA = Rule(lambda v: not isinstance(v, bool) and 0 < v < 1, "in (0, 1)", quoted=True)
_TRIMMED = Rule(lambda v: v is None or v == "byzantine"
                or (not isinstance(v, (bool, str)) and 0 < v < 1),
                "in (0, 1), 'byzantine' (the receiver's Byzantine weight) or null", quoted=True)

RULES: Registry = Registry("robust rule", "topology.robust.rule")
#: clipped_gossip's radius rules besides a number: no clipping, the authors' experiments'
#: rule, the paper's radius with a given δ, the paper's radius with the true Byzantine weight
RADII = ("inf", "practical", "adaptive", "oracle")


def register_rule(cls: type[RobustRule]) -> type[RobustRule]:
    """Class decorator: make ``cls`` available as ``topology.robust.rule: <cls.name>``."""
    from gossipfl.plugins import check_params_class

    check_params_class(cls, f"robust rule {cls.name!r}")
    return RULES.add(cls.name, cls)


@dataclass(frozen=True)
class BParams(Params):
    """``b``: the Byzantine neighbours a rule tolerates (discards, clips or trims)."""

    b: int = 1
    rules: ClassVar = {"b": _COUNT0}


class RobustRule:
    """A robust aggregation rule. ``Params``: the parameters a config may give it, declared
    once (a frozen :class:`~gossipfl.validation.Params` dataclass: fields, defaults, rules);
    a rule is built from them (``TrimmedMean(params)``, as :func:`build_rule` does) or, in
    Python, from them by name (``TrimmedMean(b=2)``, unchecked), and reads each as an
    attribute (``self.b``)."""

    name: ClassVar[str]
    paper: ClassVar[str]
    Params: ClassVar[type[Params]] = Params  # none

    def __init__(self, params: Params | None = None, /, **given: Any):
        self.params = params if params is not None else self.Params(**given)
        vars(self).update(self.params.given())

    def min_degree(self) -> int:
        """The smallest in-degree d_i on which the rule is defined."""
        return 0

    def requirement(self) -> str:
        """The words of :meth:`min_degree`, for the refusal."""
        return ""

    def aggregate(self, messages: Tensor, weights: Tensor, byzantine: Tensor | None = None
                  ) -> Tensor:
        """``[n, P]``: each receiver's result from ``messages [n, d + 1, P]`` and
        ``weights [n, d + 1]``; ``byzantine [n, d + 1]`` (bool, or None: none) marks the
        senders that are Byzantine, which only a rule whose paper assumes it knows (the
        adaptive clipping's δ_i) may read."""
        raise NotImplementedError


class BNeighbours:
    """For a rule with ``b`` that discards (or clips) the ``trims``·b outermost neighbours:
    defined where d_i ≥ trims·b."""

    b: int
    trims: ClassVar[int] = 1

    def min_degree(self) -> int:
        return self.trims * self.b

    def requirement(self) -> str:
        times = "b" if self.trims == 1 else f"{self.trims}b"
        return f"at least {times} = {self.min_degree()} neighbours"


class TwoBNeighbours(BNeighbours):
    """For a rule with ``b`` that discards (or clips) the 2b outermost neighbours: defined
    where d_i ≥ 2b."""

    trims = 2


def _middle(values: Tensor, b: int) -> list[Tensor]:
    """The d − 2b slices ``[n, P]`` of ``values [n, d, P]`` left, per coordinate, after the b
    largest and b smallest are removed (in no particular order). Pass k bubbles the largest
    of the rest to the top and the smallest to the bottom by compare-exchanges (a min and a
    max, so every value is one of the inputs, bit for bit): O(b·d) elementwise operations on
    ``[n, P]``, several times faster than torch's sort over a short dimension."""
    rows = list(values.unbind(dim=1))
    d = len(rows)
    for k in range(b):
        for j in range(k, d - 1 - k):
            rows[j], rows[j + 1] = torch.minimum(rows[j], rows[j + 1]), \
                torch.maximum(rows[j], rows[j + 1])
        for j in range(d - 2 - k, k, -1):
            rows[j - 1], rows[j] = torch.minimum(rows[j - 1], rows[j]), \
                torch.maximum(rows[j - 1], rows[j])
    return rows[b:d - b]


@register_rule
class Mean(RobustRule):
    """Σ_j w_ij m_{j→i}: plain gossip on the messages received."""

    name, paper = "mean", "gossip averaging, x_i = Σ_j w_ij z_j"

    def aggregate(self, messages, weights, byzantine=None):
        return torch.bmm(weights.unsqueeze(1), messages).squeeze(1)


@register_rule
class TrimmedMean(TwoBNeighbours, RobustRule):
    """BRIDGE-T (Yang & Bajwa 2019): per coordinate k, the b largest and b smallest
    [m_{j→i}]_k of the neighbours removed, then [x_i]_k = ([z_i]_k + Σ_{kept} [m_{j→i}]_k) /
    (d_i − 2b + 1). Defined where d_i ≥ 2b (at d_i = 2b only the own value is left: no
    communication, as on a ring with b = 1); b = 0 is the uniform mean of the
    neighbourhood."""

    name, paper = "trimmed_mean", "Yang & Bajwa 2019, BRIDGE-T (coordinate-wise trimmed mean)"
    Params = BParams

    def aggregate(self, messages, weights, byzantine=None):
        d, b = messages.shape[1] - 1, self.b
        kept = torch.stack(_middle(messages[:, 1:], b), dim=1).sum(dim=1) if d > 2 * b \
            else torch.zeros_like(messages[:, 0])
        return (messages[:, 0] + kept) / (d - 2 * b + 1)


@register_rule
class Median(RobustRule):
    """BRIDGE-M (Yang & Bajwa 2019): [x_i]_k = median of [z_i]_k and the neighbours'
    [m_{j→i}]_k (for an even count, the mean of the two middle values)."""

    name, paper = "median", "Yang & Bajwa 2019, BRIDGE-M (coordinate-wise median)"

    def aggregate(self, messages, weights, byzantine=None):
        middle = _middle(messages, (messages.shape[1] - 1) // 2)
        return middle[0] if len(middle) == 1 else (middle[0] + middle[1]) / 2


@register_rule
class Krum(RobustRule):
    """BRIDGE-K (Yang & Bajwa 2019): Krum (Blanchard et al. 2017) over the n = d_i + 1
    vectors v_0 = z_i, v_1.. = m_{j→i}: score(v_a) = Σ of the n − b − 2 smallest ‖v_a − v_c‖²,
    c ≠ a; x_i = the v_a of smallest score (ties: the lowest a, the receiver's own first).
    Defined where a score sums at least one distance, n − b − 2 ≥ 1, i.e. d_i ≥ b + 2
    (Krum's guarantee needs more, n > 2b + 2)."""

    name, paper = "krum", "Yang & Bajwa 2019, BRIDGE-K (Krum on the neighbourhood)"
    Params = BParams

    def min_degree(self):
        return self.b + 2

    def requirement(self):
        return f"at least b + 2 = {self.min_degree()} neighbours"

    def aggregate(self, messages, weights, byzantine=None):
        n = messages.shape[1]
        gram = torch.bmm(messages, messages.transpose(1, 2))  # ‖v_a − v_c‖² from the Gram
        norms = gram.diagonal(dim1=1, dim2=2)
        distance = (norms.unsqueeze(2) + norms.unsqueeze(1) - 2 * gram).clamp_min(0)
        distance.diagonal(dim1=1, dim2=2).fill_(math.inf)
        nearest = distance.sort(dim=2).values[:, :, :n - self.b - 2]
        best = nearest.sum(dim=2).argmin(dim=1)
        return messages[torch.arange(len(messages), device=messages.device), best]


class RobustSum(RobustRule):
    """The robust gossip framework F-RG of Gaucher, Dieuleveut & Hendrikx 2025: receiver i
    moves by a step γ along a robust sum F of its weighted differences,
    x_i = z_i + γ Σ_j ω_ij (m_{j→i} − z_i), where the rule's :meth:`kept_weights` ω_ij
    (``[n, d + 1]``) are w_ij, clipped or trimmed according to the distances
    ‖m_{j→i} − z_i‖. ``gamma`` (γ) is 1 unless the rule takes it as a parameter."""

    gamma: float = 1.0

    def aggregate(self, messages, weights, byzantine=None):
        own = messages[:, :1]
        step = messages - own  # [n, d + 1, P]; column 0 is zero
        norm = torch.linalg.vector_norm(step, dim=2)  # [n, d + 1]
        kept = self.kept_weights(norm, weights, byzantine)
        mixed = torch.bmm(kept.unsqueeze(1), step).squeeze(1)
        return own.squeeze(1) + self.gamma * mixed

    def kept_weights(self, norm: Tensor, weights: Tensor, byzantine: Tensor | None) -> Tensor:
        """ω ``[n, d + 1]`` from the distances ``norm [n, d + 1]`` (column 0: the receiver's
        own, 0) and w ``[n, d + 1]``."""
        raise NotImplementedError


def _clipped(norm: Tensor, weights: Tensor, radius: Tensor) -> Tensor:
    """w_ij min(1, τ_i/‖m_{j→i} − z_i‖): the weights of CLIP(·, τ_i), ``radius [n, 1]``."""
    return weights * torch.where(norm > radius, radius / norm.clamp_min(1e-30), 1.0)


@register_rule
class ClippedGossip(RobustSum):
    """ClippedGossip (He, Karimireddy & Jaggi 2022, self-centered clipping):
    x_i = z_i + Σ_j w_ij CLIP(m_{j→i} − z_i, τ_i), CLIP(v, τ) = min(1, τ/‖v‖₂) v. The radius
    τ_i, recomputed every gossip step, is by ``tau``:

    - a number: τ_i = τ for every receiver; ``inf``: no clipping, x_i = Σ_j w_ij m_{j→i};
    - ``practical`` (default): the rule the authors' experiments run, τ_i the (b + 1)-th
      largest of the d_i + 1 distances ‖m_{j→i} − z_i‖ (the receiver's own 0 included), so
      that the ``b`` (default 1) farthest neighbours are clipped to the next one's distance and
      the others kept whole; it needs no knowledge of who is Byzantine. Stated from the
      authors' code (``SelfCenteredClipping``: the second largest neighbour distance, b = 1);
      where d_i ≤ b it gives τ_i = 0 (no communication), where their code keeps the single
      neighbour unclipped;
    - ``adaptive``: the paper's radius τ_i² = (1/δ) Σ_{j ∈ R_i} w_ij ‖m_{j→i} − z_i‖², with
      the honest neighbours R_i estimated by the neighbours left after removing the farthest
      ones of total weight at most δ, for the ``delta`` δ the defender assumes (required);
    - ``oracle``: the same radius with δ_i the receiver's true Byzantine weight
      Σ_{j ∈ N_i ∩ B} w_ij, as the paper's analysis assumes known: an oracle no defender
      has, for comparison; δ_i = 0 gives τ_i = ∞."""

    name, paper = "clipped_gossip", "He, Karimireddy & Jaggi 2022, ClippedGossip"

    @dataclass(frozen=True)
    class Params(Params):
        tau: float | str = "practical"
        delta: float | None = None
        b: int = 1
        rules: ClassVar = {"tau": _RADIUS, "delta": _DELTA.or_none(), "b": _COUNT0}

        @classmethod
        def check_together(cls, key: str, params: dict, name: str) -> None:
            """delta with tau: adaptive only, b with tau: practical only."""
            tau = params.get("tau", "practical")
            if tau == "adaptive" and params.get("delta") is None:
                raise GossipflError(f"{key}.delta: tau: adaptive needs the Byzantine weight delta "
                                    f"the defender assumes (in (0, 1)); tau: oracle takes each "
                                    f"receiver's true Byzantine weight instead (an oracle), and "
                                    f"tau: practical needs neither.")
            if params.get("delta") is not None and tau != "adaptive":
                raise GossipflError(f"{key}.delta: only tau: adaptive reads delta, but tau is "
                                    f"{tau!r}; remove delta or set tau: adaptive.")
            if "b" in params and tau != "practical":
                raise GossipflError(f"{key}.b: only tau: practical reads b (the neighbours "
                                    f"clipped), but tau is {tau!r}; remove b or set tau: "
                                    f"practical.")

    tau: float | str
    delta: float | None
    b: int

    def kept_weights(self, norm, weights, byzantine):
        known = None if byzantine is None else (weights * byzantine)[:, 1:].sum(dim=1)
        return _clipped(norm, weights, self.radius(norm, weights, known))

    def radius(self, norm: Tensor, weights: Tensor, byzantine_weight: Tensor | None) -> Tensor:
        """τ_i ``[n, 1]``."""
        if self.tau == "practical":
            d = norm.shape[1] - 1
            at = max(d - self.b, 0)  # ascending: the (b + 1)-th largest of d + 1 values
            return norm.sort(dim=1).values[:, at:at + 1]
        if self.tau not in ("adaptive", "oracle"):
            return torch.full_like(norm[:, :1], float(self.tau))
        if self.tau == "adaptive":
            delta = torch.full_like(norm[:, :1], self.delta)
        elif byzantine_weight is not None:
            delta = byzantine_weight.unsqueeze(1).to(norm.dtype)
        else:
            delta = torch.zeros_like(norm[:, :1])
        far = norm[:, 1:].sort(dim=1, descending=True)
        w = weights[:, 1:].gather(1, far.indices)
        dropped = w.cumsum(dim=1) <= delta + 1e-12
        kept = (w * far.values.pow(2) * ~dropped).sum(dim=1, keepdim=True)
        return torch.where(delta > 0, (kept / delta.clamp_min(1e-30)).sqrt(), math.inf)


@register_rule
class CSPlus(TwoBNeighbours, RobustSum):
    """CS+-RG (Gaucher, Dieuleveut & Hendrikx, ICML 2025, "Unified Breakdown Analysis for
    Byzantine Robust Gossip"): x_i = z_i + γ Σ_j w_ij CLIP(m_{j→i} − z_i, τ_i), with τ_i the
    (2b + 1)-th largest of the d_i + 1 distances ‖m_{j→i} − z_i‖ (the receiver's own 0
    included), so that the 2b farthest neighbours are clipped (to τ_i) and the others kept
    whole. ``b`` counts the Byzantine neighbours tolerated (the authors' clipped weight
    2δ_i with δ_i = b w for uniform weights w); ``gamma`` is the communication step γ.
    Defined where d_i ≥ 2b (at d_i = 2b, τ_i = 0: no communication); b = 0 and γ = 1 is
    the plain gossip step Σ_j w_ij m_{j→i} (to float rounding)."""

    name, paper = "cs_plus", "Gaucher, Dieuleveut & Hendrikx 2025, CS+-RG (clipped sum)"

    @dataclass(frozen=True)
    class Params(BParams):
        gamma: float = 1.0  # γ
        rules: ClassVar = {"gamma": _STEP}

    def kept_weights(self, norm, weights, byzantine):
        d = norm.shape[1] - 1
        radius = norm.sort(dim=1).values[:, d - 2 * self.b:d - 2 * self.b + 1]  # [n, 1]
        return _clipped(norm, weights, radius)


@register_rule
class GTS(BNeighbours, RobustSum):
    """GTS-RG (Gaucher, Dieuleveut & Hendrikx, ICML 2025; the authors' ``GTS_RG``), the F-RG
    step with a trimmed sum F: the neighbours farthest from z_i are left out of the sum,

        x_i = z_i + γ Σ_{j ∈ N_i, j ∉ T_i} w_ij (m_{j→i} − z_i),

    T_i the b neighbours of largest ‖m_{j→i} − z_i‖ (ties: the lower id trimmed first).
    ``b`` counts the Byzantine neighbours tolerated; ``gamma`` is the communication step γ.
    Defined where d_i ≥ b (at d_i = b every neighbour is trimmed: x_i = z_i). In the
    authors' form x_i ← x_i − η F((w_ij, x_i − x_j)_j), F the sum of the weighted differences
    kept; stated from their code (only the paper's abstract was readable here).

    ``delta`` (instead of ``b``) trims by weight, as the authors' code states the rule: the
    farthest neighbours of total weight δ_i leave the sum, the last of them only in part (its kept
    weight is Σ of the sorted weights down to it minus δ_i), with δ_i = ``delta`` for every
    receiver or, for ``delta: byzantine``, the receiver's true Byzantine weight
    Σ_{j ∈ N_i ∩ B} w_ij (what the authors' experiments use). For uniform weights w,
    δ_i = b w is ``b``. The authors' code gives that last neighbour the weight it should
    trim instead of the one it keeps (so with uniform weights it trims b + 1 or b − 1
    neighbours, depending on the rounding of a cumulative sum); that is not reproduced.

    Reductions: b = 0 (or no neighbour trimmed) is z_i + γ Σ_j w_ij (m_{j→i} − z_i), the
    plain gossip step for γ = 1; on the complete graph with uniform weights 1/M and
    γ = M/(M − b) it is NNA (Farhadkhani et al. 2023): the average of the M − b messages
    nearest to z_i, z_i included."""

    name, paper = "gts", "Gaucher, Dieuleveut & Hendrikx 2025, GTS-RG (trimmed sum, NNA)"

    @dataclass(frozen=True)
    class Params(BParams):
        gamma: float = 1.0  # γ
        delta: float | str | None = None
        rules: ClassVar = {"gamma": _STEP, "delta": _TRIMMED}

        @classmethod
        def check_together(cls, key: str, params: dict, name: str) -> None:
            if "b" in params and params.get("delta") is not None:
                raise GossipflError(f"{key}.delta: rule gts trims either b neighbours or the "
                                    f"weight delta, got both b = {params['b']} and delta = "
                                    f"{params['delta']!r}; remove one.")

    delta: float | str | None

    def min_degree(self):
        return 0 if self.delta is not None else super().min_degree()

    def kept_weights(self, norm, weights, byzantine):
        far = norm[:, 1:].sort(dim=1, descending=True, stable=True)  # the farthest first
        kept = weights.clone()
        if self.delta is None:
            kept[:, 1:].scatter_(1, far.indices[:, :self.b], 0.0)
            return kept
        if self.delta == "byzantine":
            known = torch.zeros_like(norm) if byzantine is None else weights * byzantine
            delta = known[:, 1:].sum(dim=1, keepdim=True)
        else:
            delta = torch.full_like(norm[:, :1], float(self.delta))
        w = weights[:, 1:].gather(1, far.indices)
        left = torch.minimum(w, (w.cumsum(dim=1) - delta).clamp_min(0.0))
        kept[:, 1:].scatter_(1, far.indices, left)
        return kept


def build_rule(spec: Any, key: str = "topology.robust") -> RobustRule | None:
    """The rule of a ``topology.robust`` mapping (None: none set); one sentence naming
    ``key.param`` for a bad name, an unknown parameter or a bad value."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise GossipflError(f"{key}: must be a mapping such as {{rule: trimmed_mean, b: 1}}, "
                            f"got {spec!r}.")
    name = spec.get("rule", "mean")
    if not isinstance(name, str) or name not in RULES:
        raise unknown_choice(f"{key}.rule", name, RULES)
    cls = RULES[name]
    given = {p: v for p, v in spec.items() if p != "rule"}
    return cls(typed(cls.Params, given, key, "rule", name))


__all__ = ["GTS", "RULES", "BNeighbours", "BParams", "CSPlus", "ClippedGossip", "Krum", "Mean", "Median",
           "RobustRule", "RobustSum", "TrimmedMean", "TwoBNeighbours", "build_rule",
           "register_rule"]
