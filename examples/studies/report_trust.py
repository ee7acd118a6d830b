"""Rebuild the tables and figures of docs/results sections 15–16 (issue 40, the trust study)
from the study folders the sweeps wrote (``gossipfl sweep examples/studies/<study>.yaml``):

    python examples/studies/report_trust.py RUNS [OUT]      # OUT default: docs/results

Section 15 (Byzantine clients, robust gossip): ``gossipfl report``'s table of every
configuration, split by algorithm and graph (``fmnist_trust_byzantine/{kregular,complete,
dpsgd}/table.md``), and per graph and Byzantine fraction one matrix rule × attack of the final
honest test accuracy (``pivots.md``, ``heatmap.png``). Rules and attacks the script does not
know yet are added as rows and columns in the order found.

Section 16 (differential privacy): one row per algorithm, graph and noise level with the
privacy spent, the accuracies and the membership-inference AUC (``privacy.md``), and accuracy
and AUC against epsilon (``privacy.png``). Muffliato reports pairwise network Rényi DP
(``pndp_max`` at order alpha); its (epsilon, delta) column converts it by Mironov's bound,
minimised over the order: the mechanism's RDP is alpha·c, so epsilon(delta) =
min_a a·c + log(1/delta)/(a − 1) = c + 2 sqrt(c log(1/delta)), c = pndp_max / alpha.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

from gossipfl.io import atomic_write_text
from gossipfl.results.reporting import Run, build_report, find_runs

ATTACKS = ["none", "sign_flip", "gaussian", "alie", "ipm", "dissensus", "label_flip",
           "spectral"]
RULES = ["mean", "trimmed_mean", "median", "krum", "clipped_gossip tau=0.3",
         "clipped_gossip tau=oracle", "cs_plus", "gts"]
GRAPHS = {"k_regular": "10-regular", "full": "complete"}


def runs_of(root: Path, study: str, pattern: str = "*") -> list[Path]:
    return sorted(p for p in (root / study).glob(f"{pattern}-seed*") if p.is_dir())


def done(paths: list[Path]) -> list[Run]:
    """The finished and diverged runs among ``paths`` (not those still running)."""
    return [r for r in find_runs(paths) if r.summary.get("status") in ("finished", "diverged")]


# --------------------------------------------------------------------------- Byzantine
def rule_of(config: dict) -> str:
    """The rule with its parameters, e.g. "trimmed_mean (b = 2)", "clipped_gossip tau=0.3"."""
    robust = config["topology"].get("robust") or {"rule": "mean"}
    rule = robust["rule"]
    if rule == "clipped_gossip":
        tau = robust.get("tau", "practical")
        if tau == "adaptive" and robust.get("delta") is None:  # a run before issue 51
            tau = "oracle"
        return f"clipped_gossip tau={tau}"
    params = ", ".join(f"{k} = {v}" for k, v in robust.items() if k != "rule")
    return f"{rule} ({params})" if params else rule


def rule_order(rule: str) -> tuple:
    """The rules in RULES' order (their parameters after), unknown rules last."""
    base = rule if rule in RULES else rule.split(" (")[0]
    return (RULES.index(base) if base in RULES else len(RULES), rule)


def cell_of(config: dict) -> tuple[str, float | None]:
    """(attack, fraction): ('none', None) without Byzantine clients."""
    spec = config.get("byzantine")
    if not spec or not spec.get("clients"):
        return "none", None
    return spec.get("attack", "sign_flip"), spec["clients"]


def final_and_best(run: Run) -> tuple[float | None, float | None, str]:
    """The final and best honest accuracy (a diverged run's final is its last evaluation,
    None when it stopped before one) and "div. rN" for a run that diverged at round N."""
    s = run.summary
    if s.get("status") == "diverged":
        return s.get("final"), s.get("best"), f"div. r{s.get('rounds_done', 0) + 1}"
    return s.get("final"), s.get("best"), ""


def last(run: Run, key: str) -> float | None:
    values = [row.get(key) for row in run.metrics if row.get(key) not in (None, "")]
    return float(values[-1]) if values else None


