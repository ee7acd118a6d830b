"""Robust gossip under Byzantine attack as one operation every decentralized algorithm uses.

With ``topology.robust`` or a ``byzantine`` section, the gossip pipeline holds the stage
:class:`RobustGossip` (:mod:`gossipfl.topology.stages`, built by the composition root) and
every :meth:`~gossipfl.network.federation.Federation.gossip` of a decentralized algorithm becomes, per gossip step on the gossiped columns z:

    m_{j→i} = attack's message   (j ∈ B, i honest)      m_{j→i} = z_j   (otherwise)
    x_i     = rule(z_i, {m_{j→i} : j ∈ N_i}, w_i·)

batched over each degree's receivers (:mod:`gossipfl.trust.neighbourhoods`). The honest
clients run their algorithm unchanged; Byzantine receivers aggregate the true messages. With
the ``mean`` rule and no attack that sends messages this object is not built: the Federation
keeps its plain W z (the same bits as without either setting). Bytes are charged as for plain
gossip: every client, Byzantine or not, sends one dense message per out-neighbour and step.

**Where it applies**: the gossip of every decentralized algorithm whose gossip is W z on the
synchronous order; refused (one sentence, before training) for centralized algorithms,
push-sum (``sgp``), masked gossip (``dispfl``), pairwise averaging (``adpsgd``), compressed
gossip (``topology.compression``, ``choco``, ``deepsqueeze``, ``beer``), the sequential
order and several processes (:mod:`gossipfl.assembly.compat`, from the stage's ``needs``), and where
the rule's b is too large for a receiver's degree.
A topology built as edges (above ``DENSE_MAX_CLIENTS`` clients) gossips robustly as any
other: the neighbourhoods are read from its edges; only an attack that reads the whole W
(``spectral``: its Fiedler vector) is refused there.

The randomness of an attack (``gaussian``) is hashed from (seed, round, channel, step), the
channel the position of the gossiped variable in the algorithm's ``gossip_channels``, so a
resumed run draws what the uninterrupted one drew; nothing else is kept between rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gossipfl.errors import GossipflError
from gossipfl.topology.sparse import refuse_dense
from gossipfl.topology.stages import Channel, Needs, Stage
from gossipfl.trust.attacks import Attack, Scene, Step, build_attack
from gossipfl.trust.byzantine import (
    byzantine_ids,
    check_honest_connected,
)
from gossipfl.trust.neighbourhoods import Bucket, buckets, degrees
from gossipfl.trust.rules import Mean, RobustRule, build_rule

ROUNDS_CHECKED = 10  # of a time-varying topology, for the degree check


class RobustGossip(Stage):
    """The robust stage of the gossip pipeline: ``steps`` robust gossip steps of round t (see
    the module docstring); ``byzantine`` the ids (sorted), ``attack`` None without attackers;
    ``key`` the config key that asked for it (``topology.robust`` or ``byzantine``)."""

    kind = "robust"
    form = "robust"
    #: a rule reads every neighbour's whole message; the neighbourhoods are gathered in one
    #: process; a step is x ← W x of every row at once (synchronous)
    needs = Needs(whole_messages=True, one_process=True)

    def __init__(self, rule: RobustRule, attack: Attack | None, byzantine: np.ndarray,
                 num_clients: int, seed: int, key: str = "topology.robust"):
        self.rule, self.attack, self.seed, self.key = rule, attack, seed, key
        self.byzantine_ids = byzantine
        self._mask = np.zeros(num_clients, dtype=bool)
        self._mask[byzantine] = True
        self._cache: dict = {}  # (round or None, device, dtype) -> buckets
        self._tensors: dict = {}  # device -> (byzantine ids, mask)

    def mix(self, z: Tensor, t: int, steps: int, channel: Channel, link) -> Tensor:
        """Bytes as for plain gossip (every client sends its whole row to each out-neighbour,
        every step); the attack's streams keyed by (round, channel, step)."""
        self.claim(channel, t)
        wire = link.wire
        wire.charge_rows(t, z.shape[1], steps)
        x = z
        for step in range(steps):
            x = self.step(wire.topology, x, t, (t, channel.index, step))
        return x

    def step(self, topology, z: Tensor, t: int, key: tuple) -> Tensor:
        """One robust gossip step of ``z [M, n]`` with round t's W of ``topology``."""
        ids, mask = self._byzantine(z.device)
        matrix = None if topology.sparse else topology.matrix(t)  # an attack that reads W
        hoods = self._buckets(topology, t, z)  # also what a view: own attacker holds
        state = Step(z, ids, ~mask, self.seed, key, matrix, self.rule, hoods)
        out = torch.empty_like(z)
        for bucket in hoods:
            check_degree(self.rule, bucket, t if topology.time_varying else None)
            for part in bucket.chunks(z.shape[1]):
                out[part.receivers] = self._receive(state, part, mask)
        return out

    def _receive(self, state: Step, part: Bucket, mask: Tensor) -> Tensor:
        messages = state.z[part.senders]
        byzantine = mask[part.senders]
        if self.attack is not None and self.attack.sends:
            attacked = byzantine & ~mask[part.receivers].unsqueeze(1)
            if bool(attacked.any()):
                scene = Scene(state, messages, part.weights, ~byzantine, part.senders)
                crafted = self.attack.craft(scene).expand_as(messages)
                messages = torch.where(attacked.unsqueeze(2), crafted, messages)
        return self.rule.aggregate(messages, part.weights, byzantine)

    def _byzantine(self, device) -> tuple[Tensor, Tensor]:
        if device not in self._tensors:
            self._tensors[device] = (torch.as_tensor(self.byzantine_ids, device=device),
                                     torch.as_tensor(self._mask, device=device))
        return self._tensors[device]

    def _buckets(self, topology, t: int, z: Tensor) -> list[Bucket]:
        key = (t if topology.time_varying else None, z.device, z.dtype)
        if key not in self._cache:
            if topology.time_varying:
                self._cache.clear()
            self._cache[key] = buckets(topology.edges(t), z.device, z.dtype)
        return self._cache[key]


