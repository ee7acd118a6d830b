"""The Python entry point: ``gossipfl.run(config) -> Result``. The CLI calls only this."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gossipfl.config import Config, load_config


@dataclass
class Result:
    """What a run produced.

    ``metrics``: one dict per evaluated round (``round``, ``test_acc`` of the average model,
    ``local_acc_mean``/``local_acc_std`` of the local models, ``train_loss``, ``consensus``,
    ``bytes_round``/``bytes_total``, ``seconds`` per round, ...). ``params``: the final
    per-client parameters ``[M, P]``; ``server_params``: the server model ``[P]`` of a
    centralized algorithm (None otherwise).
    """

    config: Config
    metrics: list[dict]
    params: torch.Tensor
    server_params: torch.Tensor | None = None
    layout: Any = None
    info: dict = field(default_factory=dict)

    def column(self, key: str) -> list:
        """The values of one metric over the evaluated rounds (None where absent)."""
        return [row.get(key) for row in self.metrics]

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


def run(config: Config | dict | str | Path | None = None, *,
        overrides: Sequence[str] = (), callbacks: Sequence = ()) -> Result:
    """Run one experiment and return its :class:`Result`.

    ``config``: a dict, a YAML path or a :class:`~gossipfl.config.Config`; ``overrides``:
    ``"key.path=value"`` strings; ``callbacks``: callables ``(runner, t, row_or_None)``
    called after every round.
    """
    from gossipfl.runner import Runner

    resolved = load_config(config, list(overrides))
    return Runner(resolved, callbacks=callbacks).run()


def partition_summary(config: Config | dict | str | Path | None = None, *,
                      overrides: Sequence[str] = ()):
    """Samples and classes per client of the partition a config makes (no training).

    Returns a :class:`gossipfl.data.PartitionSummary` (``samples [M]``, ``class_counts
    [M, C]``, ``classes_per_client [M]``, ``.table()``).
    """
    from gossipfl.data import summarize_partition
    from gossipfl.runner import build_data

    resolved = load_config(config, list(overrides))
    dataset, parts = build_data(resolved)
    return summarize_partition(parts, dataset.train_y.cpu().numpy(), dataset.num_classes)
