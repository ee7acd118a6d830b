"""The Python entry points; each CLI verb is a thin layer over one of them (it parses the
command line, calls the function and prints what it returns):

- ``gossipfl.run(config) -> Result`` (``gossipfl run`` calls only this to run);
- ``gossipfl.sweep(study) -> StudyResults`` (``gossipfl sweep``);
- ``gossipfl.report(paths) -> Report`` (``gossipfl report``);
- ``gossipfl.stability(config_or_study) -> StabilityOutcome`` (``gossipfl stability``, see
  :mod:`gossipfl.studies.stability`);
- ``gossipfl.analyze(run_dir) -> dict`` (``gossipfl analyze``, see
  :mod:`gossipfl.analysis.analyze`);
- ``gossipfl.fetch(dataset) -> Dataset`` (``gossipfl fetch``);
- ``gossipfl.load_run(path)``, ``gossipfl.load_study(path)``: results as DataFrames
  (:mod:`gossipfl.studies.frames`; pandas is the optional extra ``gossipfl[pandas]``);
- ``gossipfl.partition_summary(config)``.

Every mistake raises :class:`~gossipfl.errors.GossipflError` (one sentence); nothing is
printed unless a ``log`` is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gossipfl.analysis.analyze import analyze
from gossipfl.assembly.experiment import build_data
from gossipfl.assembly.loading import load_config
from gossipfl.config import Config, as_list
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.output.result import Result
from gossipfl.results.reporting import Report
from gossipfl.studies.frames import StudyResults, load_run, load_study
from gossipfl.studies.stability import stability
from gossipfl.validation import check_flags, check_path, check_paths

__all__ = ["Report", "Result", "StudyResults", "analyze", "fetch", "load_run", "load_study",
           "partition_summary", "report", "run", "stability", "sweep"]


def run(config: Config | dict | str | Path | None = None, *,
        overrides: Sequence[str] = (), callbacks: Sequence = (),
        quiet: bool = False) -> Result:
    """Run one experiment and return its :class:`Result`.

    ``config``: a dict, a YAML path or a :class:`~gossipfl.config.Config`; ``overrides``:
    ``"key.path=value"`` strings; ``callbacks``: callables ``(runner, t, row_or_None)``
    called after every round; ``quiet``: no progress bar (by default one over the rounds,
    on stderr, once the run takes over a second: :mod:`gossipfl.output.progress`). It writes no
    run directory, so the ``output`` settings that write one (``output.tensorboard``,
    ``output.wandb``) are ignored, with a warning.
    """
    from gossipfl.output.progress import RoundBar
    from gossipfl.results.rundir import primary_metric

    check_flags(quiet=quiet)
    resolved = load_config(config, overrides)
    warn_unwritten_output(resolved, "gossipfl.run()")
    runner = Runner(resolved, callbacks=callbacks)
    bar = RoundBar(runner, resolved.name or resolved.algorithm.name, disable=quiet,
                   metric=primary_metric)
    runner.callbacks.append(bar)
    try:
        return runner.run()
    finally:
        bar.close()


def warn_unwritten_output(config: Config, caller: str) -> None:
    """One :class:`~gossipfl.errors.IgnoredSetting` warning naming the output settings set in
    ``config`` that ``caller`` (which writes no run directory) does not read."""
    import warnings

    from gossipfl.errors import IgnoredSetting

    output = config.output
    unread = [f"output.{key}" for key in ("tensorboard", "wandb") if getattr(output, key)]
    if unread:
        warnings.warn(f"{', '.join(unread)}: ignored, because {caller} writes no run "
                      f"directory, so nothing is logged; use `gossipfl run` or "
                      f"gossipfl.sweep(), or log from a callback.", IgnoredSetting,
                      stacklevel=3)


def partition_summary(config: Config | dict | str | Path | None = None, *,
                      overrides: Sequence[str] = ()):
    """Samples and classes per client of the partition a config makes (no training).

    Returns a :class:`gossipfl.data.PartitionSummary` (``samples [M]``, ``class_counts
    [M, C]``, ``classes_per_client [M]``, ``.table()``).
    """
    from gossipfl.data import summarize_partition

    resolved = load_config(config, overrides)
    dataset, parts = build_data(resolved)
    return summarize_partition(parts, dataset.train_y.cpu().numpy(), dataset.num_classes)


def sweep(study: str | Path | dict, *, overrides: Sequence[str] = (),
          out: str | Path | None = None, device: str | None = None,
          progress: Callable[[Any, str], Any] | None = None,
          log: Callable[[str], None] | None = None,
          warn: Callable[[str], None] | None = None,
          allow_changed_inputs: bool = False, jobs: int = 1,
          only: Sequence[str] = (), pack: bool = False, quiet: bool = False) -> StudyResults:
    """Run a study (``gossipfl sweep``): every grid point and seed not yet done, then the
    table and figures in ``<out>/<name>/``.

    ``study``: a study YAML path or a dict with its keys (``name``, ``base``, ``grid``,
    ``seeds``, ``targets``, ...); ``overrides``: ``"key.path=value"`` for every run, after its
    grid point (a key the grid gives several values is refused);
    ``out``: the parent folder of the study folder (default: the study's ``out``, else the
    base ``output.dir``); ``log``: called with a line per run (default: nothing is
    printed); ``warn``: each warning (default: ``warnings.warn``). Returns
    :class:`~gossipfl.studies.frames.StudyResults` (``.runs``, ``.metrics``, ``.table`` DataFrames,
    ``.plot()``, ``.failed``); a failed run does not raise (it is in ``.failed``).
    ``allow_changed_inputs``: resume a run whose input files (a matrix, a speeds file, a
    plugin) changed since it started, with a warning, instead of refusing it. ``jobs``: run
    that many runs at a time, each on a worker process of its own (a killed worker fails its
    run, the others go on); ``only``: just the runs whose directory name matches one of
    these patterns (``fnmatch``: ``"dfedavg-seed*"``); ``pack``: runs that differ in seed and
    learning rate computed as one stack of clients, each run's numbers those it has alone
    (:mod:`gossipfl.studies.packing`). Progress on stderr (:mod:`gossipfl.output.progress`): a bar over
    each run's rounds (``progress``: a function ``(prepared_run, name)`` making your own
    callback ``(runner, t, row)`` instead; its ``close()``, if it has one, is called when the
    run ends), with ``jobs`` a bar over the runs naming the running ones with their
    round; ``quiet``: none.
    """
    from gossipfl.output.progress import round_bars
    from gossipfl.results.rundir import primary_metric
    from gossipfl.studies.sweep import load_study as parse_study
    from gossipfl.studies.sweep import run_study

    check_flags(allow_changed_inputs=allow_changed_inputs, pack=pack, quiet=quiet)
    sets = as_list(overrides, "overrides", "'key.path=value' strings")
    progress = progress if progress is not None or quiet else round_bars(quiet, primary_metric)
    outcome = run_study(parse_study(study, sets), out=out, device=device, progress=progress,
                        log=log, warn=warn, allow_changed_inputs=allow_changed_inputs, jobs=jobs,
                        only=as_list(only, "only", "patterns"), pack=pack, quiet=quiet)
    return StudyResults(outcome.path, outcome.report, dict(outcome.outcomes),
                        dict(outcome.failed), outcome.report_error, outcome)


def report(paths: str | Path | Sequence[str | Path], *,
           targets: Sequence[float | str] | None = None, metric: str | None = None,
           out: str | Path | None = None, target_key: str = "targets") -> Report:
    """The table and figures of existing run or study directories (``gossipfl report``):
    ``table.md``, ``table.csv`` and the figures written into ``out`` (default: the one path
    given, else ``./report``).

    ``targets``: accuracies for the rounds-to-target columns, fractions in (0, 1] or
    percentages written ``"70%"`` (default: the study file's, when one study folder is
    given; one alone is a list of one); ``metric``: the accuracy every row reports (default:
    each configuration's own); ``target_key``: how an error names the targets (the
    command's ``--target``). Returns the :class:`~gossipfl.results.reporting.Report` (``markdown``, ``table`` rows,
    ``files``, ``left_out``: runs without usable metrics, and why).
    """
    from gossipfl.io import check_writable, user_path
    from gossipfl.results.reporting import find_runs, parse_target, study_settings
    from gossipfl.results.reporting import report as write_report

    paths = check_paths(paths, "paths")
    if out is not None:
        check_path(out, "out")
    if not paths:
        raise GossipflError("report: no paths given.")
    folder = user_path(out, "--out") if out is not None else Path(paths[0]) \
        if len(paths) == 1 else Path("report")
    for path in map(Path, paths):  # a file given as PATH is not --out's fault
        if path.exists() and not path.is_dir():
            raise GossipflError(f"report: '{path}' is not a directory.")
    check_writable(folder, "--out")
    runs = find_runs(paths)
    given = as_list(targets, "targets", "accuracies")  # one target alone: a list of one
    chosen = [parse_target(t, target_key) for t in given] if given \
        else study_settings(paths).get("targets")
    return write_report(runs, folder, metric=metric, targets=chosen)


def fetch(dataset: str, *, root: str | Path | None = None, download: bool = True,
          verify: bool = True):
    """Find (or, with ``download``, download) a dataset and check the SHA-256 of its files
    (``gossipfl fetch``). Returns the :class:`~gossipfl.data.Dataset`; ``.files`` lists each
    file read (``path``, ``sha256``, ``verified``). ``verify=False`` accepts files whose
    digest is not the official one (your own)."""
    from gossipfl.data import load_dataset

    if not isinstance(dataset, str):
        raise GossipflError(f"dataset: must be a dataset's name, got {dataset!r:.80}.")
    check_flags(download=download, verify=verify)
    if root is not None:
        check_path(root, "root")
    return load_dataset(dataset, root=root, download=download, verify=verify)
