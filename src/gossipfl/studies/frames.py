"""Results as pandas DataFrames, and their figures: :func:`load_run` and :func:`load_study`
(``gossipfl.load_run``, ``gossipfl.load_study``; ``gossipfl.sweep`` returns a
:class:`StudyResults` too).

pandas is an optional extra (``pip install 'gossipfl[pandas]'``): it is imported only when a
DataFrame is asked for, and its absence is one sentence naming what needed it. The figures
(``.plot``) need only matplotlib; they are drawn by :func:`gossipfl.results.reporting.
curves_figure`, the function that draws a report's PNG files.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gossipfl.errors import GossipflError
from gossipfl.output.result import EXTRA, MissingExtra, metrics_frame, pandas  # noqa: F401 (re-exported)
from gossipfl.results.reporting import (
    Report,
    Run,
    build_report,
    curves_figure,
    find_runs,
    flatten,
)
from gossipfl.results.reporting import load_run as read_run
from gossipfl.results.rundir import (
    NON_RESULT_KEYS,
    is_personalized,
    primary_metric,
)
from gossipfl.validation import check_path, check_paths


def _figure(groups: dict[str, list[Run]], y: str | dict[str, str], x: str,
            metric: str | dict[str, str]) -> Any:
    from gossipfl.output.plots import displayable

    fig = curves_figure(groups, y, x, metric)
    if fig is None:
        name = y if isinstance(y, str) else "the accuracy"
        raise GossipflError(f"plot: no run records both {name} and {x}.")
    return displayable(fig)


# --------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------
@dataclass
class RunResults:
    """A run directory read back: ``config`` and ``summary`` (dicts), ``rows`` (metrics.csv
    as dicts) and ``metrics`` (the same as a DataFrame)."""

    path: Path
    config: dict
    summary: dict
    rows: list[dict]
    run: Run = field(repr=False)

    @property
    def metrics(self) -> Any:
        """metrics.csv as a DataFrame: one row per evaluated round."""
        return metrics_frame(self.rows, "gossipfl.load_run(...).metrics")

    @property
    def metric(self) -> str:
        """The run's accuracy: ``personalized_acc`` for a personalized algorithm, else
        ``test_acc`` (``local_acc_mean`` when that is all it holds)."""
        name = self.config.get("algorithm", {}).get("name")
        return primary_metric(self.rows, is_personalized(name))

    def plot(self, metric: str | None = None, x: str = "round") -> Any:
        """A matplotlib Figure of ``metric`` (default: the run's accuracy, with its local
        models' mean ± std) against ``x`` (``round``, ``bytes_total``, ``elapsed``)."""
        label = str(self.config.get("name") or self.config.get("algorithm", {}).get("name")
                    or "run")
        return _figure({label: [self.run]}, metric or self.metric, x, self.metric)


def load_run(path: str | Path) -> RunResults:
    """The run directory ``path``: its config, summary and metrics (``.metrics`` a
    DataFrame). A missing, empty or damaged metrics.csv, config.yaml or summary.json is one
    sentence naming the file."""
    check_path(path, "path")
    run = read_run(path)
    if run.problem is not None:
        raise GossipflError(f"load_run: {run.problem}.")
    return RunResults(run.path, run.config, run.summary, run.metrics, run)


# --------------------------------------------------------------------------------------------
# A study (or any folders of runs)
# --------------------------------------------------------------------------------------------
@dataclass
class StudyResults:
    """Runs grouped into configurations and their table (``gossipfl.load_study``, and what
    ``gossipfl.sweep`` returns).

    ``runs``, ``metrics`` and ``table`` are DataFrames; ``report`` is the
    :class:`~gossipfl.results.reporting.Report` (its ``markdown`` is table.md). After a
    sweep, ``failed`` maps the run directories that failed to why, ``outcomes`` each run
    directory to ``ran``, ``resumed``, ``skipped`` or ``failed``, and ``report_error`` is the
    write error that kept the table or a figure from being written (else None).
    """

    path: Path
    report: Report | None
    outcomes: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    report_error: Exception | None = None
    outcome: Any = field(default=None, repr=False)  # the sweep's StudyOutcome

    # -- what the CLI and a user read ---------------------------------------------------------
    @property
    def labels(self) -> dict[Path, str]:
        """Run directory → configuration label (runs left out of the table have none)."""
        groups = self.report.groups if self.report else {}
        return {run.path: label for label, runs in groups.items() for run in runs}

    @property
    def runs(self) -> Any:
        """One row per run: ``label``, ``seed``, ``status``, ``run`` (its folder name),
        ``metric`` (the accuracy its configuration reports), ``final``, ``best``,
        ``best_round``, ``rounds``, ``seconds_per_round``, ``bytes_total``,
        ``final_consensus``, ``problem`` (why it is left out of the table, else None), then
        its config flattened (``algorithm.name``, ``train.lr``, ...; lists as tuples)."""
        pd = pandas("gossipfl.load_study(...).runs")
        records = [self._run_record(run) for run in self._all_runs()]
        return pd.DataFrame.from_records(records)

    @property
    def metrics(self) -> Any:
        """Every run's metrics.csv in one long DataFrame: ``label``, ``seed``, ``run``, then
        the metric columns (one row per run and evaluated round)."""
        pd = pandas("gossipfl.load_study(...).metrics")
        labels = self.labels
        frames = []
        for run in self._all_runs():
            if run.problem is not None or not run.metrics:
                continue
            frame = metrics_frame(run.metrics)
            frame.insert(0, "run", run.path.name)
            frame.insert(0, "seed", run.seed)
            frame.insert(0, "label", labels.get(run.path))
            frames.append(frame)
        if not frames:
            return pd.DataFrame(columns=["label", "seed", "run", "round"])
        return pd.concat(frames, ignore_index=True)

    @property
    def table(self) -> Any:
        """The table of means and standard deviations over seeds (the columns of table.csv:
        ``configuration``, ``runs``, ``failed``, ``metric``, ``final_mean``, ``final_std``,
        ``best_mean``, ..., accuracies as fractions)."""
        pd = pandas("gossipfl.load_study(...).table")
        if self.report is None:
            return pd.DataFrame(columns=["configuration", "runs", "failed", "metric"])
        return pd.read_csv(io.StringIO(self.report.csv))

    def plot(self, metric: str | None = None, x: str = "round") -> Any:
        """A matplotlib Figure: ``metric`` (default: each configuration's accuracy) against
        ``x`` (``round``, ``bytes_total``, ``elapsed``), one curve per configuration with a
        ± std band over its seeds."""
        if self.report is None or not self.report.groups:
            raise GossipflError(f"plot: {self.path} has no runs with metrics.")
        return _figure(self.report.groups, metric or self.report.metrics, x,
                       self.report.metrics)

    # -- helpers ------------------------------------------------------------------------------
    def _all_runs(self) -> list[Run]:
        return list(self.report.runs) if self.report else []

    def _run_record(self, run: Run) -> dict:
        label = self.labels.get(run.path)
        metric = None
        if self.report is not None and label is not None:
            metrics = self.report.metrics
            metric = metrics if isinstance(metrics, str) else metrics[label]
        values = [(row[metric], row["round"]) for row in run.metrics if metric in row] \
            if metric else []
        best = max(values, key=lambda v: v[0]) if values else (None, None)
        last = run.metrics[-1] if run.metrics else {}
        rounds = last.get("round")
        config = {k: tuple(v) if isinstance(v, list) else v
                  for k, v in flatten(run.config).items()
                  if not any(k == n or k.startswith(f"{n}.") for n in NON_RESULT_KEYS)}
        return {"label": label, "seed": run.seed, "status": run.status, "run": run.path.name,
                "metric": metric, "final": values[-1][0] if values else None,
                "best": best[0], "best_round": best[1], "rounds": rounds,
                "seconds_per_round": (last["elapsed"] / rounds
                                      if rounds and last.get("elapsed") is not None else None),
                "bytes_total": last.get("bytes_total"),
                "final_consensus": last.get("consensus"), "problem": run.problem, **config}


def load_study(path: str | Path | Sequence[str | Path], *, metric: str | None = None,
               targets: Sequence[float | str] | None = None) -> StudyResults:
    """A study folder (or run directories, or folders holding some) as
    :class:`StudyResults`. ``metric`` and ``targets`` default to the study file's (the
    study.yaml a sweep writes), as in the table the sweep wrote; targets are fractions in
    (0, 1] or percentages written ``"70%"``."""
    from gossipfl.config import as_list
    from gossipfl.results.reporting import parse_target, study_settings

    paths = check_paths(path, "path")
    saved = study_settings(paths)
    if targets is None:
        targets = saved.get("targets")
    if metric is None:
        metric = saved.get("metric")
    checked = None if targets is None else [parse_target(t, "targets")
                                            for t in as_list(targets, "targets", "accuracies")]
    report = build_report(find_runs(paths), metric, checked, metric_key="metric")
    return StudyResults(Path(paths[0]), report)
