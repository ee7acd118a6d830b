"""A schedule of one's own (docs/design.md, "Adding a piece"): half the clients train.

A schedule decides who trains and who mixes when (``topology.order`` names it). Here, in
round t only the clients i with i ≡ t (mod 2) run their local phases (a crude model of
stragglers); the others enter the communication with the rows the round started from.
With DFedAvg:

    y_i = K local steps from x_i  (i ≡ t mod 2),   y_i = x_i  (otherwise);   x ← W y

The algorithm is not changed: the schedule hands the trainer a subset of the round's rows
and the algorithm's own ``end_round`` communicates all of them.

    topology: {name: ring, order: alternating}
"""

from __future__ import annotations

import torch

from gossipfl.algorithms import Work
from gossipfl.schedules import RoundOutcome, Schedule, register_schedule


@register_schedule
class Alternating(Schedule):
    name = "alternating"

    @classmethod
    def refusal(cls, algorithm, distributed_world):
        if algorithm.centralized:
            return "topology.order: alternating is for decentralized algorithms."
        return None  # any round that trains every row and then communicates

    def run_round(self, ctx, state, keep_trained=False):
        algo = self.algorithm
        work = algo.begin_round(ctx, state)
        ids = self.fed.own_clients(work.y.device)
        rows = torch.nonzero(ids % 2 == ctx.round % 2).flatten()
        part = Work(work.y[rows], ids[rows],
                    **{k: v[rows] for k, v in work.scratch.items()})
        loss_sum, loss_count = self.trainer.train(ctx.round, part, algo.phases(),
                                                  plan=ctx.plan)
        work.y[rows] = part.y
        for key, value in work.scratch.items():
            if value.dim() and value.stride(0) != 0:  # not a vector broadcast to every row
                value[rows] = part.scratch[key]
        trained = algo.trained_models(state, work).clone() if keep_trained else None
        algo.end_round(ctx, state, work)
        return RoundOutcome(loss_sum, loss_count, extra={"trained_rows": len(rows)},
                            trained=trained)
