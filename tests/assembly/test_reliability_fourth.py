"""Reliability, fourth pass (issue 50): the memory plan enforced before anything of size M is
allocated, every write path under a full disk, one rule for layering, every setting read or
warned, reports that keep every run, messages that name the setting, threads per rank."""

from __future__ import annotations

import csv
import errno
import sys
import types
from types import SimpleNamespace

import pytest
import torch
import yaml

from gossipfl.assembly import plan
from gossipfl.assembly.loading import load_config
from gossipfl.config import Replace
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError, IgnoredSetting
from gossipfl.results.rundir import RunDirectory
from tests.helpers import TINY, disk_full_on, gossipfl, no_temp_files, one_sentence

GB = 10 ** 9


# --------------------------------------------------------------------------------------------
# 1. The memory plan enforced
# --------------------------------------------------------------------------------------------
#: 2 000 clients of logistic regression on 784 features: P = 7 850, a plan of about 0.74 GB
#: (four [M, P] stacks and the process), small enough to build in a test.
WIDE = ["data.clients=2000", "data.options.dim=784", "data.options.num_classes=10",
        "data.options.train_size=4000", "data.options.test_size=100", "topology.name=epidemic",
        "train.rounds=1"]


def test_a_plan_larger_than_the_memory_is_refused_before_the_run_starts(work, capsys,
                                                                        monkeypatch):
    monkeypatch.setenv(plan.MEMORY_ENV, "600M")
    args = [a for item in WIDE for a in ("--set", item)]
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "big", *args)
    assert err.startswith("error: data.clients: the memory plan of this run needs 742.13 MB "
                          "(gossipfl run --dry-run lists it), but this process can hold at "
                          "most 629.15 MB (629.15 MB GOSSIPFL_MEMORY_AVAILABLE); it would fit "
                          "with at most "), err
    most = int(err.split("at most ")[2].split(" clients")[0])
    config = load_config(TINY, WIDE)
    lines, _ = plan.memory_plan(config)
    assert plan.planned_bytes(lines, clients=most, m=2000) <= 600 * 2 ** 20 \
        < plan.planned_bytes(lines, clients=most + 1, m=2000)
    assert not (work / "big").exists()
    # the same run where it fits
    monkeypatch.setenv(plan.MEMORY_ENV, "2G")
    code, out, _ = gossipfl(capsys, "run", "tiny.yaml", "--dry-run", *args)
    assert code == 0 and "fits this machine: yes (742.13 MB of at most 2.15 GB by " \
                         "GOSSIPFL_MEMORY_AVAILABLE)" in out


def test_the_dry_run_refuses_as_the_run_does_when_it_does_not_fit(work, capsys, monkeypatch):
    """The plan on stdout, then the run's own refusal (exit status 2)."""
    monkeypatch.setenv(plan.MEMORY_ENV, "600M")
    args = [a for item in WIDE for a in ("--set", item)]
    code, out, err = gossipfl(capsys, "run", "tiny.yaml", "--dry-run", *args)
    assert code == 2 and out.startswith("memory plan: dfedavg, 2000 clients")
    assert err.startswith("error: data.clients: the memory plan of this run needs 742.13 MB")


def _fake_dataset(train: int) -> SimpleNamespace:
    return SimpleNamespace(train_x=torch.zeros(1), train_y=torch.zeros(train, dtype=torch.int64),
                           test_x=torch.zeros(1), test_y=torch.zeros(10, dtype=torch.int64))


