"""The GPU paths of the stacked oracle (gossipfl.engine.compiled): the per-client GEMM of the
convolutions the compiled path chooses, the compiled client losses, the switches; on a CUDA
device, the CUDA graphs (the same bits as the eager blocks) and the compiled runs (the eager
numbers to float rounding). The compiled path is checked here through the ``aot_eager``
backend (the same flattened graph and autograd, no code generation: seconds); the inductor
backend on the CPU in the slow tier."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.data import from_tensors
from gossipfl.engine.compiled import (
    GraphedBlocks,
    resolve_compile,
    resolve_graphs,
    resolve_switch,
)
from gossipfl.engine.stacked import StackedOracle
from gossipfl.engine.stacked_layers import conv2d_gemm, per_client_gemm
from gossipfl.errors import GossipflError
from gossipfl.models import build_model

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

#: every built-in convolutional model, with an input of its kind
slow = pytest.mark.slow
CONV_MODELS = [pytest.param("resnet18", (3, 32, 32), {}, id="resnet18"),
               pytest.param("resnet18", (3, 64, 64), {"stem": "imagenet"}, id="resnet18-imagenet",
                            marks=slow),
               pytest.param("cnn", (1, 28, 28), {}, id="cnn"),
               pytest.param("cnn", (3, 32, 32), {}, id="cnn-rgb"),
               pytest.param("vgg11", (3, 32, 32), {}, id="vgg11", marks=slow),
               pytest.param("femnist_cnn", (1, 28, 28), {}, id="femnist_cnn")]


def conv_layers(name: str, shape: tuple[int, ...], options: dict) -> list[tuple[nn.Conv2d,
                                                                               tuple[int, int]]]:
    """Every Conv2d of a built-in model with the input plane it sees."""
    model = build_model(name, shape, 10, seed=0, **options)
    seen: list = []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(
        (mod, tuple(args[0].shape[2:])))) for m in model.modules() if isinstance(m, nn.Conv2d)]
    model(torch.zeros(1, *shape))
    for h in hooks:
        h.remove()
    return seen


def test_the_rule_picks_the_layers_the_measurements_name():
    decided = {(m.in_channels, m.out_channels, m.kernel_size, m.stride, hw):
               per_client_gemm(m, hw) for m, hw in conv_layers("resnet18", (3, 32, 32), {})}
    assert not decided[(3, 64, (3, 3), (1, 1), (32, 32))]  # the stem: cuDNN
    assert not decided[(64, 64, (3, 3), (1, 1), (32, 32))]  # stride 1, 32x32: cuDNN
    assert not decided[(128, 128, (3, 3), (1, 1), (16, 16))]
    assert decided[(256, 256, (3, 3), (1, 1), (8, 8))]  # stride 1, 8x8 planes: GEMM
    assert decided[(512, 512, (3, 3), (1, 1), (4, 4))]
    assert decided[(64, 128, (3, 3), (2, 2), (32, 32))]  # strided: GEMM
    assert decided[(64, 128, (1, 1), (2, 2), (32, 32))]  # 1x1: GEMM
    assert not per_client_gemm(nn.Conv2d(32, 32, 3, groups=2), (4, 4))
    assert not per_client_gemm(nn.Conv2d(32, 32, 3, dilation=2), (8, 8))


@pytest.mark.parametrize("name,shape,options", CONV_MODELS)
def test_the_gemm_convolution_is_the_grouped_one(name, shape, options):
    """Every layer shape of the built-in models (stem, strided, 1x1, stride 1; groups =
    clients): the per-client GEMM's output and both its gradients equal the grouped
    convolution's, in float64 to 1e-12."""
    M, N = 2, 1
    gen = torch.Generator().manual_seed(1)
    layers = {}
    for module, hw in conv_layers(name, shape, options):  # each distinct shape once
        layers.setdefault((module.in_channels, module.out_channels, module.kernel_size,
                           module.stride, module.padding, hw), (module, hw))
    for module, hw in layers.values():
        C, O = module.in_channels, module.out_channels
        kh, kw = module.kernel_size
        x = torch.randn(N, M * C, *hw, generator=gen, dtype=torch.float64, requires_grad=True)
        w = torch.randn(M, O, C, kh, kw, generator=gen, dtype=torch.float64, requires_grad=True)
        b = torch.randn(M, O, generator=gen, dtype=torch.float64, requires_grad=True)
        want = F.conv2d(x, w.reshape(M * O, C, kh, kw), b.reshape(-1), module.stride,
                        module.padding, 1, M)
        got = conv2d_gemm(x, w, b, module.stride, module.padding, M)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        seed = torch.randn(want.shape, generator=gen, dtype=torch.float64)
        grads_want = torch.autograd.grad(want, (x, w, b), seed)
        grads_got = torch.autograd.grad(got, (x, w, b), seed)
        for g, h in zip(grads_got, grads_want, strict=True):
            torch.testing.assert_close(g, h, rtol=1e-12, atol=1e-12)


