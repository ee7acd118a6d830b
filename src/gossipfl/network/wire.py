"""The wire under the gossip pipeline, and the pipeline itself.

:class:`Wire` is what crosses the links of round t's mixing matrix W_t: the Mixer's products
(link failures included: with a ``systems`` section its topology is W'_t), messages sent
whole or compressed, and the bytes each sender pays, recorded in the Federation's
:class:`~gossipfl.network.federation.Traffic`. One process holds every row here; the distributed
backend's wire exchanges the rows between processes
(:class:`gossipfl.distributed.federation.DistributedWire`), the packed runs' mixes each run's
block with its own mixer (:class:`gossipfl.studies.packing.joint.PackedWire`).

:class:`Pipeline` is the Federation's gossip: the stages (:mod:`gossipfl.topology.stages`)
built by the composition root, outermost first, around the exact step x = W_t^Q z::

    Federation.gossip(z, t, steps, group, channel)
        │  the group's columns
        ▼
    stage 1 .mix(z, t, steps, channel, link) ─► … ─► exact: x = W_t^Q z, 4n bytes per
        (compression with error feedback,             message and step
         robust aggregation under attack)             (Wire.mix, Wire.charge)
                    │ link.wire
                    ▼
    Wire: W_t / W'_t products, publish / send_compressed (exact encodings), bytes
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from gossipfl.common.rng import client_keys, vectorized_keys
from gossipfl.compression import kernels
from gossipfl.errors import GossipflError
from gossipfl.topology.stages import Channel, Stage

if TYPE_CHECKING:  # annotations only
    from gossipfl.topology.sparse import Edges

FLOAT_BYTES = 4


def message_bytes(numel: int, nonzeros: Tensor | None = None) -> Tensor | int:
    """Bytes of a dense message of ``numel`` floats, or of masked ones with ``nonzeros``."""
    if nonzeros is None:
        return FLOAT_BYTES * numel
    values = FLOAT_BYTES * nonzeros
    return values + torch.minimum(values, torch.full_like(values, -(-numel // 8)))


class Wire:
    """W_t's products on this process's rows and the bytes of what is sent over its links;
    ``traffic`` is the Federation's byte count, ``seed`` keys the compressors' streams."""

    def __init__(self, num_clients: int, mixer, traffic, seed: int):
        self.num_clients = num_clients
        self.mixer = mixer  # gossipfl.topology.Mixer; None for centralized algorithms
        self.traffic = traffic
        self.seed = seed
        self._degree: tuple[int | None, np.ndarray] | None = None  # (round or None, degrees)
        self._nonzeros: tuple | None = None  # (key, (i, j, w_ij)) of W's entries

    # -- the graph ---------------------------------------------------------------------------
    @property
    def topology(self):
        return self.mixer.topology

    @property
    def time_varying(self) -> bool:
        """Whether W changes from round to round (False without a topology)."""
        return self.mixer is not None and bool(self.mixer.topology.time_varying)

    @property
    def edges_only(self) -> bool:
        """Whether the topology is built as edges only (no dense W: many clients)."""
        return self.mixer is not None and bool(getattr(self.mixer.topology, "sparse", False))

    def edges(self, t: int) -> Edges:
        """Round t's mixing matrix W as edges (its non-zero entries), dense topology or not."""
        return self.mixer.topology.edges(t)

    def matrix(self, t: int, what: str = "this gossip order") -> np.ndarray:
        """Round t's dense W, refused (naming ``what``) for a topology built as edges."""
        return np.asarray(self.mixer.topology.matrix(t, what))

    def own_clients(self, device: torch.device | str | None = None) -> Tensor:
        """The ids of the clients whose rows this process holds (here all M, in order)."""
        return torch.arange(self.num_clients, device=device)

    # -- whole messages ----------------------------------------------------------------------
    def mix(self, x: Tensor, t: int, steps: int) -> Tensor:
        """W_t^steps x for this process's rows (one process: every row); no bytes."""
        return self.mixer.mix(x, t, steps=steps)

    def out_degree(self, t: int) -> np.ndarray:
        """[M] messages client j sends per gossip step: #{i ≠ j : w_ij ≠ 0}."""
        key = t if self.time_varying else None
        if self._degree is None or self._degree[0] != key:
            if self.edges_only:
                self._degree = key, self.mixer.topology.edges(t).out_degree()
                return self._degree[1]
            nonzero = np.asarray(self.mixer.topology.matrix(t)) != 0
            self._degree = key, nonzero.sum(axis=0) - np.diagonal(nonzero)
        return self._degree[1]

    def charge(self, t: int, nbytes, steps: int = 1) -> None:
        """Every client sends a message of ``nbytes`` to each out-neighbour, ``steps`` times."""
        self.traffic.clients += self.out_degree(t) * steps * nbytes

    def charge_rows(self, t: int, numel: int, steps: int = 1) -> None:
        """:meth:`charge` of dense messages of ``numel`` floats (each client's row, whole)."""
        self.charge(t, message_bytes(numel), steps)

    # -- compressed messages -----------------------------------------------------------------
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

    def mixes_sparse_messages(self) -> bool:
        """Whether :meth:`publish` may mix sparse messages directly (one process: yes)."""
        return True

    def _charge_compressed(self, t: int, compressor, numel: int) -> None:
        self.traffic.clients += self.out_degree(t) * compressor.width(numel)

    def _send(self, v: Tensor, t: int, compressor, key: tuple, keys: Tensor
              ) -> tuple[Tensor, Tensor]:
        """:meth:`send_compressed` with the senders' ``keys`` already drawn."""
        self._charge_compressed(t, compressor, v.shape[1])
        q = compressor.compress(v, keys)
        return q, self._mix_compressed(q, v, t, compressor, key, keys)

    def _mix_compressed(self, q: Tensor, v: Tensor, t: int, compressor, key: tuple,
                        keys: Tensor) -> Tensor:
        """W q (one process: the decoded messages are q itself)."""
        return self.mix(q, t, 1)

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


