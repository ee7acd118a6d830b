"""Gossip as a matrix product: X ← W^Q X for the ``[M, P]`` stack of client models.

All clients mix the same snapshot X (synchronous gossip). Q gossip steps use the same round's
W. Dense W: W^Q is formed once in float64 (cached for static topologies) and applied with one
matmul. Sparse W (CSR, ``torch.sparse``): Q sparse-dense products, nnz(W)·P work each.

``sparse="auto"`` picks, for each number of steps Q, the cheaper of the two by a cost model
fitted to ``benchmarks/gossip.py`` on CPU (docs/benchmarks.md), in ns per column of X:

    sparse ≈ Q · (2.9·M + 0.09·nnz(W))        dense ≈ 0.009·M² + 1.2·M   (W^Q is cached)

e.g. a ring of 1000 clients mixes sparsely for Q = 1 and densely for Q = 4, and every graph
of 100 clients mixes densely. A topology built as edges (``topology.sparse``: more than
``DENSE_MAX_CLIENTS`` clients) always mixes sparsely, its CSR built from the edges directly.

On the CPU a sparse product is written into a buffer the Mixer keeps from round to round
(:class:`gossipfl.engine.recycle.Recycler`: one nothing else refers to any more) by
``torch.addmm(out, W, X, beta=0, out=out)``, the kernel ``W @ X`` runs, without its zero-filled
result and the copy it makes of it: the same numbers, a third of the memory traffic of the
product's output, and no page faults on a fresh block (docs/benchmarks.md, issue 48).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from gossipfl.engine.memory import require_memory
from gossipfl.engine.recycle import Recycler
from gossipfl.errors import unknown_choice
from gossipfl.topology.graphs import Topology
from gossipfl.topology.mixing import count_messages
from gossipfl.topology.sparse import refuse_dense

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
        self.mode = self._check_mode(sparse)
        self._edges_only = bool(getattr(topology, "sparse", False))
        if self._edges_only and (self.mode == "dense" or dtype not in _SPARSE_DTYPES):
            why = ("topology.sparse: dense" if self.mode == "dense"
                   else f"mixing in {dtype} (no sparse kernel)")
            raise refuse_dense(self.num_clients, why)
        self._nnz = (topology.edges(0).nnz if self._edges_only
                     else int(np.count_nonzero(topology.matrix(0))))
        self._operators: dict[tuple[bool, int], torch.Tensor] = {}  # (sparse, power) -> W^power
        self._round: int | None = None  # round the cached operators belong to (time-varying)
        # the output of the sparse product: one buffer, reused when its holder (the state
        # x^t of DFedAvg, which lets go of it before it gossips) has let go of it
        self._outputs = Recycler(limit=1)

    def __repr__(self) -> str:
        return f"Mixer({self.topology!r}, {self.mode}, {self.dtype}, {self.device})"

    @staticmethod
    def _check_mode(sparse: bool | str) -> str:
        if sparse is True or sparse is False:
            return "sparse" if sparse else "dense"
        if sparse not in SPARSE_MODES:
            raise unknown_choice("topology.sparse", sparse, SPARSE_MODES)
        return sparse

    def uses_sparse(self, steps: int = 1) -> bool:
        """Whether ``mix(..., steps)`` applies W as CSR (see the module doc for "auto")."""
        if self._edges_only:
            return True
        if self.mode != "auto":
            return self.mode == "sparse"
        if self.dtype not in _SPARSE_DTYPES:
            return False
        M = self.num_clients
        return steps * (2.9 * M + 0.09 * self._nnz) < 0.009 * M * M + 1.2 * M

    @property
    def sparse(self) -> bool:
        """Whether one gossip step (Q = 1) is applied as CSR."""
        return self.uses_sparse(1)

    def matrix(self, round: int) -> torch.Tensor:
        """W of the round on the device, in ``dtype`` (sparse CSR when ``self.sparse``)."""
        return self._operator(round, 1, self.sparse)

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
        if self.uses_sparse(steps):
            W = self._operator(round, 1, sparse=True)
            for _ in range(steps):
                flat = self._sparse_product(W, flat)
        else:
            flat = self._operator(round, steps, sparse=False) @ flat
        return flat.reshape(X.shape)

    def _sparse_product(self, W: torch.Tensor, flat: torch.Tensor) -> torch.Tensor:
        """``W @ flat`` for a CSR W (on the CPU into a kept buffer, by the same kernel)."""
        if flat.device.type != "cpu" or not flat.is_contiguous():
            return W @ flat
        out = self._outputs.empty((W.shape[0], flat.shape[1]), flat.dtype, flat.device)
        return torch.addmm(out, W, flat, beta=0, out=out)

    def mix_rows(self, X: torch.Tensor, round: int, rows: torch.Tensor) -> torch.Tensor:
        """``(W X)[rows]`` with the round's W: the mixed models of the clients ``rows`` only
        (one gossip step; the rows of W are taken from its dense form, or from the edges of a
        topology built as edges)."""
        if self._edges_only:
            index = rows.cpu().numpy() if isinstance(rows, torch.Tensor) else rows
            part = self.topology.edges(round).rows_of(index)
            return part.to_torch(self.dtype, self.device, rows=len(index)) @ X.reshape(
                self.num_clients, -1)
        W = self._operator(round, 1, sparse=False)
        return W[rows] @ X.reshape(self.num_clients, -1)

    def messages(self, round: int) -> int:
        """Directed model transfers per gossip step: off-diagonal non-zeros of the round's W."""
        if self._edges_only:
            return self.topology.edges(round).messages()
        return count_messages(self.topology.matrix(round))

    def _operator(self, round: int, power: int, sparse: bool) -> torch.Tensor:
        """W^power (dense) or W (sparse, power 1) as a device tensor, cached."""
        if self.topology.time_varying and round != self._round:
            self._operators.clear()
            self._round = round
        if (sparse, power) not in self._operators and self._edges_only:
            self._operators[sparse, power] = self.topology.edges(round).to_torch(
                self.dtype, self.device)
        if (sparse, power) not in self._operators:
            W = np.linalg.matrix_power(self.topology.matrix(round), power)
            self._operators[sparse, power] = self._to_device(W, sparse)
        return self._operators[sparse, power]

    def _to_device(self, W: np.ndarray, sparse: bool) -> torch.Tensor:
        M = self.num_clients
        size = M * M * torch.empty((), dtype=self.dtype).element_size()
        require_memory(size, f"a dense {M}×{M} mixing matrix in {self.dtype}", "data.clients",
                       self.device)
        dense = torch.tensor(W, dtype=self.dtype)  # a copy: W may be a read-only array
        if not sparse:
            return dense.to(self.device)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return dense.to_sparse_csr().to(self.device)