def pct(values: list[float]) -> str:
    values = [100 * v for v in values]
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def cell_text(runs: list[Run]) -> str:
    """Final accuracy (mean ± std over seeds), the best where it is 2 points higher, and
    how many runs diverged (stopped by train.max_consensus)."""
    finals = [f for f, _, _ in map(final_and_best, runs) if f is not None]
    bests = [b for _, b, _ in map(final_and_best, runs) if b is not None]
    notes = [n for _, _, n in map(final_and_best, runs) if n]
    # the runs that diverged before their first evaluation: no final, only "div. rN"
    early = sorted({n for f, _, n in map(final_and_best, runs) if f is None and n},
                   key=lambda n: int(n.split("r")[-1]))
    if not finals:
        if len(runs) == 1:
            return notes[0]
        return f"{len(notes)} of {len(runs)} div. " + ", ".join(n[5:] for n in early)
    text = pct(finals)
    if bests and statistics.mean(bests) - statistics.mean(finals) > 0.02:
        text += f" (best {pct(bests)})"
    if early:  # the mean is over the runs with an evaluation
        text += (f" [{len(finals)}], {len(notes)} of {len(runs)} div. "
                 + ", ".join(n[5:] for n in early))
    elif notes:
        text += (f", {notes[0]}" if len(runs) == 1 else f", {len(notes)} of {len(runs)} div.")
    elif len(runs) > 1:
        text += f" [{len(runs)}]"
    return text


def byzantine_pivots(runs: list[Run], title: str) -> tuple[str, list[tuple[str, dict]]]:
    """Markdown matrices rule × attack per (graph, fraction), and their numbers for the
    heatmap."""
    graphs = sorted({r.config["topology"]["name"] for r in runs},
                    key=lambda g: list(GRAPHS).index(g) if g in GRAPHS else 99)
    fractions = sorted({cell_of(r.config)[1] for r in runs} - {None})
    out, panels, consensus_tables = [], [], []
    for graph in graphs:
        mine = [r for r in runs if r.config["topology"]["name"] == graph]
        rules = sorted({rule_of(r.config) for r in mine}, key=rule_order)
        labels = {rule: rule for rule in rules}
        for fraction in fractions:
            cells: dict[tuple[str, str], list[Run]] = {}
            for r in mine:
                attack, f = cell_of(r.config)
                if f in (None, fraction):
                    cells.setdefault((rule_of(r.config), attack), []).append(r)
            if not any(a != "none" for _, a in cells):
                continue
            attacks = sorted({a for _, a in cells},
                             key=lambda a: ATTACKS.index(a) if a in ATTACKS else 99)
            head = (f"**{title}, {GRAPHS.get(graph, graph)} graph, "
                    f"{round(100 * fraction)} % Byzantine** (final honest test accuracy, %)")
            lines = [head, "", "| rule | " + " | ".join(attacks) + " |",
                     "|---|" + "---|" * len(attacks)]
            numbers = {}
            for rule in rules:
                row = []
                for attack in attacks:
                    group = cells.get((rule, attack), [])
                    row.append(cell_text(group) if group else "—")
                    finals = [final_and_best(x)[0] for x in group]
                    finals = [0.1 if v is None else v for v in finals]
                    numbers[(rule, attack)] = statistics.mean(finals) if finals else None
                lines.append(f"| {labels[rule]} | " + " | ".join(row) + " |")
            out.append("\n".join(lines))
            cons = [head.replace("final honest test accuracy, %",
                                 "final honest consensus distance, mean over the runs"), "",
                    "| rule | " + " | ".join(attacks) + " |", "|---|" + "---|" * len(attacks)]
            for rule in rules:
                row = []
                for attack in attacks:
                    values = [consensus(x) for x in cells.get((rule, attack), [])]
                    values = [v for v in values if v is not None]
                    row.append(f"{statistics.mean(values):.3g}" if values else "—")
                cons.append(f"| {labels[rule]} | " + " | ".join(row) + " |")
            consensus_tables.append("\n".join(cons))
            name = f"{title}, {GRAPHS.get(graph, graph)}, {round(100 * fraction)} %"
            panels.append((name, {"rules": rules, "attacks": attacks, "numbers": numbers}))
    return "\n\n".join(out + consensus_tables), panels


def consensus(run: Run) -> float | None:
    """The honest clients' final consensus distance (all clients' without Byzantine ones)."""
    value = last(run, "honest_consensus")
    return last(run, "consensus") if value is None else value


