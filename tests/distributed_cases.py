"""Small problems run by one process and by 1, 2 and 4 gloo ranks (tests/distributed/test_distributed.py).

:func:`spawn` runs a task on ``world`` forked ranks (:mod:`gossipfl.distributed.local`: the
environment torchrun would set, a TCP store on 127.0.0.1); each joins the job through
``engine.backend: distributed`` as ``gossipfl run`` does under torchrun.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest
import torch

import gossipfl
from gossipfl.algorithms import available_algorithms
from gossipfl.assembly.loading import load_config
from gossipfl.distributed.local import run_on_ranks
from gossipfl.errors import GossipflError
from tests.pinned.make_pins import config as pinned_config

KEYS = ("train_loss", "test_acc", "test_loss", "consensus", "local_acc_mean", "local_acc_std",
        "personalized_acc", "personalized_acc_std", "bytes_round", "bytes_total")
#: Topologies exercised: point-to-point rows (ring), a graph rebuilt per round (random_k)
#: and the all-gather fallback (full).
TOPOLOGIES = ("ring", "random_k", "full")


def builtin_algorithms() -> list[str]:
    """Every algorithm gossipfl registers itself (not the tests' own) that runs in the
    synchronous order (``adpsgd``'s asynchronous order is refused on ranks, tests/algorithms/test_adpsgd.py)."""
    return [name for name, cls in available_algorithms().items()
            if cls.__module__.startswith("gossipfl.algorithms.") and "synchronous" in cls.orders]


def reads_k(topology: str) -> dict:
    """``{"k": 2}`` where the topology reads k (elsewhere k would warn that it is ignored)."""
    from gossipfl.topology import TOPOLOGY_KINDS

    kind = TOPOLOGY_KINDS.get(topology)  # none for "push", a matrix set below
    return {"k": 2} if kind is not None and "k" in kind.rules else {}


def config(algorithm: str, topology: str = "ring", backend: str = "single",
           rounds: int = 2) -> dict:
    params = {"name": algorithm}
    cls = available_algorithms()[algorithm]
    if cls.centralized:
        params["participation"] = 0.5
    setup = pinned_config(params)  # tests/pinned's unbalanced federation, made smaller
    setup["data"].update(clients=7, alpha=0.5, min_size=4,
                         options={"num_classes": 3, "dim": 6, "train_size": 140,
                                  "test_size": 60, "seed": 3})
    setup["model"]["options"] = {"hidden": [8]}
    setup["topology"] = {"name": topology, **reads_k(topology)}
    if topology == "epidemic":
        setup["topology"]["s"] = 2
    if topology.endswith("+top_k"):  # CHOCO-Gossip: encoded payloads between the ranks
        name = topology.split("+")[0]
        setup["topology"] = {"name": name, **reads_k(name), "compression": {
            "compressor": "top_k", "fraction": 0.1, "gamma": 0.5}}
    if topology == "push":  # a directed column-stochastic matrix (push-sum)
        from tests.lsq import push_matrix

        setup["topology"] = {"name": "custom", "mixing": "custom", "matrix": push_matrix(7)}
    setup["train"].update(rounds=rounds, batch_size=8)
    setup.update(eval={"personalized": True, "local_subset": 40},
                 engine={"backend": backend, "timeout": 60}, seed=5)
    return setup


def cases() -> list[tuple[str, str]]:
    """(algorithm, topology): every algorithm on the ring, dfedavg on every topology and on a
    directed row-stochastic graph (epidemic), sgp on a directed column-stochastic matrix, and
    the tracking methods on the periodic graphs (a new exchange plan every round), and
    compressed gossip (topology.compression) point to point and by all-gather."""
    out = [(name, "ring") for name in builtin_algorithms()]
    return out + [("dfedavg", topology) for topology in TOPOLOGIES[1:]] + [
        ("dfedavg", "epidemic"), ("sgp", "push"), ("dsgt", "one_peer_exponential"),
        ("kgt", "base_k"), ("dfedavg", "ring+top_k"), ("dsgt", "full+top_k")]


def measure(algorithm: str, topology: str, backend: str) -> dict:
    return measure_config(config(algorithm, topology, backend))


def measure_config(setup: dict) -> dict:
    result = gossipfl.run(setup)
    rows = [{k: row[k] for k in KEYS if k in row} for row in result.metrics]
    server = result.server_params
    return {"rows": rows, "params": result.params,
            "server": None if server is None else server.clone()}


def assert_same_run(got: dict, want: dict, key: str) -> None:
    assert len(got["rows"]) == len(want["rows"]), key
    for row, expected in zip(got["rows"], want["rows"], strict=True):
        assert row.keys() == expected.keys(), key
        for name, value in expected.items():
            if name.startswith("bytes"):
                assert row[name] == value, (key, name)
            else:
                assert row[name] == pytest.approx(value, rel=1e-5, abs=1e-6), (key, name)
    torch.testing.assert_close(got["params"], want["params"], rtol=1e-5, atol=1e-5)
    if want["server"] is not None:
        torch.testing.assert_close(got["server"], want["server"], rtol=1e-5, atol=1e-5)


def run_cases(folder: Path) -> dict:
    return {f"{a}/{t}": measure(a, t, "distributed") for a, t in cases()}


def gossip_variants(folder: Path) -> dict:
    """Group, masked and Q-step gossip of fixed rows, through the Federation of each rank
    (every client's rows gathered), plus the bytes accounted."""
    from gossipfl.core.runner import build_experiment

    out = {}
    for topology in TOPOLOGIES:
        exp = build_experiment(load_config(config("dfedavg", topology, "distributed")))
        fed = exp.fed
        z = fed.block(gossip_rows(fed.num_clients, exp.env.P))
        masks = fed.block(gossip_masks(fed.num_clients, exp.env.P))
        for t in (0, 1):
            out[topology, t, "shared"] = fed.gather(fed.gossip(z, t, steps=2, group="shared"))
            out[topology, t, "masked"] = fed.gather(fed.gossip(z, t, steps=2, masks=masks))
            out[topology, t, "bytes"] = fed.traffic.take()
    return out


def gossip_rows(m: int, p: int) -> torch.Tensor:
    return torch.randn(m, p, generator=torch.Generator().manual_seed(1))


def gossip_masks(m: int, p: int) -> torch.Tensor:
    return torch.rand(m, p, generator=torch.Generator().manual_seed(2)) < 0.5


class StopAfter:
    """Runner callback: Ctrl-C after round ``rounds`` (on every rank at once)."""

    def __init__(self, rounds: int):
        self.rounds = rounds

    def __call__(self, runner, t, row) -> None:
        if t + 1 == self.rounds:
            raise KeyboardInterrupt


def resumable(backend: str = "distributed") -> dict:
    setup = config("dfedcata", "random_k", backend, rounds=4)
    setup["output"] = {"checkpoint_every": 2}
    return setup


def interrupted_run(folder: Path) -> dict:
    """A 4-round run stopped after its checkpoint at round 2."""
    from gossipfl.results.lifecycle import execute, prepare_fresh

    prepared = prepare_fresh(load_config(resumable()), folder / "run")
    try:
        execute(prepared, [StopAfter(2)])
    except KeyboardInterrupt:
        pass
    return {"rounds": prepared.runner.round}


def resumed_run(folder: Path) -> dict:
    from gossipfl.results.lifecycle import execute, prepare_resume

    outcome = execute(prepare_resume(folder / "run"))
    return {"status": outcome.status,
            "rows": [{k: row[k] for k in KEYS if k in row} for row in outcome.result.metrics],
            "params": outcome.result.params}


def mismatched_configs(folder: Path) -> dict:
    """Rank r asks for learning rate 0.1 + r / 100: every rank must refuse to start."""
    from gossipfl.core.runner import Runner

    rank = int(os.environ["RANK"])
    setup = config("dfedavg", backend="distributed")
    setup["train"]["lr"] = 0.1 + rank / 100
    try:
        Runner(load_config(setup))
    except GossipflError as exc:
        return {"error": str(exc)}
    return {"error": None}


def sequential_refused(folder: Path) -> dict:
    """The sequential order on ranks: every rank must refuse it with one sentence."""
    from gossipfl.core.runner import Runner

    setup = config("dfedavg", backend="distributed")
    setup["topology"]["order"] = "sequential"
    try:
        Runner(load_config(setup))
    except GossipflError as exc:
        return {"error": str(exc)}
    return {"error": None}


def stalled_rank(folder: Path) -> dict:
    """Rank 1 stalls 8 s in round 2 while engine.timeout is 2 s: rank 0 must give up."""
    import tests.distributed_kill  # noqa: F401 - registers test_killed_dfedavg
    from gossipfl.core.runner import Runner

    os.environ.update(GOSSIPFL_TEST_KILL_RANK="1", GOSSIPFL_TEST_KILL_ROUND="1",
                      GOSSIPFL_TEST_STALL_SECONDS="8")
    setup = config("dfedavg", backend="distributed")
    setup["algorithm"] = {"name": "test_killed_dfedavg"}
    setup["engine"]["timeout"] = 2
    start = time.monotonic()
    try:
        Runner(load_config(setup)).run()
    except GossipflError as exc:
        return {"error": str(exc), "seconds": time.monotonic() - start}
    return {"error": None, "seconds": time.monotonic() - start}


#: Run built as edges (tests/distributed/test_distributed.py lowers DENSE_MAX_CLIENTS before the fork):
#: a static graph and one redrawn every round.
EDGE_TOPOLOGIES = ("ring", "epidemic", "random_matching")


def edge_runs(folder: Path, backend: str = "distributed") -> dict:
    from gossipfl.core.runner import build_experiment

    sparse = all(build_experiment(load_config(config("dfedavg", t, backend))).topology.sparse
                 for t in EDGE_TOPOLOGIES)
    return {"sparse": sparse} | {t: measure("dfedavg", t, backend) for t in EDGE_TOPOLOGIES}


#: (algorithm, topology) run through both exchanges (tests/distributed/test_shm.py): rows point
#: to point on a ring and a directed epidemic graph (built as edges too, when DENSE_MAX_CLIENTS
#: is lowered), a graph redrawn every round, masked (dispfl) and group (dfedmdc) gossip,
#: two gossip steps (dfedmdc's gossip_steps), and compressed payloads (uint8 rows).
EXCHANGE_CASES = (("dfedavg", "ring"), ("dfedavg", "epidemic"), ("dsgt", "one_peer_exponential"),
                  ("dispfl", "ring"), ("dfedmdc", "ring"), ("dfedavg", "ring+top_k"))


def shm_files() -> set[str]:
    """The files of gossipfl's shared-memory segments now in /dev/shm."""
    from gossipfl.distributed import shm

    return {name for name in os.listdir(shm.SHM_DIR) if name.startswith(shm.PREFIX)}


def exchange_runs(folder: Path, exchange: str = "process_group") -> dict:
    """Each of EXCHANGE_CASES for 3 rounds on ranks, its rows moved as ``exchange`` says; with
    whether each took the shared-memory path and the segment files seen during the run."""
    out = {}
    for algorithm, topology in EXCHANGE_CASES:
        setup = config(algorithm, topology, "distributed", rounds=3)
        setup["engine"]["exchange"] = exchange
        if algorithm == "dfedmdc":
            setup["algorithm"]["gossip_steps"] = 2
        seen = {"shared": [], "files": set()}

        def look(runner, t, row, seen=seen):
            seen["shared"].append(runner.exp.fed.wire.segments is not None)
            seen["files"] |= shm_files()

        result = gossipfl.run(setup, callbacks=[look])
        out[algorithm, topology] = {
            "rows": [{k: row[k] for k in KEYS if k in row} for row in result.metrics],
            "params": result.params, "shared": all(seen["shared"]), "files": seen["files"]}
    return out


def shm_runs(folder: Path) -> dict:
    return exchange_runs(folder, "shm")


def apart_runs(folder: Path) -> dict:
    """Every rank looks for the segments in a folder of its own (ranks on several machines):
    ``auto`` falls back to the process group, ``shm`` refuses."""
    from gossipfl.distributed import shm

    own = folder / f"shm{os.environ['RANK']}"
    own.mkdir(parents=True, exist_ok=True)
    shm.SHM_DIR = str(own)
    out = {"auto": exchange_runs(folder, "auto")}
    try:
        exchange_runs(folder, "shm")
        out["error"] = None
    except GossipflError as exc:
        out["error"] = str(exc)
    out["left"] = sorted(p.name for p in own.iterdir())
    return out


def crowded_runs(folder: Path) -> dict:
    """Rank 1's /dev/shm has no room: ``auto`` sends its rows through the process group (rank
    0 still through shared memory), ``shm`` refuses."""
    import shutil
    from collections import namedtuple

    from gossipfl.distributed import shm

    if os.environ["RANK"] == "1":
        usage = namedtuple("usage", "total used free")
        shm.shutil = type("Full", (), {"disk_usage": staticmethod(
            lambda path: usage(shutil.disk_usage(path).total, 0, 0))})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = {"auto": exchange_runs(folder, "auto")}
    out["warnings"] = sorted({str(w.message) for w in caught
                              if str(w.message).startswith("engine.exchange")})
    try:
        exchange_runs(folder, "shm")
        out["error"] = None
    except GossipflError as exc:
        out["error"] = str(exc)
    if os.environ["RANK"] == "1":  # rank 0 returns its own: rank 1 leaves its words here
        (folder / "rank1.txt").write_text("\n".join([*out["warnings"], out["error"] or ""]))
    return out


TASKS = {"exchange": exchange_runs, "exchange_shm": shm_runs, "apart": apart_runs,
         "crowded": crowded_runs, "cases": run_cases, "edges": edge_runs, "gossip": gossip_variants, "interrupted": interrupted_run,
         "resumed": resumed_run, "mismatch": mismatched_configs, "stalled": stalled_rank,
         "sequential": sequential_refused}


def spawn(world: int, task: str, folder: Path) -> dict:
    """``task`` on ``world`` forked gloo ranks (rank 0's results), with the rank's warnings
    silenced (the one-process run shows the same ones)."""
    return run_on_ranks(world, quiet_task, task, folder)


def quiet_task(task: str, folder: Path) -> dict:
    warnings.simplefilter("ignore")
    return TASKS[task](folder)