def _refusal_on_23_gb(clients: int, topology: str, P: int) -> str:
    """check_plan's sentence for ``clients`` synthetic clients of a model of P parameters on
    a machine with 23 GB available (the dataset stands in small)."""
    config = load_config(TINY, [f"data.clients={clients}", f"data.options.train_size={clients}",
                                f"topology.name={topology}"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(plan.MEMORY_ENV, str(23 * GB))
        with pytest.raises(GossipflError) as info:
            plan.check_plan(config, _fake_dataset(clients), P=P)
    return str(info.value)


def test_the_issue_case_200000_epidemic_clients_on_a_23_gb_machine():
    """The run that planned 26.9 GB on a 23 GB machine, started and was OOM-killed: refused
    (26.2 GB here, where the 0.6 GB dataset stands in small)."""
    text = _refusal_on_23_gb(200_000, "epidemic", 7850)
    assert text.startswith("data.clients: the memory plan of this run needs 26.21 GB")
    most = int(text.split("with at most ")[1].split(" clients")[0])
    assert 150_000 < most < 200_000 and text.endswith("clients (data.clients).")


def test_a_dense_graph_that_does_not_fit_names_a_graph_built_as_edges():
    text = _refusal_on_23_gb(100_000, "full", 21)
    assert text.startswith("topology.name: the memory plan of this run needs 160.")
    assert "or a graph built as edges (topology.name: ring, exponential" in text


@pytest.mark.parametrize("clients", [10_000, 100_000])
def test_the_plan_counts_the_topology_as_build_topology_checks_it(clients, tmp_path,
                                                                  monkeypatch):
    """Every topology family: the plan's topology line is the memory build_topology refuses
    by (the custom edge file was planned as a dense [M, M] pair: 160 GB at 10⁵ clients)."""
    from gossipfl.topology.graphs import TOPOLOGY_KINDS

    edges = tmp_path / "g.csv"
    edges.write_text("i,j\n0,1\n")
    checked = {}
    for name in _builtin(TOPOLOGY_KINDS):
        config = load_config(TINY, [f"data.clients={clients}",
                                    f"data.options.train_size={clients}",
                                    f"topology.name={name}",
                                    *([f"topology.path={edges}"] if name == "custom" else [])])
        needed: list[int] = []
        monkeypatch.setattr("gossipfl.topology.graphs.require_memory", _recorder(needed))
        with pytest.raises(_Stop):  # the first check, before anything is built
            from gossipfl.topology import build_topology
            build_topology(name, clients, **config.topology.parameters())
        lines, _ = plan.memory_plan(config, _fake_dataset(clients), P=21)
        line = next(line for line in lines if line.key == "topology.name")
        assert line.total == needed[0], name
        checked[name] = "as edges" in line.what
    assert checked["custom"] and checked["epidemic"] and not checked["full"]


class _Stop(Exception):
    pass


def _recorder(needed: list[int]):
    """require_memory recording what it is asked for, then stopping the build."""
    def require(n, *args, **kwargs):
        needed.append(n)
        raise _Stop
    return require


def test_a_local_test_split_larger_than_the_test_set_is_refused(work, capsys):
    """dfedmdc on 4 clients with data.local_test_size=100000000 grew to 8 GB in a minute."""
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "big", "--set",
                       "algorithm.name=dfedmdc", "--set", "data.local_test_size=100000000")
    assert err == ("error: data.local_test_size: 100000000 samples per client, but the test "
                   "set has only 40; a client's split is drawn from it, so at most 40.\n")
    assert not (work / "big").exists()


def test_the_plan_counts_the_local_test_splits(monkeypatch):
    config = load_config(TINY, ["algorithm.name=dfedmdc", "data.local_test_size=40",
                                "data.clients=200000", "data.options.train_size=200000"])
    lines, facts = plan.memory_plan(config, _fake_dataset(200_000), P=21)
    split = next(line for line in lines if line.key == "data.local_test_size")
    assert split.total == 8 * (2 * 200_000 + 4) * 40
    budget = plan.Budget(0, int(plan.planned_bytes(lines) - split.total / 2), "test")
    text = plan.refusal(lines, facts, budget)
    assert text.startswith("data.local_test_size: the memory plan of this run needs 771.06 MB")
    assert text.endswith(" clients (data.clients) or data.local_test_size at most 20.")


def test_the_ranks_of_a_job_on_one_machine_share_its_memory(monkeypatch):
    """Each of 2 ranks holds half the rows of [M, P] (13.7 of the 26.2 GB) and, on one
    machine, gets half of what is available."""
    config = load_config(TINY, ["data.clients=200000", "data.options.train_size=200000",
                                "topology.name=epidemic"])
    lines, _ = plan.memory_plan(config, _fake_dataset(200_000), P=7850)
    rows = sum(line.total for line in lines if line.per_rank)
    assert plan.planned_bytes(lines, ranks=2) == pytest.approx(plan.planned_bytes(lines)
                                                               - rows / 2)
    monkeypatch.setattr("gossipfl.engine.memory.available_memory", lambda device="cpu": 24 * GB)
    monkeypatch.setattr(plan, "cgroup_memory_left", lambda: None)
    monkeypatch.setattr(plan, "resident_bytes", lambda: 0)
    assert not plan.fits(lines, plan.memory_budget())  # one process
    assert plan.fits(lines, plan.memory_budget(), ranks=2)  # two, on two machines
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # both ranks here: 12 GB each
    budget = plan.memory_budget()
    assert budget.limit == 12 * GB and not plan.fits(lines, budget, ranks=2)
    assert "shared by the 2 processes of this job on this machine" in \
        plan.refusal(lines, {"clients": 200_000, "P": 7850}, budget, ranks=2)


def test_the_memory_budget_is_the_smallest_reading(monkeypatch):
    monkeypatch.delenv(plan.MEMORY_ENV, raising=False)
    monkeypatch.setattr(plan, "resident_bytes", lambda: 5)
    monkeypatch.setattr("gossipfl.engine.memory.available_memory", lambda device="cpu": 900)
    monkeypatch.setattr(plan, "cgroup_memory_left", lambda: 300)
    assert plan.memory_budget() == plan.Budget(5, 300, "the cgroup's memory limit", 1)
    monkeypatch.setattr(plan, "cgroup_memory_left", lambda: None)
    assert plan.memory_budget() == plan.Budget(5, 900, "MemAvailable", 1)
    monkeypatch.setenv(plan.MEMORY_ENV, "1.5K")
    assert plan.memory_budget() == plan.Budget(0, 1536, plan.MEMORY_ENV, 1)
    monkeypatch.setenv(plan.MEMORY_ENV, "lots")
    with pytest.raises(GossipflError, match="GOSSIPFL_MEMORY_AVAILABLE: expected bytes"):
        plan.memory_budget()


def test_the_cgroup_limit_is_read_for_v2_and_v1(tmp_path):
    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "job" / "memory.max").write_text("1000000\n")
    (v2 / "job" / "memory.current").write_text("400000\n")
    (v2 / "job" / "memory.stat").write_text("anon 300000\ninactive_file 100000\n")
    (tmp_path / "cg2").write_text("0::/job\n")
    assert plan.cgroup_memory_left(v2, tmp_path / "cg2") == 1000000 - 300000
    (v2 / "job" / "memory.max").write_text("max\n")
    assert plan.cgroup_memory_left(v2, tmp_path / "cg2") is None
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)  # the container's own hierarchy is mounted at the root
    (v1 / "memory.limit_in_bytes").write_text("2000000\n")
    (v1 / "memory.usage_in_bytes").write_text("500000\n")
    (v1 / "memory.stat").write_text("cache 200000\ntotal_inactive_file 50000\n")
    (tmp_path / "cg1").write_text("5:cpu:/\n4:memory:/process_api/abc\n0::/\n")
    assert plan.cgroup_memory_left(tmp_path / "v1", tmp_path / "cg1") == 2000000 - 450000
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert plan.cgroup_memory_left(tmp_path / "v1", tmp_path / "cg1") is None


