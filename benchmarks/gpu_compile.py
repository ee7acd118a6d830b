"""Issue 48 on a lent GPU: gossipfl's rounds with the compiled training path
(``engine.compile``) and CUDA graphs (``engine.cuda_graphs``) against the eager path of the
previous release, in one run, interleaved, on synthetic data of the papers' shapes.

    PYTHONPATH=src python -m benchmarks.gpu_compile --out $OUT/gpu_compile.jsonl   # GPU
    PYTHONPATH=src python -m benchmarks.gpu_compile --device cpu --small --out x.jsonl

Sections (each case inside try/except: an error is recorded and the run goes on; every
record is one JSON line of ``--out``, written as it comes):

1. ``machine``: GPU, torch, the matmul peaks (TF32, bf16; n = 8192) and the copy bandwidth.
2. ``resnet``: DFedAvg rounds of the paper-scale ResNet-18-GN (CIFAR-10's 3×32×32, M = 100,
   batch 32) eager (engine.compile false, cuda_graphs false: the previous release) against
   compiled, timed interleaved after a warm-up round (which compiles), per local step
   (``--resnet-steps`` a round) and projected to 80 steps (5 epochs of 500), in TF32 and
   bf16: seconds per round (training and gossip; no evaluation), the ratio to eager, the
   training TFLOP/s against the measured peak.
3. ``profile``: the compiled ResNet-18-GN step in TF32, time per op family
   (``torch.profiler``).
4. ``rounds``: the variants eager, block graphs (each block's forward and backward graphed,
   the rest of the step eager), graphs (whole local phases replayed,
   gossipfl.schedules.phase_graph), compile, compile + graphs of the cnn and the mlp
   784-200-200-10 on 1×28×28, M = 100, one epoch of 600, batch 32 (Fashion-MNIST's task in
   the README).
5. ``anatomy``: where the mlp round's time goes (wall, the kernels' device time, the host's
   launches and synchronizations), eager, with block graphs and with phase graphs; with
   phase graphs, where the round makes the host wait for the device (``sync_sites``: CUDA's
   synchronization debug mode, each warning's innermost gossipfl frames).
6. ``same_numbers``: DFedAvgM with weight decay on the cnn and the mlp (20 clients, 2 rounds,
   η decayed by 0.9: Dirichlet 0.5 and one epoch, where phases run step by step, and iid with
   3 steps, where whole phases are replayed): the final models with block graphs, graphs
   (bit for bit?) and compile + graphs (max relative difference) against the eager path, fp32.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import json
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import bandwidth, cifar_like, flops_per_sample, matmul_peak, median
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.models import build_model

#: variant -> (engine.compile, engine.cuda_graphs); "block graphs" is cuda_graphs: blocks
#: (each block's forward and backward graphed, the rest of a step eager)
VARIANTS = {"eager": (False, False), "block graphs": (False, "blocks"), "graphs": (False, True),
            "compile": (True, False), "compile+graphs": (True, True)}


def phase_replays(runner: Runner) -> int:
    graphs = runner.trainer.phase_graphs
    return 0 if graphs is None else graphs.replays


class Record:
    def __init__(self, path: Path):
        self.file = path.open("a")

    def __call__(self, section: str, case: str, **values: Any) -> dict:
        row = {"section": section, "case": case, **values}
        self.file.write(json.dumps(row, default=str) + "\n")
        self.file.flush()
        print(json.dumps(row, default=str), flush=True)
        return row


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def config(device: str, model: str, clients: int, per_client: int, shape: tuple[int, ...],
           variant: str, precision: str = "tf32", local_steps: int | None = None,
           algorithm: str = "dfedavg", partition: str = "iid", **train: Any):
    compiled, graphs = VARIANTS[variant]
    data = cifar_like(train=per_client * clients, test=200, shape=shape)
    train_section = {"rounds": 100, "batch_size": 32, "lr": 0.05, **train}
    train_section.update({"local_steps": local_steps} if local_steps else {"local_epochs": 1})
    data_section = {"tensors": data, "clients": clients, "partition": partition}
    if partition == "dirichlet":
        data_section["alpha"] = 0.5
    return load_config({
        "data": data_section, "model": {"name": model}, "topology": {"name": "ring"},
        "algorithm": {"name": algorithm}, "train": train_section,
        "eval": {"local_models": False, "every": 1000},
        "engine": {"precision": precision, "compile": compiled, "cuda_graphs": graphs},
        "device": device, "seed": 0})


def timed_round(runner: Runner, t: int, device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    with torch.no_grad():
        runner.run_round(t)
    sync(device)
    return time.perf_counter() - start


def section_machine(record: Record, device: torch.device, small: bool) -> None:
    row: dict[str, Any] = {"torch": torch.__version__}
    if device.type == "cuda":
        row.update(gpu=torch.cuda.get_device_name(device),
                   cudnn=torch.backends.cudnn.version())
        n = 2048 if small else 8192
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        row["tf32_tflops"] = matmul_peak(device, n=n) / 1e3
        torch.backends.cuda.matmul.allow_tf32 = saved
        row["bf16_tflops"] = matmul_peak(device, n=n, dtype=torch.bfloat16) / 1e3
        row.update({f"{k}_gb_s": v for k, v in bandwidth(device, 2**28).items()})
    record("machine", "machine", **row)


def final_models(cfg) -> tuple[torch.Tensor, int]:
    runner = Runner(cfg)
    with torch.no_grad():
        for t in range(cfg.train.rounds):
            runner.run_round(t)
    return runner.client_models().double().cpu(), phase_replays(runner)


def section_same_numbers(record: Record, device: str, small: bool) -> None:
    """Final models of 2 rounds against the eager path, fp32: unequal clients (Dirichlet, one
    epoch: the phases run step by step, blocks graphed) and equal ones (iid, 3 steps a round:
    whole phases replayed from graphs, a decaying learning rate)."""
    M = 8 if small else 20
    for model in ("mlp", "cnn"):
        for partition, steps in (("dirichlet", None), ("iid", 3)):
            cfgs = {v: config(device, model, M, 64 if small else 300, (1, 28, 28), v,
                              precision="fp32", algorithm="dfedavgm", partition=partition,
                              local_steps=steps, rounds=2, weight_decay=5e-4, lr_decay=0.9)
                    for v in ("eager", "block graphs", "graphs", "compile+graphs")}
            case = f"{model} {partition}"
            try:
                want, _ = final_models(cfgs["eager"])
                for variant in ("block graphs", "graphs", "compile+graphs"):
                    got, replays = final_models(cfgs[variant])
                    rel = float((got - want).abs().max() / want.abs().max())
                    record("same_numbers", case, variant=variant, bit_equal=bool(
                        torch.equal(got, want)), max_relative=rel, phase_replays=replays)
            except Exception as err:  # noqa: BLE001
                record("same_numbers", case, error=traceback.format_exc()[-2000:],
                       message=str(err)[:300])


def round_case(record: Record, name: str, cfgs: dict, reps: int, device: torch.device,
               deadline: float, per_step: int | None = None, flops: float | None = None,
               peak: float | None = None) -> None:
    runners: dict[str, Runner] = {}
    for variant, cfg in cfgs.items():
        try:
            start = time.perf_counter()
            runners[variant] = Runner(cfg)
            first = timed_round(runners[variant], 0, device)  # compiles, captures
            record("rounds", name, variant=variant, first_round_s=first,
                   build_s=time.perf_counter() - start - first)
        except Exception as err:  # noqa: BLE001
            record("rounds", name, variant=variant, error=traceback.format_exc()[-2500:],
                   message=str(err)[:300])
    seconds: dict[str, list[float]] = {v: [] for v in runners}
    for rep in range(1, reps + 1):
        for variant, runner in runners.items():
            if time.perf_counter() > deadline and rep > 1:
                break
            try:
                seconds[variant].append(timed_round(runner, rep, device))
            except Exception as err:  # noqa: BLE001
                record("rounds", name, variant=variant, rep=rep, message=str(err)[:300])
    base = median(seconds["eager"]) if seconds.get("eager") else None
    for variant, values in seconds.items():
        if not values:
            continue
        s = median(values)
        row: dict[str, Any] = {"variant": variant, "s_per_round": s, "all": values,
                               "vs_eager": base / s if base else None}
        if per_step:  # the round's local steps scaled to per_step steps
            steps = cfgs[variant].train.local_steps
            row["projected_s_per_round"] = s * per_step / steps
        if flops and peak:
            row["tflops"] = flops / s / 1e12
            row["of_peak"] = flops / s / 1e12 / peak
        if device.type == "cuda":
            row["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        row["phase_replays"] = phase_replays(runners[variant])
        record("rounds", name, **row)
    runners.clear()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def section_rounds(record: Record, device: str, small: bool, args, deadline: float) -> None:
    """The small models of ``--models`` (the mlp and the cnn), four variants each."""
    dev = torch.device(device)
    M = 8 if small else 100
    per = 64 if small else 600
    for model in args.models.split(","):
        if time.perf_counter() > deadline:
            record("rounds", model, skipped="deadline")
            continue
        cfgs = {v: config(device, model, M, per, (1, 28, 28), v) for v in VARIANTS}
        round_case(record, f"{model} M={M} 1 epoch of {per}", cfgs, args.reps, dev, deadline)


def section_resnet(record: Record, device: str, small: bool, args, deadline: float,
                   peaks: dict) -> None:
    """The paper-scale ResNet-18-GN, eager against compiled, in each of
    ``--resnet-precisions``."""
    dev, M = torch.device(device), 8 if small else 100
    shape, steps = (3, 32, 32), args.resnet_steps
    flops_sample, _ = flops_per_sample(build_model("resnet18", shape, 10), shape, 10)
    flops = flops_sample * 32 * M * steps
    for precision in args.resnet_precisions.split(","):
        if time.perf_counter() > deadline:
            record("rounds", f"resnet18 {precision}", skipped="deadline")
            continue
        cfgs = {v: config(str(dev), "resnet18", M, 64 if small else 500, shape, v,
                          precision=precision, local_steps=steps)
                for v in ("eager", "compile")}
        round_case(record, f"resnet18-GN M={M} {steps} steps {precision}", cfgs, args.reps,
                   dev, deadline, per_step=80, flops=flops,
                   peak=peaks.get(f"{precision}_tflops"))


def op_family(name: str) -> str:
    n = name.lower()
    for family, keys in (("convolution", ("conv", "cudnn", "xmma", "cutlass", "wgrad",
                                          "dgrad", "fprop")),
                         ("matmul (bmm, GEMM convolutions)", ("gemm", "bmm", "mm", "sm90")),
                         ("group norm", ("group_norm", "groupnorm")),
                         ("triton fused", ("triton",)),
                         ("copy / layout", ("copy", "im2col", "col2im", "unfold"))):
        if any(k in n for k in keys):
            return family
    return "other"


def profiled_runner(device: str, small: bool) -> Runner:
    """The compiled paper-scale ResNet-18-GN (one local step a round) that ``profile``
    profiles and ``warm`` compiles ahead."""
    M = 8 if small else 100
    return Runner(config(device, "resnet18", M, 64 if small else 500, (3, 32, 32), "compile",
                         local_steps=1))


def section_warm(record: Record, device: str, small: bool) -> None:
    """One round of :func:`profiled_runner`: its compile fills inductor's caches on disk
    (compiled graphs, Triton kernels), so that ``profile``, run later in another process,
    finds them (the script runs this beside the untimed CUDA tests: a compile of the
    paper-scale step takes about 100 s)."""
    start = time.perf_counter()
    timed_round(profiled_runner(device, small), 0, torch.device(device))
    record("warm", "resnet18 compiled tf32 first round", seconds=time.perf_counter() - start)


def section_profile(record: Record, device: str, small: bool) -> None:
    from torch.profiler import ProfilerActivity, profile

    runner = profiled_runner(device, small)
    dev = torch.device(device)
    start = time.perf_counter()
    timed_round(runner, 0, dev)
    record("profile", "resnet18 compiled tf32 first round", seconds=time.perf_counter() - start)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda"
                                           else [])
    with profile(activities=activities) as prof:
        timed_round(runner, 1, dev)
    families: dict[str, float] = {}
    kernels = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
        if not t or e.key.startswith("aten::") or e.key.startswith("Torch-Compiled"):
            continue
        families[op_family(e.key)] = families.get(op_family(e.key), 0.0) + t / 1e3
        kernels.append((t / 1e3, e.count, e.key[:110]))
    kernels.sort(reverse=True)
    record("profile", "resnet18 compiled tf32 step", ms_by_family=families,
           top_kernels=kernels[:15])


def section_anatomy(record: Record, device: str, small: bool) -> None:
    """Where a launch-bound round's time goes: the mlp's round (M = 100, one epoch of 600)
    eager, with block graphs and with phase graphs: its wall time (median of 3), the time
    its kernels keep the device busy (the profiler's device time, summed), the host's kernel
    and graph launches and its synchronizations with the device (a wall time far above the
    kernels' time: the host bounds the round)."""
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device(device)
    M, per = (8, 64) if small else (100, 600)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda"
                                           else [])
    for variant in ("eager", "block graphs", "graphs"):
        runner = Runner(config(device, "mlp", M, per, (1, 28, 28), variant))
        timed_round(runner, 0, dev)  # records the phase (graphs)
        wall = median([timed_round(runner, t, dev) for t in (1, 2, 3)])
        with profile(activities=activities) as prof:
            timed_round(runner, 4, dev)
        kernel_ms, calls = 0.0, {"launch": 0, "graph_launch": 0, "sync": 0}
        for e in prof.key_averages():
            t = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
            if t and not e.key.startswith(("aten::", "Torch-Compiled")):
                kernel_ms += t / 1e3
            key = e.key.lower()
            if "graphlaunch" in key:
                calls["graph_launch"] += e.count
            elif "launchkernel" in key:
                calls["launch"] += e.count
            elif "synchronize" in key or ("memcpy" in key and "async" not in key):
                calls["sync"] += e.count
        sites = sync_sites(functools.partial(timed_round, runner, 5, dev), dev) \
            if variant == "graphs" else None
        record("anatomy", f"mlp M={M} 1 epoch of {per}", variant=variant, wall_s=wall,
               kernel_ms=kernel_ms, device_busy=kernel_ms / 1e3 / wall if wall else None,
               phase_replays=phase_replays(runner), sync_sites=sites, **calls)
        del runner
        gc.collect()


def sync_sites(call, dev: torch.device) -> dict[str, int] | None:
    """Where ``call`` makes the host wait for the device: CUDA's synchronization debug mode
    warns at each synchronizing operation (a read of a value, a blocking copy), and the
    innermost gossipfl frames of the Python stack at each warning are counted (None off
    CUDA)."""
    import warnings

    if dev.type != "cuda":
        return None
    sites: collections.Counter = collections.Counter()

    def seen(*args, **kwargs):
        frames = [f for f in traceback.extract_stack()[:-1] if "gossipfl" in f.filename]
        where = " <- ".join(f"{f.filename.split('gossipfl/')[-1]}:{f.lineno} {f.name}"
                            for f in frames[-3:][::-1])
        sites[where or "outside gossipfl"] += 1

    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = seen
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return dict(sites.most_common())


#: in this order: the headline case first, its profile next (the compiled graph comes from
#: inductor's cache then), the small models, where their rounds' time goes, the same-numbers
#: check
SECTIONS = ("machine", "resnet", "warm", "profile", "rounds", "anatomy", "same_numbers")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--out", default="benchmarks/results/gpu_compile.jsonl")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--models", default="cnn,mlp", help="the small models (rounds)")
    parser.add_argument("--resnet-steps", type=int, default=2)
    parser.add_argument("--resnet-precisions", default="tf32,bf16")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--budget", type=float, default=330.0)
    args = parser.parse_args(argv)
    record = Record(Path(args.out))
    deadline = time.perf_counter() + args.budget
    sections = args.sections.split(",")
    peaks: dict = {}
    for name in SECTIONS:
        if name not in sections:
            continue
        start = time.perf_counter()
        try:
            if name == "machine":
                section_machine(record, torch.device(args.device), args.small)
            elif name == "same_numbers":
                section_same_numbers(record, args.device, args.small)
            elif name == "resnet":
                section_resnet(record, args.device, args.small, args, deadline, peaks)
            elif name == "rounds":
                section_rounds(record, args.device, args.small, args, deadline)
            elif name == "warm":
                section_warm(record, args.device, args.small)
            elif name == "profile" and time.perf_counter() < deadline:
                section_profile(record, args.device, args.small)
            elif name == "anatomy" and time.perf_counter() < deadline:
                section_anatomy(record, args.device, args.small)
        except Exception as err:  # noqa: BLE001
            record(name, "section", error=traceback.format_exc()[-2500:], message=str(err))
        record(name, "section_done", seconds=time.perf_counter() - start)
        if name == "machine":
            machine_rows = [json.loads(line) for line in Path(args.out).read_text().splitlines()
                            if '"case": "machine"' in line]
            if machine_rows:
                peaks = {k: v for k, v in machine_rows[-1].items() if k.endswith("tflops")}
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
