"""What the sequential-order tests share (tests/schedules/test_sequential.py,
tests/algorithms/test_algorithms_unit.py): a row-stochastic graph, each round's matrix, the authors'
in-place loop over clients re-derived in float64, and the cases run against it."""

from __future__ import annotations

import numpy as np

from gossipfl.topology import build_topology
from tests.lsq import Problem

LR, DECAY, M = 0.05, 0.9, 7


def row_stochastic(m: int, seed: int = 4) -> np.ndarray:
    """Uniform weights 1/|N_i ∪ {i}| on a random symmetric graph (not doubly stochastic)."""
    rng = np.random.default_rng(seed)
    adj = np.triu(rng.random((m, m)) < 0.45, 1)
    adj = adj | adj.T
    for i in range(m - 1):
        adj[i, i + 1] = adj[i + 1, i] = True
    A = adj + np.eye(m)
    return A / A.sum(axis=1, keepdims=True)


def round_matrix(p: Problem, graph: str, t: int) -> np.ndarray:
    if graph == "row_stochastic":
        return row_stochastic(p.M)
    return build_topology("authors_random", p.M, "uniform", seed=3, k=4).matrix(t)


def literal_loop(p: Problem, graph: str, rounds: int, steps: int, *, rho=0.0, wd=0.0,
                 momentum=0.0, ole_beta=0.0, cata_beta=0.0, lam_prox=0.0,
                 own_local=False) -> np.ndarray:
    """The authors' round, one client after the other, rows replaced in place."""
    Z = p.x0.copy()  # the rows: every client's last local result
    last_local, prev_mixed = p.x0.copy(), p.x0.copy()
    for t in range(rounds):
        eta, W = LR * DECAY**t, round_matrix(p, graph, t)
        for i in range(p.M):
            x = W[i] @ Z  # rows j < i are this round's, rows j > i last round's
            if ole_beta:
                y0 = x + ole_beta * (x - last_local[i])
            elif cata_beta:
                y0 = x + cata_beta * (x - (last_local[i] if own_local else prev_mixed[i]))
            else:
                y0 = x.copy()
            y, velocity = y0.copy(), np.zeros_like(y0)
            for _ in range(steps):
                g = p.grad(i, y)
                if rho:
                    g = p.grad(i, y + rho * g / np.linalg.norm(g))
                d = g + wd * y + lam_prox * (y - y0)
                velocity = momentum * velocity - eta * d
                y = y + velocity
            last_local[i], prev_mixed[i], Z[i] = y, x, y
    return Z


CASES = {
    "dfedavg": ({"name": "dfedavg"}, {}),
    "dfedavgm": ({"name": "dfedavgm", "momentum": 0.6}, {"momentum": 0.6}),
    "dfedsam": ({"name": "dfedsam", "rho": 0.2}, {"rho": 0.2}),
    "dfedsam_mgs_q1": ({"name": "dfedsam_mgs", "rho": 0.2, "gossip_steps": 1}, {"rho": 0.2}),
    "oledfl_sgd": ({"name": "oledfl", "beta": 0.9, "lam": 0.0}, {"ole_beta": 0.9}),
    "oledfl_sam": ({"name": "oledfl", "beta": 0.9, "lam": 0.2}, {"ole_beta": 0.9, "rho": 0.2}),
    "dfedcata": ({"name": "dfedcata", "beta": 0.8, "lam": 0.3},
                 {"cata_beta": 0.8, "lam_prox": 0.3}),
    "dfedcata_own_local": ({"name": "dfedcata", "beta": 0.8, "lam": 0.3,
                            "extrapolation_ref": "own_local"},
                           {"cata_beta": 0.8, "lam_prox": 0.3, "own_local": True}),
    "dpsgd_local_epoch": ({"name": "dpsgd", "variant": "local_epoch"}, {}),
}