# --------------------------------------------------------------------------------------------
# 2. Every write path under a full disk: one sentence naming the path, exit 2, resumable
# --------------------------------------------------------------------------------------------
def _fill_disk_in_round(monkeypatch, t_full: int, *names: str, after: int | None = None):
    """From round ``t_full`` on, writing one of ``names`` fails with ENOSPC."""
    original = Runner.run_round

    def fill_disk(self, t):
        if t == t_full:
            disk_full_on(monkeypatch, *names, after=after)
        return original(self, t)

    monkeypatch.setattr(Runner, "run_round", fill_disk)


def _resumes_to_the_reference(work, capsys, monkeypatch, name: str) -> None:
    monkeypatch.undo()
    monkeypatch.chdir(work)
    assert gossipfl(capsys, "run", "tiny.yaml", "--out", ".", "--name", "reference", "--quiet")[0] == 0
    assert gossipfl(capsys, "run", "--resume", name, "--quiet")[0] == 0
    run = RunDirectory(work / name)
    assert run.status() == "finished" and no_temp_files(work / name)
    assert [r["test_acc"] for r in run.read_metrics()] == \
        [r["test_acc"] for r in RunDirectory(work / "reference").read_metrics()]


def resume_sentence(name: str, written: str) -> str:
    return (f"error: no space left on device while writing {name}/{written}; free space and "
            f"resume with: {sys.executable} -m gossipfl run --resume {name}\n")


def test_a_streamed_checkpoint_on_a_full_disk_is_one_sentence_and_resumes(work, capsys,
                                                                          monkeypatch):
    """torch.save's writer turned ENOSPC into ``RuntimeError: [enforce fail at
    inline_container.cc:672] unexpected pos``: a traceback and exit 1."""
    _fill_disk_in_round(monkeypatch, 3, "checkpoint.pt", after=100)
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "full", "--quiet")
    assert err == resume_sentence("full", "checkpoint.pt")
    run = RunDirectory(work / "full")
    assert run.status() == "failed" and run.load_checkpoint()["runner"]["round"] == 2
    _resumes_to_the_reference(work, capsys, monkeypatch, "full")


def test_metrics_on_a_full_disk_are_one_sentence_and_resume(work, capsys, monkeypatch):
    _fill_disk_in_round(monkeypatch, 3, "metrics.csv")
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "full", "--quiet")
    assert err == resume_sentence("full", "metrics.csv")
    assert len(RunDirectory(work / "full").read_metrics()) == 3  # rounds 1-3, whole
    monkeypatch.undo()
    monkeypatch.chdir(work)
    assert gossipfl(capsys, "run", "--resume", "full", "--quiet")[0] == 0
    assert len(RunDirectory(work / "full").read_metrics()) == 6


