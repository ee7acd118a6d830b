"""gossipfl sweep --pack: the seeds of a grid point as one stack, each run as alone."""

from __future__ import annotations

import errno
import os
import signal
import time

import pytest

from gossipfl.errors import GossipflError
from gossipfl.results.rundir import RunDirectory
from gossipfl.studies.packing import Pack, refusal
from gossipfl.studies.sweep import load_study, run_study
from tests.helpers import PNG_MAGIC, TINY, tiny, with_figures, without_timing

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")

#: A small MLP whose P = 336 is a multiple of 16: every client's row starts at the same
#: 64-byte alignment in any stack, so the BLAS kernels round each row as they do alone.
MLP = {**TINY,
       "data": {**TINY["data"], "clients": 5,
                "options": {"dim": 7, "train_size": 150, "test_size": 40, "num_classes": 8}},
       "model": {"name": "mlp", "options": {"hidden": [16, 8]}},
       "train": {**TINY["train"], "rounds": 5}}

GRID = {"algorithm": ["dfedavg", "dfedsam", "dpsgd", {"name": "dfedavgm", "momentum": 0.5}],
        "topology": [{"name": "ring"}, {"name": "erdos_renyi", "p": 0.6}]}


def quiet(_message: str) -> None:
    pass


def _study(grid=GRID, base=MLP, seeds=(0, 1, 2)) -> dict:
    return {"name": "packed", "base": base, "grid": grid, "seeds": list(seeds)}


def _metrics(outcome) -> dict:
    return {v.dirname: without_timing(RunDirectory(outcome.path / v.dirname).read_metrics())
            for v in outcome.variants}


@pytest.mark.slow
def test_packed_runs_equal_the_runs_alone_bit_for_bit(tmp_path):
    parsed = load_study(_study(grid={**GRID, "train.lr": [0.1, 0.05]}, seeds=(0, 1)))
    alone = run_study(parsed, out=tmp_path / "alone", log=quiet, warn=pytest.fail)
    lines: list[str] = []
    packed = run_study(parsed, out=tmp_path / "packed", log=lines.append, warn=pytest.fail,
                       pack=True)
    assert set(packed.outcomes.values()) == {"ran"} and not packed.failed
    packs = [line for line in lines if line.startswith("packed: ")]
    # both topologies and both learning rates in one pack (8 runs), but dpsgd's: one pack per
    # rate (4 runs: both topologies)
    assert sorted(line.count("-seed") for line in packs) == [4] * 2 + [8] * 3
    assert _metrics(packed) == _metrics(alone)
    for variant in packed.variants:  # the final checkpoints: the same models
        a = RunDirectory(alone.path / variant.dirname).load_checkpoint()["runner"]
        b = RunDirectory(packed.path / variant.dirname).load_checkpoint()["runner"]
        assert a["algorithm"]["x"].equal(b["algorithm"]["x"])
        assert a["bytes_total"] == b["bytes_total"]


@pytest.mark.slow
def test_an_interrupted_packed_sweep_resumes_to_the_same_numbers(tmp_path, monkeypatch):
    parsed = load_study(_study(grid={"algorithm": ["dfedsam_mgs"], "train.lr": [0.1, 0.05]},
                               seeds=(0, 1)))
    alone = run_study(parsed, out=tmp_path / "alone", log=quiet, warn=pytest.fail)
    step = Pack.round

    def ctrl_c_after_round_3(self, t):
        measured = step(self, t)
        if t == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return measured

    monkeypatch.setattr(Pack, "round", ctrl_c_after_round_3)
    with pytest.raises(KeyboardInterrupt):
        run_study(parsed, out=tmp_path / "packed", log=quiet, warn=quiet, pack=True)
    for variant in alone.variants:
        run_dir = RunDirectory(tmp_path / "packed" / "packed" / variant.dirname)
        assert run_dir.status() == "interrupted"
        assert run_dir.load_checkpoint()["runner"]["round"] == 3
    monkeypatch.setattr(Pack, "round", step)
    again = run_study(parsed, out=tmp_path / "packed", log=quiet, warn=pytest.fail, pack=True)
    assert set(again.outcomes.values()) == {"resumed"}
    assert _metrics(again) == _metrics(alone)
    third = run_study(parsed, out=tmp_path / "packed", log=quiet, warn=pytest.fail, pack=True)
    assert set(third.outcomes.values()) == {"skipped"}


