"""One round of the gossip-learning scale benchmark under torch.profiler (issue 48).

The run of ``benchmarks/scale.py`` (logistic regression, one SGD step of batch 1 a round,
dfedavg, synthetic data of Fashion-MNIST's shape) built in this process; ``--warm`` rounds are
run first (the kept buffers of gossipfl.engine.recycle are then in place), then one round is
timed and one profiled. Prints the self CPU time by operator and, for the large ones, by input
shape.

    python -m benchmarks.scale_profile --clients 100000 --topology epidemic --profile
    python -m torch.distributed.run --nproc-per-node 2 -m benchmarks.scale_profile --distributed

Each timed round also says where its wall time went: the local training, the exchange of
rows between ranks (``--distributed``; of which waiting for the peers' messages: the rows
through gloo, or the shared-memory path's tokens), the sparse product, the rest.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import torch


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _timed_parts() -> dict:
    """Wall seconds of the round's parts, added up in the returned dict as they run."""
    from gossipfl.distributed.federation import DistributedWire
    from gossipfl.schedules.training import LocalTrainer
    from gossipfl.topology.mixer import Mixer

    parts: dict = {}

    def timed(owner, name, label):
        inner = getattr(owner, name, None)
        if inner is None:  # an older tree: not timed
            return

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                parts[label] = parts.get(label, 0.0) + time.perf_counter() - start
        setattr(owner, name, wrapper)

    timed(LocalTrainer, "train", "train")
    timed(DistributedWire, "_exchange", "exchange")
    timed(DistributedWire, "_wait", "of which waiting")  # for the peers' messages
    timed(Mixer, "_sparse_product", "product")
    return parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--topology", default="epidemic")
    parser.add_argument("--warm", type=int, default=2, help="rounds run before the timed one")
    parser.add_argument("--timed", type=int, default=3, help="rounds timed (wall and CPU)")
    parser.add_argument("--profile", action="store_true", help="profile one more round")
    parser.add_argument("--keep-freed-memory", action="store_true")
    parser.add_argument("--distributed", action="store_true",
                        help="engine.backend=distributed (start it under torchrun)")
    parser.add_argument("--exchange", default="auto",
                        help="engine.exchange: auto, shm or process_group (with --distributed)")
    args = parser.parse_args()
    from benchmarks.scale import overrides
    from gossipfl.assembly.loading import load_config
    from gossipfl.cli import QUICKSTART
    from gossipfl.core.runner import Runner

    rounds = args.warm + args.timed + 1
    sets = overrides(args.clients, args.topology, rounds, "logistic", args.keep_freed_memory,
                     synthetic=True)
    if args.distributed:
        sets += ["engine.backend=distributed", f"engine.exchange={args.exchange}"]
    parts = _timed_parts()
    runner = Runner(load_config(QUICKSTART, sets))
    rank = os.environ.get("RANK", "0")
    for t in range(args.warm):
        runner.run_round(t)
    parts.clear()
    for t in range(args.warm, args.warm + args.timed):
        wall, cpu = time.perf_counter(), _cpu()
        runner.run_round(t)
        wall, cpu = time.perf_counter() - wall, [b - a for a, b in zip(cpu, _cpu(), strict=True)]
        shares = ", ".join(f"{k} {v:.2f}" for k, v in parts.items())
        print(f"rank {rank} round {t + 1}: wall {wall:.2f} s ({shares}), user {cpu[0]:.2f} s, "
              f"sys {cpu[1]:.2f} s ({torch.get_num_threads()} threads; load "
              f"{os.getloadavg()[0]:.2f})", flush=True)
        parts.clear()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux
    print(f"rank {rank}: peak resident {peak:.2f} GB", flush=True)
    if not args.profile:
        return 0
    with torch.profiler.profile(record_shapes=True) as prof:
        start = time.perf_counter()
        runner.run_round(args.warm + args.timed)
        seconds = time.perf_counter() - start
    print(f"round {args.warm + args.timed + 1} (profiled): {seconds:.2f} s")
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:14]:
        print(f"{e.key:<40} {e.self_cpu_time_total / 1e6:6.2f} s "
              f"{100 * e.self_cpu_time_total / total:5.1f}% calls {e.count}")
    print(f"total self CPU {total / 1e6:.2f} s")
    print("-- by input shape (the largest)")
    shaped = sorted(prof.key_averages(group_by_input_shape=True),
                    key=lambda e: -e.self_cpu_time_total)[:12]
    for e in shaped:
        print(f"{e.key:<16} {e.self_cpu_time_total / 1e6:5.2f} s calls {e.count:4d} "
              f"{e.input_shapes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
