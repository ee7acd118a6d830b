"""The run directory of a distributed run: rank 0 writes it, the other ranks only take part
in what writing needs from them (the gathered checkpoint), and every rank reads it on
``--resume`` (a directory every node sees)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gossipfl.distributed.federation import RankLost, note_failure
from gossipfl.distributed.launch import current
from gossipfl.results.rundir import RunDirectory


class QuietRunDirectory(RunDirectory):
    """Rank r > 0's view of rank 0's run directory: reads it, writes nothing."""

    writes = False

    def write_config(self, config) -> None:
        pass

    def write_metrics(self, rows) -> None:
        pass

    def write_summary(self, summary: dict) -> None:
        pass

    def save_checkpoint(self, runner: Any) -> None:
        runner.state_dict()  # a collective: every rank's rows go into rank 0's file


def shared_run_directory(make: Callable[[], RunDirectory]) -> RunDirectory:
    """The run directory that rank 0 makes (``make``: create or open it), as this process
    sees it: rank 0's own, a :class:`QuietRunDirectory` of the same path on the other ranks
    (a collective under torchrun; the one process's own otherwise)."""
    processes = current()
    run_dir = make() if processes.writer else None
    path = processes.agree(None if run_dir is None else run_dir.path)
    return run_dir if run_dir is not None else QuietRunDirectory(path)


def report_failure(exc: BaseException) -> None:
    """Tell the other ranks (through the job's store) why this one stops."""
    if not isinstance(exc, RankLost):
        note_failure(current(), f"{type(exc).__name__}: {exc}")
