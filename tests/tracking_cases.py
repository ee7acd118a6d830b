"""What the gradient-tracking and compressed-gossip tests share (tests/algorithms/test_tracking.py,
tests/compression/test_compressed_gossip.py): the step size η_t = lr · decay^t, and an algorithm's rounds
run directly on a least-squares testbed (gossipfl.testing)."""

from __future__ import annotations

import torch

from gossipfl.testing import least_squares, run_round
from tests.lsq import Problem

LR, DECAY, WD = 0.05, 0.9, 1e-2


def eta(t, lr=LR, decay=DECAY):
    return lr * decay**t


def bed(p: Problem, W, steps=1, lr=LR, decay=DECAY, wd=WD):
    return least_squares(p.A, p.b, W, steps=steps, lr=lr, lr_decay=decay, weight_decay=wd)


def run_direct(p, W, algorithm_cls, params, rounds, steps=1, x0=None, **kwargs):
    testbed = bed(p, W, steps=steps, **kwargs)
    algo = algorithm_cls(params, testbed.env, testbed.fed)
    state = algo.init(torch.as_tensor(p.x0 if x0 is None else x0, dtype=torch.float32))
    for t in range(rounds):
        run_round(testbed, algo, state, t)
    return state
