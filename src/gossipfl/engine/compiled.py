"""The GPU paths of the stacked oracle: a compiled training step and CUDA graphs.

Two switches of the ``engine`` section, each ``true``, ``false`` or ``auto``
(:func:`resolve_switch`, :func:`resolve_compile`; ``engine.cuda_graphs`` also ``blocks``:
:func:`resolve_graphs`):

- ``engine.compile``: the stacked program's client losses (forward, and through AOTAutograd
  the backward) as one compiled graph per input signature. The program is an interpreter
  over the model's ``torch.fx`` graph (:class:`gossipfl.engine.stacked.StackedProgram`), which
  TorchDynamo will not trace, so it is first flattened into an ATen graph by ``make_fx`` on
  fake tensors (no memory, no compute), then handed to ``torch.compile`` (inductor, static
  shapes). Inductor fuses GroupNorm, the element-wise tail and the layout copies around the
  grouped convolutions, and the convolutions of the layers where cuDNN's grouped kernel is
  slow run as one batched GEMM per layer (:func:`gossipfl.engine.stacked_layers.per_client_gemm`).
  The numbers equal the eager ones to float rounding (tested: 1e-5 relative on the CPU and on
  an H200), not bit for bit. ``auto`` is on for a CUDA device and a model with GroupNorm
  layers (the ResNet-18-GN family), where the H200 measured it (:func:`resolve_compile`),
  and off elsewhere.
- ``engine.cuda_graphs``: each block's loss and gradients (:meth:`StackedOracle._block`,
  eager or compiled) captured once per shape as a ``torch.cuda.CUDAGraph`` and replayed:
  one launch instead of one per kernel, the same kernels as the uncaptured block: the same
  bits where the block is matmuls (the mlp, tested on an H200), float32 rounding where cuDNN
  convolutions choose another algorithm under capture (the cnn: tested to 1e-4). The block's rows, inputs, targets and mask are copied into the graph's
  static buffers before each replay (a copy of the rows: 2·m·P·4 bytes moved, against the
  step's own traffic of several such passes), and its losses and gradients are read from the
  graph's outputs. Only blocks whose clients all have samples and whose shapes repeat are
  captured (every built-in model, with full or partial participation of a fixed sample size);
  where a graph cannot be captured, the block runs eagerly and the reason is logged once.
  ``auto`` is on for a CUDA device: the mlp's DFedAvg round (M = 100, one epoch of 600)
  3.3x faster on an H200 (``benchmarks/results/gpu_h200_20261128``). Where a whole local
  phase can be recorded, :mod:`gossipfl.schedules.phase_graph` records it instead (with
  :class:`GraphedBlocks` too), and the blocks inside it are not graphed again
  (:func:`capturing`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from gossipfl.errors import GossipflError

log = logging.getLogger(__name__)

SWITCHES = ("auto", True, False)


def check_switch(key: str, value: Any, *more: str) -> bool | str:
    """``engine.compile`` / ``engine.cuda_graphs``: true, false or "auto" (or one of
    ``more``: ``engine.cuda_graphs`` takes "blocks")."""
    if isinstance(value, bool) or value == "auto" or value in more:
        return value
    words = ", ".join(("true", "false", "auto", *more)[:-1])
    last = ("auto", *more)[-1]
    raise GossipflError(f"{key}: must be {words} or {last}, got {value!r}.")


def resolve_switch(value: bool | str, device: torch.device | str) -> bool:
    """A switch's value on ``device``: "auto" is on exactly for a CUDA device."""
    if value == "auto":
        return torch.device(device).type == "cuda"
    return bool(value)


def resolve_graphs(value: bool | str, device: torch.device | str) -> tuple[bool, bool]:
    """``engine.cuda_graphs`` on ``device`` as (the oracle's blocks graphed, whole local
    phases graphed): true and "auto" on a CUDA device both; "blocks" the blocks alone (each
    block's forward and backward, the rest of a step eager: what a phase graph supersedes,
    kept as a way back); false neither."""
    check_switch("engine.cuda_graphs", value, "blocks")
    if value == "blocks":
        return True, False
    on = resolve_switch(value, device)
    return on, on


def resolve_compile(value: bool | str, device: torch.device | str,
                    model: torch.nn.Module | None = None) -> bool:
    """``engine.compile`` on ``device`` for ``model``: "auto" is on for a CUDA device and a
    model with GroupNorm layers, off otherwise. Measured on an H200 (issue 48,
    ``benchmarks/results/gpu_h200_20261128/gpu_compile.jsonl``): the paper-scale
    ResNet-18-GN round 1.54x faster compiled in TF32 and 2.03x in bf16, after a first round
    that compiles for about 100 s (amortized after 15-20 rounds); the mlp's round 0.94x
    (slower: nothing for inductor to fuse in three matmuls); the cnn not measured. The
    CPU (2 cores) compiles the ResNet for a minute and runs it slower: off."""
    check_switch("engine.compile", value)
    if value != "auto":
        return bool(value)
    return torch.device(device).type == "cuda" and model is not None and any(
        isinstance(m, torch.nn.GroupNorm) for m in model.modules())


