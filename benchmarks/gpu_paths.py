"""The GPU paths of issue 39 (part 4), measured in one short run on a borrowed H100/H200:
where the stacked ResNet-18-GN's convolutions sit against the GPU's peaks, what CUDA graphs
give the small models' local step, how packing runs into one stack fills the GPU, and how far
the [M, P] stack goes for a million logistic-regression clients.

    PYTHONPATH=src python -m benchmarks.gpu_paths --out $OUT/gpu_paths.jsonl  # GPU, ~6 min
    PYTHONPATH=src python -m benchmarks.gpu_paths --device cpu --small --out x.jsonl  # check

Every result is one JSON line of ``--out`` (written as it comes: a run cut short keeps what it
measured); a Markdown summary goes to stdout at the end of each section. Each section has its
own time budget (``--budget`` seconds in all, default 300, shared as in ``BUDGET_SHARES``; a
case running when its budget ends finishes, and the run stops new work at 1.15 × the budget)
and runs inside try/except, as does every case: an error is recorded (``"error"``) and the
run goes on. Expected wall time: the budget plus ~20–40 s (CUDA start-up, imports, the case
in flight at each budget's end). Every case checks ``torch.cuda.mem_get_info`` before
allocating and is recorded as ``"skipped"`` when it would not fit. Timers synchronize the
device before and after; each number is the median of a few repeats after warm-up.
Synthetic data throughout (the machine is offline).

Sections:

1. ``machine``: GPU, torch/CUDA/cuDNN versions, measured matmul peaks (fp32 with TF32 off, TF32,
   bf16; n = 8192) and device copy/triad bandwidth (``benchmarks.common``).
2. ``conv_layers``: every distinct convolution of the paper-scale ResNet-18-GN (CIFAR-10's
   3×32×32, batch 32 per client, M = 100 clients), found by running gossipfl's own model, as
   the stacked oracle runs it: one grouped convolution (groups = M) over ``[N, M·C, H, W]``
   (:class:`gossipfl.engine.stacked_layers.StackedConv`, channels-last). Forward + backward
   (input gradient, except for the first layer whose input needs none, and weight gradient)
   per formulation: cuDNN grouped in NCHW and channels-last, each fp32 (TF32 off), TF32 and
   bf16 autocast, channels-last with ``cudnn.benchmark`` autotuning; a batched GEMM per client
   (im2col by ``F.unfold``, then ``torch.bmm`` over clients) in TF32 and bf16; and
   ``torch.compile`` of the grouped convolution and of the GEMM (after a tiny compile checks
   that compiling works; its error is recorded otherwise; ``--compile-mode`` picks e.g.
   ``max-autotune-no-cudagraphs``, ``--compile off`` skips them; the heaviest layers are
   compiled first, as long as ``--compile-reserve`` seconds of the section's budget are
   left). Per layer: ms, TFLOP/s (2·MACs·3 for forward + backward, 2·MACs·2 for the first
   layer), the best formulation;
   then the network's sum (each shape × how often it occurs) for the best against cuDNN
   grouped fp32 and TF32 (gossipfl's path today). Then one whole stacked local step
   (``StackedOracle.loss_and_step``, M = 100) timed in fp32/TF32/bf16 and profiled
   (``torch.profiler``) in TF32: the top 15 ops by self CUDA time and the time per op family
   (convolution, GroupNorm, matmul, copies/layout, element-wise, …).
3. ``cuda_graphs``: one local SGD step (forward, backward, update) of gossipfl's stacked oracle
   for the mlp 784-200-200-10 and the cnn (1×28×28, batch 32), M = 100 and 20: eagerly through
   the public ``loss_and_step`` (what the runner calls, one host sync included), eagerly
   through the same block function that is captured, and replayed from a CUDA graph
   (``torch.cuda.CUDAGraph``; static X, input and target buffers; warm-up on a side stream).
   The captured function is the oracle's own ``_block`` (loss and gradients of all clients)
   plus the update ``X_p −= η·grad_p`` per parameter view — what ``loss_and_step`` does for a
   block of clients that all have samples. Steps/s and the ratio; the graph's X after one step
   is compared with the eager step's.
4. ``packed_throughput``: the cnn's step for M = 20 × S, S ∈ (1, 8, 32) runs packed into one
   stack: samples/s eager and graph-replayed, against S = 1.
5. ``gossip_scale``: logistic regression (784→10, P = 7850), M ∈ (1e4, 1e5, 1e6) clients with
   one sample each: one round = one SGD step of batch 1 for all clients (gossipfl's stacked
   oracle on ``[M, P]``) + one gossip step on the ring, x_i ← (x_{i−1} + x_i + x_{i+1})/3,
   done with ``torch.roll`` (one rolled temporary), with shifted slices into one output (no
   temporary), or as a sparse CSR matmul (3M nonzeros). Seconds per round (step and gossip
   apart), peak memory (``max_memory_allocated``) against the analytical bytes
   (copies of [M, P] float32), and the effective GB/s (the minimum traffic: X read and
   written once) against the measured copy bandwidth. Sizes that do not fit the free memory
   are skipped and say so.

Nothing in gossipfl depends on this file or on a GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time
import traceback
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.common import bandwidth, machine, markdown_table, matmul_peak, median
from gossipfl.engine import init_stack
from gossipfl.engine.stacked import StackedOracle
from gossipfl.models import build_model

SECTIONS = ("machine", "conv_layers", "cuda_graphs", "packed_throughput", "gossip_scale")
#: each section's share of ``--budget`` (seconds it may start new cases in)
BUDGET_SHARES = {"machine": 0.05, "conv_layers": 0.50, "cuda_graphs": 0.12,
                 "packed_throughput": 0.13, "gossip_scale": 0.20}
MEMORY_FRACTION = 0.8  # of the free device memory a case may plan to use


# --------------------------------------------------------------------------------------------
# Plumbing: output, timing, precision, memory
# --------------------------------------------------------------------------------------------
class Recorder:
    """JSON lines to ``path`` (flushed per record) and the Markdown summary to stdout."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("w")
        self.records: list[dict[str, Any]] = []

    def __call__(self, section: str, case: str, **values: Any) -> dict[str, Any]:
        record = {"section": section, "case": case, **values}
        self.records.append(record)
        self.file.write(json.dumps(record, default=str) + "\n")
        self.file.flush()
        return record

    def close(self) -> None:
        self.file.close()


