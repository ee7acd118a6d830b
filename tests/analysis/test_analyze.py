"""``gossipfl analyze`` and ``gossipfl.analysis.analyze`` on real (tiny) run directories."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from gossipfl import cli
from gossipfl.analysis import analysis_columns, analyze, generalization_gap, load_run_models
from gossipfl.analysis.columns import train_subset
from gossipfl.analysis.write import read_csv
from gossipfl.errors import GossipflError
from gossipfl.results.lifecycle import prepare_resume
from tests.helpers import TINY, make_run
from tests.hessian_cases import dense_hessian

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("analyze")
    return {"dfedavg": make_run(root, "dfedavg"),
            "fedavg": make_run(root, "fedavg", algorithm={"name": "fedavg",
                                                          "participation": 0.5})}


def analyze_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["analyze", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_loads_the_checkpoint_models(runs):
    run = load_run_models(runs["dfedavg"])
    state = torch.load(runs["dfedavg"] / "checkpoint.pt", weights_only=True)
    x = state["runner"]["algorithm"]["x"]
    assert run.round == 2 and run.local.shape == x.shape == (4, run.average.shape[0])
    torch.testing.assert_close(run.average, x.mean(0))
    server = load_run_models(runs["fedavg"])
    assert server.local is None and server.average.dim() == 1


@pytest.mark.slow
def test_cli_hessian_trace_all_models(runs, capsys):
    run_dir = runs["dfedavg"]
    code, out, err = analyze_cli(capsys, run_dir, "--top-k", "2", "--trace", "--models", "all",
                                 "--samples", "50")
    assert code == 0, err
    report = json.loads((run_dir / "analysis" / "hessian.json").read_text())
    assert list(report["models"]) == ["average", "client0", "client1", "client2", "client3"]
    assert report["samples"] == 50 and report["round"] == 2 and report["hvp_mode"] == "batched"
    assert report["eigen"]["tol"] == 1e-2 and report["eigen"]["max_iter"] == 100
    avg = report["models"]["average"]
    assert len(avg["eigenvalues"]) == 2 and len(avg["iterations"]) == 2
    assert abs(avg["eigenvalues"][0]) >= abs(avg["eigenvalues"][1])
    assert avg["trace"] > 0 and avg["trace_std_error"] >= 0
    assert report["trace"]["iterations"] >= 10
    rows = read_csv(run_dir / "analysis" / "hessian.csv")
    assert rows[0]["model"] == "average" and float(rows[0]["eigenvalue_1"]) == \
        avg["eigenvalues"][0]
    assert f"{avg['eigenvalues'][0]:.4g}" in out and "hessian.json" in out
    columns = analysis_columns(run_dir)
    assert columns["top_eigenvalue"] == avg["eigenvalues"][0]
    assert columns["trace"] == avg["trace"]
    assert set(columns) == {"top_eigenvalue", "trace", "top_eigenvalue_local_mean",
                            "trace_local_mean"}


@pytest.mark.slow
def test_top_eigenvalue_matches_a_direct_computation(runs):
    """What analyze reports is the power iteration on this run's average model and data."""
    result = analyze(runs["dfedavg"], samples=40, tol=1e-8, max_iter=500, seed=3)
    run = load_run_models(runs["dfedavg"])
    from gossipfl.analysis.models import analysis_samples

    inputs, targets = analysis_samples(run.dataset, "train", 40, seed=3)
    dense = dense_hessian(run.model.double(), run.average.double(), inputs.double(), targets)
    w = np.linalg.eigvalsh(dense.numpy())
    top = result["hessian"]["models"]["average"]["eigenvalues"][0]
    np.testing.assert_allclose(top, w[np.argmax(np.abs(w))], rtol=1e-4)


@pytest.mark.slow
def test_same_seed_same_numbers(runs):
    a = analyze(runs["dfedavg"], trace=True, samples=30, trace_max_iter=12, seed=1)
    b = analyze(runs["dfedavg"], trace=True, samples=30, trace_max_iter=12, seed=1)
    assert a["hessian"]["models"] == b["hessian"]["models"]


@pytest.mark.slow
def test_cli_landscapes(runs, capsys):
    run_dir = runs["dfedavg"]
    code, _, err = analyze_cli(capsys, run_dir, "--landscape", "1d", "--models", "local",
                               "--other", runs["fedavg"], "--grid", "5", "--samples", "40")
    assert code == 0, err
    rows = read_csv(run_dir / "analysis" / "landscape1d.csv")
    ends = sorted({r["end"] for r in rows})
    assert ends == ["client0", "client1", "client2", "client3", "other:fedavg"]
    at_zero = {float(r["loss"]) for r in rows if float(r["alpha"]) == 0.0}
    assert len(at_zero) == 1  # every line starts at the average model
    assert (run_dir / "analysis" / "landscape1d.png").read_bytes()[:8] == PNG_MAGIC
    code, out, err = analyze_cli(capsys, run_dir, "--landscape", "2d", "--grid", "3",
                                 "--samples", "40")
    assert code == 0, err
    rows = read_csv(run_dir / "analysis" / "landscape2d.csv")
    assert len(rows) == 9 and {r["model"] for r in rows} == {"average"}
    center = [float(r["loss"]) for r in rows if float(r["a"]) == 0 and float(r["b"]) == 0]
    assert center == pytest.approx(list(at_zero), rel=1e-6)  # same model, same samples
    assert (run_dir / "analysis" / "landscape2d_average.png").read_bytes()[:8] == PNG_MAGIC
    info = json.loads((run_dir / "analysis" / "landscape2d.json").read_text())
    assert info["points"] == 9 and info["seconds_per_grid"] >= 0
    assert "landscape2d" in out


