"""Muffliato-SGD — noise, then gossip (Cyffers, Even, Bellet & Massoulié, "Muffliato:
Peer-to-Peer Privacy Amplification for Decentralized Optimization and Averaging", NeurIPS
2022, arXiv 2206.05091): the paper's Muffliato-GD (one local gradient step, then Muffliato's
noisy gossip averaging, its Algorithm 1) with gossipfl's minibatches.

Round t, every client i (all in parallel), with η_t the learning rate:

    g_i   = clip_C(∇F_i(x_i^t; ξ_i^t)),        clip_C(g) = g · min(1, C / ‖g‖₂)
    y_i^0 = x_i^t − η_t (g_i + σ C z_i^t + wd·x_i^t),      z_i^t ~ N(0, I_P)
    x^{t+1} = P_K(W) y^0    (K = ``gossip_steps`` steps of W, or Chebyshev-accelerated:
                             y^1 = W y^0, y^{k+1} = ω W y^k + (1 − ω) y^{k−1})

with C = ``clip``, σ = ``sigma``, ω of :mod:`gossipfl.trust.muffliato` (the paper's). What
client i shares, y_i^0, is x_i^t − η_t g_i plus Gaussian noise of standard deviation η_t σ C;
replacing client u's data moves it by at most η_t Δ_g, Δ_g = 2C (two clipped gradients), so
the paper's ratio Δ/σ is 2/σ every round whatever η_t. The reported guarantee (the metric
columns ``pndp_max`` and ``pndp_mean``, Rényi DP of order α = ``alpha``) is the paper's
pairwise network DP of Muffliato composed over the rounds run,

    ε_{u→v} = α (2C)² / (2 (σC)²) · Σ_t S_uv(W_t) = (2α / σ²) · Σ_t S_uv(W_t),

S of :func:`gossipfl.trust.muffliato.pairwise_sums` (v sees its neighbours' messages at steps
k = 0..K−1 of every round). Computed for at most 1 024 clients; ∞ with σ = 0.

**Where the paper leaves a choice open**, we take: the noise on the gradient (so its scale
follows η_t, a decaying learning rate keeps Δ/σ fixed), user-level neighbouring (any change
of a client's local data: Δ_g = 2C), the clipping of each client's minibatch gradient (the
paper assumes bounded gradients), one local step per round (``train.local_steps`` and
``local_epochs`` are not read, as for ``dpsgd``), and the noise added once per round before
the K gossip steps. The noise of client i in round t is a function of (seed, i, t) alone
(:func:`gossipfl.common.rng.counter_normal`), so a resumed run draws what the uninterrupted one drew.

**Reductions**: with σ = 0 and ``clip: null`` the round is DFedAvg's with one local step and
Q = K gossip steps, the same computation bit for bit; ``chebyshev: false`` and K = 1: W y^0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import BOOLEAN, NON_NEGATIVE, POSITIVE, Phase, Rule
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg, GossipParams
from gossipfl.algorithms.terms import chain, gradient, weight_decay
from gossipfl.common.rng import client_keys, counter_bits, counter_normal, vectorized_keys
from gossipfl.errors import GossipflError
from gossipfl.trust import muffliato as pndp


@dataclass
class MuffliatoParams(GossipParams):
    sigma: float = 0.3  # noise standard deviation, in units of clip
    clip: float | None = 1.0  # C: the gradient's clipping norm (null: no clipping, σ = 0 only)
    chebyshev: bool = False  # the paper's accelerated gossip
    alpha: float = 2.0  # the Rényi order of the reported guarantee
    rules: ClassVar = {"sigma": NON_NEGATIVE, "clip": POSITIVE.or_none(),
                       "chebyshev": BOOLEAN, "alpha": Rule(lambda v: v > 1, "> 1")}

    def validate(self) -> None:
        super().validate()
        if self.clip is None and self.sigma != 0:
            raise GossipflError(f"algorithm.clip: null leaves a client's gradient unbounded, so "
                                f"no noise hides it; set algorithm.clip > 0 or algorithm.sigma: "
                                f"0 (got sigma {self.sigma}).")


@register
class Muffliato(DFedAvg):
    name = "muffliato"
    paper = ("Cyffers, Even, Bellet & Massoulié 2022, Muffliato: Peer-to-Peer Privacy "
             "Amplification for Decentralized Optimization and Averaging (NeurIPS)")
    Params = MuffliatoParams
    orders = ("synchronous",)
    # its guarantee is for W y with y sent whole: compression and robust aggregation are
    # refused by their stages' plain_gossip need (gossipfl.assembly.compat, one sentence)
    compressible = False

    def __init__(self, params, env, fed):
        super().__init__(params, env, fed)
        m = fed.num_clients
        self._keys = client_keys(env.seed, torch.arange(m), "muffliato",
                                 vectorized=vectorized_keys(m))
        self._gradient = gradient()
        self._omegas: dict = {}
        self._ledger: pndp.Ledger | None = None

    @property
    def private(self) -> bool:
        """Whether the round differs from DFedAvg's (clipping or noise)."""
        return self.params.clip is not None or self.params.sigma != 0

    def phases(self):
        if not self.private:
            return [Phase(steps=1)]
        return [Phase(steps=1, direction=chain(self.noisy_gradient, weight_decay()))]

    def noisy_gradient(self, ctx, work, batch):
        """Loss and clip_C(g) + σ C z of every row (z: client i's draw of round t)."""
        loss, g = self._gradient(ctx, work, batch)
        p = self.params
        if p.clip is not None:
            g = g * (p.clip / g.norm(dim=1, keepdim=True)).clamp(max=1.0)  # ‖g‖ = 0: 1
        if p.sigma:
            if self._keys.device != g.device:
                self._keys = self._keys.to(g.device)
            ids = torch.arange(len(g)) if batch.clients is None else batch.clients
            keys = counter_bits(self._keys[ids.to(g.device)],
                                torch.tensor(ctx.round, device=g.device), 63)
            g = g.add(counter_normal(keys, g.shape[1], g.dtype), alpha=p.sigma * p.clip)
        return loss, g

    # -- the gossip ------------------------------------------------------------------------
    def end_round(self, ctx, state, work):
        self.keep(ctx, state, work)
        state["x"] = self.noisy_gossip(work.y, ctx.round)

    def noisy_gossip(self, y0, t: int):
        """P_K(W) y^0: K plain steps, or the Chebyshev recurrence."""
        steps = self.gossip_steps()
        if not self.params.chebyshev:
            return self.fed.gossip(y0, t, steps)
        omega = self.omega(t)
        previous, current = y0, self.fed.gossip(y0, t, 1)
        for _ in range(steps - 1):
            mixed = self.fed.gossip(current, t, 1)
            previous, current = current, omega * mixed + (1.0 - omega) * previous
        return current

    def omega(self, t: int) -> float:
        """ω of round t's W (cached: one value for a static topology)."""
        varies = self.fed.time_varying
        key = t if varies else None
        if key not in self._omegas:
            if varies:
                self._omegas.clear()
            W = self.fed.matrix(t, "algorithm.chebyshev")
            self._omegas[key] = pndp.chebyshev_omega(pndp.spectral_gap(W))
        return self._omegas[key]

    # -- refusals and the reported guarantee ------------------------------------------------
    def refusal(self, config, topology) -> str | None:
        p = self.params
        if p.chebyshev:
            if topology.sparse:
                return (f"algorithm.chebyshev: needs the spectral gap of W, which is not "
                        f"computed for {topology.num_clients} clients held as edges; use "
                        f"chebyshev: false.")
            W = topology.matrix(0, "algorithm.chebyshev")
            if not (W == W.T).all():
                return (f"algorithm.chebyshev: the paper's acceleration needs a symmetric W, "
                        f"but the {topology.name} topology's is not; use chebyshev: false.")
            if pndp.spectral_gap(W) >= 2:
                return ("algorithm.chebyshev: ω is undefined for a spectral gap of 2 (W has "
                        "eigenvalue −1); use chebyshev: false.")
        return None

    def check(self, topology, order="synchronous"):
        if topology is not None and topology.num_clients > pndp.MAX_CLIENTS:
            return [(f"algorithm muffliato: the pairwise guarantee (pndp_max, pndp_mean) is "
                     f"computed for at most {pndp.MAX_CLIENTS} clients; with "
                     f"{topology.num_clients} its columns are left out.")]
        return super().check(topology, order)

    def columns(self, rounds: int) -> dict:
        """``pndp_max`` and ``pndp_mean`` after ``rounds`` rounds (none above 1 024 clients)."""
        fed = self.fed
        if fed.num_clients > pndp.MAX_CLIENTS:
            return {}
        if self._ledger is None:
            p = self.params
            scale = math.inf if p.sigma == 0 else 2.0 * p.alpha / p.sigma ** 2
            self._ledger = pndp.Ledger(lambda t: fed.matrix(t, "algorithm muffliato"),
                                       self.gossip_steps(), p.chebyshev, scale,
                                       fed.time_varying)
        return self._ledger.columns(rounds)
