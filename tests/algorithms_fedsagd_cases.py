"""What the FedSAGD tests share (tests/algorithms/test_algorithms_fedsagd.py, tests/algorithms/test_algorithms_unit.py):
the least-squares setting, the participation stream's sampled clients, and the float64
re-derivations of FedSAGD's Algorithm 1 and of its baselines (FedDyn, FedCM, MimeLite, FedLNAG,
FedANAG, FedACG) with their cases."""

from __future__ import annotations

import numpy as np

from gossipfl.common.rng import numpy_generator
from tests.lsq import Problem

LR, DECAY, SEED = 0.05, 0.9, 3  # Problem.config's defaults
ROUNDS, STEPS, M, D = 4, 3, 5, 3


def sampled_rounds(p: Problem, rounds: int, participation: float):
    """(t, η_l of round t, the sorted sampled clients), as the participation stream draws."""
    count = max(1, round(participation * p.M))
    for t in range(rounds):
        chosen = numpy_generator(SEED, "participation", t).choice(p.M, count, replace=False)
        yield t, LR * DECAY**t, np.sort(chosen)


def local_runs(chosen, y0: np.ndarray, eta: float, direction, *args) -> np.ndarray:
    """[S, d]: each sampled client's STEPS steps y ← y − η direction(i, y, *args) from y0."""
    finals = []
    for i in chosen:
        y = y0.copy()
        for _ in range(STEPS):
            y = y - eta * direction(i, y, *args)
        finals.append(y)
    return np.stack(finals)


# -- FedSAGD -----------------------------------------------------------------------------------
def fedsagd_states(p, participation, beta=0.9, lam=0.01, mu=0.001, global_lr=1.0):
    """Algorithm 1: the server model ``server`` and the global momentum ``momentum``."""

    def direction(i, y, x, v):
        return p.grad(i, y) + beta * v + (lam + mu) * y - lam * x

    x, v = p.x0[0].copy(), np.zeros(p.d)
    for _, eta, chosen in sampled_rounds(p, ROUNDS, participation):
        ys = local_runs(chosen, x, eta, direction, x, v)
        delta = (ys - x).mean(0)  # unweighted
        v = (beta * v - delta / (STEPS * eta)) / (1 + beta)
        x = x + global_lr * delta
    return {"server": x, "momentum": v}


# -- the baselines -----------------------------------------------------------------------------
WD = 1e-3  # the baselines run with train.weight_decay (the FedSAGD paper's authors' code)


def sgd(p, i, y):
    return p.grad(i, y) + WD * y


def global_momentum_reference(p, participation, local, server, global_lr=1.0):
    """FedCM / FedANAG / MimeLite: clients step along local(i, y, m); the server sets
    m ← server(m, Δ, K η_l, x) and x ← x + η_g Δ (Δ the unweighted mean update)."""
    x, m = p.x0[0].copy(), np.zeros(p.d)
    for _, eta, chosen in sampled_rounds(p, ROUNDS, participation):
        ys = local_runs(chosen, x, eta, local, m)
        delta = (ys - x).mean(0)
        m = server(m, delta, STEPS * eta, x, chosen)
        x = x + global_lr * delta
    return x


def fedcm_reference(p, participation, alpha=0.1, global_lr=1.0):
    return global_momentum_reference(
        p, participation, lambda i, y, m: alpha * sgd(p, i, y) + (1 - alpha) * m,
        lambda m, delta, k_eta, x, chosen: -delta / k_eta, global_lr)


def fedanag_reference(p, participation, beta=0.9, global_lr=1.0):
    def server(m, delta, k_eta, x, chosen):
        average_gradient = -(delta + k_eta * beta**2 * m) / ((1 + beta) * k_eta)
        return beta * m + average_gradient

    return global_momentum_reference(
        p, participation, lambda i, y, m: (1 + beta) * sgd(p, i, y) + beta**2 * m, server,
        global_lr)


def mimelite_reference(p, participation, beta=0.9, global_lr=1.0):
    def server(m, delta, k_eta, x, chosen):
        full_batch = np.mean([sgd(p, i, x) for i in chosen], axis=0)  # ∇f_i at x_t
        return (1 - beta) * full_batch + beta * m

    return global_momentum_reference(
        p, participation, lambda i, y, m: (1 - beta) * sgd(p, i, y) + beta * m, server,
        global_lr)


def fedlnag_reference(p, participation, beta=0.9, global_lr=1.0, form="nesterov"):
    x, b = p.x0[0].copy(), np.zeros(p.d)
    for _, eta, chosen in sampled_rounds(p, ROUNDS, participation):
        ys, us = [], []
        for i in chosen:
            y, u = x.copy(), b.copy()
            for _ in range(STEPS):
                if form == "lookahead":  # App. C.5, lookahead point y − η β u
                    u = beta * u + (1 - beta) * sgd(p, i, y - eta * beta * u)
                    y = y - eta * u
                    continue
                g = sgd(p, i, y)
                u = beta * u + g
                y = y - eta * (g + beta * u)
            ys.append(y)
            us.append(u)
        x, b = x + global_lr * (np.mean(ys, 0) - x), np.mean(us, 0)
    return x


def feddyn_reference(p, participation, alpha=0.01, server_correction=True, global_lr=1.0):
    x, h, h_i = p.x0[0].copy(), np.zeros(p.d), np.zeros((p.M, p.d))
    for _, eta, chosen in sampled_rounds(p, ROUNDS, participation):
        ys = local_runs(chosen, x, eta,
                        lambda i, y, x: sgd(p, i, y) - h_i[i] + alpha * (y - x), x)
        h_i[chosen] -= alpha * (ys - x)
        h = h - alpha / p.M * (ys - x).sum(0)
        x = x + global_lr * (ys - x).mean(0) - (h / alpha if server_correction else 0)
    return x


def fedacg_reference(p, participation, lam=0.85, prox=1e-3, global_lr=1.0):
    x, m = p.x0[0].copy(), np.zeros(p.d)
    for _, eta, chosen in sampled_rounds(p, ROUNDS, participation):
        lookahead = x + lam * m
        ys = local_runs(chosen, lookahead, eta,
                        lambda i, y, anchor: sgd(p, i, y) + prox * (y - anchor), lookahead)
        m = lam * m + (ys - lookahead).mean(0)
        x = x + global_lr * m
    return x


BASELINES = {
    "fedcm": (fedcm_reference, [{}, {"alpha": 0.4, "global_lr": 0.7}]),
    "fedanag": (fedanag_reference, [{}, {"beta": 0.5, "global_lr": 0.7}]),
    "mimelite": (mimelite_reference, [{}, {"beta": 0.3, "global_lr": 0.7}]),
    "fedlnag": (fedlnag_reference, [{}, {"beta": 0.5, "global_lr": 0.7},
                                    {"beta": 0.5, "form": "lookahead"}]),
    "feddyn": (feddyn_reference, [{"alpha": 0.3}, {"alpha": 0.3, "server_correction": False},
                                  {"alpha": 0.1, "global_lr": 0.7}]),
    "fedacg": (fedacg_reference, [{}, {"lam": 0.5, "prox": 0.4, "global_lr": 0.7},
                                  {"prox": 0.0}]),
}
CASES = [(name, params) for name, (_, variants) in BASELINES.items() for params in variants]
