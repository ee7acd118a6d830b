"""Rebuild the tables of docs/results section 15b (issue 51: the sparse-graph claim, each
rule's measured breakdown beside the proved quantities, the spectral attack with a fixed ε)
from the study folders the sweeps wrote:

    python examples/studies/report_trust_sparse.py RUNS [OUT]      # OUT default: docs/results

RUNS holds ``fmnist_trust_sparse/`` and ``fmnist_trust_spectral_fixed/``
(``gossipfl sweep examples/studies/<study>.yaml``). Writes
``OUT/fmnist_trust_sparse/pivots.md``: per Byzantine placement the graph quantities of
:mod:`gossipfl.trust.breakdown` (μ_min, b, b/μ_min, γ, δ_max/γ², the largest count of
Byzantine neighbours) and each rule's hypothesis there, then one matrix rule × (placement,
attack) of the final honest test accuracy, the fixed-ε spectral runs beside the tuned ones.
The cells read as in section 15 (``report_trust.py``: mean ± std over seeds, "(best …)",
"div. rN").
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from report_trust import cell_text, done, rule_of, rule_order

from gossipfl.io import atomic_write_text
from gossipfl.topology import build_topology
from gossipfl.trust.breakdown import (
    breakdown_quantities,
    clipped_gossip_quantities,
    proved_robust,
)
from gossipfl.trust.rules import build_rule


def placement(config: dict) -> tuple[int, ...]:
    spec = config.get("byzantine") or {}
    return tuple(spec.get("clients") or ())


def attack_of(config: dict) -> str:
    """The attack as a column names it: "spectral", "spectral ε=10", "spectral random"."""
    spec = config.get("byzantine") or {}
    if not spec:
        return "none"
    eps = spec.get("epsilon")
    name = spec["attack"] if eps is None else f"{spec['attack']} ε={eps:g}"
    return f"{name} random" if spec.get("direction") == "random" else name


def quantities_table(W: np.ndarray, placements: list[tuple[int, ...]], rules: list[dict]
                     ) -> str:
    head = ("| Byzantine | max Byzantine neighbours | μ_min | b | b/μ_min | γ (He et al.) | "
            "δ_max/γ² | " + " | ".join(f"hypothesis: {rule_of({'topology': {'robust': r}})}"
                                         for r in rules) + " |")
    out = [head, "|" + "---|" * (7 + len(rules))]
    for byz in placements:
        q = breakdown_quantities(W, np.array(byz))
        c = clipped_gossip_quantities(W, np.array(byz))
        hyp = []
        for spec in rules:
            got = proved_robust(build_rule(spec), W, list(byz))
            hyp.append({True: "met", False: "fails", None: "—"}[got["hypothesis"]]
                       if got["connected"] else "cut")
        out.append(f"| {list(byz)} | {q['byzantine_neighbours_max']} | {q['mu_min']:.3f} | "
                   f"{q['b_max']:.2f} | {q['ratio']:.2f} | {c['gamma']:.3f} | "
                   f"{c['ratio']:.2f} | " + " | ".join(hyp) + " |")
    return "\n".join(out)


def matrix(runs, rules: list[str], columns: list[tuple[str, tuple]]) -> list[str]:
    """Markdown rows: rule × (attack, placement), the cells of report_trust.cell_text."""
    lines = ["| rule | " + " | ".join("none" if a == "none" else f"{list(p)} {a}"
                                     for a, p in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for rule in rules:
        cells = []
        for attack, byz in columns:
            mine = [r for r in runs if rule_of(r.config) == rule
                    and attack_of(r.config) == attack and placement(r.config) == byz]
            cells.append(cell_text(mine) if mine else "")
        lines.append(f"| {rule} | " + " | ".join(cells) + " |")
    return lines


def main(root: Path, out: Path) -> None:
    runs = done(sorted(p for study in ("fmnist_trust_sparse", "fmnist_trust_spectral_fixed")
                       for p in (root / study).glob("*-seed*") if p.is_dir()))
    if not runs:
        raise SystemExit(f"no finished run under {root}")
    W = build_topology("grid", 16).matrix(0)
    placements = sorted({placement(r.config) for r in runs} - {()}, key=len)
    rules = sorted({rule_of(r.config) for r in runs}, key=rule_order)
    specs = {rule_of(r.config): r.config["topology"]["robust"] for r in runs}
    text = [("# The sparse-graph study (issue 51): the 4 × 4 torus, Byzantine clients next to "
            "client 5"), "", ("Graph quantities (`gossipfl.trust.breakdown`, float64) and each "
            "rule's own hypothesis on its Byzantine neighbours (`proved_robust`; the theorems' "
            "constants were not found, so no threshold):"), "",
            quantities_table(W, placements, [specs[r] for r in rules if r != "mean"]), ""]
    columns = [("none", ())] + sorted({(attack_of(r.config), placement(r.config))
                                       for r in runs} - {("none", ())},
                                      key=lambda c: (len(c[1]), c[0]))
    tuned = [c for c in columns if "ε=" not in c[0]]
    text += [("Final honest test accuracy (%), by rule (rows) and Byzantine placement × "
             "attack (columns; spectral with its line search):"), ""]
    text += matrix(runs, rules, tuned)
    spectral = [c for c in columns if c[0].startswith("spectral")]
    spectral.sort(key=lambda c: (len(c[1]), c[0] != "spectral",
                                 float(c[0].split("=")[1]) if "=" in c[0] else 0.0))
    fixed_rules = sorted({rule_of(r.config) for r in runs if "ε=" in attack_of(r.config)},
                         key=rule_order)
    text += ["", ("The spectral attack, tuned (its line search, per receiver and step) and "
             "with a fixed ε:"), ""]
    text += matrix(runs, fixed_rules, spectral)
    text.append("")
    (out / "fmnist_trust_sparse").mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "fmnist_trust_sparse" / "pivots.md", "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else Path("docs/results"))
