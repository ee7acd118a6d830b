"""Shared-memory segments for the gossip exchange of ranks on one machine (``engine.exchange``).

Each rank r keeps one file in ``/dev/shm``, its *held* segment: the rows its product
``W[lo:hi, columns] @ held`` reads, its own block first, then each peer's rows in ascending
peer order (the layout of the process-group path's ``held`` buffer,
:meth:`gossipfl.distributed.federation.DistributedWire._exchange`). A rank sending to r writes
the rows r needs straight into r's segment (``index_select`` into it, at the row offset the
plan gives it): a row crosses memory once, without loopback TCP or a send buffer. The
protocol (who may write when) is the wire's; this module holds the files and their mappings.

Start-up (:func:`open_segments`, every rank at once): each rank creates its file under a name
rank 0 draws, every rank opens every other rank's file, and each removes its own name once
every rank holds the others' open: from then on nothing is left in ``/dev/shm`` whatever
happens to the job (a killed rank's pages go with its last open descriptor). A rank that
cannot open a peer's file (ranks on several machines, or without a shared ``/dev/shm``)
makes the whole job fall back to the process group (``auto``) or refuse (``shm``).

A segment grows (``ftruncate``) to the bytes an exchange needs, after a check that
``/dev/shm`` has the room, and keeps its pages from round to round, as the Mixer keeps its
product's output: written again each round, they are not faulted in again (giving them back
after each product, ``MADV_REMOVE``, made the 2-rank round at 5·10^4 clients 1.7-1.8x
slower, its exchange mostly page faults, for 0.4 GB less at a rank's peak;
benchmarks/results/scale_ranks_shm_cpu.txt).
"""

from __future__ import annotations

import atexit
import mmap
import os
import shutil
import uuid
from contextlib import suppress

import torch
import torch.distributed as dist
from torch import Tensor

from gossipfl.distributed.launch import Processes
from gossipfl.errors import GossipflError

SHM_DIR = "/dev/shm"
PREFIX = "gossipfl-"
EXCHANGES = ("auto", "shm", "process_group")


def segment_path(job: str, rank: int) -> str:
    """The file of ``rank``'s held segment in the job named ``job``."""
    return os.path.join(SHM_DIR, f"{PREFIX}{job}-{rank}")


class Segment:
    """One rank's held segment: an open file in ``/dev/shm`` and its shared mapping, remapped
    when the file has grown (by its owner) past the mapping."""

    def __init__(self, fd: int):
        self.fd = fd
        self._map: mmap.mmap | None = None
        self._bytes: Tensor | None = None  # the mapping as uint8

    @property
    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def grow(self, nbytes: int) -> None:
        """Make the file at least ``nbytes`` long (its owner only; new pages take no room
        until written)."""
        if self.size < nbytes:
            os.ftruncate(self.fd, nbytes)

    def rows(self, count: int, like: Tensor) -> Tensor:
        """The first ``count`` rows shaped like ``like``'s (its dtype and row shape)."""
        row = like.shape[1:]
        nbytes = count * row.numel() * like.element_size()
        if self._bytes is None or len(self._bytes) < nbytes:
            size = self.size
            if size < nbytes:
                raise RuntimeError(f"the shared segment has {size} bytes, {nbytes} needed")
            self._map = mmap.mmap(self.fd, size)  # the old mapping goes with its last view
            self._bytes = torch.frombuffer(self._map, dtype=torch.uint8)
        return self._bytes[:nbytes].view(like.dtype).view(count, *row)

    def resident(self) -> int:
        """Bytes of the file that hold pages now."""
        return os.fstat(self.fd).st_blocks * 512

    def close(self) -> None:
        """Let go of the file (its pages go with the last descriptor and mapping in the job)."""
        self._bytes = self._map = None
        if self.fd >= 0:
            with suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    __del__ = close  # a run built again in this process does not keep the old one's pages


class SharedSegments:
    """This rank's held segment (``own``) and its peers' (``peers[rank]``), opened by
    :func:`open_segments`."""

    def __init__(self, processes: Processes, own: Segment, peers: dict[int, Segment],
                 required: bool):
        self.processes = processes
        self.own = own
        self.peers = peers
        self.required = required  # engine.exchange: shm (no room is refused, not fallen back)

    def room_for(self, nbytes: int) -> tuple[int, int] | None:
        """None when this rank's segment can hold ``nbytes`` (grown if needed); else the bytes
        ``/dev/shm`` would need and those it has free. The check is made by each rank alone, and every rank
        may grow at the same moment (their blocks are alike), so a rank grows only when
        ``/dev/shm`` has room for its growth once per rank: two ranks that each saw room for
        themselves alone could together fill it, and a write past a full tmpfs is a SIGBUS,
        not an error."""
        if self.own.size >= nbytes:
            return None
        growth = (nbytes - self.own.resident()) * max(self.processes.world, 1)
        free = shutil.disk_usage(SHM_DIR).free
        if free < growth:
            return growth, free
        self.own.grow(max(nbytes, self.own.size + self.own.size // 2))
        return None

    def close(self) -> None:
        for segment in (self.own, *self.peers.values()):
            segment.close()


def open_segments(processes: Processes, name: str, device: torch.device
                  ) -> SharedSegments | None:
    """The job's held segments when ``engine.exchange`` (``name``) takes the shared-memory
    path on ``device``, else None (the process group's point-to-point messages). A
    collective: every rank calls it at once (when the run gossips)."""
    if name == "process_group":
        return None
    if device.type != "cpu":
        if name == "shm":
            raise GossipflError(f"engine.exchange: 'shm' moves rows between ranks on the CPU, "
                                f"but this run computes on {device}; use auto or "
                                f"process_group.")
        return None
    job = processes.agree(uuid.uuid4().hex[:12])
    rank, world = processes.rank, processes.world
    own = path = None
    with suppress(OSError):
        path = segment_path(job, rank)
        own = Segment(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        atexit.register(_remove, path)
    dist.barrier()
    peers, missing = {}, None
    for peer in range(world):
        if peer == rank:
            continue
        try:
            peers[peer] = Segment(os.open(segment_path(job, peer), os.O_RDWR))
        except OSError:
            missing = peer if missing is None else missing
    opened = torch.tensor([int(own is not None and missing is None)])
    dist.all_reduce(opened, op=dist.ReduceOp.MIN)  # every rank holds every file open
    if path is not None:
        _remove(path)
    if opened.item():
        return SharedSegments(processes, own, peers, required=name == "shm")
    for segment in (own, *peers.values()):
        if segment is not None:
            segment.close()
    if name == "shm":
        what = (f"rank {rank} cannot open rank {missing}'s segment in {SHM_DIR}"
                if missing is not None else f"a rank cannot open the segments in {SHM_DIR}")
        raise GossipflError(f"engine.exchange: 'shm' needs every rank on one machine sharing "
                            f"{SHM_DIR}, but {what}; use auto or process_group.")
    return None


def _remove(path: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(path)
