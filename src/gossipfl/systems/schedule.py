"""Rounds under failures: offline clients do not train, and a server hears only from the
clients that are online and meet its deadline.

:class:`SystemsSchedule` wraps the run's schedule (``topology.order``):

- decentralized: the clients offline in round t sit out local training (the trainer hands
  them no minibatch: no compute, no loss), and after the algorithm's round their
  ``client_state`` rows are put back as they were before it: they neither trained nor changed.
  Their rows and columns of W'_t are the identity's (:mod:`gossipfl.systems.failures`), so
  no online client read their rows during the round either;
- centralized: the server's sample (``Federation.sample``) loses its offline clients and,
  with ``systems.deadline``, those whose download + compute + upload would pass it
  (:meth:`gossipfl.systems.Systems.reporting`); when nobody is left the round is skipped
  (the server model and every state stay, no bytes are sent).
"""

from __future__ import annotations

import torch

from gossipfl.algorithms.base import Context, State
from gossipfl.schedules import RoundOutcome, Schedule


class NobodyReports(Exception):
    """Raised by the Federation's sample filter when no sampled client reports this round
    (before the algorithm changed anything: every server algorithm samples first)."""


class SystemsSchedule(Schedule):
    """``inner``'s rounds with ``systems``' failures (see the module doc)."""

    name = "systems"  # a wrapper, not a topology.order

    def __init__(self, inner: Schedule, systems):
        super().__init__(inner.algorithm, inner.trainer, inner.fed)
        self.inner = inner
        self.systems = systems

    def run_round(self, ctx: Context, state: State, keep_trained: bool = False) -> RoundOutcome:
        algo = self.algorithm
        if algo.centralized:
            try:
                return self.inner.run_round(ctx, state, keep_trained)
            except NobodyReports:
                device = next(iter(state.values())).device
                trained = algo.personalized_models(state).clone() if keep_trained else None
                return RoundOutcome(torch.zeros((), device=device), 0, trained=trained)
        offline = self.systems.offline(ctx.round)
        if not offline.any():
            return self.inner.run_round(ctx, state, keep_trained)
        before = {}
        for key in algo.client_state:
            rows = torch.as_tensor(offline.nonzero()[0], device=state[key].device)
            before[key] = rows, state[key][rows].clone()
        self.trainer.sitting_out = torch.as_tensor(offline)
        try:
            outcome = self.inner.run_round(ctx, state, keep_trained)
        finally:
            self.trainer.sitting_out = None
        for key, (rows, values) in before.items():
            if state[key].dim() and state[key].stride(0) == 0:  # a broadcast view
                state[key] = state[key].clone()
            state[key][rows] = values
        return outcome
