"""Reporting: loading run directories back, grouping them into configurations, comparison
tables and figures.

Tables compare *configurations*: runs whose configs differ only in seed (and in names, output
and device settings) form one group, reported as mean ± std over its seeds.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gossipfl.analysis.columns import analysis_columns
from gossipfl.assembly.plan import format_bytes
from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.io import atomic_write_text
from gossipfl.results.rundir import (
    ACCURACY_METRICS,
    CONFIG_FILE,
    METRIC_COLUMNS,
    METRIC_LABELS,
    METRICS_FILE,
    NON_RESULT_KEYS,
    SUMMARY_FILE,
    RunDirectory,
    honest_key,
    is_personalized,
    metrics_from_csv,
    primary_metric,
)


# --------------------------------------------------------------------------------------------
# Loading runs
# --------------------------------------------------------------------------------------------
@dataclass
class Run:
    """A run directory as read back: its config dict, metric rows and summary."""

    path: Path
    config: dict
    metrics: list[dict]
    summary: dict
    problem: str | None = None  # why its metrics cannot be used (file missing, empty, damaged)

    @property
    def status(self) -> str:
        return self.summary.get("status", "unknown")

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    @property
    def diverged_at(self) -> int | None:
        """The round a diverged run stopped at (None: it did not diverge)."""
        if self.status != "diverged":
            return None
        found = re.search(r"diverged at round (\d+)", str(self.summary.get("error", "")))
        if found:
            return int(found.group(1))
        done = self.summary.get("rounds_done")
        return done + 1 if isinstance(done, int) else None

    def column(self, key: str) -> list:
        return [row.get(key) for row in self.metrics]


def load_run(path: str | Path) -> Run:
    """The run in ``path``; a damaged ``config.yaml`` or ``summary.json`` (or ``metrics.csv``)
    makes it a run with a ``problem``, which a report leaves out naming the file."""
    run_dir = RunDirectory(path)
    if not run_dir.is_run():
        raise GossipflError(f"report: '{run_dir.path}' is not a run directory "
                            f"(it has no {CONFIG_FILE}).")
    try:
        config = run_dir.read_config_dict()
    except GossipflError:
        return Run(run_dir.path, {}, [], {},
                   f"{run_dir.file(CONFIG_FILE)} cannot be read or is not a gossipfl config")
    summary, problem = read_summary_checked(run_dir)
    if problem is not None:
        return Run(run_dir.path, config, [], {}, problem)
    metrics, problem = read_metrics_checked(run_dir)
    if not metrics and summary.get("status") == "diverged":  # before its first evaluation:
        problem = None  # a row of the table all the same, "(diverged at round t)"
    return Run(run_dir.path, config, metrics, summary, problem)


def read_summary_checked(run_dir: RunDirectory) -> tuple[dict, str | None]:
    """``summary.json`` as a dict ({} when there is none yet), or {} and why it cannot be
    used (a run whose status is unknown must not be counted as finished)."""
    path = run_dir.file(SUMMARY_FILE)
    if not path.exists():
        return {}, None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        return {}, f"{path} cannot be read ({type(exc).__name__})"
    except ValueError:
        return {}, f"{path} is damaged (not JSON)"
    if not isinstance(data, dict) or not isinstance(data.get("status", ""), str):
        return {}, f"{path} is damaged (not a gossipfl summary)"
    return data, None


def read_metrics_checked(run_dir: RunDirectory) -> tuple[list[dict], str | None]:
    """The rows of metrics.csv, or none and why they cannot be used."""
    path = run_dir.file(METRICS_FILE)
    if not path.is_file():
        return [], f"{path} is missing"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return [], f"{path} cannot be read ({type(exc).__name__})"
    try:
        rows = metrics_from_csv(text)
    except csv.Error:
        return [], f"{path} is damaged (a malformed line)"
    if not rows:
        return [], f"{path} is empty"
    for line, row in enumerate(rows, 2):
        numbers = [row.get(k) for k in METRIC_COLUMNS if k in row]
        if not isinstance(row.get("round"), int) or not all(
                isinstance(v, (int, float)) for v in numbers):
            return [], f"{path} is damaged (line {line})"
    return rows, None


def find_runs(paths: Sequence[str | Path]) -> list[Run]:
    """Runs in ``paths``: each a run directory or a folder (e.g. a study) holding some. A
    run found twice (a study folder and one of its runs, or two spellings of one path) is
    counted once: runs are told apart by their resolved directory."""
    found: dict[Path, Run] = {}  # resolved → as given (first spelling)
    for given in paths:
        path = Path(given)
        if not path.is_dir():
            raise GossipflError(f"report: '{path}' is not a directory.")
        runs = [load_run(p) for p in _run_dirs(path) if p.resolve() not in found]
        for run in study_order(path, runs):
            found.setdefault(run.path.resolve(), run)
    return list(found.values())


def study_order(folder: Path, runs: list[Run]) -> list[Run]:
    """``runs`` of a study folder in the order its sweep ran them (and wrote table.csv): the
    grid's points in the order of study.yaml (the first key varying slowest), each point's
    seeds in order; runs the grid does not name keep their place after those. Without a
    readable study.yaml, as given (sorted by path)."""
    try:
        raw = yaml.safe_load((folder / "study.yaml").read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return runs
    grid = raw.get("grid") if isinstance(raw, dict) else None
    seeds = raw.get("seeds") if isinstance(raw, dict) else None
    seeds = seeds if isinstance(seeds, list) else []
    if isinstance(grid, dict) and all(isinstance(v, list) for v in grid.values()):
        axes = [[{name: value} for value in values] for name, values in grid.items()]
    elif isinstance(grid, list) and all(isinstance(point, dict) for point in grid):
        axes = [grid]  # a list of points: their order
    else:
        return runs

    def position(points: list[dict], flat: dict) -> int:
        found = [n for n, point in enumerate(points) if _matches(point, flat)]
        return found[0] if found else len(points)

    def key(item: tuple[int, Run]) -> tuple:
        index, run = item
        flat = flatten(run.config)
        return (*(position(points, flat) for points in axes),
                seeds.index(run.seed) if run.seed in seeds else len(seeds), index)

    return [run for _, run in sorted(enumerate(runs), key=key)]


def _matches(point: dict, flat: dict) -> bool:
    """Whether a run's flattened config holds a grid point's values (``{"algorithm":
    "dsgt"}``, ``{"train.lr": 0.1}``, ``{"topology.robust": {"rule": "median"}}``)."""
    for name, value in point.items():
        if name == "algorithm" and isinstance(value, str):
            value = {"name": value}
        wanted = flatten(value, f"{name}.") if isinstance(value, dict) and value \
            else {name: value}
        if any(flat.get(k) != v for k, v in wanted.items()):
            return False
    return True


def _run_dirs(path: Path) -> list[Path]:
    """``path`` itself when it is a run directory, else the run directories under it."""
    if RunDirectory(path).is_run():
        return [path]
    try:
        found = sorted(p.parent for p in path.rglob(CONFIG_FILE))
        if not found:
            list(path.iterdir())  # an unreadable folder lists nothing: say so, not "no runs"
    except OSError as exc:
        raise GossipflError(f"report: cannot read the folder '{path}' "
                            f"({exc.strerror or type(exc).__name__}).") from None
    if not found:
        raise GossipflError(f"report: no run directories (folders with {CONFIG_FILE}) "
                            f"under '{path}'.")
    return found


# --------------------------------------------------------------------------------------------
# Grouping runs into configurations
# --------------------------------------------------------------------------------------------
def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _result_keys(config: dict) -> dict[str, Any]:
    """The flattened keys that decide a run's results. A key set to None counts as absent,
    so runs written before a setting existed (no key) group with later runs that leave it
    unset (None), and an unset key never shows in a label."""
    flat = flatten(config)
    return {k: v for k, v in flat.items() if v is not None
            and not any(k == n or k.startswith(f"{n}.") for n in NON_RESULT_KEYS)}


def group_runs(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """Runs grouped by configuration (all but the seed), labelled by what differs."""
    groups: dict[str, list[Run]] = {}
    keys: dict[str, dict[str, Any]] = {}
    for run in runs:
        flat = _result_keys(run.config)
        ident = json.dumps(flat, sort_keys=True, default=str)
        groups.setdefault(ident, []).append(run)
        keys[ident] = flat
    labels = config_labels(list(keys.values()))
    return {label: groups[ident] for label, ident in zip(labels, groups)}


def config_labels(configs: Sequence[dict[str, Any]]) -> list[str]:
    """A short distinct label per flattened config: the values of the keys that differ."""
    all_keys = list(dict.fromkeys(k for c in configs for k in c))
    varying = [k for k in all_keys if _varies(k, configs)]
    varying.sort(key=lambda k: (k != "algorithm.name", not k.startswith("algorithm.")))
    labels = []
    for config in configs:
        parts = [_label_part(k, config[k]) for k in varying if k in config]
        labels.append(", ".join(parts) or str(config.get("algorithm.name", "run")))
    return _dedupe(labels)


def _varies(key: str, configs: Sequence[dict[str, Any]]) -> bool:
    """Whether ``key`` takes several values; an algorithm's own parameter only counts when
    it differs between configs of that same algorithm (the name tells the rest)."""
    def distinct(group: Iterable[dict[str, Any]]) -> int:
        return len({json.dumps(c.get(key), default=str) for c in group})

    if not key.startswith("algorithm.") or key == "algorithm.name":
        return distinct(configs) > 1
    names = {c.get("algorithm.name") for c in configs}
    return any(distinct(c for c in configs if c.get("algorithm.name") == n and key in c) > 1
               for n in names)


def _label_part(key: str, value: Any) -> str:
    leaf = key.rsplit(".", 1)[-1]
    if leaf == "name":
        return str(value)
    return f"{leaf}={value}"


def _dedupe(labels: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return out


#: Flatness columns a table shows when its runs were analyzed, with their headers.
FLATNESS_COLUMNS = {"top_eigenvalue": "top Hessian eigenvalue",
                    "trace": "Hessian trace",
                    "top_eigenvalue_local_mean": "top eigenvalue (local models)",
                    "trace_local_mean": "trace (local models)"}


# --------------------------------------------------------------------------------------------
# Comparison tables
# --------------------------------------------------------------------------------------------
@dataclass
class Stat:
    """Mean ± sample standard deviation of some values (std 0 for one value)."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat | None:
        if not values:
            return None
        arr = np.asarray(values, dtype=np.float64)
        std = float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
        return cls(float(arr.mean()), std, len(arr))


