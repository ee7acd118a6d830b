"""Issue 41, the third reliability pass: resumed runs that silently change, silent wrong
numbers, settings silently ignored, hangs, and one-sentence errors on the newest surfaces.
One section per class of the issue; every test failed on the code before the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gossipfl.assembly.loading import load_config
from gossipfl.errors import GossipflError
from gossipfl.results.inputs import INPUTS_FILE
from gossipfl.results.lifecycle import execute, prepare_fresh, prepare_resume
from tests.helpers import TINY, Interrupt, gossipfl, one_sentence, without_timing

RING4 = "0.5,0.25,0,0.25\n0.25,0.5,0.25,0\n0,0.25,0.5,0.25\n0.25,0,0.25,0.5\n"
LINE4 = "0.5,0.5,0,0\n0.5,0,0.5,0\n0,0.5,0,0.5\n0,0,0.5,0.5\n"


def with_inputs(**sections) -> dict:
    """TINY reading a custom matrix (m.csv) and a compute-speeds file (speeds.txt), both
    named by paths relative to the working directory."""
    config = {k: dict(v) if isinstance(v, dict) else v for k, v in TINY.items()}
    config["topology"] = {"name": "custom", "mixing": "custom", "path": "m.csv"}
    config["systems"] = {"compute": {"path": "speeds.txt"}}
    for key, value in sections.items():
        config[key] = value
    return config


def interrupted(folder: Path, config: dict, k: int = 3) -> Path:
    """``config`` run into ``folder/run`` and interrupted after round ``k``."""
    with pytest.raises(KeyboardInterrupt):
        execute(prepare_fresh(load_config(config), folder / "run"), [Interrupt(k)], warn=print)
    return folder / "run"


@pytest.fixture
def inputs_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.csv").write_text(RING4)
    (tmp_path / "speeds.txt").write_text("0.1\n0.1\n0.1\n0.1\n")
    return tmp_path


# --------------------------------------------------------------------------------------------
# 1. A resumed run silently changes
# --------------------------------------------------------------------------------------------
def test_run_records_its_input_files_with_absolute_paths_and_digests(inputs_dir):
    run = interrupted(inputs_dir, with_inputs())
    recorded = {f["key"]: f for f in json.loads((run / INPUTS_FILE).read_text())["files"]}
    assert set(recorded) == {"topology.path", "systems.compute.path"}
    assert recorded["topology.path"]["path"] == str(inputs_dir / "m.csv")
    assert len(recorded["systems.compute.path"]["sha256"]) == 64
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["topology"]["path"] == str(inputs_dir / "m.csv")
    assert saved["systems"]["compute"]["path"] == str(inputs_dir / "speeds.txt")


@pytest.mark.parametrize("name, key, text", [
    ("m.csv", "topology.path", LINE4),
    ("speeds.txt", "systems.compute.path", "0.5 0.5 0.5 0.5\n"),
])
def test_resume_refuses_a_changed_input_file_in_one_sentence(inputs_dir, capsys, name, key,
                                                             text):
    run = interrupted(inputs_dir, with_inputs())
    (inputs_dir / name).write_text(text)
    err = one_sentence(capsys, "run", "--resume", str(run), "--quiet")
    assert f"{key}: '{inputs_dir / name}' has changed since the run started" in err
    assert "--allow-changed-inputs" in err
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"


def test_resume_refuses_a_missing_input_file(inputs_dir, capsys):
    run = interrupted(inputs_dir, with_inputs())
    (inputs_dir / "speeds.txt").unlink()
    err = one_sentence(capsys, "run", "--resume", str(run), "--quiet")
    assert f"systems.compute.path: '{inputs_dir / 'speeds.txt'}' was read by this run" in err


def test_allow_changed_inputs_resumes_with_a_warning_and_records_the_new_digest(inputs_dir,
                                                                               capsys):
    run = interrupted(inputs_dir, with_inputs())
    (inputs_dir / "speeds.txt").write_text("0.5 0.5 0.5 0.5\n")
    code, _, err = gossipfl(capsys, "run", "--resume", str(run), "--quiet",
                            "--allow-changed-inputs")
    assert code == 0, err
    assert "warning: systems.compute.path" in err and "going on with the file" in err
    entry = next(f for f in json.loads((run / INPUTS_FILE).read_text())["files"]
                 if f["key"] == "systems.compute.path")
    assert len(entry["previous"]) == 1 and entry["previous"][0] != entry["sha256"]


def test_allow_changed_inputs_needs_resume(work, capsys):
    err = one_sentence(capsys, "run", "tiny.yaml", "--allow-changed-inputs")
    assert "--allow-changed-inputs: goes only with --resume" in err


def test_a_run_with_relative_paths_resumes_from_another_directory(inputs_dir, capsys,
                                                                 monkeypatch):
    reference = execute(prepare_fresh(load_config(with_inputs()), inputs_dir / "ref"))
    run = interrupted(inputs_dir, with_inputs())
    elsewhere = inputs_dir / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    outcome = execute(prepare_resume(run))
    assert outcome.status == "finished"
    assert without_timing(outcome.result.metrics) == without_timing(reference.result.metrics)


def test_resume_refuses_a_changed_plugin(tmp_path, monkeypatch, capsys):
    from gossipfl import plugins

    monkeypatch.chdir(tmp_path)
    source = "from gossipfl.models import register_model\n# version {}\n"
    (tmp_path / "plug3.py").write_text(source.format(1))
    config = {**TINY, "plugins": ["plug3.py"]}
    monkeypatch.setattr(plugins, "_LOADED", dict(plugins._LOADED))
    run = interrupted(tmp_path, config)
    (tmp_path / "plug3.py").write_text(source.format(2))
    err = one_sentence(capsys, "run", "--resume", str(run), "--quiet")
    assert f"plugins: '{tmp_path / 'plug3.py'}' has changed" in err


def test_a_study_with_relative_input_paths_resumes_its_runs(inputs_dir):
    from gossipfl.studies.sweep import load_study, run_study

    study = {"name": "inputs", "out": str(inputs_dir / "studies"), "base": with_inputs(),
             "grid": {"train.lr": [0.1]}, "seeds": [0]}
    first = run_study(load_study(study))
    assert not first.failed
    again = run_study(load_study(study))  # the recorded absolute paths match the relative ones
    assert set(again.outcomes.values()) == {"skipped"}


def test_resume_refuses_a_changed_data_file(tmp_path, monkeypatch, capsys):
    """The user's own dataset files (data.verify: false) are recorded and checked alike."""
    from tests.dataset_files import mnist_arrays, write_mnist_folder

    monkeypatch.chdir(tmp_path)
    write_mnist_folder(tmp_path / "data" / "mnist", mnist_arrays(train=40, test=8))
    config = {**TINY, "data": {"dataset": "mnist", "root": str(tmp_path / "data"),
                               "download": False, "verify": False, "clients": 4,
                               "partition": "iid"}}
    run = interrupted(tmp_path, config)
    recorded = json.loads((run / INPUTS_FILE).read_text())["files"]
    assert {f["key"] for f in recorded} == {"data"} and len(recorded) == 4
    write_mnist_folder(tmp_path / "data" / "mnist", mnist_arrays(seed=1, train=40, test=8))
    err = one_sentence(capsys, "run", "--resume", str(run), "--quiet")
    assert "error: --resume: data: '" in err and "has changed since the run started" in err


