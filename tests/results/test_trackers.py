"""Experiment trackers (gossipfl.output.trackers): W&B beside TensorBoard, offline, and a
tracker that is missing or fails never loses or stops a run (one warning)."""

from __future__ import annotations

import sys
import types

import pytest

from gossipfl.assembly.loading import load_config
from gossipfl.errors import GossipflError
from gossipfl.output.trackers import wandb_mode
from gossipfl.results.lifecycle import execute, prepare_fresh, prepare_resume
from gossipfl.results.rundir import RunDirectory
from tests.helpers import TINY as RESULTS_TINY

TINY: dict = {**RESULTS_TINY, "train": {**RESULTS_TINY["train"], "rounds": 4},
              "eval": {"every": 2}}


def tiny(*overrides: str):
    return load_config(TINY, list(overrides))


@pytest.fixture
def no_network_env(tmp_path, monkeypatch):
    """No API key, no mode from the environment, W&B's own folders inside tmp_path."""
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "WANDB_ENTITY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")


class FakeRun:
    def __init__(self, calls, fail):
        self.calls, self.fail = calls, fail

    def log(self, data, step):
        if "log" in self.fail:
            raise RuntimeError("log exploded")
        self.calls.append(("log", dict(data), step))

    def finish(self):
        if "finish" in self.fail:
            raise RuntimeError("finish exploded")
        self.calls.append(("finish",))


def fake_wandb(monkeypatch, fail=()):
    """A wandb module recording what it is given; ``fail`` names the calls that raise."""
    calls: list = []
    module = types.ModuleType("wandb")

    def init(**kwargs):
        if "init" in fail:
            raise RuntimeError("init exploded")
        calls.append(("init", kwargs))
        return FakeRun(calls, fail)

    module.init = init
    module.Settings = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "wandb", module)
    return calls


def finished_whole(outcome) -> None:
    run = RunDirectory(outcome.run_dir.path)
    assert outcome.status == "finished" and run.status() == "finished"
    assert [r["round"] for r in run.read_metrics()] == [2, 4]
    assert run.file("checkpoint.pt").is_file()


def test_wandb_logs_config_and_every_evaluated_row_offline(tmp_path, no_network_env,
                                                           monkeypatch):
    calls = fake_wandb(monkeypatch)
    outcome = execute(prepare_fresh(tiny("output.wandb=true"), tmp_path / "run"),
                      warn=pytest.fail)
    finished_whole(outcome)
    (_, init), *logs, finish = calls
    assert init["mode"] == "offline" and init["dir"] == str((tmp_path / "run").resolve())
    assert init["config"]["algorithm"]["name"] == "dfedavg"
    assert init["project"] == "gossipfl" and init["name"] == "run"
    assert [(step, data["test_acc"]) for _, data, step in logs] == \
        [(row["round"], row["test_acc"]) for row in outcome.result.metrics]
    assert finish == ("finish",)


def test_wandb_settings_are_passed_and_validated(tmp_path, no_network_env, monkeypatch):
    calls = fake_wandb(monkeypatch)
    config = tiny("output.wandb.project=lab", "output.wandb.entity=me",
                  "output.wandb.tags=[ring, tiny]", "output.wandb.mode=disabled")
    execute(prepare_fresh(config, tmp_path / "run"), warn=pytest.fail)
    init = calls[0][1]
    assert (init["project"], init["entity"], init["tags"], init["mode"]) == \
        ("lab", "me", ["ring", "tiny"], "disabled")
    for override, words in (("output.wandb=3", "output.wandb: must be true or false or a mapping"),
                            ("output.wandb.mode=cloud", "output.wandb.mode: unknown value"),
                            ("output.wandb.projet=x", "did you mean 'project'"),
                            ("output.wandb.tags=ring", "output.wandb.tags: must be a list")):
        with pytest.raises(GossipflError, match=words):
            tiny(override)


def test_wandb_mode_is_offline_without_an_api_key(no_network_env, monkeypatch):
    assert wandb_mode({}) == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode({}) == "online" and wandb_mode({"mode": "offline"}) == "offline"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_mode({}) == "offline"


@pytest.mark.parametrize("fail", ["init", "log", "finish"])
def test_a_failing_tracker_is_one_warning_and_the_run_goes_on(tmp_path, no_network_env,
                                                             monkeypatch, fail):
    fake_wandb(monkeypatch, fail=(fail,))
    warnings: list[str] = []
    outcome = execute(prepare_fresh(tiny("output.wandb=true", "output.tensorboard=false"),
                                    tmp_path / "run"), warn=warnings.append)
    finished_whole(outcome)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("output.wandb: the tracker failed in ")
    assert f"{fail} exploded" in warnings[0] and "the run goes on" in warnings[0]


def test_missing_wandb_package_is_one_warning(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    warnings: list[str] = []
    outcome = execute(prepare_fresh(tiny("output.wandb=true"), tmp_path / "run"),
                      warn=warnings.append)
    finished_whole(outcome)
    assert len(warnings) == 1 and warnings[0].startswith("output.wandb: the wandb package is "
                                                         "not installed")
    assert "gossipfl[wandb]" in warnings[0]


def test_both_trackers_share_one_interface(tmp_path, no_network_env, monkeypatch):
    """TensorBoard missing and W&B working: one warning, W&B still logs every row."""
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    calls = fake_wandb(monkeypatch)
    warnings: list[str] = []
    outcome = execute(prepare_fresh(tiny("output.wandb=true", "output.tensorboard=true"),
                                    tmp_path / "run"), warn=warnings.append)
    finished_whole(outcome)
    assert len(warnings) == 1 and warnings[0].startswith("output.tensorboard:")
    assert sum(call[0] == "log" for call in calls) == 2


def test_resumed_run_keeps_its_wandb_id(tmp_path, no_network_env, monkeypatch):
    calls = fake_wandb(monkeypatch)

    def stop_after_two(runner, t, row):
        if runner.round == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        execute(prepare_fresh(tiny("output.wandb=true"), tmp_path / "run"), [stop_after_two],
                warn=pytest.fail)
    execute(prepare_resume(tmp_path / "run"), warn=pytest.fail)
    inits = [call[1] for call in calls if call[0] == "init"]
    assert len(inits) == 2 and inits[0]["id"] == inits[1]["id"]
    assert inits[1]["resume"] == "allow"
    assert [step for call in calls if call[0] == "log" for step in [call[2]]] == [2, 4]


def test_real_wandb_offline_writes_its_files_under_the_run_directory(tmp_path, no_network_env,
                                                                     monkeypatch):
    """The wandb package itself (pip install 'gossipfl[wandb]'), offline, no network."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "60")
    warnings: list[str] = []
    outcome = execute(prepare_fresh(tiny("output.wandb.project=gossipfl-test"),
                                    tmp_path / "run"), warn=warnings.append)
    assert warnings == []
    finished_whole(outcome)
    runs = list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    (data,) = runs[0].glob("run-*.wandb")
    blob = data.read_bytes()
    assert b"test_acc" in blob and b"dfedavg" in blob  # the rows and the config