@dataclass
class TableRow:
    """One configuration of a comparison table."""

    label: str
    runs: int  # runs with results
    seeds: list
    final: Stat | None
    best: Stat | None
    to_target: dict[float, tuple[Stat | None, int]]  # target → (rounds stat, runs reaching)
    seconds_per_round: float | None
    bytes_total: float | None
    failed: int = 0  # runs without usable results: failed or diverged
    consensus: Stat | None = None  # final consensus distance (1/M) Σ‖x_i − x̄‖²
    diverged: int = 0  # of the failed: runs that diverged
    diverged_at: list[int] = field(default_factory=list)  # the round each of them stopped at
    flatness: dict[str, Stat] = field(default_factory=dict)  # analysis COLUMNS → stat
    metric: str = "test_acc"  # the accuracy this row reports
    held: bool = True  # whether its runs record ``metric`` at all (False: --metric forced it)
    bytes_to_target: dict[float, Stat | None] = field(default_factory=dict)  # target → bytes
    time_to_target: dict[float, Stat | None] = field(default_factory=dict)  # → sim_time
    clocked: bool = False  # whether its runs have the systems clock (sim_time)
    # private runs (an epsilon column): budget ε → best metric while ε stayed within it
    within_budget: dict[float, Stat | None] = field(default_factory=dict)


