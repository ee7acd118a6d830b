"""Partitioners, local test splits and partition summaries: invariants and validation."""

from __future__ import annotations

import numpy as np
import pytest

from gossipfl.data import (
    DirichletPartitioner,
    IidPartitioner,
    PathologicalPartitioner,
    build_partitioner,
    local_test_split,
    summarize_partition,
)
from gossipfl.errors import GossipflError

C = 10
LABELS = np.random.default_rng(123).permutation(np.repeat(np.arange(C), [300, 250, 200, 350,
                                                                        300, 280, 320, 300,
                                                                        260, 240]))
N = len(LABELS)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


PARTITIONERS = [
    IidPartitioner(),
    DirichletPartitioner(alpha=0.3),
    DirichletPartitioner(alpha=0.05),
    DirichletPartitioner(alpha=0.5, balanced=False, min_size=5),
    PathologicalPartitioner(2),
    PathologicalPartitioner(3),
]


def check_disjoint_in_range(parts, n=N):
    joined = np.concatenate(parts)
    assert joined.dtype == np.int64
    assert len(np.unique(joined)) == len(joined), "an index is used twice"
    assert joined.min() >= 0 and joined.max() < n


def label_entropy(parts, labels=LABELS):
    counts = np.stack([np.bincount(labels[p], minlength=C) for p in parts]).astype(float)
    p = counts / counts.sum(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.nansum(-p * np.log(p), axis=1)


@pytest.mark.parametrize("partitioner", PARTITIONERS, ids=repr)
def test_indices_disjoint_in_range_and_deterministic(partitioner):
    parts = partitioner.split(LABELS, 20, rng(5))
    assert len(parts) == 20
    check_disjoint_in_range(parts)
    again = partitioner.split(LABELS, 20, rng(5))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    other = partitioner.split(LABELS, 20, rng(6))
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True))


def test_iid_uses_everything_with_near_equal_sizes():
    parts = IidPartitioner().split(LABELS, 7, rng())
    sizes = [len(p) for p in parts]
    assert sum(sizes) == N and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("alpha", [0.01, 0.1, 1.0, 100.0])
