"""DP-SGD's clipped sum without materializing per-sample gradients, for models whose
per-client layers are all ``Linear`` on per-sample vectors (MLPs, logistic and linear
regression) under the stacked oracle ("ghost clipping", Goodfellow 2015; Li et al. 2022).

For a Linear layer y = W a + b on sample b's vector a_b with output gradient δ_b = ∂ℓ_b/∂y_b,
sample b's gradient is ∇_W ℓ_b = δ_b a_bᵀ and ∇_b ℓ_b = δ_b, so its squared norm is
‖δ_b‖² ‖a_b‖² (+ ‖δ_b‖² for the bias): the per-sample norms come from the activations and
one backward pass to the layers' outputs, and the clipped sum Σ_b c_b ∇ℓ_b, with
c_b = min(1, C/‖∇ℓ_b‖) held constant, is one ordinary backward of Σ_b c_b ℓ_b. About a
forward and two backward passes, against B per-sample gradients written and read back; the
same numbers as the materialized path up to float rounding (``tests/trust/test_privacy.py``).

Anything else (convolutions, normalization layers, sequence inputs, a parameter shared by two
layers, the vmap and loop oracles) takes the materialized path
(:meth:`gossipfl.trust.dpsgd.PrivateGradient._clipped_sum`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gossipfl.engine.oracle import per_sample_loss, write_grads
from gossipfl.engine.stacked import StackedOracle
from gossipfl.engine.stacked_layers import Features, StackedLinear


def supported(oracle) -> bool:
    """Whether :func:`clipped_sum` can run ``oracle``'s model: the stacked oracle, every
    per-client layer a Linear, no parameter in two layers."""
    if not isinstance(oracle, StackedOracle):
        return False
    layers = oracle.program.layers.values()
    names = [name for layer in layers for name in layer.names.values()]
    return all(type(layer) is StackedLinear for layer in layers) and \
        len(names) == len(set(names))


def _vectors(value, m: int, n: int) -> Tensor | None:
    """A per-client layer's input as ``[m, n, features]`` per-sample vectors (None: the
    samples are not vectors, e.g. a sequence)."""
    if isinstance(value, Features):
        return value.data.transpose(1, 2)
    rows = value.rows(m)
    return rows.reshape(m, n, rows.shape[1]) if rows.dim() == 2 else None


def clipped_sum(oracle: StackedOracle, y: Tensor, inputs: Tensor, targets: Tensor,
                mask: Tensor, wrt, clip: float) -> tuple[Tensor, Tensor] | None:
    """Masked mean loss ``[s]`` and Σ_b m_b clip_C(∇ℓ_b) ``[s, P]`` of the rows ``y``
    (parameters ``wrt``; None: all), or None when a layer's samples are not vectors."""
    s, n = mask.shape
    layout, program = oracle.layout, oracle.program
    inputs, targets, _ = oracle._training_batch(y, inputs, targets, mask)
    leaves = {name: view.detach().requires_grad_(wrt is None or name in wrt)
              for name, view in layout.views(y).items()}
    moving = [name for name in layout.names if wrt is None or name in wrt]
    taps: dict = {}
    weight = mask.to(y.dtype)
    with torch.enable_grad():
        out = program.run(leaves, inputs.reshape(-1, *inputs.shape[2:]), s, taps=taps)
        losses = per_sample_loss(out, targets, oracle.loss, sample_dims=2)  # [s, n]
        terms = []  # (layer input vectors, output, whether W and b move)
        for target, (x, yv) in taps.items():
            names = program.layers[target].names
            w, b = (names.get(k) in moving for k in ("weight", "bias"))
            if not (w or b):
                continue
            vectors = _vectors(x, s, n) if w else None
            if (w and vectors is None) or not isinstance(yv, Features):
                return None
            terms.append((vectors, yv.data, w, b))
        deltas = torch.autograd.grad((losses * weight).sum(), [t[1] for t in terms],
                                     retain_graph=True)
        squares = torch.zeros(s, n, dtype=y.dtype, device=y.device)
        for (vectors, _, w, b), delta in zip(terms, deltas, strict=True):
            norm = delta.pow(2).sum(1)  # [s, n]: ‖δ_b‖²
            if w:
                squares += norm * vectors.pow(2).sum(2)
            if b:
                squares += norm
        factor = weight
        if clip != float("inf"):
            factor = weight * (clip / squares.sqrt()).clamp(max=1.0)  # ‖g‖ = 0: inf → 1
        grads = torch.autograd.grad((losses * factor.detach()).sum(),
                                    [leaves[name] for name in moving])
    total = torch.empty_like(y)
    write_grads(layout, total, dict(zip(moving, grads, strict=True)))
    loss = (losses.detach() * weight).sum(1) / weight.sum(1).clamp_min(1)
    return loss, total


__all__ = ["clipped_sum", "supported"]
