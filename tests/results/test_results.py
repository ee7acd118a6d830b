"""Run directories, metrics files, resume, tables, figures (gossipfl.results, .plots)."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.output.plots import (
    Curve,
    line_figure,
    partition_figure,
    topology_figure,
    topology_positions,
)
from gossipfl.results.lifecycle import execute, prepare_fresh, prepare_resume
from gossipfl.results.reporting import (
    Run,
    bytes_to_target,
    comparison_table,
    config_labels,
    default_target,
    find_runs,
    group_runs,
    mean_curve,
    report,
    rounds_to_target,
    table_csv,
    table_markdown,
)
from gossipfl.results.rundir import (
    RunDirectory,
    metric_columns,
    metrics_from_csv,
    metrics_to_csv,
)
from tests.helpers import (
    Interrupt,
    assert_png,
    tiny,
    with_figures,
    without_timing,
)


# --------------------------------------------------------------------------------------------
# metrics.csv
# --------------------------------------------------------------------------------------------
def test_metrics_csv_round_trips_exactly():
    rows = [{"round": 1, "test_acc": 0.1 + 0.2, "bytes_total": 10**12, "extra": 1e-30},
            {"round": 2, "test_acc": 1 / 3, "bytes_total": 7, "seconds": 0.5}]
    back = metrics_from_csv(metrics_to_csv(rows))
    assert back == rows  # floats via repr: bit-exact; ints stay ints; absent stays absent
    assert isinstance(back[0]["bytes_total"], int)


def test_metric_columns_standard_order_then_others():
    rows = [{"zeta": 1, "seconds": 1, "round": 1}, {"test_acc": 0.5, "alpha": 2}]
    assert metric_columns(rows) == ["round", "test_acc", "seconds", "zeta", "alpha"]


# --------------------------------------------------------------------------------------------
# Run directories
# --------------------------------------------------------------------------------------------
def test_create_refuses_non_empty_directory(tmp_path):
    RunDirectory.create(tmp_path / "empty_ok")
    RunDirectory.create(tmp_path / "empty_ok")  # an empty folder is fine
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    with pytest.raises(GossipflError, match=r"^--out: run directory .*taken.* already exists"):
        RunDirectory.create(tmp_path / "taken", key="--out")


@with_figures
def test_run_writes_every_file(tmp_path):
    prepared = prepare_fresh(tiny(), tmp_path / "run")
    outcome = execute(prepared, warn=pytest.fail)
    run_dir = outcome.run_dir
    assert outcome.status == "finished"
    names = {p.name for p in run_dir.path.iterdir()}
    assert {"config.yaml", "metrics.csv", "summary.json", "checkpoint.pt", "accuracy.png",
            "accuracy_vs_bytes.png", "consensus.png"} <= names
    assert not [n for n in names if n.endswith(".tmp")]
    # config.yaml is the fully resolved config: it rebuilds the same config
    assert run_dir.read_config().to_dict() == tiny().to_dict()
    # metrics.csv holds exactly the result's rows
    assert run_dir.read_metrics() == outcome.result.metrics
    summary = json.loads(run_dir.file("summary.json").read_text())
    accs = [row["test_acc"] for row in outcome.result.metrics]
    assert summary["status"] == "finished" and summary["rounds_done"] == 6
    assert summary["final"] == accs[-1] and summary["best"] == max(accs)
    assert accs[summary["best_round"] - 1] == max(accs)
    state = run_dir.load_checkpoint()
    assert state["runner"]["round"] == 6
    for png in run_dir.path.glob("*.png"):
        assert_png(png)


def test_checkpoints_follow_checkpoint_every(tmp_path):
    seen = []

    def spy(runner, t, row):
        state = RunDirectory(tmp_path / "run").load_checkpoint()
        seen.append(None if state is None else state["runner"]["round"])

    execute(prepare_fresh(tiny("output.checkpoint_every=4", "train.rounds=9"),
                          tmp_path / "run"), [spy], warn=print)
    # the spy runs after the recorder: checkpoints at rounds 4 and 8
    assert seen == [None, None, None, 4, 4, 4, 4, 8, 8]


def _interrupted(tmp_path: Path, k: int, *overrides: str) -> Path:
    prepared = prepare_fresh(tiny(*overrides), tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        execute(prepared, [Interrupt(k)], warn=print)
    return tmp_path / "run"


@pytest.mark.represented
@pytest.mark.parametrize("k", [1, 3, 5])
def test_resume_repeats_the_uninterrupted_run(tmp_path, k):
    reference = execute(prepare_fresh(tiny(), tmp_path / "ref"), warn=print)
    path = _interrupted(tmp_path, k)
    summary = RunDirectory(path).read_summary()
    assert summary["status"] == "interrupted" and summary["rounds_done"] == k
    assert summary["checkpoint_round"] == (k // 2 * 2 or None)
    prepared = prepare_resume(path)
    assert prepared.runner.round == k // 2 * 2
    outcome = execute(prepared, warn=print)
    assert outcome.status == "finished"
    resumed = RunDirectory(path).read_metrics()
    assert without_timing(resumed) == without_timing(reference.result.metrics)
    assert torch.equal(outcome.result.params, reference.result.params)


def test_resume_rejects_changed_config_and_corrupt_checkpoint(tmp_path):
    path = _interrupted(tmp_path, 3)
    config = path / "config.yaml"
    original = config.read_text()
    config.write_text(original.replace("lr: 0.1", "lr: 0.2"))
    with pytest.raises(GossipflError, match="was changed after the checkpoint"):
        prepare_resume(path)
    config.write_text(original)
    (path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(GossipflError, match=r"checkpoint .* cannot be read"):
        prepare_resume(path)
    with pytest.raises(GossipflError, match="is not a run directory"):
        prepare_resume(tmp_path / "nowhere")


def test_resume_device_override_is_not_a_config_change(tmp_path):
    path = _interrupted(tmp_path, 3)
    assert prepare_resume(path, device="cpu").runner.round == 2


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def test_resume_restores_metrics_csv_from_the_checkpoint(tmp_path):
    """A finished run's checkpoint (round 6) in a run whose metrics.csv ends at round 3 (or
    has none) used to resume "after round 6 of 6" and finish with rounds 4-6 missing from
    metrics.csv: the checkpoint's rows are written again before the first round."""
    execute(prepare_fresh(tiny(), tmp_path / "done"), warn=print)
    done = without_timing(RunDirectory(tmp_path / "done").read_metrics())
    assert [r["round"] for r in done] == [1, 2, 3, 4, 5, 6]
    for damage in ("older", "deleted"):
        path = _interrupted(tmp_path / damage, 3)  # metrics.csv: rounds 1-3, checkpoint: 2
        own = {name: (path / name).read_bytes() for name in ("checkpoint.pt", "metrics.csv")}
        (path / "checkpoint.pt").write_bytes((tmp_path / "done" / "checkpoint.pt").read_bytes())
        if damage == "deleted":
            (path / "metrics.csv").unlink()
        assert execute(prepare_resume(path), warn=print).status == "finished"
        assert without_timing(RunDirectory(path).read_metrics()) == done
    # metrics.csv beyond its checkpoint (killed between the two writes) resumes as ever
    for name, data in own.items():
        (path / name).write_bytes(data)
    prepared = prepare_resume(path)
    assert prepared.runner.round == 2 and RunDirectory(path).read_metrics()[-1]["round"] == 3
    assert execute(prepared, warn=print).status == "finished"
    assert without_timing(RunDirectory(path).read_metrics()) == done