def test_balanced_dirichlet_gives_equal_sizes(alpha):
    parts = DirichletPartitioner(alpha).split(LABELS, 30, rng(1))
    check_disjoint_in_range(parts)
    assert {len(p) for p in parts} == {N // 30}


def test_balanced_dirichlet_exhausts_classes_without_duplicates():
    # One client per ~class: priors concentrate, classes run out, priors are renormalized.
    labels = np.repeat(np.arange(4), [5, 5, 5, 85])
    parts = DirichletPartitioner(0.01).split(labels, 4, rng(2))
    check_disjoint_in_range(parts, len(labels))
    assert [len(p) for p in parts] == [25] * 4


def test_smaller_alpha_means_fewer_effective_classes():
    entropy = {a: label_entropy(DirichletPartitioner(a).split(LABELS, 20, rng(3))).mean()
               for a in (0.1, 1.0, 10.0)}
    assert entropy[0.1] < entropy[1.0] < entropy[10.0]
    assert entropy[10.0] > 0.9 * np.log(C)
    unbalanced = {a: label_entropy(
        DirichletPartitioner(a, balanced=False, min_size=1).split(LABELS, 20, rng(3))).mean()
        for a in (0.1, 10.0)}
    assert unbalanced[0.1] < unbalanced[10.0]


def test_unbalanced_dirichlet_min_size_and_coverage():
    parts = DirichletPartitioner(0.3, balanced=False, min_size=20).split(LABELS, 25, rng(4))
    check_disjoint_in_range(parts)
    sizes = np.array([len(p) for p in parts])
    assert sizes.min() >= 20 and sizes.sum() == N and sizes.std() > 10


def test_unbalanced_dirichlet_impossible_min_size():
    with pytest.raises(GossipflError, match="data.min_size: 200 samples for each of 20"):
        DirichletPartitioner(1.0, balanced=False, min_size=200).split(LABELS, 20, rng())
    with pytest.raises(GossipflError, match="data.min_size: no Dirichlet split"):
        DirichletPartitioner(0.01, balanced=False, min_size=100, max_tries=3).split(
            LABELS, 25, rng())


@pytest.mark.parametrize("k", [1, 2, 3, 10])
def test_pathological_k_distinct_classes_spread_evenly(k):
    parts = PathologicalPartitioner(k).split(LABELS, 25, rng(7))
    check_disjoint_in_range(parts)
    summary = summarize_partition(parts, LABELS, C)
    np.testing.assert_array_equal(summary.classes_per_client, k)
    holders = (summary.class_counts > 0).sum(0)
    assert holders.max() - holders.min() <= 1
    assert summary.samples.sum() == N  # 25 k >= 10: every sample used exactly once
    for c in range(C):  # equal shards within a class
        shard = summary.class_counts[:, c][summary.class_counts[:, c] > 0]
        assert shard.max() - shard.min() <= 1


def test_pathological_class_sets_vary():
    parts = PathologicalPartitioner(2).split(LABELS, 40, rng(8))
    sets = {tuple(np.unique(LABELS[p])) for p in parts}
    assert len(sets) > 5


def test_local_test_split_matches_train_labels():
    test_labels = np.random.default_rng(0).permutation(np.arange(1000) % C)
    parts = DirichletPartitioner(0.2).split(LABELS, 10, rng(1))
    local = local_test_split(parts, LABELS, test_labels, C, rng(2))
    ratio = len(test_labels) / N
    for train, test in zip(parts, local, strict=True):
        assert len(np.unique(test)) == len(test) and test.max() < len(test_labels)
        want = np.bincount(LABELS[train], minlength=C) * round(len(train) * ratio) / len(train)
        got = np.bincount(test_labels[test], minlength=C)
        assert got.sum() == round(len(train) * ratio)
        assert np.all(np.abs(got - want) < 1)  # largest-remainder rounding
    fixed = local_test_split(parts, LABELS, test_labels, C, rng(2), size=37)
    assert {len(t) for t in fixed} == {37}
    again = local_test_split(parts, LABELS, test_labels, C, rng(2), size=37)
    assert all(np.array_equal(a, b) for a, b in zip(fixed, again, strict=True))


def test_local_test_split_missing_test_class():
    parts = [np.flatnonzero(LABELS == 3)]
    with pytest.raises(GossipflError, match="no sample of class 3"):
        local_test_split(parts, LABELS, np.zeros(50, dtype=int), C, rng(), size=5)


def test_summary_counts_and_table():
    parts = [np.array([0, 1, 2]), np.array([3]), np.array([], dtype=np.int64)]
    labels = np.array([0, 0, 2, 1])
    summary = summarize_partition(parts, labels, 3)
    np.testing.assert_array_equal(summary.samples, [3, 1, 0])
    np.testing.assert_array_equal(summary.class_counts, [[2, 0, 1], [0, 1, 0], [0, 0, 0]])
    np.testing.assert_array_equal(summary.classes_per_client, [2, 1, 0])
    table = summary.table()
    assert "3 clients, 4 samples" in table and len(table.splitlines()) == 3 + 3 + 1
    assert "(2 more clients)" in summary.table(max_rows=1)


def test_build_partitioner_and_validation():
    assert isinstance(build_partitioner("iid", alpha=None), IidPartitioner)
    d = build_partitioner("dirichlet", alpha=0.5, balanced=False)
    assert isinstance(d, DirichletPartitioner) and d.alpha == 0.5 and not d.balanced
    assert build_partitioner("pathological", classes_per_client=2).classes_per_client == 2
    cases = [
        (lambda: build_partitioner("dirichlett", alpha=1), "did you mean 'dirichlet'"),
        (lambda: build_partitioner("dirichlet"), "data.alpha: required"),
        (lambda: build_partitioner("iid", alpha=0.1), "data.alpha: not a parameter of"),
        (lambda: DirichletPartitioner(-1), "data.alpha: must be > 0, got -1."),
        (lambda: DirichletPartitioner(0.0), "data.alpha: must be > 0"),
        (lambda: PathologicalPartitioner(0), "data.classes_per_client: must be an integer"),
        (lambda: PathologicalPartitioner(11).split(LABELS, 5, rng()),
         r"data.classes_per_client: must be at most the number of classes \(10\), got 11"),
        (lambda: IidPartitioner().split(LABELS, 0, rng()), "data.clients: .* got 0."),
        (lambda: IidPartitioner().split(LABELS, N + 1, rng()), f"data.clients: .*{N}"),
        (lambda: IidPartitioner().split(LABELS.astype(float), 2, rng()), "integer class"),
    ]
    for call, message in cases:
        with pytest.raises(GossipflError, match=message):
            call()
