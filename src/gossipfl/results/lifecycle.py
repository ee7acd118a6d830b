"""The run lifecycle: prepare (fresh or resumed), execute into a run directory, and how
the run ended (finished, interrupted, failed)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gossipfl.assembly.comparable import check_config_unchanged
from gossipfl.assembly.loading import load_config
from gossipfl.config import Config
from gossipfl.errors import Diverged, GossipflError
from gossipfl.io import FolderLock, WriteError, check_writable, remove_stale_temps
from gossipfl.output.trackers import Tracking
from gossipfl.results import inputs as run_inputs
from gossipfl.results.interrupts import StopAtRoundEnd, StopRequest
from gossipfl.results.ranks import report_failure, shared_run_directory
from gossipfl.results.reporting import write_run_figures
from gossipfl.results.rundir import (
    CONFIG_FILE,
    Callback,
    Recorder,
    RunDirectory,
    check_free,
    is_vacant,
)


@dataclass
class RunOutcome:
    """How :func:`execute` ended."""

    run_dir: RunDirectory
    status: str  # finished | interrupted | failed | diverged
    summary: dict
    result: Any = None  # gossipfl.api.Result when finished
    error: BaseException | None = None


@dataclass
class PreparedRun:
    """A built Runner with the run directory it writes to (and holds the lock of)."""

    runner: Any
    run_dir: RunDirectory
    fresh: bool
    notes: list[str] = field(default_factory=list)
    lock: FolderLock | None = None
    inputs: dict | None = None  # inputs.json to write (gossipfl.results.inputs)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def abandon(self) -> None:
        """Let go of a run that was prepared but never ran (what made its callbacks failed,
        or another run of its pack was refused): its lock released and, for a fresh run, the
        directory removed while it holds nothing. A run that :func:`execute` ran has
        released its lock already and is left as it is."""
        if self.lock is None:
            return
        self.release()
        if self.fresh and self.run_dir.writes and is_vacant(self.run_dir.path):
            shutil.rmtree(self.run_dir.path, ignore_errors=True)


def prepare_fresh(config: Config, path: str | Path, key: str = "output.dir",
                  unique: bool = False) -> PreparedRun:
    """Build the experiment, then create its run directory (errors leave nothing behind).

    Whether ``path`` can be written is checked before the data are loaded. With ``unique``
    (a name the user did not choose exactly) a taken ``path`` gets a ``-2``, ``-3`` suffix.
    The files the run reads are named by absolute path in its config.yaml and recorded with
    their SHA-256 in inputs.json (:mod:`gossipfl.results.inputs`).
    """
    from gossipfl.core.runner import Runner

    path = Path(path)
    if unique:
        check_writable(path, key)
    else:
        check_free(path, key)
    config = run_inputs.with_absolute_paths(config)
    runner = Runner(config)  # joins the job under torchrun
    run_dir = shared_run_directory(lambda: RunDirectory.create(path, key, unique=unique))
    if not run_dir.writes:
        return PreparedRun(runner, run_dir, fresh=True)
    recorded = run_inputs.record(config, runner.exp.dataset)
    lock = FolderLock.acquire(run_dir.path, key)
    if not unique and run_dir.is_run():  # another process took the same --out meanwhile
        lock.release()
        check_free(run_dir.path, key)
    remove_stale_temps(run_dir.path)
    return PreparedRun(runner, run_dir, fresh=True, lock=lock, inputs=recorded)


def prepare_resume(path: str | Path, device: str | None = None,
                   allow_changed_inputs: bool = False) -> PreparedRun:
    """Rebuild the run in ``path`` from its config.yaml and load its last checkpoint.

    Every file the run read (inputs.json) must be as it was when the run started: a changed
    or missing one is refused in one sentence naming it, or with ``allow_changed_inputs``
    a changed one is used with a warning (among the notes). Holds the run directory's lock
    (a second resume of the same directory is refused) and removes the temporary files of a
    write that a kill interrupted.
    """
    run_dir = RunDirectory(path)
    if not run_dir.path.is_dir() or not run_dir.is_run():
        raise GossipflError(f"--resume: '{run_dir.path}' is not a run directory "
                            f"(it has no {CONFIG_FILE}).")
    recorded = run_inputs.read(run_dir)
    changed = run_inputs.check(recorded, allow_changed_inputs)  # before a plugin is imported
    prepared = _rebuild(run_dir, device)  # joins the job under torchrun
    changed += run_inputs.check(recorded, allow_changed_inputs,
                                getattr(prepared.runner.exp.dataset, "files", ()) or ())
    prepared.notes[:0] = [f"warning: {text}" for text in changed]
    prepared.run_dir = shared_run_directory(lambda: run_dir)
    if prepared.run_dir.writes:  # rank 0 of a distributed run, or the one process
        prepared.lock = FolderLock.acquire(run_dir.path, "--resume")
        remove_stale_temps(run_dir.path)
        if changed:
            prepared.inputs = recorded
    return prepared


def _rebuild(run_dir: RunDirectory, device: str | None) -> PreparedRun:
    from gossipfl.core.runner import Runner

    overrides = [f"device={device}"] if device else []
    config = load_config(run_dir.file(CONFIG_FILE), overrides)
    state = run_dir.load_checkpoint()
    runner = Runner(config)
    prepared = PreparedRun(runner, run_dir, fresh=False)
    if state is None:
        prepared.notes.append("no checkpoint was written yet; starting again from round 0")
        return prepared
    check_config_unchanged(state, config, run_dir.file(CONFIG_FILE), "--resume")
    runner.load_state_dict(state["runner"])
    prepared.notes.append(f"resuming after round {runner.round} of {config.train.rounds}")
    return prepared


def execute(prepared: PreparedRun, callbacks: Sequence[Callback] = (),
            warn: Callable[[str], None] = print) -> RunOutcome:
    """Run to the end, recording into the run directory; figures at the end.

    Ctrl-C or SIGTERM (when called from the main thread) asks the run to stop after the
    current round; a checkpoint of that round is saved, the status is ``interrupted`` and
    :class:`KeyboardInterrupt` is re-raised. A second signal stops at once (the last
    checkpoint stays); signals that come while the run directory is being written at the end
    wait, so ``summary.json`` is always whole. :class:`~gossipfl.errors.Diverged` keeps the
    directory with the metrics so far (status ``diverged``). Any other exception keeps a
    directory that has recorded results (status ``failed``); a fresh run that recorded nothing
    is removed. The exception is returned in the outcome, not raised. The run directory's lock
    is released.
    """
    runner = prepared.runner
    recorder, tracking = open_records(prepared, warn)
    stop = StopRequest(warn, runner)  # stops at once until a round has finished
    runner.callbacks = [recorder, tracking, *callbacks, stop]
    stop.install()
    try:
        return _run(prepared, recorder, stop, warn)
    finally:
        stop.restore()
        tracking.close()
        prepared.release()


def open_records(prepared: PreparedRun, warn: Callable[[str], None]
                 ) -> tuple[Recorder, Tracking]:
    """The run's recorder (metrics.csv, checkpoints, summary.json) and its trackers
    (``output.tensorboard``, ``output.wandb``): the callbacks that record a run."""
    runner, run_dir = prepared.runner, prepared.run_dir
    recorder = Recorder(run_dir, runner.config.output.checkpoint_every,
                        checkpoint_round=None if prepared.fresh else runner.round or None)
    tracking = Tracking.open(run_dir, runner.config, runner.round, warn) if run_dir.writes \
        else Tracking([], warn)
    return recorder, tracking


def _run(prepared: PreparedRun, recorder: Recorder, stop: StopRequest,
         warn: Callable[[str], None]) -> RunOutcome:
    try:
        begin(prepared, recorder)
        result = prepared.runner.run()
    except KeyboardInterrupt as exc:
        interrupted(prepared, recorder, stop, at_round_end=isinstance(exc, StopAtRoundEnd))
        raise
    except Diverged as exc:
        return diverged(prepared, recorder, stop, exc)
    except Exception as exc:  # noqa: BLE001 - recorded, then handed to the caller
        return failed(prepared, recorder, stop, exc)
    return finish(prepared, recorder, stop, warn, result)


def begin(prepared: PreparedRun, recorder: Recorder) -> None:
    """Before the first round: config.yaml (fresh), inputs.json, summary.json ``running``;
    a resumed run's metrics.csv written again from its checkpoint's rows (the checkpoint is
    what the run goes on from: a metrics.csv that was deleted, damaged or replaced by an
    older one is restored, also when no round is left to run; rows past the checkpoint, of a
    run killed between writing the two, are computed again)."""
    runner, run_dir = prepared.runner, prepared.run_dir
    if prepared.fresh:
        run_dir.write_config(runner.config)
    elif runner.rows and run_dir.writes:
        run_dir.write_metrics(runner.rows)
    if prepared.inputs is not None and run_dir.writes:
        run_inputs.write(run_dir, prepared.inputs)
    run_dir.write_summary(recorder.summary(runner, "running"))


def finish(prepared: PreparedRun, recorder: Recorder, stop: StopRequest,
           warn: Callable[[str], None], result: Any, figures: bool = True) -> RunOutcome:
    """After the last round: the final checkpoint (status ``finished``), then the figures
    (``figures=False``: the caller draws them, :func:`draw_figures`)."""
    runner, run_dir = prepared.runner, prepared.run_dir
    try:
        with stop.shield():
            recorder.checkpoint(runner, "finished")
    except Exception as exc:  # noqa: BLE001 - recorded, then handed to the caller
        return failed(prepared, recorder, stop, exc)
    if figures:
        draw_figures([run_dir], warn)
    return RunOutcome(run_dir, "finished", run_dir.read_summary(), result=result)


def draw_figures(run_dirs: Sequence[RunDirectory], warn: Callable[[str], None]) -> None:
    """The figures of finished runs, each into its directory; a full disk is a warning (the
    runs have finished: ``gossipfl report`` draws them later). Several runs' figures are
    drawn side by side on forked processes where the machine has cores to spare
    (:func:`figure_workers`): a packed study's runs finish together, and drawing a run's
    three PNGs takes longer than a small run's rounds."""
    run_dirs = [d for d in run_dirs if d.writes]
    workers = figure_workers(len(run_dirs))
    if workers <= 1:
        for run_dir in run_dirs:
            _figures_or_warn(run_dir, warn)
        return
    import concurrent.futures
    import multiprocessing
    import warnings

    with warnings.catch_warnings():  # forking a process with threads: the workers only draw
        warnings.simplefilter("ignore", DeprecationWarning)
        pool = concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("fork"),
            initializer=_figure_worker_signals)
        stuck = False
        try:
            jobs = [(d, pool.submit(_draw, d)) for d in run_dirs]
            for run_dir, job in jobs:
                if stuck:  # a worker hung: the workers are gone, the rest drawn here
                    _figures_or_warn(run_dir, warn)
                    continue
                try:
                    job.result(timeout=FIGURE_SECONDS)
                except WriteError as exc:
                    _warn_no_figures(run_dir, exc, warn)
                except concurrent.futures.process.BrokenProcessPool:
                    _figures_or_warn(run_dir, warn)  # a worker died: drawn here instead
                except concurrent.futures.TimeoutError:
                    stuck = True
                    for process in list(getattr(pool, "_processes", {}).values()):
                        process.kill()
                        process.join(5)
                    for folder in run_dirs:  # what a killed worker was writing
                        remove_stale_temps(folder.path)
                    _figures_or_warn(run_dir, warn)
        finally:
            pool.shutdown(wait=not stuck, cancel_futures=True)


