"""Cost of the flatness analysis: batched Hessian-vector products over M models vs a loop.

For each (model, M) the same ``[M, P]`` stack and N shared samples go through
:class:`gossipfl.engine.hvp.HessianOperator` in "batched" mode (vmap of ``jvp(grad)`` over
the models) and "loop" mode (the same function model by model), interleaved, ``--reps`` times
after one warm-up. Reported: median (min–max) seconds for H·v of all M models, seconds per
model, and the loop/batched time ratio. Then what one analysis of one model costs: the
seconds of one H·v, and of one 2-D landscape grid (``--grid``² points through the oracle).

    python -m benchmarks.hessian --quick
    python -m benchmarks.hessian --samples 1000 --clients 1 10 20
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from benchmarks.common import machine, markdown_table, median, set_threads, spread
from gossipfl.analysis import make_evaluator, random_directions, surface
from gossipfl.engine import ParamLayout, make_oracle
from gossipfl.engine.hvp import HessianOperator
from gossipfl.models import build_model

MODELS = {  # name → (builder options, input shape): the quickstart MLP and the paper's CNN
    "mlp": ({"hidden": [200]}, (1, 28, 28)),
    "cnn": ({}, (1, 28, 28)),
}


def problem(name: str, M: int, N: int) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor,
                                                 torch.Tensor]:
    options, shape = MODELS[name]
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = build_model(name, shape, 10, **options)
    P = ParamLayout.from_module(model).P
    X = torch.randn(M, P, generator=gen) * 0.05
    return model, X, torch.randn(N, *shape, generator=gen), torch.randint(0, 10, (N,),
                                                                         generator=gen)


def time_hvp(op: HessianOperator, X: torch.Tensor, V: torch.Tensor) -> float:
    start = time.perf_counter()
    op.hvp(X, V)
    return time.perf_counter() - start


def compare(name: str, M: int, N: int, reps: int, batch_size: int) -> list:
    model, X, inputs, targets = problem(name, M, N)
    V = torch.randn_like(X)
    ops = {mode: HessianOperator(model, inputs, targets, batch_size=batch_size, mode=mode)
           for mode in ("batched", "loop")}
    times: dict[str, list[float]] = {mode: [] for mode in ops}
    for op in ops.values():
        time_hvp(op, X[:1], V[:1])  # warm-up
    for _ in range(reps):
        for mode, op in ops.items():
            times[mode].append(time_hvp(op, X, V))
    ratio = median(times["loop"]) / median(times["batched"])
    return [name, X.shape[1], M, N, spread(times["batched"], 3), spread(times["loop"], 3),
            f"{median(times['batched']) / M:.3f}", f"{median(times['loop']) / M:.3f}",
            f"{ratio:.2f}"]


def landscape_cost(name: str, N: int, grid: int, batch_size: int) -> float:
    """Seconds for one ``grid × grid`` landscape of one model through the oracle."""
    model, X, inputs, targets = problem(name, 1, N)
    evaluate = make_evaluator(make_oracle("auto", model), inputs, targets,
                              batch_size=batch_size)
    layout = ParamLayout.from_module(model)
    d1, d2 = random_directions(layout, X, 2, torch.Generator().manual_seed(0))
    surface(evaluate, X, d1, d2, np.linspace(-1, 1, 3))  # warm-up
    start = time.perf_counter()
    surface(evaluate, X, d1, d2, np.linspace(-1, 1, grid))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="mlp only, M in 1 and 10")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 10, 20])
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--grid", type=int, default=21)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    set_threads(args.threads)
    print(json.dumps(machine(torch.device("cpu"))))
    models = ["mlp"] if args.quick else list(MODELS)
    clients = [1, 10] if args.quick else args.clients
    rows = []
    for name in models:
        for M in clients:
            rows.append(compare(name, M, args.samples, args.reps, args.batch_size))
            print(rows[-1], flush=True)
    print(f"\nH·v of all M models on N shared samples (batches of {args.batch_size}); "
          f"median (min–max) of {args.reps}")
    print(markdown_table(["model", "P", "M", "N", "batched s", "loop s", "batched s/model",
                          "loop s/model", "loop / batched"], rows))
    costs = [[name, f"{args.grid}×{args.grid}",
              f"{landscape_cost(name, args.samples, args.grid, args.batch_size):.2f}"]
             for name in models]
    print(f"\none 2-D landscape of one model on N = {args.samples} samples")
    print(markdown_table(["model", "grid", "seconds"], costs))


if __name__ == "__main__":
    main()
