"""``train.local_epochs`` and ``train.local_steps`` say one thing two ways: a config sets one.
A later level (--set over a file or the quickstart, a study's grid over its base) replaces the
other key; both at one level is a one-sentence error (exit status 2 from the command line)."""

from __future__ import annotations

import pytest

from gossipfl import cli
from gossipfl.assembly.loading import load_config
from gossipfl.errors import GossipflError
from gossipfl.studies.sweep import expand, load_study


def test_command_line_epochs_replace_the_quickstarts_steps():
    assert cli.QUICKSTART["train"]["local_steps"] == 10
    config = load_config(cli.QUICKSTART, ["train.local_epochs=1"])
    assert (config.train.local_epochs, config.train.local_steps) == (1, None)
    config = load_config({"train": {"local_epochs": 3}}, ["train.local_steps=4"])
    assert config.train.local_steps == 4 and config.train.local_epochs == 1
    config = load_config(cli.QUICKSTART, ["train.lr=0.05"])  # the others stay as they are
    assert config.train.local_steps == 10


def test_quickstart_file_matches_and_obeys_the_same_rule():
    config = load_config("examples/quickstart.yaml", ["train.local_epochs=2"])
    assert (config.train.local_epochs, config.train.local_steps) == (2, None)


@pytest.mark.parametrize("overrides, where", [
    ([], ""), (["train.local_epochs=2", "train.local_steps=5"], " on the command line")])
def test_both_at_one_level_is_one_sentence(overrides, where):
    base = {"train": {"local_epochs": 2, "local_steps": 5}} if not overrides else {}
    with pytest.raises(GossipflError) as err:
        load_config(base, overrides)
    message = str(err.value)
    assert message == (f"train.local_epochs: 2 and train.local_steps: 5 are both set{where}; "
                       f"set only one of them.")


def test_a_resolved_config_reads_back():
    """A run directory's config.yaml holds every key: local_epochs at its default with
    local_steps. That reads as local_steps; typed on the command line it is an error."""
    steps = load_config(cli.QUICKSTART)
    dumped = steps.to_dict()
    assert dumped["train"]["local_epochs"] == 1 and dumped["train"]["local_steps"] == 10
    assert load_config(dumped).train == steps.train
    assert load_config(steps, ["train.local_epochs=3"]).train.local_steps is None
    with pytest.raises(GossipflError, match="both set on the command line"):
        load_config({}, ["train.local_epochs=1", "train.local_steps=10"])


def test_both_on_the_command_line_exits_2(capsys):
    code = cli.main(["run", "--set", "train.local_epochs=1", "--set", "train.local_steps=3"])
    err = capsys.readouterr().err
    assert code == 2
    assert "train.local_epochs: 1 and train.local_steps: 3 are both set" in err
    assert err.strip().count("\n") == 0


def test_a_null_setting_replaces_nothing():
    config = load_config(cli.QUICKSTART, ["train.local_steps=null", "train.local_epochs=2"])
    assert (config.train.local_epochs, config.train.local_steps) == (2, None)
    config = load_config({"train": {"local_epochs": 2}}, ["train.local_steps=null"])
    assert (config.train.local_epochs, config.train.local_steps) == (2, None)


def test_study_grid_replaces_the_bases_other_key():
    study = load_study({"base": {**cli.QUICKSTART, "train": {**cli.QUICKSTART["train"]}},
                        "grid": {"train.local_epochs": [1, 2]}})
    configs = [v.config for v in expand(study)]
    assert [(c.train.local_epochs, c.train.local_steps) for c in configs] == [(1, None),
                                                                              (2, None)]
    study = load_study({"base": {"train": {"local_epochs": 2}},
                        "grid": {"train": [{"local_steps": 3}, {"lr": 0.5}]}})
    configs = [v.config for v in expand(study)]
    assert [(c.train.local_epochs, c.train.local_steps) for c in configs] == [(1, 3),
                                                                              (2, None)]