def test_resume_without_inputs_json_still_works(inputs_dir):
    """A run directory of an older gossipfl (no inputs.json) resumes as before."""
    run = interrupted(inputs_dir, with_inputs())
    (run / INPUTS_FILE).unlink()
    assert execute(prepare_resume(run)).status == "finished"


def test_damaged_inputs_json_is_one_sentence(inputs_dir):
    run = interrupted(inputs_dir, with_inputs())
    (run / INPUTS_FILE).write_text("{not json")
    with pytest.raises(GossipflError, match=r"inputs\.json' cannot be read"):
        prepare_resume(run)


# --------------------------------------------------------------------------------------------
# 2. Silent wrong numbers
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm, systems", [
    ("dfedavg", {"availability": {"offline": 0.999}}),  # everyone offline
    ("fedavg", {"compute": {"seconds_per_step": 1.0}, "deadline": 0.5}),  # nobody in time
])
def test_a_round_in_which_nobody_trained_has_no_train_loss(tmp_path, algorithm, systems):
    config = {**TINY, "algorithm": {"name": algorithm}, "systems": systems,
              "train": {**TINY["train"], "rounds": 2}}
    outcome = execute(prepare_fresh(load_config(config), tmp_path / "run"))
    assert outcome.status == "finished", outcome.error
    assert [row["train_loss"] for row in outcome.result.metrics] == [None, None]
    header, *rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    column = header.split(",").index("train_loss")
    assert [row.split(",")[column] for row in rows] == ["", ""]
    assert "final_train_loss" not in outcome.summary


