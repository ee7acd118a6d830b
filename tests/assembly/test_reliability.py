"""Issue 10: no traceback a user can cause, studies that survive faults, data that is what it
claims, interruptions. Each class of failure has its own section."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.io import FolderInUse, FolderLock
from gossipfl.results.rundir import RunDirectory
from tests.helpers import (
    SRC_ENV,
    TINY,
    disk_full_on,
    gossipfl,
    no_temp_files,
    one_sentence,
    with_figures,
)

# --------------------------------------------------------------------------------------------
# Config files and settings
# --------------------------------------------------------------------------------------------
CONFIG_FILES = [
    (b"train:\n  lr: 0.1\n  lr: 0.2\n", "sets the key 'lr' twice (again at line 3)"),
    (b"\x00\x01\x02binary", "is a binary file"),
    (b"train:\n  lr: 0.1\xe9\n", "is not UTF-8 text (byte 16 is 0xe9)"),
    (b"trian:\n  lr: 0.1\n", ("trian: unknown top-level key (did you mean 'train'?); the "
                              "sections are data, model, topology, algorithm, train")),
]


@pytest.mark.parametrize(("content", "message"), CONFIG_FILES)
def test_bad_config_files_are_one_sentence(work, capsys, content, message):
    (work / "bad.yaml").write_bytes(content)
    assert message in one_sentence(capsys, "run", "bad.yaml")


def test_config_directory_is_not_reported_missing(work, capsys):
    (work / "folder.yaml").mkdir()
    assert "'folder.yaml' is a directory, not a file" in one_sentence(capsys, "run",
                                                                      "folder.yaml")


def test_exponent_numbers_mean_the_same_in_a_file_and_in_set(work):
    (work / "e.yaml").write_text("train:\n  rounds: 1e1\n  lr: 5e-2\n")
    from_file = load_config(work / "e.yaml")
    from_set = load_config(None, ["train.rounds=1e1", "train.lr=5e-2"])
    assert (from_file.train.rounds, from_file.train.lr) == (10, 0.05)
    assert (from_set.train.rounds, from_set.train.lr) == (10, 0.05)


NON_FINITE = ["train.lr", "train.weight_decay", "train.momentum", "train.clip_norm",
              "train.lr_decay", "data.alpha", "topology.p", "algorithm.momentum",
              "data.options.separation"]


@pytest.mark.parametrize("key", NON_FINITE)
@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_non_finite_numbers_are_rejected_at_validation(key, value):
    overrides = ["algorithm.name=dfedavgm"] if key.startswith("algorithm") else []
    with pytest.raises(GossipflError, match=rf"^{key}: must be a finite number"):
        load_config(TINY, [*overrides, f"{key}={value}"])


@pytest.mark.parametrize(("key", "words"), [
    ("name", "a string or null"), ("data.dataset", "a string"), ("output.dir", "a string"),
    ("model.name", "a string"), ("data.root", "a string or null")])
def test_a_nan_where_no_number_goes_names_the_type(key, words):
    """A NaN given to a name or a path was called "not a finite number", as if a number
    could go there."""
    with pytest.raises(GossipflError, match=rf"^{key}: must be {words}, got nan\.$"):
        load_config(TINY, [f"{key}=.nan"])


def test_every_algorithm_parameter_rejects_nan():
    from gossipfl.algorithms import available_algorithms

    checked = 0
    for name, cls in available_algorithms().items():
        for field, default in vars(cls.Params()).items():
            if isinstance(default, float):
                with pytest.raises(GossipflError, match=f"algorithm.{field}: must be a finite"):
                    load_config(TINY, [f"algorithm.name={name}", f"algorithm.{field}=.nan"])
                checked += 1
    assert checked > 10


MODEL_OPTIONS = [
    ("mlp", "hidden=200", "model.options.hidden: must be a list, got 200."),
    ("mlp", "hidden=abc", "model.options.hidden: must be a list, got 'abc'."),
    ("mlp", "hidden=[200, x]", "model.options.hidden[1]: must be an integer, got 'x'."),
    ("linear", "bias=maybe", "model.options.bias: must be true or false, got 'maybe'."),
    ("logistic", "bias=1", "model.options.bias: must be true or false, got 1."),
    ("cnn", "width=3", "model.options.width: model 'cnn' takes no options"),
    ("mlp", "hiden=[5]", ("model.options.hiden: not an option of model 'mlp' (did you mean "
                          "'hidden'?); it takes hidden.")),
    ("vgg11", "groups=two", "model.options.groups: must be an integer or null"),
    ("resnet18", "groups=[2]", "model.options.groups: must be an integer, got [2]."),
    ("resnet18", "stem=5", "model.options.stem: must be a string, got 5."),
]


@pytest.mark.parametrize(("model", "option", "message"), MODEL_OPTIONS)
def test_model_options_of_the_wrong_type(model, option, message):
    with pytest.raises(GossipflError) as info:
        load_config(TINY, [f"model.name={model}", f"model.options.{option}"])
    assert message in str(info.value)


def test_dataset_option_messages_name_the_full_key():
    with pytest.raises(GossipflError, match=r"^data.options.dim: must be an integer >= 1"):
        from gossipfl.core.runner import build_data

        build_data(load_config(TINY, ["data.options.dim=0"]))


# --------------------------------------------------------------------------------------------
# Output that cannot be written: checked before the data are loaded
# --------------------------------------------------------------------------------------------
@pytest.fixture
def no_data(monkeypatch):
    """Loading data fails the test: the error must come before."""
    def refuse(*args, **kwargs):
        raise AssertionError("the data were loaded before the output path was checked")

    monkeypatch.setattr("gossipfl.core.runner.build_data", refuse)


def test_output_under_a_file_fails_before_loading_data(work, capsys, no_data):
    (work / "afile").write_text("x")
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", "afile", "--name", "run")
    assert "--out: cannot write to 'afile': 'afile' is a file, not a folder." in err
    err = one_sentence(capsys, "run", "tiny.yaml", "--set", "output.dir=afile")
    assert "output.dir: cannot write to 'afile/tiny-" in err


def test_unwritable_output_folder_fails_before_loading_data(work, capsys, no_data, monkeypatch):
    (work / "readonly").mkdir()
    real = os.access
    monkeypatch.setattr("gossipfl.io.os.access",
                        lambda p, mode: False if str(p) == "readonly" else real(p, mode))
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", "readonly", "--name", "run")
    assert "the folder 'readonly' is not writable" in err


def test_unwritable_plot_paths_fail_before_the_work(work, capsys, no_data):
    (work / "afile").write_text("x")
    (work / "folder.png").mkdir()
    err = one_sentence(capsys, "data", "synthetic", "--clients", "4", "--plot", "folder.png")
    assert "--plot: cannot write 'folder.png': it is a folder." in err
    err = one_sentence(capsys, "topology", "ring", "--clients", "4", "--draw", "afile/r.png")
    assert "--draw: cannot write to 'afile'" in err


# --------------------------------------------------------------------------------------------
# Disk full, umask, stale temporary files
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_disk_full_at_a_checkpoint_fails_cleanly_and_resumes(work, capsys, monkeypatch):
    assert gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "reference", "--quiet")[0] == 0
    original = Runner.run_round

    def fill_disk(self, t):
        if t == 3:
            disk_full_on(monkeypatch, "checkpoint.pt")
        return original(self, t)

    monkeypatch.setattr(Runner, "run_round", fill_disk)
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "full", "--quiet")
    assert err == (f"error: no space left on device while writing full/checkpoint.pt; free "
                   f"space and resume with: {sys.executable} -m gossipfl run --resume full\n")
    run = RunDirectory(work / "full")
    assert run.status() == "failed" and run.load_checkpoint()["runner"]["round"] == 2
    assert no_temp_files(work / "full")
    monkeypatch.undo()
    monkeypatch.chdir(work)
    assert gossipfl(capsys, "run", "--resume", "full", "--quiet")[0] == 0
    assert run.read_metrics() and run.status() == "finished"
    assert [r["test_acc"] for r in run.read_metrics()] == \
        [r["test_acc"] for r in RunDirectory(work / "reference").read_metrics()]


def test_disk_full_at_run_start_leaves_nothing(work, capsys, monkeypatch):
    disk_full_on(monkeypatch, "config.yaml")
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "start", "--quiet")
    assert err == ("error: no space left on device while writing start/config.yaml; free "
                   "space and run the command again.\n")
    assert not (work / "start").exists()


@with_figures
def test_disk_full_while_drawing_figures_keeps_a_finished_run(work, capsys, monkeypatch):
    disk_full_on(monkeypatch, "accuracy.png")
    code, _, err = gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "figs", "--quiet")
    assert code == 0 and "no space left on device while writing figs/accuracy.png" in err
    assert "gossipfl report figs" in err
    assert RunDirectory(work / "figs").status() == "finished"


def test_files_follow_the_umask(work, capsys):
    old = os.umask(0o027)
    try:
        assert gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "masked", "--quiet")[0] == 0
    finally:
        os.umask(old)
    for name in ("config.yaml", "metrics.csv", "summary.json", "checkpoint.pt"):
        assert stat.S_IMODE((work / "masked" / name).stat().st_mode) == 0o640, name


def test_resume_removes_temporary_files_of_a_killed_write(work, capsys):
    assert gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "cut", "--quiet")[0] == 0
    run = RunDirectory(work / "cut")
    summary = run.read_summary()
    run.write_summary({**summary, "status": "interrupted"})
    (work / "cut" / ".checkpoint.pt.abc123.tmp").write_bytes(b"half a checkpoint")
    assert gossipfl(capsys, "run", "--resume", "cut", "--quiet")[0] == 0
    assert no_temp_files(work / "cut")


# --------------------------------------------------------------------------------------------
# Two processes, one run directory: the lock
# --------------------------------------------------------------------------------------------
def test_second_resume_of_a_directory_in_use_is_refused(work, capsys):
    assert gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "busy", "--quiet")[0] == 0
    RunDirectory(work / "busy").write_summary({"status": "interrupted"})
    held = FolderLock.acquire(work / "busy", "test")  # another open file: flock conflicts
    try:
        err = one_sentence(capsys, "run", "--resume", "busy")
    finally:
        held.release()
    assert f"--resume: 'busy' is in use by process {os.getpid()}" in err


def test_a_stale_lock_of_a_dead_process_is_taken_over(work, capsys):
    assert gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "stale", "--quiet")[0] == 0
    RunDirectory(work / "stale").write_summary({"status": "interrupted"})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout
    (work / "stale" / ".lock").write_text(dead)
    assert gossipfl(capsys, "run", "--resume", "stale", "--quiet")[0] == 0
    assert not (work / "stale" / ".lock").exists()


def test_lock_in_another_process_names_its_pid(tmp_path):
    code = ("import time; from gossipfl.io import FolderLock; "
            f"FolderLock.acquire({str(tmp_path)!r}, 'x'); print('held', flush=True); "
            "time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env=SRC_ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderInUse, match=f"in use by process {holder.pid}"):
            FolderLock.acquire(tmp_path, "--resume")
    finally:
        holder.kill()
        holder.wait()
    FolderLock.acquire(tmp_path, "--resume").release()  # dead holder: taken over


# --------------------------------------------------------------------------------------------
# Interruptions: SIGTERM, Ctrl-C at a round's end, a second Ctrl-C
# --------------------------------------------------------------------------------------------
def signal_at_round(monkeypatch, t_signal: int, *signals: int) -> None:
    original = Runner.run_round

    def run_round(self, t):
        if t == t_signal:
            for sig in signals:
                os.kill(os.getpid(), sig)
        return original(self, t)

    monkeypatch.setattr(Runner, "run_round", run_round)


@pytest.mark.represented
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_after_the_round_with_its_checkpoint(work, capsys, monkeypatch, sig):
    assert gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "reference", "--quiet")[0] == 0
    signal_at_round(monkeypatch, 3, sig)
    code, _, err = gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "cut", "--quiet")
    assert code == 130 and "Traceback" not in err
    assert "interrupted after round 4; the last checkpoint is at round 4." in err
    assert f"resume with: {sys.executable} -m gossipfl run --resume cut" in err
    run = RunDirectory(work / "cut")
    assert run.status() == "interrupted" and run.load_checkpoint()["runner"]["round"] == 4
    monkeypatch.undo()
    monkeypatch.chdir(work)
    code, _, err = gossipfl(capsys, "run", "--resume", "cut", "--quiet")
    assert code == 0 and "resuming after round 4 of 6" in err
    assert [r["test_acc"] for r in run.read_metrics()] == \
        [r["test_acc"] for r in RunDirectory(work / "reference").read_metrics()]


def test_second_ctrl_c_stops_at_once_keeping_the_last_checkpoint(work, capsys, monkeypatch):
    signal_at_round(monkeypatch, 3, signal.SIGINT, signal.SIGINT)
    code, _, err = gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "cut", "--quiet")
    assert code == 130 and "Traceback" not in err
    assert "interrupted after round 3; the last checkpoint is at round 2." in err
    assert RunDirectory(work / "cut").status() == "interrupted"


def test_ctrl_c_during_shutdown_leaves_a_whole_summary(work, capsys, monkeypatch):
    signal_at_round(monkeypatch, 3, signal.SIGINT)
    original = RunDirectory.save_checkpoint

    def save(self, runner):
        if runner.round == 4:  # the checkpoint written on the way out
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        original(self, runner)

    monkeypatch.setattr(RunDirectory, "save_checkpoint", save)
    code, _, err = gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "cut", "--quiet",
                            "--set", "output.checkpoint_every=0")
    assert code == 130 and "Traceback" not in err
    summary = json.loads((work / "cut" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["checkpoint_round"] == 4


@pytest.mark.slow
def test_sigterm_to_a_real_process(work):
    config = dict(TINY, train={**TINY["train"], "rounds": 4000},
                  eval={"every": 50, "local_models": False}, output={"checkpoint_every": 0})
    (work / "long.yaml").write_text(yaml.safe_dump(config))
    proc = subprocess.Popen([sys.executable, "-m", "gossipfl", "run", "long.yaml", "--out",
                             ".", "--name", "termed", "--quiet"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=SRC_ENV)
    # after round 50 (metrics.csv written): a signal before the first round has finished
    # stops at once instead (test_reliability_third), with no checkpoint to compare
    metrics = work / "termed" / "metrics.csv"
    deadline = time.monotonic() + 120
    while not metrics.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert f"resume with: {sys.executable} -m gossipfl run --resume termed" in err
    run = RunDirectory(work / "termed")
    assert run.status() == "interrupted"
    assert run.load_checkpoint()["runner"]["round"] == run.read_summary()["rounds_done"]


# --------------------------------------------------------------------------------------------
# Studies: validation up front, failed runs retried, exit status, the resume command
# --------------------------------------------------------------------------------------------
def write_study(work: Path, **grid) -> None:
    study = {"name": "st", "base": "tiny.yaml", "grid": grid}
    (work / "study.yaml").write_text(yaml.safe_dump(study))


@pytest.mark.parametrize(("grid", "message"), [
    ({"data.clients": [4, 1]}, "topology.name: ring with 1 client has no one to gossip with"),
    ({"topology.name": ["random_k"], "topology.k": [2, 4]}, "topology.k:"),
    ({"model": [{"name": "logistic"}, {"name": "mlp", "options": {"hidden": 5}}]},
     "model.options.hidden: must be a list"),
    ({"algorithm": ["dfedavg", {"name": "dfedavgm", "momentum": float("nan")}]},
     "algorithm.momentum: must be a finite number"),
    ({"data.options.dim": [6, 0]}, "data.options.dim: must be an integer >= 1, got 0"),
    ({"data.dataset": ["synthetic", "mnsit"]}, "data.dataset: unknown value 'mnsit'"),
])
def test_every_grid_point_is_validated_before_the_first_run(work, capsys, grid, message):
    write_study(work, **grid)
    err = one_sentence(capsys, "sweep", "study.yaml")
    assert message in err and "(in the study's grid point '" in err
    assert not (work / "runs").exists()


@pytest.mark.slow
def test_failed_runs_make_the_study_fail_then_are_retried(work, capsys, monkeypatch):
    write_study(work, **{"train.lr": [0.1, 0.05]})
    original = Runner.run_round

    def crash(self, t):
        if self.config.train.lr == 0.05 and t == 3:
            raise RuntimeError("simulated crash")
        return original(self, t)

    monkeypatch.setattr(Runner, "run_round", crash)
    code, out, err = gossipfl(capsys, "sweep", "study.yaml", "--quiet", "--set", "seed=0")
    assert code == 1 and "| lr=0.1 | 1 |" in out and "| lr=0.05 | 0 (1 failed) |" in out
    assert "failed: lr_0.05-seed0: simulated crash" in err
    assert "1 of 2 runs failed" in err
    assert f"{sys.executable} -m gossipfl sweep study.yaml --set seed=0" in err
    assert RunDirectory(work / "runs/st/lr_0.05-seed0").status() == "failed"
    monkeypatch.setattr(Runner, "run_round", original)
    code, out, err = gossipfl(capsys, "sweep", "study.yaml", "--set", "seed=0")
    assert code == 0, err
    assert "resuming after round 2 of 6" in out and out.count("already done; skipped") == 1
    assert RunDirectory(work / "runs/st/lr_0.05-seed0").status() == "finished"


@pytest.mark.slow
def test_a_diverged_run_is_done(work, capsys):
    write_study(work, **{"train.lr": [0.1]})
    assert gossipfl(capsys, "sweep", "study.yaml", "--quiet")[0] == 0
    run = RunDirectory(work / "runs/st/dfedavg-seed0")
    run.write_summary({**run.read_summary(), "status": "diverged"})
    code, out, _ = gossipfl(capsys, "sweep", "study.yaml")
    assert code == 0 and "already done; skipped" in out


def test_sweep_resume_command_repeats_out_set_and_device(work, capsys, monkeypatch):
    write_study(work, **{"train.lr": [0.1]})
    signal_at_round(monkeypatch, 2, signal.SIGINT)
    code, _, err = gossipfl(capsys, "sweep", "study.yaml", "--quiet", "--out", "my runs",
                            "--set", "train.rounds=5", "--device", "cpu")
    assert code == 130 and "Traceback" not in err
    assert (f"Resume with: {sys.executable} -m gossipfl sweep study.yaml --out 'my runs' "
            f"--set train.rounds=5 --device cpu") in err
    assert RunDirectory(work / "my runs/st/dfedavg-seed0").load_checkpoint() is not None


# --------------------------------------------------------------------------------------------
# Data are what they claim to be
# --------------------------------------------------------------------------------------------
@pytest.fixture
def digest_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GOSSIPFL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "checksums.json"


def fake_mnist(folder: Path) -> Path:
    from tests.dataset_files import mnist_arrays, write_mnist_folder

    return write_mnist_folder(folder, mnist_arrays(seed=3))  # official names, other bytes


def test_locally_found_file_with_the_wrong_digest_is_refused(tmp_path, digest_cache):
    from gossipfl.data import load_dataset
    from gossipfl.data.formats import SOURCES, file_digest

    folder = fake_mnist(tmp_path / "data" / "mnist")
    with pytest.raises(GossipflError) as info:
        load_dataset("mnist", root=tmp_path / "data", download=False)
    path = folder / "train-images-idx3-ubyte.gz"
    official = {r.name: r.checksum for r in SOURCES["mnist"]}[path.name]
    assert str(info.value) == (
        f"data.dataset: {path} has SHA-256 {file_digest(path)}, not the official {official}; "
        f"replace it with the official file, or set data.verify: false to use it knowingly.")
    data = load_dataset("mnist", root=tmp_path / "data", download=False, verify=False)
    assert {f["path"]: f["sha256"] for f in data.files} == {
        str(p.absolute()): file_digest(p) for p in folder.iterdir()}
    assert not any(f["verified"] for f in data.files)


def test_digest_is_computed_once_per_size_and_mtime(tmp_path, digest_cache, monkeypatch):
    from gossipfl.data import formats

    path = tmp_path / "file.bin"
    path.write_bytes(b"x" * 1000)
    calls = []
    real = formats.file_digest
    monkeypatch.setattr(formats, "file_digest", lambda p, *a: calls.append(p) or real(p, *a))
    first = formats.cached_digest(path)
    assert formats.cached_digest(path) == first and len(calls) == 1
    assert digest_cache.is_file()
    path.write_bytes(b"y" * 1000)
    os.utime(path, ns=(1, 1))
    assert formats.cached_digest(path) != first and len(calls) == 2


def test_a_user_set_root_is_the_only_place_looked_in(tmp_path, capsys):
    err = one_sentence(capsys, "fetch", "fashion_mnist", "--root", str(tmp_path / "mine"),
                       "--no-download")
    assert f"not found in {tmp_path}/mine/fashion_mnist or" in err
    assert "/usr/share" not in err


def test_run_directory_records_the_dataset_files(work, capsys, digest_cache):
    fake_mnist(work / "data" / "mnist")
    config = dict(TINY, data={"dataset": "mnist", "clients": 2, "root": "data",
                              "download": False}, train={**TINY["train"], "rounds": 1},
                  eval={"local_models": False})
    (work / "mnist.yaml").write_text(yaml.safe_dump(config))
    err = one_sentence(capsys, "run", "mnist.yaml", "--out", ".", "--name", "refused")
    assert "not the official" in err and not (work / "refused").exists()
    code, _, err = gossipfl(capsys, "run", "mnist.yaml", "--out", ".", "--name", "own", "--quiet",
                            "--set", "data.verify=false")
    assert code == 0, err
    files = RunDirectory(work / "own").read_summary()["data_files"]
    assert [Path(f["path"]).name for f in files] == [
        "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
    assert all(len(f["sha256"]) == 64 and f["verified"] is False for f in files)


def test_damaged_idx_header_never_reports_negative_sizes():
    from gossipfl.data.formats import parse_idx

    header = bytes([0, 0, 0x08, 4]) + b"\xff\xff\xff\xff" * 4
    with pytest.raises(GossipflError) as info:
        parse_idx(header + b"\x00" * 10, "damaged")
    text = str(info.value)
    assert "truncated: expected " in text and "-" not in text.split("expected ")[1]


# --------------------------------------------------------------------------------------------
# gossipfl report on damaged runs and bad options
# --------------------------------------------------------------------------------------------
@pytest.fixture
def two_runs(work, capsys):
    for name in ("a", "b"):
        assert gossipfl(capsys, "run", "tiny.yaml", "--out", "runs", "--name", name, "--quiet",
                        "--set", f"seed={ord(name)}")[0] == 0
    return work / "runs"


@pytest.mark.represented
@pytest.mark.parametrize(("damage", "why"), [
    (lambda p: p.unlink(), "is missing"),
    (lambda p: p.write_text(""), "is empty"),
    (lambda p: p.write_text("round,test_acc\n1,abc\n"), "is damaged (line 2)"),
    (lambda p: p.write_bytes(b"round,test_acc\n\xff\xfe,\x00\n"), "cannot be read"),
    (lambda p: p.write_text("round,test_acc\n1,0.5,7,8\n"), "is damaged (a malformed line)"),
])
def test_report_names_a_damaged_metrics_file_and_never_calls_it_failed(
        two_runs, capsys, damage, why):
    damage(two_runs / "b" / "metrics.csv")
    code, out, err = gossipfl(capsys, "report", str(two_runs), "--out", "rep")
    assert code == 0 and "Traceback" not in err
    assert f"warning: {two_runs / 'b' / 'metrics.csv'} {why}" in err
    assert "| dfedavg | 1 |" in out and "failed" not in out
    err = one_sentence(capsys, "report", str(two_runs / "b"), "--out", "rep2")
    assert f"report: no run has metrics to report ({two_runs / 'b' / 'metrics.csv'} {why}" in err


def test_report_unknown_metric_lists_the_valid_ones(two_runs, capsys):
    err = one_sentence(capsys, "report", str(two_runs), "--metric", "accuracy")
    assert "--metric: unknown value 'accuracy'; choose one of: local_acc_mean, test_acc." in err


@pytest.mark.parametrize("target", ["70", "0", "-0.5", "nan", "abc", "150%"])
def test_report_target_outside_0_1_is_refused(two_runs, capsys, target):
    err = one_sentence(capsys, "report", str(two_runs), "--target", target)
    assert f"--target: '{target}' is not an accuracy in (0, 1]" in err


def test_report_target_as_a_percentage(two_runs, capsys):
    code, out, _ = gossipfl(capsys, "report", str(two_runs), "--target", "40%")
    assert code == 0 and "rounds to 40%" in out


# --------------------------------------------------------------------------------------------
# Sizes that cannot fit: refused up front with the estimate
# --------------------------------------------------------------------------------------------
def test_a_dense_mixing_matrix_that_cannot_fit_is_refused(capsys):
    err = one_sentence(capsys, "topology", "full", "--clients", "3000000")
    assert "data.clients: a dense 3000000×3000000 mixing matrix (full) needs at least " \
           "131.0 TiB, but only " in err  # a ring or a grid that large is built as edges


def test_edges_that_cannot_fit_are_refused(capsys):
    err = one_sentence(capsys, "topology", "exponential", "--clients", "3000000000")
    assert "data.clients: the exponential graph's edges on 3000000000 clients needs at " \
           "least " in err


def test_parameter_stacks_that_cannot_fit_are_refused(work, capsys, monkeypatch):
    monkeypatch.setattr("gossipfl.engine.memory.available_memory", lambda device="cpu": 200)
    monkeypatch.setattr("gossipfl.assembly.experiment.check_synthetic_size", lambda options: None)
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "big")
    assert err == ("error: data.clients: holding the [M, P] = [4, 21] parameter stacks (X and X^0) "
                   "needs at least 672 B, but only 200 B of memory is available on cpu.\n")
    assert not (work / "big").exists()


def test_study_and_report_outputs_are_checked_before_the_work(work, capsys, no_data):
    (work / "afile").write_text("x")
    write_study(work, **{"train.lr": [0.1]})
    err = one_sentence(capsys, "sweep", "study.yaml", "--out", "afile")
    assert "--out: cannot write to 'afile/st': 'afile' is a file, not a folder." in err
    err = one_sentence(capsys, "report", str(work), "--out", "afile/rep")
    assert "--out: cannot write to 'afile/rep'" in err


def test_downloaded_files_follow_the_umask(tmp_path):
    from gossipfl.data.formats import download_file, file_digest

    source = tmp_path / "source.bin"
    source.write_bytes(b"payload")
    old = os.umask(0o022)
    try:
        dest = download_file(source.as_uri(), tmp_path / "got" / "file.bin",
                             file_digest(source))
    finally:
        os.umask(old)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o644


@pytest.mark.slow
def test_a_study_run_killed_before_writing_anything_starts_afresh(work, capsys):
    write_study(work, **{"train.lr": [0.1]})
    left = work / "runs" / "st" / "dfedavg-seed0"
    left.mkdir(parents=True)
    (left / ".lock").write_text("999999\n")  # a process killed between mkdir and config.yaml
    (left / ".config.yaml.x1.tmp").write_text("half")
    code, _, err = gossipfl(capsys, "sweep", "study.yaml", "--quiet")
    assert code == 0, err
    assert RunDirectory(left).status() == "finished" and no_temp_files(left)


def test_disk_full_while_writing_the_study_table(work, capsys, monkeypatch):
    write_study(work, **{"train.lr": [0.1]})
    disk_full_on(monkeypatch, "table.md")
    code, _, err = gossipfl(capsys, "sweep", "study.yaml", "--quiet")
    assert code == 2 and "Traceback" not in err
    assert err.endswith(f"error: no space left on device while writing runs/st/table.md; free "
                        f"space and write the table with: {sys.executable} -m gossipfl report "
                        f"runs/st\n")
    assert RunDirectory(work / "runs/st/dfedavg-seed0").status() == "finished"
