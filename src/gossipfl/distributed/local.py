"""A distributed job on this machine without a launcher: ``world`` forked processes joined
through a TCP store on 127.0.0.1, with the environment torchrun would set (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``). The processes inherit
what this one has imported, so they start in a fraction of a second; tests and benchmarks
use it to compare 1, 2, 4 … ranks with one process."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, out: str, fn: Callable, args: tuple) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "GOSSIPFL_NUM_THREADS": "1"})  # kept when the rank joins the job:
    torch.set_num_threads(1)  # the parent's OpenMP pool does not survive a fork
    result = fn(*args)
    if rank == 0:
        torch.save(result, out)


def run_on_ranks(world: int, fn: Callable, *args: Any, deadline: float = 300.0) -> Any:
    """``fn(*args)`` on ``world`` forked ranks of one gloo job; rank 0's return value. A rank
    that fails fails the call; every rank is killed after ``deadline`` seconds. Each rank
    computes with one thread: OpenMP's threads, once started here, hang in a forked child."""
    with tempfile.TemporaryDirectory() as folder:
        out = str(Path(folder) / "rank0.pt")
        context = mp.start_processes(_rank_main, nprocs=world, join=False,
                                     start_method="fork",
                                     args=(world, free_port(), out, fn, args))
        end = time.monotonic() + deadline
        try:
            while not context.join(timeout=1):
                if time.monotonic() > end:
                    raise TimeoutError(f"{world} ranks of {fn.__name__} did not finish in "
                                       f"{deadline:g} s")
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
        return torch.load(out, weights_only=False)
