"""Rebuild the tables and figures of docs/results sections 9–11 (issues 25 and 26) from the
study folders the sweeps wrote (``gossipfl sweep examples/studies/<study>.yaml --out RUNS``):

    python examples/studies/report_toolkit.py RUNS [OUT]      # OUT default: docs/results

Section 9 joins the one-gradient-per-round methods (fmnist_tracking, fmnist_tracking_d2:
500 rounds) and the K-step ones (fmnist_tracking_local: 100 rounds of K = 5), split by
partition; compare them at equal gradient steps (final) and equal bytes ("sent to" columns,
accuracy_vs_bytes.png), not per round.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from gossipfl.results.reporting import Run, find_runs, report
from gossipfl.topology import TOPOLOGY_KINDS


def relevant(config: dict) -> dict:
    """The config without the topology keys its graph does not read (the parameters its
    registration declares; the others hold defaults that would show in labels), so that
    labels name only what applies."""
    topology = dict(config.get("topology", {}))
    name = topology.get("name")
    kind = TOPOLOGY_KINDS.get(name)
    for key in ("k", "s", "p", "path"):
        if kind is None or key not in kind.rules:
            topology.pop(key, None)
    if name != "custom":
        topology.pop("mixing", None)
    return {**config, "topology": topology}


def runs_of(root: Path, study: str, pattern: str = "*") -> list[Path]:
    return sorted(p for p in (root / study).glob(f"{pattern}-seed*") if p.is_dir())


def main() -> None:
    root = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("docs/results")
    tracking = ("fmnist_tracking", "fmnist_tracking_local", "fmnist_tracking_d2")
    sections = {}
    for split in ("dirichlet", "pathological"):
        sections[f"fmnist_tracking/{split}"] = (
            [p for study in tracking for p in runs_of(root, study, f"*{split}*")], [0.6, 0.7])
        sections[f"fmnist_graphs/{split}"] = (runs_of(root, "fmnist_graphs", f"*{split}*"),
                                              [0.6, 0.7])
        sections[f"fmnist_push_sum/{split}"] = (runs_of(root, "fmnist_push_sum", f"*{split}*"),
                                                [0.6, 0.7])
    sections["fmnist_compression"] = (runs_of(root, "fmnist_compression")
                                      + runs_of(root, "fmnist_compression_kregular"),
                                      [0.75, 0.8])
    sections["fmnist_compression_named"] = (runs_of(root, "fmnist_compression_named"),
                                            [0.7, 0.75])
    sections["fmnist_compression_steps"] = (runs_of(root, "fmnist_compression_steps"),
                                            [0.7, 0.75])
    report_sections(sections, out)


def report_sections(sections: dict[str, tuple[list[Path], list[float]]], out: Path,
                    then: Callable[[str, list[Run]], None] | None = None) -> None:
    """Each section's table and figures under ``out / name`` (labels without the topology
    keys that do not apply); ``then(name, runs)`` for anything more a section shows."""
    for name, (paths, targets) in sections.items():
        if not paths:
            print(f"{name}: no runs yet")
            continue
        runs = find_runs(paths)
        for run in runs:
            run.config = relevant(run.config)
        result = report(runs, out / name, targets=targets)
        print(f"== {name} ({len(paths)} runs)\n{result.markdown}")
        if then is not None:
            then(name, runs)


if __name__ == "__main__":
    main()
