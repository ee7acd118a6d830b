"""A packed study's minibatches (gossipfl.studies.packing.joint.PackedSampler): row r·M + i
draws what client i of run r draws alone, whatever the rows asked for and their order; a
run whose epoch is shorter gets its last batch's indices, masked out, on the extra steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipfl.data.sampler import ClientSampler
from gossipfl.studies.packing.joint import PackedSampler

M, BATCH = 3, 4


def members() -> list[ClientSampler]:
    """Two runs of 3 clients with their own seeds and data sizes (run 1's epoch is longer)."""
    sizes = ([5, 9, 2], [13, 3, 0])
    out = []
    for seed, run_sizes in enumerate(sizes):
        start, parts = 0, []
        for n in run_sizes:
            parts.append(np.arange(start, start + n))
            start += n
        out.append(ClientSampler(parts, BATCH, seed=seed))
    return out


@pytest.mark.parametrize("kind", ["steps", "epoch"])
@pytest.mark.parametrize("clients", [None, [4, 0, 5, 2, 1], [3]])
def test_each_packed_row_draws_what_its_client_draws_alone(kind, clients):
    runs = members()
    packed = PackedSampler(runs, M)
    ids = list(range(2 * M)) if clients is None else clients

    def draw(sampler, who):
        if kind == "steps":
            return sampler.steps(7, 3, "phase", 0, clients=who)
        return sampler.epoch(7, 1, "phase", 0, clients=who)

    joint = draw(packed, clients)
    alone = {r: draw(runs[r], [i - r * M for i in ids if i // M == r])
             for r in range(2) if any(i // M == r for i in ids)}
    assert len(joint) == max(len(batches) for batches in alone.values())
    for row, client in enumerate(ids):
        r = client // M
        own = alone[r]
        k = [i for i in ids if i // M == r].index(client)  # its row among its run's rows
        for s, (idx, mask) in enumerate(joint):
            assert idx.shape == (len(ids), BATCH) and mask.dtype == torch.bool
            if s < len(own):
                assert idx[row].equal(own[s][0][k]) and mask[row].equal(own[s][1][k])
            else:  # past its run's epoch: its last batch's indices, none counted
                assert idx[row].equal(own[-1][0][k]) and not mask[row].any()


def test_each_rows_key_is_its_runs_own_with_its_own_counter():
    """run_keys (a packed study's sampler and augmentation keys): row j of run r gets what
    run r derives for its run-local id and that row's counter, whatever the rows' order."""
    from gossipfl.common.rng import client_keys
    from gossipfl.studies.packing.joint import run_keys

    ids = torch.tensor([4, 0, 5, 2, 1])
    counters = [7, 3, 0, 9, 1]

    def keys_of(r, local, sub):
        return client_keys(10 + r, local, "augment", 2, counters=sub)

    got = run_keys(ids, counters, M, 2, "cpu", keys_of)
    for j, (client, counter) in enumerate(zip(ids.tolist(), counters, strict=True)):
        run, local = divmod(client, M)
        assert got[j] == client_keys(10 + run, [local], "augment", 2, counters=[counter])[0]
