"""benchmarks/layout_copies.py, the count of what the compiled step copies, on a small
ResNet-18-GN: the patches it counts are those of the layers the rule sends to a GEMM."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from benchmarks import layout_copies
from gossipfl.engine.stacked_layers import per_client_gemm
from gossipfl.models import build_model


def gemm_layers(shape: tuple[int, ...]) -> int:
    """The Conv2d layers of ResNet-18-GN on ``shape`` that run as per-client GEMMs."""
    model = build_model("resnet18", shape, 10, seed=0)
    seen: list[bool] = []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(
        per_client_gemm(mod, tuple(args[0].shape[2:]))))
        for m in model.modules() if isinstance(m, nn.Conv2d)]
    model(torch.zeros(1, *shape))
    for h in hooks:
        h.remove()
    return sum(seen)


@pytest.mark.slow
def test_the_copies_counted_are_the_gemm_layers_patches_and_the_eager_has_none():
    shape = (3, 16, 16)
    compiled = layout_copies.count(layout_copies.joint_graph("resnet18", shape, M=2, B=2))
    eager = layout_copies.count(layout_copies.joint_graph("resnet18", shape, M=2, B=2,
                                                          gemm=False))
    layers = gemm_layers(shape)
    assert layers > 0
    # forward: one im2col a GEMM layer; backward: one col2im a layer whose input needs a
    # gradient (all of them: none reads the network's input)
    assert compiled["copies"]["im2col"]["ops"] == 2 * layers
    assert "im2col" not in eager["copies"]
    assert compiled["written_GB"] > 0 and eager["written_GB"] > 0