def test_load_study_table_has_the_rows_of_table_csv_in_its_order(tmp_path):
    import gossipfl

    study = {"name": "order", "out": str(tmp_path), "base": {**TINY, "train": {
        **TINY["train"], "rounds": 1}}, "grid": {"train.lr": [0.1, 0.05, 0.2]}, "seeds": [1, 0]}
    result = gossipfl.sweep(study)
    written = (tmp_path / "order" / "table.csv").read_text().splitlines()
    table = gossipfl.load_study(tmp_path / "order").table
    assert list(table["configuration"]) == [line.split(",")[0] for line in written[1:]]
    assert list(result.table["configuration"]) == list(table["configuration"])
    assert [label.split("=")[-1] for label in table["configuration"]] == ["0.1", "0.05", "0.2"]
    runs = gossipfl.load_study(tmp_path / "order").runs
    assert list(runs["seed"])[:2] == [1, 0]  # the study's seed order within a grid point
    gossipfl.report(tmp_path / "order")  # written again: the same order
    assert (tmp_path / "order" / "table.csv").read_text().splitlines() == written


# --------------------------------------------------------------------------------------------
# 3. Settings silently ignored: one warning naming the setting and the reason
# --------------------------------------------------------------------------------------------
def ignored_warnings(config, overrides=()) -> list[str]:
    import warnings

    from gossipfl.errors import IgnoredSetting

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_config(config, list(overrides))
    return [str(w.message) for w in caught if issubclass(w.category, IgnoredSetting)]


@pytest.mark.parametrize("overrides, expected", [
    (["systems.deadline=2"], ("systems.deadline: ignored, because dfedavg is a decentralized "
                             "algorithm")),
    (["algorithm.name=fedavg", "systems.availability.links.fail=0.2"],
     "systems.availability.links.fail: ignored, because fedavg is a centralized algorithm"),
    (["topology.path=m.csv"], ("topology.path: ignored, because topology.name is ring, which "
                              "does not read it.")),
    (["topology.name=erdos_renyi", "topology.k=3", "topology.s=2"],
     "topology.k, topology.s: ignored, because topology.name is erdos_renyi"),
])
def test_a_setting_nobody_reads_warns_once_naming_it_and_why(overrides, expected):
    found = ignored_warnings(TINY, overrides)
    assert len(found) == 1 and found[0].startswith(expected), found


@pytest.mark.parametrize("overrides", [
    [], ["topology.name=k_regular", "topology.k=2"], ["topology.name=epidemic", "topology.s=2"],
    ["algorithm.name=fedavg", "systems.deadline=2"],
    ["systems.availability.links.fail=0.2"],
])
def test_settings_that_are_read_do_not_warn(overrides):
    assert ignored_warnings(TINY, overrides) == []