class FullDiskWriter:
    """torch.utils.tensorboard's SummaryWriter on a disk that fills up in round 3."""

    def __init__(self, log_dir, purge_step=None):
        self.log_dir = log_dir

    def add_scalar(self, key, value, global_step):
        if global_step >= 3:
            raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass

    def close(self):
        pass


def fake_trackers(monkeypatch, fail_at_init: bool = False) -> None:
    board = types.ModuleType("torch.utils.tensorboard")
    board.SummaryWriter = FullDiskWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", board)
    wandb = types.ModuleType("wandb")

    class Run:
        def log(self, data, step):
            if step >= 3:  # wandb's own error, the OS's words inside
                raise RuntimeError("wandb: failed to write run data: [Errno 28] No space "
                                   "left on device")

        def finish(self):
            pass

    def init(**kwargs):
        if fail_at_init:
            raise OSError(errno.ENOSPC, "No space left on device")
        return Run()

    wandb.init, wandb.Settings = init, (lambda **kw: kw)
    monkeypatch.setitem(sys.modules, "wandb", wandb)


@pytest.mark.parametrize(("setting", "folder"), [("output.tensorboard=true", "tensorboard"),
                                                 ("output.wandb=true", "wandb")])
def test_a_tracker_on_a_full_disk_stops_the_run_resumably(work, capsys, monkeypatch, setting,
                                                          folder):
    fake_trackers(monkeypatch)
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "full", "--quiet", "--set",
                       setting)
    assert err == resume_sentence("full", folder)
    assert RunDirectory(work / "full").load_checkpoint()["runner"]["round"] == 2
    monkeypatch.undo()
    monkeypatch.chdir(work)
    monkeypatch.setitem(sys.modules, "wandb", None)  # the resumed run without trackers
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    assert gossipfl(capsys, "run", "--resume", "full", "--quiet")[0] == 0
    assert RunDirectory(work / "full").status() == "finished"


def test_a_tracker_that_cannot_open_on_a_full_disk_stops_the_run(work, capsys, monkeypatch):
    fake_trackers(monkeypatch, fail_at_init=True)
    err = one_sentence(capsys, "run", "tiny.yaml", "--out", ".", "--name", "full", "--quiet", "--set",
                       "output.wandb=true")
    assert err == resume_sentence("full", "wandb")


def test_a_study_table_csv_on_a_full_disk_is_one_sentence(work, capsys, monkeypatch):
    (work / "study.yaml").write_text(yaml.safe_dump(
        {"name": "st", "base": "tiny.yaml", "grid": {"train.lr": [0.1]}}))
    disk_full_on(monkeypatch, "table.csv")
    code, _, err = gossipfl(capsys, "sweep", "study.yaml", "--quiet")
    assert code == 2 and err.endswith(
        f"error: no space left on device while writing runs/st/table.csv; free space and "
        f"write the table with: {sys.executable} -m gossipfl report runs/st\n")
    monkeypatch.undo()
    monkeypatch.chdir(work)
    disk_full_on(monkeypatch, "accuracy.png")  # the report's figures
    err = one_sentence(capsys, "report", "runs/st")
    assert err == "error: no space left on device while writing runs/st/accuracy.png\n"


# --------------------------------------------------------------------------------------------
# 3. One layering rule for --set, the Python API and study grids
# --------------------------------------------------------------------------------------------
def test_a_mapping_merges_into_the_section_on_the_command_line():
    """``--set 'train={rounds: 1}'`` replaced the whole section: the file's local_steps and
    batch_size were gone (a full epoch a round, silently)."""
    config = load_config(TINY, ["train={rounds: 1}"])
    assert (config.train.rounds, config.train.local_steps, config.train.batch_size) == (1, 2, 8)


def test_replace_takes_a_whole_section_and_default_removes_a_key():
    config = load_config(TINY, ["train=!replace {rounds: 1}"])
    assert (config.train.rounds, config.train.local_steps, config.train.batch_size) == \
        (1, None, 32)
    config = load_config(TINY, ["train.local_steps=!default"])
    assert (config.train.local_steps, config.train.local_epochs) == (None, 1)
    config = load_config(TINY, ["eval.local_subset=null"])  # null is a value: every sample
    assert config.eval.local_subset is None
    assert load_config(TINY, ["eval.local_subset=!default"]).eval.local_subset == 2000
    assert load_config(TINY, ["byzantine=!default"]).byzantine is None  # absent: a no-op