def say(*lines: str) -> None:
    print(*lines, sep="\n", flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, reps: int = 3, warmup: int = 1,
          deadline: float | None = None) -> list[float]:
    """Seconds of ``reps`` calls (each between synchronizations) after ``warmup`` calls; fewer
    repeats (at least one) once ``deadline`` has passed."""
    for _ in range(warmup):
        fn()
    times: list[float] = []
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
        if deadline is not None and time.perf_counter() > deadline:
            break
    return times


@contextmanager
def precision(mode: str, device: torch.device, autotune: bool = False) -> Iterator[None]:
    """TF32 flags (fp32: off; tf32 and bf16: on), bf16 autocast for ``bf16``, and
    ``cudnn.benchmark`` = ``autotune``; everything restored after."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.backends.cudnn.benchmark)
    tf32 = mode != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = autotune
    cast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if mode == "bf16"
            else nullcontext())
    try:
        with cast:
            yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
         torch.backends.cudnn.benchmark) = saved


def free_bytes(device: torch.device) -> int | None:
    """Free device memory (None on the CPU: no check there)."""
    if device.type != "cuda":
        return None
    torch.cuda.empty_cache()  # what the allocator holds unused counts as free
    return torch.cuda.mem_get_info(device)[0]


def fits(device: torch.device, planned: float,
         fraction: float = MEMORY_FRACTION) -> tuple[bool, str]:
    free = free_bytes(device)
    if free is None or planned <= fraction * free:
        return True, ""
    return False, (f"needs ~{planned / 2**30:.1f} GiB, {fraction:.0%} of the free "
                   f"{free / 2**30:.1f} GiB is less")


def release(device: torch.device) -> None:
    if device.type == "cuda":  # (the CPU's small runs skip the slow full collection)
        gc.collect()
        torch.cuda.empty_cache()


def peak_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


class Budget:
    """A section's deadline (never past the run's)."""

    def __init__(self, seconds: float, run_deadline: float):
        self.deadline = min(time.perf_counter() + seconds, run_deadline)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def over(self, need: float = 0.0) -> bool:
        return self.left() < need


# --------------------------------------------------------------------------------------------
# 1. machine
# --------------------------------------------------------------------------------------------
def section_machine(ctx: Context) -> None:
    device, small = ctx.device, ctx.small
    info = machine(device)
    info["python"] = sys.version.split()[0]
    info["cuda"] = torch.version.cuda
    info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    try:
        import triton  # optional; only its version is recorded

        info["triton"] = triton.__version__
    except Exception as err:  # noqa: BLE001
        info["triton"] = f"not importable: {type(err).__name__}"
    n = 256 if small else 8192
    for mode, dtype in (("fp32", torch.float32), ("tf32", torch.float32),
                        ("bf16", torch.bfloat16)):
        if device.type == "cpu" and mode != "fp32":
            continue
        with precision("fp32" if mode == "fp32" else "tf32", device):
            info[f"matmul_{mode}_tflops"] = matmul_peak(device, n=n, dtype=dtype) / 1e3
    numel = (2**22 if small else 2**30) // 4
    moved = bandwidth(device, numel)
    info["copy_gb_s"], info["triad_gb_s"] = moved["copy"], moved["triad"]
    ctx.machine = info
    ctx.record("machine", "machine", **info)
    say("## machine", "", markdown_table(["key", "value"], [
        [k, fmt(v) if isinstance(v, float) else v] for k, v in info.items()]), "")


# --------------------------------------------------------------------------------------------
# 2. conv_layers
# --------------------------------------------------------------------------------------------
class ConvShape:
    """One distinct convolution of the model, and how often it occurs."""

    def __init__(self, module: nn.Conv2d, in_hw: tuple[int, int], input_grad: bool):
        self.cin, self.cout = module.in_channels, module.out_channels
        self.k = module.kernel_size[0]
        self.stride, self.padding = module.stride[0], module.padding[0]
        self.hw = in_hw
        self.input_grad = input_grad
        self.count = 1
        self.out_hw = tuple((s + 2 * self.padding - self.k) // self.stride + 1 for s in in_hw)

    @property
    def key(self) -> tuple:
        return (self.cin, self.cout, self.k, self.stride, self.padding, self.hw, self.input_grad)

    @property
    def name(self) -> str:
        h, w = self.hw
        grad = "" if self.input_grad else ", no input grad"
        return (f"{self.k}×{self.k} {self.cin}→{self.cout} s{self.stride} "
                f"@{h}×{w}{grad}")

    def macs(self, M: int, N: int) -> int:
        return N * M * self.cout * self.cin * self.k * self.k * math.prod(self.out_hw)

    def flops(self, M: int, N: int) -> float:
        """Forward + backward: 2·MACs each for forward, weight gradient and input gradient."""
        return 2.0 * self.macs(M, N) * (3 if self.input_grad else 2)


def conv_shapes(model: nn.Module, input_shape: tuple[int, ...]) -> list[ConvShape]:
    """The model's distinct Conv2d shapes (with counts), from one forward pass with hooks."""
    found: dict[tuple, ConvShape] = {}
    order: list[ConvShape] = []

    def hook(module: nn.Module, args: tuple, _output: Any) -> None:
        x = args[0]
        shape = ConvShape(module, tuple(x.shape[-2:]), x.requires_grad)
        if shape.key in found:
            found[shape.key].count += 1
        else:
            found[shape.key] = shape
            order.append(shape)

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, nn.Conv2d)]
    try:
        model(torch.randn(1, *input_shape))
    finally:
        for h in handles:
            h.remove()
    return order


