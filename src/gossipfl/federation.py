"""The Federation: the one channel between clients.

Algorithms never reduce, mix or index across the client dimension themselves; every
interaction between clients goes through these methods, which also count the bytes that
are really sent:

- :meth:`Federation.gossip` — X ← W^Q Z with round t's mixing matrix, optionally only on a
  parameter group, or weighted coordinate-wise by per-client masks (the DisPFL rule
  x_i = Σ_j w_ij m_j ⊙ z_j / Σ_j w_ij m_j, own value where no neighbour holds the coordinate);
- :meth:`Federation.push_sum` — (W x, W w): push-sum's message, a model and its scalar
  weight, over a column-stochastic (or doubly stochastic) W;
- :meth:`Federation.send_compressed` — (C(v), W C(v)): every client sends its row compressed
  (gossipfl.compression), the receivers mix what they decode; with ``topology.compression``
  :meth:`gossip` is CHOCO-Gossip built on it (:mod:`gossipfl.compression.gossip`);
- :meth:`Federation.sample`, :meth:`Federation.broadcast`, :meth:`Federation.aggregate` —
  a server's client sampling, download and (n_i-weighted, uniform or summed) upload;
- :meth:`Federation.rows` / :meth:`Federation.set_rows` — a server reading and writing the
  per-client state of the sampled clients;
- :meth:`Federation.mean` and :meth:`Federation.replicate` — what an observer sees (the
  average model; every client holding the server model): no bytes;
- the placement of rows on processes (:meth:`Federation.own_clients`, ``block``,
  ``gather``, ``total``, ``share``): one process holds every row here.

What a client has on its own (the oracle, the parameter groups, the local-training
settings, its n_i and label counts) is its :class:`~gossipfl.clients.ClientEnv`, not this.

Bytes: a dense message of a group of n parameters costs 4n bytes (fp32). A masked message
costs its values plus the cheaper of int32 indices or a bitmap: 4·nnz + min(4·nnz, ⌈n/8⌉).
A compressed message costs its encoding's exact width (``Compressor.width``). Per gossip
step, client j sends one message to each out-neighbour (w_ij ≠ 0, i ≠ j).
:class:`Traffic` records the bytes of every sender (clients, and the server).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from gossipfl.compression import kernels
from gossipfl.engine.groups import ParamGroup, ParamGroups
from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.rng import client_keys, numpy_generator, vectorized_keys

if TYPE_CHECKING:  # annotations only
    from gossipfl.compression.gossip import Channels
    from gossipfl.topology.sparse import Edges

FLOAT_BYTES = 4


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


def message_bytes(numel: int, nonzeros: Tensor | None = None) -> Tensor | int:
    """Bytes of a dense message of ``numel`` floats, or of masked ones with ``nonzeros``."""
    if nonzeros is None:
        return FLOAT_BYTES * numel
    values = FLOAT_BYTES * nonzeros
    return values + torch.minimum(values, torch.full_like(values, -(-numel // 8)))


class Federation:
    """The only operations that cross the client dimension, the bytes they send, and where
    the rows live. ``groups`` name the column sets a message may carry (``all``, ``shared``,
    ``personal``); ``sample_sizes`` ``[M]`` are the n_i a server weights by; ``seed`` draws
    the server's client samples; ``mixer`` holds the topology (None for centralized runs);
    ``compression``: CHOCO-Gossip's channels with ``topology.compression`` (None: exact
    gossip; their public copies are the run's gossip namespace, gossipfl.state). Of the
    run's state it keeps only the byte count of the round in progress (``traffic``, taken by
    the runner every round); the rest is caches of the round's W."""

    def __init__(self, num_clients: int, groups: ParamGroups, sample_sizes: Tensor, seed: int,
                 mixer=None, compression: Channels | None = None, robust=None):
        self.num_clients = num_clients
        self._groups = groups
        self.sample_sizes = sample_sizes  # [M] float, n_i
        self.seed = seed
        self.mixer = mixer  # gossipfl.topology.Mixer; None for centralized algorithms
        self.traffic = Traffic(num_clients)
        self._degree: tuple[int | None, np.ndarray] | None = None  # (round or None, degrees)
        self.compression = compression  # their public copies: the run's gossip namespace
        # gossipfl.trust.gossip.RobustGossip: topology.robust and byzantine; None: W z
        self.robust = robust
        self._nonzeros: tuple | None = None  # (key, (i, j, w_ij)) of W's entries

    # -- decentralized ---------------------------------------------------------------------
    def gossip(self, z: Tensor, t: int, steps: int = 1, group: str = "all",
               masks: Tensor | None = None) -> Tensor:
        """W^Q z with round t's W (Q = ``steps``) on the columns of ``group`` (the others
        keep z's values); with ``masks [M, P]`` (bool or 0/1) the DisPFL rule; with
        ``robust`` (``topology.robust``, ``byzantine``) Q robust steps under attack."""
        columns = self._groups[group]
        out_degree = self._out_degree(t)
        if masks is None:
            if self.compression is None:
                self.traffic.clients += out_degree * steps * message_bytes(columns.numel)
                mix = self._mix if self.robust is None else self._robust_mix
            else:
                def mix(x, t, steps):
                    return self.compression.gossip(self, x, t, steps)
            if columns.is_all:
                return mix(z, t, steps)
            mixed = z.clone()
            columns.assign(mixed, mix(columns.select(z), t, steps))
            return mixed
        self._uncompressed("masked gossip (DisPFL)")
        return self._masked_gossip(z, t, steps, columns, masks, out_degree)

    def _robust_mix(self, x: Tensor, t: int, steps: int) -> Tensor:
        """``steps`` robust gossip steps under attack (gossipfl.trust.gossip)."""
        return self.robust.gossip(self, x, t, steps)

    def send_compressed(self, v: Tensor, t: int, compressor, key: tuple
                        ) -> tuple[Tensor, Tensor]:
        """(q, W q) with q_j = C(v_j): every client j sends its row compressed by
        ``compressor`` to each out-neighbour (``compressor.width(P)`` bytes each) and every
        client mixes the messages it decodes. ``key`` (with the seed and the client id)
        draws a randomized compressor's stream, so sender and receivers agree on it."""
        return self._send(v, t, compressor, key, self.compress_keys(v, key, compressor))

    def publish(self, target: Tensor, t: int, compressor, key: tuple, copy: Tensor,
                mixed: Tensor, gamma: float | None = None) -> Tensor | None:
        """With q = C(target − copy): copy ← copy + q, mixed ← mixed + W q, in place —
        :meth:`send_compressed` for public copies (CHOCO-Gossip's x̂ and s = W x̂). A
        compressor that keeps k of the P coordinates is applied without densifying its
        messages (:meth:`publish_sparse`). With ``gamma``, also returns CHOCO-Gossip's
        consensus target + γ (mixed − copy) on the updated copies
        (:func:`~gossipfl.compression.kernels.consensus`; computed row by row with the
        delivery where the messages are sparse)."""
        keys = self.compress_keys(target, key, compressor)
        sparse = (compressor.sparse(target, keys, copy) if self.mixes_sparse_messages()
                  else None)
        consensus_of = None if gamma is None else (target, gamma)
        if sparse is None:
            q, mixed_q = self._send(target - copy, t, compressor, key, keys)
            copy.add_(q)
            mixed.add_(mixed_q)
            return None if gamma is None else kernels.consensus(target, copy, mixed, gamma)
        return self.publish_sparse(*sparse, t, compressor, copy, mixed, consensus_of)

    def publish_sparse(self, idx: Tensor, values: Tensor, t: int, compressor, copy: Tensor,
                       mixed: Tensor, consensus_of: tuple[Tensor, float] | None = None
                       ) -> Tensor | None:
        """:meth:`publish` of the messages q given as ``(idx, values)`` ``[M, k]`` (each
        client's k coordinates): copy ← copy + q, mixed ← mixed + W q in nnz(W)·k products
        instead of nnz(W)·P (:func:`~gossipfl.compression.kernels.deliver`, which also
        returns the consensus of ``consensus_of = (target, γ)``)."""
        self._charge_compressed(t, compressor, copy.shape[1])
        return kernels.deliver(idx, values, self._entries(t, values.device, values.dtype),
                               copy, mixed, consensus_of)

    def compress_keys(self, v: Tensor, key: tuple, compressor, clients=None) -> Tensor | None:
        """The stream keys of ``clients`` (default: this process's) for the compressed
        messages of ``key`` (None for a compressor that draws no randomness)."""
        if not compressor.keyed:
            return None
        clients = self.own_clients() if clients is None else clients
        return client_keys(self.seed, clients, "compress", *key, device=v.device,
                           vectorized=vectorized_keys(self.num_clients))

    def _charge_compressed(self, t: int, compressor, numel: int) -> None:
        self.traffic.clients += self._out_degree(t) * compressor.width(numel)

    def _send(self, v: Tensor, t: int, compressor, key: tuple, keys: Tensor
              ) -> tuple[Tensor, Tensor]:
        """:meth:`send_compressed` with the senders' ``keys`` already drawn."""
        self._charge_compressed(t, compressor, v.shape[1])
        q = compressor.compress(v, keys)
        return q, self._mix_compressed(q, v, t, compressor, key, keys)

    def mixes_sparse_messages(self) -> bool:
        """Whether :meth:`publish` may mix sparse messages directly (one process: yes)."""
        return True

    def _entries(self, t: int, device, dtype) -> tuple[Tensor, Tensor, Tensor]:
        """Round t's nonzero w_ij as (i, j, w_ij) tensors (cached for a static graph)."""
        key = (t if self.time_varying else None, device, dtype)
        if self._nonzeros is None or self._nonzeros[0] != key:
            if self.edges_only:
                E = self.mixer.topology.edges(t)
                self._nonzeros = key, (torch.as_tensor(E.rows, device=device),
                                       torch.as_tensor(E.cols, device=device),
                                       torch.as_tensor(E.values, device=device, dtype=dtype))
                return self._nonzeros[1]
            W = np.asarray(self.mixer.topology.matrix(t))
            i, j = np.nonzero(W)
            self._nonzeros = key, (torch.as_tensor(i, device=device),
                                   torch.as_tensor(j, device=device),
                                   torch.as_tensor(W[i, j], device=device, dtype=dtype))
        return self._nonzeros[1]

    def _mix_compressed(self, q: Tensor, v: Tensor, t: int, compressor, key: tuple,
                        keys: Tensor) -> Tensor:
        """W q (one process: the decoded messages are q itself)."""
        return self._mix(q, t, 1)

    def _uncompressed(self, what: str) -> None:
        if self.compression is not None:
            raise GossipflError(f"topology.compression: {what} has no compressed form; "
                                "remove topology.compression.")

    def push_sum(self, x: Tensor, w: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """(W x, W w) with round t's W, for ``x [M, P]`` and push-sum weights ``w [M, 1]``:
        client j sends w_ij x_j and w_ij w_j to each out-neighbour i (w_ij ≠ 0, i ≠ j), one
        message of P + 1 floats. With a column-stochastic W, Σ_i x_i and Σ_i w_i are kept."""
        self._uncompressed("push-sum gossip")
        self.traffic.clients += self._out_degree(t) * message_bytes(self._groups.all.numel + 1)
        both = self._mix(torch.cat([x, w.to(x.dtype)], dim=1), t, 1)
        return both[:, :-1], both[:, -1:]

    def matrix(self, t: int, what: str = "this gossip order") -> np.ndarray:
        """Round t's mixing matrix W ``[M, M]`` (what a schedule orders its events by);
        refused, naming ``what``, for a topology built as edges."""
        return np.asarray(self.mixer.topology.matrix(t, what))

    def edges(self, t: int) -> Edges:
        """Round t's mixing matrix W as edges (its non-zero entries), dense topology or not."""
        return self.mixer.topology.edges(t)

    @property
    def time_varying(self) -> bool:
        """Whether W changes from round to round (False without a topology)."""
        return self.mixer is not None and bool(self.mixer.topology.time_varying)

    @property
    def edges_only(self) -> bool:
        """Whether the topology is built as edges only (no dense W: many clients)."""
        return self.mixer is not None and bool(getattr(self.mixer.topology, "sparse", False))

    def gossip_rows(self, z: Tensor, t: int, rows: Tensor) -> Tensor:
        """``(W z)[rows]`` with round t's W: one gossip step received by the clients ``rows``
        only (a sequential sweep mixes a few clients at a time). Each neighbour j ≠ i of a
        receiver i (w_ij ≠ 0) sends i one message, so the receivers of a whole round together
        cost what one synchronous gossip step costs."""
        self._uncompressed("the sequential order's gossip")
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
        self._uncompressed("pairwise averaging (an asynchronous order)")
        mean = (x[first] + x[second]) / 2
        x[first] = mean
        x[second] = mean
        sent = message_bytes(self._groups.all.numel)
        np.add.at(self.traffic.clients, first.cpu().numpy(), sent)
        np.add.at(self.traffic.clients, second.cpu().numpy(), sent)
        return x

    def _masked_gossip(self, z: Tensor, t: int, steps: int, columns: ParamGroup,
                       masks: Tensor, out_degree: np.ndarray) -> Tensor:
        m = columns.select(masks).to(z.dtype)
        held = columns.select(z)
        nonzeros = (m != 0).sum(dim=1).cpu()
        sent = message_bytes(columns.numel, nonzeros).numpy()
        for _ in range(steps):
            numerator = self._mix(m * held, t, 1)
            denominator = self._mix(m, t, 1)
            held = torch.where(denominator > 0, numerator / denominator.clamp_min(1e-30), held)
            self.traffic.clients += out_degree * sent
        mixed = z.clone()
        columns.assign(mixed, held)
        return mixed

    def _mix(self, x: Tensor, t: int, steps: int) -> Tensor:
        """W_t^steps x for this process's rows (one process: every row)."""
        return self.mixer.mix(x, t, steps=steps)

    def _out_degree(self, t: int) -> np.ndarray:
        """[M] messages client j sends per gossip step: #{i ≠ j : w_ij ≠ 0}."""
        key = t if self.time_varying else None
        if self._degree is None or self._degree[0] != key:
            if self.edges_only:
                self._degree = key, self.mixer.topology.edges(t).out_degree()
                return self._degree[1]
            nonzero = np.asarray(self.mixer.topology.matrix(t)) != 0
            self._degree = key, nonzero.sum(axis=0) - np.diagonal(nonzero)
        return self._degree[1]

    # -- centralized -----------------------------------------------------------------------
    def sample(self, t: int, fraction: float, eligible: np.ndarray | None = None) -> Tensor:
        """round t's clients: max(1, round(fraction·M)) drawn uniformly without replacement
        (sorted ids), from the stream (seed, "participation", t); with ``eligible`` (``[M]``
        bool, the round plan's: online and meeting the deadline), only the drawn clients that
        are eligible — possibly none."""
        count = max(1, round(fraction * self.num_clients))
        rng = numpy_generator(self.seed, "participation", t)
        ids = np.sort(rng.choice(self.num_clients, size=count, replace=False))
        if eligible is not None:
            ids = ids[np.asarray(eligible)[ids]]
        return torch.as_tensor(ids, device=self.sample_sizes.device)

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
        self.traffic.clients[clients.cpu().numpy()] += message_bytes(values.shape[-1])
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
