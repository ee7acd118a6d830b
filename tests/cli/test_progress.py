"""Progress wherever work takes long (issue 52): a bar over a run's rounds for
``gossipfl.run()`` and every verb that trains, "evaluating" while the models are measured, a
bar over the runs of ``sweep --jobs`` naming the running ones with their round; on stderr,
drawn by ``tqdm.auto`` (a widget in a notebook); ``quiet=True`` shows none."""

from __future__ import annotations

import pytest
import yaml

import gossipfl
from gossipfl.output import progress
from tests.helpers import TINY
from tests.helpers import gossipfl as command


@pytest.fixture
def at_once(monkeypatch):
    """Bars shown from the start (they wait a second otherwise: tiny runs would show none)."""
    monkeypatch.setattr(progress, "DELAY", 0)


def frames(err: str) -> list[str]:
    """What a bar wrote, frame by frame (tqdm redraws a line with \\r)."""
    return [line.strip() for line in err.replace("\r", "\n").splitlines() if line.strip()]


def test_run_shows_a_bar_over_its_rounds_on_stderr(at_once, capsys):
    gossipfl.run(TINY)
    out, err = capsys.readouterr()
    assert out == ""
    shown = frames(err)
    assert any("tiny: 100%" in f and "6/6" in f and "acc " in f for f in shown), shown
    assert any("evaluating" in f for f in shown), shown


def test_quiet_shows_nothing(at_once, capsys):
    gossipfl.run(TINY, quiet=True)
    assert capsys.readouterr() == ("", "")


def test_a_short_run_shows_no_bar_by_default(capsys):
    """Work shorter than progress.DELAY (a second) prints nothing."""
    gossipfl.run({**TINY, "train": {**TINY["train"], "rounds": 1}})
    assert capsys.readouterr().err == ""


def test_the_bar_is_tqdm_auto():
    """tqdm.auto: a widget in a notebook (with ipywidgets), text in a terminal."""
    from tqdm.auto import tqdm

    bar = progress.StudyBar(1, disable=True)
    assert isinstance(bar.bar, tqdm)


def test_a_callback_is_told_before_each_evaluation():
    """Runner.step calls ``evaluating(runner, t)`` before it measures round t, then the
    callback with the row: the bar says "evaluating" while an evaluation runs."""
    seen = []

    class Watch:
        def evaluating(self, runner, t):
            seen.append(("evaluating", t, len(runner.rows)))

        def __call__(self, runner, t, row):
            seen.append(("row", t, len(runner.rows)))

    config = {**TINY, "train": {**TINY["train"], "rounds": 4}, "eval": {"every": 2}}
    gossipfl.run(config, callbacks=[Watch()], quiet=True)
    assert seen == [("row", 0, 0), ("evaluating", 1, 0), ("row", 1, 1),
                    ("row", 2, 1), ("evaluating", 3, 1), ("row", 3, 2)]


def test_the_study_bar_names_the_running_runs_with_their_round():
    bar = progress.StudyBar(3, disable=True)
    bar.started("a", 30)
    bar.started("b", 30)
    bar.round("a", 12, 30)
    assert bar.text() == "running 2 (a 12/30, b 0/30), left 1"
    bar.finished("a")
    assert bar.text() == "running 1 (b 0/30), left 1" and bar.done == 1


def test_sweep_and_stability_show_a_bar_per_run(at_once, tmp_path, capsys):
    study = {"name": "s", "base": TINY, "grid": {"train.lr": [0.1, 0.05]}, "seeds": [0]}
    gossipfl.sweep(study, out=tmp_path)
    shown = frames(capsys.readouterr().err)
    for run in ("lr_0.1-seed0", "lr_0.05-seed0"):
        assert any(f.startswith(f"{run}: 100%") for f in shown), shown
    gossipfl.sweep(study, out=tmp_path / "again", quiet=True)
    assert capsys.readouterr().err == ""
    gossipfl.stability(TINY, out=tmp_path / "stab")
    assert any(f.startswith("tiny: 100%") for f in frames(capsys.readouterr().err))


@pytest.mark.slow
def test_sweep_jobs_shows_runs_done_running_left_and_each_runs_round(at_once, tmp_path,
                                                                     capsys, monkeypatch):
    import os
    from pathlib import Path

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path.cwd() / "src"),
                                                      os.environ.get("PYTHONPATH", "")]))
    base = {**TINY, "train": {**TINY["train"], "rounds": 3}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "par", "base": base, "seeds": [0],
                                    "grid": {"train.lr": [0.1, 0.05, 0.02]}}))
    code, out, err = command(capsys, "sweep", str(path), "--out", str(tmp_path), "--jobs", "2")
    assert code == 0, err
    shown = frames(err)
    assert any("runs:" in f and "running 2 (" in f and "left 1" in f for f in shown), shown
    for run in ("lr_0.1-seed0", "lr_0.05-seed0", "lr_0.02-seed0"):
        assert any(f"{run} 3/3" in f for f in shown), (run, shown)  # the worker's last round
    assert any("3/3" in f and "running 0, left 0" in f for f in shown), shown
    assert "[3/3]" in out  # the log lines still go to stdout


def test_analyze_shows_its_hessian_vector_products_and_landscape_batches(at_once, tmp_path,
                                                                         capsys):
    from tests.helpers import make_run

    run = make_run(tmp_path, "r")
    capsys.readouterr()
    result = gossipfl.analyze(run, hessian=True, top_k=2, landscape="2d", grid=3, samples=50)
    shown = frames(capsys.readouterr().err)
    calls = result["hessian"]["eigen"]["hessian_vector_products"]  # 1 model: 1 product a call
    assert any(f.startswith(f"Hessian-vector products: {calls}call") for f in shown), shown
    assert any(f.startswith("landscape 2d: ") for f in shown), shown
    gossipfl.analyze(run, top_k=1, quiet=True)
    assert capsys.readouterr().err == ""
