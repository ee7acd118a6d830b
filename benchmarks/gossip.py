"""Cost of one gossip (``X ← W^Q X``) against M, the graph, dense vs sparse W, and Q.

For each (graph, M, Q) the same ``[M, P]`` stack is mixed by gossipfl's Mixer with a dense W
(one matmul by the cached W^Q) and a sparse CSR W (Q sparse–dense products, nnz(W)·P
multiply-adds each), interleaved, ``--reps`` times. Reported: median (min–max) seconds, and
nanoseconds per (non-zero of W · column · step), which stays flat when the sparse cost is
O(edges · P).

    python -m benchmarks.gossip --quick
    python -m benchmarks.gossip --P 573578          # the cnn's parameter count
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from benchmarks.common import machine, markdown_table, median, set_threads, spread
from gossipfl.topology import Mixer, build_topology

GRAPHS = ("ring", "exponential", "erdos_renyi", "full")


def graph_params(graph: str, M: int) -> dict:
    """Erdős–Rényi with p = 2 ln M / M (connected with high probability)."""
    return {"p": min(1.0, 2 * np.log(M) / M)} if graph == "erdos_renyi" else {}


def time_mix(mixer: Mixer, X: torch.Tensor, steps: int) -> float:
    start = time.perf_counter()
    mixer.mix(X, 0, steps=steps)
    return time.perf_counter() - start


def run(clients: list[int], P: int, steps: list[int], reps: int) -> list[list]:
    rows = []
    gen = torch.Generator().manual_seed(0)
    for M in clients:
        X = torch.randn(M, P, generator=gen)
        for graph in GRAPHS:
            topology = build_topology(graph, M, seed=0, **graph_params(graph, M))
            nnz = int(np.count_nonzero(topology.matrix(0)))
            mixers = {"dense": Mixer(topology, sparse=False)}
            if graph != "full":  # CSR of a complete graph is only a slower dense product
                mixers["sparse"] = Mixer(topology, sparse=True)
            for Q in steps:
                times: dict[str, list[float]] = {k: [] for k in mixers}
                for mixer in mixers.values():
                    mixer.mix(X, 0, steps=Q)  # builds and caches W^Q
                for _ in range(reps):
                    for kind, mixer in mixers.items():
                        times[kind].append(time_mix(mixer, X, Q))
                auto = Mixer(topology).uses_sparse(Q)
                for kind, t in times.items():
                    sparse = kind == "sparse"
                    work = nnz * P * Q if sparse else M * M * P
                    label = kind + (" (auto)" if sparse == auto else "")
                    unit = "nnz·P·Q" if sparse else "M²·P"
                    cost = f"{median(t) / work * 1e9:.3f} ns per {unit}"
                    rows.append([graph, M, nnz, Q, label, spread(t, 4), cost])
                    print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--P", type=int, default=100_000, help="parameters per client")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    set_threads(args.threads)
    print(json.dumps(machine(torch.device("cpu"))))
    clients = [10, 100] if args.quick else [10, 100, 1000]
    steps = [1] if args.quick else [1, 4]
    rows = run(clients, args.P, steps, args.reps)
    print(f"\nP = {args.P}")
    print(markdown_table(["graph", "M", "nnz(W)", "Q", "W", "seconds", "cost"], rows))


if __name__ == "__main__":
    main()