def heatmap(panels: list[tuple[str, dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cols = 2
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(15, 4.6 * rows), squeeze=False)
    fig.subplots_adjust(wspace=0.6, hspace=0.5)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (title, p) in zip(axes.flat, panels):
        grid = np.array([[np.nan if p["numbers"][(r, a)] is None else 100 * p["numbers"][(r, a)]
                          for a in p["attacks"]] for r in p["rules"]])
        image = ax.imshow(grid, vmin=10, vmax=80, cmap="RdYlGn", aspect="auto")
        ax.set_xticks(range(len(p["attacks"])), p["attacks"], rotation=30, ha="right")
        ax.set_yticks(range(len(p["rules"])),
                      [r.replace("clipped_gossip", "clipped") for r in p["rules"]])
        for (i, j), value in np.ndenumerate(grid):
            if not np.isnan(value):
                ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=8)
        ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=axes, shrink=0.6, label="final honest test accuracy (%)")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def write_table(runs: list[Run], out: Path, targets: list[float]) -> str:
    result = build_report(runs, None, targets)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "table.md", result.markdown)
    atomic_write_text(out / "table.csv", result.csv)
    return result.markdown


def byzantine(root: Path, out: Path) -> None:
    main_runs = done(runs_of(root, "fmnist_trust_byzantine"))
    dpsgd_runs = done(runs_of(root, "fmnist_trust_byzantine_dpsgd"))
    breakdown_runs = done(runs_of(root, "fmnist_trust_byzantine_breakdown"))
    folder = out / "fmnist_trust_byzantine"
    for name, runs, targets in (
            ("kregular", [r for r in main_runs if r.config["topology"]["name"] == "k_regular"],
             [0.7, 0.75]),
            ("complete", [r for r in main_runs if r.config["topology"]["name"] == "full"],
             [0.7, 0.75]),
            ("dpsgd", dpsgd_runs, [0.65, 0.7]),
            ("breakdown", breakdown_runs, [0.7, 0.75])):
        if runs:
            write_table(runs, folder / name, targets)
            print(f"{name}: {len(runs)} runs")
    text_a, panels_a = byzantine_pivots(main_runs, "DFedAvg")
    text_b, panels_b = byzantine_pivots(dpsgd_runs, "D-PSGD")
    text_c, panels_c = byzantine_pivots(breakdown_runs, "DFedAvg")
    text = "\n\n".join(t for t in (text_a, text_b, text_c) if t)
    atomic_write_text(folder / "pivots.md", text + "\n")
    print(text)
    if panels_a or panels_b:
        heatmap(panels_a + panels_b + panels_c, folder / "heatmap.png")


# --------------------------------------------------------------------------- privacy
def dp_level(config: dict) -> tuple[str, str, float | None]:
    """(algorithm label, graph, sigma): sigma None for the non-private run."""
    graph = config["topology"]["name"]
    algo = config["algorithm"]
    if algo["name"] == "muffliato":
        return "Muffliato", graph, float(algo.get("sigma", 0.3))
    privacy = config.get("privacy")
    return ("DP-DFedAvg" if privacy else "DFedAvg"), graph, (
        float(privacy["noise_multiplier"]) if privacy else None)


def rdp_to_dp(pndp: float, alpha: float, delta: float) -> float:
    c = pndp / alpha
    return c + 2 * math.sqrt(c * math.log(1 / delta))


def epsilon_of(run: Run, delta: float = 1e-5) -> tuple[float, float | None, float | None]:
    """(epsilon at delta, pndp_max, pndp_mean) after the run; inf without noise."""
    if run.config["algorithm"]["name"] == "muffliato":
        pmax, pmean = last(run, "pndp_max"), last(run, "pndp_mean")
        if pmax is None or math.isinf(pmax):
            return math.inf, pmax, pmean
        alpha = float(run.config["algorithm"].get("alpha", 2.0))
        return rdp_to_dp(pmax, alpha, delta), pmax, pmean
    eps = run.summary.get("final_epsilon")
    return (math.inf if eps is None else float(eps)), None, None


