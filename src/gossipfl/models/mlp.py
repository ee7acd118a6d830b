"""Fully connected models: ``linear`` / ``logistic`` (one layer) and ``mlp``.

Every model in :mod:`gossipfl.models` names its final classifier layer ``head`` (a single
``nn.Linear``), so the personal/shared split of FedPer/FedRep/DFedMDC is "parameters under
``head.``" vs the rest.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from torch import Tensor, nn

from gossipfl.errors import GossipflError


def flat_size(input_shape: Sequence[int]) -> int:
    """Number of input features after flattening one sample of shape ``input_shape``."""
    return math.prod(int(d) for d in input_shape)


class LinearModel(nn.Module):
    """``f(a) = W vec(a) + b``: least squares (``mse``) or softmax regression (``logistic``)."""

    def __init__(self, input_shape: Sequence[int], num_classes: int, bias: bool = True):
        super().__init__()
        self.flatten = nn.Flatten()
        self.head = nn.Linear(flat_size(input_shape), num_classes, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.flatten(x))


class MLP(nn.Module):
    """Flatten → [Linear → ReLU] per hidden size → Linear head (default 784-200-200-10)."""

    def __init__(
        self, input_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (200, 200)
    ):
        super().__init__()
        widths = [flat_size(input_shape), *[int(h) for h in hidden]]
        if any(w <= 0 for w in widths[1:]):
            raise GossipflError(
                f"model.options.hidden: every size must be > 0, got {list(hidden)}."
            )
        layers: list[nn.Module] = [nn.Flatten()]
        for n_in, n_out in itertools.pairwise(widths):
            layers += [nn.Linear(n_in, n_out), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(widths[-1], num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.body(x))


def linear(input_shape: Sequence[int], num_classes: int, bias: bool = True) -> nn.Module:
    """One linear layer (``num_classes=1`` gives a ``[.., 1]`` output for least squares)."""
    return LinearModel(input_shape, num_classes, bias=bias)


def logistic(input_shape: Sequence[int], num_classes: int, bias: bool = True) -> nn.Module:
    """Multinomial logistic regression: the same layer as ``linear``, used with cross-entropy."""
    return LinearModel(input_shape, num_classes, bias=bias)


def mlp(
    input_shape: Sequence[int], num_classes: int, hidden: Sequence[int] = (200, 200)
) -> nn.Module:
    """ReLU multilayer perceptron with the given hidden sizes."""
    return MLP(input_shape, num_classes, hidden=hidden)
