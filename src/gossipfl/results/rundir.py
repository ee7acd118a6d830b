"""The run directory: its files, the recorder that writes them during a run, checkpoints.

A run directory ``runs/<name>-<timestamp>/`` holds::

    config.yaml      the fully resolved config (load_config(config.yaml) rebuilds the run)
    metrics.csv      one row per evaluated round (columns: METRIC_COLUMNS, then any others)
    summary.json     status (running | finished | interrupted | failed | diverged),
                     final/best metric,
                     data_files (the dataset files read, with their SHA-256), ...
    inputs.json      every file the run read (matrix, speeds, plugins, data) with its
                     absolute path and SHA-256, checked on resume (gossipfl.results.inputs)
    checkpoint.pt    runner state every ``output.checkpoint_every`` rounds, at the end and
                     when the run is interrupted (at the end of a round)
    .lock            while a process writes the run (holds its pid; see gossipfl.io.FolderLock)
    *.png            accuracy vs round, accuracy vs bytes sent, consensus distance vs round
    tensorboard/     only with ``output.tensorboard: true`` and the package installed
    wandb/           only with ``output.wandb`` (offline by default) and the package installed

Every file is written atomically (:mod:`gossipfl.io`), so a killed run leaves the previous
version of each file, never half of one (and a resume removes the temporary files it left). Randomness is counter-based, so resuming from a
checkpoint repeats the uninterrupted run exactly (timing columns aside).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from gossipfl.assembly.comparable import comparable_config
from gossipfl.assembly.loading import load_config
from gossipfl.config import Config
from gossipfl.errors import GossipflError
from gossipfl.io import (
    LOCK_FILE,
    TEMP_SUFFIX,
    WriteError,
    atomic_torch_save,
    atomic_write_text,
    check_writable,
    user_path,
)
from gossipfl.output.result import METRIC_COLUMNS, Result

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.csv"
SUMMARY_FILE = "summary.json"
CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_FORMAT = 1

#: Columns that measure wall-clock time: the only ones a resumed run may change.
TIMING_COLUMNS = ("seconds", "eval_seconds", "elapsed")
#: Accuracy metrics in order of preference for tables and figures.
ACCURACY_METRICS = ("test_acc", "personalized_acc", "local_acc_mean", "honest_test_acc",
                    "honest_local_acc_mean")
#: Config keys that do not change what a run computes (ignored when grouping runs).
NON_RESULT_KEYS = ("seed", "name", "device", "output", "engine")

METRIC_LABELS = {"test_acc": "test accuracy (average model)",
                 "personalized_acc": "personalized accuracy (local test splits)",
                 "local_acc_mean": "test accuracy (local models, mean)",
                 "consensus": "consensus distance (1/M) Σ‖x_i − x̄‖²",
                 "honest_test_acc": "test accuracy (average of the honest models)",
                 "honest_local_acc_mean": "test accuracy (honest local models, mean)",
                 "honest_consensus": "honest consensus distance (1/|H|) Σ_H‖x_i − x̄_H‖²"}

Callback = Callable[[Any, int, "dict | None"], None]


# --------------------------------------------------------------------------------------------
# Files of one run directory
# --------------------------------------------------------------------------------------------
class RunDirectory:
    """The files of one run directory (nothing is read or written until asked)."""

    writes = True  # False: a distributed rank other than 0 (gossipfl.results.ranks)

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    def file(self, name: str) -> Path:
        return self.path / name

    @classmethod
    def create(cls, path: str | Path, key: str = "output.dir",
               unique: bool = False) -> RunDirectory:
        """Make a new, empty run directory. An existing non-empty one is an error, unless
        ``unique``: then the first free ``<path>-2``, ``<path>-3``, ... is taken (the name was
        not chosen exactly, so runs started at the same second never collide)."""
        path = Path(path)
        if not unique:
            check_free(path, key)
            _mkdir(path, key, exist_ok=True)
            return cls(path)
        for n in itertools.count(1):
            candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
            if _mkdir(candidate, key, exist_ok=False):
                return cls(candidate)
        raise AssertionError("unreachable")

    def is_run(self) -> bool:
        return self.file(CONFIG_FILE).is_file()

    # -- writing ------------------------------------------------------------------------
    def write_config(self, config: Config) -> None:
        atomic_write_text(self.file(CONFIG_FILE), config.to_yaml())

    def write_metrics(self, rows: Sequence[dict]) -> None:
        atomic_write_text(self.file(METRICS_FILE), metrics_to_csv(rows))

    def write_summary(self, summary: dict) -> None:
        atomic_write_text(self.file(SUMMARY_FILE), json.dumps(summary, indent=2) + "\n")

    def save_checkpoint(self, runner: Any) -> None:
        state = {"format": CHECKPOINT_FORMAT, "config": comparable_config(runner.config),
                 "runner": runner.state_dict()}
        atomic_torch_save(state, self.file(CHECKPOINT_FILE))

    # -- reading ------------------------------------------------------------------------
    def read_config(self) -> Config:
        return load_config(self.file(CONFIG_FILE))

    def read_config_dict(self) -> dict:
        try:
            data = yaml.safe_load(self.file(CONFIG_FILE).read_text()) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            data = None
        if not isinstance(data, dict):
            raise GossipflError(f"run: '{self.file(CONFIG_FILE)}' cannot be read (it is not a "
                                f"gossipfl config).")
        return data

    def read_metrics(self) -> list[dict]:
        path = self.file(METRICS_FILE)
        return metrics_from_csv(path.read_text()) if path.is_file() else []

    def read_summary(self) -> dict:
        path = self.file(SUMMARY_FILE)
        if not path.is_file():
            return {}
        try:
            summary = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        return summary if isinstance(summary, dict) else {}  # damaged: as if not written

    def status(self) -> str | None:
        return self.read_summary().get("status")

    def load_checkpoint(self) -> dict | None:
        """The checkpoint dict, or None when none was written yet."""
        path = self.file(CHECKPOINT_FILE)
        if not path.is_file():
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
            raise GossipflError(f"--resume: checkpoint '{path}' cannot be read "
                                f"({type(exc).__name__}); the file is corrupt.") from None
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise GossipflError(f"--resume: checkpoint '{path}' is not a gossipfl checkpoint "
                                f"of format {CHECKPOINT_FORMAT}.")
        return state


def check_free(path: Path, key: str) -> None:
    """A run may only be written to a path that is absent or an empty folder, in a place
    that can be written (checked before any work is done)."""
    if not is_vacant(path):
        raise GossipflError(f"{key}: run directory '{path}' already exists; choose another "
                            f"name or remove it.")
    check_writable(path, key)


def is_vacant(path: Path) -> bool:
    """Absent, or a folder holding nothing but a lock and temporary files (what a process
    killed before it wrote anything leaves)."""
    if not path.exists():
        return True
    return path.is_dir() and all(
        p.name == LOCK_FILE or (p.name.startswith(".") and p.name.endswith(TEMP_SUFFIX))
        for p in path.iterdir())


def _mkdir(path: Path, key: str, exist_ok: bool) -> bool:
    """Create ``path`` (and its parents); False when it exists and ``exist_ok`` is off."""
    try:
        path.mkdir(parents=True, exist_ok=exist_ok)
    except FileExistsError:
        if path.is_dir():
            return False
        raise GossipflError(f"{key}: cannot create run directory '{path}': a file is in the "
                            f"way.") from None
    except OSError as exc:
        raise WriteError(path, exc) from None
    return True


def timestamp(now: float | None = None) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(now))


def slug(text: str) -> str:
    """A file-name-safe version of ``text`` (letters, digits, ``.``, ``_``, ``-``)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-")
    return cleaned or "run"


