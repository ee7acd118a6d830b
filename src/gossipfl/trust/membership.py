"""Empirical privacy measures beside the accountant: membership-inference attacks on each
client's model (``eval.membership``).

**Two forms.** ``eval.membership: N`` (the first measure, kept as it was): client i's
*members* are N of its training samples, its *non-members* N held-out **test** samples, the
same for every client. Its members carry the client's label skew and its non-members do not,
so under a non-IID partition it measures the local model's specialization as much as
membership (docs/results, section 16). ``eval.membership: {holdout: h, samples: N,
shadows: S}`` measures membership: each client's own samples are split, before training,
into the ones it trains on and ``holdout`` ones it never sees (a fraction in (0, 1) of each
client's samples, or a count), both from the client's own distribution; at every evaluation
up to N members and N non-members per client (as many of each) are attacked.

**The loss-threshold attack** (Yeom et al., CSF 2018): "member" when a sample's loss under
client i's model is below a threshold. Over all thresholds its success is the AUC

    AUC_i = (1 / |A| |B|) Σ_{a ∈ A} Σ_{b ∈ B} ( [ℓ_a < ℓ_b] + ½ [ℓ_a = ℓ_b] )

(the Mann–Whitney statistic: 0.5 is chance, 1 a model that gives every member a lower loss
than every non-member); ``mia_auc`` is its mean over the evaluated clients (the
``eval.local_clients`` sample when there is one). With the holdout form, also the true
positive rate at a low false positive rate, as Carlini et al. (S&P 2022) argue an attack
should be judged: the scores of the evaluated clients are pooled, and TPR@α is the largest
fraction of members scored above a threshold that at most ⌊α |B|⌋ of the pooled non-members
exceed (``mia_tpr_1pct``, ``mia_tpr_01pct``: α = 1 %, 0.1 %; with fewer than 1/α pooled
non-members no non-member may exceed the threshold).

**The likelihood-ratio attack** (LiRA, Carlini, Chou, Song, Terzis, Tramèr, "Membership
inference attacks from first principles", S&P 2022), its *offline* variant, with ``shadows``
S ≥ 2: S shadow federations replay the run (the same algorithm, graph, model and training,
each a gossipfl run of M stacked clients), shadow s's client i training on a random half of
client i's samples (members and holdout alike, drawn from (seed, "shadow", s, i)); the S
federations run one after the other (S disjoint copies of the graph would be one
disconnected graph, which gossipfl refuses). For a candidate sample x = (input, y) of client i, the
model's confidence is logit-scaled, φ = log(p_y / (1 − p_y)) = z_y − log Σ_{y' ≠ y} e^{z_y'}
(z the logits), and the *out* shadows of x are the shadow clients i that did not train on it.
The offline test, as the paper states it: Λ(x) = 1 − Pr[Z > φ_target(x)] = Φ((φ_target(x) −
μ_out(x)) / σ_out(x)), Z ~ N(μ_out(x), σ_out(x)²), μ_out and σ_out the mean and (population)
standard deviation of φ over x's out shadows (``variance: per_example``), or σ one value
for all candidates, the root mean of their per-example variances (``variance: global``, the
default: with few shadows a per-example σ rests on a handful of values). Higher Λ says
member. The shadows are trained once, at the last round, for as many rounds as the target;
LiRA's columns (``mia_lira_auc``, ``mia_lira_tpr_1pct``, ``mia_lira_tpr_01pct``) are in the
last round's row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gossipfl.common.rng import numpy_generator
from gossipfl.engine.oracle import per_sample_loss
from gossipfl.errors import GossipflError

PAIRS = 1 << 24  # member × non-member comparisons per block of clients
#: the false positive rates of the TPR columns, and their column suffixes
FPRS = ((0.01, "1pct"), (0.001, "01pct"))
VARIANCES = ("global", "per_example")


# -- the config ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Membership:
    """``eval.membership``'s mapping form: ``holdout`` (a fraction in (0, 1) or a count ≥ 1
    of each client's samples held out of training), ``samples`` (at most this many members
    and as many non-members per client attacked; default 200), ``shadows`` (LiRA's shadow
    federations, 0: no LiRA, else ≥ 2) and ``variance`` (LiRA's σ_out)."""

    holdout: float
    samples: int = 200
    shadows: int = 0
    variance: str = "global"


def parse_membership(value: Any, key: str = "eval.membership") -> int | Membership | None:
    """``eval.membership`` checked: null, a count N ≥ 1 (the shared-test form) or the
    mapping; one sentence naming the key else."""
    def count(v: Any, low: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= low

    if value is None or isinstance(value, Membership):
        return value
    if not isinstance(value, dict):
        if count(value, 1):
            return value
        raise GossipflError(f"{key}: must be an integer >= 1, null or a mapping such as "
                            f"{{holdout: 0.2, samples: 200, shadows: 8}}, got {value!r}.")
    allowed = ("holdout", "samples", "shadows", "variance")
    for name in value:
        if name not in allowed:
            raise GossipflError(f"{key}.{name}: unknown key; allowed: {', '.join(allowed)}.")
    if "holdout" not in value:
        raise GossipflError(f"{key}.holdout: required in the mapping form (a fraction in "
                            f"(0, 1) or a count >= 1 of each client's samples never trained "
                            f"on).")
    holdout = value["holdout"]
    if not (count(holdout, 1) or (isinstance(holdout, float) and 0 < holdout < 1)):
        raise GossipflError(f"{key}.holdout: must be a fraction in (0, 1) or an integer >= 1, "
                            f"got {holdout!r}.")
    samples, shadows = value.get("samples", 200), value.get("shadows", 0)
    if not count(samples, 1):
        raise GossipflError(f"{key}.samples: must be an integer >= 1, got {samples!r}.")
    if not (count(shadows, 0) and shadows != 1):
        raise GossipflError(f"{key}.shadows: must be 0 (no LiRA) or an integer >= 2 (LiRA "
                            f"needs out shadows to fit a Gaussian), got {shadows!r}.")
    variance = value.get("variance", "global")
    if variance not in VARIANCES:
        raise GossipflError(f"{key}.variance: must be one of {', '.join(VARIANCES)}, got "
                            f"{variance!r}.")
    return Membership(holdout, samples, shadows, variance)


# -- the samples --------------------------------------------------------------------------------
def membership_samples(parts: Sequence[np.ndarray], test_size: int, size: int, seed: int
                       ) -> tuple[Tensor, Tensor, Tensor]:
    """The shared-test form: members ``[M, N]`` (train indices, padded) and their mask: up to
    ``size`` of each client's samples drawn without replacement from (seed, "membership",
    client); and the non-members: up to ``size`` test indices from (seed, "membership",
    "test")."""
    members, mask = _draw(parts, size, seed, "membership")
    test = numpy_generator(seed, "membership", "test").choice(
        test_size, min(size, test_size), replace=False)
    return members, mask, torch.from_numpy(np.sort(test))


def _draw(parts: Sequence[np.ndarray], size: int | Sequence[int], seed: int, *stream: Any
          ) -> tuple[Tensor, Tensor]:
    """``[M, N]`` up to ``size`` (one count, or one per client) of each part's indices drawn
    without replacement from (seed, *stream, client), sorted, padded; and their mask."""
    sizes = [size] * len(parts) if isinstance(size, int) else list(size)
    takes = [min(s, len(p)) for s, p in zip(sizes, parts)]
    width = max(1, max(takes, default=1))
    out = np.zeros((len(parts), width), dtype=np.int64)
    mask = np.zeros((len(parts), width), dtype=bool)
    for i, (part, take) in enumerate(zip(parts, takes)):  # once per run, before training
        if take:
            pick = numpy_generator(seed, *stream, i).choice(len(part), take, replace=False)
            out[i, :take], mask[i, :take] = np.asarray(part)[np.sort(pick)], True
    return torch.from_numpy(out), torch.from_numpy(mask)


def holdout_split(parts: Sequence[np.ndarray], holdout: float, seed: int
                  ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each client's samples split into the ones it trains on and its held-out non-members:
    ``holdout`` h (a fraction: round(h n_i); a count: h) drawn without replacement from
    (seed, "membership", "holdout", client), both kept in the part's order; one sentence
    when a client would hold out nothing or train on nothing."""
    trained, held = [], []
    for i, part in enumerate(parts):
        n = len(part)
        h = round(holdout * n) if isinstance(holdout, float) else int(holdout)
        if h < 1 or h >= n:
            what = "holds out no sample" if h < 1 else "leaves it nothing to train on"
            raise GossipflError(f"eval.membership.holdout: {holdout} of client {i}'s {n} "
                                f"samples {what}; choose a holdout between 1 and "
                                f"{max(n - 1, 1)} samples for every client.")
        out = np.zeros(n, dtype=bool)
        out[numpy_generator(seed, "membership", "holdout", i).choice(n, h, replace=False)] = True
        trained.append(np.asarray(part)[~out])
        held.append(np.asarray(part)[out])
    return trained, held


@dataclass
class Candidates:
    """The attacked samples of the holdout form: ``members`` and ``others`` ``[M, N]``
    (train indices; members: trained on; others: the client's held-out ones), their masks,
    and ``parts``, each client's whole sample set (what the shadows halve)."""

    members: Tensor
    member_mask: Tensor
    others: Tensor
    other_mask: Tensor
    parts: list[np.ndarray]
    spec: Membership


def candidates(trained: Sequence[np.ndarray], held: Sequence[np.ndarray], spec: Membership,
               seed: int) -> Candidates:
    """As many members as non-members per client, min(samples, |held out|, |trained|) of
    each, drawn from (seed, "membership", "members" | "others", client)."""
    counts = [min(spec.samples, len(h), len(t)) for t, h in zip(trained, held)]
    members, member_mask = _draw(trained, counts, seed, "membership", "members")
    others, other_mask = _draw(held, counts, seed, "membership", "others")
    whole = [np.sort(np.concatenate([t, h])) for t, h in zip(trained, held)]
    return Candidates(members, member_mask, others, other_mask, whole, spec)


# -- the statistics -----------------------------------------------------------------------------
def auc(member_loss: Tensor, mask: Tensor, other_loss: Tensor,
        other_mask: Tensor | None = None) -> Tensor:
    """``[S]`` AUC_i of the module docstring from the members' losses ``[S, A]`` (``mask``
    marks the real ones) and the non-members' ``[S, B]`` (``other_mask``: the real ones;
    None: all). A lower value says member; pass −score for a score that says it higher."""
    S, A = member_loss.shape
    B = other_loss.shape[1]
    if other_mask is None:
        other_mask = torch.ones_like(other_loss, dtype=torch.bool)
    out = torch.empty(S, dtype=torch.float64, device=member_loss.device)
    step = max(1, PAIRS // max(1, A * B))
    for a in range(0, S, step):
        m, o = member_loss[a:a + step, :, None], other_loss[a:a + step, None, :]
        wins = (m < o).double() + 0.5 * (m == o).double()  # [s, A, B]
        kept = mask[a:a + step].double()
        real = other_mask[a:a + step].double()
        pairs = kept.sum(1) * real.sum(1)
        out[a:a + step] = (wins * kept[:, :, None] * real[:, None, :]).sum((1, 2)) \
            / pairs.clamp_min(1)
    return out


def tpr_at_fpr(member_score: Tensor, mask: Tensor, other_score: Tensor, other_mask: Tensor,
               fpr: float) -> float:
    """The pooled TPR at FPR ≤ ``fpr`` (higher score says member): with the real non-member
    scores sorted in decreasing order o_(1) ≥ o_(2) ≥ …, k = ⌊fpr · |B|⌋ of them may exceed
    the threshold, so t = o_(k+1) (−∞ when k = |B|) and TPR = #{members > t} / |A|: the
    smallest admissible threshold, hence the largest TPR."""
    members = member_score[mask].double()
    others = other_score[other_mask].double().sort(descending=True).values
    k = math.floor(fpr * len(others) + 1e-9)
    threshold = others[k] if k < len(others) else -math.inf
    return float((members > threshold).double().mean()) if len(members) else math.nan


def confidence_logit(logits: Tensor, labels: Tensor) -> Tensor:
    """φ = log(p_y / (1 − p_y)) = z_y − log Σ_{y' ≠ y} exp z_y' from ``logits [..., N, C]``
    and ``labels [..., N]``, in float64 (LiRA's logit scaling, stable where p_y ≈ 1)."""
    z = logits.double()
    own = z.gather(-1, labels.long().unsqueeze(-1))
    rest = z.scatter(-1, labels.long().unsqueeze(-1), -math.inf).logsumexp(-1, keepdim=True)
    return (own - rest).squeeze(-1)


def lira_offline(target: Tensor, shadow: Tensor, out: Tensor, variance: str = "global"
                 ) -> Tensor:
    """Λ = Φ((φ_target − μ_out) / σ_out) per candidate (the module docstring): ``target
    [..., N]`` φ of the attacked model, ``shadow [..., K, N]`` φ of the K shadows, ``out``
    (bool, like ``shadow``) the shadows that did not train on the candidate. ``variance``:
    σ_out per candidate, or one σ for all (the root mean of the per-candidate variances).
    A candidate with no out shadow scores ½."""
    w = out.double()
    count = w.sum(-2)
    mean = (w * shadow.double()).sum(-2) / count.clamp_min(1)
    var = (w * (shadow.double() - mean.unsqueeze(-2)).pow(2)).sum(-2) / count.clamp_min(1)
    if variance == "global":
        seen = count > 0
        var = torch.full_like(var, float(var[seen].mean()) if bool(seen.any()) else 0.0)
    z = (target.double() - mean) / var.sqrt().clamp_min(1e-30)
    return torch.where(count > 0, torch.special.ndtr(z), torch.full_like(z, 0.5))


def attack_columns(prefix: str, member: Tensor, mask: Tensor, other: Tensor,
                   other_mask: Tensor) -> dict:
    """``{prefix}_auc`` (the mean per-client AUC) and the pooled ``{prefix}_tpr_*`` from
    scores ``[S, N]`` (higher says member)."""
    row = {f"{prefix}_auc": float(auc(-member, mask, -other, other_mask).mean())}
    for fpr, suffix in FPRS:
        row[f"{prefix}_tpr_{suffix}"] = tpr_at_fpr(member, mask, other, other_mask, fpr)
    return row


# -- the models' outputs ------------------------------------------------------------------------
def _predict(oracle, X: Tensor, inputs: Tensor, index: Tensor) -> Tensor:
    """``[S, N, ...]`` model i's outputs on ``inputs[index[i]]``."""
    idx = index.to(inputs.device)
    return oracle.predict(X, inputs[idx].to(X.device))


def sample_losses(oracle, X: Tensor, x: Tensor, y: Tensor, index: Tensor) -> Tensor:
    """``[S, N]`` model i's loss on samples ``index[i]`` of (x, y)."""
    out = _predict(oracle, X, x, index)
    return per_sample_loss(out, y[index.to(y.device)].to(X.device), oracle.loss, sample_dims=2)


def membership_auc(oracle, X: Tensor, train_x: Tensor, train_y: Tensor, members: Tensor,
                   mask: Tensor, test_x: Tensor, test_y: Tensor, nonmembers: Tensor
                   ) -> Tensor:
    """The shared-test form: ``[S]`` each model's AUC, model i (row i of X) on its members
    ``members[i]`` (global train indices, ``mask[i]`` the real ones) and on the shared
    non-members."""
    device = X.device
    member_loss = sample_losses(oracle, X, train_x, train_y, members)
    pick = nonmembers.to(test_x.device)
    shared = oracle.predict(X, test_x[pick].to(device), shared=True)
    targets = test_y[pick].to(device).expand(X.shape[0], -1)
    other_loss = per_sample_loss(shared, targets, oracle.loss, sample_dims=2)
    return auc(member_loss, mask.to(device), other_loss)


def loss_attack(oracle, X: Tensor, train_x: Tensor, train_y: Tensor, c: Candidates,
                rows: Tensor | None = None) -> dict:
    """The holdout form's loss-threshold columns for the models X (client ids ``rows``;
    None: all): ``mia_auc``, ``mia_tpr_1pct``, ``mia_tpr_01pct``."""
    pick = (lambda t: t) if rows is None else (lambda t: t[rows.to(t.device)])
    members, others = pick(c.members), pick(c.others)
    mask, other_mask = pick(c.member_mask).to(X.device), pick(c.other_mask).to(X.device)
    member = -sample_losses(oracle, X, train_x, train_y, members)
    other = -sample_losses(oracle, X, train_x, train_y, others)
    return attack_columns("mia", member, mask, other, other_mask)


# -- LiRA's shadows -----------------------------------------------------------------------------
def shadow_halves(c: Candidates, seed: int) -> list[list[np.ndarray]]:
    """``[S][M]`` shadow s's client i's training samples: a random half (⌊n_i/2⌋, at least
    one) of client i's whole sample set, from (seed, "shadow", s, i)."""
    out = []
    for s in range(c.spec.shadows):
        row = []
        for i, part in enumerate(c.parts):
            take = max(1, len(part) // 2)
            pick = numpy_generator(seed, "shadow", s, i).choice(len(part), take, replace=False)
            row.append(np.asarray(part)[np.sort(pick)])
        out.append(row)
    return out


def shadow_config(config: dict, half: list[np.ndarray], train_x: Tensor, train_y: Tensor,
                  num_classes: int) -> dict:
    """The config of one shadow federation (a plain mapping, from the run's own
    ``config.to_dict(api_values=True)``): the run itself, same model, algorithm, graph
    (rebuilt from the same seed: the same W), training and privacy, with client i training
    on ``half[i]``; no evaluation, no Byzantine clients (the attacker replays honest
    training), no output."""
    data = [(train_x[torch.as_tensor(h, device=train_x.device)].cpu(),
             train_y[torch.as_tensor(h, device=train_y.device)].cpu()) for h in half]
    out = {key: value for key, value in config.items()
           if key not in ("byzantine", "eval", "output", "name")}
    out["data"] = {**config["data"], "tensors": {"train": data, "num_classes": num_classes}}
    out["eval"] = {"every": config["train"]["rounds"], "average_model": False,
                   "local_models": False}
    return out


def shadow_out(c: Candidates, halves: list[list[np.ndarray]], rows: Tensor | None = None
               ) -> tuple[Tensor, Tensor]:
    """``[S_rows, K, N]`` whether shadow k's client i did not train on member / other
    candidate n of client i (the evaluated clients ``rows``; None: all)."""
    ids = range(len(c.parts)) if rows is None else rows.tolist()
    def out(index: Tensor) -> Tensor:
        flags = np.stack([np.stack([~np.isin(index[i].numpy(), row[i]) for row in halves])
                          for i in ids])
        return torch.from_numpy(flags)
    return out(c.members), out(c.others)


def lira_attack(oracle, X: Tensor, shadows: Tensor, train_x: Tensor, train_y: Tensor,
                c: Candidates, halves: list[list[np.ndarray]], rows: Tensor | None = None
                ) -> dict:
    """LiRA's columns (``mia_lira_auc``, ``mia_lira_tpr_1pct``, ``mia_lira_tpr_01pct``) for
    the models X of the clients ``rows`` (None: all), from the shadow federations' models
    ``shadows [K, M, P]``."""
    m, k = len(c.parts), len(halves)
    ids = torch.arange(m) if rows is None else rows.cpu()
    scores = []
    for index, out in zip((c.members, c.others), shadow_out(c, halves, rows)):
        index = index[ids]
        labels = train_y[index.to(train_y.device)].to(X.device)
        target = confidence_logit(_predict(oracle, X, train_x, index), labels)  # [S, N]
        phi = torch.stack([confidence_logit(_predict(oracle, shadows[s][ids.to(
            shadows.device)], train_x, index), labels) for s in range(k)], dim=1)
        scores.append(lira_offline(target, phi, out.to(X.device), c.spec.variance))
    mask, other_mask = c.member_mask[ids].to(X.device), c.other_mask[ids].to(X.device)
    return attack_columns("mia_lira", scores[0], mask, scores[1], other_mask)


__all__ = ["FPRS", "Candidates", "Membership", "attack_columns", "auc", "candidates",
           "confidence_logit", "holdout_split", "lira_attack", "lira_offline", "loss_attack",
           "membership_auc", "membership_samples", "parse_membership", "shadow_config",
           "shadow_halves", "shadow_out", "tpr_at_fpr"]
