"""What a finished run says (issue 52): a Byzantine run's summary, table and figures report the
honest clients throughout (its "local models" line averaged the Byzantine clients too), and a
Muffliato run prints and records its pairwise network-DP guarantee as a DP run prints the
privacy spent."""

from __future__ import annotations

import json

import pytest
import yaml

from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.engine import evaluate_stack
from gossipfl.results.rundir import RunDirectory
from tests.helpers import TINY, gossipfl

HONEST = [0, 2, 3]
BYZANTINE = {**TINY, "byzantine": {"clients": [1], "attack": "sign_flip"},
             "topology": {"name": "full", "robust": {"rule": "median"}},
             "train": {**TINY["train"], "rounds": 3}}


def run(work, capsys, config: dict, name: str) -> tuple[str, dict, list[dict]]:
    (work / f"{name}.yaml").write_text(yaml.safe_dump(config))
    code, out, err = gossipfl(capsys, "run", f"{name}.yaml", "--out", ".", "--name", name)
    assert code == 0, err
    folder = RunDirectory(work / name)
    return out, json.loads((work / name / "summary.json").read_text()), folder.read_metrics()


def test_a_byzantine_runs_local_models_line_is_over_the_honest_clients(work, capsys):
    out, summary, rows = run(work, capsys, BYZANTINE, "byz")
    runner = Runner(load_config(BYZANTINE))  # the same run, re-measured by hand
    runner.run()
    data = runner.exp.dataset
    acc, _ = evaluate_stack(runner.exp.oracle, runner.client_models()[HONEST], data.test_x,
                            data.test_y)
    assert summary["final_honest_local_acc_mean"] == pytest.approx(float(acc.mean()))
    assert summary["final_honest_local_acc_std"] == pytest.approx(float(acc.std()))
    everyone = summary["final_local_acc_mean"]
    assert everyone != pytest.approx(float(acc.mean()))  # the attacker pulls the mean down
    line = next(line for line in out.splitlines() if "local models" in line)
    assert line.split()[2:5] == [f"{100 * float(acc.mean()):.2f}", "±",
                                 f"{100 * float(acc.std()):.2f}"]
    assert line.endswith("(final, mean ± std over the honest clients)")
    assert summary["final_honest_consensus"] == rows[-1]["honest_consensus"]


def test_a_byzantine_runs_table_and_figures_are_over_the_honest_clients(work, capsys,
                                                                       monkeypatch):
    from gossipfl.results import reporting

    run(work, capsys, BYZANTINE, "byz")
    drawn = []
    real = reporting.curves_figure

    def spy(groups, y_key, x_key="round", metric=None, log_y=None):
        figure = real(groups, y_key, x_key, metric, log_y)
        drawn.append((y_key, [c.get_label() for a in figure.axes for c in a.get_lines()]))
        return figure

    monkeypatch.setattr(reporting, "curves_figure", spy)
    assert gossipfl(capsys, "report", "byz", "--out", "rep")[0] == 0
    table = (work / "rep" / "table.csv").read_text().splitlines()
    head, row = table[0].split(","), table[1].split(",")
    rows = RunDirectory(work / "byz").read_metrics()
    assert float(row[head.index("consensus_mean")]) == pytest.approx(
        rows[-1]["honest_consensus"])
    keys = [key for key, _ in drawn]
    assert "honest_consensus" in keys and "consensus" not in keys
    labels = [label for _, labels in drawn for label in labels]
    assert "local models (mean ± std over honest clients)" in labels


def test_a_muffliato_run_prints_and_records_its_pairwise_guarantee(work, capsys):
    config = {**TINY, "algorithm": {"name": "muffliato", "sigma": 0.5, "gossip_steps": 2,
                                    "alpha": 3.0}}
    out, summary, rows = run(work, capsys, config, "muff")
    assert summary["final_pndp_max"] == rows[-1]["pndp_max"] > 0
    assert summary["final_pndp_mean"] == rows[-1]["pndp_mean"]
    assert summary["pndp_alpha"] == 3.0
    line = next(line for line in out.splitlines() if "pairwise privacy" in line)
    assert line == (f"  pairwise privacy     ε(u→v) = {rows[-1]['pndp_max']:.3g} in Rényi DP of "
                    f"order α = 3  (largest over pairs u ≠ v; mean "
                    f"{rows[-1]['pndp_mean']:.3g})")
    out, summary, _ = run(work, capsys, TINY, "plain")
    assert "pairwise privacy" not in out and "final_pndp_max" not in summary
    assert "final_honest_local_acc_mean" not in summary
    assert "(final, mean ± std over the clients)" in out
