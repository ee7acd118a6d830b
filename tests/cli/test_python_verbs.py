"""The CLI's verbs from Python (issue 28): gossipfl.sweep, report, stability, analyze and fetch
return objects and raise GossipflError; results load as DataFrames (load_run, load_study,
Result.metrics_frame); figures come from those objects; pandas is an optional extra; the
example notebook runs."""

from __future__ import annotations

import builtins
import json
import math
from pathlib import Path

import pytest

import gossipfl
from gossipfl.errors import GossipflError

pd = pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebooks" / "study.ipynb"


def tiny_base() -> dict:
    return {
        "data": {"dataset": "synthetic", "clients": 6, "partition": "iid",
                 "options": {"num_classes": 3, "dim": 8, "train_size": 240, "test_size": 120,
                             "seed": 1}},
        "model": {"name": "mlp", "options": {"hidden": [8]}},
        "topology": {"name": "ring"},
        "train": {"rounds": 3, "local_steps": 2, "batch_size": 16, "lr": 0.1},
        "eval": {"local_subset": 60},
        "output": {"checkpoint_every": 0},
    }


def tiny_study(**changes) -> dict:
    study = {"name": "tiny", "base": tiny_base(),
             "grid": {"algorithm": [{"name": "dfedavg"}, {"name": "dfedavgm",
                                                          "momentum": 0.9}]},
             "seeds": [0, 1], "targets": [0.3]}
    study.update(changes)
    return study


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One tiny study (2 algorithms x 2 seeds on synthetic data), run once for the module."""
    out = tmp_path_factory.mktemp("sweep")
    return gossipfl.sweep(tiny_study(), out=out)


# --------------------------------------------------------------------------------------------
# sweep
# --------------------------------------------------------------------------------------------
def test_sweep_returns_the_study_with_its_runs_and_table(swept, capsys):
    assert swept.path.name == "tiny" and (swept.path / "table.csv").is_file()
    assert sorted(swept.outcomes) == ["dfedavg-seed0", "dfedavg-seed1", "dfedavgm-seed0",
                                      "dfedavgm-seed1"]
    assert set(swept.outcomes.values()) == {"ran"} and swept.failed == {}
    assert swept.report.markdown == (swept.path / "table.md").read_text()
    assert [row.label for row in swept.report.table] == ["dfedavg", "dfedavgm"]
    assert capsys.readouterr() == ("", "")  # nothing printed unless asked


@pytest.mark.slow
def test_sweep_again_skips_finished_runs_and_logs_when_asked(swept):
    lines = []
    again = gossipfl.sweep(tiny_study(), out=swept.path.parent, log=lines.append)
    assert set(again.outcomes.values()) == {"skipped"}
    assert any("already done" in line for line in lines)
    pd.testing.assert_frame_equal(again.table, swept.table)


def test_sweep_mistakes_raise_one_sentence(tmp_path):
    with pytest.raises(GossipflError, match=r"study\.grdi: unknown key"):
        gossipfl.sweep({**tiny_study(), "grdi": {}}, out=tmp_path)
    with pytest.raises(GossipflError, match="train.lr"):
        gossipfl.sweep(tiny_study(), overrides=["train.lr=-1"], out=tmp_path)
    assert not (tmp_path / "tiny").exists()


def test_sweep_from_a_yaml_path(tmp_path):
    import yaml

    study = tiny_study(seeds=[0], grid={"algorithm": [{"name": "dfedavg"}]})
    study["base"]["train"]["rounds"] = 1
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study))
    result = gossipfl.sweep(tmp_path / "s.yaml", out=tmp_path / "runs")
    assert list(result.runs["run"]) == ["dfedavg-seed0"]


# --------------------------------------------------------------------------------------------
# DataFrames
# --------------------------------------------------------------------------------------------
def test_load_run_metrics_equal_metrics_csv(swept):
    run_dir = swept.path / "dfedavgm-seed1"
    run = gossipfl.load_run(run_dir)
    expected = pd.read_csv(run_dir / "metrics.csv")
    pd.testing.assert_frame_equal(run.metrics, expected, check_dtype=False)
    assert list(run.metrics["round"]) == [1, 2, 3]
    assert run.config["algorithm"] == {"name": "dfedavgm", "momentum": 0.9} or \
        run.config["algorithm"]["name"] == "dfedavgm"
    assert run.summary == json.loads((run_dir / "summary.json").read_text())
    assert run.summary["status"] == "finished"


def test_load_run_mistakes(tmp_path, swept):
    with pytest.raises(GossipflError, match="not a run directory"):
        gossipfl.load_run(tmp_path)
    broken = tmp_path / "broken"
    import shutil

    shutil.copytree(swept.path / "dfedavg-seed0", broken)
    (broken / "metrics.csv").write_text("")
    with pytest.raises(GossipflError, match=r"metrics\.csv is empty"):
        gossipfl.load_run(broken)


def test_load_study_runs_frame(swept):
    study = gossipfl.load_study(swept.path)
    runs = study.runs
    assert len(runs) == 4
    for column in ("label", "seed", "status", "run", "metric", "final", "best", "best_round",
                   "rounds", "bytes_total", "algorithm.name", "train.lr", "data.clients",
                   "model.options.hidden"):
        assert column in runs.columns, column
    assert set(runs["label"]) == {"dfedavg", "dfedavgm"}
    assert sorted(runs["seed"]) == [0, 0, 1, 1]
    assert set(runs["status"]) == {"finished"} and set(runs["rounds"]) == {3}
    assert runs.loc[runs["label"] == "dfedavgm", "algorithm.momentum"].tolist() == [0.9, 0.9]
    for _, row in runs.iterrows():
        csv = pd.read_csv(swept.path / row["run"] / "metrics.csv")
        assert row["final"] == pytest.approx(csv["test_acc"].iloc[-1])
        assert row["best"] == pytest.approx(csv["test_acc"].max())
        assert row["bytes_total"] == csv["bytes_total"].iloc[-1]
    assert "seed" not in [c for c in runs.columns if c.startswith("output.")]


def test_load_study_metrics_frame_is_every_run_long(swept):
    metrics = gossipfl.load_study(swept.path).metrics
    assert list(metrics.columns[:4]) == ["label", "seed", "run", "round"]
    assert len(metrics) == 4 * 3
    one = metrics[metrics["run"] == "dfedavg-seed1"].drop(columns=["label", "seed", "run"])
    expected = pd.read_csv(swept.path / "dfedavg-seed1" / "metrics.csv")
    pd.testing.assert_frame_equal(one.reset_index(drop=True), expected, check_dtype=False)


def test_load_study_table_equals_table_csv(swept):
    table = gossipfl.load_study(swept.path).table
    expected = pd.read_csv(swept.path / "table.csv")
    pd.testing.assert_frame_equal(table, expected)
    assert {"final_mean", "final_std", "best_mean", "best_std", "rounds_to_0.3_mean"} \
        <= set(table.columns)
    assert table["final_mean"].dtype.kind == "f"
    runs = swept.runs
    mean = runs.loc[runs["label"] == "dfedavg", "final"].mean()
    std = runs.loc[runs["label"] == "dfedavg", "final"].std()
    row = table.set_index("configuration").loc["dfedavg"]
    assert row["final_mean"] == pytest.approx(mean) and row["final_std"] == pytest.approx(std)


def test_load_study_other_targets_and_metric(swept):
    study = gossipfl.load_study(swept.path, targets=["40%", 0.5], metric="local_acc_mean")
    assert {"rounds_to_0.4_mean", "rounds_to_0.5_mean"} <= set(study.table.columns)
    assert set(study.table["metric"]) == {"local_acc_mean"}
    with pytest.raises(GossipflError, match="not an accuracy"):
        gossipfl.load_study(swept.path, targets=[1.5])
    with pytest.raises(GossipflError, match="metric: unknown value 'acc'"):
        gossipfl.load_study(swept.path, metric="acc")


def test_result_metrics_frame():
    result = gossipfl.run({**tiny_base(), "train": {**tiny_base()["train"], "rounds": 2}})
    frame = result.metrics_frame()
    assert list(frame["round"]) == [1, 2]
    assert frame["test_acc"].tolist() == result.column("test_acc")
    assert frame.columns[0] == "round"


@pytest.mark.parametrize("call, what", [
    (lambda path: gossipfl.load_study(path).table, "gossipfl.load_study(...).table"),
    (lambda path: gossipfl.load_study(path).runs, "gossipfl.load_study(...).runs"),
    (lambda path: gossipfl.load_run(Path(path) / "dfedavg-seed0").metrics,
     "gossipfl.load_run(...).metrics"),
])
def test_missing_pandas_is_one_sentence(swept, monkeypatch, call, what):
    real_import = builtins.__import__

    def no_pandas(name, *args, **kwargs):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(ImportError) as info:
        call(swept.path)
    assert str(info.value) == f"{what} needs pandas: pip install 'gossipfl[pandas]'"
    assert isinstance(info.value, GossipflError)  # the CLI's one-sentence handling applies


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------
def test_study_and_run_plots_are_figures(swept):
    from matplotlib.figure import Figure

    fig = swept.plot("test_acc", x="round")
    assert isinstance(fig, Figure)
    assert fig._repr_png_().startswith(b"\x89PNG")  # Jupyter shows it without pyplot
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["dfedavg", "dfedavgm"]
    x, y = ax.get_lines()[0].get_data()
    metrics = swept.metrics
    mean = metrics[metrics["label"] == "dfedavg"].groupby("round")["test_acc"].mean()
    assert list(x) == [1, 2, 3] and y == pytest.approx(100 * mean.to_numpy())
    bytes_fig = swept.plot("test_acc", x="bytes_total")
    assert "bytes sent" in bytes_fig.axes[0].get_xlabel()
    assert swept.plot("consensus").axes[0].get_yscale() == "log"
    assert isinstance(swept.plot(), Figure)
    run = gossipfl.load_run(swept.path / "dfedavg-seed0")
    assert isinstance(run.plot(x="bytes_total"), Figure)
    with pytest.raises(GossipflError, match="no run records both"):
        swept.plot("nothing")


# --------------------------------------------------------------------------------------------
# report, stability, analyze, fetch
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_report_writes_and_returns_the_report(swept, tmp_path, capsys):
    result = gossipfl.report([swept.path], targets=["30%", 0.4], out=tmp_path / "rep")
    assert result.targets == [0.3, 0.4]
    assert [p.name for p in result.files[:2]] == ["table.md", "table.csv"]
    assert (tmp_path / "rep" / "table.md").read_text() == result.markdown
    assert [row.label for row in result.table] == ["dfedavg", "dfedavgm"]
    assert capsys.readouterr() == ("", "")
    default = gossipfl.report(swept.path / "dfedavg-seed0")  # out: the one path given
    assert default.files[0] == swept.path / "dfedavg-seed0" / "table.md"
    with pytest.raises(GossipflError, match="not an accuracy"):
        gossipfl.report(swept.path, targets=["170%"], out=tmp_path / "x")
    with pytest.raises(GossipflError, match="is not a directory"):
        gossipfl.report(tmp_path / "missing", out=tmp_path / "y")


def test_report_from_a_study_folder_uses_its_targets(swept, tmp_path):
    result = gossipfl.report(swept.path, out=tmp_path / "rep")
    assert result.targets == [0.3]
    assert (tmp_path / "rep" / "table.csv").read_text() == \
        (swept.path / "table.csv").read_text()


@pytest.mark.slow
def test_stability_from_python(tmp_path, capsys):
    config = {**tiny_base(), "train": {**tiny_base()["train"], "rounds": 2}}
    outcome = gossipfl.stability(config, perturb="sample", out=tmp_path / "stab")
    assert capsys.readouterr() == ("", "")
    assert (tmp_path / "stab" / "stability.csv").is_file()
    frame = outcome.frame
    assert list(frame["round"]) == [1, 2]
    expected = pd.read_csv(tmp_path / "stab" / "stability.csv")
    pd.testing.assert_frame_equal(frame, expected, check_dtype=False)
    with pytest.raises(GossipflError, match="perturb"):
        gossipfl.stability(config, perturb="everything", out=tmp_path / "s2")


@pytest.mark.slow
def test_analyze_from_python(swept):
    from gossipfl.analysis.analyze import analyze

    assert gossipfl.analyze is analyze  # the function gossipfl analyze calls
    result = gossipfl.analyze(swept.path / "dfedavg-seed1", top_k=1, samples=50)
    eig = result["hessian"]["models"]["average"]["eigenvalues"]
    assert len(eig) == 1 and math.isfinite(eig[0])
    with pytest.raises(GossipflError, match="--models"):
        gossipfl.analyze(swept.path / "dfedavg-seed1", models="some")


def test_fetch_from_python(tmp_path):
    dataset = gossipfl.fetch("synthetic")
    assert dataset.num_classes > 0
    with pytest.raises(GossipflError, match="fashion_mnist"):
        gossipfl.fetch("fashion_mnist", root=tmp_path, download=False)
    with pytest.raises(GossipflError, match="unknown value 'fashion'"):
        gossipfl.fetch("fashion")


def test_cli_verbs_call_the_python_functions(swept, tmp_path, monkeypatch, capsys):
    """The CLI is a thin layer: each verb calls gossipfl.api's function."""
    from gossipfl import api, cli

    seen = {}
    real_report, real_fetch = api.report, api.fetch

    def report(*args, **kwargs):
        seen["report"] = kwargs
        return real_report(*args, **kwargs)

    def fetch(*args, **kwargs):
        seen["fetch"] = kwargs
        return real_fetch(*args, **kwargs)

    monkeypatch.setattr(api, "report", report)
    monkeypatch.setattr(api, "fetch", fetch)
    assert cli.main(["report", str(swept.path), "--target", "70%", "--out",
                     str(tmp_path / "r")]) == 0
    assert seen["report"]["targets"] == ["70%"]
    assert "written to" in capsys.readouterr().out
    assert cli.main(["fetch", "synthetic"]) == 0
    assert seen["fetch"] == {"root": None, "download": True, "verify": True}


