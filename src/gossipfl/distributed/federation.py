"""The Federation of one rank of a ``torch.distributed`` job.

Rank r holds the contiguous block of clients ``[lo, hi)`` (:meth:`Processes.bounds`): every
per-client tensor an algorithm keeps or is handed is that block's rows, so algorithms run
unchanged. The operations that cross the client dimension become collectives:

- ``gossip`` (:class:`DistributedWire`): for round t's W each rank sends to each other rank exactly the rows of its
  block that the other's rows mix with (w_ij ≠ 0, j in the block; point-to-point
  ``isend``/``irecv``), then applies its rows of W to its own and the received rows. When
  every rank needs every other rank's whole block (a dense W) it all-gathers instead. Each of
  Q gossip steps is one exchange; masked (DisPFL) gossip exchanges the masked values and the
  masks; group gossip only the group's columns. Every rank rebuilds W_t from the seed. Ranks
  on one machine's CPU write the rows into each other's segments in ``/dev/shm`` instead
  (``engine.exchange``, :mod:`.shm`): the same rows in the same order, so the same bits.
- ``aggregate``: an all-reduce of the rank's weighted partial sum and weight, so the server
  step — every rank holds the server state and applies the same step to the same sum — needs
  no broadcast (``broadcast`` only copies, and charges the bytes a server would send).
- ``sample``: the round's sample (the same on every rank), restricted to the block.
- ``mean``, ``total``: all-reduces; ``gather``: all M rows (evaluation, checkpoints).

Summation order: the all-reduces add per-rank partial sums, and Q > 1 gossip steps are Q
products instead of one with W^Q, so results equal the one-process run to float tolerance,
not bit for bit. :class:`BlockTraffic` counts the accounted bytes of the block's clients
(summed over ranks each round) and, in ``wire``, the bytes this rank really sent.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from gossipfl.distributed.launch import Processes
from gossipfl.distributed.shm import SHM_DIR, open_segments
from gossipfl.errors import GossipflError
from gossipfl.network.federation import Federation, Traffic
from gossipfl.network.wire import Wire, message_bytes
from gossipfl.topology.sparse import Edges, unique_sorted

FAILURE_KEY = "gossipfl/failed"
#: What a rank tells a sender before the shared-memory exchange's writes (its segment is
#: ready; its rows come through the process group; it has no room and the job ends), and
#: what a sender tells it after them.
READY, FALLBACK, REFUSED, WRITTEN = 1, 2, 3, 4


class RankLost(GossipflError):
    """Another rank of the job stopped or did not answer in time."""

    exit_status = 1


@contextmanager
def communicating(processes: Processes, what: str):
    """Turn a failed collective into one sentence naming the rank that failed, when known."""
    try:
        yield
    except RuntimeError as exc:
        raise RankLost(lost_rank_message(processes, what, exc)) from None


def note_failure(processes: Processes, message: str) -> None:
    """Leave ``message`` where the other ranks look when a collective fails (the job's
    store); best effort: the store may be gone too."""
    if not processes.distributed:
        return
    with suppress(Exception):  # nothing more can be done
        store = dist.distributed_c10d._get_default_store()
        store.set(FAILURE_KEY, f"rank {processes.rank} failed: {message}")


def lost_rank_message(processes: Processes, what: str, exc: BaseException) -> str:
    note = None
    with suppress(Exception):  # the store may have gone with the failed rank
        store = dist.distributed_c10d._get_default_store()
        if store.check([FAILURE_KEY]):
            note = store.get(FAILURE_KEY).decode()
    if note is not None:
        return f"rank {processes.rank} stopped during {what} because {note}"
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
    return (f"rank {processes.rank} stopped during {what}: another rank stopped or did not "
            f"answer within engine.timeout = {processes.timeout:g} s ({reason}); the "
            f"launcher's report names the rank that failed.")


class BlockTraffic(Traffic):
    """Accounted bytes of this rank's clients (``clients[k]``: client lo + k), summed over all
    ranks by :meth:`take`; ``wire``: the bytes this rank really sent, over the whole run, and
    the most any rank sent in the round taken last (the ``wire_bytes_rank_max`` column)."""

    def __init__(self, num_clients: int, processes: Processes, device: torch.device):
        super().__init__(num_clients)
        self.processes = processes
        self.device = device  # NCCL reduces device tensors only
        self.wire = 0
        self._wire_taken = 0
        self._wire_max = 0

    def take(self) -> int:
        mine = torch.tensor([super().take(), self.wire - self._wire_taken], dtype=torch.int64,
                            device=self.device)
        self._wire_taken = self.wire
        parts = [torch.empty_like(mine) for _ in range(self.processes.world)]
        with communicating(self.processes, "the byte count"):
            dist.all_gather(parts, mine)
        every = torch.stack(parts)
        self._wire_max = int(every[:, 1].max())
        return int(every[:, 0].sum())

    def columns(self) -> dict:
        return {"wire_bytes_rank_max": self._wire_max}


@dataclass
class ExchangePlan:
    """One round's gossip for one rank: which rows go where, and its rows of W."""

    send: dict[int, Tensor]  # peer -> positions (in the block) of the rows the peer needs
    receive: dict[int, int]  # peer -> how many rows come from it (in ascending client id)
    weights: Tensor  # W[lo:hi, columns]: own block, then each peer's rows, ascending peer
    all_gather: bool  # every rank needs every other block whole: all-gather instead
    columns: np.ndarray  # the client id of each row the product reads, in that order
    # peer -> (where this rank's rows start in the peer's held rows, how many rows the peer
    # holds): the shared-memory exchange writes them there (gossipfl.distributed.shm)
    place: dict[int, tuple[int, int]] = field(default_factory=dict)


