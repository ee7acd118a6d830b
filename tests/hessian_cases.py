"""The dense Hessian that tests/analysis/test_hessian.py and tests/analysis/test_analyze.py compare Hessian-vector
products, eigenvalues and traces against."""

from __future__ import annotations

import torch


def dense_hessian(model, x, inputs, targets) -> torch.Tensor:
    """The full Hessian of the mean cross-entropy at the flat parameters x."""
    from torch.func import functional_call

    from gossipfl.engine import ParamLayout

    layout = ParamLayout.from_module(model)

    def loss(flat):
        out = functional_call(model, layout.views(flat), (inputs,))
        return torch.nn.functional.cross_entropy(out, targets)

    return torch.autograd.functional.hessian(loss, x)