# --------------------------------------------------------------------------------------------
# The package namespace and the example notebook
# --------------------------------------------------------------------------------------------
def test_importing_the_sweep_module_keeps_the_function():
    import gossipfl.studies.sweep  # a submodule named like the function

    assert callable(gossipfl.sweep) and gossipfl.sweep.__module__ == "gossipfl.api"
    from gossipfl.studies.sweep import run_study

    assert callable(run_study)


def _fashion_mnist_available() -> bool:
    from gossipfl.data.datasets import IDX_FILES, data_root, search_folders

    return any(all((folder / stem).is_file() or (folder / f"{stem}.gz").is_file()
                   for stem in IDX_FILES.values())
               for folder in search_folders("fashion_mnist", data_root()))


def notebook_cells(path: Path) -> list[str]:
    """The code cells of an nbformat-4 notebook, each checked to be plain Python (no
    IPython magics or shell escapes, so it runs the same in Jupyter and here)."""
    notebook = json.loads(path.read_text())
    assert notebook["nbformat"] == 4
    cells = []
    for cell in notebook["cells"]:
        assert cell["cell_type"] in ("code", "markdown")
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            assert not cell["outputs"], "commit the notebook without outputs"
            assert not any(line.lstrip().startswith(("%", "!")) for line in source.splitlines())
            cells.append(source)
    return cells


