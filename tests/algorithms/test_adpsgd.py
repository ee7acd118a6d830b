"""AD-PSGD (topology.order: asynchronous): the batched waves against a literal
event-at-a-time loop in float64 on least squares with full-batch gradients, stragglers
(staleness), the update counts, the clock, resume, bytes and the refusals."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch

from gossipfl.assembly.loading import load_config
from gossipfl.common.rng import numpy_generator
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError, IgnoredSetting
from gossipfl.schedules.asynchronous import waves
from tests.helpers import stopped_and_resumed
from tests.lsq import Problem, assert_close, random_doubly_stochastic, ring_mh

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")

LR, DECAY, WD, SEED = 0.05, 0.9, 1e-2, 3


def config(p: Problem, W, rounds=4, systems=None, **topology) -> dict:
    cfg = p.config({"name": "adpsgd"}, W=W, rounds=rounds, steps=1, wd=WD)
    cfg["topology"] = {**cfg["topology"], "order": "asynchronous", **topology}
    if systems is not None:
        cfg["systems"] = systems
    return cfg


def run(cfg: dict) -> Runner:
    runner = Runner(load_config(cfg))
    runner.run()
    return runner


def literal_loop(p: Problem, W, rounds, speeds, latency=0.0, bandwidth=np.inf):
    """AD-PSGD written plainly: one event at a time in order of completion (ties: lowest id);
    returns the models, update counts, and each round's last event time and bytes."""
    M = p.M
    X = p.x0.astype(np.float64).copy()
    read = X.copy()
    finish = np.asarray(speeds, dtype=np.float64).copy()
    count = np.zeros(M, dtype=int)
    exchange = latency + 4 * p.d / bandwidth
    times, sent = [], []
    for t in range(rounds):
        eta = LR * DECAY ** t
        for _ in range(M):
            i = min(range(M), key=lambda c: (finish[c], c))
            tau = finish[i]
            near = [j for j in range(M) if j != i and W[i, j] != 0]
            j = near[numpy_generator(SEED, "adpsgd", i, count[i]).integers(len(near))]
            g = p.grad(i, read[i]) + WD * read[i]  # at the model read at the start
            avg = (X[i] + X[j]) / 2
            X[i], X[j] = avg, avg
            X[i] = X[i] - eta * g
            read[i] = X[i].copy()
            count[i] += 1
            finish[i] = tau + exchange + speeds[i]
        times.append(tau)
        sent.append(M * 2 * 4 * p.d)
    return X, count, times, sent


STRAGGLERS = {"compute": {"stragglers": 0.4, "slowdown": 3.0, "seconds_per_step": 0.1}}


@pytest.mark.represented
@pytest.mark.parametrize("m,graph", [(4, "ring"), (6, "ring"), (7, "random"), (9, "random")])
def test_waves_equal_the_literal_event_loop_with_stragglers(m, graph):
    p = Problem(clients=m, seed=m)
    W = ring_mh(m) if graph == "ring" else random_doubly_stochastic(m, seed=m)
    runner = run(config(p, W, rounds=5, systems=STRAGGLERS))
    speeds = runner.exp.systems.model.compute(0)  # 0.1 and 0.1·3 (ties as gossipfl has them)
    X, count, times, sent = literal_loop(p, W, 5, speeds)
    assert_close(runner.state["x"].numpy(), X)
    np.testing.assert_array_equal(runner.run_state.schedule["updates"].numpy(), count)
    assert count.max() > count.min()  # unequal speeds: unequal work, and stale reads
    np.testing.assert_allclose([r["sim_time"] for r in runner.rows], times, rtol=0, atol=1e-12)
    assert [r["bytes_round"] for r in runner.rows] == sent
    assert any(r["waves"] < m for r in runner.rows)  # the waves batch events


def test_waves_equal_one_event_at_a_time_inside_gossipfl():
    """The same run with one event per wave gives the same numbers (the waves are exact)."""
    p = Problem(clients=6, seed=2)
    cfg = config(p, random_doubly_stochastic(6, seed=2), rounds=4, systems=STRAGGLERS)
    batched = run(cfg)
    single = Runner(load_config(cfg))
    single.schedule.wave = lambda events: [[e] for e in range(len(events))]
    single.run()
    assert_close(batched.state["x"].numpy(), single.state["x"].numpy().astype(np.float64))
    assert all(r["waves"] == 6 for r in single.rows)