def test_the_cli_prints_the_ignored_setting_once(work, capsys):
    code, _, err = gossipfl(capsys, "run", "tiny.yaml", "--quiet", "--out", ".", "--name", "r",
                            "--set", "systems.deadline=2", "--set", "train.rounds=1")
    assert code == 0, err
    assert err.count("systems.deadline: ignored") == 1


def test_tensorboard_through_the_python_run_warns(recwarn):
    import gossipfl
    from gossipfl.errors import IgnoredSetting

    config = {**TINY, "train": {**TINY["train"], "rounds": 1}, "output": {"tensorboard": True}}
    with pytest.warns(IgnoredSetting, match=r"output\.tensorboard: ignored, because "
                                            r"gossipfl\.run\(\) writes no run directory"):
        gossipfl.run(config)


# --------------------------------------------------------------------------------------------
# 4. Hangs and kills
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_signal_before_the_first_round_ends_stops_at_once(tmp_path, monkeypatch, signum):
    """A first round (or set-up in it) that takes long: the first signal stops it at once,
    since no round has finished that a checkpoint could save."""
    import os
    import signal
    import time

    from gossipfl.core.runner import Runner

    def long_round(self, t):
        os.kill(os.getpid(), getattr(signal, signum))
        time.sleep(5)  # the signal arrives here
        raise AssertionError("the round went on after the signal")

    prepared = prepare_fresh(load_config(TINY), tmp_path / "run")
    monkeypatch.setattr(Runner, "run_round", long_round)
    messages = []
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        execute(prepared, warn=messages.append)
    assert time.perf_counter() - start < 3
    assert messages == ["stopping now: no round has finished yet, so there is none to save"]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_done"] == 0


def test_after_a_round_the_first_signal_still_waits_for_the_round_end(tmp_path):
    import os
    import signal

    def signal_in_round_two(runner, t, row):
        if t == 0:
            os.kill(os.getpid(), signal.SIGINT)

    messages = []
    with pytest.raises(KeyboardInterrupt):
        execute(prepare_fresh(load_config(TINY), tmp_path / "run"), [signal_in_round_two],
                warn=messages.append)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["checkpoint_round"] == 1 and "stopping after the current round" in messages[0]


def test_a_local_test_size_too_large_for_memory_is_refused_before_allocation(work, capsys,
                                                                            monkeypatch):
    monkeypatch.setattr("gossipfl.engine.memory.available_memory", lambda device="cpu": 2000)
    monkeypatch.setattr("gossipfl.assembly.experiment.check_synthetic_size", lambda options: None)
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "big", "--set",
                       "data.local_test_size=40", "--set", "eval.personalized=true")
    assert err.startswith("error: data.local_test_size: local test splits of 40 "
                          "samples for each of 4 clients needs at least 3.8 KiB"), err
    assert not (work / "big").exists()


# --------------------------------------------------------------------------------------------
# 5. Tracebacks and misleading messages
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("content, expected", [
    (b"\x00\x01\xff\xfe", "is a binary file, not text with one number per client."),
    (b"0.1\n0.2\xff\n", "is not UTF-8 text (byte 7 is 0xff)."),
])
def test_an_unreadable_compute_speeds_file_is_one_sentence(work, capsys, content, expected):
    (work / "speeds.bin").write_bytes(content)
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "r", "--set",
                       "systems.compute.path=speeds.bin")
    assert err.startswith("error: systems.compute.path: '") and expected in err, err
    assert not (work / "r").exists()


