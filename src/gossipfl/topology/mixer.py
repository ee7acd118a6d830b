"""Gossip as a matrix product: X ← W^Q X for the ``[M, P]`` stack of client models.

All clients mix the same snapshot X (synchronous gossip). Q gossip steps use the same round's
W. Dense W: W^Q is formed once in float64 (cached for static topologies) and applied with one
matmul. Sparse W (CSR, ``torch.sparse``): Q sparse-dense products, nnz(W)·P work each.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from gossipfl.errors import unknown_choice
from gossipfl.topology.graphs import Topology
from gossipfl.topology.mixing import count_messages

SPARSE_DENSITY = 0.1  # "auto" uses CSR below this fraction of non-zeros in W
SPARSE_MODES = ("auto", "dense", "sparse")
_SPARSE_DTYPES = (torch.float32, torch.float64)  # CSR matmul kernels exist for these


class Mixer:
    """Applies a topology's mixing matrices to ``[M, P]`` tensors on one device."""

    def __init__(self, topology: Topology, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, sparse: bool | str = "auto"):
        self.topology = topology
        self.num_clients = topology.num_clients
        self.device = torch.device(device)
        self.dtype = dtype
        self.sparse = self._resolve_sparse(sparse)
        self._operators: dict[int, torch.Tensor] = {}  # power -> W^power (dense) or W (CSR)
        self._round: int | None = None  # round the cached operators belong to (time-varying)

    def __repr__(self) -> str:
        kind = "sparse" if self.sparse else "dense"
        return f"Mixer({self.topology!r}, {kind}, {self.dtype}, {self.device})"

    def _resolve_sparse(self, sparse: bool | str) -> bool:
        if sparse is True or sparse == "sparse":
            return True
        if sparse is False or sparse == "dense":
            return False
        if sparse != "auto":
            raise unknown_choice("topology.sparse", sparse, SPARSE_MODES)
        density = np.count_nonzero(self.topology.matrix(0)) / self.num_clients**2
        return density < SPARSE_DENSITY and self.dtype in _SPARSE_DTYPES

    def matrix(self, round: int) -> torch.Tensor:
        """W of the round on the device, in ``dtype`` (sparse CSR when ``self.sparse``)."""
        return self._operator(round, 1)

    def mix(self, X: torch.Tensor, round: int, steps: int = 1) -> torch.Tensor:
        """W^steps X with the round's W (a new tensor; ``steps=0`` returns a copy of X).

        X is ``[M, ...]``; every trailing dimension is mixed alike.
        """
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
        if X.dim() == 0 or X.shape[0] != self.num_clients:
            raise ValueError(f"X must have {self.num_clients} rows (one per client), "
                             f"got shape {tuple(X.shape)}")
        if X.dtype != self.dtype:
            raise TypeError(f"this Mixer holds W in {self.dtype}, got X in {X.dtype}")
        if steps == 0:
            return X.clone()
        flat = X.reshape(self.num_clients, -1)
        if self.sparse:
            W = self._operator(round, 1)
            for _ in range(steps):
                flat = W @ flat
        else:
            flat = self._operator(round, steps) @ flat
        return flat.reshape(X.shape)

    def messages(self, round: int) -> int:
        """Directed model transfers per gossip step: off-diagonal non-zeros of the round's W."""
        return count_messages(self.topology.matrix(round))

    def _operator(self, round: int, power: int) -> torch.Tensor:
        """W^power (dense) or W (sparse, power 1) as a device tensor, cached."""
        if self.topology.time_varying and round != self._round:
            self._operators.clear()
            self._round = round
        if power not in self._operators:
            W = np.linalg.matrix_power(self.topology.matrix(round), power)
            self._operators[power] = self._to_device(W)
        return self._operators[power]

    def _to_device(self, W: np.ndarray) -> torch.Tensor:
        dense = torch.tensor(W, dtype=self.dtype)  # a copy: W may be a read-only array
        if not self.sparse:
            return dense.to(self.device)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return dense.to_sparse_csr().to(self.device)
