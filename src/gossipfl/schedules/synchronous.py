"""The synchronous order (``topology.order: synchronous``, the default): the papers'
algorithm boxes. Every client of the round (all, or the ones a server samples) starts from
the same snapshot of the state, runs its local phases, and then all communicate at once.
"""

from __future__ import annotations

from gossipfl.algorithms.base import Context, State
from gossipfl.schedules import RoundOutcome, Schedule, register_schedule


@register_schedule
class Synchronous(Schedule):
    name = "synchronous"
    asks_algorithm = True

    def run_round(self, ctx: Context, state: State, keep_trained: bool = False) -> RoundOutcome:
        algo = self.algorithm
        work = self.begin(ctx, state)
        loss_sum, loss_count = self.trainer.train(ctx.round, work, algo.phases(),
                                                  plan=ctx.plan)
        trained = algo.trained_models(state, work).clone() if keep_trained else None
        algo.end_round(ctx, state, work)
        return RoundOutcome(loss_sum, loss_count, trained=trained)
