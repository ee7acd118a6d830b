"""The float64 re-derivations of the DFedAvg family (DFedSAM(-MGS), OledFL, DFedCata) and of
FedAvg, FedSAM, FedProx and SCAFFOLD that tests/algorithms/test_algorithms_papers.py and
tests/algorithms/test_algorithms_unit.py compare against."""

from __future__ import annotations

import numpy as np

from gossipfl.common.rng import numpy_generator
from tests.lsq import Problem

LR, DECAY = 0.05, 0.9


def sam_grad(p: Problem, i: int, y: np.ndarray, rho: float) -> np.ndarray:
    g = p.grad(i, y)
    if rho == 0:
        return g
    return p.grad(i, y + rho * g / np.linalg.norm(g))


def decentralized_states(p: Problem, W, rounds, steps, *, rho=0.0, q=1, wd=0.0,
                         ole_beta=0.0, cata_beta=0.0, lam_prox=0.0, own_local=False):
    """One loop for the DFedAvg family, written from the papers' algorithm boxes; the models
    ``x``, each client's last local model ``last_local`` and its previous mixed model
    ``prev_mixed``."""
    X = p.x0.copy()
    last_local = p.x0.copy()  # x_{i,K}^{-1} = x_i^0
    prev_mixed = p.x0.copy()  # x_i^{-1} = x_i^0
    for t in range(rounds):
        eta = LR * DECAY**t
        if ole_beta:
            Y0 = X + ole_beta * (X - last_local)
        elif cata_beta:
            ref = last_local if own_local else prev_mixed
            Y0 = X + cata_beta * (X - ref)
        else:
            Y0 = X.copy()
        Y = Y0.copy()
        for _ in range(steps):
            D = np.stack([sam_grad(p, i, Y[i], rho) for i in range(p.M)]) + wd * Y
            Y = Y - eta * (D + lam_prox * (Y - Y0))
        last_local, prev_mixed = Y.copy(), X.copy()
        X = np.linalg.matrix_power(W, q) @ Y
    return {"x": X, "last_local": last_local, "prev_mixed": prev_mixed}


def server_states(p: Problem, rounds, steps, participation, *, rho=0.0, mu=0.0,
                  scaffold=False, wd=0.0, global_lr=1.0, seed=3):
    """FedAvg, FedSAM (ρ), FedProx (μ) and SCAFFOLD (option II): the server model ``server``,
    SCAFFOLD's control variates ``c`` and ``c_clients``."""
    x = p.x0[0].copy()
    c, c_i = np.zeros(p.d), np.zeros((p.M, p.d))
    count = max(1, round(participation * p.M))
    for t in range(rounds):
        eta = LR * DECAY**t
        chosen = np.sort(numpy_generator(seed, "participation", t).choice(p.M, count, False))
        ys = []
        for i in chosen:
            y = x.copy()
            for _ in range(steps):
                d = sam_grad(p, i, y, rho) + wd * y + mu * (y - x)
                if scaffold:
                    d = d - c_i[i] + c
                y = y - eta * d
            ys.append(y)
        ys = np.stack(ys)
        if scaffold:
            new = c_i[chosen] - c + (x - ys) / (steps * eta)
            c = c + (new - c_i[chosen]).sum(0) / p.M
            c_i[chosen] = new
            x = x + global_lr * (ys - x).mean(0)
        else:
            w = p.n[chosen] / p.n[chosen].sum()
            x = x + global_lr * (w @ (ys - x))
    return {"server": x, "c": c, "c_clients": c_i}
