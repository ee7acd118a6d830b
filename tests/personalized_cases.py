"""The float64 re-derivation of DFedMDC / DFedSMDC on the two-layer model (tests/two_layer.py)
that tests/algorithms/test_personalized.py and tests/algorithms/test_algorithms_unit.py compare against."""

from __future__ import annotations

import numpy as np

from tests.two_layer import TwoLayer, sgd_phase


def lr_at(lr, t, decay=0.9):
    return lr * decay**t


def dfedmdc_reference(p: TwoLayer, W, rounds, *, head_steps, head_lr, steps, lr, momentum,
                      wd, rho_head=0.0, rho_body=0.0):
    """DFedMDC / DFedSMDC, Algorithm 1: head steps (body frozen), then body steps (head
    frozen), each a fresh heavy ball; then the bodies mix and the heads stay."""
    X = p.x0.copy()
    for t in range(rounds):
        Z = np.stack([
            sgd_phase(sgd_phase(X[i], lambda y, i=i: p.grad(i, y), p.personal, head_steps,
                                lr_at(head_lr, t), momentum, rho_head, wd),
                      lambda y, i=i: p.grad(i, y), ~p.personal, steps, lr_at(lr, t), momentum,
                      rho_body, wd)
            for i in range(p.M)])
        X = np.where(p.personal, Z, W @ Z)
    return X
