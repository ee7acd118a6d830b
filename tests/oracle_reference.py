"""Independent per-model computations the oracle tests compare against: plain autograd on a deep
copy of the model loaded with ``vector_to_parameters`` (no ParamLayout, no vmap, no stacking);
and the built-in models' cases (``BUILTIN``) that the stacked and fused oracles are run on."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from gossipfl.engine import init_stack

F64 = torch.float64
# [M, B] masks: full rows, a partial row, and an empty row (loss 0, gradient 0)
MASK = torch.tensor([[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 0, 1]], dtype=torch.bool)
MASK_SMALL = torch.tensor([[1, 1, 0], [0, 1, 1]], dtype=torch.bool)  # big models: keep it fast

# name, input shape, outputs, loss, dtype, mask
BUILTIN = {
    "linear": ((1, 6, 6), 1, "mse", torch.float32, MASK),
    "logistic": ((1, 6, 6), 5, "cross_entropy", torch.float32, MASK),
    "mlp": ((1, 28, 28), 10, "cross_entropy", torch.float32, MASK),
    "cnn": ((1, 28, 28), 10, "cross_entropy", torch.float32, MASK),
    "vgg11": ((3, 8, 8), 10, "cross_entropy", F64, MASK_SMALL),
    "resnet18": ((3, 8, 8), 10, "cross_entropy", F64, MASK_SMALL),
}


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rows_and_batch(model, shape, outputs, loss, dtype, mask, seed=0):
    """Distinct rows X [M, P], inputs [M, B, *shape] and targets [M, B] for a mask [M, B]."""
    M, B = mask.shape
    X = init_stack(model, M, dtype=dtype)
    X += 0.05 * torch.randn(X.shape, generator=gen(seed + 1), dtype=dtype)
    inputs = torch.randn(M, B, *shape, generator=gen(seed + 2), dtype=dtype)
    if loss == "mse":
        targets = torch.randn(M, B, generator=gen(seed + 3), dtype=dtype)
    else:
        targets = torch.randint(0, outputs, (M, B), generator=gen(seed + 3))
    return X, inputs, targets


def reference(model, loss, X, inputs, targets, mask):
    """Per-row mean loss over the masked samples and its gradient (0 and 0 for empty rows)."""
    net = copy.deepcopy(model).to(X.dtype)
    losses, grads = [], []
    for i in range(X.shape[0]):
        vector_to_parameters(X[i].clone(), net.parameters())
        keep = mask[i]
        if not keep.any():
            losses.append(torch.zeros((), dtype=X.dtype))
            grads.append(torch.zeros_like(X[i]))
            continue
        out = net(inputs[i][keep])
        value = (F.mse_loss(out.squeeze(-1), targets[i][keep]) if loss == "mse"
                 else F.cross_entropy(out, targets[i][keep]))
        losses.append(value.detach())
        grads.append(parameters_to_vector(torch.autograd.grad(value, list(net.parameters()))))
    return torch.stack(losses), torch.stack(grads)


def predictions(model, X, inputs, shared):
    """Outputs of every row on its own inputs (or, ``shared``, on the same inputs)."""
    net = copy.deepcopy(model).to(X.dtype)
    outs = []
    for i in range(X.shape[0]):
        vector_to_parameters(X[i].clone(), net.parameters())
        with torch.no_grad():
            outs.append(net(inputs if shared else inputs[i]))
    return torch.stack(outs)


def assert_rel(actual, expected, rel):
    """Row-wise ‖actual − expected‖ <= rel · ‖expected‖ (+ a tiny floor for zero rows)."""
    assert actual.shape == expected.shape
    actual = actual.reshape(actual.shape[0], -1)
    expected = expected.reshape(expected.shape[0], -1)
    err = torch.linalg.vector_norm(actual - expected, dim=1)
    bound = rel * torch.linalg.vector_norm(expected, dim=1) + 1e-30
    assert (err <= bound).all(), f"relative errors {(err / bound * rel).tolist()}"
