"""The time-varying graphs of the papers: one-peer exponential, Base-(k+1), Epidemic Learning,
random matching — each round's W as defined, exact averaging where promised, and their use in
runs (stochasticity declarations, bytes, the CLI)."""

from __future__ import annotations

import numpy as np
import pytest

from gossipfl.errors import GossipflError
from gossipfl.topology import Mixer, build_topology, topology_names
from gossipfl.topology.dynamic import (
    base_k_sequence,
    epidemic_adjacency,
    one_peer_exponential,
    random_matching_adjacency,
)
from tests.lsq import Problem

J = lambda m: np.full((m, m), 1.0 / m)


def product(matrices):
    P = np.eye(len(matrices[0]))
    for W in matrices:
        P = W @ P
    return P


def peers(W):
    """Per node, the others it exchanges with in the round (in or out)."""
    off = (W != 0) | (W.T != 0)
    np.fill_diagonal(off, False)
    return off.sum(axis=1)


# -- one-peer exponential ----------------------------------------------------------------------
@pytest.mark.parametrize("m", [2, 4, 8, 16, 32])
def test_one_peer_exponential_averages_exactly_after_log2_m_rounds(m):
    tau = int(np.log2(m))
    topo = build_topology("one_peer_exponential", m)
    assert topo.period == tau and topo.stochastic == "doubly"
    Ws = [topo.matrix(t) for t in range(tau)]
    assert np.array_equal(product(Ws), J(m))  # exact, not just close
    # W_{t+τ} = W_t, and the next period averages again from any start
    assert np.array_equal(topo.matrix(tau), Ws[0])
    assert np.array_equal(product([topo.matrix(t) for t in range(3, 3 + tau)]), J(m))


def test_one_peer_exponential_is_the_papers_matrix():
    m = 12  # τ = 4: hops 1, 2, 4, 8
    for t, hop in enumerate([1, 2, 4, 8, 1]):
        W = one_peer_exponential(m, t)
        for i in range(m):
            assert W[i, i] == 0.5 and W[i, (i + hop) % m] == 0.5
            assert np.count_nonzero(W[i]) == 2
    topo = build_topology("one_peer_exponential", m)
    assert topo.directed and topo.describe()["messages_per_step"] == m  # one per node


# -- Base-(k+1) --------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_base_k_reaches_exact_consensus_for_every_m(k):
    for m in range(2, 41):
        sequence = base_k_sequence(m, k)
        Ws = [sequence.dense(r) for r in range(len(sequence))]
        for W in Ws:
            assert np.allclose(W, W.T, rtol=0, atol=0)
            assert np.abs(W.sum(0) - 1).max() < 1e-12 and np.abs(W.sum(1) - 1).max() < 1e-12
            assert (W >= 0).all() and peers(W).max() <= k
        assert np.abs(product(Ws) - J(m)).max() < 1e-12, (m, k)


@pytest.mark.slow
def test_base_k_lengths():
    """Hyper-hypercube when M's prime factors are ≤ k+1 (log_{k+1} M rounds for a power); a
    few more otherwise (6 = 4 + 2 in base 2: the composite 3-block + pair is used)."""
    assert len(base_k_sequence(16, 1)) == 4
    assert len(base_k_sequence(27, 2)) == 3
    assert len(base_k_sequence(12, 3)) == 2  # 4 · 3
    assert len(base_k_sequence(7, 6)) == 1  # one clique of 7
    for m in range(2, 200):
        assert len(base_k_sequence(m, 1)) <= 2 * np.log2(m) + 2


def test_base_k_topology_is_periodic_and_checked():
    topo = build_topology("base_k", 22, k=2)
    period = topo.period
    assert topo.params == {"k": 2, "period": period} and topo.stochastic == "doubly"
    assert np.array_equal(topo.matrix(period + 1), topo.matrix(1))
    assert np.abs(product([topo.matrix(t) for t in range(period)]) - J(22)).max() < 1e-12
    with pytest.raises(GossipflError, match=r"^topology.k: must be in 1..21 for base_k"):
        build_topology("base_k", 22, k=22)


@pytest.mark.slow
def test_connectivity_is_checked_over_a_whole_period():
    topo = build_topology("base_k", 3000, k=1)  # period > 10
    assert topo.period > 10


