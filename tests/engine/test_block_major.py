"""Block-major local training (``engine.block_clients``, issue 23): blocks of clients run all
their local steps before the next block, instead of every client's step t before anyone's
step t + 1. Each row's minibatches, augmentation and updates are its own, so the numbers are
those of the step-major order, to float rounding (the batched products run over fewer rows):
checked for every registered algorithm on unbalanced clients (server algorithms with partial
participation), every oracle, the sequential and asynchronous orders, and augmentation."""

from __future__ import annotations

import pytest

from tests import distributed_cases as cases
from tests.distributed_cases import assert_same_run

#: every algorithm runs under one shared config: the settings some do not read are warned
#: (IgnoredSetting) and OledFL's β = 0.99 on a ring is warned unstable (StabilityWarning), as
#: designed and tested elsewhere (test_reliability_*, test_algorithms_papers)
pytestmark = [pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting"),
              pytest.mark.filterwarnings("ignore::gossipfl.assembly.experiment.StabilityWarning")]


def blocked(setup: dict, size: int) -> dict:
    setup = {**setup, "engine": {**setup.get("engine", {}), "block_clients": size}}
    return cases.measure_config(setup)


@pytest.mark.represented
@pytest.mark.parametrize("algorithm", cases.builtin_algorithms())
def test_every_algorithm_gives_the_step_major_numbers(algorithm):
    setup = cases.config(algorithm)
    want = cases.measure_config(setup)
    for size in (1, 3):  # one client at a time; blocks of 3, 3, 1 (unbalanced sizes)
        assert_same_run(blocked(setup, size), want, f"{algorithm} block_clients={size}")


@pytest.mark.represented
@pytest.mark.parametrize("oracle", ["stacked", "vmap", "loop"])
def test_every_oracle_gives_the_step_major_numbers(oracle):
    setup = cases.config("dfedsam")
    setup["engine"] = {**setup["engine"], "oracle": oracle}
    assert_same_run(blocked(setup, 2), cases.measure_config(setup), oracle)


@pytest.mark.represented
@pytest.mark.parametrize(("algorithm", "order"), [("oledfl", "sequential"),
                                                  ("adpsgd", "asynchronous")])
def test_other_orders_give_the_step_major_numbers(algorithm, order):
    setup = cases.config(algorithm)
    setup["topology"] = {**setup["topology"], "order": order}
    assert_same_run(blocked(setup, 2), cases.measure_config(setup), order)


@pytest.mark.slow
def test_augmented_images_give_the_step_major_numbers():
    import torch

    from gossipfl.data import from_tensors

    gen = torch.Generator().manual_seed(0)
    data = from_tensors(torch.randn(60, 1, 16, 16, generator=gen),
                        torch.randint(0, 3, (60,), generator=gen),
                        torch.randn(20, 1, 16, 16, generator=gen),
                        torch.randint(0, 3, (20,), generator=gen))
    setup = {
        "data": {"tensors": data, "clients": 5, "partition": "dirichlet", "alpha": 0.5,
                 "min_size": 4, "augment": True},
        "model": {"name": "cnn"}, "topology": {"name": "ring"},
        "algorithm": {"name": "dfedavg"}, "train": {"rounds": 2, "local_epochs": 1,
                                                    "batch_size": 4, "lr": 0.05},
        "seed": 1,
    }
    assert_same_run(blocked(setup, 2), cases.measure_config(setup), "augment")


def test_block_clients_must_be_a_positive_count():
    from gossipfl.assembly.loading import load_config
    from gossipfl.errors import GossipflError

    with pytest.raises(GossipflError, match=r"engine\.block_clients: .*got 0"):
        load_config({"engine": {"block_clients": 0}})


@pytest.mark.parametrize("size", [None, 2])
def test_a_work_without_rows_trains_nothing_and_still_begins_its_phases(size):
    """A rank of the distributed backend can hold no client of a round; its (empty) phases
    still begin, as every rank's do."""
    import torch

    from gossipfl.algorithms.base import Phase, Work
    from gossipfl.testing import least_squares
    from tests.lsq import Problem

    p = Problem(clients=3)
    bed = least_squares(p.A, p.b, steps=2)
    bed.trainer.block_clients = size
    begun = []
    phase = Phase(name="local", begin=lambda ctx, work: begun.append(len(work)))
    empty = Work(torch.zeros(0, bed.env.P), torch.zeros(0, dtype=torch.int64))
    loss, count = bed.trainer.train(0, empty, [phase])
    assert (float(loss), count, begun) == (0.0, 0, [0])
