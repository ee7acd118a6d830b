"""Ctrl-C and SIGTERM during a run: stop at the end of the current round, so the checkpoint
saved on the way out holds every completed round.

The first signal asks the run to stop after the round in progress (and says so); a second
one stops at once (the last checkpoint stays). Before the first round of this process has
finished (set-up, a first round or evaluation that takes long) there is no round to save, so
the first signal stops at once. While the run directory is being written on
the way out, signals wait (:meth:`StopRequest.shield`), so no file is left half-updated and
no traceback is printed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopAtRoundEnd(KeyboardInterrupt):
    """Raised between rounds after a stop request: the runner's state is a whole round."""


class StopRequest:
    """Signal handler and runner callback (place it last, after the recorder)."""

    def __init__(self, warn: Callable[[str], None] = print, runner: Any = None):
        self.warn = warn
        self.count = 0
        self.runner = runner  # its round when the run (or the resume) started: self.start
        self.start = None if runner is None else runner.round
        self.shielded = False
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        """Handle SIGINT and SIGTERM (only possible in the main thread; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.shielded:
            return
        if self.count == 1 and self.runner is not None and self.runner.round == self.start:
            self.warn("stopping now: no round has finished yet, so there is none to save")
            raise KeyboardInterrupt
        if self.count == 1:
            self.warn("stopping after the current round and saving a checkpoint "
                      "(press Ctrl-C again to stop at once)")
            return
        raise KeyboardInterrupt

    def __call__(self, runner: Any, t: int, row: dict | None) -> None:
        if self.count and runner.round < runner.config.train.rounds:
            raise StopAtRoundEnd

    @contextmanager
    def shield(self) -> Iterator[None]:
        """Signals arriving inside wait (the first one still stops the run)."""
        self.shielded = True
        try:
            yield
        finally:
            self.shielded = False