def test_runs_at_different_rounds_pack_apart(tmp_path):
    parsed = load_study(_study(grid={"algorithm": ["dfedavg"]}))
    alone = run_study(parsed, out=tmp_path, log=quiet, warn=pytest.fail)
    reference = _metrics(alone)
    first = alone.path / alone.variants[0].dirname
    RunDirectory(first).write_summary({**RunDirectory(first).read_summary(),
                                       "status": "interrupted"})  # resumes at the last round
    for variant in alone.variants[1:]:  # start again from round 0
        for path in (alone.path / variant.dirname).iterdir():
            path.unlink()
        (alone.path / variant.dirname).rmdir()
    lines: list[str] = []
    again = run_study(parsed, out=tmp_path, log=lines.append, warn=pytest.fail, pack=True)
    assert list(again.outcomes.values()) == ["resumed", "ran", "ran"]
    assert any("packed apart" in line for line in lines)
    assert _metrics(again) == reference


def test_a_grid_point_that_cannot_pack_runs_alone_and_says_why(tmp_path):
    grid = {"algorithm": ["dfedavg", {"name": "fedavg", "participation": 0.5}]}
    lines: list[str] = []
    parsed = load_study(_study(grid=grid, seeds=(0, 1)))
    packed = run_study(parsed, out=tmp_path, log=lines.append, warn=pytest.fail, pack=True)
    assert set(packed.outcomes.values()) == {"ran"}
    alone_lines = [line for line in lines if "runs alone" in line]
    assert len(alone_lines) == 2 and all("'fedavg' is not one that packs" in line
                                         for line in alone_lines)


def test_refusals_name_the_setting():
    assert refusal(tiny()) is None
    assert "topology.order" in refusal(tiny("topology.order=sequential"))
    assert "batch_size: full" in refusal(tiny("train.batch_size=full"))
    assert "block_clients" in refusal(tiny("engine.block_clients=2"))
    assert "privacy" in refusal(tiny("privacy={clip: 1.0, noise_multiplier: 0.5, "
                                     "delta: 1.0e-5}"))


def test_pack_takes_no_jobs(tmp_path):
    with pytest.raises(GossipflError, match="--pack: .* takes no --jobs"):
        run_study(load_study(_study()), out=tmp_path, log=quiet, jobs=2, pack=True)


