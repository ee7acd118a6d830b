"""The shared-memory exchange of ranks on one machine (``engine.exchange``,
gossipfl.distributed.shm): the same rows in the same order as the process group's messages,
so the same bits; its segments leave nothing in /dev/shm; falling back and refusing."""

from __future__ import annotations

import re

import pytest
import torch

from gossipfl.assembly.loading import load_config
from gossipfl.errors import GossipflError
from tests import distributed_cases as cases


def assert_identical(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, run in want.items():
        assert got[key]["rows"] == run["rows"], key
        assert torch.equal(got[key]["params"], run["params"]), key


@pytest.fixture(scope="module")
def by_group(tmp_path_factory):
    """Every exchange case on 2 ranks through the process group (gloo)."""
    return cases.spawn(2, "exchange", tmp_path_factory.mktemp("group"))


@pytest.mark.represented
@pytest.mark.parametrize("world", [2, 3])
def test_shared_memory_gives_the_process_groups_bits(world, tmp_path, monkeypatch, by_group):
    """Final models (torch.equal) and every metric of a ring, an epidemic graph built as
    edges and as a matrix, a graph redrawn every round, masked, group, two-step and compressed
    gossip: the same through the segments as through gloo; no segment file is left in
    /dev/shm during or after the runs."""
    from gossipfl.topology import graphs

    before = cases.shm_files()
    want = by_group if world == 2 else cases.spawn(world, "exchange", tmp_path / "group")
    assert not any(run["shared"] for run in want.values())
    shared = cases.spawn(world, "exchange_shm", tmp_path / "shm")
    assert all(run["shared"] for run in shared.values())
    assert_identical(shared, want)
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 4)  # built as edges in the forked ranks
    edges = cases.spawn(world, "exchange_shm", tmp_path / "edges")
    assert all(run["shared"] for run in edges.values())
    assert_identical(edges, cases.spawn(world, "exchange", tmp_path / "edges_group"))
    for run in (*shared.values(), *edges.values()):
        assert run["files"] <= before  # unlinked once every rank held them open
    assert cases.shm_files() <= before


def test_ranks_apart_fall_back_or_refuse(tmp_path, by_group):
    """Ranks that cannot open each other's segments (as on two machines): auto uses the
    process group (the same numbers), shm refuses in one sentence, and no file is left."""
    got = cases.spawn(2, "apart", tmp_path)
    assert not any(run["shared"] for run in got["auto"].values())
    assert_identical(got["auto"], by_group)
    assert got["error"] == ("engine.exchange: 'shm' needs every rank on one machine sharing "
                            f"{tmp_path}/shm0, but rank 0 cannot open rank 1's segment in "
                            f"{tmp_path}/shm0; use auto or process_group.")
    assert got["left"] == []


def test_no_room_in_dev_shm_falls_back_or_refuses(tmp_path, by_group):
    """Rank 1 finds /dev/shm full: auto receives its rows through the process group with one
    warning (rank 0 still through its segment: the same bits), shm ends the job naming the
    figure."""
    got = cases.spawn(2, "crowded", tmp_path)
    assert all(run["shared"] for run in got["auto"].values())
    assert_identical(got["auto"], by_group)
    assert got["warnings"] == []  # rank 0's (results come from rank 0): it had the room
    assert got["error"] == ("engine.exchange: 'shm', but /dev/shm has no room for rank 1's "
                            "rows; enlarge it or use auto or process_group.")
    warning, error = (tmp_path / "rank1.txt").read_text().splitlines()
    assert re.fullmatch(r"engine.exchange: rank 1's rows need \d+\.\d MB in /dev/shm \(its "
                        r"growth for every rank, which may grow at once\) but 0.0 MB are free; "
                        r"its rows come through the process group\.", warning)
    assert re.fullmatch(r"engine.exchange: 'shm', but /dev/shm has no room for rank 1's rows "
                        r"\(\d+\.\d MB for every rank's growth, 0.0 MB free\); enlarge it or "
                        r"use auto or process_group\.", error)


