"""Topologies built as edges (gossipfl.topology.sparse): the same rules, checks and sentences
as the dense matrices, and nothing of size M × M at large M."""

import numpy as np
import pytest
import torch

from gossipfl.errors import GossipflError
from gossipfl.topology import Mixer, build_topology, builders, check_connected, graphs
from gossipfl.topology.graphs import Topology
from gossipfl.topology.mixing import mixing_edges, mixing_matrix, validate_mixing
from gossipfl.topology.sparse import (
    DENSE_MAX_CLIENTS,
    Edges,
    components,
    count_strong_components,
    first_asymmetry,
    strongly_connected,
    validate_edges,
)

RULES = ("metropolis_hastings", "uniform", "max_degree")
GRAPHS = [("ring", {}), ("exponential", {}), ("k_regular", {"k": 4}), ("random_k", {"k": 3}),
          ("epidemic", {"s": 3}), ("random_matching", {}), ("one_peer_exponential", {})]


def _same_w(E: Edges, W: np.ndarray, diagonal_exact: bool, atol: float = 4e-16) -> None:
    D = E.to_dense()
    off = ~np.eye(len(W), dtype=bool)
    np.testing.assert_array_equal(D[off], W[off])  # every off-diagonal weight, bit for bit
    if diagonal_exact:
        np.testing.assert_array_equal(np.diag(D), np.diag(W))
    else:  # 1 − Σ_j w_ij summed in column order, the dense rule pairwise: the last bit
        np.testing.assert_allclose(np.diag(D), np.diag(W), rtol=0, atol=atol)
    assert np.array_equal(D != 0, W != 0)


@pytest.mark.parametrize("name,params", GRAPHS)
@pytest.mark.parametrize("rule", RULES)
def test_edge_rules_equal_the_dense_rules(name, params, rule):
    topology = build_topology(name, 40, mixing=rule, seed=3, **params)
    for t in range(3):
        A = topology.adjacency(t)
        if topology._weights is None:
            E = mixing_edges(Edges.from_dense(A), topology.mixing)
            _same_w(E, mixing_matrix(A, topology.mixing),
                    diagonal_exact=name in ("ring", "random_matching"))
        np.testing.assert_array_equal(topology.edges(t).to_dense(), topology.matrix(t))
        assert topology.edges(t).messages() == int((A != 0).sum())
        np.testing.assert_array_equal(topology.edges(t).out_degree(), (A != 0).sum(axis=0))


@pytest.mark.parametrize("name,params", [g for g in GRAPHS if g[0] in
                                         ("ring", "exponential", "random_matching",
                                          "one_peer_exponential")]
                         + [("grid", {}), ("star", {}), ("base_k", {"k": 2}),
                            ("base_k", {"k": 4})])
def test_the_edge_builders_give_the_dense_graphs(monkeypatch, name, params):
    dense = build_topology(name, 60, seed=5, **params)
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 10)
    sparse = build_topology(name, 60, seed=5, **params)
    assert sparse.sparse and not dense.sparse
    for t in range(4):
        # the star's hub sums 59 weights: its diagonal may differ in the last bits
        _same_w(sparse.edges(t), dense.matrix(t), diagonal_exact=name in (
            "ring", "random_matching", "one_peer_exponential", "grid", "base_k"),
            atol=2e-15 if name == "star" else 4e-16)
    assert sparse.stochastic == dense.stochastic
    assert sparse.period == dense.period


@pytest.mark.parametrize("name,params", [g for g in GRAPHS if g[0] in
                                         ("k_regular", "random_k", "epidemic")]
                         + [("authors_random", {"k": 4})])
def test_the_random_edge_builders_draw_the_same_kind_of_graph(monkeypatch, name, params):
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 10)
    topology = build_topology(name, 60, seed=5, **params)
    for t in range(3):
        E = topology.edges(t)
        np.testing.assert_allclose(E.row_sums(), 1.0, atol=1e-12)
        assert (E.values > 0).all()
        A = topology.adjacency_edges(t)
        if name == "k_regular":
            np.testing.assert_array_equal(A.in_degree(), 4)
        if name == "epidemic":  # everyone sends to s = 3 others
            np.testing.assert_array_equal(A.out_degree(), 3)
        if name == "random_k":  # symmetrized: at least k neighbours
            assert (A.in_degree() >= 3).all()
        if name == "authors_random":  # the draws i < j mirrored: undirected, at most
            assert first_asymmetry(A)[0] < 0  # the k − 1 = 3 draws of every client kept
            assert A.nnz <= 2 * 3 * 60 and A.nnz > 0
        assert (A.rows != A.cols).all()