#: The privacy budgets ε at which a private run's table reports its accuracy.
EPSILON_BUDGETS = (1.0, 4.0, 8.0)


def best_within_budget(rows: Sequence[dict], metric: str, epsilon: float) -> float | None:
    """The best ``metric`` over the evaluated rounds whose privacy spent (``epsilon``, the
    largest over the clients) is at most the budget; None when no round stayed within it."""
    kept = [row[metric] for row in rows if row.get("epsilon") is not None
            and row["epsilon"] <= epsilon and row.get(metric) is not None]
    return max(kept) if kept else None


def _within_budgets(ok: Sequence[Run], metric: str) -> dict[float, Stat | None]:
    """Budget → Stat over the runs of their :func:`best_within_budget` (empty: no run is
    private)."""
    if not any("epsilon" in row for r in ok for row in r.metrics):
        return {}
    return {eps: Stat.of([b for r in ok if (b := best_within_budget(r.metrics, metric, eps))
                          is not None]) for eps in EPSILON_BUDGETS}


def rounds_to_target(rows: Sequence[dict], metric: str, target: float) -> int | None:
    """The first evaluated round whose ``metric`` is at least ``target`` (None if never)."""
    row = first_reaching(rows, metric, target)
    return None if row is None else int(row["round"])


def bytes_to_target(rows: Sequence[dict], metric: str, target: float) -> float | None:
    """``bytes_total`` (all clients' sent bytes) at the first evaluated round whose ``metric``
    is at least ``target`` (None if never, or if the run did not count bytes): the
    communication a configuration needs, comparable across methods that send different
    amounts per round (equal bytes rather than equal rounds)."""
    row = first_reaching(rows, metric, target)
    return None if row is None or row.get("bytes_total") is None else float(row["bytes_total"])