def test_the_exchange_setting_is_checked():
    assert load_config(None, ["engine.exchange=shm"]).engine.exchange == "shm"
    assert load_config(None).engine.exchange == "auto"
    with pytest.raises(GossipflError, match=r"^engine.exchange: unknown value 'tcp'.*auto, "
                                            r"process_group, shm\.$"):
        load_config(None, ["engine.exchange=tcp"])


def test_shared_memory_on_cuda_is_refused_or_passed_over():
    """shm moves CPU rows: on CUDA auto takes the process group (NCCL), shm refuses; neither
    touches the process group (no job is needed to decide)."""
    from gossipfl.distributed.launch import Processes
    from gossipfl.distributed.shm import open_segments

    ranks = Processes(0, 2, distributed=True)
    assert open_segments(ranks, "auto", torch.device("cuda", 0)) is None
    assert open_segments(ranks, "process_group", torch.device("cpu")) is None
    with pytest.raises(GossipflError, match=r"^engine.exchange: 'shm' moves rows between ranks "
                                            r"on the CPU, but this run computes on cuda:0; use "
                                            r"auto or process_group\.$"):
        open_segments(ranks, "shm", torch.device("cuda", 0))


def test_the_plan_places_each_ranks_rows_where_the_peer_holds_them():
    """ExchangePlan.place: rank s's rows for peer p start after p's block and the rows p
    reads from the ranks before s, and p holds its block plus everything it reads (the
    layout of p's own ``columns``)."""
    from gossipfl.distributed.federation import exchange_plan, exchange_plan_edges
    from gossipfl.distributed.launch import Processes
    from gossipfl.topology.graphs import build_topology
    from gossipfl.topology.mixer import Mixer
    from gossipfl.topology.sparse import Edges

    topology = build_topology("epidemic", 13, seed=4, s=2)
    mixer = Mixer(topology, sparse="sparse")
    W = topology.matrix(0)
    for world in (2, 3, 4):
        plans = [exchange_plan(W, Processes(r, world), mixer) for r in range(world)]
        for rank, plan in enumerate(plans):
            edges = exchange_plan_edges(Edges.from_dense(W), Processes(rank, world), mixer)
            assert edges.place == plan.place
            assert plan.place.keys() == plan.send.keys()
            for peer, (at, total) in plan.place.items():
                theirs = plans[peer]
                lo, hi = Processes(rank, world).bounds(13)
                assert total == len(theirs.columns)
                sent = theirs.columns[at:at + len(plan.send[peer])]
                assert (sent == plan.send[peer].numpy() + lo).all()
                assert ((sent >= lo) & (sent < hi)).all()


def test_a_segment_grows_only_with_room_for_every_ranks_growth(tmp_path, monkeypatch):
    """Each rank checks /dev/shm alone, and the ranks may grow at once: a rank of 3 grows by
    G only when 3·G bytes are free (two ranks that each saw room for themselves could fill a
    tmpfs, whose overfilled write is a SIGBUS)."""
    import os
    from collections import namedtuple

    from gossipfl.distributed import shm
    from gossipfl.distributed.launch import Processes

    usage = namedtuple("usage", "total used free")
    free = {"bytes": 0}
    monkeypatch.setattr(shm, "shutil", type("Disk", (), {"disk_usage": staticmethod(
        lambda path: usage(10**9, 0, free["bytes"]))}))
    fd = os.open(tmp_path / "segment", os.O_RDWR | os.O_CREAT)
    segments = shm.SharedSegments(Processes(0, 3, distributed=True), shm.Segment(fd), {}, False)
    free["bytes"] = 2 * 4096  # room for this rank's 4096 bytes, not for three ranks'
    assert segments.room_for(4096) == (3 * 4096, 2 * 4096)
    assert segments.own.size == 0
    free["bytes"] = 3 * 4096
    assert segments.room_for(4096) is None and segments.own.size >= 4096
    assert segments.room_for(4096) is None  # held already: no check
    segments.close()
