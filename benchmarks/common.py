"""Shared pieces of the benchmarks: machine description, matmul peak, FLOP counts, timers,
statistics and Markdown tables.

Timing rules used everywhere: wall-clock (``time.perf_counter``) around synchronous work (CUDA is
synchronized before every reading), implementations interleaved A/B/A/B in one process,
several repetitions, reported as median with the spread (min–max).
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from gossipfl.data import Dataset, from_tensors


# --------------------------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> float:
    """1-minute load average (other processes competing for the cores), or NaN."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def machine(device: torch.device) -> dict[str, Any]:
    """What the numbers were measured on."""
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)"),
        "load_average_1min": round(load_average(), 2),
        "device": str(device),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = props.name
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
    return info


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, n: int = 2048, reps: int = 5,
                dtype: torch.dtype = torch.float32) -> float:
    """Best achieved GFLOP/s of an ``n×n @ n×n`` matmul (2n³ FLOP) on ``device``."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen, dtype=dtype).to(device)
    b = torch.randn(n, n, generator=gen, dtype=dtype).to(device)
    best = float("inf")
    for _ in range(reps + 1):
        sync(device)
        start = time.perf_counter()
        (a @ b).sum()
        sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def bandwidth(device: torch.device, numel: int, reps: int = 5) -> dict[str, float]:
    """Best GB/s on ``device`` of a copy (2 arrays of ``numel`` floats: read + written) and
    a triad ``a = b + s·c`` (3 arrays), each timed between device synchronizations."""
    a, b, c = (torch.ones(numel, device=device) for _ in range(3))
    best = {"copy": float("inf"), "triad": float("inf")}
    for _ in range(reps + 1):
        for name, op in (("copy", lambda: b.copy_(a)),
                         ("triad", lambda: torch.add(b, c, alpha=0.5, out=a))):
            sync(device)
            start = time.perf_counter()
            op()
            sync(device)
            best[name] = min(best[name], time.perf_counter() - start)
    return {"copy": 2 * 4 * numel / best["copy"] / 1e9,
            "triad": 3 * 4 * numel / best["triad"] / 1e9}


# --------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------
def flops_per_sample(model: nn.Module, input_shape: Sequence[int],
                     num_classes: int) -> tuple[float, float]:
    """(training, forward) FLOPs of one sample, counted by ``torch.utils.flop_counter`` on the
    plain module (matmuls and convolutions; the first layer's input gradient is not needed and
    not counted)."""
    batch = 4
    x = torch.randn(batch, *input_shape)
    y = torch.randint(0, max(num_classes, 1), (batch,))
    params = [p for p in model.parameters()]
    with FlopCounterMode(display=False) as train:
        loss = F.cross_entropy(model(x), y)
        torch.autograd.grad(loss, params)
    with torch.no_grad(), FlopCounterMode(display=False) as forward:
        model(x)
    return train.get_total_flops() / batch, forward.get_total_flops() / batch


# --------------------------------------------------------------------------------------------
# Timing and statistics
# --------------------------------------------------------------------------------------------
class Stopwatch:
    """Accumulates wall-clock seconds per named section (CUDA-synchronized)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        sync(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            sync(self.device)
            self.seconds[name] += time.perf_counter() - start

    def wrap(self, name: str, fn: Callable) -> Callable:
        """``fn`` with its calls timed into section ``name`` (nested sections double count)."""
        def timed(*args, **kwargs):
            with self.section(name):
                return fn(*args, **kwargs)
        return timed

    def reset(self) -> dict[str, float]:
        out = dict(self.seconds)
        self.seconds.clear()
        return out


#: what the benchmarks' ``--clock`` reads: wall-clock seconds, or this process's CPU seconds
#: (summed over its threads; what other jobs on a shared machine do not inflate)
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float], digits: int = 2) -> str:
    """``median (min–max)``."""
    if not values:
        return "–"
    fmt = f"{{:.{digits}f}}"
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def peak_rss() -> int:
    """Peak resident memory of this process in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss() -> int:
    """Resident memory now, in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------
def cifar_like(train: int, test: int, classes: int = 10, seed: int = 0,
               shape: Sequence[int] = (3, 32, 32)) -> Dataset:
    """Random image data (CIFAR's 3×32×32 unless ``shape`` says otherwise; normal pixels,
    uniform labels): the stand-in where the real files are not on the machine."""
    gen = torch.Generator().manual_seed(seed)
    return from_tensors(
        torch.randn(train, *shape, generator=gen),
        torch.randint(0, classes, (train,), generator=gen),
        torch.randn(test, *shape, generator=gen),
        torch.randint(0, classes, (test,), generator=gen),
        num_classes=classes, name="cifar_like" if tuple(shape) == (3, 32, 32) else "synthetic",
    )


def start_cpu_run(threads: int | None) -> torch.device:
    """The CPU benchmarks' common start: thread count, glibc keeping freed memory (as the
    runner does), and the machine printed first."""
    from gossipfl.engine import keep_freed_memory

    set_threads(threads)
    keep_freed_memory()
    device = torch.device("cpu")
    print(machine(device), flush=True)
    return device


def set_threads(threads: int | None) -> None:
    if threads:
        torch.set_num_threads(threads)


def interleaved_round_seconds(runners: dict[str, Any], rounds: int,
                              device: torch.device | None = None) -> dict[str, list[float]]:
    """Seconds of rounds 0..``rounds`` of each Runner, taken round by round in turn so that
    load on a shared machine hits all alike (round 0 included: drop it as warm-up); on a GPU
    ``device``, between synchronizations."""
    seconds: dict[str, list[float]] = {name: [] for name in runners}
    device = device or torch.device("cpu")
    with torch.no_grad():
        for t in range(rounds + 1):
            for name, runner in runners.items():
                sync(device)
                start = time.perf_counter()
                runner.run_round(t)
                sync(device)
                seconds[name].append(time.perf_counter() - start)
    return seconds