ROBUST_BASE = {**TINY, "data": {**TINY["data"], "clients": 6},
               "topology": {"name": "k_regular", "k": 4,
                            "robust": {"rule": "trimmed_mean", "b": 1}}}


@pytest.mark.parametrize("override", ["topology.robust={rule: median}",
                                      "topology.robust.rule=median",
                                      "topology={robust: {rule: median}}"])
def test_switching_a_rule_drops_the_old_rules_parameters_with_a_note(override):
    with pytest.warns(IgnoredSetting, match=r"^topology\.robust\.b: dropped, because "
                                            r"topology\.robust\.rule is now median, which "
                                            r"does not take it \(a parameter of rule "
                                            r"trimmed_mean\)\.$"):
        config = load_config(ROBUST_BASE, [override])
    assert config.topology.robust == {"rule": "median"}


@pytest.mark.parametrize(("base", "override", "dropped", "kept"), [
    ({"topology": {"name": "random_k", "k": 2}}, "topology.name=ring", "topology.k", None),
    ({"byzantine": {"clients": 0.25, "attack": "alie", "z": 1.0}}, "byzantine.attack=ipm",
     "byzantine.z", None),
    ({"topology": {"name": "ring", "compression": {"compressor": "qsgd", "levels": 4,
                                                   "gamma": 0.5}}},
     "topology.compression={compressor: top_k, fraction: 0.1}", "topology.compression.levels",
     "gamma"),
    ({"algorithm": {"name": "dfedavgm", "momentum": 0.5}}, "algorithm.name=dfedavg",
     "algorithm.momentum", None),
    ({"data": {**TINY["data"]}}, "data.dataset=mnist", "data.options.dim", None),
])
def test_switching_any_piece_drops_the_previous_pieces_parameters(base, override, dropped,
                                                                  kept):
    from gossipfl.assembly.loading import apply_override

    layered = yaml.safe_load(yaml.safe_dump({**TINY, **base}))
    with pytest.warns(IgnoredSetting, match=rf"^{dropped}\b.*: dropped, because "):
        apply_override(layered, override)  # the layering alone (mnist's files are not read)
    section = layered[dropped.split(".")[0]]
    assert dropped.split(".")[-1] not in (section.get("options", section)
                                          if dropped.startswith("data") else section)
    if "dataset" not in override:
        config = load_config(layered)
        if kept is not None:
            assert config.topology.compression[kept] == 0.5


def test_a_study_grid_switches_the_rule_of_its_base(work):
    """A base ``{rule: trimmed_mean, b: 1}`` with a grid point ``{rule: median}`` was refused
    ("b: unknown parameter of rule 'median'") although --set ran it."""
    from gossipfl.studies.sweep import expand, load_study

    study = load_study({"base": ROBUST_BASE, "grid": {
        "topology.robust": [{"rule": "median"}, {"rule": "trimmed_mean"},
                            Replace({"rule": "krum", "b": 1})]}})
    with pytest.warns(IgnoredSetting):
        variants = expand(study)
    assert [v.config.topology.robust for v in variants] == [
        {"rule": "median"}, {"rule": "trimmed_mean", "b": 1}, {"rule": "krum", "b": 1}]


def test_a_study_file_with_replace_and_default_is_read_and_written_back(work, capsys):
    (work / "study.yaml").write_text(
        "name: st\nbase: tiny.yaml\ngrid:\n  train: [!replace {rounds: 2, local_steps: 1}]\n"
        "  eval.every:\n    - !default\n")
    from gossipfl.studies.sweep import expand, load_study

    variants = expand(load_study(work / "study.yaml"))
    assert variants[0].config.train.batch_size == 32 and variants[0].config.train.rounds == 2
    assert variants[0].config.eval.every == 1
    assert gossipfl(capsys, "sweep", "study.yaml", "--quiet")[0] == 0
    assert "!replace" in (work / "runs" / "st" / "study.yaml").read_text()


# --------------------------------------------------------------------------------------------
# 4. Every setting read or warned
# --------------------------------------------------------------------------------------------
def _ignored(config) -> list[str]:
    from gossipfl.assembly.loading import ignored_settings

    return [key for keys, _ in ignored_settings(config) for key in keys]


def test_muffliato_warns_that_it_does_not_read_the_local_length():
    with pytest.warns(IgnoredSetting, match=r"^train\.local_steps: ignored, because muffliato "
                                            r"takes 1 local step a round, as its paper does\.$"):
        load_config(TINY, ["algorithm.name=muffliato"])


