"""AD-PSGD — asynchronous decentralized parallel SGD (Lian, Zhang, Zhang & Liu, ICML 2018).

Runs only in ``topology.order: asynchronous`` (:mod:`gossipfl.schedules.asynchronous`: the
event order, the clock and the waves). Each worker i repeatedly reads its model, computes a
stochastic gradient there (c_i seconds), then, when done, averages atomically with one
neighbour j drawn uniformly and applies its gradient:

    x̂_i = x_i                                       (read at the start of the computation)
    g_i = ∇F_i(x̂_i; ξ_i) + wd·x̂_i                   (c_i seconds; x_i may change meanwhile)
    x_i, x_j ← (x_i + x_j) / 2                       (W_k: weights 1/2 on the pair {i, j})
    x_i ← x_i − η_t g_i,   then x̂_i ← x_i            (the next computation starts)

i.e. X_{k+1} = W_k X_k − η_t e_i g_iᵀ for the k-th event, the gradient taken at a stale read
(other workers' events may have averaged x_i since it was read). One gossipfl round = the
next M events (M gradient applications), η_t the round's learning rate; a fast worker does
more of them. Bytes: 2 messages of 4P bytes per event.

Per-client state (checkpointed): ``x`` and ``read`` (x̂_i); the asynchronous schedule keeps
its own ``finish`` (the completion time of i's current computation) and ``updates`` (k_i,
i's update count: its neighbour draws and minibatches are hashed from it) in its namespace
of the run's state.

Refused: the synchronous and sequential orders (there is no round of every client); a W
that is column- or row-stochastic only, or whose pattern is not symmetric (a pair average
needs an undirected graph); ``topology.compression`` (CHOCO-Gossip's public copies assume
synchronous rounds); several processes and ``systems.availability`` (by the order).
"""

from __future__ import annotations

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Algorithm, Phase, Work
from gossipfl.algorithms.terms import phase_direction


@register
class ADPSGD(Algorithm):
    name = "adpsgd"
    paper = ("Lian, Zhang, Zhang & Liu 2018, Asynchronous Decentralized Parallel Stochastic "
             "Gradient Descent (ICML)")
    client_state = ("x", "read")  # the schedule keeps its finish times and counts
    orders = ("asynchronous",)
    compressible = False
    mixing = "pairs"  # it averages pairs of neighbours: an undirected graph (gossipfl.assembly.compat)

    def order_conflict(self, order):
        return None if order in self.orders else ("asynchronous_round", {})

    def init(self, x0):
        return {"x": x0.clone(), "read": x0.clone()}

    def phases(self):
        return [Phase(name="gradient", steps=1, update=self.gradient)]

    def gradient(self, ctx, work, batch):
        """η_t (∇F_i(x̂_i; ξ) + wd·x̂_i), kept for the event; the rows stay."""
        loss, direction = phase_direction(ctx, work, batch)
        work["step"].copy_(ctx.lr * direction)
        return loss

    def begin_event(self, ctx, state, clients):
        read = self.fed.rows(state["read"], clients)
        return Work(read, clients, step=torch.zeros_like(read))

    def end_event(self, ctx, state, work, partners):
        x = self.fed.average_pairs(state["x"], work.clients, partners)
        moved = self.fed.rows(x, work.clients) - work["step"]
        self.fed.set_rows(x, work.clients, moved)
        self.fed.set_rows(state["read"], work.clients, moved)

    def end_round(self, ctx, state, work):
        raise NotImplementedError("adpsgd runs in topology.order: asynchronous")
