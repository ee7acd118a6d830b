"""What a round reads back from the device does not grow with its local steps: on a GPU each
read (``.item()``, ``.tolist()``, ``bool(t)``, ``int(t)``, ``.cpu()``, ``nonzero``) waits for
the device, so a read inside the step loop keeps the host from running ahead and makes a
launch-bound model's round a string of round trips (issue 48). Counted on the CPU with a
``TorchFunctionMode``, which sees every such call whatever the device."""

from __future__ import annotations

import collections
import warnings

import pytest
import torch
from torch.overrides import TorchFunctionMode

from gossipfl.algorithms import ALGORITHMS
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.data import from_tensors

#: the calls that read a tensor's values on the host (``numpy`` is left out: on the CPU the
#: fused update hands its rows to numba as arrays, a path a GPU does not take)
READS = frozenset({"item", "tolist", "__bool__", "__int__", "__index__", "__float__", "cpu",
                   "nonzero", "masked_select", "unique"})

#: algorithms that need another topology than the ring's defaults to run at all
SETTINGS = {"d2": {"topology": {"name": "full"}},
            "adpsgd": {"topology": {"name": "ring", "order": "asynchronous"}}}


class HostReads(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS and isinstance(args[0] if args else None, torch.Tensor):
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def tiny_data():
    gen = torch.Generator().manual_seed(0)
    return from_tensors(torch.randn(64, 1, 4, 4, generator=gen),
                        torch.randint(0, 3, (64,), generator=gen),
                        torch.randn(16, 1, 4, 4, generator=gen),
                        torch.randint(0, 3, (16,), generator=gen))


def reads_in_a_round(algorithm: str, local_steps: int, wrap=None) -> collections.Counter:
    """The host reads of round 1 (round 0 warms up); ``wrap(runner)`` may alter it first."""
    data = tiny_data()
    config = {"data": {"tensors": data, "clients": 4, "partition": "iid"},
              "model": {"name": "mlp", "options": {"hidden": [8]}},
              "topology": {"name": "ring"}, "algorithm": {"name": algorithm},
              "train": {"rounds": 4, "batch_size": 4, "lr": 0.05, "local_steps": local_steps},
              "eval": {"local_models": False, "every": 1000}, "device": "cpu", "seed": 0,
              **SETTINGS.get(algorithm, {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = Runner(load_config(config))
    if wrap is not None:
        wrap(runner)
    with torch.no_grad():
        runner.run_round(0)
        with HostReads() as reads:
            runner.run_round(1)
    return reads.counts


@pytest.mark.parametrize("algorithm", ALGORITHMS.names())
def test_a_rounds_host_reads_do_not_grow_with_its_local_steps(algorithm):
    two, four = reads_in_a_round(algorithm, 2), reads_in_a_round(algorithm, 4)
    assert four == two, f"{algorithm}: host reads {dict(two)} with 2 local steps, " \
                        f"{dict(four)} with 4"


def test_the_count_sees_a_read_in_the_step_loop():
    """The measure can fail: a host read planted in the local step is counted once a step."""

    def plant(runner):
        real = runner.trainer.local_step

        def reading(ctx, work, batch):
            loss = real(ctx, work, batch)
            bool(loss.isfinite().all())  # a divergence check per step, say
            return loss

        runner.trainer.local_step = reading

    two = reads_in_a_round("dfedavg", 2, plant)
    four = reads_in_a_round("dfedavg", 4, plant)
    assert four["__bool__"] - two["__bool__"] == 2


def reads_in_a_packed_round(local_steps: int) -> collections.Counter:
    """A packed study's round (gossipfl.studies.packing): 3 runs, two learning rates."""
    from gossipfl.studies.packing.joint import Pack

    data = tiny_data()
    runners = []
    for seed, lr in ((0, 0.05), (1, 0.05), (2, 0.1)):
        config = {"data": {"tensors": data, "clients": 4, "partition": "dirichlet",
                           "alpha": 0.5},
                  "model": {"name": "mlp", "options": {"hidden": [8]}},
                  "topology": {"name": "ring"}, "algorithm": {"name": "dfedavgm"},
                  "train": {"rounds": 4, "batch_size": 4, "lr": lr,
                            "local_steps": local_steps},
                  "eval": {"local_models": False, "every": 1000}, "device": "cpu",
                  "seed": seed}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runners.append(Runner(load_config(config)))
    pack = Pack(runners)
    with torch.no_grad():
        pack.round(0)
        with HostReads() as reads:
            pack.round(1)
    return reads.counts


def test_a_packed_rounds_host_reads_do_not_grow_with_its_local_steps():
    two, four = reads_in_a_packed_round(2), reads_in_a_packed_round(4)
    assert four == two, f"host reads {dict(two)} with 2 local steps, {dict(four)} with 4"
