"""The systems model (``systems:`` in a config): simulated time, stragglers, offline clients
and failed links.

- :mod:`gossipfl.systems.model` — the per-client, per-round draws (compute speed, latency,
  bandwidth, who is offline, which links fail);
- :mod:`gossipfl.systems.failures` — the round's renormalized mixing matrix W'_t, as a
  topology the Mixer and the Federation use;
- :mod:`gossipfl.systems.rounds` — offline clients do not train and keep their rows; a
  server's sample loses the offline and too-slow clients;
- :mod:`gossipfl.systems.clock` — the clients' clocks and ``sim_time``.

:class:`Systems` ties them to one run (:func:`build_systems`, from ``build_experiment``;
:func:`mixing_topology` is the mixer's topology under failures); before each round the runner asks
for the round's plan (:meth:`Systems.plan`: who is offline, who may report, the speeds and
clocks) and passes it to the schedule in ``ctx.plan``; after it, it advances the clocks
(:meth:`Systems.advance`, with the plan and the schedule's own clocks if it kept event time).
The clocks live in the run's systems namespace (:mod:`gossipfl.common.state`), which the runner
checkpoints. Without a ``systems`` section none of this exists and nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gossipfl.algorithms.base import RoundPlan
from gossipfl.network.federation import message_bytes
from gossipfl.systems.clock import Clock, message_seconds, planned_steps
from gossipfl.systems.failures import FailingTopology, renormalize, renormalize_edges
from gossipfl.systems.model import SystemsModel
from gossipfl.systems.rounds import idle_outcome, offline_rows_kept

if TYPE_CHECKING:  # annotations only
    from gossipfl.algorithms.base import Algorithm
    from gossipfl.common.state import Namespace
    from gossipfl.config import Config
    from gossipfl.network.federation import Federation
    from gossipfl.topology import Topology


class Systems:
    """One run's systems model, clocks and failures."""

    def __init__(self, model: SystemsModel, fed: Federation, algorithm: Algorithm, train,
                 num_params: int, state: Namespace | None = None):
        self.model = model
        self.fed = fed
        self.algorithm = algorithm
        self.train = train
        self.clock = Clock(model.num_clients, state)  # its clocks: the systems namespace
        self.sizes = fed.sample_sizes.detach().cpu().numpy()
        self.model_bytes = message_bytes(num_params)

    # -- what a round's pieces need -----------------------------------------------------------
    def steps(self) -> np.ndarray:
        """``[M]`` K_i of a round (:func:`~gossipfl.systems.clock.planned_steps`)."""
        return planned_steps(self.train, self.algorithm.phases(), self.sizes)

    def exchange(self, t: int) -> np.ndarray:
        """``[M]`` ℓ_i + 4P/β_i: one model over each client's uplink."""
        return self.model.latency(t) + self.model_bytes / self.model.bandwidth(t)

    def server_seconds(self, t: int) -> np.ndarray:
        """``[M]`` τ_i: download, compute and upload of one model each way."""
        return 2 * self.exchange(t) + self.steps() * self.model.compute(t)

    def plan(self, t: int) -> RoundPlan:
        """Round t's conditions (:class:`~gossipfl.algorithms.base.RoundPlan`): decentralized,
        who is offline, the speeds and the clocks at the round's start; centralized, who is
        eligible to report (online, within the deadline), the round's length, and whether
        anybody of the server's sample reports at all."""
        model = self.model
        offline = model.offline(t)
        if not self.algorithm.centralized:
            return RoundPlan(offline=offline if offline.any() else None,
                             compute=model.compute(t), exchange=self.exchange(t),
                             clocks=self.clock.T.copy())
        seconds = self.server_seconds(t)
        online = ~offline
        sampled = self.fed.sample(t, self.algorithm.params.participation).cpu().numpy()
        late = online & (seconds > model.deadline) if model.deadline is not None \
            else np.zeros_like(online)
        eligible = online & ~late
        reporting = sampled[eligible[sampled]]
        if late[sampled].any():
            round_seconds = float(model.deadline)
        else:
            round_seconds = float(seconds[reporting].max()) if len(reporting) else 0.0
        return RoundPlan(eligible=eligible, round_seconds=round_seconds,
                         idle=len(reporting) == 0)

    def advance(self, t: int, sent: np.ndarray, plan: RoundPlan,
                clocks: np.ndarray | None = None) -> dict:
        """Advance the clocks by round t, run under ``plan`` (``sent``: the bytes each client
        sent in it; ``clocks``: an event-driven schedule's clocks after its round, taken as
        they are); returns the metrics columns."""
        model = self.model
        if clocks is not None:
            self.clock.T = np.asarray(clocks, dtype=np.float64).copy()
        elif self.algorithm.centralized:
            self.clock.centralized_round(plan.round_seconds)
        else:
            W = self.fed.edges(t)
            degree = W.out_degree()
            if model.uplink == "shared":  # one transfer of everything j sent
                degree = np.minimum(degree, 1)
            message = message_seconds(np.asarray(sent, dtype=np.float64), degree,
                                      model.latency(t), model.bandwidth(t))
            busy = self.steps() * model.compute(t)
            self.clock.decentralized_round(W, model.offline(t), busy, message)
        return self.clock.metrics()


def systems_model(config: Config, num_clients: int) -> SystemsModel | None:
    """The run's draws (None without a ``systems`` section; one process:
    :mod:`gossipfl.assembly.compat` refuses several)."""
    if config.systems is None:
        return None
    return SystemsModel(config.systems, num_clients, config.seed)


def mixing_topology(topology: Topology, model: SystemsModel | None) -> Topology:
    """The topology the Mixer uses: ``topology``, or W'_t when clients or links can fail
    (dense, or as edges for a topology built as edges)."""
    if model is None or not model.has_failures:
        return topology
    return FailingTopology(topology, model)


def build_systems(config: Config, model: SystemsModel | None, fed: Federation,
                  algorithm: Algorithm, num_params: int,
                  state: Namespace | None = None) -> Systems | None:
    """The run's :class:`Systems` (None without a ``systems`` section), once
    :mod:`gossipfl.assembly.compat` has let its combination with the rest through; ``state``: the
    run's systems namespace, where its clocks live."""
    if model is None:
        return None
    return Systems(model, fed, algorithm, config.train, num_params, state)


__all__ = ["Clock", "FailingTopology", "Systems", "SystemsModel", "build_systems",
           "idle_outcome", "mixing_topology", "offline_rows_kept", "planned_steps",
           "renormalize", "renormalize_edges", "systems_model"]
