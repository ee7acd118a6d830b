"""What the compiled training step copies only to change a layout (issue 48: "channels-last
end to end so that no layout copy is left between layers").

The stacked program's client losses and their gradients, as the compiled path traces them
(``make_fx`` on fake tensors: no memory, no arithmetic, exact shapes), at the paper's scale
(ResNet-18-GN, CIFAR-10's shape, 100 clients of batch 32 by default). Every ATen operation of
the joint forward and backward graph that only moves values is counted with the bytes it
writes, by kind:

- ``layout``: ``clone``/``copy``/``contiguous`` and the reshapes of permuted values that
  must copy: values rearranged between one kernel's layout and the next one's;
- ``im2col``: the per-client GEMM's patches (``im2col``, ``unfold`` copies) and their
  backward (``col2im``, ``unfold_backward``);
- ``pad``: zero padding written out.

The convolutions, products and normalizations themselves are not counted. On a GPU every
such byte is written once and read at least once by the next kernel (inductor may fuse a copy
into its consumer; the count is what the traced program asks for).

    python -m benchmarks.layout_copies                     # paper scale
    python -m benchmarks.layout_copies --clients 8 --model cnn --shape 1,28,28
"""

from __future__ import annotations

import argparse
import collections
import json

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from gossipfl.engine.stacked import StackedOracle
from gossipfl.models import build_model

LAYOUT = {"clone", "copy", "_to_copy", "copy_", "contiguous"}
#: operations that write nothing (views of their input)
VIEWS = {"view", "_unsafe_view", "as_strided", "transpose", "permute", "detach", "expand",
         "slice", "squeeze", "unsqueeze", "t", "unflatten", "select", "alias", "unfold",
         "_reshape_alias"}
IM2COL = {"im2col", "col2im", "unfold_backward"}
PAD = {"constant_pad_nd"}


def _name(node: torch.fx.Node) -> str:
    return getattr(node.target, "__name__", str(node.target)).split(".")[0]


def kind_of(node: torch.fx.Node) -> str | None:
    """The kind of copy an ATen node of the traced graph is, or None (not a copy)."""
    if node.op != "call_function":
        return None
    name = _name(node)
    if name in LAYOUT:
        source = node.args[0] if node.args else None
        if isinstance(source, torch.fx.Node) and _name(source) == "unfold":
            return "im2col"  # the patches of a per-client GEMM, gathered from their views
        return "layout"
    if name in IM2COL:
        return "im2col"
    if name in PAD:
        return "pad"
    return None


def written_bytes(node: torch.fx.Node) -> int:
    value = node.meta.get("val")
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def joint_graph(model_name: str, shape: tuple[int, ...], M: int, B: int,
                gemm: bool = True) -> torch.fx.GraphModule:
    """The traced forward and backward of M clients' losses on batches of B (fake tensors)."""
    model = build_model(model_name, shape, 10, seed=0)
    oracle = StackedOracle(model)

    def step(X, inputs, targets, mask):
        leaves = {n: v.detach().requires_grad_(True) for n, v in oracle.layout.views(X).items()}
        with torch.enable_grad():
            losses = oracle._client_losses(leaves, inputs.reshape(-1, *inputs.shape[2:]),
                                           targets, mask, gemm=gemm)
            grads = torch.autograd.grad(losses.sum(), list(leaves.values()))
        return losses.detach(), grads

    X = torch.zeros(M, oracle.layout.P)
    inputs = torch.zeros(M, B, *shape)
    targets = torch.zeros(M, B, dtype=torch.long)
    mask = torch.ones(M, B, dtype=torch.bool)
    return make_fx(step, tracing_mode="fake")(X, inputs, targets, mask)


def count(graph: torch.fx.GraphModule) -> dict:
    """Copies by kind: operations and bytes written, and the ten largest layout copies; the
    bytes every operation writes (views write none; a tuple's tensors are counted where they
    are taken out of it), by operation."""
    tally: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    writes: collections.Counter = collections.Counter()
    largest = []
    for node in graph.graph.nodes:
        if node.op == "call_function" and _name(node) not in VIEWS:
            writes[_name(node)] += written_bytes(node)
        kind = kind_of(node)
        if kind is None:
            continue
        size = written_bytes(node)
        tally[kind][0] += 1
        tally[kind][1] += size
        if kind == "layout":
            largest.append((size, str(node.target), tuple(node.meta["val"].shape)))
    largest.sort(reverse=True)
    return {"written_GB": round(sum(writes.values()) / 1e9, 2),
            "written_GB_by_op": {k: round(v / 1e9, 2) for k, v in writes.most_common(12)},
            "copies": {k: {"ops": v[0], "GB": round(v[1] / 1e9, 3)} for k, v in
                       sorted(tally.items())},
            "largest_layout": [f"{s / 1e6:.0f} MB {t} {shape}" for s, t, shape in largest[:10]]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--shape", default="3,32,32")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--eager", action="store_true",
                        help="the eager program (grouped convolutions only) instead")
    args = parser.parse_args(argv)
    shape = tuple(int(s) for s in args.shape.split(","))
    graph = joint_graph(args.model, shape, args.clients, args.batch, gemm=not args.eager)
    result = {"model": args.model, "shape": shape, "clients": args.clients,
              "batch": args.batch, "path": "eager" if args.eager else "compiled (gemm)",
              **count(graph)}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
