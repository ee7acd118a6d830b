"""An example plugin: one algorithm, one model and one dataset of a researcher's own.

Use it without editing gossipfl:

    gossipfl run examples/plugins/cta.yaml                 # the config names the plugin
    gossipfl run --plugin examples/plugins/my_plugin.py --set algorithm.name=dfedavg_cta
    gossipfl list --plugin examples/plugins/my_plugin.py   # shows what it registered
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from gossipfl.algorithms import Algorithm, Work, register
from gossipfl.algorithms.base import AT_LEAST_ONE, Hyperparams
from gossipfl.data import from_tensors, register_dataset
from gossipfl.models import register_model


@dataclass
class CTAParams(Hyperparams):
    gossip_steps: int = 1  # Q
    rules: ClassVar = {"gossip_steps": AT_LEAST_ONE}


@register
class DFedAvgCTA(Algorithm):
    """Combine-then-adapt DFedAvg (the "CTA" diffusion order of Sayed 2014, Adaptation,
    Learning, and Optimization over Networks): mix first, then train locally.

        z_i = Σ_j (W^Q)_ij x_j,   x_i ← K local SGD steps from z_i

    (gossipfl's dfedavg is adapt-then-combine: train, then mix.)
    """

    name = "dfedavg_cta"
    paper = "Sayed 2014, Adaptation, Learning, and Optimization over Networks (CTA diffusion)"
    Params = CTAParams

    def begin_round(self, ctx, state):
        return Work(self.fed.gossip(state["x"], ctx.round, steps=self.params.gossip_steps))

    def end_round(self, ctx, state, work):
        state["x"] = work.y


@register_model("mlp_tanh")
def mlp_tanh(input_shape, num_classes, hidden: int = 32):
    """A one-hidden-layer tanh MLP; its last Linear, ``head``, is the personal part."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), hidden), nn.Tanh())
    model.add_module("head", nn.Linear(hidden, num_classes))
    return model


@register_dataset("npz_folder")
def npz_folder(root: Path, download: bool, file: str = "my_data.npz"):
    """Arrays ``train_x, train_y, test_x, test_y`` from ``<data root>/<file>``."""
    path = Path(root) / file
    arrays = np.load(path)
    return from_tensors(*(torch.from_numpy(arrays[k]) for k in
                          ("train_x", "train_y", "test_x", "test_y")), name="npz_folder")
