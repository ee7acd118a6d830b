"""The Federation: the one channel between clients.

Algorithms never reduce, mix or index across the client dimension themselves; every
interaction between clients goes through these methods, which also count the bytes that
are really sent:

- :meth:`Federation.gossip` — X ← W^Q Z with round t's mixing matrix through the gossip
  pipeline (:class:`~gossipfl.network.wire.Pipeline`: the stages the composition root built around
  W_t, e.g. CHOCO-Gossip's compression or robust aggregation), optionally only on a
  parameter group, or weighted coordinate-wise by per-client masks (the DisPFL rule
  x_i = Σ_j w_ij m_j ⊙ z_j / Σ_j w_ij m_j, own value where no neighbour holds the coordinate);
- :meth:`Federation.push_sum` — (W x, W w): push-sum's message, a model and its scalar
  weight, over a column-stochastic (or doubly stochastic) W;
- :meth:`Federation.send_compressed` — (C(v), W C(v)): every client sends its row compressed
  (gossipfl.compression), the receivers mix what they decode (the :class:`~gossipfl.network.wire.Wire`
  sends it: the products of W_t and the bytes live there);
- :meth:`Federation.sample`, :meth:`Federation.broadcast`, :meth:`Federation.aggregate` —
  a server's client sampling, download and (n_i-weighted, uniform or summed) upload;
- :meth:`Federation.rows` / :meth:`Federation.set_rows` — a server reading and writing the
  per-client state of the sampled clients;
- :meth:`Federation.mean` and :meth:`Federation.replicate` — what an observer sees (the
  average model; every client holding the server model): no bytes;
- the placement of rows on processes (:meth:`Federation.own_clients`, ``block``,
  ``gather``, ``total``, ``share``): one process holds every row here.

What a client has on its own (the oracle, the parameter groups, the local-training
settings, its n_i and label counts) is its :class:`~gossipfl.network.clients.ClientEnv`, not this.

Bytes: a dense message of a group of n parameters costs 4n bytes (fp32). A masked message
costs its values plus the cheaper of int32 indices or a bitmap: 4·nnz + min(4·nnz, ⌈n/8⌉).
A compressed message costs its encoding's exact width (``Compressor.width``). Per gossip
step, client j sends one message to each out-neighbour (w_ij ≠ 0, i ≠ j).
:class:`Traffic` records the bytes of every sender (clients, and the server).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from gossipfl.common.rng import numpy_generator
from gossipfl.common.transfer import to_device
from gossipfl.engine.groups import ParamGroup, ParamGroups
from gossipfl.errors import unknown_choice
from gossipfl.network.wire import Pipeline, Wire, message_bytes
from gossipfl.topology.stages import Stage

if TYPE_CHECKING:  # annotations only
    from gossipfl.topology.sparse import Edges

class Weighting(str, Enum):
    """How a server reduces the uploaded rows (:meth:`Federation.aggregate`)."""

    SAMPLES = "samples"  # Σ p_i v_i, p_i = n_i / Σ_S n_j
    UNIFORM = "uniform"  # the plain mean
    SUM = "sum"  # the plain sum

    @classmethod
    def of(cls, value: Weighting | str) -> Weighting:
        try:
            return cls(value)
        except ValueError:
            raise unknown_choice("weighting", value, [w.value for w in cls]) from None


@dataclass
class Traffic:
    """Bytes sent, by sender: ``clients[j]`` for client j, ``server`` for the server."""

    num_clients: int
    clients: np.ndarray = field(init=False)
    server: int = 0

    def __post_init__(self):
        self.clients = np.zeros(self.num_clients, dtype=np.int64)

    def total(self) -> int:
        return int(self.clients.sum()) + self.server

    def take(self) -> int:
        """The bytes recorded since the last call (one round's), and start afresh."""
        sent = self.total()
        self.clients[:] = 0
        self.server = 0
        return sent

    def columns(self) -> dict:
        """Metrics columns of the round just taken beyond ``bytes_round`` (none here)."""
        return {}


class Federation:
    """The only operations that cross the client dimension, the bytes they send, and where
    the rows live. ``groups`` name the column sets a message may carry (``all``, ``shared``,
    ``personal``); ``sample_sizes`` ``[M]`` are the n_i a server weights by; ``seed`` draws
    the server's client samples; ``mixer`` holds the topology (None for centralized runs);
    ``stages``: the gossip pipeline's stages around W_t, built by the composition root
    (compression with error feedback, robust aggregation: :mod:`gossipfl.topology.stages`;
    none: exact gossip), and ``channels`` the algorithm's ``gossip_channels``. Of the run's
    state it keeps only the byte count of the round in progress (``traffic``, taken by the
    runner every round); the rest is caches of the round's W (in its :class:`Wire`)."""

    def __init__(self, num_clients: int, groups: ParamGroups, sample_sizes: Tensor, seed: int,
                 mixer=None, stages: Sequence[Stage] = (), channels: Sequence[str] = ("x",)):
        self.num_clients = num_clients
        self._groups = groups
        self.sample_sizes = sample_sizes  # [M] float, n_i
        self.seed = seed
        self._sampled: tuple[Tensor, np.ndarray] | None = None  # the last draw, and the host's
        self.mixer = mixer  # gossipfl.topology.Mixer; None for centralized algorithms
        self.traffic = self._traffic()
        self.wire = self._wire(mixer)
        self.pipeline = Pipeline(self.wire, stages, channels)

    def _traffic(self) -> Traffic:
        return Traffic(self.num_clients)

    def _wire(self, mixer) -> Wire:
        return Wire(self.num_clients, mixer, self.traffic, self.seed)

    # -- decentralized ---------------------------------------------------------------------
    def gossip(self, z: Tensor, t: int, steps: int = 1, group: str = "all",
               masks: Tensor | None = None, channel: str = "x") -> Tensor:
        """W^Q z with round t's W (Q = ``steps``) on the columns of ``group`` (the others
        keep z's values), through the gossip pipeline's stages (``channel``: the variable
        gossiped, one of the algorithm's ``gossip_channels``); with ``masks [M, P]`` (bool
        or 0/1) the DisPFL rule."""
        columns = self._groups[group]
        if masks is not None:
            self.pipeline.bypass("masked gossip (DisPFL)")
            return self._masked_gossip(z, t, steps, columns, masks)
        if columns.is_all:
            return self.pipeline.mix(z, t, steps, channel)
        mixed = z.clone()
        columns.assign(mixed, self.pipeline.mix(columns.select(z), t, steps, channel))
        return mixed

    def send_compressed(self, v: Tensor, t: int, compressor, key: tuple
                        ) -> tuple[Tensor, Tensor]:
        """(q, W q) with q_j = C(v_j) (:meth:`Wire.send_compressed`: ``compressor.width(P)``
        bytes per message)."""
        return self.wire.send_compressed(v, t, compressor, key)

    def publish(self, target: Tensor, t: int, compressor, key: tuple, copy: Tensor,
                mixed: Tensor, gamma: float | None = None) -> Tensor | None:
        """With q = C(target − copy): copy ← copy + q, mixed ← mixed + W q, in place
        (:meth:`Wire.publish`: CHOCO-Gossip's public copies x̂ and s = W x̂)."""
        return self.wire.publish(target, t, compressor, key, copy, mixed, gamma)

    def push_sum(self, x: Tensor, w: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """(W x, W w) with round t's W, for ``x [M, P]`` and push-sum weights ``w [M, 1]``:
        client j sends w_ij x_j and w_ij w_j to each out-neighbour i (w_ij ≠ 0, i ≠ j), one
        message of P + 1 floats. With a column-stochastic W, Σ_i x_i and Σ_i w_i are kept."""
        self.pipeline.bypass("push-sum gossip")
        self.wire.charge(t, message_bytes(self._groups.all.numel + 1))
        both = self.wire.mix(torch.cat([x, w.to(x.dtype)], dim=1), t, 1)
        return both[:, :-1], both[:, -1:]

    def matrix(self, t: int, what: str = "this gossip order") -> np.ndarray:
        """Round t's mixing matrix W ``[M, M]`` (what a schedule orders its events by);
        refused, naming ``what``, for a topology built as edges."""
        return self.wire.matrix(t, what)

    def edges(self, t: int) -> Edges:
        """Round t's mixing matrix W as edges (its non-zero entries), dense topology or not."""
        return self.wire.edges(t)

    @property
    def time_varying(self) -> bool:
        """Whether W changes from round to round (False without a topology)."""
        return self.wire.time_varying

    @property
    def edges_only(self) -> bool:
        """Whether the topology is built as edges only (no dense W: many clients)."""
        return self.wire.edges_only

    def gossip_rows(self, z: Tensor, t: int, rows: Tensor) -> Tensor:
        """``(W z)[rows]`` with round t's W: one gossip step received by the clients ``rows``
        only (a sequential sweep mixes a few clients at a time). Each neighbour j ≠ i of a
        receiver i (w_ij ≠ 0) sends i one message, so the receivers of a whole round together
        cost what one synchronous gossip step costs."""
        self.pipeline.bypass("the sequential order's gossip")
        index = rows.cpu().numpy()
        if self.edges_only:
            part = self.edges(t).rows_of(index)
            sender = (index[part.rows] != part.cols) & (part.values != 0)
            senders = np.bincount(part.cols[sender], minlength=self.num_clients)
        else:
            W = np.asarray(self.mixer.topology.matrix(t, "topology.order: sequential"))
            linked = W[index] != 0
            linked[np.arange(len(index)), index] = False
            senders = linked.sum(axis=0)
        self.traffic.clients += senders * message_bytes(self._groups.all.numel)
        return self.mixer.mix_rows(z, t, rows)

    def average_pairs(self, x: Tensor, first: Tensor, second: Tensor) -> Tensor:
        """x_i, x_j ← (x_i + x_j) / 2 for every pair (first[k], second[k]), in place (the
        pairs must be disjoint): the pairwise averaging of an asynchronous gossip order
        (AD-PSGD). Each pair exchanges one model each way: both ends send 4P bytes."""
        self.pipeline.bypass("pairwise averaging (an asynchronous order)")
        mean = (x[first] + x[second]) / 2
        x[first] = mean
        x[second] = mean
        sent = message_bytes(self._groups.all.numel)
        np.add.at(self.traffic.clients, first.cpu().numpy(), sent)
        np.add.at(self.traffic.clients, second.cpu().numpy(), sent)
        return x

    def _masked_gossip(self, z: Tensor, t: int, steps: int, columns: ParamGroup,
                       masks: Tensor) -> Tensor:
        out_degree = self.wire.out_degree(t)
        m = columns.select(masks).to(z.dtype)
        held = columns.select(z)
        nonzeros = (m != 0).sum(dim=1).cpu()
        sent = message_bytes(columns.numel, nonzeros).numpy()
        for _ in range(steps):
            numerator = self.wire.mix(m * held, t, 1)
            denominator = self.wire.mix(m, t, 1)
            held = torch.where(denominator > 0, numerator / denominator.clamp_min(1e-30), held)
            self.traffic.clients += out_degree * sent
        mixed = z.clone()
        columns.assign(mixed, held)
        return mixed

    # -- centralized -----------------------------------------------------------------------
    def sample(self, t: int, fraction: float, eligible: np.ndarray | None = None) -> Tensor:
        """round t's clients: max(1, round(fraction·M)) drawn uniformly without replacement
        (sorted ids), from the stream (seed, "participation", t); with ``eligible`` (``[M]``
        bool, the round plan's: online and meeting the deadline), only the drawn clients that
        are eligible — possibly none."""
        return self._drawn(self._draw(t, fraction, eligible))

    def _draw(self, t: int, fraction: float, eligible: np.ndarray | None) -> np.ndarray:
        """:meth:`sample`'s ids, on the host."""
        count = max(1, round(fraction * self.num_clients))
        rng = numpy_generator(self.seed, "participation", t)
        ids = np.sort(rng.choice(self.num_clients, size=count, replace=False))
        if eligible is not None:
            ids = ids[np.asarray(eligible)[ids]]
        return ids

    def _drawn(self, ids: np.ndarray) -> Tensor:
        """The drawn ``ids`` on the device (copied without waiting), the host's kept beside
        them (:meth:`host_ids`)."""
        clients = to_device(ids, self.sample_sizes.device, torch.int64)
        self._sampled = (clients, ids)
        return clients

    def host_ids(self, clients: Tensor) -> np.ndarray | None:
        """``clients`` as the host has them without reading the device: the ids of the last
        :meth:`sample` (that very tensor), or ids on the CPU; else None."""
        if self._sampled is not None and self._sampled[0] is clients:
            return self._sampled[1]
        return clients.numpy() if clients.device.type == "cpu" else None

    def _host(self, clients: Tensor) -> np.ndarray:
        """``clients`` on the host: :meth:`host_ids`, else read from the device."""
        host = self.host_ids(clients)
        return clients.cpu().numpy() if host is None else host

    def broadcast(self, x: Tensor, clients: Tensor) -> Tensor:
        """The server sends ``x [P]`` to each of ``clients``: their copies ``[S, P]``."""
        self.traffic.server += len(clients) * message_bytes(x.shape[-1])
        return x.expand(len(clients), -1).clone()

    def aggregate(self, values: Tensor, clients: Tensor,
                  weighting: Weighting | str = Weighting.SAMPLES) -> Tensor:
        """Each of ``clients`` uploads its row of ``values [S, P]``; the server reduces them
        (:class:`Weighting`): ``samples``: Σ p_i v_i with p_i = n_i / Σ_{j∈S} n_j;
        ``uniform``: the plain mean; ``sum``: the plain sum."""
        weighting = Weighting.of(weighting)
        self.traffic.clients[self._host(clients)] += message_bytes(values.shape[-1])
        if weighting is Weighting.UNIFORM:
            return values.mean(0)
        if weighting is Weighting.SUM:
            return values.sum(0)
        weights = self.sample_sizes[clients].to(values.dtype)
        return (weights / weights.sum()) @ values

    def rows(self, state: Tensor, clients: Tensor) -> Tensor:
        """The rows of per-client ``state`` that belong to ``clients`` (a copy)."""
        return state[clients]

    def set_rows(self, state: Tensor, clients: Tensor, values: Tensor) -> None:
        """Write the rows of ``clients`` in per-client ``state``."""
        state[clients] = values

    # -- what an observer sees (no bytes) ------------------------------------------------------
    def mean(self, x: Tensor) -> Tensor:
        """(1/M) Σ_i x_i, ``[P]``."""
        return x.mean(dim=0)

    def replicate(self, x: Tensor) -> Tensor:
        """``[M, P]``: every client holding ``x [P]`` (a view)."""
        return x.expand(self.num_clients, -1)

    # -- where the rows live -------------------------------------------------------------------
    # One process holds every row; gossipfl.distributed.DistributedFederation overrides these
    # so that each process holds a contiguous block of clients (the runner's only seams).
    def own_clients(self, device: torch.device | str | None = None) -> Tensor:
        """The ids of the clients whose rows this process holds (here all M, in order)."""
        return torch.arange(self.num_clients, device=device)

    def block(self, rows):
        """This process's rows of anything with one entry per client (tensor, list)."""
        return rows

    def gather(self, x: Tensor) -> Tensor:
        """All M rows of per-client ``x`` held in blocks (observers), on every process."""
        return x

    def gather_to_writer(self, x: Tensor) -> Tensor:
        """All M rows of per-client ``x`` on the process that writes the run (checkpoints,
        the final models), no rows (``[0, ...]``) on the others: one copy of the whole
        stack in the job, not one per process."""
        return x

    def total(self, x: Tensor) -> Tensor:
        """A per-process partial sum, summed over the processes."""
        return x

    def share(self, count: int) -> slice:
        """This process's part of ``count`` shared items (e.g. test samples to evaluate)."""
        return slice(0, count)
