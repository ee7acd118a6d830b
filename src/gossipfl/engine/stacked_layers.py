"""Per-client values and layers of the stacked oracle (see :mod:`gossipfl.engine.stacked`).

A value that depends on the M clients' parameters is held in whichever of three layouts the
next kernel wants, each a different view of the same logical rows ``[M·N, ...]`` (client m's
N samples, client-major):

- :class:`Rows`     ``data [M·N, ...]``: what any per-sample op (flatten, view, cat, …) takes;
- :class:`Grouped`  ``data [N, M·C, *spatial]`` (channels-last for 2-d): the clients' channels
  side by side, so a per-client convolution is one grouped convolution and pooling, ReLU and
  GroupNorm run on it unchanged;
- :class:`Features` ``data [M, F, N]``: a per-client Linear is ``W_m X_mᵀ`` for all m in one
  ``baddbmm``, whose weight gradient ``δ_m X_m`` then comes out in the parameters' own layout.

Conversions cost one copy and happen only where a kernel needs another layout.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

Params = dict[str, Tensor]


# --------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------
class PerClient:
    """A per-client value; ``rows(M)`` is its client-major ``[M·N, ...]`` tensor."""

    __slots__ = ("data",)

    def __init__(self, data: Tensor):
        self.data = data

    def rows(self, M: int) -> Tensor:
        raise NotImplementedError


class Rows(PerClient):
    """``data [M·N, ...]``: rows of client 0, then client 1, …"""

    __slots__ = ()

    def rows(self, M: int) -> Tensor:
        return self.data


class Grouped(PerClient):
    """``data [N, M·C, *spatial]``: channel ``m·C + c`` is channel c of client m."""

    __slots__ = ()

    def rows(self, M: int) -> Tensor:
        t = self.data.unflatten(1, (M, self.data.shape[1] // M)).transpose(0, 1)
        return t.reshape(M * t.shape[1], *t.shape[2:])


class Features(PerClient):
    """``data [M, F, N]``: client m's N feature vectors as columns."""

    __slots__ = ()

    def rows(self, M: int) -> Tensor:
        return self.data.transpose(1, 2).reshape(-1, self.data.shape[1])


