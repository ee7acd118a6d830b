"""Runs packed into one computation, each recorded into its own run directory as
:func:`gossipfl.results.lifecycle.execute` records a run alone: config.yaml, metrics.csv at
every evaluation, checkpoints, summary.json, the figures.

The runs step in lockstep: round t of all of them (:class:`~gossipfl.studies.packing.joint.Pack`),
then each run evaluates, checks and records its round. A run that diverges or fails ends
alone (its directory says so) and the others go on (its rows are still computed, never
read). Ctrl-C or SIGTERM stops every run after the current round, each with a checkpoint of
that round (a second one stops at once), then :class:`KeyboardInterrupt` is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gossipfl.errors import Diverged
from gossipfl.results.interrupts import StopAtRoundEnd, StopRequest
from gossipfl.results.lifecycle import (
    PreparedRun,
    RunOutcome,
    begin,
    diverged,
    draw_figures,
    failed,
    finish,
    interrupted,
    open_records,
)
from gossipfl.results.rundir import Callback
from gossipfl.studies.packing.joint import Pack


def execute_packed(prepared: Sequence[PreparedRun], warn: Callable[[str], None] = print,
                   callbacks: Sequence[Sequence[Callback]] | None = None,
                   progress: Callable[[int], None] | None = None) -> list[RunOutcome]:
    """Run ``prepared`` (built runners at the same round, of one packable group) to the end
    as one computation; each run's outcome, in order. ``callbacks``: each run's own (after
    its recorder); ``progress(t)`` after each round."""
    records = [open_records(p, warn) for p in prepared]
    for i, (p, (recorder, tracking)) in enumerate(zip(prepared, records, strict=True)):
        p.runner.callbacks = [recorder, tracking, *(callbacks[i] if callbacks else ())]
    stop = StopRequest(warn, prepared[0].runner)
    outcomes: dict[int, RunOutcome] = {}
    live = list(range(len(prepared)))
    stop.install()
    try:
        for i in list(live):
            try:
                begin(prepared[i], records[i][0])
            except Exception as exc:  # noqa: BLE001 - this run cannot start; the others can
                outcomes[i] = failed(prepared[i], records[i][0], stop, exc)
                live.remove(i)
        _rounds(prepared, records, stop, outcomes, live, progress)
        for i in live:
            runner = prepared[i].runner
            outcomes[i] = finish(prepared[i], records[i][0], stop, warn, runner.result(),
                                 figures=False)
        # the runs finished together: their figures are drawn together (side by side on
        # the cores the machine has to spare)
        draw_figures([outcomes[i].run_dir for i in live if outcomes[i].status == "finished"],
                     warn)
    except KeyboardInterrupt as exc:
        for i in live:
            if i not in outcomes:
                interrupted(prepared[i], records[i][0], stop,
                            at_round_end=isinstance(exc, StopAtRoundEnd))
        raise
    finally:
        stop.restore()
        for p, (_, tracking) in zip(prepared, records, strict=True):
            tracking.close()
            p.release()
    return [outcomes[i] for i in range(len(prepared))]


def _rounds(prepared: Sequence[PreparedRun], records: list, stop: StopRequest,
            outcomes: dict[int, RunOutcome], live: list[int],
            progress: Callable[[int], None] | None) -> None:
    """Every round left, in lockstep; a run that diverges or fails leaves ``live``."""
    if not live:
        return
    pack = Pack([prepared[i].runner for i in range(len(prepared))])
    first = prepared[0].runner
    for t in range(first.round, first.config.train.rounds):
        try:
            measured = pack.round(t)
        except Exception as exc:  # noqa: BLE001 - the joint round failed: every run did
            for i in list(live):
                outcomes[i] = failed(prepared[i], records[i][0], stop, exc)
            live.clear()
            return
        for i in list(live):
            runner = prepared[i].runner
            try:
                runner.step(t, measured=measured[i])
            except Diverged as exc:
                outcomes[i] = diverged(prepared[i], records[i][0], stop, exc)
                live.remove(i)
            except Exception as exc:  # noqa: BLE001 - recorded; the others go on
                outcomes[i] = failed(prepared[i], records[i][0], stop, exc)
                live.remove(i)
        if progress is not None:
            progress(t)
        if not live:
            return
        if stop.count and t + 1 < first.config.train.rounds:
            raise StopAtRoundEnd
