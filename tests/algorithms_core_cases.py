"""The float64 re-derivations of DFedAvg (with DFedAvgM's heavy ball and Q gossip steps) and
D-PSGD that tests/algorithms/test_algorithms_core.py and tests/algorithms/test_algorithms_unit.py compare against."""

from __future__ import annotations

import numpy as np

from tests.lsq import Problem


def lr_at(lr, decay, t):
    return lr * decay**t


def dfedavg_reference(p: Problem, W, rounds, steps, lr, decay, wd=0.0, gossip_steps=1,
                      momentum=0.0):
    X = p.x0.copy()
    for t in range(rounds):
        eta = lr_at(lr, decay, t)
        Y, Y_prev = X.copy(), X.copy()
        for _ in range(steps):
            D = p.grads(Y) + wd * Y
            Y, Y_prev = Y - eta * D + momentum * (Y - Y_prev), Y
        X = np.linalg.matrix_power(W, gossip_steps) @ Y
    return X


def dpsgd_reference(p: Problem, W, rounds, lr, decay, wd=0.0):
    """Lian et al.: X^{t+1} = W X^t − η_t (G(X^t) + wd X^t)."""
    X = p.x0.copy()
    for t in range(rounds):
        X = W @ X - lr_at(lr, decay, t) * (p.grads(X) + wd * X)
    return X
