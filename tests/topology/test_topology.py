"""Topologies, mixing rules, spectral quantities and the Mixer, against independent math."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import torch

from gossipfl.errors import GossipflError
from gossipfl.topology import (
    TOPOLOGIES,
    Mixer,
    Topology,
    build_topology,
    check_connected,
    disagreement_radius,
    largest_safe_beta,
    mixing_matrix,
    spectral_gap,
    validate_mixing,
)

GRAPH_RULES = ("metropolis_hastings", "uniform", "max_degree")
RANDOM_PARAMS = {"k": 4, "p": 0.3, "s": 3}


def build(name: str, m: int = 24, mixing: str = "metropolis_hastings", seed: int = 0,
          **params) -> Topology:
    return build_topology(name, m, mixing, seed, **{**RANDOM_PARAMS, **params})


def circular_distance(m: int) -> np.ndarray:
    """(j − i) mod M for every pair."""
    idx = np.arange(m)
    return (idx[None, :] - idx[:, None]) % m


def slem(W: np.ndarray) -> float:
    """Second-largest eigenvalue modulus, from a full eigen-decomposition of W."""
    return float(np.sort(np.abs(np.linalg.eigvals(W)))[-2])


# --------------------------------------------------------------------------------------------
# Mixing-matrix properties
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rule", GRAPH_RULES)
@pytest.mark.parametrize("name", [n for n in TOPOLOGIES if n != "custom"])
def test_mixing_matrix_properties(name, rule):
    topo = build(name, mixing=rule)
    for t in (0, 1):
        W, A = topo.matrix(t), topo.adjacency(t)
        assert W.dtype == np.float64 and W.shape == (24, 24)
        assert (W >= 0).all()
        np.testing.assert_allclose(W.sum(axis=1), 1.0, atol=1e-12)
        # Sparsity pattern = graph + self loops.
        np.testing.assert_array_equal(W != 0, (A + np.eye(24)) != 0)
        graph_adj = nx.to_numpy_array(topo.graph(t), nodelist=range(24), weight=None)
        np.testing.assert_array_equal(graph_adj, A)
        if rule != "uniform" and topo.mixing == rule:  # not the papers' own weights
            np.testing.assert_allclose(W, W.T, atol=1e-12)
            np.testing.assert_allclose(W.sum(axis=0), 1.0, atol=1e-12)


def test_uniform_is_symmetric_only_on_regular_graphs():
    ring = build("ring", mixing="uniform").matrix(0)
    np.testing.assert_allclose(ring[ring > 0], 1 / 3)
    np.testing.assert_allclose(ring, ring.T)
    star = build("star", mixing="uniform").matrix(0)
    assert star[0, 1] == pytest.approx(1 / 24) and star[1, 0] == pytest.approx(1 / 2)
    assert not np.allclose(star.sum(axis=0), 1.0)


def test_metropolis_hastings_matches_edge_by_edge_formula_on_random_graph():
    graph = nx.gnp_random_graph(30, 0.2, seed=3)
    A = nx.to_numpy_array(graph, nodelist=range(30), weight=None)
    expected = np.zeros((30, 30))
    for i, j in graph.edges():
        expected[i, j] = expected[j, i] = 1 / (1 + max(graph.degree(i), graph.degree(j)))
    for i in range(30):
        expected[i, i] = 1 - expected[i].sum()
    W = mixing_matrix(A, "metropolis_hastings")
    np.testing.assert_allclose(W, expected, atol=1e-15)
    validate_mixing(W, symmetric=True, doubly=True, key="k")


def test_max_degree_weights_on_star():
    W = build("star", m=6, mixing="max_degree").matrix(0)
    assert W[0, 3] == pytest.approx(1 / 6) and W[0, 0] == pytest.approx(1 / 6)
    assert W[3, 3] == pytest.approx(5 / 6) and W[3, 4] == 0


@pytest.mark.parametrize("m", [8, 24])
def test_ring_exponential_full_star_structure(m):
    dist = circular_distance(m)
    ring = build("ring", m).adjacency(0)
    np.testing.assert_array_equal(ring, np.isin(dist, [1, m - 1]))
    offsets = {2**k % m for k in range(int(math.log2(m - 1)) + 1)}
    offsets |= {(-o) % m for o in offsets}
    np.testing.assert_array_equal(build("exponential", m).adjacency(0), np.isin(dist, list(offsets)))
    np.testing.assert_array_equal(build("full", m).adjacency(0), 1 - np.eye(m))
    star = build("star", m).adjacency(0)
    assert star[0, 1:].all() and star[1:, 0].all() and star[1:, 1:].sum() == 0


def test_exponential_degree_at_100():
    assert build("exponential", 100).describe()["degree_max"] == 14


def test_grid_is_a_torus_with_largest_divisor_rows():
    topo = build("grid", 24)  # 4 x 6
    assert (topo.params["rows"], topo.params["cols"]) == (4, 6)
    A = topo.adjacency(0)
    for i in range(24):
        r, c = divmod(i, 6)
        nbrs = {((r + dr) % 4) * 6 + (c + dc) % 6 for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1))}
        assert set(np.flatnonzero(A[i])) == nbrs


def test_grid_with_prime_clients_names_working_sizes():
    with pytest.raises(GossipflError, match=r"^topology\.name: grid .*got 7; .*6 and 8"):
        build("grid", 7)
    with pytest.raises(GossipflError, match="smallest that works is 4"):
        build("grid", 3)


def test_random_graphs_are_seeded_connected_and_regular():
    er_a, er_b = build("erdos_renyi", seed=5), build("erdos_renyi", seed=5)
    np.testing.assert_array_equal(er_a.matrix(0), er_b.matrix(0))
    assert not np.array_equal(er_a.adjacency(0), build("erdos_renyi", seed=6).adjacency(0))
    assert nx.is_connected(er_a.graph(0))
    kreg = build("k_regular", k=3)
    assert (kreg.adjacency(0).sum(axis=1) == 3).all() and nx.is_connected(kreg.graph(0))


def test_static_matrix_is_cached_and_read_only():
    topo = build("ring")
    assert topo.matrix(0) is topo.matrix(7)
    with pytest.raises(ValueError):
        topo.matrix(0)[0, 0] = 5.0


# --------------------------------------------------------------------------------------------
# Spectral gaps and extrapolation radius
# --------------------------------------------------------------------------------------------
def test_ring_spectral_gap_closed_form():
    expected = 1 - (1 / 3 + 2 / 3 * math.cos(2 * math.pi / 100))
    assert spectral_gap(build("ring", 100).matrix(0)) == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(0.00132, abs=5e-6)


def test_grid_and_full_spectral_gaps():
    # 10x10 torus, weights 1/5: eigenvalues (1 + 2cos(2πa/10) + 2cos(2πb/10)) / 5.
    lam = (3 + 2 * math.cos(2 * math.pi / 10)) / 5
    assert spectral_gap(build("grid", 100).matrix(0)) == pytest.approx(1 - lam, rel=1e-9)
    full = build("full", 100).matrix(0)
    np.testing.assert_allclose(full, 1 / 100)
    assert spectral_gap(full) == pytest.approx(1.0, abs=1e-12)


def test_exponential_uniform_spectral_gap_against_eigvalsh():
    W = build("exponential", 100, mixing="uniform").matrix(0)
    np.testing.assert_allclose(W[W > 0], 1 / 15)
    ev = np.linalg.eigvalsh(W)  # ascending, ev[-1] = 1
    lam = max(abs(ev[-2]), abs(ev[0]))
    assert lam == pytest.approx(0.73333, abs=1e-5)
    assert spectral_gap(W) == pytest.approx(1 - lam, abs=1e-12)


def test_spectral_gap_of_non_symmetric_matrix_is_one_minus_slem():
    W = build("random_k", 30, mixing="uniform", k=3).matrix(2)
    assert not np.allclose(W, W.T)
    assert spectral_gap(W) == pytest.approx(1 - slem(W), abs=1e-10)


def test_disconnected_matrix_has_no_gap():
    block = np.full((3, 3), 1 / 3)
    W = np.block([[block, np.zeros((3, 3))], [np.zeros((3, 3)), block]])
    assert spectral_gap(W) == pytest.approx(0.0, abs=1e-12)
    assert largest_safe_beta(W) == -math.inf


def test_ring_extrapolation_diverges_from_beta_one_half():
    W = build("ring", 100).matrix(0)
    assert disagreement_radius(W, 0.5) >= 1 - 1e-12
    assert disagreement_radius(W, 0.55) > 1
    assert disagreement_radius(W, 0.3) < 1
    # Independent: the smallest ring eigenvalue is 1/3 + 2/3 cos(π) = −1/3 ↦ (1+β)(−1/3) − β.
    assert disagreement_radius(W, 0.7) == pytest.approx((1 + 4 * 0.7) / 3, rel=1e-12)
    mu_min = 1 / 3 + 2 / 3 * math.cos(math.pi)
    assert largest_safe_beta(W) == pytest.approx((1 + mu_min) / (1 - mu_min), rel=1e-12)
    assert largest_safe_beta(W) == pytest.approx(0.5, rel=1e-12)


def test_radius_at_zero_beta_is_one_minus_gap():
    for W in (build("ring", 30).matrix(0), build("random_k", 30, mixing="uniform").matrix(0)):
        assert disagreement_radius(W, 0.0) == pytest.approx(1 - spectral_gap(W), abs=1e-10)


@pytest.mark.parametrize("name,rule", [("exponential", "metropolis_hastings"),
                                       ("star", "uniform"), ("random_k", "uniform"),
                                       ("full", "metropolis_hastings")])
def test_largest_safe_beta_is_the_radius_threshold(name, rule):
    W = build(name, 30, mixing=rule).matrix(1)
    beta = largest_safe_beta(W)
    assert 0 < beta < math.inf
    assert disagreement_radius(W, beta - 1e-4) < 1
    assert disagreement_radius(W, beta + 1e-4) > 1
    grid = np.linspace(0, beta - 1e-3, 25)
    assert all(disagreement_radius(W, b) < 1 for b in grid)
    if name == "full":
        assert beta == pytest.approx(1.0, rel=1e-9)


# --------------------------------------------------------------------------------------------
# random_k (time-varying)
# --------------------------------------------------------------------------------------------
def test_random_k_uniform_rows_and_redraws():
    topo = build("random_k", 40, mixing="uniform", k=5, seed=3)
    assert topo.time_varying and topo.directed
    for t in range(3):
        W = topo.matrix(t)
        assert (np.count_nonzero(W, axis=1) == 6).all()
        np.testing.assert_allclose(W[W > 0], 1 / 6)
        assert (np.diag(W) > 0).all()
        assert all(d == 5 for _, d in topo.graph(t).out_degree())
    assert not np.array_equal(topo.matrix(0), topo.matrix(1))
    again = build("random_k", 40, mixing="uniform", k=5, seed=3)
    np.testing.assert_array_equal(again.matrix(1), topo.matrix(1))
    assert not np.array_equal(build("random_k", 40, mixing="uniform", k=5, seed=4).matrix(1),
                              topo.matrix(1))


def test_random_k_symmetric_rule_symmetrizes_the_same_draw():
    directed = build("random_k", 40, mixing="uniform", k=3, seed=1).adjacency(2)
    undirected = build("random_k", 40, mixing="metropolis_hastings", k=3, seed=1)
    np.testing.assert_array_equal(undirected.adjacency(2), np.maximum(directed, directed.T))
    assert not undirected.directed


def test_random_k_neighbours_are_uniform():
    topo = build("random_k", 6, mixing="uniform", k=2, seed=0)
    counts = sum(topo.adjacency(t) for t in range(2000))
    assert np.diag(counts).sum() == 0
    off = counts[~np.eye(6, dtype=bool)] / 2000
    # each other client is drawn with probability k/(M−1) = 0.4; sd ≈ 0.011
    np.testing.assert_allclose(off, 0.4, atol=0.05)


def test_connectivity_over_a_window_of_rounds():
    def halves(t: int) -> np.ndarray:  # round t: only the edges of one half of a 4-ring
        A = np.zeros((4, 4))
        i, j = (0, 1) if t % 2 else (1, 2)
        A[i, j] = A[j, i] = 1
        A[(i + 2) % 4, (j + 2) % 4] = A[(j + 2) % 4, (i + 2) % 4] = 1
        return A

    topo = Topology("alternating", 4, "metropolis_hastings", halves, time_varying=True)
    check_connected(topo, window=2)
    with pytest.raises(GossipflError, match="not connected over the union of rounds 0..0"):
        check_connected(topo, window=1)
    check_connected(build("random_k", 50, mixing="uniform", k=1), window=10)


# --------------------------------------------------------------------------------------------
# Custom matrices and errors
# --------------------------------------------------------------------------------------------
def save(tmp_path, matrix: np.ndarray, suffix: str) -> str:
    path = tmp_path / f"m{suffix}"
    if suffix == ".npy":
        np.save(path, matrix)
    else:
        np.savetxt(path, matrix, delimiter="," if suffix == ".csv" else " ")
    return str(path)


@pytest.mark.parametrize("suffix", [".npy", ".csv", ".txt"])
def test_custom_adjacency_and_matrix_from_files(tmp_path, suffix):
    ring = build("ring", 8)
    topo = build_topology("custom", 8, path=save(tmp_path, ring.adjacency(0), suffix))
    np.testing.assert_allclose(topo.matrix(0), ring.matrix(0))
    W = build("star", 8, mixing="uniform").matrix(0)  # not symmetric, still row-stochastic
    custom = build_topology("custom", 8, "custom", path=save(tmp_path, W, suffix))
    np.testing.assert_allclose(custom.matrix(0), W, atol=1e-15)
    np.testing.assert_array_equal(custom.adjacency(0), build("star", 8).adjacency(0))
    assert not custom.directed  # the pattern is symmetric even though W is not


def test_custom_directed_adjacency_needs_uniform():
    A = np.roll(np.eye(8), 1, axis=1)  # directed cycle i -> i+1: strongly connected
    topo = build_topology("custom", 8, "uniform", array=torch.tensor(A))
    np.testing.assert_allclose(topo.matrix(0), (A + np.eye(8)) / 2)
    assert topo.directed
    with pytest.raises(GossipflError, match=r"^topology\.matrix: the adjacency is not symmetric"):
        build_topology("custom", 8, "metropolis_hastings", matrix=A)


@pytest.mark.parametrize("mutate,mixing,pattern", [
    (lambda W: W.__setitem__((3, 3), W[3, 3] - 0.2), "custom",
     r"^topology\.mixing: custom matrix row 3 sums to 0\.8, not 1\.$"),
    (lambda W: W.__setitem__((0, 1), -0.1), "custom", r"negative entry W\[0,1\]=-0\.1"),
    (lambda W: None, "metropolis_hastings",
     r"^topology\.path: an adjacency matrix holds only 0 and 1, found 0\.333333 at \[0,1\]"),
])
def test_custom_invalid_files(tmp_path, mutate, mixing, pattern):
    W = build("ring", 6).matrix(0).copy()
    mutate(W)
    with pytest.raises(GossipflError, match=pattern):
        build_topology("custom", 6, mixing, path=save(tmp_path, W, ".npy"))


def test_custom_file_errors(tmp_path):
    ring = build("ring", 6).adjacency(0)
    cases = [
        ({"path": save(tmp_path, ring, ".npy")}, 7, "is 6×6 but there are 7 clients"),
        ({"path": str(tmp_path / "missing.csv")}, 6, "no such file"),
        ({"path": str(tmp_path / "m.json")}, 6, "unsupported file type '.json'"),
        ({"path": save(tmp_path, ring[:, :5], ".csv")}, 6, "must be square"),
        ({}, 6, "needs exactly one of topology.path"),
        ({"array": np.eye(6)}, 6, "not connected"),
    ]
    bad = tmp_path / "bad.csv"
    bad.write_text("0,1\n1,x\n")
    cases.append(({"path": str(bad)}, 2, "could not read a matrix"))
    for params, m, message in cases:
        with pytest.raises(GossipflError, match=message):
            build_topology("custom", m, **params)


@pytest.mark.parametrize("args,params,pattern", [
    (("rnig", 10), {}, r"^topology\.name: unknown value 'rnig' \(did you mean 'ring'\?\)"),
    (("ring", 10, "metropolis"), {}, r"^topology\.mixing: unknown value"),
    (("ring", 1), {}, r"^topology\.name: ring with 1 client"),
    (("random_k", 100), {"k": 100}, r"^topology\.k: must be in 1\.\.99 .*got 100\.$"),
    (("k_regular", 7), {"k": 3}, r"^topology\.k: k_regular needs k × clients even"),
    (("k_regular", 10), {"k": 1}, r"^topology\.k: .*disconnected in all 100"),
    (("erdos_renyi", 50), {"p": 0.001}, r"^topology\.p: erdos_renyi with p=0\.001"),
    (("erdos_renyi", 50), {"p": 1.5}, r"^topology\.p: .*got 1\.5\.$"),
    (("ring", 10, "custom"), {}, r"^topology\.mixing: custom needs topology\.name: custom"),
    (("ring", 10), {"kk": 3},
     r"^topology\.kk: unknown parameter of topology 'ring' \(value 3\) \(did you mean 'k'\?\)"),
    (("random_k", 10), {"k": 0}, r"^topology\.k: must be an integer >= 1, got 0\.$"),
])
def test_user_errors_are_one_sentence(args, params, pattern):
    with pytest.raises(GossipflError, match=pattern) as info:
        build_topology(*args, **params)
    assert "\n" not in str(info.value)


def test_validate_mixing_symmetry_and_column_sums():
    W = build("star", 6, mixing="uniform").matrix(0)
    validate_mixing(W, symmetric=False, doubly=False, key="x")
    with pytest.raises(GossipflError, match=r"^x: mixing matrix is not symmetric \(W\[0,1\]"):
        validate_mixing(W, symmetric=True, doubly=False, key="x")
    with pytest.raises(GossipflError, match=r"^x: mixing matrix column 0 sums to 2\.66667"):
        validate_mixing(W, symmetric=False, doubly=True, key="x")


def test_describe_ring():
    info = build("ring", 10).describe()
    assert info["num_clients"] == 10 and info["degree_mean"] == 2.0
    assert info["symmetric"] and info["doubly_stochastic"] and not info["time_varying"]
    assert info["messages_per_step"] == 20
    assert info["spectral_gap"] == pytest.approx(2 / 3 * (1 - math.cos(2 * math.pi / 10)))


# --------------------------------------------------------------------------------------------
# Mixer
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,rule", [("ring", "metropolis_hastings"),
                                       ("random_k", "uniform"), ("star", "max_degree")])
def test_mixer_dense_sparse_and_numpy_agree(name, rule):
    topo = build(name, 30, mixing=rule)
    X = torch.randn(30, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    dense = Mixer(topo, dtype=torch.float64, sparse=False)
    sparse = Mixer(topo, dtype=torch.float64, sparse=True)
    assert sparse.matrix(0).layout == torch.sparse_csr and dense.matrix(0).layout == torch.strided
    for t in (0, 1, 2):
        for q in (1, 3):
            expected = X.numpy()
            for _ in range(q):  # synchronous: every client mixes the previous snapshot
                expected = np.array([topo.matrix(t)[i] @ expected for i in range(30)])
            np.testing.assert_allclose(dense.mix(X, t, q).numpy(), expected, atol=1e-6)
            np.testing.assert_allclose(sparse.mix(X, t, q).numpy(), expected, atol=1e-6)


def test_mixer_float32_and_trailing_dims():
    topo = build("random_k", 20, mixing="metropolis_hastings", k=2)
    X = torch.randn(20, 3, 4)
    a = Mixer(topo, sparse="dense").mix(X, 5, steps=2)
    b = Mixer(topo, sparse="sparse").mix(X, 5, steps=2)
    assert a.shape == X.shape and a.dtype == torch.float32
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # Doubly stochastic W keeps the average model.
    torch.testing.assert_close(a.mean(dim=0), X.mean(dim=0), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_mixer_auto_sparse_and_errors():
    # the measured cost model (docs/benchmarks.md): sparse pays per step, dense W^Q does not
    ring = Mixer(build("ring", 1000))
    assert ring.sparse and ring.uses_sparse(1) and not ring.uses_sparse(4)
    assert not Mixer(build("ring", 100)).sparse  # small M: one dense matmul is cheaper
    assert not Mixer(build("full", 1000)).sparse
    assert not Mixer(build("ring", 1000), dtype=torch.bfloat16).sparse  # no CSR kernel
    assert Mixer(build("ring", 100), sparse="sparse").uses_sparse(4)
    assert not Mixer(build("ring", 1000), sparse=False).uses_sparse(1)
    mixer = Mixer(build("ring", 10))
    X = torch.randn(10, 2)
    out = mixer.mix(X, 0, steps=0)
    assert torch.equal(out, X) and out is not X
    with pytest.raises(ValueError):
        mixer.mix(torch.randn(9, 2), 0)
    with pytest.raises(TypeError):
        mixer.mix(X.double(), 0)
    with pytest.raises(ValueError):
        mixer.mix(X, 0, steps=-1)
    with pytest.raises(GossipflError, match="topology.sparse"):
        Mixer(build("ring", 10), sparse="spares")


def test_mixer_messages():
    m = 30
    assert Mixer(build("ring", m)).messages(0) == 2 * m
    assert Mixer(build("full", m)).messages(0) == m * (m - 1)
    assert Mixer(build("star", m)).messages(0) == 2 * (m - 1)
    assert Mixer(build("random_k", m, mixing="uniform", k=4)).messages(3) == 4 * m
    topo = build("random_k", m, mixing="metropolis_hastings", k=4)
    assert Mixer(topo).messages(3) == int(topo.adjacency(3).sum())


@pytest.mark.slow
def test_authors_random_graph_is_the_codes_draw_literally():
    """Every node draws k − 1 of all M without replacement (self dropped), edge (i, j), i < j,
    iff i drew j, mirrored; uniform weights 1/|N_i ∪ {i}|; a new graph every round."""
    from gossipfl.common.rng import numpy_generator

    m, k = 30, 10
    topo = build_topology("authors_random", m, mixing="uniform", seed=7, k=k)
    for t in (0, 3):
        keys = numpy_generator(7, "topology", t).random((m, m))
        expected = np.zeros((m, m))
        for i in range(m):
            drawn = set(np.argsort(keys[i])[:k - 1].tolist())  # k − 1 distinct of all M
            for j in drawn:
                if i < j:
                    expected[i, j] = expected[j, i] = 1.0
        np.testing.assert_array_equal(topo.adjacency(t), expected)
        W = topo.matrix(t)
        np.testing.assert_allclose(W.sum(axis=1), 1.0)
        np.testing.assert_allclose(W[W != 0], np.repeat(1 / (expected.sum(1) + 1),
                                                        (expected.sum(1) + 1).astype(int)))
    assert not np.array_equal(topo.adjacency(0), topo.adjacency(1))
    degrees = build_topology("authors_random", 100, mixing="uniform", k=10).describe(20)
    assert degrees["degree_min"] < 6 and degrees["degree_max"] > 12  # about 3–17
    with pytest.raises(GossipflError, match="topology.k: must be in 2..30"):
        build_topology("authors_random", m, k=1)
