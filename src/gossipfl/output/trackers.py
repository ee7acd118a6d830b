"""Experiment trackers beside the run directory: TensorBoard and Weights & Biases.

A tracker is one small interface, :class:`Tracker`: ``open(run_dir, config, start_round)``,
``log(row)`` for every evaluated round's metrics row, ``close()``. :class:`Tracking` is the
runner callback that drives the trackers a config asks for (``output.tensorboard``,
``output.wandb``) and is the one place their failures are handled: a missing package, or an
exception in ``open``, ``log`` or ``close``, is one warning naming the setting, that tracker
is dropped and the run goes on; the run directory's own files never depend on a tracker. A
full disk is the exception: it stops the run as a full disk does anywhere (a
:class:`~gossipfl.io.WriteError` naming the tracker's folder, exit status 2, resumable from
the last checkpoint), at the first round's end when it came while the tracker was opened.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

from gossipfl.errors import GossipflError, did_you_mean
from gossipfl.io import WriteError, no_space
from gossipfl.validation import Rule, check_all, one_of

WANDB_MODES = ("offline", "online", "disabled")
WANDB_KEYS = ("project", "entity", "mode", "tags", "name")
_TEXT = Rule(lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string")
_TAGS = Rule(lambda v: isinstance(v, list) and all(isinstance(t, str) and t for t in v),
             "a list of non-empty strings")


class TrackerMissing(Exception):
    """A tracker's package is not installed (the warning says how to install it)."""


class Tracker:
    """What a tracker does; subclasses fill in the three methods. ``key`` is the config
    setting that turns it on (named in its warnings)."""

    key = ""
    folder = ""  # what it writes in the run directory (named when the disk is full)

    def open(self, run_dir: Any, config: Any, start_round: int) -> None:
        raise NotImplementedError

    def log(self, row: dict) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def numbers(row: dict) -> dict[str, float]:
    """The row's numeric columns except ``round`` (the step they are logged at)."""
    return {k: v for k, v in row.items()
            if k != "round" and isinstance(v, int | float) and not isinstance(v, bool)}


