"""The systems model (issue 27): simulated clocks derived by hand, the renormalized mixing
matrix under offline clients and failed links, every decentralized family mixing with it
(float64 re-derivations for DFedAvg and DSGT on least squares), a server hearing only the
online clients that meet its deadline, exact resume, the config's one-sentence errors, and
no change at all without a ``systems`` section."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.algorithms import get_algorithm
from gossipfl.algorithms.base import Context
from gossipfl.assembly.loading import load_config
from gossipfl.common.rng import numpy_generator
from gossipfl.config import SystemsConfig
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.systems import FailingTopology, SystemsModel, renormalize
from gossipfl.testing import least_squares, run_round
from gossipfl.topology import Topology
from tests.helpers import stopped_and_resumed
from tests.lsq import Problem, assert_close, random_doubly_stochastic, ring_mh

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")

ROOT = Path(__file__).resolve().parents[2]
LR, DECAY = 0.05, 0.9
TIMING = ("seconds", "elapsed", "eval_seconds")


def eta(t):
    return LR * DECAY ** t


def run(config: dict) -> Runner:
    runner = Runner(load_config(config))
    runner.run()
    return runner


def hand_renormalize(W, offline, failed, column=False):
    """W' entry by entry: a dropped w_ij (i ≠ j, an end offline or the link failed) goes to
    the receiver's diagonal (the sender's for a push-sum matrix)."""
    W = np.asarray(W, dtype=np.float64)
    out = W.copy()
    m = len(W)
    for i in range(m):
        for j in range(m):
            if i != j and W[i, j] != 0 and (offline[i] or offline[j] or failed[i, j]):
                out[i, j] = 0.0
                out[j if column else i, j if column else i] += W[i, j]
    return out


def draws(config: dict, rounds: int):
    """The run's offline sets and failed links, round by round (the model's draws)."""
    model = SystemsModel(load_config(config).systems, len(config["data"]["tensors"]["train"]),
                         config["seed"])
    m = model.num_clients
    return [(model.offline(t), model.failed_links(t) if model.failed_links(t) is not None
             else np.zeros((m, m), dtype=bool)) for t in range(rounds)]


# -- the clock ------------------------------------------------------------------------------------
@pytest.mark.parametrize("uplink", [None, "parallel", "shared"])
def test_sim_time_of_dfedavg_on_a_ring_matches_the_hand_derivation(uplink):
    """Ring of 5 (MH weights 1/3), K = 2 full-batch steps, one straggler 10× slower, latency
    10 ms, 1000 bytes/s: a message is P = 4 floats = 16 bytes, 0.01 + 0.016 s; over a shared
    uplink both neighbours' copies go one after the other: 0.01 + 0.032 s."""
    p = Problem(clients=5)
    config = p.config({"name": "dfedavg"}, W=ring_mh(5), rounds=4, steps=2)
    network = {"latency": 0.01, "bandwidth": 1000} | ({"uplink": uplink} if uplink else {})
    config["systems"] = {"compute": {"stragglers": 0.2, "slowdown": 10, "seconds_per_step": 0.1},
                         "network": network}
    runner = run(config)
    slow = runner.exp.systems.model.stragglers
    assert slow.sum() == 1
    c = np.where(slow, 1.0, 0.1)
    message = 0.01 + (32 if uplink == "shared" else 16) / 1000
    T = np.zeros(5)
    expected = []
    for _ in range(4):
        ready = T + 2 * c
        T = np.array([max(ready[i], ready[(i - 1) % 5] + message,
                          ready[(i + 1) % 5] + message) for i in range(5)])
        expected.append((T.max(), T.mean()))
    s = int(np.flatnonzero(slow)[0])
    assert T[s] == pytest.approx(4 * 2.0, abs=1e-12)  # the straggler never waits
    assert T[(s + 2) % 5] < T[(s + 1) % 5] < T[s] + message + 1e-12  # one hop per round
    np.testing.assert_allclose(runner.exp.systems.clock.T, T, rtol=0, atol=1e-12)
    rows = runner.rows
    np.testing.assert_allclose([(r["sim_time"], r["sim_time_mean"]) for r in rows], expected,
                               rtol=0, atol=1e-12)