#: seconds a worker may take for one run's figures before they are drawn in this process
FIGURE_SECONDS = 120.0


def _figure_worker_signals() -> None:
    """A figure worker leaves Ctrl-C to the study's process (which stops the study) and
    ends on SIGTERM (the pool's own stop), instead of running the study's handlers, which
    it inherits from the fork."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _draw(run_dir: RunDirectory) -> None:
    """A worker's job: one run's figures (this module's :func:`write_run_figures`, as the
    forked worker holds it)."""
    write_run_figures(run_dir)


def figure_workers(runs: int) -> int:
    """Processes drawing ``runs`` runs' figures: one per run, leaving a core to the rest, on
    Linux (forked workers) only; 1 (drawn in this process) elsewhere and on 2 cores. The
    cores are those this process may run on (``taskset``, a batch scheduler's share of a
    node), not the machine's."""
    if not sys.platform.startswith("linux"):
        return 1
    return max(1, min(runs, len(os.sched_getaffinity(0)) - 1))


def _figures_or_warn(run_dir: RunDirectory, warn: Callable[[str], None]) -> None:
    try:
        write_run_figures(run_dir)
    except WriteError as exc:
        _warn_no_figures(run_dir, exc, warn)


def _warn_no_figures(run_dir: RunDirectory, exc: WriteError, warn: Callable[[str], None]
                     ) -> None:
    warn(f"{exc}; the run has finished, free space and draw its figures with "
         f"`gossipfl report {run_dir.path}`.")


