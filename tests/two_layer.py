"""A two-layer linear model on heterogeneous clients, for personalized update-rule tests.

The model a ↦ V U a (+ c): a shared body U ``[h, d]`` (``body``, a Linear without bias) and a
personal head V ``[C, h]`` with optional bias c (``head``, the last Linear: the personal
group). Regression (``classes=0``): one output, F_i = (1/n_i) Σ (V U a − b)² (``mse``).
Classification: integer labels, F_i = (1/n_i) Σ cross-entropy(V U a + c + s_i, y), where
``shift`` s_i (a ``[C]`` vector) adds to the logits (Balanced Softmax: s_i = log n_ic).
Full-batch float64 gradients of the flat vector x = [vec U, vec V, c] (gossipfl's layout).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from tests.lsq import assert_close  # noqa: F401  (re-exported for the tests)


class TwoLayer:
    def __init__(self, clients: int = 4, dim: int = 3, hidden: int = 2, classes: int = 0,
                 bias: bool = False, seed: int = 0, sizes=None):
        rng = np.random.default_rng(seed)
        sizes = sizes or [5 + 2 * (i % 3) for i in range(clients)]
        self.M, self.d, self.h, self.C, self.bias = clients, dim, hidden, classes, bias
        self.out = max(classes, 1)
        self.A = [rng.normal(size=(n, dim)) for n in sizes]
        if classes:  # heterogeneous labels: client i sees mostly two classes
            self.b = [np.where(rng.random(n) < 0.8, (i + rng.integers(0, 2, n)) % classes,
                               rng.integers(0, classes, n)) for i, n in enumerate(sizes)]
        else:
            heads = rng.normal(size=(clients, hidden))
            body = rng.normal(size=(hidden, dim))
            self.b = [A @ body.T @ v + 0.1 * rng.normal(size=len(A))
                      for A, v in zip(self.A, heads, strict=True)]
        self.n = np.array(sizes, dtype=float)
        self.P = hidden * dim + self.out * hidden + (self.out if bias else 0)
        self.x0 = np.tile(rng.normal(size=self.P) * 0.5, (clients, 1))
        self.personal = np.zeros(self.P, dtype=bool)
        self.personal[hidden * dim:] = True

    def split(self, x):
        h, d, o = self.h, self.d, self.out
        U = x[: h * d].reshape(h, d)
        V = x[h * d: h * d + o * h].reshape(o, h)
        c = x[h * d + o * h:] if self.bias else np.zeros(o)
        return U, V, c

    def counts(self, i: int) -> np.ndarray:
        return np.bincount(self.b[i], minlength=self.C).astype(float)

    def grad(self, i: int, x: np.ndarray, shift=None) -> np.ndarray:
        U, V, c = self.split(x)
        A, n = self.A[i], len(self.A[i])
        F = A @ U.T  # [n, h] features
        z = F @ V.T + c  # [n, out]
        if self.C:
            z = z + (0 if shift is None else shift)
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            dz = (p - np.eye(self.C)[self.b[i]]) / n
        else:
            dz = 2.0 / n * (z[:, 0] - self.b[i])[:, None]
        gV, gc = dz.T @ F, dz.sum(0)
        gU = (dz @ V).T @ A
        parts = [gU.ravel(), gV.ravel()] + ([gc] if self.bias else [])
        return np.concatenate(parts)

    def factory(self, input_shape, out_dim):
        return torch.nn.Sequential(OrderedDict(
            body=torch.nn.Linear(self.d, self.h, bias=False),
            head=torch.nn.Linear(self.h, out_dim, bias=self.bias)))

    def config(self, algorithm: dict, *, W=None, rounds=3, steps=2, lr=0.05, decay=0.9,
               wd=0.0, momentum=0.0, x0=None, topology=None) -> dict:
        train = [(a.astype(np.float32), b.astype(np.int64 if self.C else np.float32))
                 for a, b in zip(self.A, self.b, strict=True)]
        return {
            "data": {"clients": self.M, "tensors": {
                "train": train, "num_classes": self.C or 1,
                "test": tuple(np.concatenate(part) for part in zip(*train, strict=True))}},
            "model": {"factory": self.factory},
            "topology": topology or {"name": "custom", "mixing": "custom", "matrix": W},
            "algorithm": algorithm,
            "train": {"rounds": rounds, "local_steps": steps, "batch_size": "full", "lr": lr,
                      "lr_decay": decay, "weight_decay": wd, "momentum": momentum,
                      "loss": "cross_entropy" if self.C else "mse"},
            "eval": {"average_model": False, "local_models": False},
            "init_params": (self.x0 if x0 is None else x0).astype(np.float32),
            "seed": 3,
        }


def sgd_phase(y, grad, cols, steps, lr, momentum=0.0, rho=0.0, wd=0.0):
    """``steps`` heavy-ball SGD (or SAM with radius ρ, the norm over ``cols``) steps of one
    client's vector ``y`` on the coordinates ``cols`` (bool mask); returns the new y."""
    y, v = y.copy(), np.zeros_like(y)
    for _ in range(steps):
        g = grad(y)
        if rho:
            ascent = g * cols
            g = grad(y + rho * ascent / max(np.linalg.norm(ascent), 1e-12))
        v = momentum * v - lr * (g + wd * y) * cols
        y = y + v
    return y
