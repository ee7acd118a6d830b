"""A study's runs on worker processes (``gossipfl sweep STUDY.yaml --jobs N``).

Every grid point is validated in this process first (as the sequential sweep does); runs
already done are skipped here. Each other run gets a process of its own (``spawn``), at most
N at a time, with ``torch`` threads shared out (cpu count / N each): a small model leaves a
GPU idle between its kernel launches, and several processes keep it busy. Each run goes to
the directory the sequential sweep gives it, so the two can be mixed freely.

What can go wrong, and what the sweep does:

- a run fails: its reason is recorded and the others go on (exit status 1 at the end, as
  the sequential sweep);
- a worker is killed (the out-of-memory killer, ``kill -9``): its run is recorded as failed,
  naming the signal; its run directory keeps its last checkpoint, so sweeping again resumes
  it; the others go on;
- Ctrl-C or SIGTERM: no run starts any more, each running one is asked to stop after its
  current round and save a checkpoint (a second Ctrl-C stops them at once), then
  :class:`KeyboardInterrupt` is raised once every worker has ended.

Workers are in their own process group, so a Ctrl-C in the terminal reaches them once,
through this process.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gossipfl.errors import GossipflError

#: Seconds the workers get to save their checkpoint after a stop request, before they are
#: asked again (stop at once), then killed.
STOP_GRACE = (120.0, 20.0)


@dataclass
class Task:
    """One run for a worker: its config as YAML text (so it is rebuilt, plugins and all, in
    the worker) and where it goes."""

    index: int
    label: str
    seed: int
    dirname: str
    config_yaml: str
    path: str
    device: str | None
    allow_changed_inputs: bool
    analysis: dict | None
    threads: int
    quiet: bool
    rounds: int = 0  # the run's train.rounds (what its progress counts to)


def portable(config: Any, key: str = "--jobs") -> str:
    """``config`` as YAML text a worker can rebuild; one sentence when it holds a Python
    object (an API-only value such as ``data.tensors`` or ``model.factory``)."""
    from gossipfl.config import API_ONLY

    for path in API_ONLY:
        value = config
        for part in path:
            value = getattr(value, part, None)
        if value is not None and not isinstance(value, (list, tuple, int, float, str)):
            raise GossipflError(f"{key}: runs on worker processes rebuild each config from "
                                f"YAML, but {'.'.join(path)} holds a Python object; run this "
                                f"study without --jobs.")
    return config.to_yaml()


def _worker(target: Callable[[Task, Callable[[int], None]], tuple], task: Task,
            conn: Any) -> None:
    """A worker process: ``target(task, report)`` (one run: ``(what, status, error)``), sent
    back; ``report(n)`` sends ``("round", n)`` when the run has done n rounds; an
    interruption or an error in the run is sent back the same way."""
    os.setpgrp()  # a terminal's Ctrl-C reaches the sweep, which passes it on once
    _stop_with_parent()

    def report(rounds: int) -> None:
        try:
            conn.send(("round", rounds))
        except OSError:  # the sweep is gone: progress never fails a run
            pass

    try:
        conn.send(target(task, report))
    except KeyboardInterrupt:
        conn.send(("interrupted", "interrupted", None))
    except GossipflError as exc:
        conn.send(("failed", "failed", str(exc)))
    except Exception as exc:  # noqa: BLE001 - a bug in a run: named, the others go on
        conn.send(("failed", "failed", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _stop_with_parent() -> None:
    """Linux: SIGTERM to this worker when the sweep dies (killed itself), so the run stops
    after its round with a checkpoint instead of running on unwatched."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def death(exitcode: int | None) -> str:
    """Why a worker ended without a word: the signal that killed it, or its exit status."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (what the out-of-memory killer sends)" if name == "SIGKILL" else ""
        return (f"its worker process was killed by {name}{hint}; its last checkpoint stays, "
                f"and sweeping again resumes it")
    return f"its worker process ended with status {exitcode} before it reported"


@dataclass
class _Running:
    process: Any
    conn: Any
    task: Task
    message: tuple | None = None  # the run's outcome, once sent
    listening: bool = True  # whether the pipe may still bring a message


Rounds = Callable[[Task, int], None]


def run_parallel(tasks: Sequence[Task], jobs: int, log: Callable[[str], None],
                 done: Callable[[Task, str, str | None, str | None], None],
                 target: Callable[[Task, Callable[[int], None]], tuple],
                 rounds: Rounds | None = None) -> None:
    """Run ``target(task, report)`` for each of ``tasks`` (a module-level function: the
    workers are spawned) on at most ``jobs`` worker processes; ``done(task, what, status,
    error)`` for each as it ends; ``rounds(task, n)`` when it has started (n = 0) and each
    time its worker reports n rounds done. Ctrl-C / SIGTERM (as KeyboardInterrupt): see the
    module doc; re-raised once every worker has ended."""
    context = multiprocessing.get_context("spawn")
    pending = list(tasks)
    running: dict[int, _Running] = {}  # sentinel → worker
    rounds = rounds or (lambda _task, _n: None)
    try:
        while pending or running:
            while pending and len(running) < jobs:
                task = pending.pop(0)
                receive, send = context.Pipe(duplex=False)
                process = context.Process(target=_worker, args=(target, task, send),
                                          daemon=False,
                                          name=f"gossipfl-{task.dirname}")
                process.start()
                send.close()
                running[process.sentinel] = _Running(process, receive, task)
                log(f"started {task.dirname} (pid {process.pid})")
                rounds(task, 0)
            _reap(running, done, _wait(running), rounds)
    except KeyboardInterrupt:
        _stop(running, done, log)
        raise


def _wait(running: dict[int, _Running], timeout: float | None = None) -> list[Any]:
    """The ended workers' sentinels and the pipes with a message, among ``running``."""
    pipes = [w.conn for w in running.values() if w.listening]
    return multiprocessing.connection.wait([*running, *pipes], timeout)