def test_notebook_is_valid_json_and_plain_python():
    cells = notebook_cells(NOTEBOOK)
    assert len(cells) >= 4
    for source in cells:
        compile(source, str(NOTEBOOK), "exec")


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.skipif(not _fashion_mnist_available(), reason="Fashion-MNIST is not on this machine")
def test_notebook_runs(tmp_path, monkeypatch):
    """Every code cell, in order, in one namespace (what a kernel does), in a fresh folder;
    the last expression of a cell is evaluated as Jupyter displays it."""
    import ast

    from matplotlib.figure import Figure

    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    shown = []
    for source in notebook_cells(NOTEBOOK):
        tree = ast.parse(source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, str(NOTEBOOK), "exec"), namespace)  # noqa: S102 (our notebook)
        if last is not None:
            shown.append(eval(compile(ast.Expression(last.value), str(NOTEBOOK), "eval"),
                              namespace))
    assert isinstance(shown[-1], Figure)
    assert any(isinstance(value, pd.DataFrame) for value in shown)
    table = namespace["table"]
    assert list(table["configuration"]) == ["dfedavg", "dfedavgm"]
    assert set(namespace["runs"]["status"]) == {"finished"} and len(namespace["runs"]) == 4
    assert (tmp_path / "runs" / "notebook_study" / "test_acc_vs_bytes.png").is_file()
    assert (tmp_path / "runs" / "notebook_study" / "table.csv").is_file()
