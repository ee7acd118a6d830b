"""What of a config decides a run's numbers (:func:`comparable_config`), and whether a
checkpoint was written with the config a run directory holds now: shared by ``--resume``,
``gossipfl analyze`` and a study's check of its run directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gossipfl.assembly.loading import load_config
from gossipfl.config import Config
from gossipfl.errors import GossipflError


def comparable_config(config: Config) -> dict:
    """The config as a plain dict without the keys that do not change results."""
    data = yaml.safe_load(config.to_yaml())
    for key in ("device", "output", "name"):
        data.pop(key, None)
    data.get("data", {}).pop("verify", None)  # how files are checked, not what is computed
    return data


def check_config_unchanged(state: dict, config: Config, path: Path, key: str) -> None:
    """Refuse, in one sentence starting with ``key``, a config (read from ``path``, a run's
    config.yaml) that is not the one the checkpoint ``state`` was written with
    (:func:`same_config`, the keys of :func:`comparable_config`): what is computed from the
    checkpoint with it would belong to no run. Shared by ``--resume`` and ``gossipfl
    analyze``. The plugins loaded are not compared: a ``--plugin`` of the command is added to
    every config read, and the pieces the config names (compared) are what compute; their
    files' contents are ``inputs.json``'s to check."""
    if not same_config(_loaded_elsewhere(state["config"]),
                       _loaded_elsewhere(comparable_config(config))):
        raise GossipflError(f"{key}: '{path}' was changed after the checkpoint was written; "
                            f"restore it or start a new run.")


def _loaded_elsewhere(config: dict) -> dict:
    return {key: value for key, value in config.items() if key != "plugins"}


def same_config(stored: dict, current: dict) -> bool:
    """Whether a checkpoint's config is the current one; a key the checkpoint's version of
    gossipfl did not have yet (e.g. a later ``topology.s``) counts as the same when the
    current config holds its default, since the older code computed with that default."""
    return _same(stored, current, comparable_config(load_config({})))


def _same(stored: Any, current: Any, default: Any) -> bool:
    if not isinstance(stored, dict) or not isinstance(current, dict):
        return stored == current
    default = default if isinstance(default, dict) else {}
    for key, value in current.items():
        if key not in stored:
            if key not in default or default[key] != value:
                return False
        elif not _same(stored[key], value, default.get(key)):
            return False
    return set(stored) <= set(current)