# -- Epidemic Learning ---------------------------------------------------------------------------
def test_epidemic_each_node_sends_to_s_others_and_averages_what_it_received():
    m, s = 20, 3
    for t in range(4):
        A = epidemic_adjacency(m, s, seed=5, round=t)
        assert (A.sum(axis=0) == s).all() and (np.diag(A) == 0).all()  # column j: j's targets
        topo = build_topology("epidemic", m, seed=5, s=s)
        W = topo.matrix(t)
        received = A.sum(axis=1)
        assert np.allclose(np.diag(W), 1 / (received + 1))
        assert np.allclose(W[A == 1], np.repeat(1 / (received + 1), received.astype(int)))
        assert np.allclose(W.sum(1), 1)
    assert topo.stochastic == "row" and topo.directed and topo.time_varying
    assert not np.array_equal(topo.adjacency(0), topo.adjacency(1))  # a new draw per round
    assert np.array_equal(build_topology("epidemic", m, seed=5, s=s).adjacency(2),
                          topo.adjacency(2))  # seeded
    assert topo.describe()["messages_per_step"] == m * s


def test_epidemic_needs_s():
    with pytest.raises(GossipflError, match=r"^topology.s: must be in 1..9 for epidemic"):
        build_topology("epidemic", 10, s=10)


# -- random matching -----------------------------------------------------------------------------
@pytest.mark.parametrize("m", [2, 9, 10])
def test_random_matching_pairs_average(m):
    topo = build_topology("random_matching", m, seed=1)
    for t in range(5):
        A = random_matching_adjacency(m, 1, t)
        assert (A.sum(1) <= 1).all() and A.sum() == 2 * (m // 2)  # perfect / maximal
        W = topo.matrix(t)
        matched = A.sum(1) == 1
        assert np.allclose(np.diag(W)[matched], 0.5) and np.allclose(W[A == 1], 0.5)
        assert np.allclose(np.diag(W)[~matched], 1.0)
        assert np.allclose(W, W.T)
    for rule in ("uniform", "max_degree"):
        assert np.array_equal(build_topology("random_matching", m, rule, seed=1).matrix(3),
                              topo.matrix(3))


# -- in runs ---------------------------------------------------------------------------------------
def test_new_names_are_listed():
    for name in ("one_peer_exponential", "base_k", "epidemic", "random_matching"):
        assert name in topology_names()


def test_gossip_bytes_follow_the_round_matrix():
    """Per round, each client j sends one model to each i ≠ j with w_ij ≠ 0."""
    p = Problem(clients=8)
    for topo in ({"name": "one_peer_exponential"}, {"name": "epidemic", "s": 2},
                 {"name": "base_k", "k": 1}, {"name": "random_matching"}):
        result = p.run({"name": "dfedavg"}, topology=topo, rounds=3, steps=1)
        graph = build_topology(topo["name"], 8, seed=3, **{k: v for k, v in topo.items()
                                                            if k != "name"})
        for t in range(3):
            W = graph.matrix(t)
            messages = int((W != 0).sum() - (np.diag(W) != 0).sum())
            assert result.metrics[t]["bytes_round"] == messages * 4 * p.d, topo


def test_mixer_applies_a_directed_round_matrix():
    import torch

    topo = build_topology("epidemic", 6, seed=2, s=1)
    X = torch.arange(12, dtype=torch.float64).reshape(6, 2)
    mixer = Mixer(topo, dtype=torch.float64)
    assert np.allclose(mixer.mix(X, 1).numpy(), topo.matrix(1) @ X.numpy())


def test_cli_topology_prints_the_new_graphs(capsys, tmp_path):
    from gossipfl.cli import main

    assert main(["topology", "base_k", "--clients", "10", "--k", "2"]) == 0
    out = capsys.readouterr().out
    assert "mixing base_k" in out and "period" in out and "stochastic              doubly" in out
    assert main(["topology", "epidemic", "--clients", "10", "--s", "3",
                 "--draw", str(tmp_path / "e.png")]) == 0
    out = capsys.readouterr().out
    assert "stochastic              row" in out and (tmp_path / "e.png").exists()


def test_a_checkpoint_from_before_topology_s_still_resumes():
    """A run directory written before ``topology.s`` existed has no such key; at its default
    the config is the same one, set to anything else it is not."""
    from gossipfl.assembly.comparable import comparable_config, same_config
    from gossipfl.assembly.loading import load_config
    from gossipfl.errors import IgnoredSetting

    current = comparable_config(load_config({"topology": {"name": "ring"}}))
    older = {**current, "topology": {k: v for k, v in current["topology"].items() if k != "s"}}
    assert same_config(older, current)
    with pytest.warns(IgnoredSetting, match="topology.s: ignored"):  # a ring does not read s
        other = comparable_config(load_config({"topology": {"s": 3}}))
    assert not same_config(older, other)
    assert not same_config({**older, "seed": 99}, current)
