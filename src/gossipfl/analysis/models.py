"""The models a run saved, and the samples an analysis evaluates them on.

A run directory holds ``config.yaml`` (the resolved config) and ``checkpoint.pt``; the model
is rebuilt from the config (:func:`gossipfl.core.runner.build_model_for`, architecture only: the
weights come from the checkpoint). :func:`checkpoint_models` is the one place that knows the
checkpoint's layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from gossipfl.common.rng import numpy_generator
from gossipfl.errors import GossipflError

CONFIG_FILE = "config.yaml"
CHECKPOINT_FILE = "checkpoint.pt"
SPLITS = ("train", "test")


@dataclass
class RunModels:
    """A run's saved models: ``average [P]`` (the mean of the clients, or the server model of
    a centralized run) and ``local [M, P]`` (None for a centralized run, which keeps only the
    server model), at round ``round``."""

    path: Path
    config: object  # gossipfl.config.Config
    model: nn.Module
    dataset: object  # gossipfl.data.Dataset
    average: Tensor
    local: Tensor | None
    round: int

    @property
    def algorithm(self) -> str:
        return self.config.algorithm.name


def checkpoint_models(state: object, path: Path, key: str = "RUN_DIR"
                      ) -> tuple[Tensor | None, Tensor, int]:
    """(local ``[M, P]`` or None, average ``[P]``, round) from a checkpoint dict.

    Format 1 (:meth:`gossipfl.results.RunDirectory.save_checkpoint`): ``state["config"]``
    is the config it was written with (a dict); ``state["runner"]``
    holds ``round`` and ``algorithm``, the algorithm's state tensors; decentralized algorithms
    keep the client models in ``x [M, P]`` (average model = their mean, as
    ``Algorithm.global_model``), centralized ones the server model in ``server [P]``.
    """
    try:
        runner = state["runner"]  # type: ignore[index]
        algorithm, saved_round = runner["algorithm"], int(runner["round"])
        if not isinstance(state["config"], dict):  # type: ignore[index]
            raise TypeError
    except (KeyError, TypeError, ValueError):
        raise GossipflError(f"{key}: '{path}' is not a gossipfl checkpoint.") from None
    if "x" in algorithm:
        local = algorithm["x"].float()
        return local, local.mean(0), saved_round
    if "server" in algorithm:
        return None, algorithm["server"].float(), saved_round
    raise GossipflError(f"{key}: the checkpoint '{path}' holds no model (no 'x' or "
                        f"'server' in its algorithm state).")


def _read_checkpoint(path: Path, key: str = "RUN_DIR") -> object:
    if not path.is_file():
        raise GossipflError(f"{key}: '{path.parent}' has no {CHECKPOINT_FILE}; the run saved "
                            f"no model to analyze.")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise GossipflError(f"{key}: checkpoint '{path}' cannot be read "
                            f"({type(exc).__name__}).") from None


def load_run_models(run_dir: str | Path, round: int | None = None, key: str = "RUN_DIR"
                    ) -> RunModels:
    """The model, data set and saved parameters of the run in ``run_dir``.

    Runs keep one checkpoint (the latest); ``round`` must be the round it was written at.
    config.yaml must still be the config the checkpoint was written with (as ``--resume``
    checks it: the data would be partitioned, the model built, with another one).
    ``key``: the argument its refusals name (``--other`` for the run compared with).
    """
    from gossipfl.assembly.comparable import check_config_unchanged
    from gossipfl.assembly.experiment import build_data, build_model_for
    from gossipfl.assembly.loading import load_config

    path = Path(run_dir)
    if not path.is_dir():
        raise GossipflError(f"{key}: '{path}' is not a directory.")
    if not (path / CONFIG_FILE).is_file():
        raise GossipflError(f"{key}: '{path}' is not a run directory (no {CONFIG_FILE}).")
    state = _read_checkpoint(path / CHECKPOINT_FILE, key)
    local, average, saved = checkpoint_models(state, path / CHECKPOINT_FILE, key)
    if round is not None and round != saved:
        raise GossipflError(f"--round: the run kept only its checkpoint of round {saved}, "
                            f"got {round}.")
    config = load_config(path / CONFIG_FILE)
    check_config_unchanged(state, config, path / CONFIG_FILE, key)
    dataset, _ = build_data(config)
    model = build_model_for(config, dataset)
    P = sum(p.numel() for p in model.parameters())
    if average.shape != (P,):
        raise GossipflError(f"{key}: the checkpoint's models have {average.shape[-1]} "
                            f"parameters but the config's model has {P}.")
    return RunModels(path, config, model, dataset, average, local, saved)


def analysis_samples(dataset: object, split: str, samples: int | None,
                     seed: int) -> tuple[Tensor, Tensor]:
    """A fixed random subset of ``samples`` samples of the ``split`` ("train" or "test"),
    in index order (all samples when ``samples`` is None or at least the split's size)."""
    if split not in SPLITS:
        raise GossipflError(f"--data: unknown value '{split}'; choose one of: "
                            f"{', '.join(SPLITS)}.")
    inputs, targets = getattr(dataset, f"{split}_x"), getattr(dataset, f"{split}_y")
    n = len(targets)
    if n == 0:
        raise GossipflError(f"--data: the run's data set has no {split} samples.")
    if samples is None or samples >= n:
        return inputs, targets
    pick = np.sort(numpy_generator(seed, "analysis_samples", split).choice(
        n, size=samples, replace=False))
    index = torch.as_tensor(pick, device=targets.device)
    return inputs[index], targets[index]