def time_to_target(rows: Sequence[dict], metric: str, target: float) -> float | None:
    """``sim_time`` (the systems model's clock, gossipfl.systems) at the first evaluated
    round whose ``metric`` reaches ``target`` (None if never, or without a clock)."""
    row = first_reaching(rows, metric, target)
    return None if row is None or row.get("sim_time") is None else float(row["sim_time"])


def first_reaching(rows: Sequence[dict], metric: str, target: float) -> dict | None:
    for row in rows:
        if row.get(metric) is not None and row[metric] >= target:
            return row
    return None


def metric_of(metric: str | dict[str, str], label: str) -> str:
    return metric if isinstance(metric, str) else metric[label]


def group_metrics(groups: dict[str, list[Run]]) -> dict[str, str]:
    """Each configuration's own accuracy: ``personalized_acc`` where its algorithm reports
    it, else the first of ``test_acc``, ``local_acc_mean`` its runs hold
    (:func:`~gossipfl.results.rundir.primary_metric`)."""
    out = {}
    for label, runs in groups.items():
        personalized = any(is_personalized(r.config.get("algorithm", {}).get("name"))
                           for r in runs)
        out[label] = primary_metric([row for r in runs for row in r.metrics], personalized)
    return out


def default_target(groups: dict[str, list[Run]], metric: str | dict[str, str]
                   ) -> float | None:
    """The lowest mean final accuracy over the configurations (each in its own metric when
    ``metric`` maps labels to metrics), floored to 0.05: the level every configuration
    reaches, so rounds-to-target compares them all."""
    finals = []
    for label, runs in groups.items():
        m = metric_of(metric, label)
        values = [r.metrics[-1][m] for r in runs if r.metrics and m in r.metrics[-1]]
        if values:
            finals.append(float(np.mean(values)))
    if not finals:
        return None
    return math.floor(min(finals) * 20 + 1e-9) / 20


def comparison_table(groups: dict[str, list[Run]], metric: str | dict[str, str],
                     targets: Sequence[float]) -> list[TableRow]:
    """Mean ± std over seeds of final and best ``metric`` (one for all configurations, or
    one per label) and rounds to each target."""
    table = []
    for label, runs in groups.items():
        metric_ = metric_of(metric, label)
        ok = [r for r in runs if r.metrics and r.status not in ("failed", "diverged")]
        table.append(_table_row(label, runs, ok, metric_, targets))
    return table


def _table_row(label: str, runs: list[Run], ok: list[Run], metric: str,
           targets: Sequence[float]) -> TableRow:
    finals = [r.metrics[-1][metric] for r in ok if metric in r.metrics[-1]]
    bests = [max(v for v in r.column(metric) if v is not None) for r in ok
             if any(v is not None for v in r.column(metric))]
    to_target, sent_to, time_to = {}, {}, {}
    for target in targets:
        reached = [n for r in ok if (n := rounds_to_target(r.metrics, metric, target))]
        to_target[float(target)] = (Stat.of(reached), len(reached))
        spent = [b for r in ok if (b := bytes_to_target(r.metrics, metric, target)) is not None]
        sent_to[float(target)] = Stat.of(spent)
        times = [s for r in ok if (s := time_to_target(r.metrics, metric, target)) is not None]
        time_to[float(target)] = Stat.of(times)
    last = [r.metrics[-1] for r in ok]
    per_round = [row["elapsed"] / row["round"] for row in last
                 if row.get("elapsed") is not None and row.get("round")]
    sent = [row["bytes_total"] for row in last if row.get("bytes_total") is not None]
    consensus = [row[key] for row in last
                 if row.get(key := honest_key("consensus", [row])) is not None]
    return TableRow(label=label, runs=len(ok), seeds=[r.seed for r in runs],
                    final=Stat.of(finals), best=Stat.of(bests), to_target=to_target,
                    seconds_per_round=float(np.mean(per_round)) if per_round else None,
                    bytes_total=float(np.mean(sent)) if sent else None,
                    failed=len(runs) - len(ok), consensus=Stat.of(consensus),
                    diverged=sum(r.status == "diverged" for r in runs),
                    diverged_at=sorted(r.diverged_at for r in runs
                                       if r.diverged_at is not None),
                    flatness=flatness_stats(ok), metric=metric,
                    held=any(metric in row for r in runs for row in r.metrics)
                    or not any(r.metrics for r in runs),  # no metrics at all: nothing to say
                    bytes_to_target=sent_to, time_to_target=time_to,
                    clocked=clocked(ok), within_budget=_within_budgets(ok, metric))