def _bad_matrices():
    W = mixing_matrix(np.roll(np.eye(6), 1, axis=1) + np.roll(np.eye(6), -1, axis=1),
                      "metropolis_hastings")
    negative = W.copy()
    negative[2, 3], negative[2, 2] = -0.1, negative[2, 2] + 0.1 + W[2, 3]
    rows = W.copy()
    rows[4, 4] = 0.5
    asymmetric = W.copy()
    asymmetric[1, 2], asymmetric[1, 1] = 0.5, W[1, 1] - (0.5 - W[1, 2])
    columns = np.roll(np.eye(6), 1, axis=1) * 0.5 + np.eye(6) * 0.5
    columns[0, 1], columns[0, 2] = 0.25, 0.25
    infinite = W.copy()
    infinite[3, 2] = np.inf
    return {"negative": (negative, {}), "rows": (rows, {}),
            "asymmetric": (asymmetric, {"symmetric": True}),
            "columns": (columns, {"doubly": True}), "infinite": (infinite, {}),
            "push-sum columns": (rows, {"rows": False})}


@pytest.mark.parametrize("case", list(_bad_matrices()))
def test_edge_checks_refuse_the_same_inputs_with_the_same_sentences(case):
    W, options = _bad_matrices()[case]
    kwargs = {"symmetric": False, "doubly": False, **options}
    with pytest.raises(GossipflError) as dense:
        validate_mixing(W, key="topology.mixing", label="m", **kwargs)
    with pytest.raises(GossipflError) as sparse:
        validate_edges(Edges.from_dense(W), key="topology.mixing", label="m", **kwargs)
    assert str(sparse.value) == str(dense.value)


def test_a_directed_adjacency_is_refused_by_a_symmetric_rule_in_the_same_words():
    A = np.roll(np.eye(7), 1, axis=1)
    for rule in ("metropolis_hastings", "max_degree"):
        with pytest.raises(GossipflError) as dense:
            mixing_matrix(A, rule)
        with pytest.raises(GossipflError) as sparse:
            mixing_edges(Edges.from_dense(A), rule)
        assert str(sparse.value) == str(dense.value)


@pytest.mark.parametrize("directed", [False, True])
def test_a_disconnected_graph_is_refused_in_the_same_words(directed):
    m = 12
    A = np.zeros((m, m))
    for lo, hi in ((0, 5), (5, 12)):  # two rings
        nodes = np.arange(lo, hi)
        A[nodes, np.roll(nodes, 1)] = 1
        if not directed:
            A[np.roll(nodes, 1), nodes] = 1
    mixing = "uniform"
    dense = Topology("custom", m, mixing, lambda _r: A, directed=directed)
    sparse = Topology("custom", m, mixing, lambda _r: Edges.from_dense(A), directed=directed,
                      sparse=True)
    messages = []
    for topology in (dense, sparse):
        with pytest.raises(GossipflError) as error:
            check_connected(topology)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    assert "(2 components)" in messages[1]


def test_connectivity_helpers():
    m = 9
    i = np.arange(m)
    assert (components(m, i, (i + 1) % m) == 0).all()
    assert strongly_connected(m, i, (i + 1) % m)  # a directed ring (deep: Tarjan's path)
    assert not strongly_connected(m, i[:-1], i[1:])  # a directed path
    assert count_strong_components(m, i[:-1], i[1:]) == m
    labels = components(m, np.array([0, 3]), np.array([1, 4]))
    assert len(set(labels.tolist())) == m - 2


@pytest.mark.parametrize("name,params", GRAPHS)
def test_a_large_topology_is_edges_only(name, params):
    m = 20_000
    assert m > DENSE_MAX_CLIENTS
    topology = build_topology(name, m, seed=1, **params)
    assert topology.sparse
    E = topology.edges(0)
    assert E.nnz < 40 * m  # O(M) entries, no [M, M] array anywhere
    assert all(isinstance(v, Edges) for entry in topology._cache.values() for v in entry)
    with pytest.raises(GossipflError, match=r"needs the dense 20000×20000 mixing matrix"):
        topology.matrix(0, "this test")
    info = topology.describe(rounds=2)
    assert info["spectral_gap"] is None
    mixer = Mixer(topology)
    assert mixer.sparse and mixer.uses_sparse(4)
    W = mixer.matrix(0)
    assert W.layout == torch.sparse_csr and W._nnz() == E.nnz
    X = torch.randn(m, 3, dtype=torch.float64)
    mixer64 = Mixer(topology, dtype=torch.float64)
    expected = np.zeros((m, 3))
    np.add.at(expected, E.rows, E.values[:, None] * X.numpy()[E.cols])
    np.testing.assert_allclose(mixer64.mix(X, 0).numpy(), expected, atol=1e-12)
    rows = torch.tensor([5, 0, 19_999])
    np.testing.assert_allclose(mixer64.mix_rows(X, 0, rows).numpy(), expected[[5, 0, 19_999]],
                               atol=1e-12)
    assert mixer.messages(0) == E.messages()
    with pytest.raises(GossipflError, match="topology.sparse: dense needs the dense"):
        Mixer(topology, sparse="dense")