def block(name: str, shape: tuple[int, ...], M: int = 3, B: int = 4, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    model = build_model(name, shape, 10, seed=0)
    X = torch.stack([torch.cat([p.detach().reshape(-1) for p in model.parameters()])] * M)
    X = X + 0.01 * torch.randn(X.shape, generator=gen)
    inputs = torch.randn(M, B, *shape, generator=gen)
    targets = torch.randint(0, 10, (M, B), generator=gen)
    mask = torch.ones(M, B, dtype=torch.bool)
    mask[-1, B // 2:] = False  # a client with fewer samples
    return model, X, inputs, targets, mask


@pytest.mark.parametrize("name,shape", [("mlp", (1, 28, 28)), ("cnn", (1, 28, 28)),
                                        pytest.param("resnet18", (3, 16, 16), marks=slow)])
def test_the_compiled_losses_and_gradients_are_the_eager_ones(name, shape):
    """The flattened, compiled program (GEMM convolutions where the rule says) gives the
    eager oracle's losses and gradients to float32 rounding, also for a subset of the
    parameters (wrt) and a block whose clients do not all have samples."""
    model, X, inputs, targets, mask = block(name, shape)
    eager = StackedOracle(model)
    compiled = StackedOracle(model, compile=True, compile_backend="aot_eager")
    want = eager.loss_and_grad(X, inputs, targets, mask)
    got = compiled.loss_and_grad(X, inputs, targets, mask)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-6)
    head = [n for n in eager.layout.names if n.startswith("head")]
    want = eager.loss_and_grad(X, inputs, targets, mask, wrt=head)
    got = compiled.loss_and_grad(X, inputs, targets, mask, wrt=head)
    torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-6)
    mask[0] = False  # a client without samples: the index path
    torch.testing.assert_close(compiled.loss_and_grad(X, inputs, targets, mask)[1],
                               eager.loss_and_grad(X, inputs, targets, mask)[1],
                               rtol=1e-4, atol=1e-6)


def test_the_compiled_step_moves_the_rows_as_the_eager_one():
    model, X, inputs, targets, mask = block("cnn", (1, 28, 28))
    want, got = X.clone(), X.clone()

    def sgd(grad, y):
        y.add_(grad, alpha=-0.1)

    StackedOracle(model).loss_and_step(want, inputs, targets, mask, sgd)
    StackedOracle(model, compile=True, compile_backend="aot_eager").loss_and_step(
        got, inputs, targets, mask, sgd)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_a_block_that_cannot_be_captured_runs_eagerly_and_says_why_once(monkeypatch):
    """GraphedBlocks' fallback (here: CPU tensors, which no CUDA graph captures): the block's
    own outputs, the reason logged once per reason, no second capture attempted."""
    calls, said = [], []
    monkeypatch.setattr("gossipfl.engine.compiled.log.warning",
                        lambda message, *args: said.append(message % args))

    def block(x, y):
        calls.append(1)
        return x.sum(1), {"w": x * y}

    graphed = GraphedBlocks(block)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    loss, grads = graphed(x, y)
    graphed(x, y)
    assert torch.equal(loss, x.sum(1)) and torch.equal(grads["w"], x * y)
    assert len(said) == 1 and "runs without a CUDA graph" in said[0]
    assert len(graphed.failures) == 1 and len(calls) == 2


def test_the_switches():
    assert resolve_switch("auto", "cpu") is False and resolve_switch("auto", "cuda") is True
    assert resolve_switch(True, "cpu") is True and resolve_switch(False, "cuda") is False
    assert resolve_compile(True, "cpu") is True and resolve_compile(False, "cuda") is False
    resnet, mlp = build_model("resnet18", (3, 16, 16), 10), build_model("mlp", (1, 8, 8), 10)
    assert resolve_compile("auto", "cuda", resnet) is True  # GroupNorm: measured faster
    assert resolve_compile("auto", "cuda", mlp) is False  # measured slower
    assert resolve_compile("auto", "cpu", resnet) is False and resolve_compile("auto", "cuda") is False
    config = load_config({"engine": {"compile": True, "cuda_graphs": "auto"}})
    assert config.engine.compile is True and config.engine.cuda_graphs == "auto"
    with pytest.raises(GossipflError, match=r"engine\.compile: must be true, false or auto, "
                                            r"got 'yes'\."):
        load_config({"engine": {"compile": "yes"}})
    with pytest.raises(GossipflError, match=r"engine\.cuda_graphs: must be true or false or "
                                            r"a string, got 3\."):
        load_config({"engine": {"cuda_graphs": 3}})
    with pytest.raises(GossipflError, match=r"engine\.cuda_graphs: must be true, false, auto "
                                            r"or blocks, got 'phases'\."):
        load_config({"engine": {"cuda_graphs": "phases"}})
    assert load_config({"engine": {"cuda_graphs": "blocks"}}).engine.cuda_graphs == "blocks"
    assert resolve_graphs("blocks", "cuda") == (True, False)
    assert resolve_graphs("auto", "cuda") == (True, True)
    assert resolve_graphs("auto", "cpu") == resolve_graphs(False, "cuda") == (False, False)
    assert resolve_graphs(True, "cpu") == (True, True)


