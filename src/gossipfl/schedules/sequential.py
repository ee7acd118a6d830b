"""The sequential gossip order (``topology.order: sequential``): the authors' in-place loop,
computed in waves.

The public code of the OledFL and DFedCata papers (Li et al. 2024) runs a round as one loop
over the clients in index order: client i averages the current rows of its neighbours (rows
j < i were already replaced this round, rows j > i still hold last round's results), builds its
start point from that average, trains, and writes its result back in place before client
i + 1 starts. That is a Gauss–Seidel sweep, where the papers' algorithm boxes write a
synchronous (Jacobi) gossip; :mod:`gossipfl.algorithms.stability` shows why the difference
matters for extrapolation.

Here the rows of ``state["x"]`` hold the clients' last local results z_i (what a neighbour
reads and what is evaluated, as in the authors' code). Client i's turn is the algorithm's own
synchronous round restricted to i (the schedule hands the algorithm the state rows of i's
wave), with the gossip moved in front of it:

    x_i ← Σ_j w_ij z_j (current rows);   begin_round → local phases → keep;   z_i ← result

**Waves** (:mod:`gossipfl.topology.waves`): wave(i) = 1 + max wave(j) over the neighbours
j < i of i in round t's graph (0 if none). Clients of one wave share no edge, each reads only
rows of earlier waves (j < i) or rows not yet replaced (j > i: a later wave), so a wave is one
batched local phase and the round equals the one-client-at-a-time loop.
Minibatches and augmentation are drawn per client (gossipfl.data.sampler), so the numbers do
not depend on which clients share a batch. Bytes: every client receives each neighbour's
message once per round, the messages of one synchronous gossip step.
"""

from __future__ import annotations

import numpy as np
import torch

from gossipfl.algorithms.base import Context, State
from gossipfl.schedules import RoundOutcome, Schedule, register_schedule
from gossipfl.topology.waves import sweep_waves


def one_by_one(num_clients: int) -> list[np.ndarray]:
    """The literal loop: one client per wave, in index order (what the authors' code runs)."""
    return [np.array([i]) for i in range(num_clients)]


@register_schedule
class Sequential(Schedule):
    """``waves``: a function of round t's W giving the waves (default
    :func:`~gossipfl.topology.waves.sweep_waves`; any partition that respects the order gives
    the same result, e.g. ``one_by_one(len(W))``)."""

    name = "sequential"

    def __init__(self, algorithm, trainer, fed, waves=None, state=None):
        super().__init__(algorithm, trainer, fed, state)
        self.waves = waves

    one_process = "sweeps the clients one wave after another through the whole [M, P] stack"
    asks_algorithm = True

    def run_round(self, ctx: Context, state: State, keep_trained: bool = False) -> RoundOutcome:
        algo, fed, t = self.algorithm, self.fed, ctx.round
        waves = (self.waves or sweep_waves)(fed.edges(t) if fed.edges_only
                                         else fed.matrix(t, "topology.order: sequential"))
        full = _unaliased(state)
        per_client = set(algo.client_state)
        loss_sum = torch.zeros((), device=full["x"].device)
        loss_count = 0
        for wave in waves:
            rows = torch.as_tensor(wave, device=full["x"].device)
            part = {key: value[rows] if key in per_client else value
                    for key, value in full.items()}
            part["x"] = fed.gossip_rows(full["x"], t, rows)
            work = self.begin(ctx, part).of(rows)
            wave_loss, wave_count = self.trainer.train(t, work, algo.phases(), plan=ctx.plan)
            loss_sum += wave_loss
            loss_count += wave_count
            algo.keep(ctx, part, work)
            part["x"] = work.y
            for key in per_client:
                full[key][rows] = part[key]
            for key in set(full) - per_client:
                full[key] = part[key]
        state.update(full)
        return RoundOutcome(loss_sum, loss_count, extra={"waves": len(waves)})


def _unaliased(state: State) -> State:
    """The state with no two entries sharing storage (rows are written in place)."""
    seen: set[int] = set()
    out = {}
    for key, value in state.items():
        pointer = value.untyped_storage().data_ptr()
        out[key] = value.clone() if pointer in seen else value
        seen.add(pointer)
    return out
