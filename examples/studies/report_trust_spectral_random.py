"""The table of docs/results section 15b's control of the spectral attack (issue 51: the
Fiedler direction against a random direction of the same norm, both with the line search)
from the study folder the sweep wrote:

    python examples/studies/report_trust_spectral_random.py RUNS [OUT]  # OUT: docs/results

RUNS holds ``fmnist_trust_spectral_random/`` (``gossipfl sweep
examples/studies/fmnist_trust_spectral_random.yaml``). Writes
``OUT/fmnist_trust_sparse/spectral_random/pivots.md``: one matrix rule × (placement,
direction) of the final honest test accuracy, the cells as in ``report_trust_sparse.py``
(mean ± std over seeds, "(best …)", "div. rN"), then the same per seed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report_trust import done, rule_of, rule_order
from report_trust_sparse import attack_of, matrix, placement

from gossipfl.io import atomic_write_text


def main(root: Path, out: Path) -> None:
    runs = done(sorted(p for p in (root / "fmnist_trust_spectral_random").glob("*-seed*")
                       if p.is_dir()))
    if not runs:
        raise SystemExit(f"no finished run under {root}")
    rules = sorted({rule_of(r.config) for r in runs}, key=rule_order)
    columns = sorted({(attack_of(r.config), placement(r.config)) for r in runs},
                     key=lambda c: (len(c[1]), c[0]))
    text = [("# The spectral attack's control (issue 51): the Fiedler direction against a "
             "random one of the same norm"), "",
            ("Final honest test accuracy (%), the 4 × 4 torus, Byzantine clients next to "
             "client 5, ε by the line search in both; `spectral random`: `direction: "
             "random`. Mean ± std over the seeds run:"), ""]
    text += matrix(runs, rules, columns)
    for seed in sorted({r.config.get("seed", 0) for r in runs}):
        text += ["", f"Seed {seed}:", ""]
        text += matrix([r for r in runs if r.config.get("seed", 0) == seed], rules, columns)
    text.append("")
    folder = out / "fmnist_trust_sparse" / "spectral_random"
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "pivots.md", "\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else Path("docs/results"))