def test_bad_config_leaves_no_directory(tmp_path):
    with pytest.raises(GossipflError, match="topology.k"):
        prepare_fresh(tiny("topology.name=random_k", "topology.k=4"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_divergence_keeps_results_but_a_run_without_results_is_removed(tmp_path):
    def diverge_at(k):
        def callback(runner, t, row):
            if t + 1 == k:
                raise FloatingPointError("training diverged")
        return callback

    kept = execute(prepare_fresh(tiny(), tmp_path / "kept"), [diverge_at(3)], warn=print)
    assert kept.status == "failed" and isinstance(kept.error, FloatingPointError)
    assert RunDirectory(tmp_path / "kept").status() == "failed"
    assert len(RunDirectory(tmp_path / "kept").read_metrics()) == 3
    gone = execute(prepare_fresh(tiny("eval.every=5"), tmp_path / "gone"), [diverge_at(2)],
                   warn=print)
    assert gone.status == "failed" and not (tmp_path / "gone").exists()


def test_tensorboard_missing_package_warns(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    warnings: list[str] = []
    outcome = execute(prepare_fresh(tiny("output.tensorboard=true"), tmp_path / "run"),
                      warn=warnings.append)
    assert outcome.status == "finished"
    assert len(warnings) == 1 and warnings[0].startswith("output.tensorboard:")


def test_tensorboard_logs_every_evaluated_row(tmp_path, monkeypatch):
    logged: list[tuple] = []

    class FakeWriter:
        def __init__(self, log_dir, purge_step=None):
            logged.append(("open", Path(log_dir).name, purge_step))

        def add_scalar(self, key, value, global_step):
            logged.append((key, value, global_step))

        def flush(self):
            pass

        def close(self):
            logged.append(("close",))

    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = FakeWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    outcome = execute(prepare_fresh(tiny("output.tensorboard=true", "eval.every=3"),
                                    tmp_path / "run"), warn=pytest.fail)
    assert logged[0] == ("open", "tensorboard", None) and logged[-1] == ("close",)
    acc = [(v, step) for key, v, step in logged[1:-1] if key == "test_acc"]
    assert acc == [(row["test_acc"], row["round"]) for row in outcome.result.metrics]


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------
def fake_run(algorithm: str, seed: int, accs: list[float], lr: float = 0.1,
             status: str = "finished") -> Run:
    config = {"algorithm": {"name": algorithm}, "train": {"lr": lr}, "seed": seed,
              "name": f"{algorithm}-{seed}", "output": {"dir": f"out{seed}"}}
    rows = [{"round": 2 * (i + 1), "test_acc": a, "consensus": 0.1 * (i + 1),
             "bytes_total": 100 * (i + 1), "elapsed": 0.5 * (i + 1)}
            for i, a in enumerate(accs)]
    return Run(Path(f"/x/{algorithm}{seed}"), config, rows, {"status": status})


def test_rounds_to_target():
    rows = [{"round": 2, "acc": 0.3}, {"round": 4, "acc": 0.7}, {"round": 6, "acc": 0.6}]
    assert rounds_to_target(rows, "acc", 0.7) == 4
    assert rounds_to_target(rows, "acc", 0.3) == 2
    assert rounds_to_target(rows, "acc", 0.71) is None


def test_bytes_to_target_reads_the_first_round_reaching_it():
    rows = [{"round": 2, "acc": 0.3, "bytes_total": 10}, {"round": 4, "acc": 0.7,
            "bytes_total": 25}, {"round": 6, "acc": 0.8, "bytes_total": 40}]
    assert bytes_to_target(rows, "acc", 0.7) == 25.0
    assert bytes_to_target(rows, "acc", 0.75) == 40.0
    assert bytes_to_target(rows, "acc", 0.9) is None
    assert bytes_to_target([{"round": 1, "acc": 0.9}], "acc", 0.5) is None  # no byte count


def test_table_shows_bytes_to_each_target_over_the_runs_reaching_it():
    # fake_run: round 2(i+1), bytes 100(i+1); seed 0 reaches 0.6 at its 2nd row, seed 1 never
    runs = [fake_run("a", 0, [0.5, 0.6]), fake_run("a", 1, [0.5, 0.55])]
    table = comparison_table(group_runs(runs), "test_acc", [0.6, 0.9])
    assert table[0].bytes_to_target[0.6].mean == 200.0 and table[0].bytes_to_target[0.9] is None
    text = table_markdown(table)
    assert "| sent to 60% | sent to 90% |" in text and "| 200 B (1/2) | never |" in text
    assert "bytes_to_0.6_mean" in table_csv(table).splitlines()[0]


def test_clocked_runs_get_time_to_target_columns_and_others_do_not():
    runs = [fake_run("a", 0, [0.5, 0.6]), fake_run("a", 1, [0.55, 0.65])]
    plain = table_markdown(comparison_table(group_runs(runs), "test_acc", [0.6]))
    assert "time to" not in plain
    for run in runs:  # a systems section with availability only: the clocks stay at 0
        for row in run.metrics:
            row["sim_time"] = 0.0
    assert "time to" not in table_markdown(comparison_table(group_runs(runs), "test_acc", [0.6]))
    for run in runs:  # the systems clock: 1.5 s per evaluated row
        for i, row in enumerate(run.metrics):
            row["sim_time"] = 1.5 * (i + 1)
    table = comparison_table(group_runs(runs), "test_acc", [0.6])
    assert table[0].time_to_target[0.6].mean == (3.0 + 3.0) / 2
    assert "| time to 60% (s) |" in table_markdown(table)
    assert "time_to_0.6_mean" in table_csv(table).splitlines()[0]


def test_an_unset_key_groups_with_a_missing_one_and_stays_out_of_labels():
    """Runs written before a setting existed lack its key; later runs hold None."""
    old = fake_run("a", 0, [0.5])
    new = fake_run("a", 1, [0.6])
    new.config["topology"] = {"compression": None}
    other = fake_run("a", 2, [0.7])
    other.config["topology"] = {"compression": {"compressor": "sign"}}
    groups = group_runs([old, new, other])
    assert [len(g) for g in groups.values()] == [2, 1]
    assert next(iter(groups)) == "a" and "None" not in " ".join(groups)


def test_grouping_ignores_seed_name_and_output():
    runs = [fake_run("a", 0, [0.5]), fake_run("a", 1, [0.6]), fake_run("b", 0, [0.7]),
            fake_run("a", 0, [0.4], lr=0.05)]
    groups = group_runs(runs)
    assert list(groups) == ["a, lr=0.1", "b, lr=0.1", "a, lr=0.05"]
    assert [len(g) for g in groups.values()] == [2, 1, 1]


def test_config_labels_name_only_what_varies():
    configs = [{"algorithm.name": "x", "train.lr": 0.1, "data.alpha": 0.3},
               {"algorithm.name": "y", "train.lr": 0.1, "data.alpha": 0.3,
                "algorithm.momentum": 0.9}]
    assert config_labels(configs) == ["x", "y"]
    configs.append({**configs[1], "algorithm.momentum": 0.5})
    assert config_labels(configs) == ["x", "y, momentum=0.9", "y, momentum=0.5"]
    assert config_labels([{"algorithm.name": "x"}] * 2) == ["x", "x #2"]


def test_comparison_table_matches_numpy():
    runs = [fake_run("a", 0, [0.2, 0.6, 0.5]), fake_run("a", 1, [0.4, 0.5, 0.7]),
            fake_run("a", 2, [0.1, 0.2, 0.3]), fake_run("b", 0, [0.9, 0.9, 0.9]),
            fake_run("b", 1, [0.0], status="failed")]
    table = comparison_table(group_runs(runs), "test_acc", [0.5])
    a, b = table
    assert a.label == "a" and a.runs == 3 and a.failed == 0
    assert math.isclose(a.final.mean, np.mean([0.5, 0.7, 0.3]))
    assert math.isclose(a.final.std, np.std([0.5, 0.7, 0.3], ddof=1))
    assert math.isclose(a.best.mean, np.mean([0.6, 0.7, 0.3]))
    stat, reached = a.to_target[0.5]
    assert reached == 2 and stat.mean == np.mean([4, 4])  # rounds 2, 4, 6; seed 2 never
    assert math.isclose(a.seconds_per_round, 0.25) and a.bytes_total == 300
    assert b.runs == 1 and b.failed == 1 and b.final.std == 0.0
    markdown = table_markdown(table, "test_acc")
    assert "| a | 3 | 50.00 ± 20.00 | 53.33 ± 20.82 | 4.0 ± 0.0 (2/3) |" in markdown
    assert "| b | 1 (1 failed) | 90.00 | 90.00 | 2 |" in markdown


def test_default_target_is_reached_by_every_configuration():
    groups = group_runs([fake_run("a", 0, [0.2, 0.63]), fake_run("b", 0, [0.9, 0.81])])
    assert default_target(groups, "test_acc") == pytest.approx(0.6)


def test_mean_curve_uses_rounds_common_to_all_seeds():
    r1, r2 = fake_run("a", 0, [0.2, 0.4, 0.6]), fake_run("a", 1, [0.4, 0.8])
    x, mean, std = mean_curve([r1, r2], "round", "test_acc")
    assert x.tolist() == [2, 4]
    assert np.allclose(mean, [0.3, 0.6]) and np.allclose(std, [0.1, 0.2])


@pytest.mark.slow
def test_report_on_run_directories(tmp_path):
    for seed in (0, 1):
        execute(prepare_fresh(tiny(f"seed={seed}"), tmp_path / "runs" / f"s{seed}"),
                warn=print)
    execute(prepare_fresh(tiny("train.lr=0.05"), tmp_path / "runs" / "slow"), warn=print)
    runs = find_runs([tmp_path / "runs"])
    assert len(runs) == 3
    result = report(runs, tmp_path / "out", targets=[0.5])
    assert [row.label for row in result.table] == ["lr=0.1", "lr=0.05"]
    assert result.table[0].runs == 2
    finals = [r.metrics[-1]["test_acc"] for r in runs if r.config["train"]["lr"] == 0.1]
    assert math.isclose(result.table[0].final.mean, np.mean(finals))
    assert (tmp_path / "out" / "table.md").read_text() == result.markdown
    for name in ("accuracy.png", "accuracy_vs_bytes.png", "consensus.png"):
        assert_png(tmp_path / "out" / name)
    with pytest.raises(GossipflError, match="no run directories"):
        find_runs([tmp_path / "out"])


# --------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------
def test_figures_are_png(tmp_path):
    x = np.arange(1, 6)
    curves = [Curve("a", x, x / 10, x / 100), Curve("b", x * 1e6, np.ones(5) * 0.5)]
    assert_png(line_figure(curves, tmp_path / "l.png", xlabel="x", ylabel="y", y_scale=100,
                           bytes_x=True))
    assert_png(line_figure(curves[:1], tmp_path / "log.png", xlabel="x", ylabel="y",
                           log_y=True))
    assert_png(partition_figure(np.arange(12).reshape(4, 3), tmp_path / "p.png", title="t"))
    ring = np.roll(np.eye(6), 1, axis=1) + np.roll(np.eye(6), -1, axis=1)
    assert_png(topology_figure(ring, tmp_path / "t.png", title="ring"))


def test_curves_past_ten_colours_differ_in_line_style():
    """tab10 has ten colours: curve 10 shares curve 0's colour, so it is drawn dashed (and
    curve 20 dotted); a style a curve asks for is kept."""
    from gossipfl.output.plots import lines

    x = np.arange(3)
    curves = [Curve(str(i), x, x + i) for i in range(21)] + [Curve("own", x, x, style="o")]
    drawn = lines(curves, xlabel="x", ylabel="y").axes[0].get_lines()
    keys = [(line.get_color(), line.get_linestyle()) for line in drawn[:21]]
    assert len(set(keys)) == 21
    assert [drawn[i].get_linestyle() for i in (0, 9, 10, 19, 20)] == ["-", "-", "--", "--", ":"]
    assert drawn[21].get_marker() == "o" and drawn[21].get_linestyle() == "None"


@pytest.mark.slow
def test_a_long_legend_goes_below_the_axes_and_fits_the_figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from gossipfl.output.plots import lines

    x = np.arange(3)
    few = lines([Curve("a", x, x), Curve("b", x, x + 1)], xlabel="x", ylabel="y")
    assert few.axes[0].get_legend() is not None and not few.legends
    label = "dsgt, custom, rounds=500, local_steps=1, every=25, mixing=custom, path=" + "p" * 30
    for curves in ([Curve(str(i), x, x + i) for i in range(12)], [Curve(label, x, x)]):
        fig = lines(curves, xlabel="x", ylabel="y")
        assert fig.axes[0].get_legend() is None and len(fig.legends) == 1
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        box, page = fig.legends[0].get_window_extent(renderer), fig.bbox
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0
        assert box.y1 <= fig.axes[0].get_window_extent(renderer).y0  # below the axes


def test_topology_positions():
    a = np.ones((6, 6)) - np.eye(6)
    circle = topology_positions(a)
    assert np.allclose(np.linalg.norm(circle, axis=1), 1.0)
    grid = topology_positions(a, "grid", grid=(2, 3))
    assert grid.tolist() == [[0, 0], [1, 0], [2, 0], [0, -1], [1, -1], [2, -1]]
    assert topology_positions(a, "spring").shape == (6, 2)


def test_runner_state_survives_checkpoint_round_trip(tmp_path):
    runner = Runner(tiny())
    runner.run()
    run_dir = RunDirectory.create(tmp_path / "r")
    run_dir.save_checkpoint(runner)
    other = Runner(tiny())
    other.load_state_dict(run_dir.load_checkpoint()["runner"])
    assert other.round == runner.round and other.rows == runner.rows
    assert torch.equal(other.client_models(), runner.client_models())


def test_comparison_table_reports_final_consensus_distance():
    from gossipfl.results.reporting import Run, comparison_table, table_csv, table_markdown

    def run(seed, consensus):
        rows = [{"round": 1, "test_acc": 0.5, "consensus": 2 * consensus},
                {"round": 2, "test_acc": 0.6, "consensus": consensus}]
        return Run(path=None, config={"seed": seed}, metrics=rows,
                   summary={"status": "finished"})

    table = comparison_table({"a": [run(0, 0.1), run(1, 0.3)]}, "test_acc", [0.55])
    assert table[0].consensus.mean == pytest.approx(0.2)
    assert "final consensus distance" in table_markdown(table, "test_acc")
    assert "0.2 ± 0.14" in table_markdown(table, "test_acc")
    assert "consensus_mean" in table_csv(table, "test_acc")
