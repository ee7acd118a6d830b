"""GPU benchmark and checks (issue 23): gossipfl's oracles against a per-client loop on the same
GPU, in the same run, plus the numbers a GPU gives against the CPU's and under TF32/bf16.

Sections (each timed against a ``--budget`` of seconds; one that fails is recorded with its
error and the others go on):

1. ``machine``: the GPU, its measured matmul peak (fp32 without TF32, TF32, bf16; n = 8192) and
   its device-to-device copy and triad bandwidth (bytes read + written).
2. ``same_numbers``: a few algorithms (DFedAvg, DFedSAM, OledFL, CHOCO, DSGT, FedAvg) on the cnn,
   8 clients, 2 rounds of 2 local steps, run on the CPU and on the GPU (fp32, TF32 off): the
   largest relative difference of the final client models and of the test accuracy.
3. ``precision``: the same DFedAvg run on the GPU with fp32 (TF32 off), TF32 and bf16 autocast:
   the largest relative difference of the final models from fp32, and each mode's s/round.
4. ``rounds``: DFedAvg rounds, gossipfl (stacked, vmap) against the sequential reference (one
   ``nn.Module`` and optimizer per client, the research codes' loop) on the same GPU,
   interleaved: the cnn and the mlp at M = 100, one epoch of 600 samples (1×28×28 synthetic
   data, Fashion-MNIST's shape), and the paper-scale setting: ResNet-18-GN, 100 clients,
   batch 32, 5 local epochs of 500 samples (CIFAR-10's shape, synthetic data: the machine is
   offline). The ResNet round is timed per local step (``--resnet-steps`` steps, the
   reference's on every client) and its s/round projected to the 80 steps of 5 epochs; with
   ``--full-round`` one whole round of gossipfl is also run. GFLOP/s count the plain model's
   training FLOPs (``torch.utils.flop_counter``) × samples trained, against the TF32 peak.
   Peak GPU memory per implementation (``torch.cuda.max_memory_allocated``).

    python -m benchmarks.gpu --out gpu.jsonl              # on a GPU machine
    python -m benchmarks.gpu --device cpu --small         # the script's own check, anywhere

Nothing else in gossipfl depends on this file or on a GPU.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    bandwidth,
    cifar_like,
    flops_per_sample,
    machine,
    markdown_table,
    matmul_peak,
    median,
    spread,
    sync,
)
from benchmarks.round_time import GossipflRound, ReferenceRound
from gossipfl.assembly.loading import load_config
from gossipfl.config import Config
from gossipfl.core.runner import Runner
from gossipfl.models import build_model

PRECISIONS = ("fp32", "tf32", "bf16")


# --------------------------------------------------------------------------------------------
# Precision modes
# --------------------------------------------------------------------------------------------
@contextmanager
def precision(mode: str) -> Iterator[None]:
    """The TF32 flags of ``mode`` for the matmul peaks (fp32: off; tf32, bf16: on). Runs set
    them themselves through ``engine.precision`` (gossipfl.engine.precision)."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    tf32 = mode != "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------
def config(device: str, model: str, clients: int, per_client: int, shape: tuple[int, ...],
           algorithm: str = "dfedavg", oracle: str = "stacked", batch: int = 32,
           local_steps: int | None = None, local_epochs: int = 1, rounds: int = 1,
           topology: str = "ring", chunk_size: int | None = None, precision: str = "tf32",
           **extra: Any) -> Config:
    """A benchmark config on synthetic data of ``shape`` (``per_client`` samples each, iid)."""
    train: dict[str, Any] = {"rounds": rounds, "batch_size": batch, "lr": 0.05}
    train.update({"local_steps": local_steps} if local_steps else {"local_epochs": local_epochs})
    data = cifar_like(train=per_client * clients, test=1000, shape=shape)
    return load_config({
        "data": {"tensors": data, "clients": clients, "partition": "iid"},
        "model": {"name": model}, "topology": {"name": topology},
        "algorithm": {"name": algorithm, **extra}, "train": train,
        "eval": {"local_models": False}, "engine": {"oracle": oracle, "chunk_size": chunk_size, "precision": precision},
        "device": device,
    })


