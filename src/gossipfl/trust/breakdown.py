"""The graph quantities the breakdown results of robust gossip are stated in, for a mixing
matrix W and a Byzantine set B (H the honest clients).

Gaucher, Dieuleveut & Hendrikx (ICML 2025, "Unified Breakdown Analysis for Byzantine Robust
Gossip") state their breakdown point over the class of graphs Γ_{μ_min, b}: the honest
subgraph's Laplacian has algebraic connectivity at least μ_min, and every honest client's
Byzantine neighbours weigh at most b (b counts them with unit weights). He, Karimireddy &
Jaggi (2022) state ClippedGossip's guarantee with the same largest Byzantine weight, their
δ_max. This module computes, in float64:

- the honest Laplacian L_H = diag(A 1) − A, A the off-diagonal part of
  (W_HH + W_HHᵀ)/2 (W_HH itself for a symmetric W; the same matrix the ``spectral`` attack's
  Fiedler vector comes from);
- μ_min = λ₂(L_H), its second smallest eigenvalue (0 when H is disconnected or a single
  client);
- b_i = Σ_{j ∈ B, j ≠ i} w_ij for each honest i, and b = max_{i∈H} b_i (with the count of
  Byzantine neighbours beside it);
- the ratio b / μ_min, which does not change when the gossip step scales W − I (a W of the
  form I − η L gives the unit-weight ratio whatever η).

He, Karimireddy & Jaggi state ClippedGossip's guarantee in δ_max and their spectral gap γ,
which this module computes as the authors' code does (their ``graph_utils``: the paper's
text was not readable here): W̃ = W_HH + diag(δ_i), the honest block with each honest
client's Byzantine weight δ_i = b_i moved onto its diagonal (W̃ is row-stochastic when W is),
and γ = 1 − |λ₂(W̃)|, λ₂ the eigenvalue second largest in modulus. Their abstract's bound, an
O(δ_max ζ² / γ²) neighbourhood of a stationary point, makes δ_max / γ² the quantity their
guarantee is stated in.

**The theorems' constants were not found.** :func:`proved_robust` says, per rule, which
quantity its theorem is stated in, whether the configuration meets the rule's own hypothesis
on its Byzantine neighbours, and whether it is inside the proved-robust region — but the
constant c of a condition such as b < μ_min / c (Gaucher et al.'s CS+ and GTS, their
breakdown over Γ_{μ_min, b}) or δ_max ≤ c γ² (He et al.) could not be read for this work:
the papers' text (arXiv 2410.10418, PMLR v267 gaucher25a; arXiv 2202.01545) was reachable
only through their abstracts, and the authors' code (github.com/renaudgaucher/
Byzantine-Robust-Gossip, github.com/epfml/byzantine-robust-decentralized-optimizer) holds
the rules, the graphs and the definitions of μ_min, γ and δ_max but no threshold. So
``inside`` is False only where it is proved without a constant — the honest graph is cut
(:func:`proved_robust`'s docstring gives the argument), or the rule's own hypothesis fails —
and None (unknown) otherwise; it is never True.
"""

from __future__ import annotations

import numpy as np


def honest_laplacian(W: np.ndarray, honest: np.ndarray) -> np.ndarray:
    """``[|H|, |H|]`` L_H of the module docstring (float64), H in ascending id order."""
    ids = np.flatnonzero(honest)
    A = np.asarray(W, dtype=np.float64)[np.ix_(ids, ids)]
    A = (A + A.T) / 2
    np.fill_diagonal(A, 0.0)
    return np.diag(A.sum(axis=1)) - A


def algebraic_connectivity(W: np.ndarray, honest: np.ndarray) -> float:
    """μ_min = λ₂(L_H); 0 with fewer than two honest clients."""
    if int(np.sum(honest)) < 2:
        return 0.0
    values = np.linalg.eigvalsh(honest_laplacian(W, honest))
    return max(float(values[1]), 0.0)


def byzantine_weights(W: np.ndarray, honest: np.ndarray) -> np.ndarray:
    """``[M]`` b_i = Σ_{j∈B, j≠i} w_ij on the honest rows (0 on the Byzantine ones)."""
    honest = np.asarray(honest, dtype=bool)
    out = (np.asarray(W, dtype=np.float64) * ~honest[None, :]).sum(axis=1)  # j ≠ i: i ∈ H
    return np.where(honest, out, 0.0)


