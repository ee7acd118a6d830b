"""The decayed update on the rows a fused step hands it (issue 48): each parameter's columns
of the [M, P] stack, unit stride within a row and a row stride of P, against torch's plain
SGD update on the same views; one mlp step (784-200-200-10, M = 100), fresh gradients each
time as autograd's. Milliseconds per step, the mean of 10, three times.

    PYTHONPATH=src python -m benchmarks.wd_views
"""

from __future__ import annotations

import time

import torch

from gossipfl.engine.fused_update import sgd_update

SHAPES = [(200, 784), (200,), (200, 200), (200,), (10, 200), (10,)]


def main(M: int = 100) -> None:
    torch.manual_seed(0)
    sizes = [torch.Size(s).numel() for s in SHAPES]
    X = torch.randn(M, sum(sizes))
    bounds = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    views = [X[:, a:b].view(M, *s) for a, b, s in zip(bounds[:-1], bounds[1:], SHAPES, strict=True)]

    def step(kind: str) -> float:
        grads = [torch.randn(M, *s) for s in SHAPES]  # fresh, as autograd's
        start = time.perf_counter()
        for g, y in zip(grads, views, strict=True):
            if kind == "plain":
                y.add_(g, alpha=-0.1)
            else:
                sgd_update(g, y, None, 5e-4, 0.1, 0.0)
        return time.perf_counter() - start

    for kind in ("plain", "numba"):
        step(kind)  # warm-up (numba compiles or loads its cache)
    for _ in range(3):
        print({k: f"{1e3 * sum(step(k) for _ in range(10)) / 10:.2f} ms"
               for k in ("plain", "numba")})


if __name__ == "__main__":
    main()
