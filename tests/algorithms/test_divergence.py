"""Divergence is caught: NaN/inf loss or parameters, or a consensus distance above
train.max_consensus, stop the run with one sentence, status ``diverged``, the metrics so far
kept, exit status 3 from the CLI, and a sweep that records it and goes on."""

from __future__ import annotations

import pytest
import torch
import yaml

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.errors import Diverged
from gossipfl.results.lifecycle import execute, prepare_fresh
from gossipfl.results.rundir import RunDirectory
from gossipfl.studies.sweep import load_study, run_study
from tests.helpers import TINY
from tests.helpers import gossipfl as command
from tests.lsq import Problem, ring_mh

# OledFL at β = 0.99 on a ring of 4 (1/3 weights): the synchronous Ole recursion grows
# disagreement by 1.65 per round and passes the default bound 1e6 after about 24 rounds; the
# sequential order is stable
EXPLODING = {**TINY, "algorithm": {"name": "oledfl", "beta": 0.99, "lam": 0.0},
             "train": {**TINY["train"], "rounds": 40}, "output": {"checkpoint_every": 0}}
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_nan_stops_the_run_with_one_sentence():
    p = Problem(clients=5)
    config = p.config({"name": "dfedavg"}, W=ring_mh(5), rounds=200, lr=10.0, decay=1.0)
    config["train"]["max_consensus"] = None  # only NaN/inf can stop it
    with pytest.raises(Diverged, match=r"^dfedavg diverged at round \d+: the (training loss "
                                       r"is (nan|inf)|parameters hold NaN or inf)\.$"):
        gossipfl.run(config)


def test_consensus_bound():
    config = {**TINY, "train": {**TINY["train"], "max_consensus": 1e-12}}
    with pytest.raises(Diverged, match=r"round 1: the consensus distance .* exceeds "
                                       r"train.max_consensus 1e-12\."):
        gossipfl.run(config)
    assert gossipfl.run({**TINY, "train": {**TINY["train"], "max_consensus": None}}).metrics


def test_bad_bound_is_refused():
    with pytest.raises(gossipfl.GossipflError, match="train.max_consensus: must be > 0"):
        load_config({"train": {"max_consensus": -1.0}})


@pytest.mark.slow
def test_diverged_run_keeps_its_metrics(tmp_path):
    outcome = execute(prepare_fresh(load_config(EXPLODING), tmp_path / "run"), warn=print)
    assert outcome.status == "diverged" and isinstance(outcome.error, Diverged)
    run_dir = RunDirectory(tmp_path / "run")
    summary = run_dir.read_summary()
    assert summary["status"] == "diverged" and "diverged at round" in summary["error"]
    assert len(run_dir.read_metrics()) == summary["rounds_done"] >= 10


@pytest.mark.slow
def test_cli_exits_3(work, capsys):
    (work / "boom.yaml").write_text(yaml.safe_dump(EXPLODING))
    code, _, err = command(capsys, "run", "boom.yaml", "--out", ".", "--name", "boom", "--quiet")
    last = err.splitlines()[-1]  # (a stability warning may come first)
    assert code == 3 and "Traceback" not in err
    assert last.startswith("error: oledfl diverged at round") and last.endswith(
        "(results so far in boom)")
    assert RunDirectory(work / "boom").status() == "diverged"


@pytest.mark.slow
def test_sweep_records_a_diverged_run_and_goes_on(tmp_path):
    study = load_study({"name": "s", "base": EXPLODING,
                        "grid": {"topology.order": ["synchronous", "sequential"]}})
    warnings = []
    outcome = run_study(study, out=tmp_path, log=lambda _m: None, warn=warnings.append)
    assert list(outcome.outcomes.values()) == ["ran", "ran"]
    statuses = [RunDirectory(outcome.path / v.dirname).status() for v in outcome.variants]
    assert statuses == ["diverged", "finished"]
    assert len(warnings) == 1 and " diverged: oledfl diverged at round" in warnings[0]
    rows = {row.label: row for row in outcome.report.table}
    assert "(diverged at round" in outcome.report.markdown
    assert [row.runs for row in rows.values()] == [0, 1]
    again = run_study(study, out=tmp_path, log=lambda _m: None, warn=warnings.append)
    assert set(again.outcomes.values()) == {"skipped"}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), None])
def test_nonfinite_parameters_are_found_by_the_sum(bad):
    from gossipfl.core.runner import has_nonfinite
    x = torch.randn(7, 50)
    assert not has_nonfinite(x)
    if bad is None:  # +inf and -inf together: the sum is NaN
        x[2, 3], x[5, 40] = float("inf"), float("-inf")
    else:
        x[4, 17] = bad
    assert has_nonfinite(x)