def test_centralized_run_has_only_the_server_model(runs, capsys):
    code, _, err = analyze_cli(capsys, runs["fedavg"], "--models", "all", "--samples", "20")
    assert code == 0, err
    report = json.loads((runs["fedavg"] / "analysis" / "hessian.json").read_text())
    assert list(report["models"]) == ["average"]
    code, _, err = analyze_cli(capsys, runs["fedavg"], "--models", "local")
    assert code == 2 and "--models" in err and "centralized" in err


@pytest.mark.parametrize("args, names", [
    (["--top-k", "0"], "--top-k"),
    (["--samples", "0"], "--samples"),
    (["--models", "everyone"], "--models"),
    (["--data", "valid"], "--data"),
    (["--landscape", "3d"], "--landscape"),
    (["--grid", "1"], "--grid"),
    (["--round", "7"], "--round"),
    (["--other", "."], "--other"),
    (["--other", "no-such-run", "--landscape", "1d"], "--other"),  # it named RUN_DIR
    (["--landscape", "1d"], "--landscape"),
])
def test_bad_flags_exit_2_with_one_sentence(runs, capsys, args, names):
    code, out, err = analyze_cli(capsys, runs["dfedavg"], *args)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {names}") and err.count("\n") == 1, err


def test_bad_run_directories(tmp_path, capsys):
    code, _, err = analyze_cli(capsys, tmp_path / "missing")
    assert code == 2 and "is not a directory" in err
    code, _, err = analyze_cli(capsys, tmp_path)
    assert code == 2 and "not a run directory" in err
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(TINY))
    code, _, err = analyze_cli(capsys, tmp_path)
    assert code == 2 and "no checkpoint.pt" in err and "no model" in err
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    code, _, err = analyze_cli(capsys, tmp_path)
    assert code == 2 and "cannot be read" in err


def test_a_config_changed_after_the_checkpoint_is_refused_as_resume_refuses_it(tmp_path,
                                                                               capsys):
    """analyze used to partition the data with an edited ``data.clients`` in silence."""
    run = make_run(tmp_path, "run")
    capsys.readouterr()
    config = run / "config.yaml"
    original = config.read_text()
    edited = yaml.safe_load(original)
    edited["data"]["clients"] = 5
    config.write_text(yaml.safe_dump(edited))
    code, out, err = analyze_cli(capsys, run)
    assert code == 2 and out == "" and err == (
        f"error: RUN_DIR: '{config}' was changed after the checkpoint was written; restore "
        f"it or start a new run.\n")
    assert not (run / "analysis").exists()
    with pytest.raises(GossipflError) as info:  # the same check, the same words
        prepare_resume(run)
    assert f"error: {info.value}\n" == err.replace("RUN_DIR", "--resume")
    config.write_text(original)
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    del state["config"]
    torch.save(state, run / "checkpoint.pt")
    code, _, err = analyze_cli(capsys, run)
    assert code == 2 and "is not a gossipfl checkpoint" in err


def test_a_plugin_given_to_the_command_is_not_a_changed_config(tmp_path, capsys):
    """``--plugin`` is added to every config read: config.yaml read back then listed it, and
    analyze (like --resume) called the untouched file changed."""
    run = make_run(tmp_path, "run")
    plugin = tmp_path / "unused_plugin.py"
    plugin.write_text("X = 1\n")
    capsys.readouterr()
    code, _, err = analyze_cli(capsys, run, "--plugin", plugin, "--samples", "20")
    assert code == 0, err
    prepare_resume(run, device=None).release()  # and the resume's check agrees
    from gossipfl import plugins

    with plugins.session([str(plugin)]):
        prepare_resume(run).release()


def test_analysis_columns_without_analysis(tmp_path):
    assert analysis_columns(tmp_path) == {}


def test_generalization_gap_is_train_minus_test():
    row = generalization_gap(train_acc=0.9, train_loss=0.3, test_acc=0.8, test_loss=0.5)
    assert row["gap_acc"] == pytest.approx(0.1) and row["gap_loss"] == pytest.approx(-0.2)
    assert row["train_acc"] == 0.9 and row["train_eval_loss"] == 0.3
    assert math.isnan(generalization_gap(math.nan, 0.1, math.nan, 0.2)["gap_acc"])
    pick = train_subset(100, 10, seed=0)
    assert len(pick) == 10 and np.all(np.diff(pick) > 0)
    assert np.array_equal(pick, train_subset(100, 10, seed=0))
    assert np.array_equal(train_subset(5, 10, seed=0), np.arange(5))