def _listen(worker: _Running, rounds: Rounds) -> None:
    """Every message waiting on the worker's pipe: rounds reported, or its outcome."""
    try:
        while worker.listening and worker.conn.poll():
            message = worker.conn.recv()
            if len(message) == 2 and message[0] == "round":
                rounds(worker.task, message[1])
            else:
                worker.message, worker.listening = message, False
    except (EOFError, OSError):
        worker.listening = False


def _reap(running: dict[int, _Running], done: Callable, ready: Sequence[Any],
          rounds: Rounds = lambda _task, _n: None) -> None:
    pipes = {w.conn: w for w in running.values()}
    for item in ready:
        if item in pipes:
            _listen(pipes[item], rounds)
            continue
        worker = running.pop(item)
        _listen(worker, rounds)
        worker.process.join()
        worker.conn.close()
        if worker.message is None:
            done(worker.task, "failed", "failed", death(worker.process.exitcode))
        else:
            done(worker.task, *worker.message)


def _stop(running: dict[int, _Running], done: Callable, log: Callable[[str], None]) -> None:
    """Ask every worker to stop after its round (SIGINT), then at once, then kill it."""
    if not running:
        return
    log(f"stopping {len(running)} run(s) after their current round (press Ctrl-C again to "
        f"stop them at once)")
    for attempt, grace in enumerate((*STOP_GRACE, 5.0)):
        for worker in running.values():
            _signal(worker.process, signal.SIGKILL if attempt == 2 else signal.SIGINT)
        deadline = time.monotonic() + grace
        while running and time.monotonic() < deadline:
            try:
                ready = _wait(running, max(deadline - time.monotonic(), 0))
            except KeyboardInterrupt:  # asked again: stop them at once
                break
            _reap(running, done, ready)
        if not running:
            return


def _signal(process: Any, signum: int) -> None:
    try:
        os.kill(process.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