@pytest.mark.parametrize("matrix, expected", [
    ([[0.5, 0.25, 0.25, 0], [0.5, 0.5], [0.25, 0.25, 0.5, 0], [0, 0, 0, 1]],
     "topology.matrix: the rows have different lengths (4, 2, 4, 4)"),
    ("m.csv", ("topology.matrix: got the file name 'm.csv'; a matrix file goes in "
              "topology.path")),
    ([["a", "b"], ["c", "d"]], "topology.matrix: must be an [M, M] array of numbers"),
])
def test_a_ragged_or_named_matrix_is_one_sentence_through_the_api(matrix, expected):
    import gossipfl

    config = {**TINY, "topology": {"name": "custom", "matrix": matrix}}
    with pytest.raises(GossipflError) as error:
        gossipfl.run(config)
    assert str(error.value).startswith(expected), error.value


def test_new_into_a_folder_that_cannot_be_made_is_one_sentence(tmp_path, capsys):
    err = one_sentence(capsys, "new", "model", "tinynet", "--out", "/proc/nope")
    assert "--out: cannot write to '/proc/nope': no folder can be made in '/proc'" in err


def test_a_typo_in_the_compression_lists_every_key_and_suggests_the_close_one(work, capsys):
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "r", "--set",
                       "topology.compression={compressor: top_k, fraction: 0.5, gama: 0.2}")
    assert "topology.compression.gama" in err and "did you mean 'gamma'?" in err
    assert "allowed: fraction, k, gamma, error_feedback." in err


def test_one_override_string_is_one_override():
    import gossipfl

    config = {**TINY, "train": {**TINY["train"], "rounds": 3}}
    result = gossipfl.run(config, overrides="train.rounds=1")
    assert [row["round"] for row in result.metrics] == [1]
    with pytest.raises(GossipflError, match=r"^overrides: must be a list of 'key\.path=value'"):
        gossipfl.run(config, overrides={"train.rounds": 1})


def test_one_target_string_is_one_target(tmp_path):
    import gossipfl

    execute(prepare_fresh(load_config({**TINY, "train": {**TINY["train"], "rounds": 2}}),
                          tmp_path / "run"))
    report = gossipfl.report(tmp_path / "run", targets="70%", out=tmp_path / "rep")
    assert report.targets == [0.7]
    assert gossipfl.load_study(tmp_path / "run", targets="70%").report.targets == [0.7]


def test_a_negative_round_of_the_topology_command_is_refused(capsys):
    err = one_sentence(capsys, "topology", "random_k", "--clients", "8", "--k", "2",
                       "--round", "-5")
    assert err == "error: --round: must be a round number >= 0 (rounds count from 0), got -5.\n"


def test_switching_the_model_drops_the_options_of_the_other_one_with_a_note():
    from gossipfl.cli import QUICKSTART
    from gossipfl.errors import IgnoredSetting

    assert QUICKSTART["model"].get("options")  # the mlp's hidden layers
    with pytest.warns(IgnoredSetting, match=r"model\.options\.hidden: dropped, because "
                                            r"model\.name is now logistic"):
        config = load_config(QUICKSTART, ["model.name=logistic"])
    assert config.model.options == {}
    with pytest.warns(IgnoredSetting, match=r"model\.options\.hidden: dropped"):
        kept = load_config(QUICKSTART, ["model.name=logistic", "model.options.bias=false"])
    assert kept.model.options == {"bias": False}
    with pytest.warns(IgnoredSetting, match=r"model\.options\.hidden: dropped"), \
            pytest.raises(GossipflError, match=r"model\.options\.hidden: not an option"):
        load_config(QUICKSTART, ["model.name=logistic", "model.options.hidden=[3]"])


def test_a_study_grid_over_models_drops_the_base_models_options():
    from gossipfl.studies.sweep import expand, load_study

    base = {**TINY, "model": {"name": "mlp", "options": {"hidden": [5]}}}
    study = load_study({"name": "models", "base": base, "grid": {"model.name": ["mlp", "logistic"]}})
    with pytest.warns(UserWarning):
        variants = expand(study)
    assert [v.config.model.options for v in variants] == [{"hidden": [5]}, {}]