@pytest.mark.parametrize("topology", ["one_peer_exponential", "base_k", "epidemic"])
def test_topologies_with_their_own_weights_warn_about_the_mixing_rule(topology):
    extra = ["topology.k=2"] if topology == "base_k" else ["topology.s=2"] * (
        topology == "epidemic")
    with pytest.warns(IgnoredSetting, match=rf"^topology\.mixing: ignored, because "
                                            rf"topology\.name is {topology}, whose weights "):
        load_config(TINY, [f"topology.name={topology}", "topology.mixing=max_degree", *extra])


def _builtin(registry: dict) -> list[str]:
    return sorted(name for name, piece in registry.items()
                  if getattr(piece, "__module__", "gossipfl.").startswith("gossipfl.")
                  or getattr(getattr(piece, "build", None), "__module__", "").startswith(
                      "gossipfl."))


def test_every_topology_reads_the_mixing_rule_or_warns_that_it_does_not(tmp_path):
    """Built with a rule that is not the default: a topology whose W is not made by the rule
    (its Topology says which rule made it) is one whose config warns, and only then."""
    from gossipfl.topology import build_topology
    from gossipfl.topology.graphs import TOPOLOGY_KINDS

    (tmp_path / "g.csv").write_text("i,j\n" + "".join(f"{i},{(i + 1) % 8}\n{(i + 1) % 8},{i}\n"
                                                      for i in range(8)))
    checked = []
    for name in _builtin(TOPOLOGY_KINDS):
        kind = TOPOLOGY_KINDS[name]
        params = {"k": 2, "s": 2, "p": 0.9, "path": str(tmp_path / "g.csv")}
        params = {key: value for key, value in params.items() if key in kind.rules}
        built = build_topology(name, 8, mixing="max_degree", seed=0, **params)
        with pytest.warns() if kind.weights else _no_warning():
            config = load_config({**TINY, "data": {**TINY["data"], "clients": 8},
                                  "topology": {"name": name, "mixing": "max_degree", **params}})
        assert ("topology.mixing" in _ignored(config)) == (built.mixing != "max_degree"), name
        checked.append(name)
    assert {"ring", "epidemic", "base_k", "one_peer_exponential", "custom"} <= set(checked)


class _no_warning:
    def __enter__(self):
        import warnings

        self.catcher = warnings.catch_warnings()
        self.catcher.__enter__()
        warnings.simplefilter("error", IgnoredSetting)

    def __exit__(self, *exc):
        self.catcher.__exit__(*exc)


def test_every_topology_warns_about_every_shared_parameter_it_does_not_read():
    from gossipfl.common.sections import SHARED_TOPOLOGY_PARAMS
    from gossipfl.topology.graphs import TOPOLOGY_KINDS

    given = {"k": 2, "p": 0.9, "s": 2, "path": "g.csv"}
    for name in _builtin(TOPOLOGY_KINDS):
        unread = [key for key in SHARED_TOPOLOGY_PARAMS if key in given
                  and key not in TOPOLOGY_KINDS[name].rules]
        with pytest.warns(IgnoredSetting):
            config = load_config({**TINY, "data": {**TINY["data"], "clients": 8},
                                  "topology": {"name": name, **{k: given[k] for k in unread}}})
        assert {f"topology.{key}" for key in unread} <= set(_ignored(config)), name


@pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")  # the warnings it reads
@pytest.mark.slow
def test_every_algorithm_reads_the_local_length_or_warns_that_it_does_not():
    """Each built algorithm's phases: when every phase sets its own length, a config setting
    train.local_steps or train.local_epochs is warned, and only then."""
    from gossipfl.algorithms import available_algorithms
    from gossipfl.assembly.experiment import build_experiment

    fixed_ones = []
    for name, cls in sorted(available_algorithms().items()):
        if not cls.__module__.startswith("gossipfl.algorithms."):
            continue
        overrides = [f"algorithm.name={name}", "topology.name=full",
                     f"topology.order={cls.orders[0]}", "model.name=mlp",
                     "model.options.hidden=[8]"]
        with _quiet():
            config = load_config(TINY, overrides)
            phases = build_experiment(config).algorithm.phases()
        fixed = all(p.steps is not None or p.epochs is not None for p in phases)
        assert ("train.local_steps" in _ignored(config)) == fixed, name
        epochs = load_config(TINY, [*overrides, "train.local_epochs=3"]) if fixed else None
        assert not fixed or "train.local_epochs" in _ignored(epochs), name
        fixed_ones += [name] * fixed
    assert {"muffliato", "dsgt", "sgp"} <= set(fixed_ones)


class _quiet:
    def __enter__(self):
        import warnings

        self.catcher = warnings.catch_warnings()
        self.catcher.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        self.catcher.__exit__(*exc)


