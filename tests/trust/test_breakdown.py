"""The breakdown quantities of a Byzantine run (issue 51, gossipfl.trust.breakdown): μ_min,
the honest Laplacian's algebraic connectivity, and b, the largest Byzantine weight of an
honest client, on graphs where they can be worked by hand (complete graph, ring, star) and
against a float64 re-derivation written with loops; and their place in the run summary."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gossipfl.assembly.loading import load_config
from gossipfl.cli import format_summary
from gossipfl.core.runner import Runner
from gossipfl.results.rundir import run_summary
from gossipfl.trust.breakdown import (
    breakdown_quantities,
    clipped_gossip_gap,
    clipped_gossip_quantities,
    proved_robust,
)
from gossipfl.trust.rules import build_rule
from tests.helpers import TINY
from tests.lsq import random_doubly_stochastic, ring_mh


@pytest.mark.parametrize("n,f", [(5, 1), (10, 3), (7, 0)])
def test_complete_graph_with_uniform_weights(n, f):
    """K_n with w = 1/n: the honest K_{n−f} has μ_min = (n − f)/n, b = f/n, ratio f/(n − f)."""
    W = np.full((n, n), 1.0 / n)
    got = breakdown_quantities(W, np.arange(f))
    assert got["mu_min"] == pytest.approx((n - f) / n, abs=1e-12)
    assert got["b_max"] == pytest.approx(f / n, abs=1e-15)
    assert got["byzantine_neighbours_max"] == f
    assert got["ratio"] == pytest.approx(f / (n - f), abs=1e-12)


def test_ring_with_one_byzantine_client_leaves_a_path():
    """A ring of n with weights 1/3 and one Byzantine client: the honest graph is the path of
    n − 1 clients, λ₂ = (1/3) · 2 (1 − cos(π / (n − 1))); b = 1/3 at its two neighbours."""
    n = 8
    got = breakdown_quantities(ring_mh(n), np.array([2]))
    assert got["mu_min"] == pytest.approx(2 * (1 - math.cos(math.pi / (n - 1))) / 3, abs=1e-12)
    assert got["b_max"] == pytest.approx(1 / 3, abs=1e-15)
    assert got["byzantine_neighbours_max"] == 1


def _star(n):
    """A star, client 0 the centre, Metropolis–Hastings weights: 1/n on each edge."""
    W = np.zeros((n, n))
    W[0, 1:] = W[1:, 0] = 1.0 / n
    W[np.arange(n), np.arange(n)] = 1.0 - W.sum(axis=1)
    return W


def test_star_cut_at_its_centre_and_at_a_leaf():
    """A Byzantine centre cuts the honest leaves apart (μ_min = 0, no ratio); a Byzantine
    leaf leaves a star of n − 2 leaves, λ₂ = 1/n (unit-weight star: 1), b = 1/n (the
    centre), ratio 1."""
    n = 6
    cut = breakdown_quantities(_star(n), np.array([0]))
    assert cut["mu_min"] == pytest.approx(0.0, abs=1e-12) and cut["ratio"] is None
    assert cut["b_max"] == pytest.approx(1 / n)
    leaf = breakdown_quantities(_star(n), np.array([4]))
    assert leaf["mu_min"] == pytest.approx(1 / n, abs=1e-12)
    assert leaf["b_max"] == pytest.approx(1 / n, abs=1e-15)
    assert leaf["ratio"] == pytest.approx(1.0, abs=1e-10)


def test_against_a_float64_re_derivation_on_a_non_symmetric_w():
    W = random_doubly_stochastic(9, seed=3)
    W = 0.7 * W + 0.3 * np.roll(np.eye(9), 1, axis=1)  # not symmetric
    byz = [2, 7]
    honest = [i for i in range(9) if i not in byz]
    k = len(honest)
    L = np.zeros((k, k))
    for a, i in enumerate(honest):
        for c, j in enumerate(honest):
            if i != j:
                L[a, c] = -(W[i, j] + W[j, i]) / 2
        L[a, a] = -L[a].sum()
    mu = sorted(np.linalg.eigvalsh(L))[1]
    b = max(sum(W[i, j] for j in byz) for i in honest)
    count = max(sum(1 for j in byz if W[i, j] != 0) for i in honest)
    got = breakdown_quantities(W, np.array(byz))
    assert got["mu_min"] == pytest.approx(mu, abs=1e-12)
    assert got["b_max"] == pytest.approx(b, abs=1e-15)
    assert got["byzantine_neighbours_max"] == count
    assert got["ratio"] == pytest.approx(b / mu, rel=1e-12)


def test_the_ratio_does_not_change_with_the_gossip_step():
    """W = I − η L: b and μ_min both scale with η."""
    A = (random_doubly_stochastic(7, seed=1) > 0).astype(float)
    np.fill_diagonal(A, 0.0)
    A = np.maximum(A, A.T)
    L = np.diag(A.sum(1)) - A
    ratios = [breakdown_quantities(np.eye(7) - eta * L, np.array([1, 5]))["ratio"]
              for eta in (0.01, 0.05, 0.1)]
    assert ratios == pytest.approx([ratios[0]] * 3, rel=1e-10)


def test_a_byzantine_run_s_summary_holds_them():
    config = {**TINY, "topology": {"name": "full"},
              "byzantine": {"clients": [1], "attack": "ipm"},
              "train": {**TINY["train"], "rounds": 1}}
    runner = Runner(load_config(config))
    runner.run()
    summary = run_summary(runner, "finished")
    assert summary["breakdown"]["mu_min"] == pytest.approx(3 / 4)  # K_3 honest, w = 1/4
    assert summary["breakdown"]["ratio"] == pytest.approx(1 / 3)
    printed = format_summary(summary, Path("run"))
    assert "breakdown inputs     μ_min = 0.75, b = 0.25 (at most 1 Byzantine neighbours), " \
        "b/μ_min = 0.333" in printed
    assert summary["breakdown"]["gamma"] == pytest.approx(3 / 4)  # W̃ = J/4 + I/4 on K_3
    assert summary["breakdown"]["proved"]["rule"] == "mean"
    assert "proved region        mean: no proved threshold" in printed
    plain = Runner(load_config({**config, "byzantine": None}))
    plain.run()
    assert "breakdown" not in run_summary(plain, "finished")


# ------------------------------------------------- ClippedGossip's γ and the proved region
def _w_tilde_gap(W, byz):
    """He et al.'s γ written with loops: W̃_ij = w_ij (i ≠ j honest), W̃_ii = w_ii + Σ_{k∈B} w_ik;
    γ = 1 − the second largest |eigenvalue|."""
    honest = [i for i in range(len(W)) if i not in byz]
    k = len(honest)
    T = np.zeros((k, k))
    for a, i in enumerate(honest):
        for c, j in enumerate(honest):
            T[a, c] = W[i, j]
        T[a, a] += sum(W[i, j] for j in byz)
    return 1.0 - sorted(abs(v) for v in np.linalg.eigvals(T))[-2]


def test_clipped_gossip_gap_on_graphs_worked_by_hand():
    """K_4 with w = 1/4, one Byzantine: W̃ = J/4 + I/4 on K_3, eigenvalues 1, 1/4, 1/4:
    γ = 3/4, δ_max = 1/4, δ_max/γ² = 4/9. The ring of 4 with w = 1/3, one Byzantine: W̃ =
    (1/3)[[2,1,0],[1,1,1],[0,1,2]], eigenvalues 1, 2/3, 0: γ = 1/3, δ_max/γ² = 3."""
    full = clipped_gossip_quantities(np.full((4, 4), 0.25), [3])
    assert (full["gamma"], full["delta_max"]) == (pytest.approx(0.75, abs=1e-12),
                                                  pytest.approx(0.25, abs=1e-15))
    assert full["ratio"] == pytest.approx(4 / 9, abs=1e-12)
    ring = clipped_gossip_quantities(ring_mh(4), [0])
    assert ring["gamma"] == pytest.approx(1 / 3, abs=1e-12)
    assert ring["ratio"] == pytest.approx(3.0, abs=1e-10)


def test_clipped_gossip_gap_on_a_star_and_against_the_loops():
    """A Byzantine centre leaves the leaves apart: W̃ = I on them, γ = 0, no ratio. A
    Byzantine leaf: the loops' γ; and on a random non-symmetric W."""
    n = 6
    cut = clipped_gossip_quantities(_star(n), [0])
    assert cut["gamma"] == pytest.approx(0.0, abs=1e-12) and cut["ratio"] is None
    leaf = clipped_gossip_quantities(_star(n), [4])
    assert leaf["gamma"] == pytest.approx(_w_tilde_gap(_star(n), [4]), abs=1e-12)
    W = random_doubly_stochastic(9, seed=3)
    W = 0.7 * W + 0.3 * np.roll(np.eye(9), 1, axis=1)
    honest = ~np.isin(np.arange(9), [2, 7])
    assert clipped_gossip_gap(W, honest) == pytest.approx(_w_tilde_gap(W, [2, 7]), abs=1e-12)
    assert clipped_gossip_gap(W, np.eye(9, dtype=bool)[0]) == 1.0  # one honest client


