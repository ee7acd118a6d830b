"""The same runs on ``torch.distributed``: each rank of a ``torchrun`` job owns a contiguous
block of clients (their rows, data, algorithm state and minibatch streams); the Federation
turns the operations between clients into collectives (see :mod:`.federation`).

    torchrun --nproc-per-node N -m gossipfl run CONFIG.yaml

Rank 0 writes the run directory; checkpoints hold every client's rows (gathered), so a run
resumes with any number of processes.
"""

from gossipfl.distributed.launch import (
    BACKENDS,
    SINGLE,
    Processes,
    current,
    launched,
    resolve_backend,
    start_processes,
)

__all__ = ["BACKENDS", "SINGLE", "Processes", "current", "launched", "resolve_backend",
           "start_processes"]