class ConvCase:
    """A formulation of one stacked conv layer's forward + backward: ``run()`` does one."""

    def __init__(self, shape: ConvShape, M: int, N: int, device: torch.device, layout: str,
                 mode: str, compiled: bool = False, compile_mode: str = "default",
                 backend: str = "inductor"):
        self.shape, self.M, self.N, self.device, self.layout = shape, M, N, device, layout
        s, gen = shape, torch.Generator(device=device).manual_seed(0)
        H, W = s.hw
        Ho, Wo = s.out_hw
        K = s.cin * s.k * s.k
        self.bf16 = mode == "bf16"

        def rand(*size: int) -> torch.Tensor:  # made on the device: no host copies
            return torch.randn(*size, generator=gen, device=device)

        if layout == "gemm":  # per client: [M, N, C, H, W]; weight [M, O, C·k·k]
            self.x = rand(M, N, s.cin, H, W)
            self.w = rand(M, s.cout, K) / math.sqrt(K)
            self.gy = rand(M, s.cout, N * Ho * Wo)
            fn = self._gemm
        else:  # the stacked oracle's grouped conv: [N, M·C, H, W], weight [M·O, C, k, k]
            fmt_ = torch.channels_last if layout == "channels_last" else torch.contiguous_format
            self.x = rand(N, M * s.cin, H, W).contiguous(memory_format=fmt_)
            self.w = rand(M * s.cout, s.cin, s.k, s.k) / math.sqrt(K)
            self.gy = rand(N, M * s.cout, Ho, Wo).contiguous(memory_format=fmt_)
            fn = self._grouped
        if self.bf16:  # the gradient arrives in the output's dtype
            self.gy = self.gy.to(torch.bfloat16)
        self.x.requires_grad_(s.input_grad)
        self.w.requires_grad_(True)
        self.forward = torch.compile(
            fn, mode=None if compile_mode == "default" else compile_mode, dynamic=False,
            backend=backend) if compiled else fn

    def _grouped(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        s = self.shape
        return F.conv2d(x, w, None, s.stride, s.padding, 1, self.M)

    def _gemm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        s, M, N = self.shape, self.M, self.N
        if self.bf16:  # im2col in bf16 (autocast would unfold in fp32, then cast the copy)
            x = x.to(torch.bfloat16)
        cols = F.unfold(x.reshape(M * N, *x.shape[2:]), s.k, padding=s.padding,
                        stride=s.stride)  # [M·N, C·k·k, L]
        cols = cols.view(M, N, cols.shape[1], cols.shape[2]).transpose(1, 2)
        return torch.bmm(w, cols.reshape(M, cols.shape[1], -1))  # [M, O, N·L]

    def run(self) -> None:
        y = self.forward(self.x, self.w)
        inputs = (self.x, self.w) if self.shape.input_grad else (self.w,)
        torch.autograd.grad(y, inputs, self.gy)

    @staticmethod
    def planned_bytes(shape: ConvShape, M: int, N: int, layout: str) -> float:
        """Generous estimate of the case's memory: x, y, gradients, im2col buffers."""
        act = N * M * (shape.cin * math.prod(shape.hw) + shape.cout * math.prod(shape.out_hw))
        total = 3 * act  # x, y, gy, dx (dx ≈ x)
        if layout == "gemm":
            # im2col columns: the unfolded copy and its transposed copy, forward and backward
            total += 4 * N * M * shape.cin * shape.k**2 * math.prod(shape.out_hw)
        return 4.0 * total * 1.5


def conv_formulations(device: torch.device) -> list[tuple[str, str, str, bool]]:
    """(name, layout, precision, cudnn autotune) of the eager formulations."""
    if device.type != "cuda":  # TF32 and bf16 autocast are GPU paths: fp32 only on the CPU
        return [("grouped NCHW fp32", "nchw", "fp32", False),
                ("grouped channels-last fp32", "channels_last", "fp32", False),
                ("gemm (unfold+bmm) fp32", "gemm", "fp32", False)]
    return [
        ("cuDNN NCHW fp32", "nchw", "fp32", False),
        ("cuDNN NCHW tf32", "nchw", "tf32", False),
        ("cuDNN NCHW bf16", "nchw", "bf16", False),
        ("cuDNN CL fp32", "channels_last", "fp32", False),
        ("cuDNN CL tf32", "channels_last", "tf32", False),
        ("cuDNN CL bf16", "channels_last", "bf16", False),
        ("cuDNN CL tf32 autotuned", "channels_last", "tf32", True),
        ("cuDNN CL bf16 autotuned", "channels_last", "bf16", True),
        ("gemm (unfold+bmm) tf32", "gemm", "tf32", False),
        ("gemm (unfold+bmm) bf16", "gemm", "bf16", False),
    ]


#: gossipfl's grouped conv today, engine.precision fp32 (its default) and tf32
GOSSIPFL_PATHS = {"cuDNN CL fp32": "gossipfl fp32 (default)", "cuDNN CL tf32": "gossipfl tf32"}


def compile_check(device: torch.device,
                  backend: str = "inductor") -> tuple[bool, dict[str, Any]]:
    """A tiny ``torch.compile`` (forward + backward) on ``device``: does compiling work here?"""
    start = time.perf_counter()
    try:
        fn = torch.compile(lambda a: (a * 2).sin().sum(), dynamic=False, backend=backend)
        a = torch.randn(64, device=device, requires_grad=True)
        torch.autograd.grad(fn(a), a)
        sync(device)
        return True, {"ok": True, "seconds": time.perf_counter() - start}
    except Exception as err:  # noqa: BLE001 — recorded; the compiled cases are then skipped
        return False, {"ok": False, "seconds": time.perf_counter() - start,
                       "error": f"{type(err).__name__}: {err}"[:2000]}


def time_conv_case(ctx: Context, shape: ConvShape, name: str, layout: str, mode: str,
                   autotune: bool, compiled: bool = False) -> dict[str, Any] | None:
    M, N, device = ctx.M, ctx.N, ctx.device
    ok, why = fits(device, ConvCase.planned_bytes(shape, M, N, layout))
    if not ok:
        ctx.record("conv_layers", "layer", layer=shape.name, formulation=name, skipped=why)
        return None
    try:
        with precision(mode, device, autotune):
            case = ConvCase(shape, M, N, device, layout, mode, compiled, ctx.args.compile_mode,
                            ctx.args.compile_backend)
            compile_s = None
            if compiled:
                torch._dynamo.reset()  # a fresh compile per case (no cache-limit fallback)
                start = time.perf_counter()
                case.run()
                sync(device)
                compile_s = time.perf_counter() - start
            times = timed(case.run, device, reps=ctx.reps, warmup=1 if ctx.small else 2,
                          deadline=ctx.budget.deadline)
    except torch.cuda.OutOfMemoryError as err:
        ctx.record("conv_layers", "layer", layer=shape.name, formulation=name,
                   skipped=f"out of memory: {str(err)[:300]}")
        return None
    finally:
        release(device)
    ms = 1e3 * median(times)
    row = ctx.record("conv_layers", "layer", layer=shape.name, formulation=name, layout=layout,
                     precision=mode, autotune=autotune, compiled=compiled, M=M, N=N,
                     count=shape.count, ms=ms, ms_all=[1e3 * t for t in times],
                     tflops=shape.flops(M, N) / (ms / 1e3) / 1e12, gflop=shape.flops(M, N) / 1e9,
                     compile_s=compile_s)
    return row


def section_conv_layers(ctx: Context) -> None:
    device, M, N = ctx.device, ctx.M, ctx.N
    model = build_model("resnet18", ctx.image, 10, seed=0)
    shapes = conv_shapes(model, ctx.image)
    ctx.record("conv_layers", "shapes", M=M, N=N, image=ctx.image,
               shapes=[{"layer": s.name, "count": s.count, "gflop_fwd_bwd": s.flops(M, N) / 1e9}
                       for s in shapes])
    results: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)  # layer -> name -> row
    by_weight = sorted(shapes, key=lambda s: -s.count * s.flops(M, N))
    for shape in by_weight:  # the heaviest first: a budget that ends spares the light ones
        for name, layout, mode, autotune in conv_formulations(device):
            if ctx.budget.over(0.45 * ctx.budget_seconds):  # keep time for profile + compile
                ctx.record("conv_layers", "layer", layer=shape.name, formulation=name,
                           skipped="out of budget")
                continue
            try:
                row = time_conv_case(ctx, shape, name, layout, mode, autotune)
            except Exception as err:  # noqa: BLE001 — e.g. a kernel cuDNN lacks: record it
                ctx.record("conv_layers", "layer", layer=shape.name, formulation=name,
                           error=f"{type(err).__name__}: {err}"[:2000])
                continue
            if row:
                results[shape.name][name] = row
        say(f"  conv_layers: {shape.name} done ({ctx.budget.left():.0f} s left)")
    conv_summary(ctx, shapes, results, "eager formulations")
    try:
        stacked_step_profile(ctx)
    except Exception:  # noqa: BLE001
        ctx.record("conv_layers", "step_profile", error=traceback.format_exc())
        say("  step profile failed:", traceback.format_exc())
    if ctx.args.compile == "off" or (ctx.args.compile == "auto" and device.type != "cuda"):
        ctx.record("conv_layers", "compile", skipped=f"--compile {ctx.args.compile} on "
                   f"{device.type}")
        return
    ok, check = compile_check(device, ctx.args.compile_backend)
    ctx.record("conv_layers", "compile_check", **check)
    say(f"  compile check: {check}")
    if not ok:
        return
    compiled = [("compile grouped CL tf32", "channels_last", "tf32"),
                ("compile gemm tf32", "gemm", "tf32"),
                ("compile gemm bf16", "gemm", "bf16"),
                ("compile grouped CL bf16", "channels_last", "bf16")]
    for shape in by_weight:  # the heaviest layers first: the budget may end mid-way
        for name, layout, mode in compiled:
            if ctx.budget.over(ctx.args.compile_reserve):
                ctx.record("conv_layers", "layer", layer=shape.name, formulation=name,
                           skipped="out of budget (compiling)")
                continue
            try:
                row = time_conv_case(ctx, shape, name, layout, mode, False, compiled=True)
            except Exception as err:  # noqa: BLE001 — one failed compile: record, go on
                ctx.record("conv_layers", "layer", layer=shape.name, formulation=name,
                           error=f"{type(err).__name__}: {err}"[:2000])
                continue
            if row:
                results[shape.name][name] = row
                say(f"  {name} {shape.name}: {row['ms']:.2f} ms (compiled in "
                    f"{row['compile_s']:.1f} s)")
    conv_summary(ctx, shapes, results, "with torch.compile")