def final_models(cfg: Config) -> tuple[torch.Tensor, float, float]:
    """Run ``cfg`` to the end: (client models on the CPU in float64, test accuracy, s/round)."""
    runner = Runner(cfg)
    sync(runner.exp.device)
    start = time.perf_counter()
    with torch.no_grad():
        for t in range(cfg.train.rounds):
            runner.run_round(t)
    sync(runner.exp.device)
    seconds = (time.perf_counter() - start) / cfg.train.rounds
    acc = runner.evaluate()["test_acc"]
    return runner.client_models().double().cpu(), acc, seconds


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b|."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------
def section_machine(device: torch.device, small: bool) -> dict[str, Any]:
    n = 1024 if small else 8192
    out: dict[str, Any] = machine(device)
    for mode, dtype in (("fp32", torch.float32), ("tf32", torch.float32),
                        ("bf16", torch.bfloat16)):
        with precision(mode):
            out[f"matmul_{mode}_tflops"] = matmul_peak(device, n=n, dtype=dtype) / 1e3
    numel = (2**24 if small else 2**30) // 4  # 16 MB / 1 GiB of float32
    moved = bandwidth(device, numel)
    out["copy_gb_s"], out["triad_gb_s"] = moved["copy"], moved["triad"]
    return out


SAME_NUMBERS: dict[str, dict[str, Any]] = {
    "dfedavg": {}, "dfedsam": {"rho": 0.05}, "oledfl": {}, "dsgt": {}, "fedavg": {},
    "choco": {"compressor": "top_k", "fraction": 0.1, "gamma": 0.5},
}


def section_same_numbers(device: str, small: bool) -> dict[str, Any]:
    """CPU vs GPU, fp32 with TF32 off."""
    out = {}
    for name, params in SAME_NUMBERS.items():
        runs = {}
        for where in ("cpu", device):
            cfg = config(where, "cnn", 8, 64, (1, 28, 28), algorithm=name, batch=16,
                         local_steps=2, rounds=2, precision="fp32", **params)
            runs[where] = final_models(cfg)
        (cpu, cpu_acc, _), (gpu, gpu_acc, _) = runs["cpu"], runs[device]
        out[name] = {"models_rel_diff": relative(gpu, cpu), "acc_cpu": cpu_acc,
                     "acc_gpu": gpu_acc}
        print(f"  same numbers {name}: {out[name]}", flush=True)
    return out


def section_precision(device: str, small: bool) -> dict[str, Any]:
    """fp32 / tf32 / bf16 on the device: difference from fp32 after 3 rounds, s/round."""
    clients = 8 if small else 100
    out = {}
    for model, shape in (("cnn", (1, 28, 28)), ("mlp", (1, 28, 28))):
        runs = {mode: final_models(config(device, model, clients, 64 if small else 600, shape,
                                          rounds=3, precision=mode)) for mode in PRECISIONS}
        base = runs["fp32"][0]
        out[model] = {mode: {"models_rel_diff": relative(x, base), "acc": acc,
                             "s_per_round": s} for mode, (x, acc, s) in runs.items()}
        print(f"  precision {model}: {out[model]}", flush=True)
    return out