def _signature(value: Any) -> Any:
    """What a compiled graph or a captured graph depends on: shapes, dtypes, devices, layouts
    (strides) of every tensor in a nested argument, and the autocast state."""
    if isinstance(value, Tensor):
        return (tuple(value.shape), value.stride(), value.dtype, value.device.type,
                value.requires_grad)
    if isinstance(value, dict):
        return tuple((k, _signature(v)) for k, v in value.items())
    if isinstance(value, (tuple, list)):
        return tuple(_signature(v) for v in value)
    return value


def _autocast_state(device: torch.device) -> tuple:
    kind = device.type
    if kind not in ("cuda", "cpu"):
        return ()
    if not torch.is_autocast_enabled(kind):
        return (False,)
    return (True, torch.get_autocast_dtype(kind))


class CompiledFunction:
    """``fn(*args)`` compiled once per argument signature: flattened by ``make_fx`` on fake
    tensors (the interpreter's Python runs once, at trace time), then ``torch.compile`` of
    that ATen graph. ``fn`` must be a pure function of tensors (nested in dicts/tuples)
    whose Python control flow depends only on shapes."""

    #: signatures compiled at most; further ones run ``fallback`` (a compile of a large model
    #: takes a minute: a block size that changes every step must not recompile every step)
    MAX_SIGNATURES = 8

    def __init__(self, fn: Callable[..., Tensor], fallback: Callable[..., Tensor],
                 backend: str = "inductor"):
        self.fn = fn
        self.fallback = fallback
        self.backend = backend
        self._compiled: dict[Any, Callable[..., Tensor]] = {}

    def __call__(self, *args: Any) -> Tensor:
        device = next(a for a in _tensors(args)).device
        key = (_signature(args), _autocast_state(device))
        compiled = self._compiled.get(key)
        if compiled is None:
            if len(self._compiled) >= self.MAX_SIGNATURES:
                if len(self._compiled) == self.MAX_SIGNATURES:
                    log.warning("engine.compile: more than %d block shapes; the others run "
                                "uncompiled.", self.MAX_SIGNATURES)
                    self._compiled[None] = self.fallback
                return self.fallback(*args)
            compiled = self._compiled[key] = self._compile(args)
        return compiled(*args)

    def _compile(self, args: tuple) -> Callable[..., Tensor]:
        from torch.fx.experimental.proxy_tensor import make_fx

        log.info("engine.compile: compiling a block of shapes %s (once per shape; the paper-"
                 "scale ResNet-18-GN takes about 100 s on an H200; engine.compile: false "
                 "skips it)", [tuple(t.shape) for t in _tensors(args)][:4])
        plain = _detached(args)
        with torch.no_grad():
            graph = make_fx(self.fn, tracing_mode="fake")(*plain)
        return torch.compile(graph, backend=self.backend, dynamic=False, fullgraph=True)


def _tensors(value: Any):
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)