def conv_summary(ctx: Context, shapes: list[ConvShape],
                 results: dict[str, dict[str, dict[str, Any]]], label: str) -> None:
    M, N = ctx.M, ctx.N
    names = list(dict.fromkeys(n for per in results.values() for n in per))
    rows, totals = [], defaultdict(float)
    complete = defaultdict(lambda: True)  # formulation timed on every layer
    best_total, best_fp32ish = 0.0, 0.0
    for s in shapes:
        per = results.get(s.name, {})
        best = min(per.values(), key=lambda r: r["ms"]) if per else None
        no_bf16 = [r for r in per.values() if r["precision"] != "bf16"]
        if no_bf16:
            best_fp32ish += s.count * min(r["ms"] for r in no_bf16)
        cells = []
        for n in names:
            r = per.get(n)
            cells.append(f"{r['ms']:.2f} ({r['tflops']:.1f})" if r else "–")
            if r:
                totals[n] += s.count * r["ms"]
            else:
                complete[n] = False
        if best:
            best_total += s.count * best["ms"]
        rows.append([s.name, s.count, f"{s.flops(M, N) / 1e9:.0f}", *cells,
                     f"{best['formulation']}" if best else "–"])
    say(f"## conv_layers ({label}): ResNet-18-GN, M = {M} clients × batch {N}, input "
        f"{'×'.join(map(str, ctx.image))}; ms per forward+backward (TFLOP/s)", "",
        markdown_table(["layer", "×", "GFLOP", *names, "best"], rows), "")
    summary: dict[str, Any] = {"best_ms": best_total, "best_without_bf16_ms": best_fp32ish,
                               "label": label}
    lines = [["best per layer", f"{best_total:.1f}", "1.00×"],
             ["best per layer without bf16 (fp32/TF32 only)", f"{best_fp32ish:.1f}",
              f"{best_fp32ish / best_total:.2f}×" if best_total else "–"]]
    for n in names:
        if complete[n]:
            summary[f"{n} ms"] = totals[n]
            lines.append([n + (f" = {GOSSIPFL_PATHS[n]}" if n in GOSSIPFL_PATHS else ""),
                          f"{totals[n]:.1f}", f"{totals[n] / best_total:.2f}×"
                          if best_total else "–"])
    flops = sum(s.count * s.flops(M, N) for s in shapes)
    summary["network_gflop"] = flops / 1e9
    ctx.record("conv_layers", "network_sum", **summary)
    say(f"Whole network's convolutions (each shape × its count; {flops / 1e12:.2f} TFLOP "
        f"forward + backward per local step):", "",
        markdown_table(["formulation", "ms per step", "vs best"], lines), "")