def _timed(run: GossipflRound | ReferenceRound, t: int, device: torch.device) -> dict:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    row = run.round(t)
    if device.type == "cuda":
        row["memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return row


def round_case(name: str, cfgs: dict[str, Config], reps: int, device: torch.device,
               shape: tuple[int, ...], model: str, steps_per_round: int | None,
               mode: str, deadline: float) -> dict[str, Any]:
    """Interleaved rounds of every implementation in ``cfgs`` (``reference`` = the loop)."""
    train_flops, _ = flops_per_sample(build_model(model, shape, 10), shape, 10)
    rows: dict[str, list[dict]] = {impl: [] for impl in cfgs}
    with precision(mode):  # the reference's flags (gossipfl's runs set theirs: engine.precision)
        runs = {impl: ReferenceRound(cfg) if impl == "reference" else GossipflRound(cfg)
                for impl, cfg in cfgs.items()}
        for rep in range(reps + 1):  # rep 0 warms up (cuDNN autotuning, allocator)
            for impl in list(runs):
                if time.perf_counter() > deadline and rep > 1:
                    break
                row = _timed(runs[impl], rep, device)
                print(f"  {name} {impl} rep {rep}: {row['total']:.3f} s", flush=True)
                if rep:
                    rows[impl].append(row)
        del runs
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    out: dict[str, Any] = {"mode": mode, "train_flops_per_sample": train_flops, "impls": {}}
    for impl, reps_ in rows.items():
        if not reps_:
            continue
        local = [r.get("local", 0.0) for r in reps_]
        entry = {
            "total": [r["total"] for r in reps_], "local": local,
            "gossip": [r.get("gossip", 0.0) for r in reps_],
            "eval": [r.get("eval", 0.0) for r in reps_],
            "samples": reps_[-1]["samples"],
            "memory_gib": max(r.get("memory_gib", 0.0) for r in reps_),
            "tflops": [r["samples"] * train_flops / loc / 1e12 if loc else 0.0
                       for r, loc in zip(reps_, local, strict=True)],
        }
        if steps_per_round:  # every client trains cfg.train.local_steps steps a round
            scale = steps_per_round / cfgs[impl].train.local_steps
            entry["projected_s_per_round"] = [
                loc * scale + g for loc, g in zip(local, entry["gossip"], strict=True)]
        out["impls"][impl] = entry
    return out


def section_rounds(device: str, small: bool, args: argparse.Namespace,
                   deadline: float) -> dict[str, Any]:
    dev = torch.device(device)
    M = 8 if small else 100
    out: dict[str, Any] = {}
    for model in ("cnn", "mlp"):
        shape = (1, 28, 28)
        per = 64 if small else 600
        cfgs = {impl: config(device, model, M, per, shape, oracle=impl if impl != "reference"
                             else "loop") for impl in ("stacked", "vmap", "reference")}
        out[f"{model} M={M} 1 epoch"] = round_case(
            f"{model}", cfgs, args.reps, dev, shape, model, None, "tf32", deadline)
        print(table(out), flush=True)
    # the paper-scale setting: per-step timing, projected to 5 epochs of 500 samples (80 steps)
    shape = (3, 32, 32)
    per = 64 if small else 500
    steps = args.resnet_steps
    cfgs = {impl: config(device, "resnet18", M, per, shape, local_steps=steps,
                         oracle=impl if impl != "reference" else "loop")
            for impl in ("stacked", "vmap", "reference")}
    runs_out = {}
    bf16 = config(device, "resnet18", M, per, shape, local_steps=steps, precision="bf16")
    for mode in ("tf32", "bf16") if not small else ("tf32",):
        chosen = cfgs if mode == "tf32" else {"stacked": bf16}
        runs_out[mode] = round_case("resnet18", chosen, args.reps, dev, shape, "resnet18", 80,
                                    mode, deadline)
    out[f"resnet18-GN M={M}, per step (5 epochs of 500 = 80 steps)"] = runs_out["tf32"]
    if "bf16" in runs_out:
        out[f"resnet18-GN M={M}, per step, bf16 autocast"] = runs_out["bf16"]
    projected = median(runs_out["tf32"]["impls"].get("stacked", {}).get(
        "projected_s_per_round", [float("inf")]))
    if args.full_round and time.perf_counter() + 1.5 * projected < deadline:
        cfg = config(device, "resnet18", M, per, shape, local_epochs=5)
        runner = GossipflRound(cfg)
        with precision("tf32"):
            row = _timed(runner, 0, dev)
        out[f"resnet18-GN M={M}, one whole round (stacked)"] = row
        print(f"  whole round: {row}", flush=True)
    return out


def section_tuning(device: str, small: bool, args: argparse.Namespace,
                   deadline: float) -> dict[str, Any]:
    """cuDNN autotuning (``cudnn.benchmark``) and the block size (``engine.chunk_size``) on the
    ResNet-18-GN step and the cnn round: what the GPU defaults should be."""
    dev = torch.device(device)
    M = 8 if small else 100
    out: dict[str, Any] = {}
    saved = torch.backends.cudnn.benchmark
    try:
        for autotune in (False, True):
            torch.backends.cudnn.benchmark = autotune
            for chunk in (None, 25, 50, 100) if not small else (None, 4):
                cfg = config(device, "resnet18", M, 64 if small else 500, (3, 32, 32),
                             local_steps=args.resnet_steps, chunk_size=chunk)
                name = f"resnet18 stacked, cudnn.benchmark={autotune}, chunk_size={chunk}"
                out[name] = round_case(name, {"stacked": cfg}, 2, dev, (3, 32, 32),
                                       "resnet18", 80, "tf32", deadline)
            if autotune:
                cfgs = {impl: config(device, "resnet18", M, 64 if small else 500, (3, 32, 32),
                                     local_steps=args.resnet_steps, oracle=impl)
                        for impl in ("vmap", "loop")}
                out["resnet18 vmap/reference, cudnn.benchmark=True"] = round_case(
                    "resnet18 autotuned", {"vmap": cfgs["vmap"], "reference": cfgs["loop"]},
                    2, dev, (3, 32, 32), "resnet18", 80, "tf32", deadline)
            cfgs = {impl: config(device, "cnn", M, 64 if small else 600, (1, 28, 28),
                                 oracle=impl if impl != "reference" else "loop")
                    for impl in ("stacked", "vmap", "reference")}
            out[f"cnn, cudnn.benchmark={autotune}"] = round_case(
                "cnn", cfgs, 2, dev, (1, 28, 28), "cnn", None, "tf32", deadline)
            print(table(out), flush=True)
    finally:
        torch.backends.cudnn.benchmark = saved
    return out


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def table(rounds: dict[str, Any], peak_tflops: float | None = None) -> str:
    rows = []
    for case, result in rounds.items():
        impls = result.get("impls") if isinstance(result, dict) else None
        if not impls:
            continue
        key = "projected_s_per_round" if "projected_s_per_round" in next(
            iter(impls.values())) else "total"
        ref = median(impls["reference"][key]) if "reference" in impls else None
        for impl, r in impls.items():
            seconds = median(r[key])
            tflops = median(r["tflops"])
            rows.append([case, result["mode"], impl, spread(r[key], 3),
                         f"{median(r['local']):.3f}", f"{median(r['gossip']):.4f}",
                         f"{tflops:.2f}",
                         f"{100 * tflops / peak_tflops:.1f}%" if peak_tflops else "–",
                         f"{r['memory_gib']:.2f}",
                         f"{ref / seconds:.2f}×" if ref else "–"])
    return markdown_table(["case", "precision", "implementation",
                           "s / round (projected for per-step cases)",
                           "local s (timed)", "gossip s", "TFLOP/s (training)", "of TF32 peak",
                           "peak GiB", "vs reference"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="tiny sizes (checks the script)")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for all sections")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--resnet-steps", type=int, default=2)
    parser.add_argument("--full-round", action="store_true")
    parser.add_argument("--sections", default="machine,same_numbers,precision,rounds")
    parser.add_argument("--out", default="benchmarks/results/gpu.jsonl")
    args = parser.parse_args()
    deadline = time.perf_counter() + args.budget
    device = torch.device(args.device)
    results: dict[str, Any] = {}
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1, default=str))
        tmp.replace(out_path)

    sections = {
        "machine": lambda: section_machine(device, args.small),
        "same_numbers": lambda: section_same_numbers(args.device, args.small),
        "precision": lambda: section_precision(args.device, args.small),
        "rounds": lambda: section_rounds(args.device, args.small, args, deadline),
        "tuning": lambda: section_tuning(args.device, args.small, args, deadline),
    }
    for name in args.sections.split(","):
        if time.perf_counter() > deadline:
            results[name] = {"skipped": "out of budget"}
            continue
        start = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            results[name] = sections[name]()
        except Exception:  # noqa: BLE001 — record and go on to the next section
            results[name] = {"error": traceback.format_exc()}
            print(results[name]["error"], flush=True)
        results[name + "_seconds"] = time.perf_counter() - start
        save()
    peak = results.get("machine", {}).get("matmul_tf32_tflops")
    for name in ("rounds", "tuning"):
        if isinstance(results.get(name), dict):
            print(table(results[name], peak))
    print(json.dumps({k: v for k, v in results.items() if k not in ("rounds", "tuning")},
                     default=str)[:4000])


if __name__ == "__main__":
    main()