def placement(counts: np.ndarray, sizes: list[int], rank: int, send) -> dict:
    """``ExchangePlan.place`` from ``counts[r, s]`` (the rows rank r reads from rank s) and
    the block sizes: peer p holds its block, then each other rank's rows by ascending rank."""
    place = {}
    for peer in send:
        before = sum(int(counts[peer, s]) for s in range(rank) if s != peer)
        total = sum(int(counts[peer, s]) for s in range(len(sizes)) if s != peer)
        place[peer] = (sizes[peer] + before, sizes[peer] + total)
    return place


def exchange_plan(W: np.ndarray, processes: Processes, mixer) -> ExchangePlan:
    """The plan of ``processes.rank`` for mixing matrix ``W`` (the same W on every rank); its
    rows of W on the mixer's device, in its dtype, as CSR when the mixer mixes sparsely."""
    M, world, rank = len(W), processes.world, processes.rank
    blocks = [processes.bounds(M, r) for r in range(world)]
    lo, hi = blocks[rank]
    nonzero = W != 0
    # needs[r][s]: the ids in s's block that rank r's rows mix with
    needs = [[np.flatnonzero(nonzero[a:b, c:d].any(axis=0)) + c if s != r else None
              for s, (c, d) in enumerate(blocks)] for r, (a, b) in enumerate(blocks)]
    dense = all(len(needs[r][s]) == blocks[s][1] - blocks[s][0]
                for r in range(world) for s in range(world) if s != r)
    if dense:
        columns = np.arange(M)
        send, receive = {}, {}
    else:
        send = {s: torch.as_tensor(needs[s][rank] - lo, device=mixer.device)
                for s in range(world) if s != rank and len(needs[s][rank])}
        receive = {s: len(needs[rank][s]) for s in range(world)
                   if s != rank and len(needs[rank][s])}
        columns = np.concatenate([np.arange(lo, hi)] + [needs[rank][s] for s in receive])
    counts = np.array([[0 if s == r else len(needs[r][s]) for s in range(world)]
                       for r in range(world)])
    place = placement(counts, [b - a for a, b in blocks], rank, send)
    weights = mixer._to_device(W[lo:hi][:, columns], mixer.uses_sparse(1))
    return ExchangePlan(send, receive, weights, dense, columns, place)


