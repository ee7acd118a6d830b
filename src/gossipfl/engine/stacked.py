"""The stacked oracle: all M clients' forward and backward as ordinary batched tensor ops.

No ``vmap``: the model is traced once with ``torch.fx``, and its graph is interpreted with the
M clients' activations as one batch (client m's N samples are rows ``m·N … m·N+N−1``). Only
the layers with parameters need to know about clients; each becomes one standard kernel
(:mod:`gossipfl.engine.stacked_layers`):

- ``Linear``:    ``Yᵀ_m = W_m X_mᵀ + b_m`` for all m in one ``baddbmm``;
- ``ConvNd``:    one grouped convolution, ``groups = M·g``, over ``[N, M·C, ...]``
  (channels-last) with the weights ``[M·O, C/g, k...]`` — a free view of the ``[M, P]`` stack;
- ``GroupNorm(G, C)``: ``GroupNorm(M·G, M·C)`` on ``[N, M·C, ...]``;
- ``LayerNorm``: normalization of each row, then each client's affine γ_m, β_m.

Everything else (ReLU, pooling, flatten, residual adds, parameter-free modules) works per
sample and runs on the batch as it is; element-wise and per-channel ops keep whichever layout
the previous layer produced, so convolutions chain without copies. ``maxpool(relu(x))`` is
rewritten as ``relu(maxpool(x))`` (exact; the ReLU then touches a quarter of the values).

Gradients: the loss is Σ_m L_m(x_m) and L_m depends on x_m only, so one backward pass gives
∂/∂x_m Σ_k L_k = ∇L_m(x_m) for every client at once.

Shared inputs (``predict(shared=True)``, M models on one test batch): values before the first
per-client layer carry no client dimension; that layer is then a single ordinary Linear/Conv
with the M clients' weights concatenated along the output dimension, e.g. one
``[M·out, in] × [in, N]`` matmul.

Memory and speed: clients are processed in blocks whose activations fit
:func:`activation_budget` (32 MiB on CPU, where blocks that stay in the allocator's reuse range
and the caches run fastest; an eighth of the GPU's memory), unless ``chunk_size`` is given.

Contract: the model's forward must treat samples independently outside the supported layers
(no BatchNorm, no ops across the batch dimension) and take one input tensor. Models that
cannot be traced, or have parameters in other module types, raise :class:`StackedUnsupported`
(``make_oracle("auto")`` then falls back to another oracle).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, fx, nn

from gossipfl.engine.compiled import CompiledFunction, GraphedBlocks, capturing
from gossipfl.engine.oracle import (
    Oracle,
    _prepare,
    check_chunk_size,
    check_loss,
    client_blocks,
    per_sample_loss,
    update_in_pieces,
    write_grads,
)
from gossipfl.engine.params import ParamLayout
from gossipfl.engine.stacked_layers import (
    Features,
    Grouped,
    Params,
    PerClient,
    Rows,
    StackedLayer,
    client_outputs,
    expand_shared,
    layer_class,
)
from gossipfl.errors import GossipflError

CONST, SHARED, STACKED = 0, 1, 2  # what a graph value depends on: nothing / the input / clients


class StackedUnsupported(GossipflError):
    """The stacked oracle cannot run this model (use the loop or vmap oracle)."""


class _NeedsExpansion(Exception):
    """A shared-input value met a per-client value: only an expanded input handles that."""


def _unsupported(reason: str) -> StackedUnsupported:
    return StackedUnsupported(
        f"engine.oracle: 'stacked' cannot run this model: {reason}; use 'loop' or 'vmap'."
    )


# --------------------------------------------------------------------------------------------
# Ops that may run on a layout other than Rows
# --------------------------------------------------------------------------------------------
# Element-wise: valid on every layout (binary ones on equal-shaped operands of one layout).
_ELEMENTWISE_MODULES = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Tanh,
    nn.Hardtanh, nn.Hardswish, nn.Identity, nn.Dropout,
)
_ELEMENTWISE_FUNCTIONS = {
    F.relu, torch.relu, F.gelu, F.silu, F.leaky_relu, torch.sigmoid, torch.tanh, F.dropout,
    operator.add, operator.mul, operator.sub, torch.add, torch.mul, torch.sub,
}
_ELEMENTWISE_METHODS = {"relu", "relu_", "sigmoid", "tanh", "add", "add_", "mul", "mul_", "sub"}
# Per (sample, channel) plane: valid on Grouped too.
_PLANE_MODULES = (
    nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d, nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d,
    nn.AdaptiveAvgPool3d, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d,
)
_PLANE_POOLS = (
    nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d,
)
_PLANE_FUNCTIONS = {
    F.max_pool1d, F.max_pool2d, F.max_pool3d, F.avg_pool1d, F.avg_pool2d, F.avg_pool3d,
    F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d,
}


def _is_elementwise(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    if node.op == "call_module":
        return type(modules[node.target]) in _ELEMENTWISE_MODULES
    if node.op == "call_function":
        return node.target in _ELEMENTWISE_FUNCTIONS
    return node.op == "call_method" and node.target in _ELEMENTWISE_METHODS


def _is_planewise(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    if node.kwargs.get("return_indices"):
        return False
    if node.op == "call_module":
        module = modules[node.target]
        if type(module) in _PLANE_POOLS:
            return not module.return_indices
        return type(module) in _PLANE_MODULES
    return node.op == "call_function" and node.target in _PLANE_FUNCTIONS


def _swap_relu_before_maxpool(graph: fx.Graph, modules: dict[str, nn.Module]) -> None:
    """Rewrite ``maxpool(relu(x))`` as ``relu(maxpool(x))`` when the ReLU feeds only the pool.

    Exact (values and gradients): ReLU is monotone, so it commutes with max, and both orders
    route the gradient to the same arg-max (zero when the maximum is ≤ 0). The ReLU then runs
    on the pooled, smaller tensor.
    """
    def is_relu(n: fx.Node) -> bool:
        return (n.op == "call_module" and type(modules.get(n.target)) is nn.ReLU) or (
            n.op == "call_function" and n.target in (F.relu, torch.relu))

    def is_pool(n: fx.Node) -> bool:
        return (n.op == "call_module" and type(modules.get(n.target)) is nn.MaxPool2d
                and not modules[n.target].return_indices)

    for pool in list(graph.nodes):
        if not is_pool(pool) or len(pool.args) != 1 or pool.kwargs:
            continue
        relu = pool.args[0]
        if not isinstance(relu, fx.Node) or not is_relu(relu) or len(relu.users) != 1:
            continue
        if relu.kwargs or len(relu.args) != 1:
            continue
        relu.replace_all_uses_with(relu.args[0])  # the pool now reads the ReLU's input
        pool.replace_all_uses_with(relu)
        relu.args = (pool,)
        pool.append(relu)  # keep topological order: the ReLU now runs right after the pool
    graph.lint()


# --------------------------------------------------------------------------------------------
# The traced program
# --------------------------------------------------------------------------------------------
def _has_state(module: nn.Module) -> bool:
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def _fetch_attr(module: nn.Module, target: str) -> Any:
    value: Any = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


class StackedProgram:
    """A traced model whose per-client layers run on the M clients at once."""

    def __init__(self, model: nn.Module, layout: ParamLayout):
        self.layout = layout
        try:
            gm = fx.symbolic_trace(model)
        except Exception as err:
            raise _unsupported(f"torch.fx cannot trace it ({type(err).__name__})") from err
        self.graph_module = gm
        self.modules = dict(gm.named_modules())
        param_names = {id(p): name for name, p in model.named_parameters()}
        self.layers: dict[str, StackedLayer] = {}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != 1:
            raise _unsupported(f"its forward takes {len(placeholders)} inputs, not 1")
        for node in gm.graph.nodes:
            self._check_node(node, param_names)
        _swap_relu_before_maxpool(gm.graph, self.modules)
        self.nodes = list(gm.graph.nodes)
        self.elementwise = {n for n in self.nodes if _is_elementwise(n, self.modules)}
        self.planewise = {n for n in self.nodes if _is_planewise(n, self.modules)}

    def _check_node(self, node: fx.Node, param_names: dict[int, str]) -> None:
        if node.op == "get_attr" and isinstance(_fetch_attr(self.graph_module, node.target),
                                                nn.Parameter):
            raise _unsupported(f"its forward uses parameter '{node.target}' directly")
        if node.op != "call_module":
            return
        module = self.modules[node.target]
        cls = layer_class(module)
        if cls is None:
            if _has_state(module):
                raise _unsupported(
                    f"module '{node.target}' ({type(module).__name__}) has parameters or "
                    f"buffers it cannot batch")
            return
        if any(True for _ in module.buffers()) or len(node.args) != 1 or node.kwargs:
            raise _unsupported(f"module '{node.target}' has buffers or extra arguments")
        names = {local: param_names[id(p)] for local, p in module.named_parameters()}
        self.layers[node.target] = cls(module, names)

    def run(self, params: Params, x: Tensor, M: int, shared: bool = False,
            taps: dict | None = None, gemm: bool = False) -> Tensor:
        """Outputs ``[M, N, *out]`` of the M clients' parameter views ``params`` (``[M, *shape]``
        each) on ``x``: client-major rows ``[M·N, *in]``, or ``[N, *in]`` shared by all
        clients when ``shared``. ``taps`` (a dict, per-client input only): filled with each
        per-client layer's ``(input, output)`` values, by module name (what DP-SGD's
        per-sample gradient norms read, gossipfl.trust.ghost). ``gemm``: the convolutions
        that :func:`~gossipfl.engine.stacked_layers.per_client_gemm` names run as per-client
        GEMMs (the compiled path)."""
        if not shared:
            return self._run(params, Rows(x), M, STACKED, taps=taps, gemm=gemm)
        try:
            return self._run(params, x, M, SHARED)
        except _NeedsExpansion:
            return self._run(params, expand_shared(x, M), M, STACKED)

    def activation_numel(self, sample_shape: tuple[int, ...],
                         dtype: torch.dtype) -> tuple[int, int]:
        """Elements of all intermediate values, and of the largest one, for one sample of one
        client (a probe on the meta device: no memory, no compute)."""
        params = {name: torch.empty((1, *shape), device="meta", dtype=dtype)
                  for name, shape in zip(self.layout.names, self.layout.shapes, strict=True)}
        sizes: list[int] = []
        x = Rows(torch.empty((1, *sample_shape), device="meta", dtype=dtype))
        self._run(params, x, 1, STACKED, sizes)
        return sum(sizes), max(sizes, default=0)

    def _run(self, params: Params, x: Any, M: int, input_kind: int,
             sizes: list[int] | None = None, taps: dict | None = None,
             gemm: bool = False) -> Tensor:
        env: dict[fx.Node, Any] = {}
        kind: dict[fx.Node, int] = {}
        for node in self.nodes:
            if node.op == "placeholder":
                env[node], kind[node] = x, input_kind
            elif node.op == "output":
                return self._output(node.args[0], env, kind, M)
            elif node.op == "call_module" and node.target in self.layers:
                env[node] = self.layers[node.target](env[node.args[0]], params, M, gemm)
                kind[node] = STACKED
                if taps is not None:
                    taps[node.target] = (env[node.args[0]], env[node])
            else:
                kinds = {kind[n] for n in node.all_input_nodes}
                if SHARED in kinds and STACKED in kinds:
                    raise _NeedsExpansion
                env[node] = self._evaluate(node, env, M)
                kind[node] = max(kinds, default=CONST)
            if sizes is not None:
                value = env[node]
                value = value.data if isinstance(value, PerClient) else value
                sizes.append(value.numel() if isinstance(value, Tensor) else 0)
        raise RuntimeError("traced graph has no output node")

    def _evaluate(self, node: fx.Node, env: dict[fx.Node, Any], M: int) -> Any:
        """A node outside the per-client layers, on the layout its inputs have when the op
        allows it, else on Rows."""
        inputs = [env[n] for n in node.all_input_nodes]
        per = [v for v in inputs if isinstance(v, PerClient)]
        if not per:
            return self._call(node, lambda n: env[n])
        layout = type(per[0])
        same = all(type(v) is layout for v in per) and len({v.data.shape for v in per}) == 1
        raw = len(per) < sum(1 for v in inputs if isinstance(v, Tensor | PerClient))
        keep = not raw and same and (
            layout is Rows
            or (layout is Grouped and (node in self.planewise or node in self.elementwise))
            or (layout is Features and node in self.elementwise))
        if keep:
            result = self._call(node, lambda n: _data(env[n]))
            return layout(result) if isinstance(result, Tensor) else result
        result = self._call(node, lambda n: _data(env[n], M, rows=True))
        return Rows(result) if isinstance(result, Tensor) else result

    def _call(self, node: fx.Node, lookup: Callable[[fx.Node], Any]) -> Any:
        args = fx.node.map_arg(node.args, lookup)
        kwargs = fx.node.map_arg(node.kwargs, lookup)
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        if node.op == "call_module":
            return self.modules[node.target](*args, **kwargs)
        return _fetch_attr(self.graph_module, node.target)  # get_attr: a constant

    @staticmethod
    def _output(result: Any, env: dict[fx.Node, Any], kind: dict[fx.Node, int],
                M: int) -> Tensor:
        if not isinstance(result, fx.Node) or not isinstance(env[result], Tensor | PerClient):
            raise _unsupported("its forward does not return one tensor")
        value = env[result]
        if kind[result] == CONST:
            raise _unsupported("its output does not depend on its input")
        if not isinstance(value, PerClient):
            value = expand_shared(value, M)  # a shared value: every client's copy
        return client_outputs(value, M)


def _data(value: Any, M: int = 0, rows: bool = False) -> Any:
    """The tensor behind a graph value (its client-major rows when ``rows``)."""
    if not isinstance(value, PerClient):
        return value
    return value.rows(M) if rows else value.data


# --------------------------------------------------------------------------------------------
# The oracle
# --------------------------------------------------------------------------------------------
class StackedOracle(Oracle):
    """All clients of a block as batched matmuls / grouped convolutions (see module doc).

    ``chunk_size`` clients per block when given; otherwise blocks (and, in ``predict``, sample
    batches) are sized so that their activations fit :func:`activation_budget`.
    """

    bounds_memory = True

    def __init__(
        self, model: nn.Module, loss: str = "cross_entropy", chunk_size: int | None = None,
        compile: bool = False, cuda_graphs: bool = False, compile_backend: str = "inductor",
    ):
        self.model = model
        self.loss = check_loss(loss)
        self.chunk_size = check_chunk_size(chunk_size)
        self.layout = ParamLayout.from_module(model)
        self.program = StackedProgram(model, self.layout)
        self._sample_numel: dict[tuple, tuple[int, int]] = {}
        # engine.compile: the client losses (and their backward) compiled per signature
        self.compiled = compile
        self._losses = CompiledFunction(functools.partial(self._client_losses, gemm=True),
                                        self._client_losses, backend=compile_backend) \
            if compile else self._client_losses
        # engine.cuda_graphs: blocks whose clients all have samples replayed from CUDA graphs
        self.cuda_graphs = cuda_graphs
        self._graphed: dict[frozenset[str] | None, GraphedBlocks] = {}

    def max_rows(self, sample_shape: tuple[int, ...], X: Tensor,
                 training: bool = True) -> int | None:
        """Samples (over all clients of a block) whose activations fit
        :func:`activation_budget`: all of a sample's values when ``training`` (autograd keeps
        them), its largest value otherwise. None when ``chunk_size`` is set or nothing is
        known."""
        if self.chunk_size:
            return None
        key = (tuple(sample_shape), X.dtype)
        if key not in self._sample_numel:
            try:
                self._sample_numel[key] = self.program.activation_numel(key[0], X.dtype)
            except Exception:  # noqa: BLE001 - a failed meta probe only means "no estimate"
                self._sample_numel[key] = (0, 0)
        total, largest = self._sample_numel[key]
        per_sample = (total if training else largest) * X.element_size()
        return max(1, activation_budget(X.device) // per_sample) if per_sample else None

    def block_size(self, M: int, sample_shape: tuple[int, ...], samples: int, X: Tensor,
                   training: bool = True) -> int:
        """Clients per block: ``chunk_size`` when set; otherwise as many as keep the block's
        activations (``samples`` per client) within :func:`activation_budget` of X's device."""
        if self.chunk_size:
            return self.chunk_size
        rows = self.max_rows(sample_shape, X, training)
        return max(M, 1) if rows is None else max(1, min(M, rows // max(samples, 1)))

    def _client_losses(self, leaves: Params, x: Tensor, targets: Tensor, mask: Tensor,
                       gemm: bool = False) -> Tensor:
        """L_i of the module docstring for the m clients of ``leaves`` (``[m, *shape]``
        each) on their samples ``x [m·B, *in]``: ``[m]``."""
        outputs = self.program.run(leaves, x, targets.shape[0], gemm=gemm)
        values = per_sample_loss(outputs, targets, self.loss, sample_dims=2)
        zero = torch.zeros((), dtype=values.dtype, device=values.device)
        return torch.where(mask, values, zero).sum(1) / mask.sum(1).clamp_min(1).to(
            values.dtype)

    def _block(self, X: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor,
               wrt: frozenset[str] | None = None, graphed: bool = False
               ) -> tuple[Tensor, dict[str, Tensor]]:
        """Loss ``[m]`` of a block of m clients and their gradients ``{name: [m, *shape]}``
        (those of ``wrt``; None: all). ``graphed``: replayed from a CUDA graph when
        ``cuda_graphs`` is on, X is on a CUDA device and its rows take at most
        :data:`GRAPH_MAX_ROWS_BYTES` (the outputs are then the graph's: read them before the
        next block)."""
        if graphed and self.cuda_graphs and X.is_cuda and \
                X.numel() * X.element_size() <= GRAPH_MAX_ROWS_BYTES and \
                not capturing():  # not within a phase's graph
            blocks = self._graphed.get(wrt)
            if blocks is None:
                blocks = self._graphed[wrt] = GraphedBlocks(
                    functools.partial(self._eager_block, wrt=wrt))
            return blocks(X, inputs, targets, mask)
        return self._eager_block(X, inputs, targets, mask, wrt)

    def _eager_block(self, X: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor,
                     wrt: frozenset[str] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """:meth:`_block` without a graph: the losses (compiled or not) and autograd."""
        leaves = {name: v.detach().requires_grad_(wrt is None or name in wrt) for name, v in
                  self.layout.views(X).items()}
        names = [n for n in self.layout.names if wrt is None or n in wrt]
        with torch.enable_grad():
            client = self._losses(leaves, inputs.reshape(-1, *inputs.shape[2:]), targets, mask)
            grads = torch.autograd.grad(client.sum(), [leaves[n] for n in names],
                                        allow_unused=True, materialize_grads=True)
        return client.detach(), dict(zip(names, grads, strict=True))

    def _blocks(self, X: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor,
                losses: Tensor, wrt: frozenset[str] | None, use, idle=None,
                every_row_active: bool = False) -> None:
        """Every block's loss into ``losses`` and ``use(rows, grads)`` with its gradients:
        ``rows`` a slice of X's rows (all clients have samples) or an index tensor of the
        active ones (clients without samples: loss 0, no compute, and ``idle(mask)`` called
        with their bool mask when given). ``every_row_active``: the caller knows that every
        client has samples (no read of the mask back from the device: on a GPU the host then
        runs ahead of the device)."""
        sample_shape, B = inputs.shape[2:], inputs.shape[1]
        if every_row_active or bool(mask.any(1).all()):
            step = self.block_size(X.shape[0], sample_shape, B, X)
            for a, b in client_blocks(X.shape[0], step):
                losses[a:b], grads = self._block(X[a:b], inputs[a:b], targets[a:b],
                                                 mask[a:b], wrt, graphed=True)
                use(slice(a, b), grads)
            return
        active = mask.any(1)
        if idle is not None:
            idle(~active)
        ids = active.nonzero().squeeze(1)
        for a, b in client_blocks(len(ids), self.block_size(len(ids), sample_shape, B, X)):
            rows = ids[a:b]
            losses[rows], grads = self._block(X[rows], inputs[rows], targets[rows], mask[rows],
                                              wrt)
            use(rows, grads)

    def _fill(self, X: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor, losses: Tensor,
              grads: Tensor, wrt: frozenset[str] | None = None,
              every_row_active: bool = False) -> None:
        def write(rows, block_grads: dict[str, Tensor]) -> None:
            if isinstance(rows, slice):
                write_grads(self.layout, grads[rows], block_grads)  # one pass each
                return
            block = torch.empty(len(rows), self.layout.P, dtype=X.dtype, device=X.device)
            write_grads(self.layout, block, block_grads)
            grads.index_copy_(0, rows, block)

        def zero(empty: Tensor) -> None:  # clients without samples: gradient 0
            grads[empty] = 0

        self._blocks(X, inputs, targets, mask, losses, wrt, write, zero, every_row_active)

    def loss_and_step(self, X: Tensor, inputs: Tensor, targets: Tensor, mask: Tensor | None,
                      update: Callable[..., None], into: Sequence[Tensor] | None = None,
                      every_row_active: bool = False) -> Tensor:
        """:meth:`Oracle.loss_and_step` fused into the backward's output: each block's rows
        of ``into`` take ``update`` parameter by parameter, straight from autograd's
        gradients (rows without samples: with a zero gradient, as :meth:`loss_and_grad`
        gives them); bit for bit the unfused update, which reads the same values back from
        a gradient stack."""
        inputs, targets, mask = self._training_batch(X, inputs, targets, mask)
        losses = torch.zeros(X.shape[0], dtype=X.dtype, device=X.device)
        into = (X,) if into is None else tuple(into)

        @torch.no_grad()
        def rows_of(rows, step: Callable[..., None]) -> None:
            blocks = [t[rows] for t in into]  # views for a slice, copies for index rows
            step(*blocks)
            if not isinstance(rows, slice):
                for t, block in zip(into, blocks, strict=True):
                    t.index_copy_(0, rows, block)

        def descend(rows, grads: dict[str, Tensor]) -> None:
            def step(*blocks: Tensor) -> None:
                views = [self.layout.views(block) for block in blocks]
                for name, grad in grads.items():
                    update_in_pieces(update, grad, *(v[name] for v in views))

            rows_of(rows, step)

        def idle(empty: Tensor) -> None:
            rows_of(empty.nonzero().squeeze(1),
                    lambda *blocks: update_in_pieces(update, torch.zeros_like(blocks[0]),
                                                     *blocks))

        self._blocks(X, inputs, targets, mask, losses, None, descend, idle, every_row_active)
        return losses

    @torch.no_grad()
    def predict(self, X: Tensor, inputs: Tensor, shared: bool = False) -> Tensor:
        inputs, _ = _prepare(X, inputs, None)
        self.model.eval()
        sample_shape = inputs.shape[1:] if shared else inputs.shape[2:]
        samples = inputs.shape[0] if shared else inputs.shape[1]
        rows = self.max_rows(sample_shape, X, training=False)
        outs = []
        clients = self.block_size(X.shape[0], sample_shape, samples, X, training=False)
        for a, b in client_blocks(X.shape[0], clients):
            params, m = self.layout.views(X[a:b]), b - a
            step = samples if rows is None else max(1, rows // m)  # split samples too
            parts = []
            for s in range(0, samples, step):
                x = inputs[s : s + step] if shared else inputs[a:b, s : s + step].reshape(
                    -1, *sample_shape)
                parts.append(self.program.run(params, x, m, shared=shared))
            outs.append(parts[0] if len(parts) == 1 else torch.cat(parts, dim=1))
        return outs[0] if len(outs) == 1 else torch.cat(outs)


#: the largest block of rows replayed from a CUDA graph: a graph keeps a copy of its rows and
#: of their gradients, and a block that large is compute-bound (the paper-scale ResNet-18's
#: block of 100 clients, 4.5 GB, gains nothing from one launch instead of hundreds)
GRAPH_MAX_ROWS_BYTES = 2**30

CPU_ACTIVATION_BUDGET = 32 * 2**20  # bytes of forward values per block on CPU (measured)


def activation_budget(device: torch.device) -> int:
    """Bytes of forward activations one block may hold: 32 MiB on CPU, where blocks that stay
    within the allocator's reuse range and the caches run fastest (docs/benchmarks.md); an
    eighth of the device memory on CUDA."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory // 8
    return CPU_ACTIVATION_BUDGET


def supports(model: nn.Module) -> bool:
    """Whether :class:`StackedOracle` can run ``model``."""
    try:
        StackedProgram(model, ParamLayout.from_module(model))
    except StackedUnsupported:
        return False
    return True