def check_degree(rule: RobustRule, bucket_or_degrees: Any, round: int | None = None) -> None:
    """One sentence when a receiver's in-degree is below what ``rule`` needs."""
    need = rule.min_degree()
    if isinstance(bucket_or_degrees, Bucket):
        if bucket_or_degrees.degree >= need:
            return
        client, degree = int(bucket_or_degrees.receivers[0]), bucket_or_degrees.degree
    else:
        low = np.flatnonzero(bucket_or_degrees < need)
        if not len(low):
            return
        client, degree = int(low[0]), int(bucket_or_degrees[low[0]])
    at = "" if round is None else f" in round {round}"
    b = getattr(rule, "b", None)
    key, given, fix = ("topology.robust", "", "use") if b is None else \
        ("topology.robust.b", f" with b = {b}", "lower b or use")
    raise GossipflError(f"{key}: rule {rule.name}{given} needs {rule.requirement()} per "
                        f"client, but client {client} has {degree}{at}; {fix} a denser "
                        f"topology.")


@dataclass
class Trust:
    """What a run's ``byzantine`` and ``topology.robust`` settings build: the Federation's
    :class:`RobustGossip` (None: plain gossip), the honest mask ``[M]`` (None: no
    ``byzantine`` section) and the Byzantine ids."""

    gossip: RobustGossip | None
    honest: np.ndarray | None
    byzantine: np.ndarray


def byzantine_of(config) -> np.ndarray:
    """The config's Byzantine ids (empty without a ``byzantine`` section)."""
    spec = config.byzantine
    if spec is None:
        return np.zeros(0, dtype=np.int64)
    seed = config.seed if spec.seed is None else spec.seed
    return byzantine_ids(spec.clients, config.data.clients, seed)


def build_trust(config, topology) -> Trust | None:
    """The run's :class:`Trust` (None when neither setting is given), once
    :mod:`gossipfl.assembly.compat` has let the combination of features through; refuses in one
    sentence a graph it cannot run on (the honest clients disconnected, a receiver's degree
    too low for the rule, an attack that reads the dense W of a topology built as edges)."""
    spec = config.byzantine
    rule = build_rule(config.topology.robust)
    if spec is None and rule is None:
        return None
    ids = byzantine_of(config)
    m = config.data.clients
    attack = None
    if spec is not None:
        attack = build_attack(spec.attack, spec.options, m, len(ids))
        if len(ids):
            check_honest_connected(topology, ids)
    if attack is not None and attack.reads_matrix and topology.sparse:
        raise refuse_dense(m, f"byzantine.attack: {attack.name} (it reads the round's W)")
    rule = rule or Mean()
    rounds = ROUNDS_CHECKED if topology.time_varying else 1
    for t in range(rounds):
        check_degree(rule, degrees(topology.edges(t)), t if topology.time_varying else None)
    honest = None if spec is None else ~np.isin(np.arange(m), ids)
    sends = attack is not None and attack.sends and len(ids) > 0
    plain = isinstance(rule, Mean) and not sends
    seed = config.seed if spec is None or spec.seed is None else spec.seed
    key = "topology.robust" if config.topology.robust is not None else "byzantine"
    gossip = None if plain else RobustGossip(rule, attack if sends else None, ids, m, seed, key)
    return Trust(gossip, honest, ids)


__all__ = ["RobustGossip", "Trust", "build_trust", "byzantine_of", "check_degree"]