def exchange_plan_edges(W: Edges, processes: Processes, mixer) -> ExchangePlan:
    """:func:`exchange_plan` from W's edges (a topology built as edges): the same plan, in
    O(M + edges) and without an ``[M, M]`` array; this rank's rows of W as a CSR
    ``[block, len(columns)]``. A rank receives only the rows its clients' in-neighbours
    hold: O(edges · P / ranks) bytes per rank on a graph of bounded degree."""
    M, world, rank = W.num_clients, processes.world, processes.rank
    starts = np.array([processes.bounds(M, r)[0] for r in range(world)] + [M])
    lo, hi = starts[rank], starts[rank + 1]
    reader = np.searchsorted(starts, W.rows, side="right") - 1  # the rank holding row i
    owner = np.searchsorted(starts, W.cols, side="right") - 1  # the rank holding client j
    crossing = reader != owner
    # every (reader, owner, client) a rank needs from another, once, in ascending order
    pairs = unique_sorted((reader[crossing] * world + owner[crossing]) * M + W.cols[crossing])
    pair, client = pairs // M, pairs % M
    need_reader, need_owner = pair // world, pair % world
    counts = np.bincount(pair, minlength=world * world).reshape(world, world)
    full = [counts[r, s] == starts[s + 1] - starts[s]
            for r in range(world) for s in range(world) if s != r]
    if all(full):
        columns, send, receive = np.arange(M), {}, {}
    else:
        send = {int(s): torch.as_tensor(client[(need_reader == s) & (need_owner == rank)] - lo,
                                        device=mixer.device)
                for s in range(world) if s != rank
                and np.any((need_reader == s) & (need_owner == rank))}
        mine = need_reader == rank
        receive = {int(s): int(np.count_nonzero(mine & (need_owner == s))) for s in range(world)
                   if s != rank and np.any(mine & (need_owner == s))}
        columns = np.concatenate([np.arange(lo, hi)] + [client[mine & (need_owner == s)]
                                                        for s in receive])
    own = (W.rows >= lo) & (W.rows < hi)
    position = np.empty(M, dtype=np.int64)  # where each read client sits in ``columns``
    position[columns] = np.arange(len(columns))
    rows, cols = W.rows[own] - lo, position[W.cols[own]]
    order = np.lexsort((cols, rows))
    # this rank's rows of W over the columns it reads: [block, len(columns)], as CSR
    block = Edges(len(columns), rows[order], cols[order], W.values[own][order])
    return ExchangePlan(send, receive, block.to_torch(mixer.dtype, mixer.device, rows=hi - lo),
                        bool(all(full)), columns,
                        placement(counts, list(np.diff(starts)), rank, send))


