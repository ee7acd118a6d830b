"""SCAFFOLD, option II (Karimireddy et al., ICML 2020).

Server model x and control variate c; client control variates c_i (all start at 0). Each
sampled client i ∈ S_t runs K_i local steps from y = x^t:

    y ← y − η (∇F_i(y; ξ) + wd·y − c_i + c)
    c_i⁺ = c_i − c + (x^t − y_i^{K_i}) / (K_i η)                     (option II)
    x^{t+1} = x^t + η_g / |S| Σ_{i∈S} (y_i − x^t),   c ← c + 1/M Σ_{i∈S} (c_i⁺ − c_i)

K_i counts the steps client i actually took (epochs over unequal data sizes differ).
Communication: model and control variate, down and up — twice FedAvg's bytes.
"""

from __future__ import annotations

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Phase
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm
from gossipfl.algorithms.terms import sgd, shift
from gossipfl.network.federation import Weighting


@register
class Scaffold(ServerAlgorithm):
    name = "scaffold"
    paper = "Karimireddy et al. 2020, SCAFFOLD: Stochastic Controlled Averaging for FL"
    weighting = Weighting.UNIFORM
    client_state = ("c_clients",)
    server_vectors = ("c",)

    def phases(self):
        return [Phase(direction=sgd(shift("correction")))]

    def begin_round(self, ctx, state):
        work = super().begin_round(ctx, state)
        fed, clients = self.fed, work.clients
        correction = fed.broadcast(state["c"], clients) - fed.rows(
            state["c_clients"], clients)  # c − c_i
        return work.with_scratch(correction=correction)

    def end_round(self, ctx, state, work):
        fed, server, clients = self.fed, state["server"], work.clients
        c_old = fed.rows(state["c_clients"], clients)
        c_new = c_old - state["c"] + (server - work.y) / (work.steps * ctx.lr).clamp_min(1e-12)
        fed.set_rows(state["c_clients"], clients, c_new)
        state["c"] = state["c"] + fed.aggregate(c_new - c_old, clients,
                                                Weighting.SUM) / fed.num_clients
        super().end_round(ctx, state, work)
