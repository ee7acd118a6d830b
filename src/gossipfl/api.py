"""The Python entry points: ``gossipfl.run(config) -> Result`` (the CLI calls only this to
run), ``gossipfl.stability(config_or_study)`` (``gossipfl stability``, see
:mod:`gossipfl.stability_study`) and ``gossipfl.partition_summary(config)``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gossipfl.config import Config, load_config
from gossipfl.experiment import build_data
from gossipfl.result import Result
from gossipfl.runner import Runner
from gossipfl.stability_study import stability

__all__ = ["Result", "partition_summary", "run", "stability"]


def run(config: Config | dict | str | Path | None = None, *,
        overrides: Sequence[str] = (), callbacks: Sequence = ()) -> Result:
    """Run one experiment and return its :class:`Result`.

    ``config``: a dict, a YAML path or a :class:`~gossipfl.config.Config`; ``overrides``:
    ``"key.path=value"`` strings; ``callbacks``: callables ``(runner, t, row_or_None)``
    called after every round.
    """
    resolved = load_config(config, list(overrides))
    return Runner(resolved, callbacks=callbacks).run()


def partition_summary(config: Config | dict | str | Path | None = None, *,
                      overrides: Sequence[str] = ()):
    """Samples and classes per client of the partition a config makes (no training).

    Returns a :class:`gossipfl.data.PartitionSummary` (``samples [M]``, ``class_counts
    [M, C]``, ``classes_per_client [M]``, ``.table()``).
    """
    from gossipfl.data import summarize_partition

    resolved = load_config(config, list(overrides))
    dataset, parts = build_data(resolved)
    return summarize_partition(parts, dataset.train_y.cpu().numpy(), dataset.num_classes)