class DistributedWire(Wire):
    """The wire of rank ``processes.rank``: its block's rows of W_t's products, the rows its
    clients mix with exchanged point to point (or all-gathered), compressed messages sent as
    their encodings."""

    def __init__(self, processes: Processes, lo: int, hi: int, *args, exchange: str = "auto"):
        super().__init__(*args)
        self.processes = processes
        self.lo, self.hi = lo, hi
        self._plan: tuple[int | None, ExchangePlan] | None = None  # (round or None, plan)
        # engine.exchange: the ranks' held segments in /dev/shm, or None (the process group)
        self.segments = None
        if self.mixer is not None:
            with communicating(processes, "opening the shared-memory segments"):
                self.segments = open_segments(processes, exchange, self.mixer.device)
        self._fell_back = False

    @property
    def block_size(self) -> int:
        return self.hi - self.lo

    def own_clients(self, device=None) -> Tensor:
        return torch.arange(self.lo, self.hi, device=device)

    def mix(self, x: Tensor, t: int, steps: int) -> Tensor:
        plan = self.plan(t)
        flat = x.reshape(self.block_size, -1)
        for _ in range(steps):
            what = f"gossip in round {t + 1}"
            with communicating(self.processes, what):
                held = self._exchange(plan, flat, what)
            # the rows sent and held are freed once the product is made: kept through the
            # local step they would add about three of this rank's stacks to its peak (at
            # 10^5 clients two ranks no longer fit in 24 GiB)
            flat = self._product(plan.weights, held)
        return flat.reshape(x.shape)

    def _product(self, weights: Tensor, held: Tensor) -> Tensor:
        """This rank's rows of W times the rows it holds (a CSR W on the CPU into the
        Mixer's kept buffers, :meth:`gossipfl.topology.Mixer.mix`'s kernel)."""
        if weights.layout == torch.sparse_csr:
            return self.mixer._sparse_product(weights, held)
        return weights @ held

    def out_degree(self, t: int) -> np.ndarray:
        return super().out_degree(t)[self.lo:self.hi]

    def mixes_sparse_messages(self) -> bool:
        return False  # the ranks exchange encodings: the dense path decodes them

    def _mix_compressed(self, q: Tensor, v: Tensor, t: int, compressor, key: tuple,
                        keys: Tensor) -> Tensor:
        """W q from the encoded messages: each rank sends its clients' encodings (uint8 rows,
        ``compressor.width(P)`` bytes each) to the ranks that need them, and decodes what it
        receives with the senders' keys."""
        plan = self.plan(t)
        payload = compressor.encode(v.reshape(self.block_size, -1), keys)
        what = f"compressed gossip in round {t + 1}"
        with communicating(self.processes, what):
            held = self._exchange(plan, payload, what)
        senders = self.compress_keys(v, key, compressor, plan.columns)
        decoded = compressor.decode(held, senders, v.shape[1], dtype=q.dtype)
        return (plan.weights @ decoded).reshape(q.shape)

    def plan(self, t: int) -> ExchangePlan:
        """Round t's exchange plan (rebuilt each round for a time-varying topology)."""
        mixer = self.mixer
        key = t if self.time_varying else None
        if self._plan is None or self._plan[0] != key:
            if self.edges_only:
                plan = exchange_plan_edges(mixer.topology.edges(t), self.processes, mixer)
            else:
                plan = exchange_plan(mixer.topology.matrix(t, "engine.backend: distributed"),
                                     self.processes, mixer)
            self._plan = key, plan
        return self._plan[1]

    def _exchange(self, plan: ExchangePlan, rows: Tensor, what: str) -> Tensor:
        """The rows this rank's product needs: its own, then each peer's (plan order)."""
        if plan.all_gather:
            return self.all_rows(rows)
        if self.segments is not None and rows.shape[1:].numel():  # (the same on every rank)
            return self._exchange_shared(plan, rows, what)
        ops = []
        for peer, positions in plan.send.items():
            message = torch.index_select(rows, 0, positions)
            self.traffic.wire += message.numel() * message.element_size()
            ops.append(dist.P2POp(dist.isend, message, peer))
        # the product's rows: this rank's, then each peer's received in place (torch.cat's
        # order, without its copy)
        held = rows.new_empty((len(rows) + sum(plan.receive.values()), *rows.shape[1:]))
        held[:len(rows)].copy_(rows)
        self._receive_into(held, len(rows), plan, ops)
        self._wait(self._post(ops), what)
        return held

    @staticmethod
    def _receive_into(held: Tensor, start: int, plan: ExchangePlan, ops: list) -> None:
        """Receive each peer's rows into ``held`` from row ``start`` on, in plan order."""
        for peer, count in plan.receive.items():
            ops.append(dist.P2POp(dist.irecv, held[start:start + count], peer))
            start += count

    def _exchange_shared(self, plan: ExchangePlan, rows: Tensor, what: str) -> Tensor:
        """:meth:`_exchange` through the ranks' held segments (:mod:`.shm`; the same rows in
        the same order). Each rank (1) makes its segment large enough and tells the ranks
        that send to it so (its previous product, which read the segment, is done); (2)
        writes the rows each peer needs at the peer's place in the peer's segment once the
        peer said so, and tells it; (3) copies its own rows in and waits for its senders.
        The messages of (1) and (2) are one number each, through the process group; a
        segment without room in ``/dev/shm`` falls back to the process group's messages
        for the rows sent to that rank (``auto``, with a warning) or ends the job (``shm``)."""
        segments = self.segments
        count = len(rows) + sum(plan.receive.values())
        row_bytes = rows.shape[1:].numel() * rows.element_size()
        short = segments.room_for(count * row_bytes) if plan.receive else None
        mine = READY if short is None else self._no_room(*short)
        said = {peer: torch.zeros(1, dtype=torch.int32) for peer in plan.send}
        ops = [dist.P2POp(dist.isend, torch.tensor([mine], dtype=torch.int32), peer)
               for peer in plan.receive]
        ops += [dist.P2POp(dist.irecv, token, peer) for peer, token in said.items()]
        self._wait(self._post(ops), what)
        refused = [peer for peer, token in said.items() if token.item() == REFUSED]
        if mine == REFUSED or refused:
            who = self.processes.rank if mine == REFUSED else refused[0]
            raise GossipflError(
                f"engine.exchange: 'shm', but {SHM_DIR} has no room for rank {who}'s rows"
                + (f" ({short[0] / 1e6:.1f} MB for every rank's growth, {short[1] / 1e6:.1f}"
                   " MB free)" if mine == REFUSED else "")
                + "; enlarge it or use auto or process_group.")
        ops = []
        for peer, positions in plan.send.items():
            self.traffic.wire += len(positions) * row_bytes
            if said[peer].item() == READY:
                at, total = plan.place[peer]
                into = segments.peers[peer].rows(total, rows)[at:at + len(positions)]
                torch.index_select(rows, 0, positions, out=into)
                message = torch.tensor([WRITTEN], dtype=torch.int32)
            else:
                message = torch.index_select(rows, 0, positions)
            ops.append(dist.P2POp(dist.isend, message, peer))
        if mine == READY and plan.receive:
            held = segments.own.rows(count, rows)
            ops += [dist.P2POp(dist.irecv, torch.zeros(1, dtype=torch.int32), peer)
                    for peer in plan.receive]
        else:
            held = rows.new_empty((count, *rows.shape[1:]))
            self._receive_into(held, len(rows), plan, ops)
        posted = self._post(ops)  # the peers may read while this rank copies its own rows
        held[:len(rows)].copy_(rows)
        self._wait(posted, what)
        return held

    def _no_room(self, nbytes: int, free: int) -> int:
        """What a rank whose segment cannot grow (``/dev/shm`` needs ``nbytes`` for every
        rank's growth, has ``free``) tells its senders: its rows come through the process
        group (``auto``: warned once) or the job ends (``shm``)."""
        if self.segments.required:
            return REFUSED
        if not self._fell_back:
            self._fell_back = True
            warnings.warn(f"engine.exchange: rank {self.processes.rank}'s rows need "
                          f"{nbytes / 1e6:.1f} MB in {SHM_DIR} (its growth for every rank, "
                          f"which may grow at once) but {free / 1e6:.1f} MB are free; its "
                          f"rows come through the process group.", stacklevel=3)
        return FALLBACK

    @staticmethod
    def _post(ops: list) -> list:
        """Start the point-to-point ``ops``: (op, request) pairs."""
        return list(zip(ops, dist.batch_isend_irecv(ops), strict=True)) if ops else []

    def _wait(self, posted: list, what: str) -> None:
        """Wait for the ``posted`` point-to-point ops, naming a peer that fails."""
        for op, request in posted:
            try:
                request.wait()
            except RuntimeError:
                raise RankLost(f"rank {self.processes.rank} stopped during {what}: rank "
                               f"{op.peer} stopped or did not answer within "
                               f"engine.timeout = {self.processes.timeout:g} s.") from None

    def all_rows(self, rows: Tensor) -> Tensor:
        """Every rank's block, in client order (all-gather of blocks padded to equal size)."""
        sizes, padded = self.padded_block(rows)
        parts = [torch.empty_like(padded) for _ in sizes]
        self.traffic.wire += (len(sizes) - 1) * padded.numel() * padded.element_size()
        dist.all_gather(parts, padded)
        return _unpadded(parts, sizes)

    def padded_block(self, rows: Tensor) -> tuple[list[int], Tensor]:
        """(every rank's block size, ``rows`` padded with zero rows to the longest): the
        collectives move blocks of one size."""
        world = self.processes.world
        sizes = [b - a for a, b in (self.processes.bounds(self.num_clients, r)
                                    for r in range(world))]
        rows = rows.contiguous()
        if len(rows) == max(sizes):
            return sizes, rows
        return sizes, torch.cat([rows, rows.new_zeros(max(sizes) - len(rows), *rows.shape[1:])])


