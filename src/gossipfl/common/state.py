"""The run's state, in one place: :class:`RunState`, one :class:`Namespace` per owner.

Everything a run changes from round to round and must carry over a checkpoint lives here,
nowhere else: the algorithm's state (the models, trackers, public copies of the algorithms
that compress their own messages, server models and optimizer moments), the public copies of
compressed gossip (``topology.compression``), the clients' clocks (``systems``) and the
private-gradient counts (``privacy``). :func:`~gossipfl.assembly.experiment.build_experiment` makes the
RunState before the components and hands each stateful component its own namespace in its
constructor; the component keeps its mutable state there and has no checkpoint of its own.
The runner holds the RunState, and a checkpoint *is* it: :meth:`RunState.checkpoint` writes
every namespace under its name, :meth:`RunState.load` restores every namespace in place (the
components hold references to them), both generically from each namespace's declarations.

What is not here is derived, and rebuilt the same from the config and the round: the
topology's matrices and their caches, the systems model's draws (and its Markov chain, rerun
from round 0), an attack's cached Fiedler vector, the accountant's ε. The Federation keeps
only the byte count of the round in progress (taken by the runner every round). The gossip
pipeline's stages (:class:`~gossipfl.compression.gossip.Channels`,
:class:`~gossipfl.trust.gossip.RobustGossip`) key their state and streams by the channel the
algorithm names (its position in ``gossip_channels``); which channels a round has gossiped
is scratch, started afresh every round, and a checkpoint falls between rounds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch

from gossipfl.errors import GossipflError

#: a namespace's entries, all of them, whatever their names (:class:`Namespace`)
EVERY = "every entry"


class Namespace(dict):
    """One owner's state: its entries by name (tensors; NumPy arrays for what is computed on
    the host, such as the clocks), read and written by the owner as a dict.

    Declarations, read by :class:`RunState` to checkpoint and restore the namespace:

    - ``owner``: who keeps it, named in messages (``checkpoint: algorithm dsgt state lacks
      ['tracker']``);
    - ``rows``: the entries that are per-client rows held in blocks: this process's rows
      ``[M_block, ...]``, gathered to the process that writes the run in a checkpoint (all M
      rows there, whatever the number of processes) and split again on restoring
      (:meth:`~gossipfl.network.federation.Federation.gather_to_writer`, ``block``); :data:`EVERY`:
      all of them. Per-client entries that every process holds whole are not ``rows``;
    - ``kept``: the entries a checkpoint holds, each one required on restoring (the others
      are rebuilt); :data:`EVERY`: whatever entries there are (created as they are used),
      and restoring replaces them all;
    - ``device``: where an entry restored without a live counterpart goes.
    """

    def __init__(self, owner: str, rows: Iterable[str] | str = (),
                 kept: Iterable[str] | str = EVERY, device: torch.device | str | None = None):
        super().__init__()
        self.declare(owner, rows, kept)
        self.device = torch.device("cpu") if device is None else torch.device(device)

    def declare(self, owner: str, rows: Iterable[str] | str = (),
                kept: Iterable[str] | str = EVERY) -> Namespace:
        """Set the declarations (the algorithm's, once it is built); returns the namespace."""
        self.owner = owner
        self.rows = rows if rows == EVERY else tuple(rows)
        self.kept = kept if kept == EVERY else tuple(kept)
        return self

    def is_rows(self, name: str) -> bool:
        return self.rows == EVERY or name in self.rows

    def kept_names(self) -> list[str]:
        """The names a checkpoint holds now, in order."""
        return list(self) if self.kept == EVERY else list(self.kept)

    def __repr__(self) -> str:
        return f"Namespace({self.owner!r}, {dict.__repr__(self)})"


def gossip_namespace(device: torch.device | str | None = None) -> Namespace:
    """Compressed gossip's public copies (:class:`~gossipfl.compression.gossip.Channels`):
    ``"k.hat"`` x̂ and ``"k.mixed"`` s = W x̂ of the algorithm's k-th gossip channel (its
    ``gossip_channels``; the k-th gossip call of a round before they had names), per-client rows
    ``[M, n]``, made at the channel's first use."""
    return Namespace("gossip", rows=EVERY, kept=EVERY, device=device)


def systems_namespace() -> Namespace:
    """The clients' clocks (:class:`~gossipfl.systems.clock.Clock`): ``"clocks"`` ``[M]``
    float64 NumPy, T_i in seconds, every client's on the one process (``systems`` refuses
    several)."""
    return Namespace("systems", kept=("clocks",))


def privacy_namespace() -> Namespace:
    """DP-SGD's counts (:class:`~gossipfl.trust.dpsgd.PrivateGradient`): ``"steps"`` ``[M]``
    int64, each client's private gradient evaluations (the accountant's state and the noise
    counter), every client's on the one process (``privacy`` refuses several)."""
    return Namespace("privacy", kept=("steps",))


@dataclass
class RunState:
    """A run's whole state, one namespace per owner (None: the run has no such owner); the
    checkpoint's keys are the field names."""

    #: owner: the algorithm (gossipfl.algorithms), as functions of a state it does not hold:
    #: the runner fills it with ``algorithm.init(X⁰)``, the schedule hands it to every hook
    #: of a round. Rows: ``algorithm.client_state``; a checkpoint keeps those and
    #: ``algorithm.global_state`` (declared by ``build_experiment``).
    algorithm: Namespace = field(default_factory=lambda: Namespace("algorithm"))
    #: owner: the schedule (gossipfl.schedules, ``topology.order``) when it keeps rows from
    #: round to round (the asynchronous order's ``finish`` and ``updates``): its
    #: ``client_state``, declared and made by ``Schedule.namespace``
    schedule: Namespace | None = None
    #: owner: CHOCO-Gossip's channels (gossipfl.compression.gossip.Channels, a stage of the
    #: Federation's gossip pipeline) with ``topology.compression``: :func:`gossip_namespace`
    gossip: Namespace | None = None
    #: owner: the systems model's clocks (gossipfl.systems.clock.Clock) with a ``systems``
    #: section: :func:`systems_namespace`
    systems: Namespace | None = None
    #: owner: the DP-SGD mechanism (gossipfl.trust.dpsgd.PrivateGradient) with a ``privacy``
    #: section: :func:`privacy_namespace`
    privacy: Namespace | None = None

    @classmethod
    def for_config(cls, config: Any, device: torch.device | str | None = None) -> RunState:
        """The namespaces ``config``'s run has, empty (their owners fill them)."""
        return cls(algorithm=Namespace("algorithm", device=device),
                   gossip=None if config.topology.compression is None
                   else gossip_namespace(device),
                   systems=None if config.systems is None else systems_namespace(),
                   privacy=None if config.privacy is None
                   else privacy_namespace())

    def namespaces(self) -> dict[str, Namespace]:
        """The run's namespaces by name, in order (what a checkpoint holds)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    # -- checkpoints ---------------------------------------------------------------------------
    def checkpoint(self, fed) -> dict[str, dict]:
        """Every namespace's kept entries by name, on the CPU, copies (never the live
        tensors); rows gathered to the process that writes the run (the others' rows entries
        are empty: a collective that only gives them)."""
        out = {}
        for name, space in self.namespaces().items():
            saved = {}
            for key in space.kept_names():
                value = space[key]
                if isinstance(value, np.ndarray):
                    value = torch.as_tensor(value.copy())
                if isinstance(value, torch.Tensor):
                    held = fed.gather_to_writer(value) if space.is_rows(key) else value
                    saved[key] = _own_copy(held.cpu(), value)
                else:
                    saved[key] = value
            out[name] = saved
        return out

    def load(self, saved: dict, fed) -> None:
        """Restore every namespace from a :meth:`checkpoint` (``saved`` may hold more: the
        runner's own entries), in place: each namespace object stays, its entries are
        replaced by copies of the saved ones (this process's block of the rows), each where
        and as the live entry is (device, dtype; a NumPy array stays one). A namespace
        absent from ``saved`` is restored from nothing: a kept entry it lacks is refused (the
        schedule's rows of a checkpoint written before the schedule had a namespace of its
        own are read from the algorithm's, where they were kept)."""
        for name, space in self.namespaces().items():
            entries = saved.get(name)
            if entries is None and name == "schedule":
                entries = saved.get("algorithm")
            _load(space, entries or {}, fed)


def _own_copy(saved: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
    """``saved``, cloned when it still shares memory with ``live`` (a CPU tensor's ``.cpu()``
    is itself): a checkpoint is a snapshot."""
    if saved.device == live.device and (
            saved.untyped_storage().data_ptr() == live.untyped_storage().data_ptr()):
        return saved.clone()
    return saved


def _load(space: Namespace, saved: dict, fed) -> None:
    if space.kept == EVERY:
        names = list(saved)
    else:
        missing = set(space.kept) - set(saved)
        if missing:
            raise GossipflError(f"checkpoint: {space.owner} state lacks {sorted(missing)}.")
        names = list(space.kept)
    restored = {}
    for key in names:
        value = saved[key]
        if space.is_rows(key):
            value = fed.block(value)
        live = space.get(key)
        if isinstance(live, np.ndarray):
            value = np.asarray(value, dtype=live.dtype).copy()
        elif isinstance(value, torch.Tensor):
            where = space.device if live is None else live.device
            dtype = value.dtype if live is None else live.dtype
            value = value.to(device=where, dtype=dtype, copy=True)
        restored[key] = value
    if space.kept == EVERY:
        space.clear()
    space.update(restored)


__all__ = ["EVERY", "Namespace", "RunState", "gossip_namespace", "privacy_namespace",
           "systems_namespace"]
