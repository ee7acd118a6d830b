"""The processes of a run: one, or the ranks ``torchrun`` started.

``engine.backend`` decides: ``single`` is one process holding every client; ``distributed``
joins the ``torch.distributed`` job whose rank and size the launcher put in the environment
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``: ``torchrun``, or
any launcher that sets them); ``auto`` is ``distributed`` exactly when those are set. The
process group is gloo on CPU and NCCL on CUDA (rank r on ``cuda:LOCAL_RANK``), with
``engine.timeout`` as the longest wait for another rank; on joining, the ranks compare their
configs (a rank started with other values ends the job at once).

Rank r owns the contiguous block of clients :meth:`Processes.bounds` gives it: M // N clients,
one more for the first M mod N ranks.

The ranks on one machine share its cores: on joining, each rank sets torch's threads to the
cores this process may use divided by the ranks on the machine (``LOCAL_WORLD_SIZE``), unless
the user chose (:func:`threads_per_rank`). torchrun's own default, ``OMP_NUM_THREADS=1`` with
several ranks a node, left a machine's cores idle.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from gossipfl.errors import GossipflError

BACKENDS = ("auto", "single", "distributed")
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE")


def launched() -> bool:
    """Whether a launcher (torchrun) started this process as one rank of a job."""
    return all(name in os.environ for name in LAUNCH_VARIABLES)


def launch_number(name: str, least: int = 0, default: int | None = None) -> int:
    """The launcher's environment variable ``name`` (RANK, WORLD_SIZE, LOCAL_RANK) as an
    integer >= ``least``; one sentence naming it else."""
    text = os.environ.get(name)
    if text is None and default is not None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        value = None
    if value is None or value < least:
        raise GossipflError(f"{name}: the launcher's environment variable must be an integer "
                            f">= {least}, got {text!r}.")
    return value


def resolve_backend(name: str) -> str:
    """``single`` or ``distributed`` for ``engine.backend`` in this process's environment."""
    if name == "auto":
        return "distributed" if launched() else "single"
    if name == "distributed" and not launched():
        raise GossipflError("engine.backend: 'distributed' needs a launcher that starts the "
                            "ranks (RANK and WORLD_SIZE are not set); run it as torchrun "
                            "--nproc-per-node N -m gossipfl run CONFIG.yaml.")
    if name == "single" and launched() and launch_number("WORLD_SIZE", 1) > 1:
        raise GossipflError(f"engine.backend: 'single' under a launcher of "
                            f"{os.environ['WORLD_SIZE']} processes would run the whole "
                            f"experiment in every one; use auto or distributed.")
    return name


@dataclass(frozen=True)
class Processes:
    """Rank ``rank`` of ``world`` processes (``world == 1`` and not ``distributed``: one)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    distributed: bool = False
    timeout: float = 300.0

    @property
    def writer(self) -> bool:
        """Whether this process writes the run directory and reports (rank 0)."""
        return self.rank == 0

    def bounds(self, count: int, rank: int | None = None) -> tuple[int, int]:
        """``[lo, hi)``: the contiguous block of ``count`` items that ``rank`` owns."""
        rank = self.rank if rank is None else rank
        base, extra = divmod(count, self.world)
        lo = rank * base + min(rank, extra)
        return lo, lo + base + (rank < extra)

    def place(self, device: torch.device) -> torch.device:
        """The device of this rank: ``cuda:LOCAL_RANK`` when the config asks for CUDA."""
        if self.distributed and device.type == "cuda" and device.index is None:
            return torch.device("cuda", self.local_rank)
        return device

    def agree(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank (e.g. a run directory named by the time)."""
        if not self.distributed or self.world == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]


SINGLE = Processes()
_current = SINGLE


def current() -> Processes:
    """The processes of the run this process is part of (one, unless distributed)."""
    return _current