def client_outputs(value: PerClient, M: int) -> Tensor:
    """``[M, N, *out]`` for a per-client output value (a view where the layout allows)."""
    if isinstance(value, Features):
        return value.data.transpose(1, 2)
    rows = value.rows(M)
    return rows.view(M, rows.shape[0] // M, *rows.shape[1:])


def expand_shared(x: Tensor, M: int) -> Rows:
    """``x [N, ...]``, the same for every client, as client-major rows ``[M·N, ...]``."""
    return Rows(x.unsqueeze(0).expand(M, *x.shape).reshape(M * x.shape[0], *x.shape[1:]))


def grouped(value: PerClient, M: int) -> Tensor:
    """``[N, M·C, *spatial]`` of a per-client value (channels-last when 4-d: one copy)."""
    if isinstance(value, Grouped):
        return value.data
    rows = value.rows(M)
    t = rows.view(M, rows.shape[0] // M, *rows.shape[1:])  # [M, N, C, *sp]
    if t.dim() == 5:  # → memory (n, h, w, m, c): channels-last [N, M·C, H, W]
        n, c, h, w = t.shape[1:]
        t = t.permute(1, 3, 4, 0, 2).contiguous().view(n, h, w, M * c)
        return t.permute(0, 3, 1, 2)
    return t.transpose(0, 1).reshape(t.shape[1], M * t.shape[2], *t.shape[3:])


def channels_last(x: Tensor) -> Tensor:
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x


# --------------------------------------------------------------------------------------------
# Per-client layers
# --------------------------------------------------------------------------------------------
class StackedLayer:
    """A module whose parameters differ per client; ``params`` maps its local parameter names
    (``"weight"``) to the views ``[M, *shape]`` of the stack."""

    def __init__(self, module: nn.Module, names: dict[str, str]):
        self.module = module
        self.names = names  # local parameter name -> ParamLayout name

    def __call__(self, x: PerClient | Tensor, params: Params, M: int,
                 gemm: bool = False) -> PerClient:
        """A per-client value, or a plain tensor ``[N, ...]`` shared by all clients.
        ``gemm``: convolutions may run as per-client GEMMs where :func:`per_client_gemm`
        says so (the compiled path)."""
        p = {local: params[name] for local, name in self.names.items()}
        return self.stacked(x, p, M, gemm) if isinstance(x, PerClient) else \
            self.shared(x, p, M)

    def stacked(self, x: PerClient, p: Params, M: int, gemm: bool = False) -> PerClient:
        """The layer on a per-client value (``gemm``: only convolutions read it)."""
        raise NotImplementedError

    def shared(self, x: Tensor, p: Params, M: int) -> PerClient:
        """Default for a shared input: give every client its copy."""
        return self.stacked(expand_shared(x, M), p, M)


def _bias(p: Params) -> Tensor | None:
    return p["bias"].reshape(-1) if "bias" in p else None


class StackedLinear(StackedLayer):
    """y = W_m x + b_m: ``Yᵀ_m = W_m X_mᵀ (+ b_m)`` for all m in one (b)addbmm."""

    def stacked(self, x: PerClient, p: Params, M: int, gemm: bool = False) -> PerClient:
        if isinstance(x, Features):
            xt = x.data
            inner: tuple[int, ...] = ()
        else:
            rows = x.rows(M)
            inner = tuple(rows.shape[1:-1])
            xt = rows.reshape(M, -1, rows.shape[-1]).transpose(1, 2)  # [M, F, N·S]
        w = p["weight"]
        y = (torch.baddbmm(p["bias"].unsqueeze(2), w, xt) if "bias" in p
             else torch.bmm(w, xt))  # [M, O, N·S]
        if not inner:
            return Features(y)
        return Rows(y.transpose(1, 2).reshape(-1, *inner, y.shape[1]))

    def shared(self, x: Tensor, p: Params, M: int) -> PerClient:
        w = p["weight"]
        w_all = w.reshape(M * w.shape[1], w.shape[2])  # the clients' output units in a row
        if x.dim() == 2:  # [M·O, F] @ [F, N]: one matmul for all clients
            y = w_all @ x.T if "bias" not in p else torch.addmm(_bias(p).unsqueeze(1), w_all,
                                                                x.T)
            return Features(y.view(M, w.shape[1], x.shape[0]))
        y = F.linear(x, w_all, _bias(p)).unflatten(-1, (M, w.shape[1])).movedim(-2, 0)
        return Rows(y.reshape(M * x.shape[0], *y.shape[2:]))


_CONV_FN: dict[type, Callable[..., Tensor]] = {
    nn.Conv1d: F.conv1d, nn.Conv2d: F.conv2d, nn.Conv3d: F.conv3d,
}


#: per_client_gemm's rule, from the per-layer measurements of the paper-scale ResNet-18-GN on
#: an H200 (docs/benchmarks.md, "The GPU paths, per layer"): compiled, the per-client GEMM
#: beats cuDNN's grouped convolution 2-9x on every strided and 1x1 layer and on the stride-1
#: 3x3 layers of output planes up to 8x8 (256 and 512 channels); cuDNN wins on the stride-1
#: layers of 16x16 and 32x32 planes and on the stem (3 input channels: a GEMM of inner
#: dimension 27)
GEMM_MAX_PLANE = 64
GEMM_MIN_IN_CHANNELS = 16


def per_client_gemm(module: nn.Module, in_hw: tuple[int, ...]) -> bool:
    """Whether the stacked 2-d convolution ``module`` on ``in_hw`` input planes runs as one
    batched GEMM per client (im2col, then ``bmm`` over clients) rather than as one grouped
    convolution: strided and 1x1 convolutions, and those whose output plane has at most
    :data:`GEMM_MAX_PLANE` positions, with at least :data:`GEMM_MIN_IN_CHANNELS` input
    channels (ordinary convolutions only: one group, no dilation, zero padding)."""
    if type(module) is not nn.Conv2d or module.groups != 1 or module.dilation != (1, 1) \
            or module.padding_mode != "zeros" or isinstance(module.padding, str) \
            or len(in_hw) != 2 or module.in_channels < GEMM_MIN_IN_CHANNELS:
        return False
    if module.stride != (1, 1) or module.kernel_size == (1, 1):
        return True
    (kh, kw), (ph, pw) = module.kernel_size, module.padding
    return (in_hw[0] + 2 * ph - kh + 1) * (in_hw[1] + 2 * pw - kw + 1) <= GEMM_MAX_PLANE


def conv2d_gemm(x: Tensor, weight: Tensor, bias: Tensor | None, stride: tuple[int, int],
                padding: tuple[int, int], M: int) -> Tensor:
    """The M clients' 2-d convolutions of a grouped value ``x [N, M·C, H, W]`` with the
    weights ``[M, O, C, kh, kw]`` (bias ``[M, O]``) as one batched matrix product:
    y_m = W_m · im2col(x_m), ``[M, O, C·kh·kw] × [M, C·kh·kw, N·L]``; returned as the
    grouped value ``[N, M·O, Ho, Wo]`` (a view of the product: no copy)."""
    N, _, H, W = x.shape
    _, O, C, kh, kw = weight.shape
    cols = F.unfold(x, (kh, kw), padding=padding, stride=stride)  # [N, M·C·kh·kw, L]
    L = cols.shape[-1]
    cols = cols.view(N, M, C * kh * kw, L).permute(1, 2, 0, 3).reshape(M, C * kh * kw, N * L)
    w = weight.reshape(M, O, C * kh * kw)
    y = torch.bmm(w, cols) if bias is None else torch.baddbmm(bias.unsqueeze(2), w, cols)
    Ho = (H + 2 * padding[0] - kh) // stride[0] + 1
    Wo = (W + 2 * padding[1] - kw) // stride[1] + 1
    return y.view(M, O, N, Ho, Wo).permute(2, 0, 1, 3, 4).reshape(N, M * O, Ho, Wo)


class StackedConv(StackedLayer):
    """Per-client ConvNd as one grouped convolution (groups = M·g) on ``[N, M·C, ...]``;
    2-d convolutions run channels-last (faster on CPU, see docs/benchmarks.md). On the
    compiled path (``gemm``), the layers :func:`per_client_gemm` names run as per-client
    GEMMs (:func:`conv2d_gemm`): the same convolution, summed in another order."""

    def _conv(self, x: Tensor, p: Params, groups: int) -> Tensor:
        m, w = self.module, p["weight"]
        padding = m.padding
        if m.padding_mode != "zeros":
            x = F.pad(x, m._reversed_padding_repeated_twice, mode=m.padding_mode)
            padding = 0
        fn = next(fn for cls, fn in _CONV_FN.items() if isinstance(m, cls))
        return fn(channels_last(x), w.reshape(w.shape[0] * w.shape[1], *w.shape[2:]), _bias(p),
                  m.stride, padding, m.dilation, groups)

    def stacked(self, x: PerClient, p: Params, M: int, gemm: bool = False) -> Grouped:
        data = grouped(x, M)
        m = self.module
        if gemm and per_client_gemm(m, tuple(data.shape[2:])):
            return Grouped(conv2d_gemm(data, p["weight"], p.get("bias"), m.stride, m.padding,
                                       M))
        return Grouped(self._conv(data, p, m.groups * M))

    def shared(self, x: Tensor, p: Params, M: int) -> PerClient:
        if self.module.groups != 1:
            return super().shared(x, p, M)
        return Grouped(self._conv(x, p, 1))  # the clients' filters as one filter bank


class StackedGroupNorm(StackedLayer):
    """GroupNorm(G, C) per client = GroupNorm(M·G, M·C) on ``[N, M·C, ...]``."""

    def stacked(self, x: PerClient, p: Params, M: int, gemm: bool = False) -> Grouped:
        m = self.module
        weight = p["weight"].reshape(-1) if "weight" in p else None
        return Grouped(F.group_norm(grouped(x, M), M * m.num_groups, weight, _bias(p), m.eps))


class StackedLayerNorm(StackedLayer):
    """Row-wise normalization over the last dims, then client m's affine γ_m ⊙ y + β_m."""

    def stacked(self, x: PerClient, p: Params, M: int, gemm: bool = False) -> Rows:
        m, rows = self.module, x.rows(M)
        y = F.layer_norm(rows, m.normalized_shape, None, None, m.eps)
        y = y.view(M, -1, *rows.shape[1:])
        shape = (M,) + (1,) * (rows.dim() - len(m.normalized_shape)) + tuple(m.normalized_shape)
        if "weight" in p:
            y = y * p["weight"].view(shape)
        if "bias" in p:
            y = y + p["bias"].view(shape)
        return Rows(y.reshape(rows.shape))


LAYERS: dict[type, type[StackedLayer]] = {
    nn.Linear: StackedLinear,
    nn.Conv1d: StackedConv,
    nn.Conv2d: StackedConv,
    nn.Conv3d: StackedConv,
    nn.GroupNorm: StackedGroupNorm,
    nn.LayerNorm: StackedLayerNorm,
}


def layer_class(module: nn.Module) -> type[StackedLayer] | None:
    """The stacked implementation of ``module``'s type (or of a base class), if any."""
    for cls in type(module).__mro__:
        if cls in LAYERS:
            return LAYERS[cls]
    return None
