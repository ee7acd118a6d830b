"""SGP — Stochastic Gradient Push (Assran, Loizou, Ballas & Rabbat, "Stochastic Gradient Push
for Distributed Deep Learning", ICML 2019, Algorithm 1), push-sum gossip on a directed graph.

Every client holds a numerator x_i and a push-sum weight w_i (w_i^0 = 1). Round t, with the
round's column-stochastic mixing matrix P^(t) (p_ij: the share of client j's message that
goes to client i; Σ_i p_ij = 1, the rows need not sum to 1):

    z_i^t       = x_i^t / w_i^t                                       (de-biased model)
    x_i^{t+½}   = x_i^t − η_t (∇F_i(z_i^t; ξ_i^t) + wd·z_i^t)          (gradient at z, step on x)
    x_i^{t+1}   = Σ_j p_ij^(t) x_j^{t+½},     w_i^{t+1} = Σ_j p_ij^(t) w_j^t

Client j sends (p_ij x_j^{t+½}, p_ij w_j^t), P + 1 floats, to each out-neighbour i. Column
stochasticity keeps Σ_i x_i and Σ_i w_i = M, so the z_i approach the network average
Σ_i x_i / Σ_i w_i although no client has it. What is evaluated locally is z_i
(:meth:`client_models`); the "average model" is (1/M) Σ_i x_i = Σ_i x_i / Σ_i w_i, the push-sum
consensus value.

One stochastic gradient per round, as the paper's Algorithm 1 (``train.local_steps`` /
``local_epochs`` are not used). On a doubly stochastic W (every topology but ``epidemic``,
``random_k`` / ``authors_random`` with ``uniform`` weights and custom matrices), w ≡ 1, z = x
and the round is x ← W (x − η ∇F(x)): D-PSGD's ``variant: local_epoch`` (gradient step, then
gossip; not ``lian``, whose gradient is taken at the pre-gossip point in parallel with the
gossip) with one local step, i.e. DFedAvg with K = 1. A row-stochastic-only W is refused
(``mixing = "column"``: push-sum loses mass there).
"""

from __future__ import annotations

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import Algorithm, Phase, Work
from gossipfl.algorithms.terms import phase_direction, pure


@register
class SGP(Algorithm):
    name = "sgp"
    paper = "Assran et al. 2019, Stochastic Gradient Push for Distributed Deep Learning"
    client_state = ("x", "w")
    mixing = "column"
    compressible = False  # push-sum weights travel with the model

    def init(self, x0):
        return {"x": x0.clone(), "w": torch.ones(len(x0), 1, dtype=x0.dtype, device=x0.device)}

    def phases(self):
        return [Phase(steps=1, update=self.push_step)]

    def begin_round(self, ctx, state):
        return Work(state["x"] / state["w"], x=state["x"].clone())

    @pure
    def push_step(self, ctx, work, batch):
        """The direction at z = ``work.y`` (gradient + wd·z), the local optimizer's step on
        the numerator ``work["x"]``: x^{t+½} = x^t − η_t d."""
        loss, direction = phase_direction(ctx, work, batch)
        ctx.optimizer.step(work.at(work["x"]), direction)
        return loss

    def end_round(self, ctx, state, work):
        state["x"], state["w"] = self.fed.push_sum(work["x"], state["w"], ctx.round)

    def trained_models(self, state, work):
        return work["x"] / state["w"]  # z^{t+½}, before the push

    def client_models(self, state):
        return state["x"] / state["w"]
