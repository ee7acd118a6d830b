"""Least-squares fixtures for update-rule tests.

Client i holds (A_i, b_i); with the ``linear`` model (no bias) and ``mse`` loss its objective
is F_i(x) = (1/n_i) Σ_j (a_jᵀx − b_j)², whose full-batch gradient is
∇F_i(x) = (2/n_i) A_iᵀ(A_i x − b_i). Tests re-derive algorithms in float64 NumPy with
:func:`grad` and compare with what gossipfl computes in float32.
"""

from __future__ import annotations

import numpy as np

import gossipfl


class Problem:
    def __init__(self, clients: int = 5, dim: int = 4, seed: int = 0, sizes=None):
        rng = np.random.default_rng(seed)
        sizes = sizes or [6 + 3 * (i % 3) for i in range(clients)]  # unequal sizes
        self.A = [rng.normal(size=(n, dim)) for n in sizes]
        self.b = [rng.normal(size=n) for n in sizes]
        self.M, self.d = clients, dim
        self.n = np.array(sizes, dtype=float)
        self.x0 = rng.normal(size=(clients, dim)) * 0.5

    def grad(self, i: int, x: np.ndarray) -> np.ndarray:
        A, b = self.A[i], self.b[i]
        return 2.0 / len(b) * A.T @ (A @ x - b)

    def grads(self, X: np.ndarray) -> np.ndarray:
        return np.stack([self.grad(i, X[i]) for i in range(self.M)])

    def config(self, algorithm: dict, *, W=None, rounds=3, steps=2, lr=0.05, decay=0.9,
               wd=0.0, topology=None, x0=None) -> dict:
        topo = topology or {"name": "custom", "mixing": "custom", "matrix": W}
        return {
            "data": {"clients": self.M, "tensors": {
                "train": [(a.astype(np.float32), b.astype(np.float32))
                          for a, b in zip(self.A, self.b)],
                "test": (self.A[0].astype(np.float32), self.b[0].astype(np.float32)),
                "num_classes": 1}},
            "model": {"name": "linear", "options": {"bias": False}},
            "topology": topo,
            "algorithm": algorithm,
            "train": {"rounds": rounds, "local_steps": steps, "batch_size": "full", "lr": lr,
                      "lr_decay": decay, "weight_decay": wd, "loss": "mse"},
            "eval": {"average_model": False, "local_models": False},
            "init_params": (self.x0 if x0 is None else x0).astype(np.float32),
            "seed": 3,
        }

    def run(self, *args, **kwargs):
        return gossipfl.run(self.config(*args, **kwargs))


def ring_mh(m: int) -> np.ndarray:
    """Ring with Metropolis–Hastings weights (1/3 each), float64."""
    W = np.zeros((m, m))
    for i in range(m):
        for j in (i - 1, i, i + 1):
            W[i, j % m] = 1 / 3
    return W


def random_doubly_stochastic(m: int, seed: int = 1) -> np.ndarray:
    """A symmetric doubly stochastic matrix with a dense pattern (MH on a random graph)."""
    rng = np.random.default_rng(seed)
    adj = np.triu(rng.random((m, m)) < 0.6, 1)
    adj = adj | adj.T
    for i in range(m):  # keep it connected: add a path
        adj[i, (i + 1) % m] = adj[(i + 1) % m, i] = True
    deg = adj.sum(1)
    W = np.zeros((m, m))
    for i in range(m):
        for j in range(m):
            if adj[i, j]:
                W[i, j] = 1 / (1 + max(deg[i], deg[j]))
        W[i, i] = 1 - W[i].sum()
    return W


def push_matrix(m: int, seed: int = 0) -> np.ndarray:
    """A directed column-stochastic P: client j keeps a share and splits the rest over j+1 and
    a few random out-neighbours, unevenly (the rows do not sum to 1)."""
    rng = np.random.default_rng(seed)
    P = np.zeros((m, m))
    for j in range(m):
        out = {(j + 1) % m} | set(rng.choice(m, size=rng.integers(0, 3), replace=False).tolist())
        out.discard(j)
        shares = rng.random(len(out) + 1) + 0.2
        shares /= shares.sum()
        P[j, j] = shares[0]
        P[sorted(out), j] = shares[1:]
    assert np.allclose(P.sum(0), 1) and not np.allclose(P.sum(1), 1)
    return P


def assert_close(actual, expected, rtol=2e-5, atol=2e-6):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=rtol,
                               atol=atol)