def breakdown_quantities(W: np.ndarray, byzantine: np.ndarray) -> dict:
    """For a Byzantine run's summary: ``mu_min``, ``b_max`` (the largest honest Byzantine
    weight), ``byzantine_neighbours_max`` (the largest count) and ``ratio`` = b / μ_min
    (None where μ_min = 0: the honest graph is cut)."""
    m = len(W)
    honest = np.ones(m, dtype=bool)
    honest[np.asarray(byzantine, dtype=np.int64)] = False
    mu = algebraic_connectivity(W, honest)
    b = byzantine_weights(W, honest)
    pattern = (np.asarray(W) != 0) & ~honest[None, :] & honest[:, None]
    np.fill_diagonal(pattern, False)
    b_max = float(b.max()) if m else 0.0
    return {"mu_min": mu, "b_max": b_max,
            "byzantine_neighbours_max": int(pattern.sum(axis=1).max()) if m else 0,
            "ratio": b_max / mu if mu > 0 else None}





def clipped_gossip_gap(W: np.ndarray, honest: np.ndarray) -> float:
    """He, Karimireddy & Jaggi's spectral gap γ = 1 − |λ₂(W̃)|, W̃ = W_HH + diag(b_i) (the
    module docstring; as their code computes it), λ₂ the eigenvalue of second largest modulus;
    1 with a single honest client, 0 when the honest graph is cut (λ₂ = 1)."""
    ids = np.flatnonzero(honest)
    if len(ids) < 2:
        return 1.0
    W = np.asarray(W, dtype=np.float64)
    tilde = W[np.ix_(ids, ids)] + np.diag(byzantine_weights(W, honest)[ids])
    moduli = np.sort(np.abs(np.linalg.eigvals(tilde)))
    return float(max(1.0 - moduli[-2], 0.0))


def clipped_gossip_quantities(W: np.ndarray, byzantine: np.ndarray) -> dict:
    """``delta_max`` (= b of :func:`breakdown_quantities`), ``gamma`` (:func:`clipped_gossip_gap`)
    and ``ratio`` = δ_max / γ² (None where γ = 0)."""
    honest = _honest(len(W), byzantine)
    delta = float(byzantine_weights(W, honest).max()) if len(W) else 0.0
    gamma = clipped_gossip_gap(W, honest)
    return {"delta_max": delta, "gamma": gamma, "ratio": delta / gamma**2 if gamma > 0 else None}


def _honest(m: int, byzantine) -> np.ndarray:
    honest = np.ones(m, dtype=bool)
    honest[np.asarray(byzantine, dtype=np.int64)] = False
    return honest


#: per rule: the theorem its robustness is stated in (as far as it could be read), the
#: quantity, and where the constant stands. Rules absent here have no proved threshold in
#: gossipfl's sources (the mean: none; the BRIDGE rules' guarantees, Yang & Bajwa 2019, are
#: stated in a reduced-graph condition gossipfl does not compute).
THEOREMS = {
    "cs_plus": (("Gaucher, Dieuleveut & Hendrikx 2025 (ICML; arXiv 2410.10418), CS+-RG's "
                 "near-optimal breakdown over Γ_{μ_min, b}"), "b/mu_min"),
    "gts": (("Gaucher, Dieuleveut & Hendrikx 2025 (ICML; arXiv 2410.10418), GTS-RG (NNA) "
             "over Γ_{μ_min, b}"), "b/mu_min"),
    "clipped_gossip": (("He, Karimireddy & Jaggi 2022 (arXiv 2202.01545), ClippedGossip with "
                        "the adaptive radius: an O(δ_max ζ²/γ²) neighbourhood"),
                       "delta_max/gamma^2"),
}

NOT_FOUND = ("the theorem's constant could not be read (only the paper's abstract and the "
             "authors' code were reachable), so no threshold and no verdict inside it")