@pytest.mark.slow
def test_a_model_whose_rows_are_not_64_byte_aligned_agrees_to_float_rounding(tmp_path):
    """P = 275: client rows sit at other alignments in the stack than alone, and the BLAS
    kernels round them differently (docs/guide/studies.md); the first run of a pack sits
    where it does alone and is exact."""
    base = {**MLP, "data": {**TINY["data"], "clients": 5}}
    parsed = load_study(_study(grid={"algorithm": ["dfedsam"]}, base=base))
    alone = _metrics(run_study(parsed, out=tmp_path / "a", log=quiet, warn=pytest.fail))
    packed = _metrics(run_study(parsed, out=tmp_path / "p", log=quiet, warn=pytest.fail,
                                pack=True))
    first = next(iter(alone))
    assert packed[first] == alone[first]
    for name, rows in alone.items():
        for a, b in zip(rows, packed[name], strict=True):
            assert a.keys() == b.keys()
            for key, value in a.items():
                if isinstance(value, float):
                    assert b[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (name, key)
                else:
                    assert b[key] == value


def test_the_run_split_reads_the_device_once_a_phase_and_equals_the_split(monkeypatch):
    """A phase's steps work on prefixes of one id tensor: RunSplit splits it once (one host
    read) and gives each prefix's split as _split gives it."""
    import torch

    from gossipfl.studies.packing import joint

    calls = []
    real = joint._split
    monkeypatch.setattr(joint, "_split", lambda *a: calls.append(1) or real(*a))
    m, runs = 4, 3
    rows = torch.tensor([9, 0, 5, 4, 1, 10, 8, 2, 6, 3, 11, 7])  # interleaved runs
    split = joint.RunSplit(m, runs)
    for n in (12, 12, 9, 5, 1):
        got = split(rows[:n], "cpu")
        want = real(rows[:n], m, runs)
        assert [p.tolist() for p, _ in got] == [p.tolist() for p, _ in want]
        assert all(d.tolist() == p.tolist() for p, d in got)
    assert len(calls) == 1
    split(rows.clone(), "cpu")  # another tensor: split afresh
    assert len(calls) == 2
    every = split.ids(None, 8, "cpu")
    assert every is split.ids(None, 8, "cpu") and every.tolist() == list(range(8))


@with_figures
@pytest.mark.parametrize("trouble", [None, "full disk", "hang"])
def test_a_packed_studys_figures_are_drawn_side_by_side(tmp_path, monkeypatch, trouble):
    """A packed study's runs finish together, and their figures are drawn on forked worker
    processes (here 2; on a machine of 2 cores they are drawn in the process): every run's
    PNGs; the workers leave Ctrl-C to the study's process and end on SIGTERM; a full disk
    while one run's are drawn is that run's warning, the others drawn; a worker that hangs
    midway through a write is killed after its time, its temporary file removed, and the
    figures are drawn in the process."""
    import signal

    from gossipfl.io import TEMP_SUFFIX, WriteError
    from gossipfl.results import lifecycle

    monkeypatch.setattr(lifecycle, "figure_workers", lambda runs: min(runs, 2))
    full_disk_for = "seed1" if trouble == "full disk" else None
    real = lifecycle.write_run_figures
    parent = os.getpid()

    def write(run_dir):
        if full_disk_for and run_dir.path.name.endswith(full_disk_for):
            raise WriteError(run_dir.path / "accuracy.png",
                             OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        if os.getpid() != parent:
            handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
            (tmp_path / f"signals-{os.getpid()}").write_text(repr(handlers))
        if trouble == "hang" and os.getpid() != parent:
            (run_dir.path / f".accuracy.png.hung{TEMP_SUFFIX}").write_bytes(b"half")
            time.sleep(60)  # a worker that never answers in time
        return real(run_dir)

    monkeypatch.setattr(lifecycle, "write_run_figures", write)
    if trouble == "hang":
        monkeypatch.setattr(lifecycle, "FIGURE_SECONDS", 1.0)
    said: list[str] = []
    parsed = load_study(_study(grid={"train.lr": [0.1, 0.05]}, seeds=(0, 1)))
    outcome = run_study(parsed, out=tmp_path, log=quiet, warn=said.append, pack=True)
    assert not outcome.failed and len(outcome.variants) == 4
    for variant in outcome.variants:
        png = outcome.path / variant.dirname / "accuracy.png"
        if full_disk_for is not None and variant.dirname.endswith(full_disk_for):
            assert not png.exists()
        else:
            assert png.read_bytes().startswith(PNG_MAGIC), variant.dirname
    warned = [line for line in said if "draw its figures with `gossipfl report" in line]
    assert len(warned) == (0 if full_disk_for is None else 2)
    assert not list(outcome.path.rglob(f"*{TEMP_SUFFIX}"))
    seen = {p.read_text() for p in tmp_path.glob("signals-*")}
    assert seen == {repr((signal.SIG_IGN, signal.SIG_DFL))}