def clocked(runs: Sequence[Run]) -> bool:
    """Whether a run's systems clock moved (a ``systems`` section with only availability
    has clocks that stay at 0: no time columns or figure for it)."""
    return any(row.get("sim_time") for r in runs for row in r.metrics)


def flatness_stats(runs: Sequence[Run]) -> dict[str, Stat]:
    """Mean ± std over the runs that were analyzed (``gossipfl analyze``) of each flatness
    column (top Hessian eigenvalue, trace, ...)."""
    found = [analysis_columns(r.path) for r in runs if r.path is not None]
    return {key: Stat.of([f[key] for f in found if key in f]) for key in FLATNESS_COLUMNS
            if any(key in f for f in found)}


def _flatness_keys(table: Sequence[TableRow]) -> list[str]:
    return [key for key in FLATNESS_COLUMNS if any(key in row.flatness for row in table)]


def _pct(stat: Stat | None) -> str:
    if stat is None:
        return "—"
    if stat.n == 1:
        return f"{100 * stat.mean:.2f}"
    return f"{100 * stat.mean:.2f} ± {100 * stat.std:.2f}"


def _scientific(stat: Stat | None) -> str:
    if stat is None:
        return "—"
    return f"{stat.mean:.3g}" if stat.n == 1 else f"{stat.mean:.3g} ± {stat.std:.2g}"


def _rounds(entry: tuple[Stat | None, int], runs: int, row: TableRow | None = None) -> str:
    stat, reached = entry
    if row is not None and not row.held:
        return f"no {row.metric}"  # not recorded, which is not "never reached"
    if stat is None:
        return "never"
    text = f"{stat.mean:.1f} ± {stat.std:.1f}" if stat.n > 1 else f"{stat.mean:.0f}"
    return text if reached == runs else f"{text} ({reached}/{runs})"


def _until_target(stat: Stat | None, reached: int, runs: int,
                  text: Callable[[Stat], str]) -> str:
    """``text(stat)`` of what was spent until the target over the runs that reached it
    ("never": none did; "—": none recorded it), with "(reached/runs)" when some did not."""
    if stat is None:
        return "never" if reached == 0 else "—"
    shown = text(stat)
    return shown if reached == runs else f"{shown} ({reached}/{runs})"


def _sent(stat: Stat | None, reached: int, runs: int, row: TableRow) -> str:
    """Mean bytes sent until the target."""
    if not row.held:
        return f"no {row.metric}"
    return _until_target(stat, reached, runs, lambda s: format_bytes(s.mean))


def _seconds(stat: Stat | None, reached: int, runs: int) -> str:
    """Mean simulated seconds until the target."""
    return _until_target(stat, reached, runs, lambda s: f"{s.mean:.3g}" if s.n == 1
                         else f"{s.mean:.3g} ± {s.std:.2g}")


def _lost(row: TableRow) -> str:
    """' (diverged at round 3)', ' (2 diverged, at rounds 3 and 5)', ' (1 failed, diverged
    at round 3)' or ''."""
    parts = [f"{row.failed - row.diverged} failed"] if row.failed > row.diverged else []
    at = row.diverged_at
    if row.diverged == 1 and len(at) == 1:
        parts.append(f"diverged at round {at[0]}")
    elif row.diverged:
        rounds = (f", at rounds {', '.join(map(str, at[:-1]))} and {at[-1]}"
                  if len(at) == row.diverged else "")
        parts.append(f"{row.diverged} diverged{rounds}")
    return f" ({', '.join(parts)})" if parts else ""


def _shared_metric(table: Sequence[TableRow]) -> str | None:
    """The metric of every row, or None when rows report different ones."""
    metrics = {row.metric for row in table}
    return metrics.pop() if len(metrics) == 1 else None


