"""A fifth pass over what a user controls (a fuzzing of files, folders, the environment and
plugins): home folders in paths, the memory variable, plugins that fail while training."""

from __future__ import annotations

import pytest
import yaml

from gossipfl.assembly import plan
from gossipfl.errors import GossipflError
from tests.helpers import one_sentence

SMALL = {
    "data": {"dataset": "synthetic", "clients": 4,
             "options": {"dim": 6, "train_size": 60, "test_size": 20, "num_classes": 3}},
    "model": {"name": "mlp", "options": {"hidden": [8]}},
    "topology": {"name": "ring"},
    "algorithm": {"name": "dfedavg"},
    "train": {"rounds": 1, "local_steps": 1, "batch_size": 8, "lr": 0.1},
}


@pytest.fixture
def home(tmp_path, monkeypatch):
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.chdir(tmp_path)
    return folder


@pytest.mark.parametrize("where", ["config", "--out"])
def test_a_home_folder_in_the_output_folder_is_expanded(tmp_path, home, capsys, where):
    """``output.dir: ~/runs`` (no shell expands a config) made a folder named '~' here."""
    cfg = {**SMALL, "output": {"dir": "~/runs"}} if where == "config" else SMALL
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(cfg))
    extra = ["--out", "~/runs"] if where == "--out" else []
    from gossipfl import cli

    assert cli.main(["run", str(tmp_path / "exp.yaml"), "--quiet", *extra]) == 0
    assert not (tmp_path / "~").exists()
    assert len(list((home / "runs").iterdir())) == 1


def test_a_home_folder_in_a_study_out_is_expanded(tmp_path, home):
    import gossipfl

    done = gossipfl.sweep({"name": "s", "base": SMALL, "out": "~/studies"}, quiet=True)
    assert done.runs is not None and (home / "studies" / "s" / "study.yaml").is_file()
    assert not (tmp_path / "~").exists()


@pytest.mark.parametrize(("argv", "match"), [
    (["--set", "output.dir=~nosuchuser9/x"], "error: output.dir: '~nosuchuser9/x' starts "
                                               "with the home folder of a user this machine "
                                               "does not know."),
    (["--out", "~nosuchuser9/x"], "error: --out: '~nosuchuser9/x' starts with the home"),
])
def test_an_unknown_users_home_is_one_sentence(tmp_path, home, capsys, argv, match):
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(SMALL))
    assert one_sentence(capsys, "run", str(tmp_path / "exp.yaml"), "--quiet",
                        *argv).startswith(match)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-1", "9e18G", "x"])
def test_the_memory_variable_must_be_a_number_of_bytes(monkeypatch, value):
    """NaN, infinities and numbers past int64 were int()'s ValueError or OverflowError."""
    monkeypatch.setenv(plan.MEMORY_ENV, value)
    with pytest.raises(GossipflError, match=rf"^GOSSIPFL_MEMORY_AVAILABLE: expected bytes "
                                            rf"such as 1073741824, 512M or 24G, got "
                                            rf"'{value}'\.$"):
        plan.memory_budget()


@pytest.mark.parametrize(("value", "expected"), [("0", 0), ("1.5K", 1536), ("2G", 2 ** 31)])
def test_the_memory_variable_reads_binary_units(monkeypatch, value, expected):
    monkeypatch.setenv(plan.MEMORY_ENV, value)
    assert plan.memory_budget().available == expected
