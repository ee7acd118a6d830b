"""The asynchronous order (``topology.order: asynchronous``): AD-PSGD's pairwise events in
order of completion time (Lian, Zhang, Zhang & Liu, ICML 2018), computed exactly in waves.

**Workers.** Worker i computes one stochastic gradient at a time, taking c_i seconds per step
(``systems.compute`` c_i^t of the round t in which the computation starts; every c_i = 1
without a ``systems`` section). When it completes at time τ, worker i (the *event*):

1. draws one neighbour j uniformly from its neighbours in the round's topology (j ≠ i,
   w_ij ≠ 0; from the stream (seed, "adpsgd", i, k_i), k_i = i's update count),
2. averages with it atomically, x_i, x_j ← (x_i + x_j) / 2,
3. applies its gradient (the algorithm, e.g. x_i ← x_i − η g_i) and starts its next
   computation from its row as it is now (what it *reads*).

The gradient applied at an event was taken at the row read at the start of the
computation, while x_i may have been averaged by other workers' events meanwhile: the
paper's staleness. Fast workers do more updates.

**Order.** Events run in order of τ, ties broken by client id. Worker i's next computation
completes at τ + d_ij + c_i^t, where d_ij = max(ℓ_i + 4P/β_i, ℓ_j + 4P/β_j) is the exchange
(both models travel at once, each over its sender's uplink, ``systems.network``; 0 without
one): the averaging is ordered at τ (atomic), and the worker waits for the exchange before
it computes again. Every worker starts at time 0 from x^0.

**Round.** One gossipfl round = the next M events (M gradient applications in all, the
gradient work of one synchronous round of one step per client). Each client's clock T_i is
the time of its last event; ``sim_time`` = max_i T_i = the time of the round's last event.
Bytes: each event exchanges one model each way, 2 messages of 4P bytes.

**Waves.** Consecutive events are grouped greedily while their pairs {i, j} are disjoint.
An event writes x_i, x_j and the read of i, and reads only the read of i (the gradient) and
x_i, x_j, so events on disjoint pairs commute: no event of a wave reads a row another event
of the wave writes. A wave is one batched gradient evaluation (``begin_event`` → the
algorithm's phases → ``end_event``) and one vectorized pair average, and the round equals
the literal event-at-a-time loop. Waves do not cross rounds. Minibatches are drawn per
(client, update count), so they do not depend on which events share a wave.

State: the schedule's own per-client rows (its namespace of the run's state,
``RunState.schedule``, checkpointed): ``finish`` (each worker's next completion time, < 0
before its first computation) and ``updates`` (its update count k_i); the algorithm keeps
its own rows (x and the reads).
"""

from __future__ import annotations

import numpy as np
import torch

from gossipfl.algorithms.base import Context, RoundPlan, State
from gossipfl.common.rng import numpy_generator
from gossipfl.errors import GossipflError
from gossipfl.schedules import RoundOutcome, Schedule, register_schedule
from gossipfl.topology.sparse import Edges, first_asymmetry


def neighbours(W: np.ndarray | Edges) -> list[np.ndarray]:
    """Each client's neighbours j ≠ i (w_ij ≠ 0) of an undirected pattern, ascending; W dense
    or as edges (a topology of many clients)."""
    E = Edges.of(W)
    A = E.pattern()
    if first_asymmetry(A)[0] >= 0:
        raise GossipflError("topology: the asynchronous order averages pairs of neighbours, "
                            "which needs an undirected graph, but this W's pattern is not "
                            "symmetric.")
    return np.split(A.cols, A.indptr()[1:-1])


def partner(seed: int, client: int, count: int, choices: np.ndarray) -> int:
    """The neighbour worker ``client`` averages with at its ``count``-th update."""
    if len(choices) == 0:
        raise GossipflError(f"topology: client {client} has no neighbour to average with.")
    pick = numpy_generator(seed, "adpsgd", int(client), int(count)).integers(len(choices))
    return int(choices[pick])


def waves(events: list[tuple[int, int]]) -> list[list[int]]:
    """Event indices grouped greedily into waves of consecutive events on disjoint pairs."""
    out: list[list[int]] = []
    busy: set[int] = set()
    for e, (i, j) in enumerate(events):
        if not out or i in busy or j in busy:
            out.append([])
            busy = set()
        out[-1].append(e)
        busy |= {i, j}
    return out


