"""Each receiver's neighbourhood of one round's W, gathered for a batched robust rule.

Receiver i's neighbourhood is itself and its in-neighbours N_i = {j ≠ i : w_ij ≠ 0}, of
degree d_i = |N_i|. Receivers of one degree form a **bucket**: ``senders [n, d + 1]`` (column
0 the receiver itself, then its neighbours in ascending id) and ``weights [n, d + 1]`` (w_ij),
so that a bucket's messages ``z[senders]`` are one ``[n, d + 1, P]`` tensor with no padding,
and a rule is a sort or a reduction over its dimension 1. The buckets are as many as the
distinct degrees (one on a regular graph), never a loop over clients. W is read as edges
(a dense W as its non-zero entries), so a topology built as edges (above
``DENSE_MAX_CLIENTS`` clients) gathers its neighbourhoods in O(M + edges).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gossipfl.topology.sparse import Edges

#: float elements of one gathered block ``[rows, d + 1, P]`` (the rule's sort and its
#: temporaries come on top): receivers are taken in chunks of at most this size
BLOCK_ELEMENTS = 1 << 24


@dataclass
class Bucket:
    """The receivers of one degree d: ids ``[n]``, ``senders [n, d + 1]`` (column 0: the
    receiver), ``weights [n, d + 1]`` (w_ij, in the messages' dtype)."""

    receivers: Tensor
    senders: Tensor
    weights: Tensor

    @property
    def degree(self) -> int:
        return self.senders.shape[1] - 1

    def chunks(self, numel: int) -> Iterator[Bucket]:
        """This bucket in parts whose gathered messages of ``numel`` values each hold at most
        :data:`BLOCK_ELEMENTS` values."""
        rows = max(1, BLOCK_ELEMENTS // max(1, self.senders.shape[1] * numel))
        for start in range(0, len(self.receivers), rows):
            part = slice(start, start + rows)
            yield Bucket(self.receivers[part], self.senders[part], self.weights[part])


def degrees(W: np.ndarray | Edges) -> np.ndarray:
    """``[M]`` d_i = #{j ≠ i : w_ij ≠ 0}."""
    return Edges.of(W).in_degree()


def buckets(W: np.ndarray | Edges, device: torch.device, dtype: torch.dtype) -> list[Bucket]:
    """The receivers of W (dense, or as edges: a topology of many clients) grouped by degree
    (ascending); O(M + edges), never an ``[M, M]`` array."""
    E = Edges.of(W)
    m = E.num_clients
    off = (E.rows != E.cols) & (E.values != 0)
    rows_all, cols_all, values = E.rows[off], E.cols[off], E.values[off]  # by (row, column)
    degree = np.bincount(rows_all, minlength=m)
    start = np.searchsorted(rows_all, np.arange(m))  # row i's neighbours from start[i]
    diagonal = E.diagonal()
    out = []
    for d in np.unique(degree):
        rows = np.flatnonzero(degree == d)
        at = start[rows][:, None] + np.arange(int(d))  # [n, d]: ascending ids
        senders = np.concatenate([rows[:, None], cols_all[at]], axis=1)
        weights = np.concatenate([diagonal[rows][:, None], values[at]], axis=1)
        out.append(Bucket(torch.as_tensor(rows, device=device),
                          torch.as_tensor(senders, device=device),
                          torch.as_tensor(weights, device=device, dtype=dtype)))
    return out


__all__ = ["BLOCK_ELEMENTS", "Bucket", "buckets", "degrees"]