#: op families for the profile's breakdown (substrings of the aten op's name, first match)
OP_FAMILIES = (
    ("convolution", ("conv", "cudnn")),
    ("group norm", ("group_norm",)),
    ("matmul", ("mm", "matmul", "linear", "gemm")),
    ("pooling", ("pool",)),
    ("copy / layout", ("copy", "clone", "contiguous", "permute", "cat", "index", "fill",
                       "zero", "to_copy", "empty")),
    ("loss", ("logsumexp", "gather", "softmax", "where")),
    ("element-wise", ("relu", "threshold", "add", "mul", "sub", "div", "sum", "neg")),
)


def op_family(name: str) -> str:
    low = name.lower()
    for family, keys in OP_FAMILIES:
        if any(k in low for k in keys):
            return family
    return "other"


def sgd(lr: float):
    """The plain SGD update y ← y − η g, as ``Oracle.loss_and_step`` takes it."""
    def update(grad: torch.Tensor, y: torch.Tensor) -> None:
        y.add_(grad, alpha=-lr)
    return update


def stacked_step_profile(ctx: Context) -> None:
    """One stacked ResNet-18-GN local step: seconds in fp32/tf32/bf16, and a TF32 profile."""
    from torch.profiler import ProfilerActivity, profile

    device, M, N = ctx.device, ctx.M, ctx.N
    model = build_model("resnet18", ctx.image, 10, seed=0)
    oracle = StackedOracle(model)  # gossipfl's own blocks (an eighth of the GPU's memory)
    P = oracle.layout.P
    ok, why = fits(device, 4.0 * 3 * M * P + 4.0 * 2 * M * N * math.prod(ctx.image))
    if not ok:
        ctx.record("conv_layers", "step_profile", skipped=why)
        return
    X = init_stack(model, M, device)
    gen = torch.Generator(device="cpu").manual_seed(1)
    inputs = torch.randn(M, N, *ctx.image, generator=gen).to(device)
    targets = torch.randint(0, 10, (M, N), generator=gen).to(device)

    def step() -> None:
        oracle.loss_and_step(X, inputs, targets, None, sgd(0.01))

    times = {}
    for mode in ("fp32", "tf32", "bf16") if device.type == "cuda" else ("fp32",):
        if ctx.budget.over(0.3 * ctx.budget_seconds):
            break
        peak_reset(device)
        with precision(mode, device):
            t = timed(step, device, reps=min(2, ctx.reps), warmup=1, deadline=ctx.budget.deadline)
        times[mode] = median(t)
        ctx.record("conv_layers", "stacked_step", precision=mode, M=M, N=N,
                   block_size=oracle.block_size(M, ctx.image, N, X), s=times[mode], s_all=t,
                   projected_s_per_round_80_steps=80 * times[mode], peak_gib=peak_gib(device))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda"
                                           else [])
    mode = "tf32" if device.type == "cuda" else "fp32"
    with precision(mode, device):
        step()
        sync(device)
        with profile(activities=activities) as prof:
            step()
            sync(device)
    events = prof.key_averages()
    cuda = device.type == "cuda"

    def on_device(e: Any) -> bool:  # a kernel (or memcpy/memset) event, not a CPU-side op
        return "CUDA" in str(getattr(e, "device_type", "")) or "cuda" in str(
            getattr(e, "device_type", ""))

    def self_time(e: Any) -> float:  # µs of the device's own work (CPU time on the CPU)
        if not cuda:
            return float(e.self_cpu_time_total)
        for attr in ("self_device_time_total", "self_cuda_time_total"):
            if hasattr(e, attr):
                return float(getattr(e, attr))
        return 0.0

    ops = sorted(((e.key, self_time(e), e.count) for e in events
                  if e.key.startswith("aten::") and not on_device(e)), key=lambda r: -r[1])
    kernels = sorted(((e.key, self_time(e), e.count) for e in events if on_device(e)),
                     key=lambda r: -r[1])
    kernel_total = sum(r[1] for r in kernels)
    total = (kernel_total if cuda else 0.0) or sum(r[1] for r in ops) or 1.0
    top = [{"op": k, "self_ms": t / 1e3, "calls": c, "share": t / total}
           for k, t, c in ops[:15]]
    top_kernels = [{"kernel": k[:200], "ms": t / 1e3, "calls": c, "share": t / total}
                   for k, t, c in kernels[:10]]
    families: dict[str, float] = defaultdict(float)
    for k, t, _ in ops:
        families[op_family(k)] += t
    ctx.record("conv_layers", "step_profile", precision=mode, device_total_ms=total / 1e3,
               top15_ops=top, top10_kernels=top_kernels,
               families_ms={k: v / 1e3 for k, v in families.items()}, step_s=times)
    where = "CUDA" if cuda else "CPU"
    say(f"## One stacked ResNet-18-GN local step (M = {M}, batch {N}): "
        + ", ".join(f"{m} {s:.3f} s (80 steps: {80 * s:.1f} s)" for m, s in times.items()), "",
        f"Profile ({mode}), top 15 aten ops by self {where} time (all kernels: "
        f"{total / 1e3:.1f} ms):", "",
        markdown_table(["op", f"self {where} ms", "calls", "share"],
                       [[r["op"][:60], f"{r['self_ms']:.2f}", r["calls"],
                         f"{100 * r['share']:.1f}%"] for r in top]), "",
        markdown_table(["op family", "ms", "share"],
                       [[k, f"{v / 1e3:.2f}", f"{100 * v / total:.1f}%"] for k, v in
                        sorted(families.items(), key=lambda kv: -kv[1])]), "")
    if top_kernels:
        say(markdown_table(["kernel (top 10)", "ms", "calls", "share"],
                           [[r["kernel"][:90], f"{r['ms']:.2f}", r["calls"],
                             f"{100 * r['share']:.1f}%"] for r in top_kernels]), "")


