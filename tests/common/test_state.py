"""One owner for state (gossipfl.common.state): the run's state is one RunState, a namespace per
owner; a checkpoint is that state, restored in place; no component keeps a checkpoint of its
own. (That a run with every owner resumes bit for bit:
tests/compression/test_compressed_gossip.py::test_resuming_repeats_the_run_exactly.)"""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch

from gossipfl.algorithms.base import Algorithm
from gossipfl.assembly.loading import load_config
from gossipfl.common.state import RunState
from gossipfl.compression.gossip import Channels
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.network.federation import Federation
from gossipfl.systems import Systems
from gossipfl.systems.clock import Clock
from gossipfl.trust.dpsgd import PrivateGradient
from gossipfl.trust.privacy import Privacy
from tests.helpers import TINY

RUNNER_KEYS = {"round", "rows", "bytes_total", "train_seconds"}


def every_owner() -> dict:
    """TINY with compressed gossip, a systems section and DP-SGD."""
    config = copy.deepcopy(TINY)
    config["topology"]["compression"] = {"compressor": "rand_k", "k": 3, "gamma": 0.5}
    config["systems"] = {"compute": {"distribution": "lognormal", "mean": 0.1, "sigma": 0.5,
                                     "vary": True}}
    config["privacy"] = {"clip": 0.5, "noise_multiplier": 1.0, "delta": 1e-3}
    return config


def stepped(config: dict, rounds: int = 2) -> Runner:
    runner = Runner(load_config(config))
    for t in range(rounds):
        runner.step(t)
    return runner


def test_state_dict_keys_are_the_run_state_s_namespaces():
    runner = stepped(every_owner())
    spaces = runner.run_state.namespaces()
    assert list(spaces) == ["algorithm", "gossip", "systems", "privacy"]
    saved = runner.state_dict()
    assert set(saved) == RUNNER_KEYS | set(spaces)
    assert list(saved["algorithm"]) == ["x"]
    assert list(saved["gossip"]) == ["0.hat", "0.mixed"]
    assert list(saved["systems"]) == ["clocks"] and list(saved["privacy"]) == ["steps"]
    plain = stepped(TINY, 1)
    assert list(plain.run_state.namespaces()) == ["algorithm"]
    assert set(plain.state_dict()) == RUNNER_KEYS | {"algorithm"}


def test_each_component_keeps_its_state_in_its_namespace():
    runner = stepped(every_owner())
    state, exp = runner.run_state, runner.exp
    assert isinstance(state, RunState) and state is exp.state
    assert runner.state is state.algorithm  # what the schedule and the evaluator are handed
    channels = next(s for s in exp.fed.pipeline.stages if isinstance(s, Channels))
    assert channels.state is state.gossip  # a stage of the Federation's gossip pipeline
    assert exp.systems.clock.state is state.systems
    assert exp.privacy.gradient.state is state.privacy
    assert exp.systems.clock.T is state.systems["clocks"] and state.systems["clocks"].max() > 0
    assert exp.privacy.gradient.steps is state.privacy["steps"]
    assert int(state.privacy["steps"].min()) == 2 * 2  # two rounds of two local steps
    assert torch.count_nonzero(state.gossip["0.hat"]) > 0


@pytest.mark.parametrize("cls", [Algorithm, Channels, Federation, Systems, Clock, Privacy,
                                 PrivateGradient])
def test_no_component_keeps_a_checkpoint_of_its_own(cls):
    for name in ("state_dict", "load_state_dict", "checkpoint", "restore"):
        assert not hasattr(cls, name), f"{cls.__name__}.{name}"


def test_loading_restores_every_namespace_in_place_with_copies():
    first = stepped(every_owner())
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)  # as a run directory writes and reads it
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    runner = Runner(load_config(every_owner()))
    spaces = runner.run_state.namespaces()
    held = {name: dict(space) for name, space in spaces.items()}
    runner.load_state_dict(saved)
    for name, space in spaces.items():
        assert runner.run_state.namespaces()[name] is space  # the same objects, refilled
        for key, value in saved[name].items():
            live = space[key]
            assert torch.equal(torch.as_tensor(live), value), (name, key)
            if key in held[name]:  # where and as the live entry was
                assert type(live) is type(held[name][key])
                assert live.dtype == held[name][key].dtype
            if isinstance(live, torch.Tensor):  # never the checkpoint's own tensors
                assert live.untyped_storage().data_ptr() != value.untyped_storage().data_ptr()
    assert isinstance(spaces["systems"]["clocks"], np.ndarray)
    channels = next(s for s in runner.exp.fed.pipeline.stages if isinstance(s, Channels))
    assert channels.state is spaces["gossip"]
    for t in range(2, 4):  # and it goes on as the run it came from
        first.step(t)
        runner.step(t)
    assert torch.equal(first.client_models(), runner.client_models())
    assert torch.equal(first.run_state.privacy["steps"], runner.run_state.privacy["steps"])
    assert saved["privacy"]["steps"].tolist() == [4] * 4  # resuming did not move the checkpoint


def test_runner_state_replaced_keeps_the_namespace():
    runner = stepped(TINY, 1)
    space = runner.state
    runner.state = {"x": space["x"].clone() + 1}
    assert runner.state is space and runner.run_state.algorithm is space


@pytest.mark.parametrize("part,key,sentence", [
    ("algorithm", "x", r"checkpoint: algorithm dfedavg state lacks \['x'\]"),
    ("privacy", None, r"checkpoint: privacy state lacks \['steps'\]"),
    ("systems", "clocks", r"checkpoint: systems state lacks \['clocks'\]"),
])
def test_a_checkpoint_that_lacks_a_kept_entry_is_one_sentence(part, key, sentence):
    saved = stepped(every_owner(), 1).state_dict()
    if key is None:
        del saved[part]
    else:
        del saved[part][key]
    with pytest.raises(GossipflError, match=sentence):
        Runner(load_config(every_owner())).load_state_dict(saved)
