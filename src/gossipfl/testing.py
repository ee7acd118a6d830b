"""Algorithms on their own (FedJAX style): a least-squares federation built without a config or
the Runner, and one round of an algorithm called directly.

Client i holds (A_i, b_i), A_i ∈ R^{n_i×d}. With the default model (linear, no bias) and the
``mse`` loss its objective is

    F_i(x) = (1/n_i) ‖A_i x − b_i‖²,      ∇F_i(x) = (2/n_i) A_iᵀ (A_i x − b_i),

which a test re-derives in float64 NumPy; any other ``model`` (e.g. a shared body and a
personal head) takes its place. Every local step uses client i's whole data (full batch), so
a round is deterministic:

    bed = least_squares(A, b, W, steps=K, lr=η, lr_decay=γ)     # W: [M, M] mixing matrix
    algo = DFedAvg(GossipParams(), bed.env, bed.fed)
    state = algo.init(X0)                                        # X0: [M, P] float32
    for t in range(T):
        run_round(bed, algo, state, t)                           # η_t = η γ^t

:func:`run_round` is round t of the papers' algorithm boxes, on every row the algorithm picks:

    work = begin_round(ctx_t, state)
    for each phase p of phases():  K_p times  y_i ← local_step(y_i; A_i, b_i)   (η_{t,p}, μ_p)
    end_round(ctx_t, state, work)

with η_{t,p} = (phase.lr or η) γ^t, μ_p the phase's momentum (or ``momentum``), K_p its
steps or epochs (or K; one epoch is one full-batch step) and ``phase.begin`` before its first
step: the local loop is the :class:`~gossipfl.schedules.training.LocalTrainer` of a run, with a
full-batch sampler. A schedule (:mod:`gossipfl.schedules`) runs on the same pieces:
``Sequential(algo, bed.trainer, bed.fed).run_round(bed.context(t), state)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import torch

from gossipfl.algorithms.base import Algorithm, Context, State, Work
from gossipfl.config import TrainConfig
from gossipfl.data import ClientSampler, from_tensors
from gossipfl.engine import ParamLayout, make_oracle
from gossipfl.engine.groups import ParamGroups
from gossipfl.models import build_model, head_names
from gossipfl.network.clients import ClientEnv, LocalTraining
from gossipfl.network.federation import Federation
from gossipfl.schedules.training import LocalTrainer
from gossipfl.topology import Mixer, Topology, build_topology


@dataclass
class Testbed:
    """What an algorithm is built from (``env``, ``fed``) and the local loop that runs its
    phases (``trainer``), for clients whose every step is a full-batch step."""

    __test__ = False  # not a pytest test class

    env: ClientEnv
    fed: Federation
    trainer: LocalTrainer

    def context(self, t: int) -> Context:
        """Round t's context: η_t = η γ^t and the clients' environment."""
        return Context(round=t, lr=self.trainer.lr(t), env=self.env)


def least_squares(inputs: Sequence, targets: Sequence, W: np.ndarray | Topology | None = None,
                  *, steps: int = 1, lr: float = 0.05, lr_decay: float = 1.0,
                  weight_decay: float = 0.0, momentum: float = 0.0,
                  clip_norm: float | None = None, model: torch.nn.Module | None = None,
                  personal: Sequence[str] | None = None, seed: int = 0,
                  device: str | torch.device = "cpu") -> Testbed:
    """The clients ``i`` with data (``inputs[i]`` [n_i, d], ``targets[i]`` [n_i]), the
    ``mse`` loss, and a :class:`Federation` over the mixing matrix ``W`` (a ``custom``
    topology; or any :class:`~gossipfl.topology.Topology`; None for centralized algorithms).

    ``steps``: K, the local steps of a phase that sets neither steps nor epochs; ``lr``,
    ``lr_decay``, ``weight_decay``, ``momentum``, ``clip_norm``: the ``train`` section's;
    ``model``: default ``Linear(d, 1, bias=False)``; ``personal``: the names of the personal
    parameters (default: the last Linear's, as a run's default); ``seed``: the run's (the
    server's client samples are drawn from it)."""
    device = torch.device(device)
    xs = [torch.as_tensor(np.asarray(x), dtype=torch.float32) for x in inputs]
    ys = [torch.as_tensor(np.asarray(y), dtype=torch.float32) for y in targets]
    m = len(xs)
    dataset = from_tensors(torch.cat(xs), torch.cat(ys), xs[0][:0], ys[0][:0]).to(device)
    bounds = np.cumsum([0] + [len(y) for y in ys])
    parts = [np.arange(a, b) for a, b in pairwise(bounds)]
    if model is None:
        model = build_model("linear", tuple(xs[0].shape[1:]), 1, seed=seed, bias=False)
    model = model.to(device)
    layout = ParamLayout.from_module(model)
    groups = ParamGroups.build(layout, head_names(model) if personal is None else personal)
    sizes = torch.as_tensor([len(y) for y in ys], dtype=torch.float32, device=device)
    mixer = None
    if W is not None:
        topology = W if isinstance(W, Topology) else build_topology(
            "custom", m, mixing="custom", seed=seed, array=np.asarray(W, dtype=np.float64))
        mixer = Mixer(topology, device=device)
    fed = Federation(m, groups, sizes, seed=seed, mixer=mixer)
    env = ClientEnv(oracle=make_oracle("auto", model, loss="mse", device=device), layout=layout,
                    groups=groups, sample_sizes=sizes, seed=seed,
                    train=LocalTraining(weight_decay=weight_decay, momentum=momentum,
                                        clip_norm=clip_norm))
    train = TrainConfig(local_steps=steps, batch_size="full", lr=lr, lr_decay=lr_decay,
                        weight_decay=weight_decay, momentum=momentum, clip_norm=clip_norm,
                        loss="mse")
    sampler = ClientSampler(parts, None, seed=seed, device=device)
    trainer = LocalTrainer(train, env, fed, sampler, dataset, augment=False, seed=seed)
    return Testbed(env, fed, trainer)


def run_round(bed: Testbed, algorithm: Algorithm, state: State, t: int) -> Work:
    """Round t of ``algorithm`` called directly: ``begin_round``, its phases on the working
    rows (full batch), ``end_round``; ``state`` is updated in place. Returns the round's
    :class:`Work` (its rows as they left local training, ``work.steps``)."""
    ctx = bed.context(t)
    with torch.no_grad():
        work = algorithm.begin_round(ctx, state)
        bed.trainer.train(t, work, algorithm.phases())
        algorithm.end_round(ctx, state, work)
    return work


__all__ = ["Testbed", "least_squares", "run_round"]
