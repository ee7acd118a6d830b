"""Studies (gossipfl.sweep): schema, grid expansion, running, skipping, resuming; examples."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.results.rundir import RunDirectory
from gossipfl.studies.sweep import expand, load_study, run_study, set_key, study_path
from tests.helpers import TINY, without_timing

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")

ROOT = Path(__file__).resolve().parents[2]


def study(**fields) -> dict:
    return {"name": "s", "base": TINY, **fields}


def quiet(_message: str) -> None:
    pass


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "message"), [
    ({"bas": {}}, r"^study.bas: unknown key \(did you mean 'base'\?\)"),
    ({"grid": {"train.lr": 0.1}}, r"^study.grid.train.lr: must be a non-empty list"),
    ({"grid": {"train.lr": []}}, r"^study.grid.train.lr: must be a non-empty list"),
    ({"grid": [1, 2]}, r"^study.grid\[0\]: a point must map config keys to values"),
    ({"grid": "lr"}, r"^study.grid: must map config keys to lists of values \(their product"),
    ({"grid": []}, r"^study.grid: an empty list of points"),
    ({"seeds": [0, "one"]}, r"^study.seeds: must be a non-empty list of integers"),
    ({"seeds": [1, 1]}, r"^study.seeds: lists a seed twice"),
    ({"targets": [0.5, 70]}, r"^study.targets: accuracies must be numbers in \(0, 1\]"),
    ({"base": 3}, r"^study.base: must be a config mapping or the path"),
    ({"name": ""}, r"^study.name: must be a non-empty string"),
])
def test_bad_study_files(raw, message):
    with pytest.raises(GossipflError, match=message):
        load_study(raw)


def test_base_path_is_relative_to_the_study_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.yaml").write_text(yaml.safe_dump(TINY))
    (tmp_path / "sub" / "my_study.yaml").write_text(yaml.safe_dump({"base": "base.yaml"}))
    parsed = load_study(tmp_path / "sub" / "my_study.yaml", ["train.rounds=2"])
    assert parsed.name == "my_study" and parsed.base["train"]["rounds"] == 2
    assert parsed.seeds == [0]  # the base seed when none are given


def test_set_key_semantics():
    raw = {"algorithm": {"name": "dfedavgm", "momentum": 0.5}, "data": {"alpha": 0.3,
                                                                      "clients": 4}}
    set_key(raw, "algorithm", {"name": "dfedavg"})  # replaces the whole section
    set_key(raw, "data", {"alpha": 0.6})  # merges into the section
    set_key(raw, "train.lr", 0.05)  # sets one key, creating the section
    assert raw == {"algorithm": {"name": "dfedavg"}, "data": {"alpha": 0.6, "clients": 4},
                   "train": {"lr": 0.05}}
    set_key(raw, "algorithm", "dpsgd")
    assert raw["algorithm"] == {"name": "dpsgd"}


def test_expand_is_the_product_of_grid_and_seeds():
    parsed = load_study(study(grid={"algorithm": [{"name": "dfedavg"},
                                                  {"name": "dfedavgm", "momentum": 0.5}],
                                    "train.lr": [0.1, 0.05], "data.alpha": [0.3]},
                              seeds=[3, 4]))
    variants = expand(parsed)
    assert len(variants) == 2 * 2 * 2
    assert [v.label for v in variants[::2]] == [
        "dfedavg, lr=0.1", "dfedavg, lr=0.05", "dfedavgm, lr=0.1", "dfedavgm, lr=0.05"]
    assert [v.seed for v in variants[:2]] == [3, 4]
    assert len({v.dirname for v in variants}) == 8
    last = variants[-1].config
    assert last.algorithm.name == "dfedavgm" and last.algorithm.params.momentum == 0.5
    assert last.train.lr == 0.05 and last.seed == 4 and last.data.alpha == 0.3
    # the base's other keys are kept
    assert last.data.clients == TINY["data"]["clients"]


def test_a_grid_of_points_runs_exactly_those_points():
    parsed = load_study(study(grid=[{"algorithm": {"name": "fedavg", "participation": 0.5}},
                                    {"algorithm": "dfedavg", "topology.name": "ring"},
                                    {"algorithm": "dfedavg", "topology.name": "full"}],
                              seeds=[1, 2]))
    variants = expand(parsed)
    assert [(v.config.algorithm.name, v.seed) for v in variants] == [
        ("fedavg", 1), ("fedavg", 2), ("dfedavg", 1), ("dfedavg", 2), ("dfedavg", 1),
        ("dfedavg", 2)]
    assert [v.config.topology.name for v in variants[2:]] == ["ring", "ring", "full", "full"]
    assert len({v.dirname for v in variants}) == 6


def test_expand_validates_every_config_first():
    with pytest.raises(GossipflError, match=r"^algorithm.momentum: unknown key"):
        expand(load_study(study(grid={"algorithm": [{"name": "dfedavg", "momentum": 0.9}]})))


def test_a_gossip_order_a_grid_point_cannot_run_is_refused_before_any_run(tmp_path):
    """Issue 24: the sequential order's refusal of gossip_steps > 1 comes when the study is
    expanded, naming the grid point, not after the earlier points trained."""
    base = {**TINY, "topology": {**TINY.get("topology", {}), "name": "ring",
                                 "order": "sequential"}}
    raw = {"name": "s", "base": base, "out": str(tmp_path),
           "grid": {"algorithm": [{"name": "dfedavg"}, {"name": "dfedavg", "gossip_steps": 2}]}}
    with pytest.raises(GossipflError, match=r"^topology.order: sequential .*gossip_steps: 1, "
                                            r"got 2 \(in the study's grid point"):
        run_study(load_study(raw), log=quiet)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("analysis, algorithm, message", [
    ({"top_k": 10**9}, {"name": "dfedavg"},
     r"^study.analysis.top_k: must be at most P = \d+ \(the model's parameters\), got 1000000000"),
    ({"models": "local"}, {"name": "fedavg"}, r"^study.analysis.models: 'fedavg' is centralized"),
])
def test_what_the_analysis_asks_of_every_grid_point_is_checked_before_any_run(
        tmp_path, analysis, algorithm, message):
    raw = {"name": "s", "base": TINY, "out": str(tmp_path), "analysis": analysis,
           "grid": {"algorithm": [{"name": "dfedavg"}, algorithm]}}
    with pytest.raises(GossipflError, match=message):
        run_study(load_study(raw), log=quiet)
    assert not any(tmp_path.iterdir())


def test_study_path(tmp_path):
    assert study_path(load_study(study())) == Path("runs") / "s"
    assert study_path(load_study(study(out="elsewhere"))) == Path("elsewhere") / "s"
    assert study_path(load_study(study()), tmp_path) == tmp_path / "s"


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------
GRID = {"algorithm": [{"name": "dfedavg"}, {"name": "dpsgd"}]}


@pytest.mark.slow
def test_run_study_then_rerun_skips(tmp_path):
    parsed = load_study(study(grid=GRID, seeds=[0, 1], targets=[0.4]))
    first = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail)
    assert set(first.outcomes.values()) == {"ran"} and len(first.outcomes) == 4
    table = first.report.table
    assert [row.label for row in table] == ["dfedavg", "dpsgd"]
    assert all(row.runs == 2 for row in table)
    # every run equals the same config run on its own
    variant = first.variants[1]
    alone = Runner(variant.config).run()
    recorded = RunDirectory(first.path / variant.dirname).read_metrics()
    assert without_timing(recorded) == without_timing(alone.metrics)
    assert (first.path / "study.yaml").is_file() and (first.path / "table.csv").is_file()
    second = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail)
    assert set(second.outcomes.values()) == {"skipped"}
    assert second.report.markdown == first.report.markdown


@pytest.mark.slow
def test_run_study_resumes_interrupted_runs(tmp_path):
    parsed = load_study(study(grid=GRID))
    done = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail)
    path = done.path / done.variants[0].dirname
    reference = without_timing(RunDirectory(path).read_metrics())
    summary = RunDirectory(path).read_summary()
    RunDirectory(path).write_summary({**summary, "status": "interrupted"})
    again = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail)
    assert list(again.outcomes.values()) == ["resumed", "skipped"]
    assert without_timing(RunDirectory(path).read_metrics()) == reference


@pytest.mark.slow
def test_run_study_refuses_a_run_directory_with_another_config(tmp_path):
    parsed = load_study(study(grid=GRID))
    done = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail)
    changed = load_study(study(grid=GRID, base={**TINY, "train": {**TINY["train"],
                                                                  "lr": 0.07}}))
    changed.base["name"] = "tiny"
    with pytest.raises(GossipflError, match="holds a different config"):
        run_study(changed, out=tmp_path, log=quiet, warn=pytest.fail)
    assert done.path.is_dir()


@pytest.mark.parametrize("damage", ["", "round,train_loss\nx,y\n"])
def test_a_finished_run_whose_metrics_are_damaged_is_said_not_skipped(tmp_path, damage):
    """It was skipped as done, and the table left it out with a warning (exit 0)."""
    parsed = load_study(study(base={**TINY, "train": {**TINY["train"], "rounds": 1}},
                              seeds=[0, 1]))
    done = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail)
    damaged = done.path / done.variants[1].dirname
    (damaged / "metrics.csv").write_text(damage)
    with pytest.raises(GossipflError, match=rf"^study: run directory '{damaged}' is finished, "
                                            rf"but {damaged / 'metrics.csv'} is (empty|damaged "
                                            rf"\(line 2\)), so the study's table would leave "
                                            rf"it out; restore the file or remove the folder"):
        run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail)


def test_a_bad_first_run_creates_nothing(tmp_path):
    bad = load_study(study(grid={"topology.k": [10]}, base={**TINY, "topology": {
        "name": "random_k"}}))
    with pytest.raises(GossipflError, match="topology.k"):
        run_study(bad, out=tmp_path, log=quiet, warn=pytest.fail)
    assert list(tmp_path.iterdir()) == []


def test_grid_points_whose_labels_make_one_folder_get_their_own():
    parsed = load_study(study(grid={"data.root": ["/tmp/x/y", "/tmp/x_y"]}, seeds=[0, 1]))
    assert [v.dirname for v in expand(parsed)] == [
        "root_tmp_x_y-seed0", "root_tmp_x_y-seed1", "root_tmp_x_y_2-seed0",
        "root_tmp_x_y_2-seed1"]


def test_studies_whose_names_make_one_folder_are_told_apart(tmp_path):
    """``a/b`` and ``a b`` are both the folder ``a_b``: the second is refused, naming the
    first, instead of replacing its study.yaml; the same study runs there again."""
    base = {**TINY, "train": {**TINY["train"], "rounds": 1}}
    first = run_study(load_study({"name": "a/b", "base": base}), out=tmp_path, log=quiet,
                      warn=pytest.fail)
    assert first.path == tmp_path / "a_b"
    with pytest.raises(GossipflError, match=r"^study.name: 'a b' is written to .*a_b', which "
                                            r"holds the study 'a/b' \(both names become "
                                            r"'a_b' as a folder name\); rename"):
        run_study(load_study({"name": "a b", "base": {**base, "seed": 3}}), out=tmp_path,
                  log=quiet, warn=pytest.fail)
    assert load_study(first.path / "study.yaml").name == "a/b"
    again = run_study(load_study({"name": "a/b", "base": base}), out=tmp_path, log=quiet,
                      warn=pytest.fail)
    assert set(again.outcomes.values()) == {"skipped"}


@pytest.mark.parametrize("pack", [False, True])
def test_a_progress_that_fails_leaves_no_lock_and_no_folder(tmp_path, pack):
    """``progress(prepared, name)`` raising (the researcher's own bar) is their error, raised;
    the runs it was made for never started: no lock held in this process, no folder left, so
    the same study runs at once afterwards."""
    parsed = load_study(study(seeds=[0, 1], base={**TINY, "train": {**TINY["train"],
                                                                     "rounds": 2}}))

    def broken(prepared, name):
        raise RuntimeError("my bar is broken")

    with pytest.raises(RuntimeError, match="my bar is broken"):
        run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail, progress=broken,
                  pack=pack)
    assert [p.name for p in (tmp_path / "s").iterdir() if p.is_dir()] == []
    again = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail, pack=pack)
    assert set(again.outcomes.values()) == {"ran"} and not again.failed


@pytest.mark.parametrize("pack", [False, True])
def test_a_progress_may_make_a_plain_function(tmp_path, pack):
    """The callback ``progress`` makes needs no ``close()``: a plain function is called after
    every round (it was an AttributeError after the run)."""
    parsed = load_study(study(seeds=[0, 1], base={**TINY, "train": {**TINY["train"],
                                                                     "rounds": 2}}))
    seen = []

    def mine(prepared, name):
        return lambda runner, t, row: seen.append((name, t))

    done = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail, progress=mine,
                     pack=pack)
    assert set(done.outcomes.values()) == {"ran"} and not done.failed
    rounds = [t for _, t in seen]
    assert rounds == ([0, 1] if pack else [0, 1, 0, 1])


def test_a_progress_that_makes_no_callback_is_refused(tmp_path):
    parsed = load_study(study(base={**TINY, "train": {**TINY["train"], "rounds": 2}}))
    with pytest.raises(GossipflError, match=r"^progress: must return a runner callback .* "
                                            r"got 'bar'\.$"):
        run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail,
                  progress=lambda prepared, name: "bar")
    assert [p.name for p in (tmp_path / "s").iterdir() if p.is_dir()] == []


# --------------------------------------------------------------------------------------------
# Examples
# --------------------------------------------------------------------------------------------
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))


@pytest.mark.represented
@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(ROOT)) for p in EXAMPLES])
def test_every_example_parses(path):
    raw = yaml.safe_load(path.read_text())
    if "base" in raw:  # a study: every run's config is validated
        assert expand(load_study(path))
    else:
        load_config(path)


def test_baseline_study_compares_the_four_baselines():
    from gossipfl.errors import IgnoredSetting

    parsed = load_study(ROOT / "examples" / "study_baselines.yaml")
    with pytest.warns(IgnoredSetting, match="fedavg is a centralized algorithm"):
        variants = expand(parsed)  # FedAvg's point leaves the base topology unread
    names = [v.config.algorithm.name for v in variants]
    assert sorted(set(names)) == ["dfedavg", "dfedavgm", "dpsgd", "fedavg"]
    config = variants[0].config
    assert (config.data.dataset, config.data.partition, config.data.alpha,
            config.data.clients) == ("fashion_mnist", "dirichlet", 0.3, 100)


# --------------------------------------------------------------------------------------------
# Flatness columns (a study's `analysis` section)
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_study_analysis_adds_flatness_columns(tmp_path):
    from gossipfl.analysis import analysis_columns, analyze

    parsed = load_study(study(grid=GRID, seeds=[0, 1],
                              analysis={"top_k": 1, "trace": True, "samples": 60}))
    done = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail)
    for row in done.report.table:
        runs = [done.path / v.dirname for v in done.variants if v.label == row.label]
        tops = [analysis_columns(p)["top_eigenvalue"] for p in runs]
        assert row.flatness["top_eigenvalue"].mean == pytest.approx(sum(tops) / len(tops))
        assert row.flatness["trace"].n == 2
    header = done.report.markdown.splitlines()[0]
    assert "top Hessian eigenvalue" in header and "Hessian trace" in header
    assert "top_eigenvalue_mean" in (done.path / "table.csv").read_text().splitlines()[0]
    # a second sweep skips the runs and the analyses, and reports the same table
    second = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail)
    assert second.report.markdown == done.report.markdown
    # the column is the analysis of the run's final model, as `gossipfl analyze` computes it
    path = done.path / done.variants[0].dirname
    recorded = analysis_columns(path)["top_eigenvalue"]
    again = analyze(path, hessian=True, top_k=1, samples=60)
    assert again["hessian"]["models"]["average"]["eigenvalues"][0] == pytest.approx(
        recorded, rel=1e-6)


@pytest.mark.parametrize(("trained_on", "sweep_device", "cuda", "expected"), [
    ("cuda", None, True, "cuda"),        # a study trained on the GPU is analyzed there
    ("cuda:1", None, True, "cuda:1"),
    ("cuda", None, False, "cpu"),        # its runs copied to a machine without one
    ("auto", None, False, "auto"),
    ("cuda", "cpu", True, "cpu"),        # the sweep's --device decides
    ("cpu", None, True, "cpu"),
])
def test_a_study_analyzes_a_run_on_the_device_it_trained_on(tmp_path, monkeypatch, trained_on,
                                                           sweep_device, cuda, expected):
    import torch

    from gossipfl.studies.sweep import analysis_device

    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"device": trained_on}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert analysis_device(tmp_path, sweep_device) == expected


@pytest.mark.slow
def test_study_without_analysis_has_no_flatness_columns(tmp_path):
    done = run_study(load_study(study(grid=GRID)), out=tmp_path, log=quiet, warn=pytest.fail)
    assert "eigenvalue" not in done.report.markdown


@pytest.mark.parametrize(("analysis", "message"), [
    ({"top-k": 2}, r"^study.analysis.top-k: unknown option \(did you mean 'top_k'\?\)"),
    ([1], r"^study.analysis: must map analysis options"),
])
def test_bad_study_analysis(analysis, message):
    with pytest.raises(GossipflError, match=message):
        load_study(study(analysis=analysis))


def test_sweep_jobs_refuses_a_bad_study_in_one_sentence(tmp_path, capsys):
    """gossipfl sweep --jobs (once examples/studies/run_parallel.py): every grid point is
    validated before a worker starts."""
    from tests.helpers import gossipfl

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study(grid={"algorithm": [{"name": "dfedavgg"}]})))
    code, _, err = gossipfl(capsys, "sweep", str(path), "--out", str(tmp_path), "--jobs", "2")
    assert code == 2 and "algorithm.name" in err
    assert not (tmp_path / "s").exists()