def diverged(prepared: PreparedRun, recorder: Recorder, stop: StopRequest,
             exc: Diverged) -> RunOutcome:
    """Status ``diverged``, with the metrics so far."""
    run_dir = prepared.run_dir
    with stop.shield():
        run_dir.write_metrics(prepared.runner.rows)
        run_dir.write_summary(recorder.summary(prepared.runner, "diverged", error=str(exc)))
    return RunOutcome(run_dir, "diverged", run_dir.read_summary(), error=exc)


def interrupted(prepared: PreparedRun, recorder: Recorder, stop: StopRequest,
                at_round_end: bool) -> None:
    """Status ``interrupted`` (the stop request's; :func:`_interrupted`)."""
    with stop.shield():
        _interrupted(recorder, prepared.runner, at_round_end)


def failed(prepared: PreparedRun, recorder: Recorder, stop: StopRequest,
           exc: Exception) -> RunOutcome:
    """Status ``failed`` (:func:`_failed`)."""
    with stop.shield():
        return _failed(prepared, recorder, exc)


def _interrupted(recorder: Recorder, runner: Any, at_round_end: bool) -> None:
    """Status ``interrupted``; at a round's end also a checkpoint of that round."""
    if at_round_end and recorder.checkpoint_round != runner.round:
        recorder.checkpoint(runner, "interrupted")
    else:
        recorder.run_dir.write_summary(recorder.summary(runner, "interrupted"))


def _failed(prepared: PreparedRun, recorder: Recorder, exc: Exception) -> RunOutcome:
    runner, run_dir = prepared.runner, prepared.run_dir
    report_failure(exc)  # under torchrun, the other ranks quote why this one stops
    summary = recorder.summary(runner, "failed", error=str(exc))
    if prepared.fresh and not runner.rows:
        prepared.release()
        if run_dir.writes:
            shutil.rmtree(run_dir.path, ignore_errors=True)
        return RunOutcome(run_dir, "failed", summary, error=exc)
    try:
        run_dir.write_metrics(runner.rows)
        run_dir.write_summary(summary)
    except WriteError:
        pass  # the disk is still full: the previous metrics.csv and summary.json stay whole
    return RunOutcome(run_dir, "failed", summary, error=exc)