def fmt(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    values = [scale * v for v in values if v is not None]
    if not values:
        return "—"
    if any(math.isinf(v) for v in values):
        return "∞"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def fmt_eps(values: list[float]) -> str:
    if not values or any(math.isinf(v) for v in values):
        return "∞"
    m = statistics.mean(values)
    return f"{m:.3g}" if m < 1000 else f"{m:.2e}"


def privacy(root: Path, out: Path) -> None:
    runs = done(runs_of(root, "fmnist_trust_privacy"))
    if not runs:
        print("fmnist_trust_privacy: no runs yet")
        return
    folder = out / "fmnist_trust_privacy"
    write_table(runs, folder, [0.6, 0.7])
    groups: dict[tuple, list[Run]] = {}
    for run in runs:
        groups.setdefault(dp_level(run.config), []).append(run)
    order = {"DFedAvg": 0, "DP-DFedAvg": 1, "Muffliato": 2}

    def key(k):
        algo, graph, sigma = k
        return (graph != "ring", order.get(algo, 9), -1 if sigma is None else
                (-sigma if algo != "Muffliato" else sigma))

    lines = [("| algorithm | graph | σ | runs | ε (δ = 1e-5) | pndp_max (RDP α = 2) | "
              "pndp_mean | final test_acc (%) | best test_acc (%) | final local_acc_mean (%) "
              "| final MIA AUC | final consensus |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    points = []
    for k in sorted(groups, key=key):
        algo, graph, sigma = k
        group = groups[k]
        eps = [epsilon_of(r) for r in group]
        accs = [r.summary.get("final") for r in group]
        bests = [r.summary.get("best") for r in group]
        local = [last(r, "local_acc_mean") for r in group]
        auc = [last(r, "mia_auc") for r in group]
        cons = [last(r, "consensus") for r in group]
        pmax = [e[1] for e in eps if e[1] is not None]
        pmean = [e[2] for e in eps if e[2] is not None]
        lines.append(
            f"| {algo} | {GRAPHS.get(graph, graph)} | {'—' if sigma is None else sigma} | "
            f"{len(group)} | {fmt_eps([e[0] for e in eps])} | "
            f"{fmt_eps(pmax) if pmax else '—'} | {fmt_eps(pmean) if pmean else '—'} | "
            f"{fmt(accs, 100)} | {fmt(bests, 100)} | {fmt(local, 100)} | "
            f"{fmt(auc, 1, 3)} | {fmt(cons, 1, 3)} |")
        points.append((algo, graph, sigma, statistics.mean(e[0] for e in eps)
                       if not any(math.isinf(e[0]) for e in eps) else math.inf,
                       statistics.mean(a for a in accs if a is not None),
                       statistics.mean(a for a in auc if a is not None)))
    text = "\n".join(lines)
    atomic_write_text(folder / "privacy.md", text + "\n")
    print(text)
    privacy_figure(points, folder / "privacy.png")


def privacy_figure(points: list[tuple], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    finite = [p[3] for p in points if not math.isinf(p[3])]
    right = 10 ** math.ceil(math.log10(max(finite))) * 10 if finite else 100
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2))
    for algo, marker in (("DP-DFedAvg", "o"), ("Muffliato", "s")):
        for graph, style in (("ring", "-"), ("full", "--")):
            mine = sorted((p for p in points if p[0] == algo and p[1] == graph),
                          key=lambda p: p[3])
            if not mine:
                continue
            xs = [right if math.isinf(p[3]) else p[3] for p in mine]
            label = f"{algo}, {GRAPHS.get(graph, graph)}"
            ax1.plot(xs, [100 * p[4] for p in mine], style, marker=marker, label=label)
            ax2.plot(xs, [p[5] for p in mine], style, marker=marker, label=label)
    for p in points:
        if p[0] == "DFedAvg":
            style = "-" if p[1] == "ring" else "--"
            label = f"DFedAvg without DP, {GRAPHS.get(p[1], p[1])}"
            ax1.axhline(100 * p[4], color="grey", lw=0.8, ls=style, label=label)
            ax2.axhline(p[5], color="grey", lw=0.8, ls=style, label=label)
    for ax, name in ((ax1, "final test accuracy of the average model (%)"),
                     (ax2, "membership-inference AUC (local models)")):
        ax.set_xscale("log")
        ticks = [10.0 ** k for k in range(round(math.log10(right)))]
        ax.set_xticks(ticks + [right], [f"$10^{{{k}}}$" for k in range(len(ticks))] + ["∞"])
        ax.set_xlabel("ε at δ = 1e-5 (rightmost: ∞; Muffliato: worst pair, converted)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    ax2.axhline(0.5, color="black", lw=0.6, ls=":")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    root = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("docs/results")
    byzantine(root, out)
    privacy(root, out)


if __name__ == "__main__":
    main()