def start_processes(config) -> Processes:
    """The processes ``config.engine.backend`` asks for; joins the job when distributed."""
    global _current
    engine = config.engine
    if resolve_backend(engine.backend) == "single":
        _current = SINGLE
        return SINGLE
    world, rank = launch_number("WORLD_SIZE", 1), launch_number("RANK")
    if rank >= world:
        raise GossipflError(f"RANK: the launcher's rank must be below WORLD_SIZE {world}, "
                            f"got {rank}.")
    local_rank = launch_number("LOCAL_RANK", default=rank)
    if "MASTER_PORT" in os.environ:
        launch_number("MASTER_PORT", 1)
    if not dist.is_initialized():
        cuda = config.device.startswith("cuda") or (config.device == "auto"
                                                    and torch.cuda.is_available())
        if cuda:
            torch.cuda.set_device(local_rank)
        try:
            dist.init_process_group("nccl" if cuda else "gloo",
                                    timeout=timedelta(seconds=engine.timeout))
        except ValueError as exc:  # the rendezvous's variables: missing or malformed
            reason = str(exc).splitlines()[0].rstrip(".")
            raise GossipflError(f"engine.backend: the ranks cannot meet ({reason}); a "
                                f"launcher such as torchrun sets MASTER_ADDR and "
                                f"MASTER_PORT.") from None
        atexit.register(_leave)
    elif dist.get_world_size() != world:
        raise GossipflError(f"engine.backend: this process already belongs to a job of "
                            f"{dist.get_world_size()} ranks, but WORLD_SIZE is {world}.")
    _current = Processes(rank, world, local_rank, distributed=True, timeout=engine.timeout)
    check_same_config(config, _current)
    threads = threads_per_rank(os.environ, usable_cores())
    if threads is not None:
        torch.set_num_threads(threads)
    return _current


#: The user's number of torch threads for each rank (wins over everything else).
THREADS_ENV = "GOSSIPFL_NUM_THREADS"


def threads_per_rank(environ: Any, cores: int) -> int | None:
    """torch threads for one rank of a job (None: leave torch's as they are).

    ``GOSSIPFL_NUM_THREADS`` when set; else an ``OMP_NUM_THREADS`` the user set (torchrun
    sets it to 1 itself when it starts several ranks a node and it is unset, so a 1 beside
    ``LOCAL_WORLD_SIZE`` > 1 counts as torchrun's, not the user's); else ``cores`` shared by
    the ``LOCAL_WORLD_SIZE`` ranks on this machine, at least 1 each.
    """
    given = environ.get(THREADS_ENV)
    if given:
        try:
            threads = int(given)
        except ValueError:
            threads = 0
        if threads < 1:
            raise GossipflError(f"{THREADS_ENV}: must be an integer >= 1 (torch threads per "
                                f"rank), got {given!r}.")
        return threads
    try:
        local = max(1, int(environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    omp = environ.get("OMP_NUM_THREADS")
    if omp and not (omp.strip() == "1" and local > 1):
        return None  # the user's, which torch has read already
    return max(1, cores // local)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def config_fingerprint(config) -> dict:
    """What every rank must agree on: the config's values, flattened to dotted keys."""
    flat: dict[str, str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        else:
            flat[prefix] = repr(value)

    walk("", config.to_dict())
    return flat


def check_same_config(config, processes: Processes) -> None:
    """Every rank must run the same config: the first key where a rank differs from rank 0
    ends the job on every rank with one sentence."""
    configs: list[Any] = [None] * processes.world
    dist.all_gather_object(configs, config_fingerprint(config))
    reference = configs[0]
    for rank, theirs in enumerate(configs):
        keys = sorted(k for k in set(theirs) | set(reference) if theirs.get(k) != reference.get(k))
        if keys:
            key = keys[0]
            raise GossipflError(f"{key}: {theirs.get(key)} on rank {rank} but "
                                f"{reference.get(key)} on rank 0; start every rank with the "
                                f"same config and --set values.")