@pytest.mark.parametrize("family", ["rule", "attack", "compressor"])
def test_every_robust_rule_attack_and_compressor_refuses_every_parameter_it_does_not_take(
        family):
    """The parameters of a rule, an attack or a compressor are refused, naming the key and
    listing the allowed ones, when the piece does not take them (never silently unread)."""
    from gossipfl.compression.compressors import COMPRESSORS, build_compressor
    from gossipfl.trust.attacks import ATTACKS, check_attack
    from gossipfl.trust.rules import RULES, build_rule

    registry, build = {
        "rule": (RULES, lambda name, key, v: build_rule({"rule": name, key: v})),
        "attack": (ATTACKS, lambda name, key, v: check_attack(name, {key: v})),
        "compressor": (COMPRESSORS,
                       lambda name, key, v: build_compressor({"compressor": name, key: v})),
    }[family]
    every = {key for cls in registry.values() for key in cls.Params.parameter_rules()}
    for name in _builtin(registry):
        for key in sorted(every - set(registry[name].Params.parameter_rules())):
            with pytest.raises(GossipflError, match=rf"\.{key}: unknown parameter of "
                                                    rf"{family} '{name}'.*; allowed: "):
                build(name, key, 1)


# --------------------------------------------------------------------------------------------
# 5. Reports that keep every run
# --------------------------------------------------------------------------------------------
def _sweep(work, capsys, grid, **study) -> None:
    (work / "study.yaml").write_text(yaml.safe_dump(
        {"name": "st", "base": "tiny.yaml", "grid": grid, **study}))
    gossipfl(capsys, "sweep", "study.yaml", "--quiet")


def test_a_run_diverged_before_its_first_evaluation_keeps_its_row(work, capsys):
    """It vanished from the table (one row labelled dfedavg, no word of it)."""
    _sweep(work, capsys, {"train.lr": [0.1, 1e30]})
    table = (work / "runs" / "st" / "table.md").read_text()
    assert "| lr=1e+30 | 0 (diverged at round 1) | — |" in table, table
    assert "| lr=0.1 | 1 |" in table
    from gossipfl.studies.frames import load_study

    rows = load_study(work / "runs" / "st").table
    assert list(rows["configuration"]) == ["lr=0.1", "lr=1e+30"]
    assert list(rows["failed"]) == [0, 1]


def test_load_study_lists_the_rows_in_the_grids_order(work, capsys):
    from gossipfl.studies.frames import load_study

    _sweep(work, capsys, {"algorithm": [{"name": "dsgt"}, {"name": "dfedavg"}],
                          "train.lr": [0.1, 0.05], "train.rounds": [1]})
    with open(work / "runs" / "st" / "table.csv", newline="") as handle:
        order = [row["configuration"] for row in csv.DictReader(handle)]
    assert [label.split(",")[0] for label in order] == ["dsgt", "dsgt", "dfedavg", "dfedavg"]
    assert list(load_study(work / "runs" / "st").table["configuration"]) == order  # not by
    # folder name (dfedavg... sorts first)


def test_a_byzantine_runs_table_takes_the_honest_consensus_beside_the_honest_accuracy(
        work, capsys):
    _sweep(work, capsys, {"byzantine": [{"clients": [0], "attack": "gaussian"}],
                          "train.lr": [0.1]})
    run = RunDirectory(next((work / "runs" / "st").glob("*-seed0")))
    last = run.read_metrics()[-1]
    assert last["honest_consensus"] != last["consensus"]
    csv_text = (work / "runs" / "st" / "table.csv").read_text().splitlines()
    head, row = csv_text[0].split(","), csv_text[1].split(",")
    assert row[head.index("metric")] == "honest_test_acc"
    assert float(row[head.index("consensus_mean")]) == pytest.approx(last["honest_consensus"])


# --------------------------------------------------------------------------------------------
# 6. Messages that name the place and the setting
# --------------------------------------------------------------------------------------------
def test_a_plugin_with_a_syntax_error_is_located_at_its_own_file_and_line(work, capsys):
    """It was located at "line 241 of <frozen importlib._bootstrap>"."""
    (work / "bad.py").write_text("x = 1\ndef broken(:\n    pass\n")
    err = one_sentence(capsys, "list", "--plugin", "bad.py")
    path = work / "bad.py"
    assert err.startswith(f"error: --plugin: plugin '{path}' failed to load (line 2 of {path}): "
                          f"SyntaxError: "), err
    assert "frozen" not in err and "(bad.py, line 2)" not in err


def test_too_many_synthetic_clients_name_the_option_that_sets_the_size(work, capsys):
    err = one_sentence(capsys, "run", "tiny.yaml", "--set", "data.clients=1000")
    assert err == ("error: data.clients: 1000 clients but the dataset has only 120 training "
                   "samples (data.options.train_size sets it); each client needs at least "
                   "one.\n")