# --------------------------------------------------------------------------------------------
# 3./4. the small models' local step: eager vs CUDA graph, packed stacks
# --------------------------------------------------------------------------------------------
class SmallStep:
    """One local SGD step of gossipfl's stacked oracle on static buffers (one block of M)."""

    def __init__(self, model_name: str, M: int, N: int, device: torch.device,
                 lr: float = 0.05, batches: int = 4):
        shape = (1, 28, 28)
        model = build_model(model_name, shape, 10, seed=0)
        self.oracle = StackedOracle(model, chunk_size=M)
        self.oracle.model.train()
        self.M, self.N, self.lr, self.device = M, N, lr, device
        self.X = init_stack(model, M, device)
        gen = torch.Generator(device="cpu").manual_seed(2)
        self.pool = [(torch.randn(M, N, *shape, generator=gen).to(device),
                      torch.randint(0, 10, (M, N), generator=gen).to(device))
                     for _ in range(batches)]
        self.inputs = self.pool[0][0].clone()  # the static buffers a graph reads
        self.targets = self.pool[0][1].clone()
        self.mask = torch.ones(M, N, dtype=torch.bool, device=device)
        self.i = 0
        self.graph: torch.cuda.CUDAGraph | None = None

    def next_batch(self) -> None:
        """The next minibatch into the static buffers (as a data pipeline would)."""
        self.i = (self.i + 1) % len(self.pool)
        x, y = self.pool[self.i]
        self.inputs.copy_(x)
        self.targets.copy_(y)

    def block(self) -> None:
        """What ``loss_and_step`` does for one block whose clients all have samples."""
        _, grads = self.oracle._block(self.X, self.inputs, self.targets, self.mask)
        with torch.no_grad():
            for name, view in self.oracle.layout.views(self.X).items():
                view.add_(grads[name], alpha=-self.lr)

    def eager_api(self) -> None:
        self.next_batch()
        self.oracle.loss_and_step(self.X, self.inputs, self.targets, None, sgd(self.lr))

    def eager_block(self) -> None:
        self.next_batch()
        self.block()

    def capture(self) -> None:
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s):  # warm-up on a side stream, as the CUDA graphs docs ask
            for _ in range(3):
                self.block()
        torch.cuda.current_stream(self.device).wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.block()

    def replay(self) -> None:
        self.next_batch()
        self.graph.replay()

    def check(self) -> float:
        """max |X_graph − X_eager| / max |X_eager| after one step from the same X and batch."""
        X0 = self.X.clone()
        self.block()
        eager = self.X.clone()
        self.X.copy_(X0)
        self.graph.replay()
        diff = float((self.X - eager).abs().max() / eager.abs().max().clamp_min(1e-30))
        self.X.copy_(X0)
        return diff


def small_step_case(ctx: Context, section: str, model_name: str, M: int,
                    steps: int) -> dict[str, Any] | None:
    device, N = ctx.device, ctx.N
    model = build_model(model_name, (1, 28, 28), 10)
    P = sum(p.numel() for p in model.parameters())
    acts, _ = StackedOracle(model).program.activation_numel((1, 28, 28), torch.float32)
    planned = 4.0 * (4 * M * P + 6 * M * N * 784 + 3 * acts * M * N)
    ok, why = fits(device, planned)
    if not ok:
        ctx.record(section, model_name, M=M, skipped=why)
        return None
    mode = ctx.args.step_precision if device.type == "cuda" else "fp32"
    out: dict[str, Any] = {"model": model_name, "M": M, "N": N, "P": P, "precision": mode,
                           "steps_timed": steps, "captured": "gossipfl's StackedOracle._block "
                           "+ the update per parameter view (one block of M clients)"}
    try:
        with precision(mode, device):
            step = SmallStep(model_name, M, N, device)

            def loop(fn: Callable[[], None]) -> Callable[[], None]:
                def run() -> None:
                    for _ in range(steps):
                        fn()
                return run

            for name, fn in (("eager loss_and_step", step.eager_api),
                             ("eager block", step.eager_block)):
                t = median(timed(loop(fn), device, reps=ctx.reps, warmup=1,
                                 deadline=ctx.budget.deadline))
                out[f"{name} steps/s"] = steps / t
            if device.type == "cuda":
                try:  # a failed capture keeps the eager numbers
                    step.capture()
                    out["graph_rel_diff"] = step.check()
                    t = median(timed(loop(step.replay), device, reps=ctx.reps, warmup=1,
                                     deadline=ctx.budget.deadline))
                    out["graph steps/s"] = steps / t
                    out["graph vs eager loss_and_step"] = out["graph steps/s"] / out[
                        "eager loss_and_step steps/s"]
                except Exception:  # noqa: BLE001
                    out["graph_error"] = traceback.format_exc()[-3000:]
                    say(f"  CUDA graph of {model_name} M={M} failed:", out["graph_error"])
            else:
                out["graph"] = "skipped: CUDA graphs need a CUDA device"
            for key in [k for k in out if k.endswith("steps/s")]:
                out[key.replace("steps/s", "samples/s")] = out[key] * M * N
            out["peak_gib"] = peak_gib(device)
    finally:
        release(device)
    return ctx.record(section, model_name, **out)


