"""The fixed matrices of the toolkit studies (issue 25), written as .npy next to this file:

    python examples/studies/graphs/make_graphs.py

- ``ring100_lazy.npy``: the lazy ring W' = (I + W)/2 of 100 clients, W the ring's
  Metropolis–Hastings matrix (weights 1/3). D² needs λ_min(W) > −1/3 (Tang et al., Assumption
  1); the plain ring of even size has λ_min = −1/3 exactly, the lazy one λ_min = 1/3.
  A mixing matrix: ``topology: {name: custom, mixing: custom, path: ...}``.
- ``directed100.npy``: a strongly connected directed graph with unequal out-degrees, as a
  column-stochastic push-sum matrix (SGP, Assran et al. 2019): client j keeps 1/(d_j + 1) of
  its message and sends 1/(d_j + 1) to each of its d_j out-neighbours: j + 1 (a directed ring,
  for strong connectivity) and 0–4 others drawn uniformly (seed 0). Its rows do not sum to 1.
- ``directed100_symmetrized.npy``: the same graph's adjacency with every edge made two-way
  (0/1, zero diagonal), for D-PSGD with Metropolis–Hastings weights.
"""

from pathlib import Path

import numpy as np

M = 100
HERE = Path(__file__).resolve().parent


def lazy_ring(m: int) -> np.ndarray:
    W = np.zeros((m, m))
    for i in range(m):
        W[i, i] = W[i, (i + 1) % m] = W[i, (i - 1) % m] = 1.0 / 3.0
    return (np.eye(m) + W) / 2.0


def directed_adjacency(m: int, seed: int = 0) -> np.ndarray:
    """A[i, j] = 1 when j sends to i."""
    rng = np.random.default_rng(seed)
    A = np.zeros((m, m))
    for j in range(m):
        A[(j + 1) % m, j] = 1.0
        others = [i for i in range(m) if i != j and i != (j + 1) % m]
        for i in rng.choice(others, size=rng.integers(0, 5), replace=False):
            A[i, j] = 1.0
    return A


def push_sum_matrix(A: np.ndarray) -> np.ndarray:
    P = A + np.eye(len(A))
    return P / P.sum(axis=0, keepdims=True)


def main() -> None:
    A = directed_adjacency(M)
    np.save(HERE / "ring100_lazy.npy", lazy_ring(M))
    np.save(HERE / "directed100.npy", push_sum_matrix(A))
    np.save(HERE / "directed100_symmetrized.npy", np.maximum(A, A.T))


if __name__ == "__main__":
    main()