@pytest.mark.parametrize(("override", "keys"), [
    ("privacy.accountant=rdp", "the keys of privacy are clip, noise_multiplier, delta."),
    ("model.foo=1", "the keys of model are name, options, personal."),
    ("systems.network.latncy=1", "the keys of systems.network are "),
])
def test_every_unknown_key_lists_the_allowed_keys(override, keys):
    with pytest.raises(GossipflError) as info:
        load_config(TINY, [override])
    assert str(info.value).startswith(f"{override.split('=')[0]}: unknown key")
    assert keys in str(info.value)


def test_list_shows_every_pieces_parameters_and_defaults(capsys):
    from gossipfl.algorithms import available_algorithms
    from gossipfl.trust.attacks import ATTACKS
    from gossipfl.trust.rules import RULES

    code, out, _ = gossipfl(capsys, "list")
    lines = out.splitlines()

    def parameters_of(name: str, section: str) -> str:
        """What follows the paper ("; k = 1 (...), ...") on the piece's line of a section."""
        start = lines.index(next(line for line in lines if line.startswith(section)))
        line = next(line for line in lines[start + 1:]
                    if line.split() and line.split()[0] == name)
        return line.split("; ", 1)[1] if "; " in line else ""

    assert code == 0
    for section, registry in (("robust rules", RULES), ("attacks", ATTACKS)):
        for name, cls in registry.items():
            shown = parameters_of(name, section)
            assert all(f"{key} = " in shown or f"{key} (" in shown
                       for key in cls.Params.parameter_rules()), name
    assert "b = 1 (an integer >= 0)" in parameters_of("trimmed_mean", "robust rules")
    assert "view = neighbourhood (one of neighbourhood, all" in parameters_of("alie",
                                                                                "attacks")
    assert "momentum = 0.9 (in [0, 1))" in parameters_of("dfedavgm", "algorithms")
    assert all(parameters_of(name, "algorithms") or not cls.Params.__dataclass_fields__
               for name, cls in available_algorithms().items())
    assert "  mlp          hidden = [200, 200]" in lines
    assert any(line.startswith("  synthetic") and "train_size = 1000" in line
               for line in lines)


# --------------------------------------------------------------------------------------------
# 7. Threads per rank (the setting only: not timed, the CPU is shared)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("environ", "cores", "threads"), [
    ({"LOCAL_WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}, 16, 8),  # torchrun's default
    ({"LOCAL_WORLD_SIZE": "2"}, 16, 8),
    ({"LOCAL_WORLD_SIZE": "3"}, 16, 5),
    ({"LOCAL_WORLD_SIZE": "4"}, 2, 1),  # more ranks than cores: one each
    ({}, 16, 16),  # one rank here (the others on other machines)
    ({"LOCAL_WORLD_SIZE": "2", "OMP_NUM_THREADS": "3"}, 16, None),  # the user's
    ({"OMP_NUM_THREADS": "1"}, 16, None),  # one rank a node: a 1 is the user's
    ({"LOCAL_WORLD_SIZE": "2", "OMP_NUM_THREADS": "1", "GOSSIPFL_NUM_THREADS": "1"}, 16, 1),
    ({"LOCAL_WORLD_SIZE": "2", "OMP_NUM_THREADS": "4", "GOSSIPFL_NUM_THREADS": "6"}, 16, 6),
])
def test_threads_per_rank_share_the_machines_cores(environ, cores, threads):
    from gossipfl.distributed.launch import threads_per_rank

    assert threads_per_rank(environ, cores) == threads


def test_a_bad_thread_count_is_one_sentence():
    from gossipfl.distributed.launch import threads_per_rank

    with pytest.raises(GossipflError, match=r"^GOSSIPFL_NUM_THREADS: must be an integer >= 1 "
                                            r"\(torch threads per rank\), got 'many'\.$"):
        threads_per_rank({"GOSSIPFL_NUM_THREADS": "many"}, 4)


def test_joining_a_job_sets_the_threads_per_rank(monkeypatch):
    """start_processes applies threads_per_rank on joining (the process group stubbed)."""
    from gossipfl.distributed import launch

    calls = []
    monkeypatch.setattr(launch.torch, "set_num_threads", calls.append)
    monkeypatch.setattr(launch.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(launch.dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(launch, "check_same_config", lambda config, processes: None)
    monkeypatch.setattr(launch, "usable_cores", lambda: 8)
    monkeypatch.setattr(launch, "_current", launch.SINGLE)
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1",
                        "LOCAL_WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GOSSIPFL_NUM_THREADS", raising=False)
    processes = launch.start_processes(load_config(TINY, ["engine.backend=distributed"]))
    assert processes.distributed and calls == [4]