class Link:
    """The rest of a pipeline as a stage sees it: ``wire`` (the transport) and ``mix`` (the
    next stages, then the exact step)."""

    def __init__(self, wire: Wire, stages: Sequence[Stage]):
        self.wire = wire
        self._stages = stages

    def mix(self, z: Tensor, t: int, steps: int, channel: Channel) -> Tensor:
        if self._stages:
            return self._stages[0].mix(z, t, steps, channel, Link(self.wire, self._stages[1:]))
        self.wire.charge_rows(t, z.shape[1], steps)
        return self.wire.mix(z, t, steps)


class Pipeline:
    """The gossip of a run: ``stages`` (outermost first) around the exact step on ``wire``;
    ``channels``: the algorithm's ``gossip_channels``, the names a gossip call may give."""

    def __init__(self, wire: Wire, stages: Sequence[Stage] = (),
                 channels: Sequence[str] = ("x",)):
        self.wire = wire
        self.stages = tuple(stages)
        self.channels = {name: Channel(name, k) for k, name in enumerate(channels)}
        self._link = Link(wire, self.stages)

    def mix(self, z: Tensor, t: int, steps: int = 1, channel: str = "x") -> Tensor:
        """``steps`` gossip steps of ``z`` ``[M, n]`` on ``channel`` through every stage
        (without stages, exact gossip: every name mixes alike)."""
        if not self.stages:
            return self._link.mix(z, t, steps, Channel(channel, -1))
        if channel not in self.channels:
            raise GossipflError(f"gossip channel {channel!r}: not among the algorithm's "
                                f"gossip_channels {tuple(self.channels)}; declare it there.")
        return self._link.mix(z, t, steps, self.channels[channel])

    def bypass(self, what: str) -> None:
        """Refuse ``what`` (an operation that mixes without the pipeline: push-sum, masks,
        a few rows, pairs) when a stage changes the messages, in one sentence."""
        for stage in self.stages:
            if stage.form:
                raise GossipflError(f"{stage.key}: {what} has no {stage.form} form; "
                                    f"remove {stage.key}.")


__all__ = ["FLOAT_BYTES", "Link", "Pipeline", "Wire", "message_bytes"]
