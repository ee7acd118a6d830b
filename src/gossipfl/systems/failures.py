"""The round's mixing matrix when clients are offline and links fail.

An offline client neither sends nor receives; a failed link carries nothing in either
direction. Round t's W' keeps every w_ij (i ≠ j) whose link is up and whose two ends are
online, and gives the weight it drops to a diagonal entry, so that the sums W is defined by
stay 1:

- rows (``doubly`` and ``row``-stochastic W): to the receiver, W'_ii = W_ii + Σ_{j dropped} w_ij;
- columns (``column``-stochastic W, push-sum): to the sender, W'_jj = W_jj + Σ_{i dropped} w_ij.

An offline client's row and column of W' are those of the identity (nobody reads its row, it
reads nobody's). For a symmetric doubly stochastic W the failures are symmetric (both ends of a
link, both directions), so W' is symmetric and doubly stochastic again.

:class:`FailingTopology` is a topology whose round-t matrix is W'_t: the Mixer and the
Federation use it in place of the graph's own, so every decentralized algorithm mixes with
W'_t and the byte count (``Wire.out_degree``, read from the matrix) charges no message
of an offline client or a failed link.

A topology built as edges (more than ``DENSE_MAX_CLIENTS`` clients) is renormalized on its
edges (:func:`renormalize_edges`, O(M + edges)), with each undirected link's failure drawn from
its own counter-based stream (:meth:`SystemsModel.failed_edges`) instead of one ``[M, M]``
draw: the same law, other draws than the dense form's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gossipfl.topology.graphs import Topology
from gossipfl.topology.mixing import ROW_SUM_TOL, validate_mixing
from gossipfl.topology.sparse import Edges, first_asymmetry, validate_edges, with_diagonal

if TYPE_CHECKING:  # annotations only
    from gossipfl.systems.model import SystemsModel


def renormalize(W: np.ndarray, offline: np.ndarray | None = None,
                failed: np.ndarray | None = None, column: bool = False) -> np.ndarray:
    """W' from W ``[M, M]``, the offline clients ``[M]`` bool and the failed links ``[M, M]``
    bool (symmetric); ``column``: the dropped weight goes to the sender's diagonal (push-sum)
    instead of the receiver's."""
    W = np.asarray(W, dtype=np.float64)
    m = len(W)
    keep = np.ones((m, m), dtype=bool)
    if offline is not None:
        online = ~np.asarray(offline, dtype=bool)
        keep &= online[:, None] & online[None, :]
    if failed is not None:
        keep &= ~np.asarray(failed, dtype=bool)
    np.fill_diagonal(keep, True)
    kept = np.where(keep, W, 0.0)
    dropped = W - kept
    out = kept.copy()
    out[np.diag_indices(m)] += dropped.sum(axis=0 if column else 1)
    return out


def renormalize_edges(W: Edges, offline: np.ndarray | None = None,
                      failed: np.ndarray | None = None, column: bool = False) -> Edges:
    """:func:`renormalize` on W's edges: ``failed`` is ``[E]`` bool, one per entry of W
    (symmetric: both directions of a link alike); O(M + edges), no ``[M, M]`` array."""
    m = W.num_clients
    keep = np.ones(W.nnz, dtype=bool)
    if offline is not None:
        online = ~np.asarray(offline, dtype=bool)
        keep &= online[W.rows] & online[W.cols]
    if failed is not None:
        keep &= ~np.asarray(failed, dtype=bool)
    diagonal = W.rows == W.cols
    keep |= diagonal
    dropped = np.where(keep, 0.0, W.values)
    gains = np.bincount(W.cols if column else W.rows, weights=dropped, minlength=m)
    off = keep & ~diagonal
    kept = Edges(m, W.rows[off], W.cols[off], W.values[off])
    return with_diagonal(kept, W.diagonal() + gains)


class FailingTopology(Topology):
    """``base``'s graph with round t's offline clients and failed links removed (W'_t of
    :func:`renormalize`): time-varying, and as stochastic as the base (a doubly stochastic
    but non-symmetric base W stays row-stochastic only: its columns lose what its rows keep).
    """

    def __init__(self, base: Topology, model: SystemsModel):
        self.base = base
        self.model = model
        stochastic = base.stochastic
        sparse = bool(getattr(base, "sparse", False))
        if stochastic == "doubly":
            if sparse:
                symmetric = first_asymmetry(base.edges(0), ROW_SUM_TOL)[0] < 0
            else:
                W0 = base.matrix(0)
                symmetric = np.allclose(W0, W0.T, rtol=0, atol=ROW_SUM_TOL)
            if not symmetric:
                stochastic = "row"
        super().__init__(base.name, base.num_clients, base.mixing, self.adjacency,
                         time_varying=True, directed=base.directed, params=base.params,
                         stochastic=stochastic, period=None, sparse=sparse)
        self.order = base.order

    def _compute(self, round: int) -> tuple[np.ndarray, np.ndarray]:
        if self.sparse:
            return self._compute_edges(round)
        declared = self._stochastic
        W = renormalize(self.base.matrix(round), self.model.offline(round),
                        self.model.failed_links(round), column=declared == "column")
        A = (W != 0).astype(np.float64)
        np.fill_diagonal(A, 0.0)
        validate_mixing(W, symmetric=False, doubly=declared == "doubly",
                        rows=declared != "column", key="systems.availability",
                        label=f"round {round}'s renormalized matrix")
        for array in (A, W):
            array.flags.writeable = False
        return A, W

    def _compute_edges(self, round: int) -> tuple[Edges, Edges]:
        """(adjacency, W'_t) as edges, validated as the dense W'_t is."""
        declared = self._stochastic
        E = self.base.edges(round)
        W = renormalize_edges(E, self.model.offline(round),
                              self.model.failed_edges(round, E.rows, E.cols),
                              column=declared == "column")
        validate_edges(W, symmetric=False, doubly=declared == "doubly",
                       rows=declared != "column", key="systems.availability",
                       label=f"round {round}'s renormalized matrix")
        return W.pattern().read_only(), W.read_only()