def table_markdown(table: Sequence[TableRow], metric: str | None = None) -> str:
    """The table as GitHub markdown (accuracies in %, mean ± std over seeds). When the rows
    report different accuracies (personalized_acc for some), a ``metric`` column names each
    row's. (``metric`` is unused: each row knows its own.)"""
    targets = list(table[0].to_target) if table else []
    shared = _shared_metric(table)
    what = shared if shared is not None else "accuracy"
    clocked = any(row.clocked for row in table)
    budgets = _budgets(table)
    head = ["configuration", "runs", *([] if shared is not None else ["metric"]),
            f"final {what} (%)", f"best {what} (%)",
            *[f"{what} at ε = {eps:g} (%)" for eps in budgets],
            *[f"rounds to {100 * t:g}%" for t in targets],
            *[f"sent to {100 * t:g}%" for t in targets],
            *[f"time to {100 * t:g}% (s)" for t in targets if clocked],
            "final consensus distance",
            *[FLATNESS_COLUMNS[k] for k in _flatness_keys(table)], "s/round", "sent"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for row in table:
        seeds = str(row.runs) + _lost(row)
        cells = [row.label, seeds, *([] if shared is not None else [row.metric]),
                 _pct(row.final), _pct(row.best),
                 *[_pct(row.within_budget.get(eps)) for eps in budgets],
                 *[_rounds(row.to_target[t], row.runs, row) for t in targets],
                 *[_sent(row.bytes_to_target.get(t), row.to_target[t][1], row.runs, row)
                   for t in targets],
                 *[_seconds(row.time_to_target.get(t), row.to_target[t][1], row.runs)
                   for t in targets if clocked],
                 _scientific(row.consensus),
                 *[_scientific(row.flatness.get(k)) for k in _flatness_keys(table)],
                 "—" if row.seconds_per_round is None else f"{row.seconds_per_round:.2f}",
                 format_bytes(row.bytes_total)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _budgets(table: Sequence[TableRow]) -> list[float]:
    """The ε budgets a table shows: :data:`EPSILON_BUDGETS` when a row is private."""
    return list(EPSILON_BUDGETS) if any(row.within_budget for row in table) else []


def table_csv(table: Sequence[TableRow], metric: str | None = None) -> str:
    """The table as CSV with raw numbers (accuracies as fractions); the ``metric`` column is
    each row's accuracy."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    targets = list(table[0].to_target) if table else []
    budgets = _budgets(table)
    head = ["configuration", "runs", "failed", "metric", "final_mean", "final_std",
            "best_mean", "best_std",
            *[f"at_epsilon_{eps:g}_{s}" for eps in budgets for s in ("mean", "std")]]
    for t in targets:
        head += [f"rounds_to_{t:g}_mean", f"rounds_to_{t:g}_std", f"rounds_to_{t:g}_reached",
                 f"bytes_to_{t:g}_mean", f"bytes_to_{t:g}_std",
                 f"time_to_{t:g}_mean", f"time_to_{t:g}_std"]
    flat = _flatness_keys(table)
    writer.writerow(head + ["consensus_mean", "consensus_std",
                            *[f"{k}_{s}" for k in flat for s in ("mean", "std")],
                            "seconds_per_round", "bytes_total"])
    for row in table:
        cells: list[Any] = [row.label, row.runs, row.failed, row.metric,
                            *_stat_cells(row.final), *_stat_cells(row.best),
                            *[c for eps in budgets for c in _stat_cells(
                                row.within_budget.get(eps))]]
        for t in targets:
            stat, reached = row.to_target[t]
            cells += [*_stat_cells(stat), reached, *_stat_cells(row.bytes_to_target.get(t)),
                      *_stat_cells(row.time_to_target.get(t))]
        writer.writerow(cells + [*_stat_cells(row.consensus),
                                 *[c for k in flat for c in _stat_cells(row.flatness.get(k))],
                                 row.seconds_per_round, row.bytes_total])
    return buffer.getvalue()


def _stat_cells(stat: Stat | None) -> list:
    return ["", ""] if stat is None else [stat.mean, stat.std]


# --------------------------------------------------------------------------------------------
# Reports: table files and figures
# --------------------------------------------------------------------------------------------
@dataclass
class Report:
    metric: str  # the accuracy of every row, or "per configuration" (see table[i].metric)
    targets: list[float]
    table: list[TableRow]
    markdown: str
    files: list[Path]
    left_out: list[str] = field(default_factory=list)  # runs without usable metrics, and why
    runs: list[Run] = field(default_factory=list, repr=False)  # every run given, left out too
    groups: dict[str, list[Run]] = field(default_factory=dict, repr=False)  # label → runs
    metrics: str | dict[str, str] = "test_acc"  # the accuracy, or each label's

    @property
    def csv(self) -> str:
        """``table.csv``'s text: raw numbers, accuracies as fractions."""
        return table_csv(self.table)


def build_report(runs: Sequence[Run], metric: str | None = None,
                 targets: Sequence[float] | None = None, metric_key: str = "--metric"
                 ) -> Report:
    """The comparison table of ``runs`` (nothing written; ``Report.files`` is empty).

    Runs whose metrics.csv is missing, empty or damaged are left out (``Report.left_out``
    says which and why), never counted as failed.
    """
    if not runs:
        raise GossipflError("report: no runs to report.")
    left_out = [f"{r.problem}; {r.path} is left out of the table" for r in runs if r.problem]
    usable = [r for r in runs if r.problem is None]
    if not usable:
        raise GossipflError(f"report: no run has metrics to report ({left_out[0]}).")
    groups = group_runs(usable)
    check_metric(usable, metric, metric_key)
    metrics: str | dict[str, str] = metric if metric is not None else group_metrics(groups)
    if isinstance(metrics, dict) and len(set(metrics.values())) == 1:
        metrics = next(iter(metrics.values()))
    if targets is None:
        target = default_target(groups, metrics)
        targets = [] if target is None or target <= 0 else [target]
    table = comparison_table(groups, metrics, targets)
    name = metrics if isinstance(metrics, str) else "per configuration"
    return Report(name, list(targets), table, table_markdown(table), [], left_out,
                  list(runs), groups, metrics)


def report(runs: Sequence[Run], out_dir: str | Path, metric: str | None = None,
           targets: Sequence[float] | None = None, metric_key: str = "--metric") -> Report:
    """Write ``table.md``, ``table.csv`` and the figures for ``runs`` into ``out_dir``
    (:func:`build_report`, then the files)."""
    result = build_report(runs, metric, targets, metric_key)
    out = Path(out_dir)
    atomic_write_text(out / "table.md", result.markdown)
    atomic_write_text(out / "table.csv", result.csv)
    result.files = [out / "table.md", out / "table.csv",
                    *write_figures(result.groups, out, result.metrics)]
    return result


def parse_target(text: str | float, key: str = "--target") -> float:
    """An accuracy for a rounds-to-target column: a fraction in (0, 1], or a percentage
    written with % (``"70%"``)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        number, percent = float(text), False
    else:
        value = str(text).strip()
        percent = value.endswith("%")
        try:
            number = float(value.rstrip("%").strip())
        except ValueError:
            number = float("nan")
    if percent:
        number /= 100
    if not 0 < number <= 1:  # NaN fails too
        raise GossipflError(f"{key}: {text!r} is not an accuracy in (0, 1]; write a "
                            f"fraction such as 0.7 or a percentage such as 70%.")
    return number


def check_metric(runs: Sequence[Run], metric: str | None, key: str) -> str | None:
    """``metric`` when some run holds it (None: each configuration's own, see
    :func:`group_metrics`)."""
    rows = [row for r in runs for row in r.metrics]
    if metric is None:
        return None
    held = [m for m in ACCURACY_METRICS if any(m in row for row in rows)]
    if metric not in held:
        raise unknown_choice(key, metric, held or ACCURACY_METRICS)
    return metric


def write_run_figures(run_dir: RunDirectory) -> list[Path]:
    """The figures of one finished run, into the run directory."""
    run = load_run(run_dir.path)
    label = str(run.config.get("name") or run.config.get("algorithm", {}).get("name", "run"))
    personalized = is_personalized(run.config.get("algorithm", {}).get("name"))
    return write_figures({label: [run]}, run_dir.path, primary_metric(run.metrics, personalized))


def mean_curve(runs: Sequence[Run], x_key: str, y_key: str
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per-round mean of x and mean ± std of y over runs, on the rounds every run holds."""
    return mean_over_rounds([run.metrics for run in runs], x_key, y_key)


def mean_over_rounds(row_lists: Sequence[Sequence[dict]], x_key: str, y_key: str
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`mean_curve` over lists of metrics rows (each holding ``round``): the rounds
    where every list has both values (not None), mean of x, mean and std (ddof 0) of y."""
    series = []
    for rows in row_lists:
        points = {row["round"]: (row.get(x_key), row.get(y_key)) for row in rows}
        series.append({r: p for r, p in points.items() if None not in p})
    common = sorted(set.intersection(*(set(s) for s in series))) if series else []
    if not common:
        return None
    xs = np.array([[s[r][0] for r in common] for s in series], dtype=np.float64)
    ys = np.array([[s[r][1] for r in common] for s in series], dtype=np.float64)
    return xs.mean(axis=0), ys.mean(axis=0), ys.std(axis=0)


#: x axes of the figures: key → axis label.
X_LABELS = {"round": "communication round", "bytes_total": "bytes sent (all clients)",
            "elapsed": "seconds", "sim_time": "simulated time (s)"}
#: The figures a report writes: file, x, y (None: the report's accuracy), log y; a figure
#: whose x no run holds (sim_time without a systems section) is not written.
FIGURES = (("accuracy.png", "round", None, False),
           ("accuracy_vs_bytes.png", "bytes_total", None, False),
           ("accuracy_vs_time.png", "sim_time", None, False),
           ("consensus.png", "round", "consensus", True))


def write_figures(groups: dict[str, list[Run]], out_dir: str | Path,
                  metric: str | dict[str, str]) -> list[Path]:
    """accuracy.png (vs round), accuracy_vs_bytes.png, consensus.png: one curve per group
    (each in its own accuracy when ``metric`` maps labels to metrics; the curve's label
    then names it)."""
    from gossipfl.output import plots

    out = Path(out_dir)
    files = []
    timed = clocked([r for runs in groups.values() for r in runs])
    rows = [row for runs in groups.values() for run in runs for row in run.metrics]
    for name, x_key, y_key, log_y in FIGURES:
        if x_key == "sim_time" and not timed:
            continue
        if y_key is not None:  # with Byzantine clients: over the honest ones
            y_key = honest_key(y_key, rows)
        fig = curves_figure(groups, metric if y_key is None else y_key, x_key, metric,
                            log_y=log_y)
        if fig is not None:
            files.append(plots.save(fig, out / name))
    return files


def curves_figure(groups: dict[str, list[Run]], y_key: str | dict[str, str],
                  x_key: str = "round", metric: str | dict[str, str] | None = None,
                  log_y: bool | None = None) -> Any:
    """The matplotlib Figure of ``y_key`` against ``x_key``: one curve per group (mean ±
    std over its runs, on the rounds they all hold), or None when no run holds both.
    ``metric`` is the groups' accuracy (a single run's figure then adds its local models'
    curve); ``log_y`` defaults to a log scale for the consensus distance."""
    from gossipfl.output import plots

    metric = y_key if metric is None else metric
    seeds = max(len(runs) for runs in groups.values())
    title = f"mean ± std over {seeds} seeds" if seeds > 1 else None
    single = next(iter(groups.values()))[0] if len(groups) == 1 and seeds == 1 else None
    curves = _curves(groups, x_key, y_key, mixed=isinstance(y_key, dict))
    if single is not None and y_key == metric and metric != "local_acc_mean":
        if metric == "test_acc" and curves:
            curves[0].label = "average model"
        curves += _local_curve(single, x_key)
    if not curves:
        return None
    scale = 100.0 if isinstance(y_key, dict) or y_key in ACCURACY_METRICS else 1.0
    y_label = "test accuracy" if len(curves) > 1 and single is not None and \
        y_key == "test_acc" else "accuracy (each configuration's metric)" \
        if isinstance(y_key, dict) else METRIC_LABELS.get(y_key, y_key)
    return plots.lines(curves, xlabel=X_LABELS.get(x_key, x_key), ylabel=y_label, title=title,
                       y_scale=scale, log_y=y_key == "consensus" if log_y is None else log_y,
                       bytes_x=x_key == "bytes_total")


def _curves(groups: dict[str, list[Run]], x_key: str, y_key: str | dict[str, str],
            mixed: bool = False) -> list:
    from gossipfl.output.plots import Curve

    curves = []
    for label, runs in groups.items():
        y = metric_of(y_key, label)
        stats = mean_curve(runs, x_key, y)
        if stats is not None:
            curves.append(Curve(f"{label} ({y})" if mixed else label, *stats))
    return curves


def _local_curve(run: Run, x_key: str) -> list:
    """The local models' mean ± std over clients, for a single-run figure."""
    from gossipfl.output.plots import Curve

    mean = honest_key("local_acc_mean", run.metrics)  # with Byzantine clients: the honest
    rows = [r for r in run.metrics if mean in r and r.get(x_key) is not None]
    if not rows:
        return []
    def col(key: str) -> np.ndarray:
        return np.array([r.get(key, 0.0) for r in rows], dtype=np.float64)

    who = "honest clients" if mean != "local_acc_mean" else "clients"
    return [Curve(f"local models (mean ± std over {who})", col(x_key), col(mean),
                  col(mean.replace("_mean", "_std")), style="--")]


#: The study file a sweep writes into its folder.
STUDY_FILE = "study.yaml"


def study_settings(paths: Sequence[str | Path]) -> dict:
    """``targets`` (fractions) and ``metric`` of the study file (``study.yaml``, written by a
    sweep) in the single folder given, where there is one and they can be read; {} else."""
    if len(paths) != 1 or not (Path(paths[0]) / STUDY_FILE).is_file():
        return {}
    try:
        raw = yaml.safe_load((Path(paths[0]) / STUDY_FILE).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    if not isinstance(raw, dict):
        return {}
    out: dict = {}
    if isinstance(raw.get("metric"), str):
        out["metric"] = raw["metric"]
    if isinstance(raw.get("targets"), list):
        try:
            out["targets"] = [parse_target(str(t)) for t in raw["targets"]]
        except GossipflError:
            pass  # the study's own check names it when the study runs
    return out