def section_cuda_graphs(ctx: Context) -> None:
    rows = []
    clients = (2,) if ctx.small else (100, 20)
    steps = 2 if ctx.small else 20
    for model_name in ("mlp", "cnn"):
        for M in clients:
            if ctx.budget.over():
                ctx.record("cuda_graphs", model_name, M=M, skipped="out of budget")
                continue
            peak_reset(ctx.device)
            r = small_step_case(ctx, "cuda_graphs", model_name, M, steps)
            if r:
                rows.append([model_name, M, fmt(r["eager loss_and_step steps/s"], 0),
                             fmt(r["eager block steps/s"], 0), fmt(r.get("graph steps/s"), 0),
                             fmt(r.get("graph vs eager loss_and_step")),
                             f"{r.get('graph_rel_diff', float('nan')):.1e}"])
    say(f"## cuda_graphs: one stacked local SGD step, batch {ctx.N} (steps/s)", "",
        markdown_table(["model", "M", "eager loss_and_step", "eager block", "CUDA graph",
                        "graph / eager", "graph vs eager X (rel.)"], rows), "")


def section_packed_throughput(ctx: Context) -> None:
    base = 2 if ctx.small else 20
    packs = (1, 2) if ctx.small else (1, 8, 32)
    steps = 2 if ctx.small else 10
    rows, ref = [], {}
    for S in packs:
        if ctx.budget.over():
            ctx.record("packed_throughput", "cnn", S=S, skipped="out of budget")
            continue
        peak_reset(ctx.device)
        r = small_step_case(ctx, "packed_throughput", "cnn", base * S, steps)
        if not r:
            continue
        cells = []
        for key in ("eager loss_and_step samples/s", "graph samples/s"):
            value = r.get(key)
            if S == packs[0] and value:
                ref[key] = value
            cells += [fmt(value, 0), f"{value / ref[key]:.2f}×" if value and key in ref
                      else "–"]
        rows.append([S, base * S, *cells, fmt(r.get("peak_gib"))])
    say(f"## packed_throughput: cnn, M = {base} × S runs in one stack, batch {ctx.N}", "",
        markdown_table(["S", "M", "eager samples/s", "vs S=1", "graph samples/s", "vs S=1",
                        "peak GiB"], rows), "")


# --------------------------------------------------------------------------------------------
# 5. gossip_scale
# --------------------------------------------------------------------------------------------
def ring_csr(M: int, device: torch.device) -> torch.Tensor:
    """The ring's mixing matrix (1/3 on i−1, i, i+1) as a sparse CSR [M, M]."""
    i = torch.arange(M)
    cols = torch.stack([(i - 1) % M, i, (i + 1) % M], 1).sort(1).values.reshape(-1)
    crow = torch.arange(0, 3 * M + 1, 3)
    with warnings.catch_warnings():  # "beta" and "invariant checks" notices
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow.int(), cols.int(), torch.full((3 * M,), 1 / 3),
                                       (M, M)).to(device)


def gossip_roll(X: torch.Tensor) -> torch.Tensor:
    """(x_{i−1} + x_i + x_{i+1}) / 3 by ``torch.roll`` (one rolled temporary)."""
    out = torch.roll(X, 1, 0)
    out.add_(X).add_(torch.roll(X, -1, 0)).div_(3)
    return out


def gossip_slices(X: torch.Tensor) -> torch.Tensor:
    """The same from shifted slices into one output (no temporary: X + out in memory)."""
    out = torch.empty_like(X)
    torch.add(X[:-2], X[2:], out=out[1:-1])
    torch.add(X[-2], X[0], out=out[-1])
    torch.add(X[-1], X[1], out=out[0])
    return out.add_(X).div_(3)