def test_offline_clients_are_idle_and_nobody_waits_for_them(tmp_path):
    p = Problem(clients=5)
    config = p.config({"name": "dfedavg"}, W=ring_mh(5), rounds=5, steps=2)
    csv = tmp_path / "speeds.csv"
    config["systems"] = {"compute": {"path": str(csv)}, "network": {"latency": 0.5},
                         "availability": {"offline": 0.4}}
    csv.write_text("0.1, 0.2, 0.3\n0.4 0.5\n")
    runner = run(config)
    c = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    T = np.zeros(5)
    for off, failed in draws(config, 5):
        W = hand_renormalize(ring_mh(5), off, failed)
        ready = T + 2 * c
        new = ready.copy()
        for i in range(5):
            for j in range(5):
                if i != j and W[i, j] != 0:
                    new[i] = max(new[i], ready[j] + 0.5)  # unlimited bandwidth
        T = np.where(off, T, new)
    assert any(off.any() for off, _ in draws(config, 5))
    np.testing.assert_allclose(runner.exp.systems.clock.T, T, rtol=0, atol=1e-12)


def test_centralized_clock_waits_for_the_slowest_reporting_client_or_the_deadline(tmp_path):
    p = Problem(clients=5)
    config = p.config({"name": "fedavg", "participation": 1.0}, rounds=2, steps=2,
                      topology={"name": "ring"})
    speeds = tmp_path / "speeds.csv"
    speeds.write_text("0.1 0.2 0.1 3.0 0.1")
    config["systems"] = {"compute": {"path": str(speeds)},
                         "network": {"latency": 0.01, "bandwidth": 1600}}
    free = run(config)
    config["systems"]["deadline"] = 1.0
    timed = run(config)
    link = 0.01 + 16 / 1600
    assert free.rows[0]["sim_time"] == pytest.approx(2 * link + 2 * 3.0, abs=1e-12)
    assert free.rows[1]["sim_time"] == pytest.approx(2 * (2 * link + 2 * 3.0), abs=1e-12)
    assert timed.rows[1]["sim_time"] == pytest.approx(2.0, abs=1e-12)  # the deadline, twice
    np.testing.assert_array_equal(timed.exp.systems.clock.T, np.full(5, 2.0))


