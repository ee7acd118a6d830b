"""Schedules: the one place that decides which rows train, with which minibatches, and when
they mix (``topology.order`` names one).

A :class:`Schedule` owns nothing but the order of events: each round it asks the algorithm
for the working rows of the clients it picks (``begin_round(ctx, state)``), has the
:class:`~gossipfl.schedules.training.LocalTrainer` run the algorithm's phases on them, and lets the
algorithm communicate (``keep`` / ``end_round``). It hands the algorithm the state rows it
works on and never swaps the algorithm's state (the algorithm holds none).

- :class:`~gossipfl.schedules.synchronous.Synchronous` — the papers' algorithm boxes: every
  client trains from the same snapshot, then all communicate;
- :class:`~gossipfl.schedules.sequential.Sequential` — the authors' in-place client loop,
  computed exactly in waves of clients that share no edge;
- :class:`~gossipfl.schedules.asynchronous.Asynchronous` — AD-PSGD's asynchronous pairwise
  events in order of completion time, computed exactly in waves of disjoint pairs.

Each round's conditions come as an argument: ``ctx.plan`` (:class:`~gossipfl.algorithms.base.
RoundPlan`: who is offline, who may report to a server, the clients' speeds and clocks), made
by the systems model before the round; a schedule passes ``ctx.plan.offline`` to the trainer
and, if it keeps its own event time, returns the clients' clocks in its outcome. A new
schedule is one module with a :func:`register_schedule` class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from gossipfl.algorithms.base import Algorithm, Context, State, Work
from gossipfl.common.state import Namespace
from gossipfl.errors import GossipflError
from gossipfl.plugins import Registry, origin

if TYPE_CHECKING:  # annotations only: naming the schedules needs neither
    from gossipfl.network.federation import Federation
    from gossipfl.schedules.training import LocalTrainer


@dataclass
class RoundOutcome:
    """What a round of a schedule measured: the summed per-row training loss, the
    client-steps computed, extra metrics columns (e.g. ``waves``), and, when asked, each
    client's personalized model as it left local training (before communication)."""

    loss_sum: torch.Tensor
    loss_count: int
    extra: dict = field(default_factory=dict)
    trained: torch.Tensor | None = None
    #: ``[M]`` the clients' clocks after the round, where the schedule keeps its own event
    #: time (asynchronous); None: the systems model advances them
    clocks: Any = None


class Schedule:
    """Base: ``run_round(ctx, state, keep_trained)`` trains and communicates round
    ``ctx.round`` of ``algorithm``, updating ``state``."""

    name: str = ""
    #: why it cannot split the ``[M, P]`` stack over processes (None: it can); the words
    #: after "topology.order: <name>" in the refusal (gossipfl.assembly.compat)
    one_process: ClassVar[str | None] = None
    #: why it cannot run with offline clients or failed links (None: it can)
    no_failures: ClassVar[str | None] = None
    #: whether the algorithm's round must be defined for this order (its ``orders`` and
    #: ``order_conflict``; gossipfl.assembly.compat words the refusal): the built-in orders do
    asks_algorithm: ClassVar[bool] = False
    #: whether it orders its events by completion time (every speed must be > 0)
    by_completion_time: ClassVar[bool] = False
    #: the per-client rows it keeps from round to round (its namespace of the run's state,
    #: gossipfl.common.state.RunState.schedule, checkpointed; made by :meth:`initial_state`)
    client_state: ClassVar[tuple[str, ...]] = ()

    def __init__(self, algorithm: Algorithm, trainer: LocalTrainer, fed: Federation,
                 state: Namespace | None = None):
        self.algorithm = algorithm
        self.trainer = trainer
        self.fed = fed
        #: its own state (the run's schedule namespace; a fresh one when none is given)
        self.state = self.namespace(len(fed.own_clients()), None) if state is None else state

    @classmethod
    def namespace(cls, num_clients: int, device) -> Namespace | None:
        """Its namespace of the run's state, filled with :meth:`initial_state` of this
        process's ``num_clients`` rows (None: it keeps nothing between rounds)."""
        if not cls.client_state:
            return None
        space = Namespace(f"schedule {cls.name}", rows=cls.client_state,
                          kept=cls.client_state, device=device)
        space.update(cls.initial_state(num_clients, device))
        return space

    @classmethod
    def initial_state(cls, num_clients: int, device) -> dict:
        """Its ``client_state`` rows before the first round."""
        return {}

    @classmethod
    def refusal(cls, algorithm: Algorithm, distributed_world: int | None) -> str | None:
        """Why this schedule cannot run ``algorithm`` (None: it can); ``distributed_world``:
        the number of processes when the rows are split over several (``one_process`` is
        checked before, by :mod:`gossipfl.assembly.compat`, and so is the algorithm's own declaration
        of the orders its round is defined for, where ``asks_algorithm``); by default every
        algorithm runs."""
        return None

    @classmethod
    def systems_refusal(cls, model) -> str | None:
        """Why this schedule cannot run with the values of the ``systems`` draws ``model``
        (a :class:`gossipfl.systems.SystemsModel`; None: it can; ``no_failures`` is checked
        by :mod:`gossipfl.assembly.compat`)."""
        return None

    def run_round(self, ctx: Context, state: State, keep_trained: bool = False) -> RoundOutcome:
        raise NotImplementedError

    def begin(self, ctx: Context, state: State) -> Work:
        """The algorithm's ``begin_round(ctx, state)``: the round's :class:`Work`, or one
        sentence naming the algorithm's class when it returns something else (a plugin's
        mistake was an AttributeError deep in the local loop)."""
        work = self.algorithm.begin_round(ctx, state)
        if not isinstance(work, Work):
            raise GossipflError(f"algorithm.name: {origin(type(self.algorithm))}: begin_round "
                                f"must return a gossipfl.algorithms.Work (the round's "
                                f"working rows), got {type(work).__name__}.")
        return work


def _load_schedules() -> None:
    from gossipfl.schedules import (  # noqa: F401  (registration)
        asynchronous,
        sequential,
        synchronous,
    )


SCHEDULES: Registry = Registry("schedule", "topology.order", load=_load_schedules)


def register_schedule(cls: type[Schedule]) -> type[Schedule]:
    """Class decorator: make ``cls`` available as ``topology.order: <cls.name>``."""
    return SCHEDULES.add(cls.name, cls)


def schedule_names() -> tuple[str, ...]:
    """Every ``topology.order``: the built-in schedules, then the plugins'."""
    return SCHEDULES.names()


def get_schedule(name: str) -> type[Schedule]:
    return SCHEDULES.lookup(name)


__all__ = ["SCHEDULES", "RoundOutcome", "Schedule", "get_schedule", "register_schedule",
           "schedule_names"]