@register_schedule
class Asynchronous(Schedule):
    """``wave``: a function of the round's events [(i, j)] giving the waves (default
    :func:`waves`; ``lambda events: [[e] for e in range(len(events))]`` is the literal
    event-at-a-time loop)."""

    name = "asynchronous"

    #: each worker's next completion time (< 0 before its first computation) and its
    #: update count k_i
    client_state = ("finish", "updates")

    def __init__(self, algorithm, trainer, fed, wave=None, state=None):
        super().__init__(algorithm, trainer, fed, state)
        self.wave = wave or waves

    @classmethod
    def initial_state(cls, num_clients, device):
        return {"finish": torch.full((num_clients,), -1.0, dtype=torch.float64, device=device),
                "updates": torch.zeros(num_clients, dtype=torch.int64, device=device)}

    one_process = ("runs one global sequence of pairwise events over the whole [M, P] stack "
                   "(an event's pair may sit on two processes at once)")
    no_failures = "its events have no rounds for a client or link to miss"
    asks_algorithm = True
    by_completion_time = True

    # -- time --------------------------------------------------------------------------------
    def compute(self, plan: RoundPlan) -> np.ndarray:
        """``[M]`` seconds per local step: the plan's (systems.compute), else 1."""
        return np.ones(self.fed.num_clients) if plan.compute is None else plan.compute

    def events(self, t: int, plan: RoundPlan, finish: np.ndarray, updates: np.ndarray):
        """Round t's M events [(i, j, k_i, τ)], and the finish times and counts after them;
        ``plan.exchange``: ``[M]`` ℓ_i + 4P/β_i, one model over each client's uplink (None:
        no network)."""
        m = self.fed.num_clients
        finish, updates = finish.copy(), updates.copy()
        compute, link = self.compute(plan), plan.exchange
        fed = self.fed
        near = neighbours(fed.edges(t) if fed.edges_only
                          else fed.matrix(t, "topology.order: asynchronous"))
        out = []
        for _ in range(m):
            i = int(np.argmin(finish))  # the earliest completion; ties: the lowest id
            tau = float(finish[i])
            j = partner(self.fed.seed, i, updates[i], near[i])
            out.append((i, j, int(updates[i]), tau))
            updates[i] += 1
            wait = 0.0 if link is None else max(link[i], link[j])
            finish[i] = tau + wait + compute[i]
        return out, finish, updates

    # -- a round -----------------------------------------------------------------------------
    def run_round(self, ctx: Context, state: State, keep_trained: bool = False) -> RoundOutcome:
        algo, t = self.algorithm, ctx.round
        device = state["x"].device
        own = self.state  # the schedule's namespace: finish, updates
        finish = own["finish"].cpu().numpy().astype(np.float64)
        if (finish < 0).any():  # the first computations start at time 0
            finish = np.where(finish < 0, self.compute(ctx.plan), finish)
        updates = own["updates"].cpu().numpy().astype(np.int64)
        events, finish, updates = self.events(t, ctx.plan, finish, updates)
        pairs = [(i, j) for i, j, _, _ in events]
        loss_sum = torch.zeros((), device=device)
        loss_count = 0
        batches = self.wave(pairs)
        for wave in batches:
            first = torch.tensor([events[e][0] for e in wave], device=device)
            second = torch.tensor([events[e][1] for e in wave], device=device)
            counts = torch.tensor([events[e][2] for e in wave])
            work = algo.begin_event(ctx, state, first).of(first)
            wave_loss, wave_count = self.trainer.train(t, work, algo.phases(), "async",
                                                       counters=counts, plan=ctx.plan)
            loss_sum += wave_loss
            loss_count += wave_count
            algo.end_event(ctx, state, work, second)
        own["finish"] = torch.as_tensor(finish, dtype=own["finish"].dtype, device=device)
        own["updates"] = torch.as_tensor(updates, dtype=own["updates"].dtype, device=device)
        clocks = None
        if ctx.plan.clocks is not None:  # each client's clock: its last event's time
            clocks = np.array(ctx.plan.clocks, dtype=np.float64)
            for i, _, _, tau in events:
                clocks[i] = tau
        return RoundOutcome(loss_sum, loss_count, extra={"waves": len(batches)}, clocks=clocks)
