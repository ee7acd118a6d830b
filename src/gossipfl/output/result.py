"""What a run produced: :class:`Result` (returned by ``gossipfl.run`` and read back from run
directories by :mod:`gossipfl.results.rundir`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gossipfl.config import Config
from gossipfl.errors import GossipflError

#: metrics.csv's columns, in this order (then any others).
METRIC_COLUMNS = ("round", "lr", "train_loss", "test_acc", "test_loss", "local_acc_mean",
                  "local_acc_std", "personalized_acc", "personalized_acc_std", "consensus",
                  "bytes_round", "bytes_total", "seconds", "eval_seconds", "elapsed")
EXTRA = "pip install 'gossipfl[pandas]'"


class MissingExtra(GossipflError, ImportError):
    """An optional dependency (pandas) that a call needs is not installed."""


def pandas(what: str) -> Any:
    """The pandas module, or :class:`MissingExtra` saying that ``what`` needs it."""
    try:
        import pandas as pd
    except ImportError:
        raise MissingExtra(f"{what} needs pandas: {EXTRA}") from None
    return pd


def metrics_frame(rows: Sequence[dict], what: str = "Result.metrics_frame()") -> Any:
    """One row per evaluated round, the columns in metrics.csv's order (NaN where a round
    has no value)."""
    pd = pandas(what)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    order = [k for k in METRIC_COLUMNS if k in keys] + [k for k in keys
                                                        if k not in METRIC_COLUMNS]
    return pd.DataFrame.from_records(list(rows), columns=order)


@dataclass
class Result:
    """What a run produced.

    ``metrics``: one dict per evaluated round (``round``, ``test_acc`` of the average model,
    ``local_acc_mean``/``local_acc_std`` of the local models, ``train_loss``, ``consensus``,
    ``bytes_round``/``bytes_total``, ``seconds`` per round, ...). ``params``: the final
    per-client parameters ``[M, P]`` (under several processes: on rank 0, which writes the
    run; ``[0, P]`` on the others); ``server_params``: the server model ``[P]`` of a
    centralized algorithm (None otherwise).
    """

    config: Config | None
    metrics: list[dict]
    params: torch.Tensor | None
    server_params: torch.Tensor | None = None
    layout: Any = None
    info: dict = field(default_factory=dict)

    def column(self, key: str) -> list:
        """The values of one metric over the evaluated rounds (None where absent)."""
        return [row.get(key) for row in self.metrics]

    def metrics_frame(self) -> Any:
        """``metrics`` as a pandas DataFrame: one row per evaluated round, the columns of
        metrics.csv (pandas is the optional extra ``gossipfl[pandas]``)."""
        return metrics_frame(self.metrics, "Result.metrics_frame()")

    def summary(self, metric: str = "test_acc") -> dict:
        """Final and best value of ``metric``, the round of the best, time and bytes."""
        values = [(row[metric], row["round"]) for row in self.metrics if metric in row]
        last = self.metrics[-1] if self.metrics else {}
        best = max(values) if values else (None, None)
        rounds = last.get("round", 0)
        return {"metric": metric, "final": values[-1][0] if values else None,
                "best": best[0], "best_round": best[1], "rounds": rounds,
                "seconds_per_round": last.get("elapsed", 0.0) / max(rounds, 1),
                "bytes_total": last.get("bytes_total", 0)}