# --------------------------------------------------------------------------------------------
# 4. gossipfl sweep --jobs N: exit status, a killed worker, Ctrl-C, --only
# --------------------------------------------------------------------------------------------
KILLER = '''import os
import signal

from torch import nn

from gossipfl.models import register_model


@register_model("killer")
def killer(input_shape, num_classes):
    """Killed by SIGKILL when built in a sweep's worker (as the OOM killer would)."""
    if os.environ.get("KILL_OUTSIDE") not in (None, str(os.getpid())):
        os.kill(os.getpid(), signal.SIGKILL)
    return nn.Linear(int(input_shape[-1]), num_classes)
'''


def parallel_study(tmp_path: Path, grid: dict, rounds: int = 1, **extra) -> Path:
    base = {**TINY, "train": {**TINY["train"], "rounds": rounds}, **extra}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "par", "out": str(tmp_path / "studies"),
                                    "base": base, "grid": grid, "seeds": [0]}))
    return path


@pytest.mark.slow
def test_sweep_jobs_survives_a_killed_worker_and_exits_1(tmp_path, capsys, monkeypatch):
    import os

    (tmp_path / "killer.py").write_text(KILLER)
    monkeypatch.setenv("KILL_OUTSIDE", str(os.getpid()))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path.cwd() / "src"),
                                                      os.environ.get("PYTHONPATH", "")]))
    study = parallel_study(tmp_path, {"model.name": ["logistic", "killer"]},
                           plugins=[str(tmp_path / "killer.py")])
    code, _, err = gossipfl(capsys, "sweep", str(study), "--jobs", "2")
    assert code == 1, err
    assert "failed: killer-seed0: its worker process was killed by SIGKILL" in err
    folder = tmp_path / "studies" / "par"
    assert json.loads((folder / "logistic-seed0" / "summary.json").read_text())["status"] \
        == "finished"
    assert (folder / "table.csv").is_file()


@pytest.mark.slow
def test_sweep_jobs_gives_the_sequential_numbers_and_then_skips(tmp_path):
    import os

    import gossipfl

    os.environ.setdefault("PYTHONPATH", str(Path.cwd() / "src"))
    study = parallel_study(tmp_path, {"train.lr": [0.1, 0.05]}, rounds=2)
    parallel = gossipfl.sweep(study, jobs=2)
    assert set(parallel.outcomes.values()) == {"ran"} and not parallel.failed
    sequential = gossipfl.sweep(study, out=tmp_path / "seq")
    timing = [c for c in parallel.table.columns if c.startswith("seconds_per_round")]
    assert parallel.table.drop(columns=timing).equals(sequential.table.drop(columns=timing))
    again = gossipfl.sweep(study, jobs=2)
    assert set(again.outcomes.values()) == {"skipped"}


