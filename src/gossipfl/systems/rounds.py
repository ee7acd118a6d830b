"""Rounds under failures, from the round's plan (:class:`~gossipfl.algorithms.base.RoundPlan`,
made by :meth:`gossipfl.systems.Systems.plan` before the round and passed as an argument):

- decentralized: the clients offline in round t sit out local training (``ctx.plan.offline``:
  the trainer hands them no minibatch: no compute, no loss), and after the algorithm's round
  their ``client_state`` rows are put back as they were before it (:func:`offline_rows_kept`):
  they neither trained nor changed. Their rows and columns of W'_t are the identity's
  (:mod:`gossipfl.systems.failures`), so no online client read their rows during the round
  either;
- centralized: the server's sample (``Federation.sample``) keeps only its eligible clients
  (``ctx.plan.eligible``: online and, with ``systems.deadline``, done with download + compute
  + upload before it); when none of them is left the round is idle (``plan.idle``: the server
  model and every state stay, no bytes are sent; :func:`idle_outcome`).

Any schedule runs under a plan: nothing is set on it or cleared around its call.
:func:`run_round` is the one round driver, used by the runner and by a packed study's joint
round (gossipfl.studies.packing): round t of a schedule on the algorithm's state, under the plan of
``ctx`` (idle, or with the offline clients' rows kept).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from gossipfl.algorithms.base import Algorithm, Context, RoundPlan, State
from gossipfl.schedules import RoundOutcome, Schedule


def run_round(schedule: Schedule, state: State, ctx: Context,
              keep_trained: bool = False) -> RoundOutcome:
    """Round ``ctx.round`` of ``schedule`` on the algorithm's ``state`` under ``ctx.plan``:
    nothing when the plan is idle (:func:`idle_outcome`), else the schedule's round with the
    plan's offline clients' rows kept (:func:`offline_rows_kept`). ``keep_trained``: return
    the personalized models as they leave local training (evaluated before gossip)."""
    if ctx.plan.idle:
        return idle_outcome(schedule.algorithm, state, keep_trained)
    with offline_rows_kept(ctx.plan, schedule.algorithm, state):
        return schedule.run_round(ctx, state, keep_trained)


@contextmanager
def offline_rows_kept(plan: RoundPlan, algorithm: Algorithm, state: State) -> Iterator[None]:
    """The ``client_state`` rows of the plan's offline clients as they were before the block
    (nothing to do when nobody is offline)."""
    if plan.offline is None or not np.asarray(plan.offline).any():
        yield
        return
    offline = np.flatnonzero(plan.offline)
    before = {}
    for key in algorithm.client_state:
        rows = torch.as_tensor(offline, device=state[key].device)
        before[key] = rows, state[key][rows].clone()
    yield
    for key, (rows, values) in before.items():
        if state[key].dim() and state[key].stride(0) == 0:  # a broadcast view
            state[key] = state[key].clone()
        state[key][rows] = values


def idle_outcome(algorithm: Algorithm, state: State, keep_trained: bool) -> RoundOutcome:
    """A server round that no sampled client reports to: nothing trains, nothing changes."""
    device = next(iter(state.values())).device
    trained = algorithm.personalized_models(state).clone() if keep_trained else None
    return RoundOutcome(torch.zeros((), device=device), 0, trained=trained)