class TensorBoardTracker(Tracker):
    """Every evaluated row's numbers to ``<run>/tensorboard`` (a resumed run purges the
    steps after its checkpoint)."""

    key = "output.tensorboard"
    folder = "tensorboard"

    def open(self, run_dir: Any, config: Any, start_round: int) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise TrackerMissing("the tensorboard package is not installed, so nothing is "
                                 "logged to TensorBoard (pip install tensorboard).") from None
        purge = start_round + 1 if start_round else None
        self.writer = SummaryWriter(log_dir=str(run_dir.file("tensorboard")), purge_step=purge)

    def log(self, row: dict) -> None:
        for key, value in numbers(row).items():
            self.writer.add_scalar(key, value, global_step=row["round"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def check_wandb(value: Any, key: str = "output.wandb") -> None:
    """``output.wandb``: true, false, or a mapping of ``project``, ``entity``, ``mode``
    (offline | online | disabled), ``tags`` (a list) and ``name``."""
    if isinstance(value, bool):
        return
    if not isinstance(value, dict):
        raise GossipflError(f"{key}: must be true, false or a mapping of "
                            f"{', '.join(WANDB_KEYS)}, got {value!r}.")
    for name in value:
        if name not in WANDB_KEYS:
            raise GossipflError(f"{key}.{name}: unknown key{did_you_mean(str(name), WANDB_KEYS)}"
                                f"; the keys are {', '.join(WANDB_KEYS)}.")
    check_all(key, value, {"project": _TEXT, "entity": _TEXT, "name": _TEXT,
                           "mode": one_of(*WANDB_MODES), "tags": _TAGS})


def wandb_mode(settings: dict) -> str:
    """``output.wandb.mode``, else ``$WANDB_MODE``, else online only with an API key
    (``$WANDB_API_KEY``): offline by default, nothing leaves the machine."""
    mode = settings.get("mode") or os.environ.get("WANDB_MODE")
    if mode in WANDB_MODES:
        return mode
    return "online" if os.environ.get("WANDB_API_KEY") else "offline"


class WandbTracker(Tracker):
    """The resolved config once and every evaluated row at step ``round``, into
    ``<run>/wandb/`` (offline unless asked otherwise; ``wandb sync <run>/wandb/offline-run-*``
    uploads it later). A run resumed keeps its W&B run id (derived from the run directory)."""

    key = "output.wandb"
    folder = "wandb"

    def open(self, run_dir: Any, config: Any, start_round: int) -> None:
        try:
            import wandb
        except ImportError:
            raise TrackerMissing("the wandb package is not installed, so nothing is logged "
                                 "to Weights & Biases (pip install 'gossipfl[wandb]').") from None
        settings = config.output.wandb if isinstance(config.output.wandb, dict) else {}
        path = run_dir.path.resolve()
        self.run = wandb.init(
            project=settings.get("project", "gossipfl"), entity=settings.get("entity"),
            name=settings.get("name", path.name), tags=settings.get("tags"),
            mode=wandb_mode(settings), dir=str(path), config=config.to_dict(),
            id=hashlib.sha1(str(path).encode()).hexdigest()[:16], resume="allow",
            settings=wandb.Settings(console="off", silent=True))

    def log(self, row: dict) -> None:
        self.run.log(numbers(row), step=int(row["round"]))

    def close(self) -> None:
        self.run.finish()


class Tracking:
    """Runner callback: every evaluated row to each open tracker; a tracker that fails is
    one warning (``<key>: ...; the run goes on without it.``) and is dropped."""

    def __init__(self, trackers: list[Tracker], warn: Callable[[str], None],
                 run_dir: Any = None):
        self.trackers = list(trackers)
        self.warn = warn
        self.run_dir = run_dir
        self.failure: WriteError | None = None  # a full disk while a tracker was opened

    @classmethod
    def open(cls, run_dir: Any, config: Any, start_round: int,
             warn: Callable[[str], None]) -> Tracking:
        """The trackers ``config.output`` turns on, opened (those that could be)."""
        wanted: list[Tracker] = []
        if config.output.tensorboard:
            wanted.append(TensorBoardTracker())
        if config.output.wandb:
            wanted.append(WandbTracker())
        tracking = cls([], warn, run_dir)
        for tracker in wanted:
            try:
                if tracking._call(tracker, "open", tracker.open, run_dir, config, start_round):
                    tracking.trackers.append(tracker)
            except WriteError as exc:  # raised at the first round's end, inside the run
                tracking.failure = exc
                _quiet_close(tracker)
        return tracking

    def _call(self, tracker: Tracker, what: str, fn: Callable, *args: Any) -> bool:
        try:
            fn(*args)
            return True
        except TrackerMissing as exc:
            self.warn(f"{tracker.key}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a tracker never stops a run
            full = no_space(exc)
            if full is not None and self.run_dir is not None:  # but a full disk does
                raise WriteError(self.run_dir.path / tracker.folder, full) from None
            self.warn(f"{tracker.key}: the tracker failed in {what} "
                      f"({type(exc).__name__}: {exc}); the run goes on without it.")
        return False

    def __call__(self, runner: Any, t: int, row: dict | None) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        if row is None:
            return
        for tracker in list(self.trackers):
            try:
                logged = self._call(tracker, "log", tracker.log, row)
            except WriteError:
                self.trackers.remove(tracker)
                _quiet_close(tracker)
                raise
            if not logged:
                self.trackers.remove(tracker)
                self._call(tracker, "close", _quiet_close, tracker)

    def close(self) -> None:
        trackers, self.trackers = self.trackers, []
        run_dir, self.run_dir = self.run_dir, None  # closing: a full disk is a warning
        for tracker in trackers:
            self._call(tracker, "close", tracker.close)
        self.run_dir = run_dir


def _quiet_close(tracker: Tracker) -> None:
    """Close a tracker that already failed, without a second warning."""
    try:
        tracker.close()
    except Exception:  # noqa: BLE001, S110 - its one warning was already given
        pass