def proved_robust(rule, W: np.ndarray, byzantine) -> dict:
    """Where a run stands against the robustness its rule's paper proves, for the rule
    ``rule`` (a :class:`gossipfl.trust.rules.RobustRule`), the mixing matrix W and the
    Byzantine ids:

    - ``rule``, ``theorem`` (the statement followed, None where gossipfl has none),
      ``quantity`` and ``value``: b/μ_min for CS+ and GTS (Gaucher et al.), δ_max/γ² for
      ClippedGossip (He et al.; ``theorem`` None unless its radius is the adaptive one the
      theorem is about), None for the others;
    - ``threshold``: the proved bound on that quantity — always None: the constants were
      not found (module docstring), ``note`` says so;
    - ``hypothesis``: whether every honest receiver meets the rule's own hypothesis on its
      Byzantine neighbours, as configured: a count b (``trimmed_mean``, ``krum``,
      ``cs_plus``, ``gts``, ``clipped_gossip`` with ``tau: practical``) at least the
      receiver's Byzantine neighbour count; a weight δ (``gts`` ``delta``, ``clipped_gossip``
      ``tau: adaptive``) at least its Byzantine weight b_i; the oracle inputs (``tau:
      oracle``, ``delta: byzantine``) always; None for a rule without such a parameter
      (``mean``, ``median``, a fixed ``tau``);
    - ``connected``: whether the honest graph is connected (μ_min > 0);
    - ``inside``: False when the honest graph is cut or the hypothesis fails, else None.

    The cut needs no constant: if removing B disconnects the honest clients into H₁ and H₂,
    everything H₁ learns of H₂ passes through Byzantine clients, who can show H₁ a
    fabricated H₂ (any values, consistent with any honest protocol); H₁ cannot tell the two
    worlds apart, so no algorithm computes an aggregate of all honest inputs on H₁ — which is
    why Gaucher et al.'s class Γ_{μ_min, b} assumes μ_min > 0. A failed hypothesis puts the
    run outside what the theorem covers (it proves nothing there), not provably broken."""
    W = np.asarray(W, dtype=np.float64)
    m = len(W)
    honest = _honest(m, byzantine)
    mu = algebraic_connectivity(W, honest)
    name = getattr(rule, "name", "mean")
    theorem, quantity = THEOREMS.get(name, (None, None))
    note = NOT_FOUND if theorem else "no proved threshold for this rule in gossipfl's sources"
    if name == "clipped_gossip" and getattr(rule, "tau", None) not in ("adaptive", "oracle"):
        theorem, note = None, ("He et al.'s theorem covers the adaptive radius (tau: adaptive "
                               "or oracle), not this one; the quantity is for comparison")
    value = None
    if quantity == "b/mu_min":
        value = breakdown_quantities(W, byzantine)["ratio"]
    elif quantity is not None:
        value = clipped_gossip_quantities(W, byzantine)["ratio"]
    hypothesis = _hypothesis(rule, W, honest)
    connected = mu > 0
    inside = False if (not connected or hypothesis is False) else None
    return {"rule": name, "theorem": theorem, "quantity": quantity, "value": value,
            "threshold": None, "hypothesis": hypothesis, "connected": connected,
            "inside": inside, "note": note}


def _hypothesis(rule, W: np.ndarray, honest: np.ndarray) -> bool | None:
    """The rule's own hypothesis on its Byzantine neighbours (see :func:`proved_robust`)."""
    name = getattr(rule, "name", "mean")
    b_i = byzantine_weights(W, honest)[honest]
    pattern = (W != 0) & ~honest[None, :]
    np.fill_diagonal(pattern, False)
    count = int(pattern[honest].sum(axis=1).max()) if honest.any() else 0
    tau = getattr(rule, "tau", None)
    delta = getattr(rule, "delta", None)
    if name == "clipped_gossip":
        if tau == "oracle":
            return True
        if tau == "adaptive":
            return bool(b_i.max(initial=0.0) <= float(delta) + 1e-12)
        if tau == "practical":
            return count <= rule.b
        return None
    if name == "gts" and delta is not None:
        return True if delta == "byzantine" else bool(b_i.max(initial=0.0) <= float(delta) + 1e-12)
    if name in ("trimmed_mean", "krum", "cs_plus", "gts"):
        return count <= rule.b
    return None


def run_breakdown(W: np.ndarray, byzantine, rule=None) -> dict:
    """A Byzantine run's summary entry ``breakdown``: :func:`breakdown_quantities`, He et
    al.'s ``gamma`` (:func:`clipped_gossip_gap`) and, under ``proved``, :func:`proved_robust`
    for the run's rule (None: the plain mean)."""
    out = breakdown_quantities(W, byzantine)
    out["gamma"] = clipped_gossip_quantities(W, byzantine)["gamma"]
    out["proved"] = proved_robust(rule, W, byzantine)
    return out


def proved_line(proved: dict) -> str:
    """The run summary's words for :func:`proved_robust`'s answer."""
    value = proved.get("value")
    shown = "" if proved.get("quantity") is None else (
        f"{proved['quantity']} = {'—' if value is None else f'{value:.3g}'}; ")
    if not proved.get("connected", True):
        return f"{proved['rule']}: outside (the honest graph is cut: no algorithm)"
    if proved.get("hypothesis") is False:
        return (f"{proved['rule']}: outside (a receiver has more Byzantine neighbours, or "
                f"weight, than the rule assumes); {shown}".rstrip("; "))
    if proved.get("theorem") is None:
        return f"{proved['rule']}: {shown}no proved threshold".strip()
    return f"{proved['rule']}: {shown}threshold unknown (the theorem's constant was not found)"


__all__ = ["NOT_FOUND", "THEOREMS", "algebraic_connectivity", "breakdown_quantities",
           "byzantine_weights", "clipped_gossip_gap", "clipped_gossip_quantities",
           "honest_laplacian", "proved_line", "proved_robust", "run_breakdown"]