def _ring_edges(m: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(m)
    return np.concatenate([i, (i + 1) % m]), np.concatenate([(i + 1) % m, i])


@pytest.mark.parametrize("m", [30, 5000])
def test_a_custom_edge_list_is_the_graph_it_lists(tmp_path, m):
    rows, cols = _ring_edges(m)
    csv = tmp_path / "ring.csv"
    csv.write_text("i,j\n" + "\n".join(f"{a},{b}" for a, b in zip(rows, cols)) + "\n")
    npz = tmp_path / "ring.npz"
    np.savez(npz, rows=rows, cols=cols)
    ring = build_topology("ring", m)
    for path in (csv, npz):
        custom = build_topology("custom", m, path=str(path))
        assert custom.sparse == (m > DENSE_MAX_CLIENTS)
        np.testing.assert_array_equal(custom.edges(0).values, ring.edges(0).values)
        np.testing.assert_array_equal(custom.edges(0).keys(), ring.edges(0).keys())


def test_a_custom_mixing_edge_list_and_its_bad_lines(tmp_path):
    m = 2000
    hop = (np.arange(m) + 1) % m
    npz = tmp_path / "w.npz"
    np.savez(npz, rows=np.concatenate([np.arange(m), np.arange(m)]),
             cols=np.concatenate([np.arange(m), hop]), weights=np.full(2 * m, 0.5))
    W = build_topology("custom", m, mixing="custom", path=str(npz))
    assert W.sparse and W.stochastic == "doubly" and W.edges(0).messages() == m
    bad = tmp_path / "bad.csv"
    bad.write_text("i,j\n0,1\n1,2\n2,9999\n")
    with pytest.raises(GossipflError, match=r"line 4 of '.*bad.csv' \(2, 9999\) is not a pair "
                                            r"of clients in 0..1999"):
        build_topology("custom", m, path=str(bad))
    text = tmp_path / "text.csv"
    text.write_text("i,j\n0,1\n1,x\n")
    with pytest.raises(GossipflError, match="could not read an edge list"):
        build_topology("custom", m, path=str(text))
    directed = tmp_path / "directed.csv"
    directed.write_text("i,j\n" + "\n".join(f"{a},{(a + 1) % m}" for a in range(m)) + "\n")
    with pytest.raises(GossipflError, match=r"the adjacency is not symmetric \(A\[0,1\]=1, "
                                            r"A\[1,0\]=0\), which metropolis_hastings"):
        build_topology("custom", m, path=str(directed))
    assert build_topology("custom", m, mixing="uniform", path=str(directed)).directed


def test_erdos_renyi_as_edges_draws_g_m_p(monkeypatch):
    """Above the threshold (and p < 1/3) G(M, p) is drawn as edges: symmetric, no self-loop,
    no pair twice, about p·M(M−1)/2 pairs, connected, the same for the same seed."""
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 10)
    m, p = 300, 0.05
    topology = build_topology("erdos_renyi", m, seed=4, p=p)
    assert topology.sparse
    A = topology.adjacency_edges(0)
    assert first_asymmetry(A)[0] < 0 and (A.rows != A.cols).all()
    assert len(np.unique(A.keys())) == A.nnz
    pairs = m * (m - 1) / 2
    assert abs(A.nnz / 2 - p * pairs) < 4 * np.sqrt(p * pairs)
    assert len(np.unique(components(m, A.rows, A.cols))) == 1
    again = build_topology("erdos_renyi", m, seed=4, p=p).adjacency_edges(0)
    np.testing.assert_array_equal(again.keys(), A.keys())
    for size in (2, 3, 7, 1500):  # the linear index of the upper triangle, one to one
        i, j = builders.upper_pair(np.arange(size * (size - 1) // 2), size)
        want = np.triu_indices(size, 1)
        np.testing.assert_array_equal(i, want[0])
        np.testing.assert_array_equal(j, want[1])
    np.testing.assert_allclose(topology.edges(0).row_sums(), 1.0, atol=1e-12)


def test_random_regular_edges_on_few_nodes(monkeypatch):
    """Few nodes: a sweep may draw only bad partners for the bad edges (it draws again);
    every seed gives a simple k-regular graph, also through k_regular built as edges."""
    from gossipfl.topology import build_topology, graphs
    from gossipfl.topology.dynamic import random_regular_edges

    for seed in range(40):
        lo, hi = random_regular_edges(12, 4, np.random.default_rng(seed))
        assert (lo < hi).all() and len(set(zip(lo.tolist(), hi.tolist()))) == len(lo)
        assert np.bincount(np.concatenate([lo, hi]), minlength=12).tolist() == [4] * 12
    monkeypatch.setattr(graphs, "DENSE_MAX_CLIENTS", 4)
    for seed in range(5):
        topology = build_topology("k_regular", 12, k=4, seed=seed)
        assert topology.sparse and topology.edges(0).in_degree().tolist() == [4] * 12