def run_name(config: Config) -> str:
    """``config.name``, else ``<algorithm>-<dataset>``."""
    return slug(config.name or f"{config.algorithm.name}-{config.data.dataset}")


def new_run_path(config: Config, parent: str | Path | None = None) -> Path:
    """``<parent or output.dir>/<name>-<timestamp>``."""
    parent = user_path(parent, "--out") if parent is not None \
        else user_path(config.output.dir, "output.dir")
    return parent / f"{run_name(config)}-{timestamp()}"


# --------------------------------------------------------------------------------------------
# metrics.csv
# --------------------------------------------------------------------------------------------
def metric_columns(rows: Iterable[dict]) -> list[str]:
    """Known columns in their standard order, then any others in order of appearance."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    known = [c for c in METRIC_COLUMNS if c in seen]
    return known + [c for c in seen if c not in METRIC_COLUMNS]


def metrics_to_csv(rows: Sequence[dict]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=metric_columns(rows), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(v) for k, v in row.items()})
    return buffer.getvalue()


def metrics_from_csv(text: str) -> list[dict]:
    """Rows with numbers parsed back (int where integral text, else float; empty: absent)."""
    rows = []
    for raw in csv.DictReader(io.StringIO(text)):
        if None in raw:
            raise csv.Error(f"row {len(rows) + 1} has more fields than the header")
        rows.append({k: _parse_number(v) for k, v in raw.items() if v not in ("", None)})
    return rows


def _csv_value(value: Any) -> Any:
    return repr(value) if isinstance(value, float) else value


def _parse_number(text: str) -> int | float | str:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


# --------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------
def primary_metric(rows: Sequence[dict], personalized: bool = False) -> str:
    """The accuracy a table reports: the first of ACCURACY_METRICS that the rows hold
    (``personalized_acc`` first for personalized algorithms, :func:`is_personalized`;
    ``honest_test_acc`` before both in runs with Byzantine clients)."""
    order = ("personalized_acc", *ACCURACY_METRICS) if personalized else ACCURACY_METRICS
    order = ("honest_test_acc", *order)
    for metric in order:
        if any(metric in row for row in rows):
            return metric
    return ACCURACY_METRICS[0]


def honest_key(key: str, rows: Sequence[dict]) -> str:
    """``honest_<key>`` where ``rows`` hold it (a run with Byzantine clients: the same measure
    over the honest clients alone, what its summary, table and figures report), else
    ``key``."""
    return f"honest_{key}" if any(f"honest_{key}" in row for row in rows) else key


def is_personalized(algorithm: str | None) -> bool:
    """Whether the algorithm named ``algorithm`` declares personalized models (False for a
    name not registered here, e.g. a plugin not loaded)."""
    from gossipfl.algorithms import get_algorithm

    try:
        return "personalized" in get_algorithm(str(algorithm)).evaluations
    except GossipflError:
        return False


def summarize_rows(rows: Sequence[dict], metric: str | None = None) -> dict:
    """Final and best ``metric``, round of the best, time per round and bytes sent; the last
    row's per-client measures (over the honest clients too, in a run with Byzantine
    clients) and privacy spent (DP-SGD's ``epsilon``, Muffliato's pairwise ``pndp_*``)."""
    metric = metric or primary_metric(rows)
    out = Result(config=None, metrics=list(rows), params=None).summary(metric)
    last = rows[-1] if rows else {}
    for key in ("local_acc_mean", "local_acc_std", "consensus", "train_loss", "epsilon",
                "epsilon_mean", "honest_local_acc_mean", "honest_local_acc_std",
                "honest_consensus", "pndp_max", "pndp_mean"):
        if last.get(key) is not None:
            out[f"final_{key}"] = last[key]
    return out


def run_summary(runner: Any, status: str, error: str | None = None,
                checkpoint_round: int | None = None) -> dict:
    """What summary.json holds for a run in ``status``."""
    config = runner.config
    info = {"status": status, "name": config.name, "algorithm": config.algorithm.name,
            "dataset": config.data.dataset, "clients": config.data.clients,
            "topology": None if runner.exp.topology is None else config.topology.name,
            "seed": config.seed, "rounds_done": runner.round,
            "rounds_planned": config.train.rounds,
            "checkpoint_round": checkpoint_round, "parameters": runner.exp.layout.P,
            "updated": timestamp()}
    if error:
        info["error"] = error
    if config.privacy is not None:  # the δ of final_epsilon
        info["delta"] = config.privacy.delta
    if runner.exp.info.get("breakdown"):  # a Byzantine run: μ_min, b (gossipfl.trust.breakdown)
        info["breakdown"] = runner.exp.info["breakdown"]
    if runner.rows and "pndp_max" in runner.rows[-1]:  # the Rényi order of final_pndp_*
        info["pndp_alpha"] = config.algorithm.params.alpha
    if runner.exp.info.get("eval_clients"):  # local models measured on a sample of clients
        info["eval_clients"] = runner.exp.info["eval_clients"]
    files = getattr(runner.exp.dataset, "files", ())
    if files:
        info["data_files"] = list(files)  # which files the run read, with their SHA-256
    info.update(summarize_rows(runner.rows, primary_metric(
        runner.rows, "personalized" in runner.exp.algorithm.evaluations)))
    return info


# --------------------------------------------------------------------------------------------
# Recording a run
# --------------------------------------------------------------------------------------------
class Recorder:
    """Runner callback writing metrics.csv on every evaluation and checkpoints every N rounds.

    ``checkpoint_every = 0`` checkpoints only at the end.
    """

    def __init__(self, run_dir: RunDirectory, checkpoint_every: int,
                 checkpoint_round: int | None = None):
        self.run_dir = run_dir
        self.every = checkpoint_every
        self.checkpoint_round = checkpoint_round  # round of the last checkpoint written

    def summary(self, runner: Any, status: str, error: str | None = None) -> dict:
        return run_summary(runner, status, error, self.checkpoint_round)

    def __call__(self, runner: Any, t: int, row: dict | None) -> None:
        if row is not None:
            self.run_dir.write_metrics(runner.rows)
        if self.every and (t + 1) % self.every == 0:
            self.checkpoint(runner, "running")

    def checkpoint(self, runner: Any, status: str) -> None:
        self.run_dir.save_checkpoint(runner)
        self.checkpoint_round = runner.round
        self.run_dir.write_summary(self.summary(runner, status))
