"""A fifth pass over what a user controls (a fuzzing of files, folders, the environment and
plugins): home folders in paths, the memory variable, plugins that fail while training."""

from __future__ import annotations

import pytest
import yaml

from gossipfl.assembly import plan
from gossipfl.errors import GossipflError
from tests.helpers import SMALL, one_sentence


@pytest.fixture
def registered():
    """The plugins a test registers are forgotten after it (other tests list every
    registered algorithm and topology)."""
    from gossipfl.algorithms import ALGORITHMS
    from gossipfl.topology.graphs import TOPOLOGY_KINDS

    before = {id(r): dict(r) for r in (ALGORITHMS, TOPOLOGY_KINDS)}
    yield
    for registry in (ALGORITHMS, TOPOLOGY_KINDS):
        registry.clear()
        registry.update(before[id(registry)])


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


def test_a_study_folder_given_as_out_with_a_home_folder_is_refused(tmp_path, home):
    """``out='~/studies/s'`` (a study folder) was not recognized and a nested s/s made."""
    import gossipfl

    gossipfl.sweep({"name": "s", "base": SMALL}, out=str(home / "studies"), quiet=True)
    with pytest.raises(GossipflError, match=r"^--out: '.*studies/s' is a study folder"):
        gossipfl.sweep({"name": "s", "base": SMALL}, out="~/studies/s", quiet=True)
    assert not (home / "studies" / "s" / "s").exists()


@pytest.mark.parametrize(("argv", "match"), [
    (["--set", "output.dir=~nosuchuser9/x"], ("error: output.dir: '~nosuchuser9/x' starts "
                                               "with the home folder of a user this machine "
                                               "does not know.")),
    (["--out", "~nosuchuser9/x"], "error: --out: '~nosuchuser9/x' starts with the home"),
    (["--plugin", "~nosuchuser9/p.py"], "error: --plugin: '~nosuchuser9/p.py' starts with"),
    (["--set", "topology.name=custom", "--set", "topology.path=~nosuchuser9/t.npy"],
     "error: topology.path: '~nosuchuser9/t.npy' starts with the home folder"),
])
def test_an_unknown_users_home_is_one_sentence(tmp_path, home, capsys, argv, match):
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(SMALL))
    assert one_sentence(capsys, "run", str(tmp_path / "exp.yaml"), "--quiet",
                        *argv).startswith(match)


@pytest.mark.parametrize(("where", "key"), [("env", "GOSSIPFL_DATA"), ("config", "data.root")])
def test_an_unknown_users_home_as_the_data_folder_is_one_sentence(tmp_path, home, capsys,
                                                                  monkeypatch, where, key):
    data = {"dataset": "fashion_mnist", "clients": 4}
    if where == "env":
        monkeypatch.setenv("GOSSIPFL_DATA", "~nosuchuser9/data")
    else:
        data["root"] = "~nosuchuser9/data"
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({**SMALL, "data": data}))
    assert one_sentence(capsys, "run", str(tmp_path / "exp.yaml"), "--dry-run").startswith(
        f"error: {key}: '~nosuchuser9/data' starts with the home folder of a user")


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


RAISES_IN_ROUND_2 = """
from gossipfl.algorithms import Algorithm, Work, register


@register
class Boom(Algorithm):
    name = "boom_alg"

    def begin_round(self, ctx, state):
        if ctx.round >= 1:
            raise ValueError("exploded")
        return Work(self.fed.gossip(state["x"], ctx.round))

    def end_round(self, ctx, state, work):
        state["x"] = work.y
"""

RETURNS_NO_WORK = """
from gossipfl.algorithms import Algorithm, register


@register
class NoWork(Algorithm):
    name = "no_work_alg"

    def begin_round(self, ctx, state):
        return 42
"""


def _run_plugin(tmp_path, capsys, source: str, algorithm: str, rounds: int) -> str:
    (tmp_path / "plug.py").write_text(source)
    cfg = {**SMALL, "algorithm": {"name": algorithm}, "train": {**SMALL["train"],
                                                                 "rounds": rounds}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(cfg))
    return one_sentence(capsys, "run", str(tmp_path / "exp.yaml"), "--quiet", "--plugin",
                        str(tmp_path / "plug.py"), "--out", str(tmp_path / "runs"),
                        "--name", "r")


def test_a_plugin_that_raises_while_training_is_one_sentence_with_its_place(tmp_path, capsys,
                                                                            registered):
    """It was the plugin's traceback and exit status 1, as for a bug of gossipfl's."""
    err = _run_plugin(tmp_path, capsys, RAISES_IN_ROUND_2, "boom_alg", 3)
    plug = tmp_path / "plug.py"
    assert err == (f"error: a plugin failed in round 2 (line 11 of {plug}): ValueError: "
                   f"exploded (results so far in {tmp_path / 'runs' / 'r'}).\n")
    assert (tmp_path / "runs" / "r" / "metrics.csv").is_file()


def test_an_algorithm_whose_round_is_not_work_is_named(tmp_path, capsys, registered):
    """begin_round returning 42 was an AttributeError in the local loop."""
    err = _run_plugin(tmp_path, capsys, RETURNS_NO_WORK, "no_work_alg", 1)
    assert err.startswith(f"error: algorithm.name: NoWork in {tmp_path / 'plug.py'}: "
                          f"begin_round must return a gossipfl.algorithms.Work (the round's "
                          f"working rows), got int.")
    assert not (tmp_path / "runs" / "r").exists()


def test_a_plugin_that_is_not_a_regular_file_is_called_so(capsys):
    """/dev/null was said not to exist."""
    assert one_sentence(capsys, "run", "--plugin", "/dev/null") == (
        "error: --plugin: plugin file '/dev/null' is not a regular file.\n")


@pytest.mark.parametrize(("name", "body", "match"), [
    ("raising_topo", "raise KeyError('k')", "failed to build (line 5 of {plug}): KeyError: 'k'"),
    ("wrong_topo", "return 'nope'", "must return a gossipfl Topology, got str."),
])
def test_a_plugin_topology_that_fails_to_build_is_named(tmp_path, capsys, registered, name,
                                                         body, match):
    """Its KeyError, or the AttributeError of its wrong result, was a traceback."""
    plug = tmp_path / "plug.py"
    plug.write_text("from gossipfl.topology import register_topology\n\n\n"
                    f"@register_topology('{name}')\n"
                    f"def {name}(m, mixing, seed, params): {body}\n")
    cfg = {**SMALL, "topology": {"name": name}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(cfg))
    err = one_sentence(capsys, "run", str(tmp_path / "exp.yaml"), "--quiet", "--plugin",
                       str(plug), "--out", str(tmp_path / "runs"))
    assert err == (f"error: topology.name: topology '{name}' ({name} in {plug}) "
                   f"{match.format(plug=plug)}\n")
    assert not (tmp_path / "runs").exists()