def _detached(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.detach()
    if isinstance(value, dict):
        return {k: _detached(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(v) for v in value)
    return value


class GraphedBlocks:
    """Calls of a function of tensors replayed from CUDA graphs, one graph per argument
    signature (a block of a stacked step; a whole local phase, :mod:`gossipfl.schedules.phase_graph`).

    ``block(*args)`` (e.g. ``(X, inputs, targets, mask)`` → ``(loss [m], {name: grad})``) is
    captured on its first call with a new signature (after warm-up iterations on a side
    stream, which also compile a compiled block) and replayed afterwards: ``args`` are copied
    into the graph's static inputs, the graph is replayed, and the arguments that the function
    changes in place (those whose version counters its warm-up moved: the recorder's
    ``written``) take the static inputs' new values back, so a call means what an eager call
    means. The returned tensors are the graph's static
    outputs: valid until the next call with the same signature, which is how the oracle uses
    them (read at once, never kept). ``WARMUP`` eager calls precede the capture (cuDNN and the
    caching allocator settle there); they run on the static copies, so a failed capture
    leaves the arguments as they were and the call runs eagerly.

    ``capture(block, args, warmup)``: what records and replays (default
    :class:`CapturedGraph`, a ``torch.cuda.CUDAGraph``; :class:`TracedGraph` is its CPU
    stand-in, with the same contract: Python runs once, the values it reads are baked in, a
    read of a tensor's value on the host is refused)."""

    WARMUP = 2
    #: signatures captured at most (each graph keeps its outputs, a gradient stack of the
    #: block, alive); further ones run eagerly
    MAX_GRAPHS = 4

    def __init__(self, block: Callable[..., Any], capture: Callable[..., Any] | None = None):
        self.block = block
        self.capture = CapturedGraph if capture is None else capture
        self._graphs: dict[Any, Any] = {}
        self.failures: dict[str, str] = {}  # reason -> the signature it happened for
        self.replays = 0  # calls replayed from a graph

    def __call__(self, *args: Tensor) -> Any:
        device = args[0].device
        key = (_signature(args), _autocast_state(device), torch.is_grad_enabled())
        captured = self._graphs.get(key, ())
        if captured == ():
            full = sum(g is not None for g in self._graphs.values()) >= self.MAX_GRAPHS
            captured = self._graphs[key] = None if full else self._capture(args)
        if captured is None:  # the reason was logged at capture
            return self.block(*args)
        for static, value in zip(captured.inputs, args, strict=True):
            static.copy_(value)
        outputs = captured.replay()
        self.replays += 1
        for i in captured.written:
            args[i].copy_(captured.inputs[i])
        return outputs

    @property
    def captured(self) -> int:
        """How many signatures replay from a graph."""
        return sum(g is not None for g in self._graphs.values())

    def _capture(self, args: tuple[Tensor, ...]) -> Any:
        global _capturing
        _capturing += 1
        try:
            return self.capture(self.block, args, self.WARMUP)
        except Exception as err:  # noqa: BLE001 - a block that cannot be captured runs eagerly
            reason = f"{type(err).__name__}: {err}".splitlines()[0][:200]
            if reason not in self.failures:
                self.failures[reason] = str(_signature(args))[:200]
                log.warning("engine.cuda_graphs: a block of shapes %s runs without a CUDA "
                            "graph (%s).", [tuple(a.shape) for a in args], reason)
            if args[0].is_cuda:
                torch.cuda.synchronize(args[0].device)
            return None
        finally:
            _capturing -= 1


#: graphs being warmed up or captured (a graph's function runs within)
_capturing = 0


def capturing() -> bool:
    """Whether a graph's function is being warmed up or captured: a graph within it would
    nest (the oracle's block graphs within a phase's, :mod:`gossipfl.schedules.phase_graph`)."""
    return _capturing > 0


class CapturedGraph:
    """One captured call: static inputs, the CUDA graph, static outputs, and the inputs the
    call changes in place (:attr:`written`: seen by their version counters over the warm-up
    and the capture)."""

    def __init__(self, block: Callable, args: tuple[Tensor, ...], warmup: int):
        device = args[0].device
        if device.type != "cuda":
            raise RuntimeError("CUDA graphs capture CUDA tensors only")
        self.inputs = tuple(a.detach().clone() for a in args)
        versions = _versions(self.inputs)
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                block(*self.inputs)
        torch.cuda.current_stream(device).wait_stream(stream)
        torch.cuda.synchronize(device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = block(*self.inputs)
        self.written = _written(self.inputs, versions)

    def replay(self) -> Any:
        """The graph on its static inputs (the caller has copied the call's values in)."""
        self.graph.replay()
        return self.outputs


def _versions(inputs: tuple[Tensor, ...]) -> tuple[int, ...]:
    return tuple(t._version for t in inputs)


def _written(inputs: tuple[Tensor, ...], versions: tuple[int, ...]) -> tuple[int, ...]:
    """The positions of ``inputs`` changed in place since ``versions`` (a write through a
    view moves its base's counter too)."""
    return tuple(i for i, (t, v) in enumerate(zip(inputs, versions, strict=True))
                 if t._version != v)


class TracedGraph:
    """A CUDA graph's contract on any device, to check a function against it where no GPU is:
    the call is traced once by ``make_fx`` on fake tensors (its Python runs once, every Python
    value it reads is baked into the trace, and a read of a tensor's value on the host, which
    a capture refuses, fails the trace), and each replay runs the trace on the static inputs.
    Tensors the function reads from its closure (a dataset, a model's buffers) are kept by
    the trace as they are, as a graph keeps their addresses. The replayed numbers are the
    eager function's on the same inputs, bit for bit (the same ATen operations). One eager
    call on the static inputs precedes the trace, as a capture's warm-up does: the inputs it
    changes in place are :attr:`written`."""

    def __init__(self, block: Callable, args: tuple[Tensor, ...], warmup: int):
        from torch.fx.experimental.proxy_tensor import make_fx

        self.inputs = tuple(a.detach().clone() for a in args)
        versions = _versions(self.inputs)
        block(*self.inputs)  # eager, as a capture's warm-up: it shows what the call writes
        self.written = _written(self.inputs, versions)
        self.trace = make_fx(block, tracing_mode="fake",
                             _allow_non_fake_inputs=True)(*self.inputs)
        # a trace that cannot run (a CPU kernel whose workspace the fake tensors did not
        # keep: the LSTM's) is refused here, as a failed capture is, not at its replay
        self.trace(*self.inputs)
        self.outputs = None

    def replay(self) -> Any:
        """The trace on its static inputs (the caller has copied the call's values in)."""
        self.outputs = self.trace(*self.inputs)
        return self.outputs


__all__ = [
    "SWITCHES",
    "CapturedGraph",
    "CompiledFunction",
    "GraphedBlocks",
    "TracedGraph",
    "capturing",
    "check_switch",
    "resolve_compile",
    "resolve_graphs",
    "resolve_switch",
]
