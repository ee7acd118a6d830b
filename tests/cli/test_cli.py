"""The gossipfl command: run, resume, bad input, sweep, report, list, topology, data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from gossipfl import cli
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.results.rundir import RunDirectory, metrics_from_csv
from tests.helpers import TINY, assert_png, gossipfl, one_sentence, with_figures, without_timing

ROOT = Path(__file__).resolve().parents[2]
GOSSIPFL = Path(sys.executable).with_name("gossipfl")


def read(root: Path, name: str) -> list[dict]:
    """metrics.csv of a run without its timing columns."""
    return without_timing(RunDirectory(root / name).read_metrics())


def run_dirs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "runs").glob("*")) if (root / "runs").exists() else []


# --------------------------------------------------------------------------------------------
# gossipfl run
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
@with_figures
def test_run_prints_summary_and_writes_run_directory(work, capsys, monkeypatch):
    monkeypatch.setattr("gossipfl.output.progress.DELAY", 0)  # the bar even for a run this short
    code, out, err = gossipfl(capsys, "run", "tiny.yaml", "--set", "train.lr=0.05")
    assert code == 0, err
    (path,) = run_dirs(work)
    assert path.name.startswith("tiny-")
    assert f"run directory        {Path('runs') / path.name}" in out
    for key in ("final accuracy", "best accuracy", "at round", "time per round", "bytes sent",
                "figures"):
        assert key in out
    config = RunDirectory(path).read_config()
    assert config.train.lr == 0.05  # --set reached the resolved config
    rows = metrics_from_csv((path / "metrics.csv").read_text())
    assert f"{100 * rows[-1]['test_acc']:.2f} %" in out
    assert "6/6" in err  # the progress bar went to stderr


def test_run_out_is_the_parent_folder_as_for_sweep_and_name_the_runs_own(work, capsys):
    """One meaning of --out for run and sweep (issue 52): the folder the run's directory goes
    in; --name names that directory exactly (it must be free); without --name the run's
    directory is <name>-<timestamp>, as under output.dir."""
    code, out, _ = gossipfl(capsys, "run", "tiny.yaml", "--out", "results", "--quiet")
    (made,) = (work / "results").iterdir()
    assert code == 0 and out.strip() == str(Path("results") / made.name)
    assert made.name.startswith("tiny-") and (made / "metrics.csv").is_file()
    code, out, _ = gossipfl(capsys, "run", "tiny.yaml", "--out", "results", "--name", "mine",
                            "--quiet")
    assert code == 0 and out.strip() == str(Path("results") / "mine")
    assert yaml.safe_load((work / "results" / "mine" / "config.yaml").read_text())["name"] \
        == "mine"
    code, out, _ = gossipfl(capsys, "run", "tiny.yaml", "--name", "alone", "--quiet")
    assert code == 0 and out.strip() == str(Path("runs") / "alone")  # under output.dir
    code, _, err = gossipfl(capsys, "run", "tiny.yaml", "--out", "results", "--name", "mine")
    assert code == 2 and "--name: run directory 'results/mine' already exists" in err


@pytest.mark.parametrize("name", ["a/b", "..", "."])
def test_run_name_is_one_folder_name(work, capsys, name):
    err = one_sentence(capsys, "run", "tiny.yaml", "--name", name)
    assert f"--name: the name of the run's own folder (one name, without '/'), got '{name}'" \
        in err


def test_the_old_meaning_of_run_out_is_refused_with_a_hint(work, capsys):
    """--out naming a run directory (its old meaning: the run's own directory) is refused in
    one sentence, before any work, saying what to write instead."""
    assert gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "old", "--quiet")[0] == 0
    before = sorted(p.name for p in (work / "old").iterdir())
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", "old")
    assert err == ("error: --out: 'old' is a run directory, but --out is the folder a run's "
                   "directory goes in (as for gossipfl sweep); give --out PARENT --name NAME for "
                   "the folder PARENT/NAME, or --resume old to continue that run.\n")
    assert sorted(p.name for p in (work / "old").iterdir()) == before


def test_quickstart_is_the_example():
    example = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    assert example == cli.QUICKSTART
    config = load_config(cli.QUICKSTART)
    assert config.data.dataset == "fashion_mnist" and config.data.alpha == 0.3
    assert config.algorithm.name == "dfedavg" and config.topology.name in ("ring", "random_k")


def _fashion_mnist_available() -> bool:
    """The four IDX files are in one of the folders the loader searches (no download)."""
    from gossipfl.data.datasets import IDX_FILES, data_root, search_folders

    return any(all((folder / stem).is_file() or (folder / f"{stem}.gz").is_file()
                   for stem in IDX_FILES.values())
               for folder in search_folders("fashion_mnist", data_root()))


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.skipif(not _fashion_mnist_available(), reason="Fashion-MNIST is not on this machine")
@with_figures
def test_quickstart_runs_without_a_config(work, capsys):
    code, out, err = gossipfl(capsys, "run", "--set", "train.rounds=1", "--set",
                              "data.download=false", "--set", "eval.local_models=false")
    assert code == 0, err
    assert "finished quickstart (dfedavg on fashion_mnist, 20 clients, ring)" in out
    (path,) = run_dirs(work)
    rows = metrics_from_csv((path / "metrics.csv").read_text())
    assert len(rows) == 1 and rows[-1]["test_acc"] > 0.3  # learns from 10% chance level
    assert_png(path / "accuracy.png")


BAD_INPUT = [
    (["--set", "train.lrr=0.1"], "train.lrr: unknown key (did you mean 'lr'?)"),
    (["--set", "algorithm.name=dfedavgg"], "algorithm.name: unknown value 'dfedavgg'"),
    (["--set", "data.dataset=cifar11"], "data.dataset: unknown value 'cifar11'"),
    (["--set", "model.name=mlpp"], "model.name: unknown value 'mlpp'"),
    (["--set", "topology.name=rnig"], "topology.name: unknown value 'rnig' (did you mean"),
    (["--set", "data.alpha=0"], "data.alpha: must be > 0, got 0"),
    (["--set", "data.alpha=-1"], "data.alpha: must be > 0, got -1"),
    (["--set", "topology.name=random_k", "--set", "topology.k=4"], "topology.k:"),
    (["--set", "train.lr=-0.1"], "train.lr: must be >= 0, got -0.1"),
    (["--set", "train.rounds=0"], "train.rounds: must be an integer >= 1, got 0"),
    (["--set", "topology.name=custom", "--set", "topology.mixing=custom", "--set",
      "topology.path=nonstochastic.csv"], "topology.mixing: custom matrix row"),
    (["--set", "topology.name=custom", "--set", "topology.path=disconnected.csv"],
     "is not connected"),
    (["--set", "data.options=!default", "--set", "data.dataset=mnist", "--set", "data.root=empty",
      "--set", "data.download=false"], "data.dataset: mnist not found"),
    (["--set", "data.options=!default", "--set", "data.dataset=mnist", "--set", "data.root=corrupt",
      "--set", "data.download=false"], "is not a valid IDX file"),
    (["--set", "nonsense"], "--set: expected key.path=value"),
    (["--device", "tpu"], "device: must be cpu, cuda"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUT,
                         ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD_INPUT)])
def test_bad_input_one_sentence_exit_2_no_directory(work, capsys, args, message):
    np.savetxt(work / "nonstochastic.csv", [[0.5, 0.5, 0, 0], [0, 0.5, 0.5, 0],
                                            [0, 0, 0.5, 0.2], [0.5, 0, 0, 0.5]], delimiter=",")
    np.savetxt(work / "disconnected.csv", [[0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1],
                                           [0, 0, 1, 0]], delimiter=",")
    (work / "empty").mkdir()
    (work / "corrupt" / "mnist").mkdir(parents=True)
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (work / "corrupt" / "mnist" / name).write_bytes(b"garbage")
    code, out, err = gossipfl(capsys, "run", "tiny.yaml", *args)
    assert code == 2
    assert err.startswith("error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err and out == ""
    assert run_dirs(work) == []


def test_missing_config_file_and_existing_run_directory(work, capsys):
    code, _, err = gossipfl(capsys, "run", "nope.yaml")
    assert code == 2 and err == "error: config: file 'nope.yaml' does not exist.\n"
    (work / "taken").mkdir()
    (work / "taken" / "file").write_text("x")
    code, _, err = gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "taken")
    assert code == 2 and "--name: run directory 'taken' already exists" in err
    assert sorted(p.name for p in (work / "taken").iterdir()) == ["file"]


@pytest.mark.slow
def test_unnamed_run_directories_never_collide(work, capsys, monkeypatch):
    monkeypatch.setattr("gossipfl.results.rundir.timestamp", lambda now=None: "20240101-000000")
    for _ in range(3):
        assert gossipfl(capsys, "run", "tiny.yaml", "--quiet")[0] == 0
    assert [p.name for p in run_dirs(work)] == [
        "tiny-20240101-000000", "tiny-20240101-000000-2", "tiny-20240101-000000-3"]
    assert all(RunDirectory(p).status() == "finished" for p in run_dirs(work))


@pytest.mark.slow
def test_interrupt_then_resume_matches_uninterrupted(work, capsys, monkeypatch):
    assert gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "reference", "--quiet")[0] == 0
    original = Runner.run_round

    def interrupted(self, t):
        if t == 3:
            raise KeyboardInterrupt
        return original(self, t)

    monkeypatch.setattr(Runner, "run_round", interrupted)
    code, _, err = gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "cut", "--quiet")
    assert code == 130
    assert "interrupted after round 3; the last checkpoint is at round 2." in err
    assert f"resume with: {sys.executable} -m gossipfl run --resume cut" in err
    assert RunDirectory(work / "cut").load_checkpoint()["runner"]["round"] == 2
    monkeypatch.setattr(Runner, "run_round", original)
    code, out, err = gossipfl(capsys, "run", "--resume", "cut")
    assert code == 0 and "resuming after round 2 of 6" in err and "finished cut" in out
    assert read(work, "cut") == read(work, "reference") and len(read(work, "cut")) == 6
    code, out, _ = gossipfl(capsys, "run", "--resume", "cut")
    assert code == 0 and "has already finished" in out
    code, _, err = gossipfl(capsys, "run", "tiny.yaml", "--resume", "cut")
    assert code == 2 and err.startswith("error: --resume: cannot be combined")


def test_diverged_run_exits_1_with_one_line(work, capsys, monkeypatch):
    original = Runner.run_round

    def diverging(self, t):
        if t == 2:
            raise FloatingPointError("training diverged at round 3 (loss nan); try a smaller "
                                     "train.lr.")
        return original(self, t)

    monkeypatch.setattr(Runner, "run_round", diverging)
    code, _, err = gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "div", "--quiet")
    assert code == 1 and "Traceback" not in err
    assert err == ("error: training diverged at round 3 (loss nan); try a smaller train.lr. "
                   "(results so far in div)\n")
    assert RunDirectory(work / "div").status() == "failed"


# --------------------------------------------------------------------------------------------
# The installed command, in a real process
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not GOSSIPFL.exists(), reason="the gossipfl script is not installed")
def test_installed_command_killed_then_resumed(work):
    config = dict(TINY, train={**TINY["train"], "rounds": 60},
                  eval={"every": 10, "local_models": False},
                  output={"checkpoint_every": 1})
    (work / "long.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([str(GOSSIPFL), "run", "long.yaml", "--out", ".", "--name", "killed", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    checkpoint = work / "killed" / "checkpoint.pt"
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    killed_at = RunDirectory(work / "killed").load_checkpoint()["runner"]["round"]
    assert 1 <= killed_at < 60
    assert cli.main(["run", "--resume", "killed", "--quiet"]) == 0
    assert cli.main(["run", "long.yaml", "--out", ".", "--name", "whole", "--quiet",
                     "--set", "output.checkpoint_every=0"]) == 0
    assert read(work, "killed") == read(work, "whole") and len(read(work, "whole")) == 6


# --------------------------------------------------------------------------------------------
# gossipfl sweep / report
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sweep_then_report(work, capsys):
    study = {"name": "mini", "base": "tiny.yaml",
             "grid": {"algorithm": [{"name": "dfedavg"}, {"name": "dfedavgm",
                                                          "momentum": 0.5}]},
             "seeds": [0, 1], "targets": [0.5]}
    (work / "study.yaml").write_text(yaml.safe_dump(study))
    code, out, err = gossipfl(capsys, "sweep", "study.yaml", "--set", "train.rounds=4")
    assert code == 0, err
    folder = work / "runs" / "mini"
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [
        "dfedavg-seed0", "dfedavg-seed1", "dfedavgm-seed0", "dfedavgm-seed1"]
    table = (folder / "table.md").read_text()
    assert table in out and "| dfedavgm | 2 |" in table
    assert "rounds to 50%" in table
    assert_png(folder / "accuracy.png")
    before = (folder / "dfedavg-seed0" / "metrics.csv").stat().st_mtime_ns
    code, out, _ = gossipfl(capsys, "sweep", "study.yaml", "--set", "train.rounds=4")
    assert code == 0 and out.count("already done; skipped") == 4
    assert (folder / "dfedavg-seed0" / "metrics.csv").stat().st_mtime_ns == before
    code, out, _ = gossipfl(capsys, "report", str(folder), "--out", "rep")
    assert code == 0 and (work / "rep" / "table.md").read_text() == table  # study targets
    code, out, _ = gossipfl(capsys, "report", str(folder / "dfedavg-seed0"),
                            str(folder / "dfedavg-seed1"), "--target", "0.4", "--out", "two")
    assert code == 0 and "| dfedavg | 2 |" in out and "rounds to 40%" in out


@pytest.mark.slow
def test_interrupted_sweep_resumes(work, capsys, monkeypatch):
    study = {"name": "cut", "base": "tiny.yaml", "grid": {"train.lr": [0.1, 0.05]}}
    (work / "study.yaml").write_text(yaml.safe_dump(study))
    original = Runner.run_round
    calls = []

    def interrupted(self, t):
        calls.append(t)
        if len(calls) == 10:  # round 4 of the second run
            raise KeyboardInterrupt
        return original(self, t)

    monkeypatch.setattr(Runner, "run_round", interrupted)
    code, _, err = gossipfl(capsys, "sweep", "study.yaml", "--quiet")
    assert code == 130 and f"Resume with: {sys.executable} -m gossipfl sweep study.yaml" in err
    monkeypatch.setattr(Runner, "run_round", original)
    code, out, err = gossipfl(capsys, "sweep", "study.yaml")
    assert code == 0, err
    assert "resuming after round 2 of 6" in out and out.count("already done; skipped") == 1
    assert "| lr=0.05 | 1 |" in out


def test_sweep_and_report_errors(work, capsys):
    (work / "study.yaml").write_text(yaml.safe_dump({"base": "tiny.yaml", "seed": [0]}))
    code, _, err = gossipfl(capsys, "sweep", "study.yaml")
    assert code == 2 and err.startswith("error: study.seed: unknown key (did you mean 'seeds'?)")
    (work / "study.yaml").write_text(yaml.safe_dump({"base": "tiny.yaml",
                                                     "grid": {"train.lr": [0.1, -1]}}))
    code, _, err = gossipfl(capsys, "sweep", "study.yaml")
    assert code == 2 and "train.lr: must be >= 0, got -1" in err
    assert not (work / "runs").exists()
    code, _, err = gossipfl(capsys, "report", "nowhere")
    assert code == 2 and err == "error: report: 'nowhere' is not a directory.\n"


# --------------------------------------------------------------------------------------------
# gossipfl list / topology / data
# --------------------------------------------------------------------------------------------
def test_list_shows_every_registered_name(capsys):
    from gossipfl.algorithms import available_algorithms
    from gossipfl.data import DATASETS
    from gossipfl.models import MODELS
    from gossipfl.schedules import schedule_names
    from gossipfl.topology import TOPOLOGIES, mixing_rule_names

    code, out, _ = gossipfl(capsys, "list")
    assert code == 0
    for name, algo in available_algorithms().items():
        assert any(line.split()[0] == name and algo.paper in line for line in out.splitlines())
    for names in (DATASETS, MODELS, TOPOLOGIES, mixing_rule_names()):
        assert all(n in out for n in names)
    orders = next(line for line in out.splitlines() if line.startswith("schedules"))
    assert orders == f"schedules (topology.order): {', '.join(schedule_names())}"
    assert {"synchronous", "sequential", "asynchronous"} <= set(schedule_names())


def test_topology_reports_spectral_gap(tmp_path, capsys):
    m = 8
    code, out, _ = gossipfl(capsys, "topology", "ring", "--clients", str(m), "--draw",
                            str(tmp_path / "ring.png"))
    assert code == 0
    # Metropolis-Hastings on a ring: W = I/3 + (S + Sᵀ)/3, eigenvalues 1/3 + 2/3 cos(2πk/M)
    eig = 1 / 3 + 2 / 3 * np.cos(2 * np.pi * np.arange(1, m) / m)
    assert f"{1 - np.abs(eig).max():.4f}" in out
    assert "doubly stochastic       yes" in out and "min 2, mean 2.00, max 2" in out
    assert_png(tmp_path / "ring.png")
    code, _, err = gossipfl(capsys, "topology", "random_k", "--clients", "5", "--k", "5")
    assert code == 2 and err.startswith("error: topology.k:")


def test_topology_of_a_graph_kept_as_edges_says_its_gap_is_not_computed(capsys):
    from gossipfl.topology.sparse import DENSE_MAX_CLIENTS

    code, out, _ = gossipfl(capsys, "topology", "ring", "--clients", str(DENSE_MAX_CLIENTS + 1))
    assert code == 0 and "spectral gap            not computed" in out
    assert "min 2, mean 2.00, max 2" in out


@pytest.mark.slow
def test_data_prints_partition_and_plots(tmp_path, capsys):
    code, out, _ = gossipfl(capsys, "data", "synthetic", "--partition", "dirichlet",
                            "--alpha", "0.5", "--clients", "5", "--option", "train_size=300",
                            "--plot", str(tmp_path / "p.png"))
    assert code == 0
    assert "synthetic: 300 train / 200 test samples" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["4"])]
    assert len(rows) == 2
    for row in rows:  # samples = sum of the per-class counts
        assert int(row[1]) == sum(int(v) for v in row[4:])
    assert_png(tmp_path / "p.png")
    code, _, err = gossipfl(capsys, "data", "synthetic", "--clients", "5", "--alpha", "-1")
    assert code == 2 and err == "error: data.alpha: must be > 0, got -1.0.\n"


def test_help_and_usage_errors(capsys):
    assert gossipfl(capsys, "--help")[0] == 0
    code, _, err = gossipfl(capsys, "frobnicate")
    assert code == 2 and "invalid choice" in err


def test_examples_folder_is_complete():
    names = {p.name for p in (ROOT / "examples").glob("*.yaml")}
    expected = {"quickstart.yaml", "study_baselines.yaml",
                *(f"dfedavg_{t}.yaml" for t in ("ring", "grid", "exponential", "full",
                                                "random_k"))}
    assert expected <= names
    assert (ROOT / "Makefile").is_file() and os.access(ROOT / ".ci" / "run", os.X_OK)


def test_sweep_out_naming_a_study_folder_or_a_run_is_refused(work, capsys):
    """sweep --out is the folder the study's folder goes in, as run's: the study folder
    itself (or a run directory) given as --out is refused, before any run starts."""
    study = work / "s.yaml"
    study.write_text(yaml.safe_dump({"name": "s", "base": TINY, "seeds": [0]}))
    assert gossipfl(capsys, "sweep", str(study), "--out", "studies", "--quiet")[0] == 0
    err = one_sentence(capsys, "sweep", str(study), "--out", "studies/s")
    assert err == ("error: --out: 'studies/s' is a study folder, but --out is the folder a "
                   "study's folder goes in (as for gossipfl run); give --out 'studies' to write "
                   "<out>/<study name>.\n")
    assert not (work / "studies" / "s" / "s").exists()
