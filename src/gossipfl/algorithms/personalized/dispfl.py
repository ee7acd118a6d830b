"""DisPFL — decentralized sparse training for personalized FL (Dai et al., "DisPFL:
Towards Communication-Efficient Personalized Federated Learning via Decentralized Sparse
Training", ICML 2022), Algorithm 1 and its official code (github.com/rong-dai/DisPFL), which
the DFedMDC paper runs ("the sparsity of the local model is set to 0.5").

Client i holds a sparse model x_i = m_i ⊙ x_i with a personal binary mask m_i. Round t:

    y_i ← K local SGD steps from x_i, the mask re-applied after each step
          (y ← m_i ⊙ (y − η d): the direction is masked)
    g_i = ∇F_i(y_i; ξ)  on one minibatch, dense (the regrowth scores)
    prune:  per layer l, drop the ⌈r_t · nnz(m_il)⌉ coordinates of m_il with the smallest |y_i|,
            r_t = (α/2)(1 + cos(π t / T)), α = ``anneal_factor`` = 0.5, T = ``train.rounds``
    regrow: per layer, as many coordinates outside the pruned mask with the largest |g_i|
            → m_i' (the same number of nonzeros)
    x_i^{t+1} = m_i' ⊙ Σ_j w_ij m_j ⊙ y_j / Σ_j w_ij m_j   (coordinate-wise over the
            neighbours j, i included, whose round-t mask m_j holds the coordinate; with the
            official uniform weights it is the code's count-normalized average)

Masks start from ERK densities (Evci et al. 2020, layer l dense with probability
ε (n_in + n_out + k_h + k_w)/(n_in n_out k_h k_w), ε set so the whole model has density
``density`` = 0.5; layers that would exceed 1 stay dense), drawn independently per client
and layer (the official scripts' ``--different_initial``); x_i^0 = m_i ⊙ x^0. Every parameter
tensor (biases and norms included) is masked, as in the code. Regrowth is by gradient
magnitude (the code's default; its scripts' ``--dis_gradient_check`` regrows at random).
Messages are sparse: each client sends its nonzeros (Federation's masked gossip).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from gossipfl.algorithms import register
from gossipfl.algorithms.base import FRACTION, NON_NEGATIVE, Algorithm, Hyperparams, Phase, Work
from gossipfl.algorithms.terms import masked, pure, sgd
from gossipfl.common.rng import numpy_generator


@dataclass
class DisPFLParams(Hyperparams):
    density: float = 0.5  # fraction of nonzeros of every client's model ("dense_ratio")
    anneal_factor: float = 0.5  # α: the prune rate r_t = (α/2)(1 + cos(π t / T))
    erk_power: float = 1.0  # ERK's exponent ("erk_power_scale")
    rules: ClassVar = {"density": FRACTION, "anneal_factor": FRACTION,
                       "erk_power": NON_NEGATIVE}


def erk_densities(shapes, density: float, power: float = 1.0) -> list[float]:
    """Per-tensor densities of Erdős–Rényi-Kernel with overall ``density``."""
    sizes = [math.prod(s) for s in shapes]
    raw = [(sum(s) / n) ** power for s, n in zip(shapes, sizes, strict=True)]
    dense: set[int] = set()
    while True:
        sparse = [k for k in range(len(sizes)) if k not in dense]
        if not sparse:
            return [1.0] * len(sizes)
        budget = density * sum(sizes) - sum(sizes[k] for k in dense)
        eps = budget / sum(raw[k] * sizes[k] for k in sparse)
        top = max(raw[k] for k in sparse)
        if top * eps <= 1:
            return [1.0 if k in dense else eps * raw[k] for k in range(len(sizes))]
        dense |= {k for k in sparse if raw[k] == top}


def lowest(scores: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Boolean ``[S, n]``: the ``counts[s]`` smallest entries of each row of ``scores``."""
    ranks = scores.argsort(dim=1, stable=True).argsort(dim=1)
    return ranks < counts.unsqueeze(1)


@register
class DisPFL(Algorithm):
    name = "dispfl"
    paper = "Dai et al. 2022, DisPFL: Communication-Efficient Personalized FL via " \
            "Decentralized Sparse Training (ICML)"
    Params = DisPFLParams
    client_state = ("x", "mask")
    evaluations = ("average", "local", "personalized")
    compressible = False  # its sparse masks are its compression

    def init(self, x0):
        layout = self.env.layout
        densities = erk_densities([tuple(s) or (1,) for s in layout.shapes],
                                  self.params.density, self.params.erk_power)
        mask = np.zeros((len(x0), layout.P), dtype=bool)
        for i, row in zip(self.fed.own_clients().tolist(), mask, strict=True):
            rng = numpy_generator(self.env.seed, "dispfl_mask", i)
            for offset, numel, d in zip(layout.offsets, layout.numels, densities, strict=True):
                row[offset + rng.permutation(numel)[: int(d * numel)]] = True
        state = {"mask": torch.as_tensor(mask, device=x0.device)}
        state["x"] = x0 * state["mask"]
        return state

    def phases(self):
        return [Phase(direction=sgd(masked("mask"))),
                Phase("screen", steps=1, lr=0.0, momentum=0.0, update=self.screen)]

    def begin_round(self, ctx, state):
        return Work(state["x"].clone(), mask=state["mask"], score=torch.zeros_like(state["x"]))

    @pure
    def screen(self, ctx, work, batch):
        """The dense gradient's magnitudes, the regrowth scores; no step."""
        loss, grad = ctx.env.raw_gradient(work.y, batch)
        work["score"].copy_(grad.abs())
        return loss

    def end_round(self, ctx, state, work):
        trained = work["mask"]
        rate = self.params.anneal_factor / 2 * (1 + math.cos(math.pi * ctx.round / ctx.rounds))
        layout = self.env.layout
        mask = trained.clone()
        for offset, numel in zip(layout.offsets, layout.numels, strict=True):
            cols = slice(offset, offset + numel)
            held = trained[:, cols]
            count = torch.ceil(rate * held.sum(dim=1)).long()
            inf = torch.full_like(work.y[:, cols], math.inf)
            kept = held & ~lowest(torch.where(held, work.y[:, cols].abs(), inf), count)
            grown = lowest(torch.where(kept, inf, -work["score"][:, cols]), count)
            mask[:, cols] = kept | grown
        mixed = self.fed.gossip(work.y, ctx.round, masks=trained)
        state["mask"] = mask
        state["x"] = mixed * mask
