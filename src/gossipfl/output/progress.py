"""Progress wherever work takes long, on stderr: a bar over a run's rounds (``gossipfl run``,
``gossipfl.run()``, each run of a sweep or a stability study) and, for ``sweep --jobs``, a
bar over the study's runs naming the running ones with their round.

``tqdm.auto`` draws them: text in a terminal (or a log file), a widget in a notebook when
ipywidgets is there. Every Python verb shows them by default and takes ``quiet=True`` to show
none; under ``torchrun`` only rank 0 shows them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

#: Seconds before a bar appears: work shorter than this shows none.
DELAY = 1.0


def _tqdm(**kwargs: Any) -> Any:
    from tqdm.auto import tqdm

    return tqdm(file=sys.stderr, dynamic_ncols=True, delay=DELAY, **kwargs)


def other_rank() -> bool:
    """Whether this process is a rank other than 0 of a torch.distributed job."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized()
                and dist.get_rank() != 0)


Metric = Callable[[list], str]  # evaluated rows → the accuracy to show


class RoundBar:
    """Runner callback: a bar over the rounds of ``runner`` showing the latest accuracy (the
    column ``metric(rows)`` names: gossipfl.results.rundir.primary_metric), and "evaluating"
    while the models are measured (an evaluation can take longer than a round).
    ``disable``: no bar (the callback does nothing)."""

    def __init__(self, runner: Any, desc: str, disable: bool = False,
                 metric: Metric | None = None):
        self.bar = _tqdm(total=runner.config.train.rounds, initial=runner.round, desc=desc,
                         unit="round", disable=disable or other_rank())
        self.metric = metric

    def evaluating(self, runner: Any, t: int) -> None:
        """Called by the runner before it evaluates round ``t``'s models (shown at once once
        the bar is showing)."""
        bar = self.bar
        shown = not bar.disable and bar._time() >= bar.start_t + bar.delay
        bar.set_postfix_str("evaluating", refresh=shown)

    def __call__(self, runner: Any, t: int, row: dict | None) -> None:
        if row is not None and self.metric is not None:
            metric = self.metric([row])
            text = f"acc {100 * row[metric]:.2f}%" if metric in row else ""
            self.bar.set_postfix_str(text, refresh=False)
        self.bar.update(1)
        if runner.round >= runner.config.train.rounds:
            self.bar.close()

    def close(self) -> None:
        self.bar.close()


def round_bars(quiet: bool, metric: Metric) -> Callable[[Any, str], RoundBar] | None:
    """The ``progress`` argument of the study verbs: a :class:`RoundBar` per run (None when
    ``quiet``)."""
    if quiet:
        return None
    return lambda prepared, desc: RoundBar(getattr(prepared, "runner", prepared), desc,
                                           metric=metric)


class StudyBar:
    """``sweep --jobs``: a bar over the study's runs (done of all), its text the running
    runs with their round and how many are left to start."""

    def __init__(self, total: int, disable: bool = False):
        self.bar = _tqdm(total=total, desc="runs", unit="run", disable=disable or other_rank())
        self.rounds: dict[str, str] = {}  # running run → "round/rounds"
        self.waiting, self.done = total, 0

    def started(self, name: str, rounds: int) -> None:
        self.waiting -= 1
        self.rounds[name] = f"0/{rounds}"
        self._show()

    def round(self, name: str, done: int, rounds: int) -> None:
        if name in self.rounds:
            self.rounds[name] = f"{done}/{rounds}"
            self._show()

    def finished(self, name: str) -> None:
        self.rounds.pop(name, None)
        self.done += 1
        self.bar.update(1)
        self._show()

    def text(self) -> str:
        running = ", ".join(f"{name} {at}" for name, at in self.rounds.items())
        return (f"running {len(self.rounds)}" + (f" ({running})" if running else "")
                + f", left {self.waiting}")

    def _show(self) -> None:
        self.bar.set_postfix_str(self.text(), refresh=True)

    def log(self, log: Callable[[str], None]) -> Callable[[str], None]:
        """``log`` writing its lines above the bar (not through it)."""
        def write(message: str) -> None:
            with self.bar.external_write_mode():
                log(message)
        return write

    def close(self) -> None:
        self.bar.close()


class WorkBar:
    """A bar over steps whose number is not known ahead (Hessian-vector products, batches of
    landscape points): how many are done and how fast; :meth:`counting` wraps the function
    that does one."""

    def __init__(self, desc: str, unit: str, disable: bool = False):
        self.bar = _tqdm(desc=desc, unit=unit, disable=disable or other_rank())

    def counting(self, fn: Callable) -> Callable:
        def counted(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            self.bar.update(1)
            return out
        return counted

    def close(self) -> None:
        self.bar.close()


class CountedProducts:
    """A Hessian-vector-product operator whose ``hvp`` calls tick ``bar`` (each call: one
    product per model); everything else is the operator's own."""

    def __init__(self, op: Any, bar: WorkBar):
        self._op = op
        self.hvp = bar.counting(op.hvp)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._op, name)


@contextlib.contextmanager
def made_callback(progress: Callable[[Any, str], Any] | None, prepared: Any,
                  name: str) -> Iterator[list]:
    """The runner callback a verb's ``progress(prepared, name)`` makes (a bar, or the
    researcher's own), as a list of callbacks to run with (empty for ``progress=None`` or a
    ``None`` made); its ``close()``, where it has one, is called when the run ends, however it
    ends. A made callback that cannot be called is refused in one sentence."""
    from gossipfl.errors import GossipflError

    made = progress(prepared, name) if progress is not None else None
    if made is not None and not callable(made):
        raise GossipflError(f"progress: must return a runner callback (a function called "
                            f"(runner, t, row) after each round) or None, got {made!r:.80}.")
    try:
        yield [] if made is None else [made]
    finally:
        close = getattr(made, "close", None)
        if callable(close):
            close()
