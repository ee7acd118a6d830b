"""Reliability of ``report``, ``analyze``, ``stability`` and a study's ``analysis:`` section
(issue 24): every mistake is one sentence and exit status 2 before any work, nothing a user
has is overwritten, and tables never report wrong numbers silently."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from gossipfl import cli
from gossipfl.analysis import analyze
from gossipfl.errors import GossipflError
from gossipfl.results.reporting import Run, report
from gossipfl.studies.sweep import load_study
from tests.helpers import TINY, make_run

ROOT = os.geteuid() == 0  # root writes and reads every folder, whatever its mode


def gossipfl(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()  # what came before (make_run prints its run directory)
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def one_sentence(capsys, *args: str) -> str:
    """Run the command; assert exit status 2, one error line, no traceback, no output."""
    code, out, err = gossipfl(capsys, *args)
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert out == ""
    return err


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory) -> Path:
    """A tiny finished run with a 2-D landscape and a Hessian analysis already written."""
    run = make_run(tmp_path_factory.mktemp("reliable"), "run")
    assert cli.main(["analyze", str(run), "--landscape", "2d", "--grid", "3",
                     "--samples", "20"]) == 0
    analyze(run, samples=20, max_iter=5)
    return run


def snapshot(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run / "analysis").iterdir())}


# --------------------------------------------------------------------------------------------
# analyze: options out of range
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "message"), [
    (["--landscape", "2d", "--span", "inf"], "--span: must be a finite positive number, got inf."),
    (["--landscape", "2d", "--span", "nan"], "--span: must be a finite positive number, got nan."),
    (["--landscape", "2d", "--span", "-1"], "--span: must be a finite positive number"),
    (["--landscape", "2d", "--grid", "1000"], "--grid: must be at most 201 points per axis"),
    (["--landscape", "1d", "--models", "local", "--grid", "5000"], "--grid: must be at most"),
    (["--grid", "1"], "--grid: must be an integer >= 2, got 1."),
    (["--top-k", "0"], "--top-k: must be an integer >= 1, got 0."),
    (["--samples", "-3"], "--samples: must be an integer >= 1, got -3."),
    (["--tol", "nan"], "--tol: must be a number in (0, 1), got nan."),
    (["--tol", "0"], "--tol: must be a number in (0, 1)"),
    (["--trace", "--trace-tol", "inf"], "--trace-tol: must be a number in (0, 1)"),
    (["--max-iter", "0"], "--max-iter: must be an integer >= 1"),
    (["--trace", "--trace-max-iter", "-1"], "--trace-max-iter: must be an integer >= 1"),
    (["--batch-size", "0"], "--batch-size: must be an integer >= 1"),
    (["--round", "-1"], "--round: must be an integer >= 0"),
])
def test_analyze_option_out_of_range_is_one_sentence_and_overwrites_nothing(
        analyzed, capsys, args, message):
    before = snapshot(analyzed)
    err = one_sentence(capsys, "analyze", analyzed, *args)
    assert message in err
    assert snapshot(analyzed) == before


@pytest.mark.parametrize(("option", "value"), [
    ("span", float("inf")), ("tol", float("nan")), ("trace_tol", -0.1), ("max_iter", 2.5),
    ("batch_size", float("nan")), ("top_k", True), ("seed", 0.5), ("samples", 0),
])
def test_analyze_api_refuses_the_same_values(analyzed, option, value):
    before = snapshot(analyzed)
    with pytest.raises(GossipflError, match=f"^--{option.replace('_', '-')}: must be"):
        analyze(analyzed, landscape="2d", grid=3, **{option: value})
    assert snapshot(analyzed) == before


def test_top_k_larger_than_the_model_is_refused_before_computing(analyzed, capsys):
    P = 6 * 3 + 3  # the logistic model of TINY: 6 inputs, 3 classes
    err = one_sentence(capsys, "analyze", analyzed, "--top-k", str(P + 1))
    assert f"--top-k: must be at most P = {P} (the model's parameters), got {P + 1}." in err
    assert analyze(analyzed, top_k=P, samples=20, max_iter=3)["hessian"]["eigen"]["k"] == P


# --------------------------------------------------------------------------------------------
# analyze: nothing computed before an error, nothing half-written
# --------------------------------------------------------------------------------------------
def test_a_landscape_error_does_not_overwrite_the_hessian_already_there(analyzed, capsys):
    before = snapshot(analyzed)
    err = one_sentence(capsys, "analyze", analyzed, "--trace", "--landscape", "1d")
    assert "--landscape: '1d' interpolates from the average model" in err
    assert snapshot(analyzed) == before


def test_unwritable_output_is_refused_before_the_data_are_loaded(tmp_path, capsys,
                                                                 monkeypatch):
    run = make_run(tmp_path, "run")
    (run / "analysis").write_text("a file in the way")

    def no_loading(*args, **kwargs):
        raise AssertionError("the run was loaded before the output folder was checked")

    module = importlib.import_module("gossipfl.analysis.analyze")  # not the function
    monkeypatch.setattr(module, "load_run_models", no_loading)
    err = one_sentence(capsys, "analyze", run)
    assert f"RUN_DIR: cannot write to '{run / 'analysis'}'" in err and "is a file" in err


@pytest.mark.skipif(ROOT, reason="root can write into a read-only folder")
def test_read_only_run_directory_is_refused_before_computing(tmp_path, capsys):
    run = make_run(tmp_path, "run")
    run.chmod(0o555)
    try:
        err = one_sentence(capsys, "analyze", run)
    finally:
        run.chmod(0o755)
    assert "RUN_DIR: cannot write to" in err and "not writable" in err
    assert not (run / "analysis").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_analyze_on_cuda_without_cuda_is_one_sentence(analyzed, capsys):
    err = one_sentence(capsys, "analyze", analyzed, "--device", "cuda")
    assert err == "error: --device: 'cuda' was asked for but no CUDA device is available.\n"


def test_malformed_device_is_one_sentence(analyzed, capsys):
    err = one_sentence(capsys, "analyze", analyzed, "--device", "gpu")
    assert err == "error: --device: must be cpu, cuda, cuda:N or auto, got 'gpu'.\n"


@pytest.mark.slow
def test_analyze_an_lstm_run(tmp_path, capsys):
    """An LSTM has no forward-mode rule for its fused kernel: H·v falls back to a loop of
    reverse-over-reverse products, and the eigenvalue is the dense Hessian's."""
    from tests.dataset_files import write_shakespeare

    write_shakespeare(tmp_path, sizes=(4, 4, 4), test_size=2)
    run = make_run(tmp_path, "lstm",
                   data={"dataset": "shakespeare", "root": str(tmp_path),
                         "partition": "natural", "clients": 3, "options": {"max_samples": 4}},
                   model={"name": "lstm", "options": {"hidden": 4, "embed": 2, "layers": 1}},
                   train={**TINY["train"], "rounds": 1, "batch_size": 2})
    code, _, err = gossipfl(capsys, "analyze", run, "--samples", "2", "--max-iter", "2",
                              "--tol", "0.5")
    assert code == 0, err
    report_ = json.loads((run / "analysis" / "hessian.json").read_text())
    assert report_["hvp_mode"] == "loop"
    assert len(report_["models"]["average"]["eigenvalues"]) == 1