@pytest.mark.slow
def test_ctrl_c_on_sweep_jobs_stops_the_workers_and_exits_130(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    study = parallel_study(tmp_path, {"train.lr": [0.1, 0.05]}, rounds=100000)
    env = {**os.environ, "PYTHONPATH": str(Path.cwd() / "src")}
    # SIGINT as a terminal gives it: a pytest-xdist worker ignores SIGINT, and a child would
    # inherit that (Python then installs no KeyboardInterrupt handler)
    as_in_a_terminal = ("import runpy, signal, sys; "
                        "signal.signal(signal.SIGINT, signal.default_int_handler); "
                        "sys.argv[0] = 'gossipfl'; runpy.run_module('gossipfl', "
                        "run_name='__main__', alter_sys=True)")
    process = subprocess.Popen([sys.executable, "-c", as_in_a_terminal, "sweep", str(study),
                                "--jobs", "2"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env,
                               start_new_session=True)
    folder = tmp_path / "studies" / "par"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(folder.glob("*/metrics.csv"))) < 2:
            time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:  # never leave the sweep and its workers running
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err
    assert "Resume with:" in err and "--jobs 2" in err
    for run in ("lr_0.1-seed0", "lr_0.05-seed0"):
        summary = json.loads((folder / run / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["checkpoint_round"] >= 1


def test_sweep_only_matching_nothing_is_one_sentence(tmp_path, capsys):
    study = parallel_study(tmp_path, {"train.lr": [0.1, 0.05]})
    err = one_sentence(capsys, "sweep", str(study), "--only", "nothing*")
    assert "--only: no run of the study matches nothing*; its runs are lr_0.1-seed0" in err


def test_sweep_jobs_below_one_is_one_sentence(tmp_path, capsys):
    study = parallel_study(tmp_path, {"train.lr": [0.1]})
    err = one_sentence(capsys, "sweep", str(study), "--jobs", "0")
    assert "--jobs: must be a whole number of worker processes >= 1, got 0." in err


def test_a_bad_speeds_file_of_a_later_grid_point_stops_the_study_before_any_run(tmp_path):
    from gossipfl.studies.sweep import load_study, run_study

    (tmp_path / "four.txt").write_text("0.1 0.1 0.1 0.1\n")
    (tmp_path / "three.txt").write_text("0.1 0.1 0.1\n")
    study = {"name": "late", "out": str(tmp_path / "studies"), "base": TINY,
             "grid": {"systems.compute.path": [str(tmp_path / "four.txt"),
                                               str(tmp_path / "three.txt")]}}
    with pytest.raises(GossipflError, match=r"systems\.compute\.path: .*three\.txt' holds 3 "
                                            r"values, but there are 4 clients"):
        run_study(load_study(study))
    assert not (tmp_path / "studies").exists()


@pytest.mark.parametrize("overrides, expected", [
    (["algorithm.head_epochs=1", "algorithm.head_steps=5"],
     "algorithm.head_epochs: 1 and algorithm.head_steps: 5 are both set on the command line"),
])
def test_head_steps_and_head_epochs_typed_together_are_refused(overrides, expected):
    base = {**TINY, "algorithm": {"name": "dfedmdc"}}
    with pytest.raises(GossipflError, match=expected):
        load_config(base, overrides)


def test_head_steps_from_a_later_level_replaces_head_epochs():
    base = {**TINY, "algorithm": {"name": "dfedmdc", "head_epochs": 3}}
    params = load_config(base, ["algorithm.head_steps=5"]).algorithm.params
    assert (params.head_steps, params.head_epochs) == (5, 1)


def test_a_time_varying_topology_too_large_for_memory_is_refused_before_its_rounds(
        monkeypatch):
    """one_peer_exponential on 10 000 clients was killed by the OOM killer at 18 GB (it is
    built as edges now): a time-varying topology that stays dense has its rounds' matrices
    counted before any is built."""
    from gossipfl.topology import build_topology

    monkeypatch.setattr("gossipfl.engine.memory.available_memory",  # (above 1 024 clients
                        lambda device="cpu": 40 << 20)  # every time-varying graph is edges)
    # one 1000×1000 pair fits, 4 rounds do not
    with pytest.raises(GossipflError, match=r"^data\.clients: the dense 1000×1000 matrices "
                                            r"of 4 rounds of the time-varying "
                                            r"authors_random topology needs at least"):
        build_topology("authors_random", 1000, k=4)



def test_a_study_prints_an_ignored_setting_once(tmp_path, capsys):
    base = {**TINY, "train": {**TINY["train"], "rounds": 1}, "systems": {"deadline": 3}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({
        "name": "once", "out": str(tmp_path), "base": base, "grid": {"train.lr": [0.1, 0.05]},
        "seeds": [0, 1]}))
    code, _, err = gossipfl(capsys, "sweep", str(tmp_path / "s.yaml"), "--quiet")
    assert code == 0, err
    assert err.count("systems.deadline: ignored") == 1, err
