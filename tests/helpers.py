"""What several test modules share: a tiny run's config, run-directory helpers, runs stopped
and resumed, a finished tiny run made by the command line, and the one-sentence error check.
Fixtures live in ``conftest.py``; this module holds plain functions."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
import yaml

from gossipfl import cli
from gossipfl import io as gossipfl_io
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.results.lifecycle import execute, prepare_fresh, prepare_resume
from gossipfl.results.rundir import TIMING_COLUMNS

#: A run that takes a fraction of a second: 4 clients, logistic regression on Gaussian blobs.
TINY: dict = {
    "name": "tiny",
    "data": {"dataset": "synthetic", "clients": 4,
             "options": {"dim": 6, "train_size": 120, "test_size": 40, "num_classes": 3}},
    "model": {"name": "logistic"},
    "topology": {"name": "ring"},
    "algorithm": {"name": "dfedavg"},
    "train": {"rounds": 6, "local_steps": 2, "batch_size": 8, "lr": 0.1},
    "eval": {"every": 1},
    "output": {"checkpoint_every": 2},
}

#: A few seconds at most: synthetic data, 4 clients, one round.
SMALL = {
    "data": {"dataset": "synthetic", "clients": 4,
             "options": {"dim": 6, "train_size": 60, "test_size": 20, "num_classes": 3}},
    "model": {"name": "mlp", "options": {"hidden": [8]}},
    "topology": {"name": "ring"},
    "algorithm": {"name": "dfedavg"},
    "train": {"rounds": 1, "local_steps": 1, "batch_size": 8, "lr": 0.1},
}

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def with_figures(test):
    """Decorator: let this test write the real per-run figures."""
    test.real_figures = True
    return test


def tiny(*overrides: str):
    return load_config(TINY, list(overrides))


def without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in rows]


def assert_png(path: Path) -> None:
    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000


class Interrupt:
    """Callback raising KeyboardInterrupt after round ``k`` (1-based)."""

    def __init__(self, k: int):
        self.k = k

    def __call__(self, runner, t, row):
        if t + 1 == self.k:
            raise KeyboardInterrupt


def stopped_and_resumed(config: dict, k: int = 2):
    """The state of ``config``'s run stopped after round ``k`` (in memory, no run directory),
    and a fresh Runner resumed from it and run to the end: ``(saved state, resumed)``."""
    first = Runner(load_config(config))
    with torch.no_grad():
        for t in range(k):
            first.run_round(t)
            first.round = t + 1
    saved = first.state_dict()
    resumed = Runner(load_config(config))
    resumed.load_state_dict(saved)
    resumed.run()
    return saved, resumed


def interrupted_and_resumed(config: dict, folder: Path, k: int = 3):
    """Outcomes of ``config`` run straight through (``folder/ref``) and interrupted after
    round ``k`` then resumed (``folder/run``)."""
    reference = execute(prepare_fresh(load_config(config), folder / "ref"), warn=print)
    with pytest.raises(KeyboardInterrupt):
        execute(prepare_fresh(load_config(config), folder / "run"), [Interrupt(k)],
                warn=print)
    return reference, execute(prepare_resume(folder / "run"), warn=print)


def gossipfl(capsys, *args: str) -> tuple[int, str, str]:
    """``gossipfl ARGS`` in this process: (exit status, stdout, stderr)."""
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


#: The environment of a child process that imports this checkout's gossipfl.
SRC_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}


def one_sentence(capsys, *args: str, status: int = 2) -> str:
    """Run the command; assert one error line, the exit status and no traceback."""
    code, _, err = gossipfl(capsys, *args)
    assert code == status, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err


def make_run(root: Path, name: str, **sections) -> Path:
    """A finished tiny run (2 rounds, no figures) in ``root/name``."""
    config = {**TINY, "train": {**TINY["train"], "rounds": 2}, **sections}
    (root / f"{name}.yaml").write_text(yaml.safe_dump(config))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("gossipfl.results.lifecycle.write_run_figures", lambda run_dir: [])
        assert cli.main(["run", str(root / f"{name}.yaml"), "--out", str(root),
                         "--name", name, "--quiet"]) == 0
    return root / name


# --------------------------------------------------------------------------------------------
# A full disk, injected
# --------------------------------------------------------------------------------------------
def disk_full_on(monkeypatch, *names: str, after: int | None = None) -> None:
    """Writing a file with one of ``names`` fails with ENOSPC: at once, or (``after``) once
    that many bytes are written, inside whatever writes them (torch.save's streaming)."""
    real = gossipfl_io._write_synced

    def write(path, fd, data):
        if path.name not in names:
            return real(path, fd, data)
        if after is None:
            os.close(fd)
            raise OSError(errno.ENOSPC, "No space left on device")
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(gossipfl_io, "_open_temp", lambda fd: FullFile(fd, after))
            return real(path, fd, data)

    monkeypatch.setattr(gossipfl_io, "_write_synced", write)


class FullFile:
    """An open file on a disk that fills up after ``room`` bytes."""

    def __init__(self, fd: int, room: int):
        self.handle, self.room = os.fdopen(fd, "wb"), room

    def write(self, data) -> int:
        size = len(memoryview(data).cast("B"))
        if size > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= size
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def no_temp_files(folder: Path) -> bool:
    return not list(folder.glob(".*.tmp"))