def test_without_systems_every_worker_takes_one_second_and_there_is_no_clock():
    p = Problem(clients=5)
    runner = run(config(p, ring_mh(5), rounds=3))
    X, count, _, _ = literal_loop(p, ring_mh(5), 3, np.ones(5))
    assert_close(runner.state["x"].numpy(), X)
    np.testing.assert_array_equal(count, [3] * 5)  # equal speeds: one update each per round
    assert "sim_time" not in runner.rows[-1]


def test_with_equal_speeds_the_waves_are_maximal():
    """Equal speeds: every round's events are one per worker in id order; each wave ends
    only where the next event's pair meets it, and a wave of disjoint pairs can hold up to
    M/2 events."""
    p = Problem(clients=8, seed=1)
    W = ring_mh(8)
    runner = run(config(p, W, rounds=3, systems={"compute": {"seconds_per_step": 0.5}}))
    count = np.zeros(8, dtype=int)
    for row in runner.rows:
        events = []
        for i in range(8):
            near = [j for j in range(8) if j != i and W[i, j] != 0]
            events.append((i, near[numpy_generator(SEED, "adpsgd", i, count[i]).integers(2)]))
            count[i] += 1
        groups = waves(events)
        assert row["waves"] == len(groups)
        for a, b in pairwise(groups):
            used = {c for e in a for c in events[e]}
            assert used & set(events[b[0]])  # maximal: the next event conflicts
        for group in groups:
            used = [c for e in group for c in events[e]]
            assert len(used) == len(set(used))  # disjoint
    assert [r["sim_time"] for r in runner.rows] == [0.5, 1.0, 1.5]


def test_fast_workers_do_more_updates_in_proportion_to_speed():
    p = Problem(clients=6, seed=5)
    systems = {"compute": {"stragglers": 0.5, "slowdown": 4.0, "seconds_per_step": 0.1}}
    runner = run(config(p, random_doubly_stochastic(6, seed=5), rounds=20, systems=systems))
    slow = runner.exp.systems.model.stragglers
    count = runner.run_state.schedule["updates"].numpy()
    assert count.sum() == 20 * 6
    ratio = count[~slow].mean() / count[slow].mean()
    assert 3.5 < ratio < 4.5


def test_network_time_delays_the_next_computation():
    p = Problem(clients=5, seed=4)
    systems = {**STRAGGLERS, "network": {"latency": 0.02, "bandwidth": 800}}
    runner = run(config(p, ring_mh(5), rounds=4, systems=systems))
    speeds = runner.exp.systems.model.compute(0)  # 0.1 and 0.1·3 (ties as gossipfl has them)
    X, _, times, _ = literal_loop(p, ring_mh(5), 4, speeds, latency=0.02, bandwidth=800)
    assert_close(runner.state["x"].numpy(), X)
    np.testing.assert_allclose([r["sim_time"] for r in runner.rows], times, rtol=0, atol=1e-12)


def test_resume_is_exact():
    p = Problem(clients=6, seed=7)
    cfg = config(p, random_doubly_stochastic(6, seed=7), rounds=5, systems=STRAGGLERS)
    whole = run(cfg)
    saved, resumed = stopped_and_resumed(cfg)
    assert set(saved["algorithm"]) == {"x", "read"}  # the algorithm's rows
    assert set(saved["schedule"]) == {"finish", "updates"}  # the schedule's own, declared
    for space in ("algorithm", "schedule"):
        for name, value in whole.state_dict()[space].items():
            assert torch.equal(value, resumed.state_dict()[space][name]), (space, name)
    np.testing.assert_array_equal(whole.exp.systems.clock.T, resumed.exp.systems.clock.T)
    assert whole.rows[-1]["sim_time"] == resumed.rows[-1]["sim_time"]