# -- the renormalized mixing matrix ---------------------------------------------------------------
def test_renormalized_matrix_equals_the_hand_built_one():
    W = ring_mh(5)
    offline = np.array([False, True, False, False, False])
    failed = np.zeros((5, 5), dtype=bool)
    failed[3, 4] = failed[4, 3] = True
    third = 1 / 3
    expected = np.array([
        [2 * third, 0, 0, 0, third],        # 0 loses 1 (offline)
        [0, 1, 0, 0, 0],                    # 1 offline: the identity's row
        [0, 0, 2 * third, third, 0],        # 2 loses 1
        [0, 0, third, 2 * third, 0],        # 3 loses 4 (link)
        [third, 0, 0, 0, 2 * third],        # 4 loses 3 (link)
    ])
    np.testing.assert_allclose(renormalize(W, offline, failed), expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(renormalize(W, offline, failed),
                               hand_renormalize(W, offline, failed), rtol=0, atol=1e-15)


@pytest.mark.parametrize("seed", range(5))
def test_symmetric_doubly_stochastic_stays_symmetric_and_doubly_stochastic(seed):
    rng = np.random.default_rng(seed)
    W = random_doubly_stochastic(8, seed=seed + 1)
    offline = rng.random(8) < 0.3
    failed = np.triu(rng.random((8, 8)) < 0.3, 1)
    failed = failed | failed.T
    out = renormalize(W, offline, failed)
    np.testing.assert_allclose(out, out.T, atol=1e-15)
    np.testing.assert_allclose(out.sum(0), 1, atol=1e-12)
    np.testing.assert_allclose(out.sum(1), 1, atol=1e-12)
    assert (out >= 0).all()
    for i in np.flatnonzero(offline):
        np.testing.assert_array_equal(out[i], np.eye(8)[i])
        np.testing.assert_array_equal(out[:, i], np.eye(8)[i])


def push_sum_matrix(m: int) -> np.ndarray:
    """Column-stochastic, rows not: client j keeps 0.4 + 0.1 (j mod 3) and sends the rest to
    j + 1 (60 %) and j + 2 (40 %)."""
    P = np.zeros((m, m))
    for j in range(m):
        keep = 0.4 + 0.1 * (j % 3)
        P[j, j] = keep
        P[(j + 1) % m, j] = (1 - keep) * 0.6
        P[(j + 2) % m, j] = (1 - keep) * 0.4
    return P


def test_column_stochastic_stays_column_stochastic():
    P = push_sum_matrix(6)
    assert not np.allclose(P.sum(1), 1)
    offline = np.array([False, False, True, False, False, False])
    failed = np.zeros((6, 6), dtype=bool)
    failed[0, 1] = failed[1, 0] = True
    out = renormalize(P, offline, failed, column=True)
    np.testing.assert_allclose(out.sum(0), 1, atol=1e-12)
    np.testing.assert_allclose(out, hand_renormalize(P, offline, failed, column=True),
                               atol=1e-15)
    np.testing.assert_array_equal(out[2], np.eye(6)[2])
    np.testing.assert_array_equal(out[:, 2], np.eye(6)[2])


def test_failing_topology_is_time_varying_and_as_stochastic_as_its_base():
    p = Problem(clients=6)
    systems = SystemsConfig(availability={"offline": 0.3, "links": {"fail": 0.2}})
    model = SystemsModel(systems, 6, seed=1)
    for W, kind in ((ring_mh(6), "doubly"), (push_sum_matrix(6), "column")):
        base = Topology("hand", 6, "custom", lambda t, W=W: (W != 0) * (1 - np.eye(6)),
                        weights=W, stochastic=kind)
        wrapped = FailingTopology(base, model)
        assert wrapped.time_varying and wrapped.stochastic == kind
        for t in range(4):
            np.testing.assert_allclose(
                wrapped.matrix(t), hand_renormalize(W, model.offline(t), model.failed_links(t),
                                                    column=kind == "column"), atol=1e-15)
    del p


# -- every decentralized family mixes with W' and leaves offline clients alone -----------------------
FAMILIES = [
    ({"name": "dfedavg"}, ring_mh(5), "doubly"),
    ({"name": "dpsgd"}, ring_mh(5), "doubly"),
    ({"name": "dpsgd", "variant": "local_epoch"}, ring_mh(5), "doubly"),
    ({"name": "dsgt"}, ring_mh(5), "doubly"),
    ({"name": "d2"}, (np.eye(5) + ring_mh(5)) / 2, "doubly"),
    ({"name": "sgp"}, push_sum_matrix(5), "column"),
    ({"name": "oledfl", "beta": 0.5}, ring_mh(5), "doubly"),
    ({"name": "kgt", "eta_s": 0.9}, ring_mh(5), "doubly"),
]
AVAILABILITY = {"availability": {"offline": 0.35, "links": {"fail": 0.25}}}


@pytest.mark.parametrize(("algorithm", "W", "kind"), FAMILIES,
                         ids=lambda v: v["name"] + v.get("variant", "") if isinstance(v, dict)
                         else None)
def test_each_family_mixes_with_the_renormalized_matrix(algorithm, W, kind):
    """The run with failures equals the algorithm called round by round on the hand-built
    W'_t, with the offline clients' state rows put back after each round."""
    p = Problem(clients=5)
    rounds = 4
    config = p.config(algorithm, W=W, rounds=rounds, steps=2)
    config["systems"] = AVAILABILITY
    runner = run(config)
    rounds_draws = draws(config, rounds)
    assert any(off.any() for off, _ in rounds_draws) and any(f.any() for _, f in rounds_draws)

    def hand(t):
        off, failed = rounds_draws[t]
        return hand_renormalize(W, off, failed, column=kind == "column")

    topology = Topology("hand", 5, "custom", lambda t: (hand(t) != 0) * (1 - np.eye(5)),
                        time_varying=True, weights=hand, stochastic=kind)
    bed = least_squares(p.A, p.b, topology, steps=2, lr=LR, lr_decay=DECAY, seed=3)
    params = load_config(config).algorithm.params
    algo = get_algorithm(algorithm["name"])(params, bed.env, bed.fed)
    state = algo.init(torch.as_tensor(p.x0, dtype=torch.float32))
    for t in range(rounds):
        before = {k: state[k].clone() for k in algo.client_state}
        run_round(bed, algo, state, t)
        off = torch.as_tensor(rounds_draws[t][0])
        for key in algo.client_state:
            state[key][off] = before[key][off]
    for key in algo.client_state:
        assert_close(runner.state[key], state[key].double().numpy())


def test_offline_rows_do_not_change_in_their_offline_rounds_and_cost_no_bytes():
    p = Problem(clients=5)
    config = p.config({"name": "dsgt"}, W=ring_mh(5), rounds=4)
    config["systems"] = AVAILABILITY
    runner = Runner(load_config(config))
    rounds_draws = draws(config, 4)
    steps = runner.exp.systems.steps()  # K_i: one step a round for DSGT
    with torch.no_grad():
        for t in range(4):
            before = {k: v.clone() for k, v in runner.state.items()}
            computed = runner.client_steps
            row = runner.run_round(t)
            off, failed = rounds_draws[t]
            assert runner.client_steps - computed == steps[~off].sum()  # no compute when off
            for key in ("x", "tracker"):
                assert torch.equal(runner.state[key][torch.as_tensor(off)],
                                   before[key][torch.as_tensor(off)])
            W = hand_renormalize(ring_mh(5), off, failed)
            messages = int(((W != 0) & ~np.eye(5, dtype=bool)).sum())
            assert row["bytes_round"] == 2 * messages * 4 * 4  # x and y, P = 4 floats


def test_dfedavg_with_failures_matches_the_float64_rederivation():
    """x_i^{t+1} = Σ_j w'_ij z_j^t for online i (z: K gradient steps from x^t), x_i^t for
    offline i."""
    p = Problem(clients=5)
    rounds, steps = 4, 2
    config = p.config({"name": "dfedavg"}, W=ring_mh(5), rounds=rounds, steps=steps)
    config["systems"] = AVAILABILITY
    runner = run(config)
    X = p.x0.copy()
    for t, (off, failed) in enumerate(draws(config, rounds)):
        Z = X.copy()
        for _ in range(steps):
            Z = Z - eta(t) * p.grads(Z)
        mixed = hand_renormalize(ring_mh(5), off, failed) @ Z
        X = np.where(off[:, None], X, mixed)
    assert_close(runner.state["x"], X)


def test_dsgt_with_failures_matches_the_float64_rederivation():
    """Pu & Nedić in the stored form: y^k = τ^k + g^k (τ^0 = 0), x^{k+1} = W'(x − α y),
    τ^{k+1} = W' y − g for online clients; an offline client keeps x and τ."""
    p = Problem(clients=5)
    rounds = 5
    config = p.config({"name": "dsgt"}, W=random_doubly_stochastic(5), rounds=rounds)
    config["systems"] = AVAILABILITY
    runner = run(config)
    X, tracker = p.x0.copy(), np.zeros_like(p.x0)
    for t, (off, failed) in enumerate(draws(config, rounds)):
        W = hand_renormalize(random_doubly_stochastic(5), off, failed)
        G = p.grads(X)
        Y = tracker + G
        X_new, tracker_new = W @ (X - eta(t) * Y), W @ Y - G
        X = np.where(off[:, None], X, X_new)
        tracker = np.where(off[:, None], tracker, tracker_new)
    assert_close(runner.state["x"], X)
    assert_close(runner.state["tracker"], tracker)


# -- a server hears only the online clients that meet its deadline -------------------------------
def fedavg_reference(p: Problem, rounds, steps, participation, reporting):
    x = p.x0[0].copy()
    count = max(1, round(participation * p.M))
    for t in range(rounds):
        sampled = np.sort(numpy_generator(3, "participation", t).choice(p.M, count,
                                                                         replace=False))
        clients = [i for i in sampled if reporting(t, i)]
        if not clients:
            continue
        ys = []
        for i in clients:
            y = x.copy()
            for _ in range(steps):
                y = y - eta(t) * p.grad(i, y)
            ys.append(y)
        weights = p.n[clients] / p.n[clients].sum()
        x = x + weights @ (np.array(ys) - x)
    return x


def server_config(p, participation=0.6, rounds=4, **systems):
    config = p.config({"name": "fedavg", "participation": participation}, rounds=rounds,
                      steps=2, topology={"name": "ring"})
    config["systems"] = systems
    return config


def test_offline_clients_are_left_out_of_fedavgs_aggregate():
    p = Problem(clients=6)
    config = server_config(p, availability={"offline": 0.4})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = run(config)
    model = SystemsModel(load_config(config).systems, 6, 3)
    expected = fedavg_reference(p, 4, 2, 0.6, lambda t, i: not model.offline(t)[i])
    assert_close(runner.state["server"], expected)
    plain = fedavg_reference(p, 4, 2, 0.6, lambda t, i: True)
    assert not np.allclose(expected, plain)  # someone sampled was offline


def test_the_deadline_drops_the_slow_clients_and_nobody_left_keeps_the_server(tmp_path):
    p = Problem(clients=6)
    speeds = tmp_path / "speeds.csv"
    speeds.write_text("0.1 2.0 0.1 0.1 2.0 0.1")
    config = server_config(p, compute={"path": str(speeds)}, deadline=1.0)
    runner = run(config)
    expected = fedavg_reference(p, 4, 2, 0.6, lambda t, i: i not in (1, 4))
    assert_close(runner.state["server"], expected)
    assert [r["sim_time"] for r in runner.rows] == pytest.approx([1.0, 2.0, 3.0, 4.0])
    config = server_config(p, compute={"path": str(speeds)}, deadline=0.1)
    nobody = run(config)
    assert_close(nobody.state["server"], p.x0[0])
    assert all(r["bytes_round"] == 0 for r in nobody.rows)


# -- resume, no section, bad input -----------------------------------------------------------------
def test_resume_repeats_clocks_and_params():
    p = Problem(clients=5)
    config = p.config({"name": "dsgt"}, W=ring_mh(5), rounds=5)
    config["systems"] = {"compute": {"distribution": "lognormal", "mean": 0.1, "sigma": 0.5,
                                     "vary": True},
                         "network": {"latency": {"distribution": "lognormal", "mean": 0.01,
                                                 "sigma": 0.3}, "bandwidth": 1e4},
                         "availability": {"markov": {"p_off": 0.3, "p_on": 0.5},
                                          "links": {"fail": 0.2}}}
    whole = run(config)
    saved, resumed = stopped_and_resumed(config)
    assert "systems" in saved
    np.testing.assert_array_equal(resumed.exp.systems.clock.T, whole.exp.systems.clock.T)
    for name, value in whole.state_dict()["algorithm"].items():
        assert torch.equal(value, resumed.state_dict()["algorithm"][name]), name
    assert whole.rows[-1]["sim_time"] == resumed.rows[-1]["sim_time"]


def comparable(rows):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def test_systems_null_changes_nothing():
    p = Problem(clients=5)
    config = p.config({"name": "dfedavg"}, W=ring_mh(5), rounds=3, steps=2)
    plain = gossipfl.run(config)
    with_null = gossipfl.run({**config, "systems": None})
    assert torch.equal(plain.params, with_null.params)
    assert comparable(plain.metrics) == comparable(with_null.metrics)
    assert "systems" not in load_config(config).to_dict()
    assert "sim_time" not in plain.metrics[-1]


@pytest.mark.parametrize(("systems", "message"), [
    ({"availability": {"offline": 1.5}},
     "systems.availability.offline: must be in [0, 1), got 1.5."),
    ({"availability": {"ofline": 0.1}},
     ("systems.availability.ofline: unknown key (did you mean 'offline'?); the keys of "
      "systems.availability are offline, markov, links.")),
    ({"availabilty": {"offline": 0.1}},
     ("systems.availabilty: unknown key (did you mean 'availability'?); the keys of systems "
      "are compute, network, availability, deadline.")),
    ({"availability": {"markov": {"p_off": 0.1, "p_on": 0}}},
     "systems.availability.markov.p_on: must be in (0, 1], got 0."),
    ({"availability": {"links": {"fail": -0.1}}},
     "systems.availability.links.fail: must be in [0, 1), got -0.1."),
    ({"compute": {"seconds_per_step": -1}},
     "systems.compute.seconds_per_step: must be >= 0, got -1."),
    ({"compute": {"distribution": "normal", "mean": 1}},
     "systems.compute.distribution: unknown value 'normal'"),
    ({"compute": {"stragglers": 0.1, "slowdown": 0.5, "seconds_per_step": 0.1}},
     "systems.compute.slowdown: must be >= 1, got 0.5."),
    ({"compute": {"stragglers": 0.1, "mean": 0.5, "seconds_per_step": 0.1}},
     "systems.compute.mean: does not go with systems.compute.stragglers"),
    ({"network": {"bandwidth": 0}}, "systems.network.bandwidth: must be > 0, got 0."),
    ({"network": {"uplink": "serial"}}, "systems.network.uplink: unknown value 'serial'"),
    ({"network": {"latncy": 0}},
     ("systems.network.latncy: unknown key (did you mean 'latency'?); the keys of "
      "systems.network are ")),
    ({"deadline": -2}, "systems.deadline: must be > 0 or null, got -2."),
])
def test_bad_input_is_one_sentence_naming_key_and_value(systems, message):
    p = Problem(clients=4)
    config = p.config({"name": "dfedavg"}, W=ring_mh(4), rounds=1)
    config["systems"] = systems
    with pytest.raises(GossipflError) as info:
        load_config(config)
    assert str(info.value).startswith(message)


def test_a_file_of_the_wrong_length_is_named(tmp_path):
    p = Problem(clients=4)
    speeds = tmp_path / "speeds.csv"
    speeds.write_text("0.1, 0.2")
    config = p.config({"name": "dfedavg"}, W=ring_mh(4), rounds=1)
    config["systems"] = {"compute": {"path": str(speeds)}}
    with pytest.raises(GossipflError, match="holds 2 values, but there are 4 clients"):
        gossipfl.run(config)


def test_distributed_backend_is_refused_in_one_sentence():
    p = Problem(clients=4)
    config = p.config({"name": "dfedavg"}, W=ring_mh(4), rounds=1)
    config["systems"] = {"compute": {"seconds_per_step": 0.1}}
    config["engine"] = {"backend": "distributed"}
    with pytest.raises(GossipflError, match="systems: not implemented under engine.backend: "
                                            "distributed yet"):
        load_config(config)


def test_markov_availability_starts_stationary_and_resumes_out_of_order():
    systems = SystemsConfig(availability={"markov": {"p_off": 0.2, "p_on": 0.6}})
    model = SystemsModel(systems, 2000, seed=5)
    fractions = [model.offline(t).mean() for t in range(30)]
    assert np.mean(fractions) == pytest.approx(0.25, abs=0.02)
    assert fractions[0] == pytest.approx(0.25, abs=0.03)
    again = SystemsModel(systems, 2000, seed=5)
    np.testing.assert_array_equal(again.offline(17), model.offline(17))
    assert model.offline(3).mean() == pytest.approx(fractions[3])


@pytest.mark.parametrize(("train", "algorithm"), [
    ({"local_epochs": 2, "batch_size": 4}, {"name": "dfedavg"}),
    ({"local_steps": 3, "batch_size": 4}, {"name": "dfedavg"}),
    ({"local_epochs": 1, "batch_size": 5}, {"name": "dpsgd", "variant": "local_epoch"}),
    ({"local_steps": 3, "batch_size": "full"}, {"name": "dsgt"}),
])
def test_the_clocks_steps_are_the_steps_the_trainer_runs(train, algorithm):
    """K_i (planned from the phases) equals ``Work.steps`` counted by the local loop, with
    unequal n_i (6, 9, 12, ...)."""
    p = Problem(clients=5)
    config = p.config(algorithm, W=ring_mh(5), rounds=1)
    config["train"].pop("local_steps")
    config["train"].update(train)
    config["systems"] = {"compute": {"seconds_per_step": 0.1}}
    runner = Runner(load_config(config))
    algo = runner.exp.algorithm
    ctx = Context(round=0, lr=0.05, env=runner.exp.env)
    with torch.no_grad():
        work = algo.begin_round(ctx, runner.state)
        runner.trainer.train(0, work, algo.phases())
    np.testing.assert_array_equal(runner.exp.systems.steps(), work.steps[:, 0].numpy())


@pytest.mark.parametrize("compression", ["algorithm", "topology"])
def test_failures_with_compressed_gossip_are_refused_in_one_sentence(compression):
    p = Problem(clients=5)
    name = "choco" if compression == "algorithm" else "dfedavg"
    config = p.config({"name": name}, W=ring_mh(5), rounds=1)
    if compression == "topology":
        config["topology"]["compression"] = {"compressor": "top_k", "fraction": 0.5,
                                             "gamma": 0.5}
    config["systems"] = AVAILABILITY
    with pytest.raises(GossipflError, match="systems.availability: not implemented with "
                                            "compressed gossip yet"):
        gossipfl.run(config)