def section_gossip_scale(ctx: Context) -> None:
    device = ctx.device
    sizes = (64, 256) if ctx.small else (10_000, 100_000, 1_000_000)
    model = build_model("logistic", (1, 28, 28), 10, seed=0)
    oracle = StackedOracle(model)
    P = oracle.layout.P
    copy_gb_s = (ctx.machine or {}).get("copy_gb_s")
    if not copy_gb_s:
        copy_gb_s = bandwidth(device, (2**22 if ctx.small else 2**28) // 4)["copy"]
    rows = []
    for M in sizes:
        stack = 4.0 * M * P  # one [M, P] float32 copy
        data = 4.0 * M * 784 + 8.0 * M
        # the step: X + its gradient (+ data); roll: X + out + one rolled temporary;
        # slices and CSR: X + out (+ CSR's 3M values and indices)
        analytic = {"step": 2 * stack + data, "roll": 3 * stack + data,
                    "slices": 2 * stack + data,
                    "csr": 2 * stack + data + 3 * M * 8 + (M + 1) * 4}
        for method in ("roll", "slices", "csr"):
            case = f"M={M} {method}"
            if ctx.budget.over():
                ctx.record("gossip_scale", case, M=M, method=method, skipped="out of budget")
                continue
            planned = 1.05 * max(analytic["step"], analytic[method]) + 2**29
            ok, why = fits(device, planned, fraction=0.95)
            if not ok:
                ctx.record("gossip_scale", case, M=M, method=method, skipped=why)
                rows.append([M, method, "skipped: " + why, "", "", "", "", ""])
                continue
            try:
                r = gossip_case(ctx, oracle, M, P, method, analytic, copy_gb_s)
            except torch.cuda.OutOfMemoryError as err:
                ctx.record("gossip_scale", case, M=M, method=method,
                           skipped=f"out of memory: {str(err)[:300]}")
                continue
            except Exception as err:  # noqa: BLE001 — e.g. a sparse kernel missing: go on
                ctx.record("gossip_scale", case, M=M, method=method,
                           error=f"{type(err).__name__}: {err}"[:2000])
                continue
            finally:
                release(device)
            rows.append([M, method, f"{r['round_s']:.4f}", f"{r['step_s']:.4f}",
                         f"{r['gossip_s']:.4f}",
                         f"{fmt(r['peak_gib'])} / {r['analytic_gib']:.2f}",
                         f"{r['step_gb_s']:.0f} / {r['gossip_gb_s']:.0f}",
                         f"{100 * r['gossip_gb_s'] / copy_gb_s:.0f}%"])
    say(f"## gossip_scale: logistic regression (P = {P}), one sample per client, ring; "
        f"copy bandwidth {copy_gb_s:.0f} GB/s", "",
        markdown_table(["M", "gossip", "s / round", "step s", "gossip s",
                        "peak GiB / analytic", "GB/s step / gossip (X read + written once)",
                        "gossip of copy BW"], rows), "")


def gossip_case(ctx: Context, oracle: StackedOracle, M: int, P: int, method: str,
                analytic: dict[str, float], copy_gb_s: float) -> dict[str, Any]:
    device = ctx.device
    X = torch.empty(M, P, device=device).normal_(0, 0.01)
    inputs = torch.randn(M, 1, 1, 28, 28, device=device)
    targets = torch.randint(0, 10, (M, 1), device=device)
    W = ring_csr(M, device) if method == "csr" else None
    state = {"X": X}

    def step() -> None:
        oracle.loss_and_step(state["X"], inputs, targets, None, sgd(0.05))

    def gossip() -> None:
        x = state["X"]
        state["X"] = (torch.sparse.mm(W, x) if W is not None else gossip_roll(x)
                      if method == "roll" else gossip_slices(x))
        del x

    def one_round() -> None:
        step()
        gossip()

    with precision("fp32", device):
        one_round()  # warm-up
        sync(device)
        peak_reset(device)
        round_s = median(timed(one_round, device, reps=ctx.reps, warmup=0))
        peak = peak_gib(device)
        step_s = median(timed(step, device, reps=ctx.reps, warmup=0))
        gossip_s = median(timed(gossip, device, reps=ctx.reps, warmup=0))
    ideal = 2 * 4.0 * M * P  # X read and written once
    out = {"M": M, "P": P, "method": method, "round_s": round_s, "step_s": step_s,
           "gossip_s": gossip_s, "peak_gib": peak,
           "analytic_gib": max(analytic["step"], analytic[method]) / 2**30,
           "stack_gib": 4.0 * M * P / 2**30, "step_gb_s": ideal / step_s / 1e9,
           "gossip_gb_s": ideal / gossip_s / 1e9, "copy_gb_s": copy_gb_s}
    return ctx.record("gossip_scale", f"M={M} {method}", **out)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------
class Context:
    def __init__(self, args: argparse.Namespace, record: Recorder):
        self.args, self.record = args, record
        self.device = torch.device(args.device)
        self.small = args.small
        self.M = 2 if args.small else args.clients
        self.N = 1 if args.small else args.batch
        self.image = (3, 8, 8) if args.small else (3, 32, 32)
        self.reps = 1 if args.small else args.reps
        self.machine: dict[str, Any] | None = None
        self.budget = Budget(0, time.perf_counter())
        self.budget_seconds = 0.0


RUNNERS: dict[str, Callable[[Context], None]] = {
    "machine": section_machine, "conv_layers": section_conv_layers,
    "cuda_graphs": section_cuda_graphs, "packed_throughput": section_packed_throughput,
    "gossip_scale": section_gossip_scale,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true",
                        help="tiny sizes: the script's own check (CPU, seconds)")
    parser.add_argument("--out", default="benchmarks/results/gpu_paths.jsonl")
    parser.add_argument("--budget", type=float, default=300.0,
                        help="seconds for all sections (the run adds start-up and the case "
                             "running when a budget ends)")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--clients", type=int, default=100, help="M of conv_layers")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                        help="torch.compile cases (auto: on CUDA only)")
    parser.add_argument("--compile-mode", default="default",
                        choices=("default", "max-autotune-no-cudagraphs", "reduce-overhead"))
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile backend (aot_eager checks the path without a "
                             "compiler)")
    parser.add_argument("--compile-reserve", type=float, default=15.0,
                        help="seconds of conv_layers' budget a new compile needs left")
    parser.add_argument("--step-precision", choices=("fp32", "tf32", "bf16"), default="tf32",
                        help="precision of cuda_graphs / packed_throughput on CUDA")
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; choose from {SECTIONS}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    run_deadline = start + 1.15 * args.budget  # sections keep their own; this caps overruns
    record = Recorder(Path(args.out))
    ctx = Context(args, record)
    if ctx.device.type == "cuda" and not torch.cuda.is_available():
        record("run", "error", error="--device cuda but torch.cuda.is_available() is False")
        say("CUDA is not available; run with --device cpu --small to check the script.")
        record.close()
        return 1
    if args.small and ctx.device.type == "cpu":
        torch.set_num_threads(1)  # a check, not a measurement: robust on a busy machine
    chosen = args.sections.split(",")
    total_share = sum(BUDGET_SHARES[s] for s in chosen)
    say(f"# gpu_paths on {ctx.device} (torch {torch.__version__}, budget {args.budget:.0f} s,"
        f" out {args.out})", "")
    for name in chosen:
        seconds = args.budget * BUDGET_SHARES[name] / total_share
        ctx.budget, ctx.budget_seconds = Budget(seconds, run_deadline), seconds
        t0 = time.perf_counter()
        say(f"== {name} (budget {seconds:.0f} s)")
        try:
            RUNNERS[name](ctx)
            status = "ok"
        except Exception:  # noqa: BLE001 — record and go on to the next section
            status = "error"
            record(name, "error", error=traceback.format_exc())
            say(f"{name} failed:", traceback.format_exc())
        finally:
            release(ctx.device)
        record(name, "section_done", status=status, seconds=time.perf_counter() - t0,
               budget_s=seconds)
    record("run", "done", seconds=time.perf_counter() - start)
    say(f"done in {time.perf_counter() - start:.0f} s; JSON lines in {args.out}")
    record.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    sys.exit(main())