# --------------------------------------------------------------------------------------------
# A study's analysis section: checked when the study is loaded
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("analysis", "message"), [
    ({"top_k": 0}, "study.analysis.top_k: must be an integer >= 1, got 0."),
    ({"tol": float("nan")}, "study.analysis.tol: must be a number in (0, 1), got nan."),
    ({"samples": -5}, "study.analysis.samples: must be an integer >= 1, got -5."),
    ({"trace": "yes"}, "study.analysis.trace: must be true or false, got 'yes'."),
    ({"models": "every"}, "study.analysis.models: unknown value 'every'"),
    ({"batch_size": 0}, "study.analysis.batch_size: must be an integer >= 1, got 0."),
])
def test_study_analysis_is_checked_at_load(analysis, message):
    with pytest.raises(GossipflError) as info:
        load_study({"name": "s", "base": TINY, "analysis": analysis})
    assert str(info.value).startswith(message)


def test_sweep_with_a_bad_analysis_runs_nothing(tmp_path, capsys):
    study = {"name": "s", "base": TINY, "seeds": [0, 1], "analysis": {"top_k": -1}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    err = one_sentence(capsys, "sweep", tmp_path / "study.yaml", "--out", tmp_path / "out")
    assert "study.analysis.top_k:" in err and "--top-k" not in err
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    """A folder of two tiny runs of one configuration (seeds 1 and 2)."""
    root = tmp_path_factory.mktemp("study")
    for seed in (1, 2):
        make_run(root, f"seed{seed}", seed=seed)
    for name in ("seed1.yaml", "seed2.yaml"):
        (root / name).unlink()
    return root


def test_report_counts_a_run_given_twice_once(study, tmp_path, capsys):
    code, out, err = gossipfl(capsys, "report", study, study / "seed1",
                              study / ".." / study.name / "seed2", "--out", tmp_path)
    assert code == 0, err
    row = [line for line in out.splitlines() if line.startswith("| dfedavg")]
    assert row and row[0].split(" | ")[1] == "2"


def fake(algorithm: str, accs: list[float], personalized: list[float] | None = None) -> Run:
    rows = []
    for i, acc in enumerate(accs):
        row = {"round": i + 1, "test_acc": acc, "elapsed": float(i + 1), "bytes_total": 10}
        if personalized is not None:
            row["personalized_acc"] = personalized[i]
        rows.append(row)
    return Run(Path(f"/nowhere/{algorithm}"), {"algorithm": {"name": algorithm}, "seed": 0},
               rows, {"status": "finished"})


def test_report_ranks_each_configuration_by_its_own_accuracy(tmp_path):
    runs = [fake("dfedavg", [0.5, 0.8]), fake("dispfl", [0.3, 0.4], [0.6, 0.9])]
    result = report(runs, tmp_path, targets=[0.7])
    by_label = {row.label: row for row in result.table}
    assert by_label["dfedavg"].metric == "test_acc"
    assert by_label["dispfl"].metric == "personalized_acc"
    assert by_label["dfedavg"].to_target[0.7][0].mean == 2  # reached at round 2, not "never"
    assert by_label["dispfl"].final.mean == pytest.approx(0.9)
    lines = result.markdown.splitlines()
    assert "| metric |" in lines[0] and "final accuracy (%)" in lines[0]
    assert "| dfedavg | 1 | test_acc | 80.00 | 80.00 | 2 |" in result.markdown
    assert "| dispfl | 1 | personalized_acc | 90.00 | 90.00 | 2 |" in result.markdown
    assert "never" not in result.markdown
    csv_rows = (tmp_path / "table.csv").read_text().splitlines()[1:]
    assert [r.split(",")[3] for r in csv_rows] == ["test_acc", "personalized_acc"]


def test_report_forced_metric_says_when_a_row_lacks_it(tmp_path):
    runs = [fake("dfedavg", [0.5, 0.8]), fake("dispfl", [0.3, 0.4], [0.6, 0.9])]
    result = report(runs, tmp_path, metric="personalized_acc", targets=[0.7])
    assert "final personalized_acc (%)" in result.markdown.splitlines()[0]
    assert "| dfedavg | 1 | — | — | no personalized_acc |" in result.markdown
    assert "never" not in result.markdown
    # one kind of algorithm: one metric, no metric column
    single = report([fake("dfedavg", [0.5, 0.8])], tmp_path / "one", targets=[0.7])
    assert "| metric |" not in single.markdown and "final test_acc (%)" in single.markdown


@pytest.mark.represented
@pytest.mark.parametrize(("file", "content", "why"), [
    ("summary.json", "{not json", "summary.json is damaged (not JSON)"),
    ("summary.json", "[1, 2]", "summary.json is damaged (not a gossipfl summary)"),
    ("config.yaml", "- a list\n", "config.yaml cannot be read or is not a gossipfl config"),
    ("config.yaml", ": : :\n", "config.yaml cannot be read or is not a gossipfl config"),
])
def test_report_leaves_out_a_run_with_a_damaged_file(study, tmp_path, capsys, file, content,
                                                     why):
    import shutil

    folder = tmp_path / "study"
    shutil.copytree(study, folder)
    (folder / "seed2" / file).write_text(content)
    code, out, err = gossipfl(capsys, "report", folder, "--out", tmp_path / "rep")
    assert code == 0 and "Traceback" not in err
    assert f"warning: {folder / 'seed2' / file}" in err and why in err
    assert "| dfedavg | 1 |" in out
    err = one_sentence(capsys, "report", folder / "seed2", "--out", tmp_path / "rep2")
    assert why in err


def test_report_on_an_empty_folder_is_one_sentence(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    err = one_sentence(capsys, "report", tmp_path / "empty", "--out", tmp_path / "rep")
    assert "no run directories" in err


@pytest.mark.skipif(ROOT, reason="root reads every folder")
def test_report_on_an_unreadable_folder_is_one_sentence(tmp_path, capsys):
    folder = tmp_path / "closed"
    folder.mkdir()
    folder.chmod(0)
    try:
        err = one_sentence(capsys, "report", folder, "--out", tmp_path / "rep")
    finally:
        folder.chmod(0o755)
    assert f"report: cannot read the folder '{folder}'" in err


# --------------------------------------------------------------------------------------------
# stability
# --------------------------------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_stability_on_cuda_without_cuda_is_refused_before_the_data(tmp_path, capsys,
                                                                   monkeypatch):
    def no_data(*args, **kwargs):
        raise AssertionError("the data were loaded before the device was checked")

    monkeypatch.setattr("gossipfl.core.runner.build_data", no_data)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    err = one_sentence(capsys, "stability", tmp_path / "tiny.yaml", "--device", "cuda",
                       "--out", tmp_path / "out", "--quiet")
    assert "no CUDA device is available" in err
    assert not (tmp_path / "out").exists()


def test_a_summary_that_is_not_an_object_reads_as_unwritten(tmp_path):
    """A damaged summary.json holding valid JSON that is not an object (a list) is no status:
    a study retries the run instead of failing on it."""
    from gossipfl.results.rundir import RunDirectory

    run = RunDirectory.create(tmp_path / "r")
    (tmp_path / "r" / "summary.json").write_text("[1, 2]")
    assert run.read_summary() == {} and run.status() is None
