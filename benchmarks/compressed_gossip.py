"""One gossip step with CHOCO-Gossip compression against the exact step, on the sparse mixer
(issue 26), interleaved step by step so that load on a shared machine hits both alike:

    PYTHONPATH=src python -m benchmarks.compressed_gossip [--repeats 7]

Cases: M = 100 clients of the headline mlp (P = 199 210) and M = 1000 of the 784-64-10 mlp
(P = 50 890); the ring, a random 10-regular graph and the exponential graph; W applied as CSR
(``topology.sparse: sparse``). Exact: X ← W Z (nnz(W)·P multiply-adds). Compressed (top-k at
1 % and sign, steady state: one step per round on the same channel): d = Z − X̂, Q(d),
X̂ += Q, S += W Q, X = Z + γ (S − X̂). top-k runs as compression.kernels' compiled CPU kernels
(the selection from Z and X̂; the messages delivered without densifying, nnz(W)·k, each
receiver's consensus row computed right after its delivery) and, for comparison, as its
torch definition (``GOSSIPFL_KERNELS=torch``); sign is dense. Prints the median seconds per
step and the ratio compressed / exact.

The allocator is set as the runner sets it (``engine.keep_freed_memory``: glibc reuses freed
pages), so that neither step pays page faults for its fresh ``[M, P]`` output; without it
both pay ≈ 2 µs per 4 KiB page on the benchmark VM, which hid the difference between them.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from benchmarks.common import markdown_table, start_cpu_run
from gossipfl.compression.gossip import Channels, build_choco
from gossipfl.engine import ParamLayout
from gossipfl.engine.groups import ParamGroups
from gossipfl.network.federation import Federation
from gossipfl.network.wire import Pipeline
from gossipfl.topology import Mixer, build_topology

CASES = [(100, 199_210), (1000, 50_890)]
GRAPHS = {"ring": {}, "k_regular": {"k": 10}, "exponential": {}}
COMPRESSIONS = {"top_k 1%": {"compressor": "top_k", "fraction": 0.01, "gamma": 0.5},
                "sign": {"compressor": "sign", "gamma": 0.5}}


def federation(m: int, p: int, graph: str) -> Federation:
    topology = build_topology(graph, m, mixing="metropolis_hastings", seed=0, **GRAPHS[graph])
    groups = ParamGroups.build(ParamLayout.from_module(torch.nn.Linear(p, 1, bias=False)), [])
    return Federation(m, groups, torch.ones(m), seed=0,
                      mixer=Mixer(topology, sparse="sparse"))


def with_torch_kernels(fn):
    """``fn()`` with ``GOSSIPFL_KERNELS=torch`` (compression.kernels' torch definition)."""
    os.environ["GOSSIPFL_KERNELS"] = "torch"
    try:
        return fn()
    finally:
        del os.environ["GOSSIPFL_KERNELS"]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def case(m: int, p: int, graph: str, repeats: int) -> list[dict]:
    fed = federation(m, p, graph)
    z = torch.randn(m, p)
    channels = {name: Pipeline(fed.wire, [Channels(build_choco(spec))])
                for name, spec in COMPRESSIONS.items()}
    runs = {"exact": lambda: fed.gossip(z, 0)}
    rounds = itertools.count()
    for name, ch in channels.items():
        # one step per round, so that every call is channel x's next step (a second call in
        # the same round is refused: a channel is gossiped once a round)
        runs[name] = (lambda ch=ch: ch.mix(z, next(rounds), 1))
        runs[name]()  # allocates the public copies (warm-up)
    torch_kernels = Pipeline(fed.wire, [Channels(build_choco(COMPRESSIONS["top_k 1%"]))])
    runs["top_k 1%, torch code"] = lambda: with_torch_kernels(
        lambda: torch_kernels.mix(z, next(rounds), 1))
    runs["top_k 1%, torch code"]()
    times = {name: [] for name in runs}
    for name, fn in runs.items():  # warm-up
        fn()
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(timed(fn))
    exact = statistics.median(times["exact"])
    return [{"clients": m, "P": p, "graph": graph, "gossip": name,
             "seconds": statistics.median(t), "ratio": statistics.median(t) / exact}
            for name, t in times.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    start_cpu_run(args.threads)  # glibc keeps freed memory, as the runner does
    rows = []
    for m, p in CASES:
        for graph in GRAPHS:
            for r in case(m, p, graph, args.repeats):
                rows.append([r["clients"], r["P"], r["graph"], r["gossip"],
                             f"{1e3 * r['seconds']:.1f}", f"{r['ratio']:.2f}"])
                print(rows[-1], flush=True)
    print(markdown_table(["M", "P", "graph", "gossip", "ms / step", "× exact"], rows))


if __name__ == "__main__":
    main()