class DistributedFederation(Federation):
    """The Federation of rank ``processes.rank``: its block of clients, collectives across."""

    def __init__(self, processes: Processes, num_clients: int, *args, exchange: str = "auto",
                 **kwargs):
        if num_clients < processes.world:
            raise GossipflError(f"data.clients: {num_clients} clients cannot be shared by "
                                f"{processes.world} processes (each rank owns at least one); "
                                f"start at most {num_clients} processes.")
        self.processes = processes
        self.lo, self.hi = processes.bounds(num_clients)
        self.exchange = exchange  # engine.exchange
        super().__init__(num_clients, *args, **kwargs)

    def _traffic(self) -> BlockTraffic:
        return BlockTraffic(self.hi - self.lo, self.processes, self.sample_sizes.device)

    def _wire(self, mixer) -> DistributedWire:
        return DistributedWire(self.processes, self.lo, self.hi, self.num_clients, mixer,
                               self.traffic, self.seed, exchange=self.exchange)

    @property
    def block_size(self) -> int:
        return self.hi - self.lo

    # -- centralized -----------------------------------------------------------------------
    def sample(self, t: int, fraction: float, eligible=None) -> Tensor:
        ids = self._draw(t, fraction, eligible)
        return self._drawn(ids[(ids >= self.lo) & (ids < self.hi)])

    def aggregate(self, values: Tensor, clients: Tensor, weighting: str = "samples") -> Tensor:
        self.traffic.clients[self._host(clients) - self.lo] += message_bytes(values.shape[-1])
        if weighting == "samples":
            weights = self.sample_sizes[clients].to(values.dtype)
        else:
            weights = torch.ones(len(clients), dtype=values.dtype, device=values.device)
        packed = torch.cat([weights @ values, weights.sum().reshape(1)])
        packed = self._sum(packed, "aggregation")
        return packed[:-1] if weighting == "sum" else packed[:-1] / packed[-1]

    def rows(self, state: Tensor, clients: Tensor) -> Tensor:
        return state[clients - self.lo]

    def set_rows(self, state: Tensor, clients: Tensor, values: Tensor) -> None:
        state[clients - self.lo] = values

    # -- observers -------------------------------------------------------------------------
    def mean(self, x: Tensor) -> Tensor:
        return self._sum(x.sum(dim=0), "the average") / self.num_clients

    def replicate(self, x: Tensor) -> Tensor:
        return x.expand(self.block_size, -1)

    def own_clients(self, device=None) -> Tensor:
        return torch.arange(self.lo, self.hi, device=device)

    def block(self, rows):
        return rows[self.lo:self.hi]

    def gather(self, x: Tensor) -> Tensor:
        with communicating(self.processes, "gathering every rank's clients"):
            return self.wire.all_rows(x.contiguous())

    def gather_to_writer(self, x: Tensor) -> Tensor:
        """Every rank's block on rank 0 only (``dist.gather`` into one buffer; blocks padded
        to equal size), ``[0, ...]`` elsewhere: a checkpoint of 10⁵ clients holds one copy
        of X in the job, not one per rank."""
        sizes, padded = self.wire.padded_block(x)
        with communicating(self.processes, "gathering every rank's clients"):
            if self.processes.rank != 0:
                self.traffic.wire += padded.numel() * padded.element_size()
                dist.gather(padded, dst=0)
                return x[:0]
            buffer = padded.new_empty(len(sizes) * len(padded), *padded.shape[1:])
            parts = list(buffer.split(len(padded)))
            dist.gather(padded, gather_list=parts, dst=0)
        return buffer if min(sizes) == len(padded) else _unpadded(parts, sizes)

    def total(self, x: Tensor) -> Tensor:
        return self._sum(x, "a sum over ranks")

    def share(self, count: int) -> slice:
        return slice(*self.processes.bounds(count))

    def _sum(self, x: Tensor, what: str) -> Tensor:
        out = x.clone()
        with communicating(self.processes, what):
            dist.all_reduce(out)
        return out


def federation_of(processes: Processes, num_clients: int, *args, exchange: str = "auto",
                  **kwargs) -> Federation:
    """The Federation of this process: every client (one process), or this rank's block of
    them (:class:`DistributedFederation`, its gossip rows moved as ``exchange`` says:
    ``engine.exchange``)."""
    if not processes.distributed:
        return Federation(num_clients, *args, **kwargs)
    return DistributedFederation(processes, num_clients, *args, exchange=exchange, **kwargs)


def _unpadded(parts: list[Tensor], sizes: list[int]) -> Tensor:
    """The blocks of equal-size ``parts`` cut to their ``sizes``, in rank order."""
    return torch.cat([part[:size] for part, size in zip(parts, sizes, strict=True)])