def test_proved_robust_per_rule_on_a_ring_and_a_star():
    """The ring of 8 (w = 1/3) with one Byzantine client: every honest receiver sees at most
    one Byzantine neighbour, so b = 1 meets CS+'s, GTS's and the trimmed mean's hypothesis
    (inside unknown: no constant) and b = 0 does not (outside). The star with a Byzantine
    centre: the honest graph is cut, outside for every rule."""
    W, byz = ring_mh(8), [2]
    mu = 2 * (1 - math.cos(math.pi / 7)) / 3
    cs = proved_robust(build_rule({"rule": "cs_plus", "b": 1}), W, byz)
    assert cs["quantity"] == "b/mu_min" and cs["value"] == pytest.approx((1 / 3) / mu)
    assert (cs["hypothesis"], cs["connected"], cs["inside"], cs["threshold"]) == \
        (True, True, None, None)
    assert proved_robust(build_rule({"rule": "cs_plus", "b": 0}), W, byz)["inside"] is False
    assert proved_robust(build_rule({"rule": "gts", "delta": 0.3}), W, byz)["inside"] is False
    assert proved_robust(build_rule({"rule": "gts", "delta": 0.34}), W, byz)["hypothesis"]
    assert proved_robust(build_rule({"rule": "gts", "delta": "byzantine"}), W, byz)["hypothesis"]
    clip = proved_robust(build_rule({"rule": "clipped_gossip", "tau": "oracle"}), W, byz)
    assert clip["quantity"] == "delta_max/gamma^2" and clip["theorem"].startswith("He")
    assert clip["value"] == pytest.approx((1 / 3) / _w_tilde_gap(W, byz) ** 2, rel=1e-10)
    fixed = proved_robust(build_rule({"rule": "clipped_gossip", "tau": 0.3}), W, byz)
    assert fixed["theorem"] is None and fixed["hypothesis"] is None
    adaptive = build_rule({"rule": "clipped_gossip", "tau": "adaptive", "delta": 0.2})
    assert proved_robust(adaptive, W, byz)["inside"] is False  # δ = 0.2 < b_i = 1/3
    median = proved_robust(build_rule({"rule": "median"}), W, byz)
    assert (median["quantity"], median["hypothesis"], median["inside"]) == (None, None, None)
    for spec in ({"rule": "cs_plus", "b": 1}, {"rule": "median"}, None):
        star = proved_robust(build_rule(spec), _star(6), [0])
        assert (star["connected"], star["inside"]) == (False, False)


def test_proved_robust_counts_byzantine_neighbours_on_the_torus():
    """The 4 × 4 torus of the sparse study (ids r·4 + c, w = 1/5): Byzantine [1, 4] gives
    clients 0 and 5 two Byzantine neighbours each, [1, 4, 6] gives client 5 three."""
    import networkx as nx

    A = nx.to_numpy_array(nx.grid_2d_graph(4, 4, periodic=True),
                          nodelist=sorted(nx.grid_2d_graph(4, 4, periodic=True)))
    W = A / 5 + np.eye(16) / 5
    for byz, count in (([1], 1), ([1, 4], 2), ([1, 4, 6], 3)):
        assert breakdown_quantities(W, np.array(byz))["byzantine_neighbours_max"] == count
        for b in (1, 2, 3):
            got = proved_robust(build_rule({"rule": "gts", "b": b}), W, byz)
            assert got["hypothesis"] is (count <= b)
