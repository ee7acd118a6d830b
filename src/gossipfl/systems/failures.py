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
W'_t and the byte count (``Federation._out_degree``, read from the matrix) charges no message
of an offline client or a failed link.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gossipfl.topology.graphs import Topology
from gossipfl.topology.mixing import ROW_SUM_TOL, validate_mixing

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


class FailingTopology(Topology):
    """``base``'s graph with round t's offline clients and failed links removed (W'_t of
    :func:`renormalize`): time-varying, and as stochastic as the base (a doubly stochastic
    but non-symmetric base W stays row-stochastic only: its columns lose what its rows keep).
    """

    def __init__(self, base: Topology, model: SystemsModel):
        self.base = base
        self.model = model
        stochastic = base.stochastic
        if stochastic == "doubly":
            W0 = base.matrix(0)
            if not np.allclose(W0, W0.T, rtol=0, atol=ROW_SUM_TOL):
                stochastic = "row"
        super().__init__(base.name, base.num_clients, base.mixing, self.adjacency,
                         time_varying=True, directed=base.directed, params=base.params,
                         stochastic=stochastic, period=None)
        self.order = base.order

    def _compute(self, round: int) -> tuple[np.ndarray, np.ndarray]:
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
