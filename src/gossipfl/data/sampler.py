"""Per-client minibatches for all M clients at once, as ``[M, B]`` index tensors.

Each client i owns ``n_i`` training indices. A step's batch is ``(idx, mask)``: ``idx[i]`` are
B global indices into the train set for client i and ``mask[i]`` says which of them count
(padding repeats a valid index of that client, so gathering never goes out of range).

How a shuffle is built without a Python loop over clients: the "stream" of client i is the
concatenation of independent random permutations of ``0..n_i-1``. All streams are laid out in
one flat vector, one segment per (client, permutation); one sort of the keys
``segment_id * 2^b + random`` shuffles every segment at once. The random bits of element n of
client i's stream are a hash of (client i's key, n), and client i's key is derived from
(seed, "sampler", round, client, ...) alone, so a client's minibatches never depend on which
other clients are drawn with it: any subset of clients (``clients=``) gets the same rows as
it would with all the others, on every device.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from gossipfl.common.rng import client_keys, counter_bits, vectorized_keys
from gossipfl.common.transfer import to_device
from gossipfl.errors import GossipflError

IndexBatch = tuple[Tensor, Tensor]  # (idx [M, B], mask [M, B])


class ClientSampler:
    """Shuffled per-client minibatches; ``batch_size=None`` means full batch.

    Every method takes ``clients`` (ids, in the order wanted; None = all M in order) and
    returns one row per requested client.
    """

    def __init__(self, client_indices: list[np.ndarray], batch_size: int | None, seed: int,
                 device: str | torch.device = "cpu", vectorized: bool | None = None):
        if batch_size is not None and (
            not isinstance(batch_size, int | np.integer) or batch_size < 1
        ):
            raise GossipflError(
                f"data.batch_size: must be an integer >= 1 or null (full batch), got {batch_size}."
            )
        if not len(client_indices):
            raise GossipflError("data.clients: the sampler needs at least one client, got 0.")
        self.device = torch.device(device)
        self.seed = int(seed)
        # how client keys are derived (gossipfl.common.rng.vectorized_keys): fixed for the run
        self.vectorized = (vectorized_keys(len(client_indices)) if vectorized is None
                           else bool(vectorized))
        sizes = [len(ix) for ix in client_indices]
        self.sizes = torch.tensor(sizes, dtype=torch.int64, device=self.device)
        self.host_sizes = np.asarray(sizes, dtype=np.int64)  # read without the device
        self.num_clients = len(sizes)
        self.n_max = max(sizes)
        self.batch_size = int(batch_size) if batch_size is not None else None
        self.index_matrix = self._padded(client_indices)

    def _padded(self, client_indices: list[np.ndarray]) -> Tensor:
        """[M, max(n_max, 1)] global indices; row i padded with its first index (or 0)."""
        width = max(self.n_max, 1)
        matrix = np.zeros((self.num_clients, width), dtype=np.int64)
        for i, ix in enumerate(client_indices):
            ix = np.asarray(ix, dtype=np.int64).reshape(-1)
            if len(ix):
                matrix[i, :] = ix[0]
                matrix[i, : len(ix)] = ix
        return torch.from_numpy(matrix).to(self.device)

    def _ids(self, clients) -> Tensor:
        if clients is None:
            return torch.arange(self.num_clients, device=self.device)
        if isinstance(clients, Tensor) and clients.device.type != "cpu":
            return clients.to(device=self.device, dtype=torch.int64)
        return to_device(clients, self.device, torch.int64)  # the host's: without waiting

    def host_ids(self, clients) -> np.ndarray | None:
        """``clients`` as the host knows them without reading the device (None: all M in
        order; a NumPy array: as they are; a tensor on the CPU), else None."""
        if clients is None:
            return np.arange(self.num_clients)
        if isinstance(clients, np.ndarray):
            return clients
        if isinstance(clients, torch.Tensor) and clients.device.type == "cpu":
            return clients.numpy()
        return None

    @property
    def full(self) -> bool:
        """Whether every step is the client's whole data."""
        return self.batch_size is None

    def steps_per_epoch(self, clients=None) -> int:
        """Steps in one pass: ``max_i ceil(n_i / B)`` over the clients (1 for full batch)."""
        if self.full:
            return 1
        n_max = self._largest(clients)
        return max(1, math.ceil(n_max / self.batch_size))

    def _largest(self, clients) -> int:
        """The largest data size among ``clients`` (0 for none), from the host's copy of the
        sizes where the ids are known there."""
        host = self.host_ids(clients)
        if host is not None:
            return int(self.host_sizes[host].max()) if len(host) else 0
        sizes = self.sizes[self._ids(clients)]
        return int(sizes.max()) if len(sizes) else 0

    def batches_per_epoch(self, clients=None) -> Tensor:
        """``[S]`` each client's own number of batches in one pass (0 for an empty client)."""
        sizes = self.sizes[self._ids(clients)]
        if self.full:
            return (sizes > 0).to(torch.int64)
        return (sizes + self.batch_size - 1) // self.batch_size

    def full_batch(self, clients=None) -> IndexBatch:
        """``(idx [S, n_max], mask)`` with each client's indices in stored order."""
        ids = self._ids(clients)
        sizes = self.sizes[ids]
        width = max(self._largest(clients), 1)
        mask = torch.arange(width, device=self.device)[None, :] < sizes[:, None]
        return self.index_matrix[ids, :width], mask

    def epoch(self, round: int, epoch: int, *stream: object, clients=None,
              counters=None) -> list[IndexBatch]:
        """One pass of every client over its own data, reshuffled per (seed, round, client,
        epoch, stream).

        ``steps_per_epoch(clients)`` batches of shape ``[S, B]``; a client with fewer batches
        gets all-False mask rows on the extra steps and a partially masked last batch (no
        drop_last).
        """
        if self.full:
            return [self.full_batch(clients)]
        idx, mask = self.epoch_streams(round, epoch, *stream, clients=clients,
                                       counters=counters)
        return cut_steps(idx, mask, idx.shape[1] // self.batch_size, self.batch_size)

    def epoch_streams(self, round: int, epoch: int, *stream: object, clients=None,
                      counters=None) -> IndexBatch:
        """:meth:`epoch`'s batches side by side: ``(idx, mask)`` of shape
        ``[S, steps_per_epoch · B]``, step s in columns s·B … (s+1)·B − 1 (not full batch)."""
        ids, host = self._ids(clients), self.host_ids(clients)
        steps = self.steps_per_epoch(clients)
        keys = self.stream_keys(ids if host is None else host,
                                ("sampler", round, "epoch", epoch, *stream), counters)
        sizes = self.sizes[ids]
        host_sizes = None if host is None else self.host_sizes[host]
        return self._streams(ids, sizes, steps * self.batch_size, keys,
                             None if host is None else (host_sizes, host_sizes))

    def steps(self, round: int, num_steps: int, *stream: object,
              clients=None, counters=None) -> list[IndexBatch]:
        """``num_steps`` batches; each client cycles through its own reshuffled data, with a
        new permutation each time it wraps. Masks are all True (except empty clients); in
        full-batch mode every step is :meth:`full_batch`."""
        if self.full:
            _check_steps(num_steps)
            return [self.full_batch(clients)] * num_steps
        idx, mask = self.step_streams(round, num_steps, *stream, clients=clients,
                                      counters=counters)
        return cut_steps(idx, mask, num_steps, self.batch_size)

    def step_streams(self, round: int, num_steps: int, *stream: object, clients=None,
                     counters=None) -> IndexBatch:
        """:meth:`steps`' batches side by side: ``(idx, mask)`` of shape
        ``[S, num_steps · B]`` (not full batch)."""
        _check_steps(num_steps)
        ids, host = self._ids(clients), self.host_ids(clients)
        length = num_steps * self.batch_size
        keys = self.stream_keys(ids if host is None else host,
                                ("sampler", round, "steps", *stream), counters)
        lengths = torch.where(self.sizes[ids] > 0, length, 0)
        host_sizes = None if host is None else self.host_sizes[host]
        return self._streams(ids, lengths, length, keys, None if host is None else
                             (host_sizes, np.where(host_sizes > 0, length, 0)))

    def stream_keys(self, ids: Tensor | np.ndarray, keys: tuple, counters) -> Tensor:
        """The clients' stream keys for ``keys`` (the run's way: gossipfl.common.rng.client_keys);
        ``ids`` on the device, or the host's (a NumPy array)."""
        return client_keys(self.seed, ids, *keys, counters=counters,
                           vectorized=self.vectorized, device=self.device)

    def _streams(self, ids: Tensor, lengths: Tensor, width: int, keys: Tensor,
                 host: tuple[np.ndarray, np.ndarray] | None = None) -> IndexBatch:
        """Global indices ``[S, width]`` of the first ``lengths[i]`` elements of each client's
        stream (padded with a valid index), and the mask of those elements; ``host``: the
        clients' sizes and ``lengths`` on the host, so that nothing is read from the device."""
        positions = shuffled_streams(self.sizes[ids], lengths, keys, host)
        local = torch.nn.functional.pad(positions, (0, width - positions.shape[1]))
        mask = torch.arange(width, device=self.device)[None, :] < lengths[:, None]
        return torch.gather(self.index_matrix[ids], 1, local), mask


def shuffled_streams(sizes: Tensor, lengths: Tensor, keys: Tensor,
                     host: tuple[np.ndarray, np.ndarray] | None = None) -> Tensor:
    """Row i: the first ``lengths[i]`` entries of independent random permutations of
    ``0..sizes[i]-1`` laid end to end, zero-padded to ``max(lengths)`` columns; the
    permutations of row i depend only on ``keys[i]`` (int64). ``host``: ``(sizes,
    lengths)`` as NumPy arrays, whence the shapes are taken without reading the device (on a
    GPU each read stops the host until the device has caught up).
    """
    device = sizes.device
    keys = keys.to(device)
    reps = torch.where(sizes > 0, (lengths + sizes - 1) // sizes.clamp(min=1), 0)
    seg_len = reps * sizes                                     # [M] elements per client
    if host is not None:
        host_sizes, host_lengths = host
        host_reps = np.where(host_sizes > 0,
                             (host_lengths + host_sizes - 1) // np.maximum(host_sizes, 1), 0)
        total, segments = int((host_reps * host_sizes).sum()), int(host_reps.sum())
        width = int(host_lengths.max()) if len(host_lengths) else 0
    else:
        total, segments = int(seg_len.sum()), int(reps.sum())
        width = int(lengths.max()) if len(lengths) else 0
    client = torch.repeat_interleave(torch.arange(len(sizes), device=device), seg_len,
                                     output_size=total)
    start = torch.cumsum(seg_len, 0) - seg_len                 # [M] offset of each client
    pos = torch.arange(total, device=device) - start[client]   # position in client's region
    n = sizes[client]
    local = pos % n.clamp(min=1)
    segment = pos // n.clamp(min=1) + (torch.cumsum(reps, 0) - reps)[client]
    # One sort of int64 keys (segment id in the high bits, random low bits) shuffles every
    # segment in place; >= 40 random bits (up to 4M segments) make ties negligible; a stable sort
    # resolves any the same way on every device.
    bits = 62 - max(segments, 1).bit_length()
    noise = counter_bits(keys[client], pos, bits)
    order = torch.argsort((segment << bits) | noise, stable=True)
    shuffled = local[order]                                    # aligned with flat layout
    cols = torch.arange(width, device=device)
    valid = cols[None, :] < lengths[:, None]
    flat = (start[:, None] + cols[None, :]).clamp(max=max(total - 1, 0))
    if total == 0:
        return torch.zeros((len(sizes), width), dtype=torch.int64, device=device)
    return torch.where(valid, shuffled[flat], 0)


def _check_steps(num_steps: object) -> None:
    if not isinstance(num_steps, int | np.integer) or num_steps < 1:
        raise GossipflError(f"train.local_steps: must be an integer >= 1, got {num_steps}.")


def step_major(idx: Tensor, mask: Tensor, steps: int, batch: int) -> IndexBatch:
    """``[S, steps * batch]`` columns as ``[steps, S, batch]``, step s of row i being columns
    ``s·batch … (s+1)·batch − 1`` of row i: a view, no copy."""
    rows = idx.shape[0]
    return (idx.reshape(rows, steps, batch).transpose(0, 1),
            mask.reshape(rows, steps, batch).transpose(0, 1))


def cut_steps(idx: Tensor, mask: Tensor, steps: int, batch: int) -> list[IndexBatch]:
    """Split ``[M, steps * batch]`` columns into ``steps`` batches of ``[M, batch]``
    (:func:`step_major`'s steps, each made contiguous)."""
    return [(i.contiguous(), m.contiguous())
            for i, m in zip(*step_major(idx, mask, steps, batch), strict=True)]