def test_a_checkpoint_with_the_schedule_rows_in_the_algorithm_namespace_resumes_exactly():
    """Checkpoints written before the schedule had a namespace of its own kept ``finish``
    and ``updates`` among adpsgd's rows; they resume as the uninterrupted run."""
    p = Problem(clients=6, seed=7)
    cfg = config(p, random_doubly_stochastic(6, seed=7), rounds=5, systems=STRAGGLERS)
    whole = run(cfg)
    first = Runner(load_config(cfg))
    for t in range(2):
        first.step(t)
    saved = first.state_dict()
    saved["algorithm"].update(saved.pop("schedule"))  # the old layout
    resumed = Runner(load_config(cfg))
    resumed.load_state_dict(saved)
    resumed.run()
    assert torch.equal(whole.state["x"], resumed.state["x"])
    assert torch.equal(whole.run_state.schedule["updates"], resumed.run_state.schedule["updates"])


def test_minibatch_draws_do_not_depend_on_the_waves():
    p = Problem(clients=6, seed=8, sizes=[20] * 6)
    cfg = config(p, ring_mh(6), rounds=3, systems=STRAGGLERS)
    cfg["train"]["batch_size"] = 4
    batched = run(cfg)
    single = Runner(load_config(cfg))
    single.schedule.wave = lambda events: [[e] for e in range(len(events))]
    single.run()
    assert_close(batched.state["x"].numpy(), single.state["x"].numpy().astype(np.float64))


def one_sentence(message: str) -> bool:
    return message.count(". ") == 0 and message.endswith(".")


@pytest.mark.parametrize("change,words", [
    ({"order": "synchronous"}, "topology.order: synchronous is not defined for adpsgd"),
    ({"order": "sequential"}, "topology.order: sequential is not defined"),
    ({"compression": {"name": "top_k", "ratio": 0.5}}, "topology.compression"),
])
def test_refusals_are_one_sentence(change, words):
    p = Problem(clients=5)
    cfg = config(p, ring_mh(5), **change)
    with pytest.raises(GossipflError) as info:
        Runner(load_config(cfg))
    assert words in str(info.value) and one_sentence(str(info.value))


def test_directed_and_row_only_graphs_are_refused():
    p = Problem(clients=5)
    W = np.zeros((5, 5))
    for i in range(5):  # a directed ring: i hears i - 1 only (row-stochastic)
        W[i, i] = W[i, (i - 1) % 5] = 0.5
    cfg = config(p, W)
    with pytest.raises(GossipflError) as info:
        Runner(load_config(cfg))
    assert "undirected graph" in str(info.value) and one_sentence(str(info.value))


@pytest.mark.parametrize("systems,words", [
    ({"availability": {"offline": 0.2}}, "systems.availability"),
    ({"availability": {"links": {"fail": 0.2}}}, "systems.availability"),
    ({"compute": {"seconds_per_step": 0.0}}, "systems.compute"),
])
def test_systems_failures_are_refused(systems, words):
    p = Problem(clients=5)
    with pytest.raises(GossipflError) as info:
        Runner(load_config(config(p, ring_mh(5), systems={"compute": {"seconds_per_step": 0.1},
                                                          **systems})))
    assert words in str(info.value) and one_sentence(str(info.value))


def test_centralized_algorithms_are_refused_by_the_order():
    p = Problem(clients=5)
    cfg = config(p, ring_mh(5))
    cfg["algorithm"] = {"name": "fedavg", "participation": 1.0}
    with pytest.warns(IgnoredSetting, match="fedavg is a centralized algorithm"), \
            pytest.raises(GossipflError) as info:  # its graph is not read, then the refusal
        Runner(load_config(cfg))
    assert "topology.order: asynchronous is not defined for algorithm fedavg" in str(info.value)


def test_the_distributed_backend_is_refused():
    from gossipfl.algorithms.decentralized.adpsgd import ADPSGD
    from gossipfl.assembly.compat import features, schedule_refusal

    cfg = load_config({"algorithm": {"name": "adpsgd"}, "topology": {"order": "asynchronous"}})
    message = schedule_refusal(features(cfg, ADPSGD(None, None, None), world=2))
    assert "engine.backend: distributed" in message and one_sentence(message)


def test_bytes_per_round_are_two_models_per_event():
    p = Problem(clients=7, seed=3)
    runner = run(config(p, random_doubly_stochastic(7, seed=3), rounds=3))
    assert all(r["bytes_round"] == 7 * 2 * 4 * p.d for r in runner.rows)
