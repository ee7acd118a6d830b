"""The systems model (``systems:`` in a config): simulated time, stragglers, offline clients
and failed links.

- :mod:`gossipfl.systems.model` — the per-client, per-round draws (compute speed, latency,
  bandwidth, who is offline, which links fail);
- :mod:`gossipfl.systems.failures` — the round's renormalized mixing matrix W'_t, as a
  topology the Mixer and the Federation use;
- :mod:`gossipfl.systems.schedule` — offline clients do not train; a server's sample loses
  the offline and too-slow clients;
- :mod:`gossipfl.systems.clock` — the clients' clocks and ``sim_time``.

:class:`Systems` ties them to one run: :func:`build_systems` (from ``build_experiment``)
wraps the mixer's topology and filters the server's sample; the runner wraps its schedule
(:meth:`Systems.wrap`), advances the clocks after each round (:meth:`Systems.advance`) and
checkpoints them. Without a ``systems`` section none of this exists and nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gossipfl.errors import GossipflError
from gossipfl.federation import message_bytes
from gossipfl.schedules import get_schedule
from gossipfl.systems.clock import Clock, message_seconds, planned_steps
from gossipfl.systems.failures import FailingTopology, renormalize
from gossipfl.systems.model import SystemsModel
from gossipfl.systems.schedule import NobodyReports, SystemsSchedule

if TYPE_CHECKING:  # annotations only
    from gossipfl.algorithms.base import Algorithm
    from gossipfl.config import Config
    from gossipfl.federation import Federation
    from gossipfl.schedules import Schedule
    from gossipfl.topology import Topology


class Systems:
    """One run's systems model, clocks and failures."""

    def __init__(self, model: SystemsModel, fed: Federation, algorithm: Algorithm, train,
                 num_params: int):
        self.model = model
        self.fed = fed
        self.algorithm = algorithm
        self.train = train
        self.clock = Clock(model.num_clients)
        self.sizes = fed.sample_sizes.detach().cpu().numpy()
        self.model_bytes = message_bytes(num_params)
        self._round_seconds = 0.0  # centralized: the round's length, set by reporting()
        self._event_times: np.ndarray | None = None  # an asynchronous round's clocks

    # -- what the round's pieces ask ----------------------------------------------------------
    def offline(self, t: int) -> np.ndarray:
        return self.model.offline(t)

    def steps(self) -> np.ndarray:
        """``[M]`` K_i of a round (:func:`~gossipfl.systems.clock.planned_steps`)."""
        return planned_steps(self.train, self.algorithm.phases(), self.sizes)

    def server_seconds(self, t: int) -> np.ndarray:
        """``[M]`` τ_i: download, compute and upload of one model each way."""
        link = self.model.latency(t) + self.model_bytes / self.model.bandwidth(t)
        return 2 * link + self.steps() * self.model.compute(t)

    def reporting(self, t: int, sampled):
        """The sampled clients that are online and meet the deadline (the Federation's
        sample filter); raises :class:`NobodyReports` when none is left."""
        ids = sampled.cpu().numpy()
        online = ids[~self.model.offline(t)[ids]]
        seconds = self.server_seconds(t)[online]
        deadline = self.model.deadline
        if deadline is not None and (seconds > deadline).any():
            online, seconds = online[seconds <= deadline], seconds[seconds <= deadline]
            self._round_seconds = deadline
        else:
            self._round_seconds = float(seconds.max()) if len(seconds) else 0.0
        if len(online) == 0:
            raise NobodyReports
        return sampled[np.isin(ids, online)]

    # -- the runner's hooks -------------------------------------------------------------------
    def wrap(self, schedule: Schedule) -> Schedule:
        schedule.systems = self  # a schedule that keeps event time reads the draws
        return SystemsSchedule(schedule, self)

    def events_done(self, clocks: np.ndarray) -> None:
        """An event-driven schedule's clocks after its round (``[M]``: when each client's
        last event happened), taken by the next :meth:`advance` instead of the synchronous
        clock."""
        self._event_times = np.asarray(clocks, dtype=np.float64).copy()

    def advance(self, t: int, sent: np.ndarray) -> dict:
        """Advance the clocks by round t (``sent``: the bytes each client sent in it);
        returns the metrics columns."""
        model = self.model
        if self._event_times is not None:
            self.clock.T, self._event_times = self._event_times, None
        elif self.algorithm.centralized:
            self.clock.centralized_round(self._round_seconds)
            self._round_seconds = 0.0
        else:
            W = self.fed.matrix(t, "the systems section")
            degree = (W != 0).sum(axis=0) - (np.diagonal(W) != 0)
            if model.uplink == "shared":  # one transfer of everything j sent
                degree = np.minimum(degree, 1)
            message = message_seconds(np.asarray(sent, dtype=np.float64), degree,
                                      model.latency(t), model.bandwidth(t))
            busy = self.steps() * model.compute(t)
            self.clock.decentralized_round(W, model.offline(t), busy, message)
        return self.clock.metrics()

    def state_dict(self) -> dict:
        return self.clock.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.clock.load_state_dict(state)


def systems_model(config: Config, num_clients: int, distributed: bool) -> SystemsModel | None:
    """The run's draws (None without a ``systems`` section)."""
    if config.systems is None:
        return None
    if distributed:
        raise GossipflError("systems: not implemented under several processes yet (the clocks "
                            "and failures are not split over the ranks); remove systems or "
                            "run on one process.")
    return SystemsModel(config.systems, num_clients, config.seed)


def mixing_topology(topology: Topology, model: SystemsModel | None) -> Topology:
    """The topology the Mixer uses: ``topology``, or W'_t when clients or links can fail.
    The systems model's clocks and failures read the dense W: refused for a topology built
    as edges (more than DENSE_MAX_CLIENTS clients)."""
    if model is not None and getattr(topology, "sparse", False):
        from gossipfl.topology.sparse import refuse_dense

        raise refuse_dense(topology.num_clients, "the systems section")
    if model is None or not model.has_failures:
        return topology
    return FailingTopology(topology, model)


def build_systems(config: Config, model: SystemsModel | None, fed: Federation,
                  algorithm: Algorithm, num_params: int) -> Systems | None:
    """The run's :class:`Systems` (None without a ``systems`` section); a centralized
    algorithm's server samples only reporting clients."""
    if model is None:
        return None
    if not algorithm.centralized and model.has_failures and (
            config.topology.compression is not None or algorithm.own_compression):
        raise GossipflError(
            "systems.availability: not implemented with compressed gossip yet (its public "
            "copies s = W x̂ are updated incrementally and assume the same W every round); "
            "remove systems.availability or the compression.")
    refusal = get_schedule(config.topology.order).systems_refusal(model)
    if refusal:
        raise GossipflError(refusal)
    systems = Systems(model, fed, algorithm, config.train, num_params)
    if algorithm.centralized:
        fed.participation_filter = systems.reporting
    return systems


__all__ = ["Clock", "FailingTopology", "NobodyReports", "Systems", "SystemsModel",
           "SystemsSchedule", "build_systems", "mixing_topology", "planned_steps", "renormalize",
           "systems_model"]