def run_setup(device: str, model: str = "cnn", **engine) -> dict:
    gen = torch.Generator().manual_seed(0)
    data = from_tensors(torch.randn(96, 1, 16, 16, generator=gen),
                        torch.randint(0, 3, (96,), generator=gen),
                        torch.randn(24, 1, 16, 16, generator=gen),
                        torch.randint(0, 3, (24,), generator=gen))
    return {"data": {"tensors": data, "clients": 6, "partition": "dirichlet", "alpha": 0.5},
            "model": {"name": model}, "topology": {"name": "ring"},
            "algorithm": {"name": "dfedavgm"},
            "train": {"rounds": 2, "local_epochs": 1, "batch_size": 8, "lr": 0.05,
                      "weight_decay": 5e-4},
            "engine": engine, "device": device, "seed": 2}


def test_on_the_cpu_auto_is_the_eager_path_bit_for_bit():
    want = gossipfl.run(run_setup("cpu", compile=False, cuda_graphs=False))
    got = gossipfl.run(run_setup("cpu"))
    assert torch.equal(got.params, want.params)


@pytest.mark.slow
def test_a_run_compiled_by_inductor_on_the_cpu_gives_the_eager_numbers():
    want = gossipfl.run(run_setup("cpu", compile=False))
    got = gossipfl.run(run_setup("cpu", compile=True))
    torch.testing.assert_close(got.params, want.params, rtol=1e-5, atol=1e-5)


@cuda
def test_cuda_graphs_give_the_eager_bits():
    """The mlp (matmuls only): unbalanced clients (Dirichlet), full blocks replayed from
    graphs, the last steps' shrinking blocks too (one graph per shape) or eagerly past the
    cap: the same bits."""
    want = gossipfl.run(run_setup("cuda", "mlp", compile=False, cuda_graphs=False))
    got = gossipfl.run(run_setup("cuda", "mlp", compile=False, cuda_graphs=True))
    assert torch.equal(got.params, want.params)


@cuda
@pytest.mark.parametrize("name,shape", [("cnn", (1, 28, 28)), ("resnet18", (3, 16, 16))])
def test_a_graphed_convolutional_block_is_the_eager_one_to_cudnn_rounding(name, shape):
    """Convolutions: under capture cuDNN may choose other algorithms than eagerly (another
    summation order), so a graphed block equals the eager one to float32 rounding, not bit
    for bit (an H200 run, benchmarks/results/gpu_h200_20261128: the cnn's 2-round run ends
    2.3 % apart at its largest weight, which a 1e-7 relative perturbation of the initial
    models also gives on the CPU: training amplifies rounding). Replayed with new rows and
    inputs: the graph reads them, not the captured ones."""
    device = torch.device("cuda")
    model, X, inputs, targets, mask = block(name, shape)
    eager, graphed = StackedOracle(model), StackedOracle(model, cuda_graphs=True)
    for k in range(3):  # capture, then two replays on other values
        X_k, inputs_k = (X + 0.01 * k).to(device), (inputs * (1 + 0.1 * k)).to(device)
        want = eager.loss_and_grad(X_k, inputs_k, targets.to(device), mask.to(device))
        got = graphed.loss_and_grad(X_k, inputs_k, targets.to(device), mask.to(device))
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got[1], want[1], rtol=1e-4, atol=1e-5)
    captured = [g for blocks in graphed._graphed.values() for g in blocks._graphs.values()
                if g is not None]
    assert captured, "the blocks ran eagerly: nothing was captured"


@cuda
@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_compiled_runs_on_cuda_stay_with_the_eager_ones(precision):
    want = gossipfl.run(run_setup("cuda", "cnn", compile=False, cuda_graphs=False,
                                  precision=precision))
    got = gossipfl.run(run_setup("cuda", "cnn", compile=True, cuda_graphs=True,
                                 precision=precision))
    tolerance = 1e-5 if precision == "fp32" else 5e-2
    difference = (got.params - want.params).abs().max() / want.params.abs().max()
    assert difference < tolerance
