"""The Federation: group-restricted and masked gossip against NumPy, bytes per sender,
server aggregation; and that no algorithm module crosses the client dimension itself."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import gossipfl.algorithms
from gossipfl.engine.groups import ParamGroups, group_from_mask
from gossipfl.engine.params import ParamLayout
from gossipfl.errors import GossipflError
from gossipfl.network.federation import Federation
from gossipfl.topology import Mixer, build_topology
from tests.lsq import random_doubly_stochastic

M = 6


def federation(W: np.ndarray, personal=("1.*",)) -> Federation:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    layout = ParamLayout.from_module(model)
    groups = ParamGroups.build(layout, personal)
    topology = build_topology("custom", len(W), mixing="custom", array=W)
    sizes = torch.arange(1, len(W) + 1, dtype=torch.float32)
    fed = Federation(len(W), groups, sizes, seed=0, mixer=Mixer(topology, sparse="dense"))
    fed.P, fed.groups = layout.P, groups  # what these tests read beside the federation
    return fed


def messages_per_sender(W: np.ndarray) -> np.ndarray:
    return np.array([sum(1 for i in range(len(W)) if i != j and W[i, j] != 0)
                     for j in range(len(W))])


@pytest.fixture
def W():
    return random_doubly_stochastic(M, seed=4)


def test_gossip_of_a_group_leaves_the_other_group_and_counts_only_its_bytes(W):
    fed = federation(W)
    z = torch.randn(M, fed.P)
    personal = fed.groups.personal.mask()
    mixed = fed.gossip(z, t=0, steps=2, group="shared")
    expected = np.linalg.matrix_power(W, 2) @ z.double().numpy()
    np.testing.assert_allclose(mixed[:, ~personal].numpy(), expected[:, ~personal.numpy()],
                               rtol=1e-5, atol=1e-6)
    assert torch.equal(mixed[:, personal], z[:, personal])  # untouched, bit for bit
    shared = fed.groups.shared.numel
    assert shared == 3 * 4 + 4 and fed.groups.personal.numel == 4 * 2 + 2
    per_sender = messages_per_sender(W) * 2 * 4 * shared
    np.testing.assert_array_equal(fed.traffic.clients, per_sender)
    assert fed.traffic.take() == per_sender.sum()
    assert fed.traffic.total() == 0


def test_masked_gossip_is_the_dispfl_rule(W):
    fed = federation(W)
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(M, fed.P, generator=gen)
    masks = torch.rand(M, fed.P, generator=gen) < 0.5
    masks[:, 0] = False  # a coordinate nobody holds keeps each client's own value
    mixed = fed.gossip(z, t=0, masks=masks)
    Z, Mk = z.double().numpy(), masks.numpy().astype(float)
    expected = np.empty_like(Z)
    for i in range(M):
        for p in range(fed.P):
            num = sum(W[i, j] * Mk[j, p] * Z[j, p] for j in range(M))
            den = sum(W[i, j] * Mk[j, p] for j in range(M))
            expected[i, p] = num / den if den > 0 else Z[i, p]
    np.testing.assert_allclose(mixed.numpy(), expected, rtol=1e-5, atol=1e-6)
    # bytes: each sender's nonzeros as values + the cheaper of int32 indices or a bitmap
    nnz = masks.sum(1).numpy()
    payload = 4 * nnz + np.minimum(4 * nnz, math.ceil(fed.P / 8))
    np.testing.assert_array_equal(fed.traffic.clients, messages_per_sender(W) * payload)


def test_masked_gossip_on_a_group_keeps_the_rest(W):
    fed = federation(W)
    z = torch.randn(M, fed.P)
    masks = torch.rand(M, fed.P) < 0.7
    mixed = fed.gossip(z, t=0, group="personal", masks=masks)
    shared = fed.groups.shared.mask()
    assert torch.equal(mixed[:, shared], z[:, shared])
    assert not torch.allclose(mixed[:, ~shared], z[:, ~shared])


def test_aggregate_weightings_and_upload_bytes(W):
    fed = federation(W)
    values = torch.randn(3, fed.P, dtype=torch.float64)
    clients = torch.tensor([0, 2, 5])
    n = np.array([1.0, 3.0, 6.0])
    np.testing.assert_allclose(fed.aggregate(values, clients).numpy(),
                               (n / n.sum()) @ values.numpy())
    np.testing.assert_allclose(fed.aggregate(values, clients, "uniform").numpy(),
                               values.numpy().mean(0))
    np.testing.assert_allclose(fed.aggregate(values, clients, "sum").numpy(),
                               values.numpy().sum(0))
    assert list(fed.traffic.clients) == [3 * 4 * fed.P, 0, 3 * 4 * fed.P, 0, 0, 3 * 4 * fed.P]
    copies = fed.broadcast(values[0], clients)
    assert copies.shape == (3, fed.P) and fed.traffic.server == 3 * 4 * fed.P


def test_groups_are_column_ranges_and_patterns_are_checked():
    group = group_from_mask("g", [False, True, True, False, True])
    assert group.ranges == ((1, 3), (4, 5)) and group.numel == 3
    x = torch.arange(10.0).reshape(2, 5)
    assert torch.equal(group.select(x), x[:, [1, 2, 4]])
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    with pytest.raises(Exception, match=r"model.personal: 'head\.\*' matches no parameter"):
        ParamGroups.build(ParamLayout.from_module(model), ["head.*"])


CROSSING = re.compile(r"\.(mean|sum|prod|amax|amin)\(\s*(0|dim=0)|\[\s*clients\s*\]|"
                      r"\.expand\(|\.repeat\(|@\s*self\.|\bmixer\b")


def algorithm_lines_matching(pattern: re.Pattern) -> list[str]:
    """``module: line`` of every line of an algorithm module that matches ``pattern``."""
    root = Path(gossipfl.algorithms.__file__).parent
    modules = [p for family in ("decentralized", "centralized", "personalized")
               for p in (root / family).glob("*.py")]
    assert len(modules) >= 10
    return [f"{p.name}: {line.strip()}" for p in modules
            for line in p.read_text().splitlines() if pattern.search(line)]


def test_no_algorithm_module_crosses_the_client_dimension():
    assert algorithm_lines_matching(CROSSING) == []


#: What an algorithm module must not do (issue 22): reach through the Federation for what a
#: client has, probe attributes, or recognise a phase by its name or position.
SIDE_CHANNELS = re.compile(r"fed\.(oracle|groups|train|label_counts|layout)\b|getattr\(|"
                           r"hasattr\(|phase\.name|phase_index|self\.state\b")


def test_no_algorithm_module_reaches_through_probes_or_dispatches_on_phases():
    assert algorithm_lines_matching(SIDE_CHANNELS) == []


def test_an_unknown_weighting_is_one_sentence_naming_the_valid_ones():
    fed = Federation(3, None, torch.ones(3), seed=0)
    with pytest.raises(GossipflError, match="weighting: unknown value 'sample'.*samples, sum, "
                                            "uniform"):
        fed.aggregate(torch.ones(2, 4), torch.tensor([0, 1]), "sample")
