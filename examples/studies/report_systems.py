"""Rebuild the tables and figures of docs/results section 12 (issue 27) from the study folders
the sweeps wrote (``gossipfl sweep examples/studies/fmnist_systems_<part>.yaml --out RUNS``):

    python examples/studies/report_systems.py RUNS [OUT]      # OUT default: docs/results

- fmnist_systems_stragglers: the synchronous algorithms (stragglers, fmnist_systems_stragglers),
  FedAvg with a deadline (fmnist_systems_deadline) and AD-PSGD (fmnist_systems_adpsgd) in one
  table: compare them by simulated time ("time to X %", accuracy_vs_time.png), not by round
  (an AD-PSGD round is 1/5 of a synchronous round's gradient work);
- fmnist_systems_churn: churn and link failures (final accuracy per algorithm and setting);
- fmnist_systems_links: slow links, exact against compressed gossip on a sparse and a denser
  graph (time to X % and bytes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from gossipfl.results.reporting import group_runs

sys.path.insert(0, str(Path(__file__).parent))
from report_toolkit import report_sections, runs_of


def accuracy_at(runs, seconds: float) -> str:
    """Mean ± std over the runs of the test accuracy of the last evaluation at simulated time
    ≤ ``seconds`` (– when a run ends before it)."""
    values = []
    for run in runs:
        rows = [r for r in run.metrics if r.get("test_acc") is not None]
        if not rows or rows[-1]["sim_time"] < seconds:
            return "–"
        before = [r["test_acc"] for r in rows if r["sim_time"] <= seconds]
        if not before:  # no evaluation yet by then
            return "–"
        values.append(100 * before[-1])
    return f"{np.mean(values):.2f} ± {np.std(values, ddof=1) if len(values) > 1 else 0:.2f}"


def time_table(runs, seconds=(1, 2, 5, 10, 30)) -> str:
    """Accuracy at equal simulated time, one row per configuration."""
    lines = ["| configuration | " + " | ".join(f"at {s} s" for s in seconds) + " |",
             "|---|" + "---|" * len(seconds)]
    for label, group in group_runs(runs).items():
        lines.append(f"| {label} | " + " | ".join(accuracy_at(group, s) for s in seconds)
                     + " |")
    return "\n".join(lines)


def main() -> None:
    root = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("docs/results")
    stragglers = ("fmnist_systems_stragglers", "fmnist_systems_deadline", "fmnist_systems_adpsgd")
    sections = {
        "fmnist_systems_stragglers": ([p for study in stragglers for p in runs_of(root, study)],
                                      [0.75, 0.8]),
        "fmnist_systems_churn": (runs_of(root, "fmnist_systems_churn"), [0.75, 0.8]),
        "fmnist_systems_links": (runs_of(root, "fmnist_systems_links"), [0.75, 0.8]),
    }

    def at_equal_time(name: str, runs: list) -> None:
        if any(row.get("sim_time") for run in runs for row in run.metrics):
            table = time_table(runs)
            (out / name / "accuracy_at_time.md").write_text(table + "\n")
            print(f"test accuracy (%) at equal simulated time\n{table}")

    report_sections(sections, out, then=at_equal_time)


if __name__ == "__main__":
    main()
