"""Simulated time: one clock per client, T_i^t = when client i finished round t − 1 (T^0 = 0).

Round t of a decentralized algorithm (the synchronous order: train, then communicate):
client i computes for K_i c_i^t seconds, then sends its round's messages; a round waits
only for the in-neighbours of W'_t (the renormalized matrix, :mod:`gossipfl.systems.failures`),
never for the whole network:

    ready_i   = T_i^t + K_i c_i^t
    arrive_j  = ready_j + ℓ_j^t + b_j^t / β_j^t
    T_i^{t+1} = max(ready_i, max_{j ≠ i, w'_ij ≠ 0} arrive_j)        (i online)
    T_i^{t+1} = T_i^t                                                (i offline: idle)

- K_i: the local steps the round's phases run for client i (:func:`planned_steps`: a phase's
  ``steps``, or its epochs × ⌈n_i / B⌉, one step per epoch with full batches; 0 without data),
  which is what :class:`~gossipfl.schedules.training.LocalTrainer` runs;
- b_j^t: the bytes client j sent in round t (the Federation's count: compression shortens
  them) divided by its out-degree in W'_t: all of a round's messages to one neighbour (every
  gossip step and every gossiped vector) travel as one transfer, and the transfers to
  different neighbours go in parallel; with ``network.uplink: shared`` b_j^t is everything j
  sent (one uplink carries the transfers one after another, the last arriving at the end);
- an offline client does not train or communicate and its clock does not move: it takes up
  the next round it is online from where it stopped, and no neighbour waits for it.

Round t of a centralized algorithm: the server sends its model to each sampled online client
that meets the deadline, each computes and uploads; every transfer is one model
(4P bytes, :func:`~gossipfl.network.federation.message_bytes`) over the client's link:

    τ_i = (ℓ_i + 4P/β_i) + K_i c_i^t + (ℓ_i + 4P/β_i)        (download, compute, upload)

A sampled client with τ_i > ``deadline`` is dropped (it does not report). The round lasts
max τ_i over the reporting clients, or the whole deadline when one was dropped (the server
waits until then), or 0 when no sampled client was online; every clock (all equal: one
server's time) advances by it.

``sim_time`` in the metrics = max_i T_i, ``sim_time_mean`` = (1/M) Σ_i T_i.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gossipfl.algorithms.base import Phase
from gossipfl.common.state import Namespace, systems_namespace
from gossipfl.topology.sparse import Edges


def planned_steps(train, phases: Sequence[Phase], sizes: np.ndarray) -> np.ndarray:
    """``[M]`` K_i: the local steps ``phases`` run for each client in a round (``train``:
    the config's train section; ``sizes``: n_i), as the local trainer runs them."""
    sizes = np.asarray(sizes, dtype=np.float64)
    has_data = sizes > 0
    K = np.zeros(len(sizes))
    for phase in phases:
        if phase.steps is not None:
            kind, count = "steps", phase.steps
        elif phase.epochs is not None:
            kind, count = "epochs", phase.epochs
        elif train.local_steps:
            kind, count = "steps", train.local_steps
        else:
            kind, count = "epochs", train.local_epochs
        per = 1.0 if kind == "steps" or train.full_batch else np.ceil(sizes / train.batch_size)
        K += count * per * has_data
    return K


def message_seconds(sent: np.ndarray, degree: np.ndarray, latency: np.ndarray,
                    bandwidth: np.ndarray) -> np.ndarray:
    """``[M]`` ℓ_j + b_j / β_j with b_j = sent_j / degree_j (0 bytes without neighbours)."""
    per_message = np.divide(sent, degree, out=np.zeros(len(sent)), where=degree > 0)
    return latency + per_message / bandwidth


class Clock:
    """The M clients' clocks T_i (float64 seconds), kept in the run's systems namespace
    ``state`` (``"clocks"``, :func:`gossipfl.common.state.systems_namespace`; a fresh one when none
    is given)."""

    def __init__(self, num_clients: int, state: Namespace | None = None):
        self.state = systems_namespace() if state is None else state
        self.T = np.zeros(num_clients, dtype=np.float64)

    @property
    def T(self) -> np.ndarray:
        """``[M]`` T_i: the namespace's ``"clocks"``."""
        return self.state["clocks"]

    @T.setter
    def T(self, clocks: np.ndarray) -> None:
        self.state["clocks"] = clocks

    def decentralized_round(self, W: Edges, offline: np.ndarray, busy: np.ndarray,
                            message: np.ndarray) -> None:
        """Advance by one decentralized round: ``W`` is W'_t (its non-zero entries, as
        edges: O(M + edges)), ``busy`` K_i c_i^t and ``message`` ℓ_j + b_j / β_j."""
        ready = self.T + busy
        arrive = ready + message
        senders = (W.rows != W.cols) & (W.values != 0)
        incoming = np.full(len(self.T), -np.inf)
        np.maximum.at(incoming, W.rows[senders], arrive[W.cols[senders]])
        self.T = np.where(offline, self.T, np.maximum(ready, incoming))

    def centralized_round(self, seconds: float) -> None:
        """Advance every clock to the server's time plus the round's ``seconds``."""
        self.T = np.full_like(self.T, self.T.max() + seconds)

    def metrics(self) -> dict:
        return {"sim_time": float(self.T.max()), "sim_time_mean": float(self.T.mean())}
