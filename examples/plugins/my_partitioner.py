"""A partitioner of one's own (docs/design.md, "Adding a piece"): quantity skew.

Every client's samples are drawn uniformly (no label skew), but the sizes are skewed:
proportions q ~ Dir(α·1_M) over the clients, each client at least ``min_size`` samples, the
rest cut by q (the "quantity-based label-balanced" split of Li et al. 2022, "Federated
Learning on Non-IID Data Silos: An Experimental Study"). Registered with
:func:`gossipfl.data.register_partitioner`; its constructor's parameters come from the
``data`` section by name (here ``alpha`` and ``min_size``).

    data: {partition: quantity_skew, alpha: 0.5, min_size: 10}
"""

from __future__ import annotations

import numpy as np

from gossipfl.data import Partitioner, register_partitioner
from gossipfl.errors import GossipflError


@register_partitioner("quantity_skew")
class QuantitySkew(Partitioner):
    def __init__(self, alpha: float, min_size: int = 10):
        if not alpha > 0:
            raise GossipflError(f"data.alpha: must be > 0, got {alpha}.")
        self.alpha = float(alpha)
        self.min_size = int(min_size)

    def _split(self, labels, num_clients, rng):
        n = len(labels)
        floor = min(self.min_size, n // num_clients)
        q = rng.dirichlet(np.full(num_clients, self.alpha))
        extra = np.floor(q * (n - floor * num_clients)).astype(np.int64)
        extra[: n - floor * num_clients - extra.sum()] += 1  # the remainder, one each
        sizes = floor + extra
        return np.split(rng.permutation(n), np.cumsum(sizes)[:-1])
