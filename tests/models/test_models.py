"""Models: output shapes, no BatchNorm, parameter counts by hand, heads, options, errors."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from gossipfl.errors import GossipflError
from gossipfl.models import MODELS, build_model, head_names, model_options

SHAPES = [(1, 28, 28), (3, 32, 32)]


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def conv(c_in: int, c_out: int, k: int, bias: bool = True) -> int:
    return c_in * c_out * k * k + (c_out if bias else 0)


def fc(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


@pytest.mark.represented
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(set(MODELS) - {"lstm"}))  # lstm: tokens, see test_leaf_emnist
def test_output_shape_no_batchnorm_and_head(name, shape):
    model = build_model(name, shape, 7, seed=0)
    out = model(torch.randn(2, *shape))
    assert out.shape == (2, 7)
    assert torch.isfinite(out).all()
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert list(model.buffers()) == []  # nothing to average besides parameters
    assert model.head_names == ("head.weight", "head.bias")
    assert model.get_submodule("head").out_features == 7


def test_cnn_parameter_count_by_hand():
    # FMNIST: 28 -conv5-> 24 -pool-> 12 -conv5-> 8 -pool-> 4, so FC 64*4*4 = 1024 -> 384
    fmnist = conv(1, 64, 5) + conv(64, 64, 5) + fc(1024, 384) + fc(384, 192) + fc(192, 10)
    assert fmnist == 573_578
    assert n_params(build_model("cnn", (1, 28, 28), 10)) == fmnist
    # CIFAR-10: 32 -> 28 -> 14 -> 10 -> 5, FC 1600 -> 384 (the FL-Simulator LeNet)
    cifar = conv(3, 64, 5) + conv(64, 64, 5) + fc(1600, 384) + fc(384, 192) + fc(192, 10)
    assert n_params(build_model("cnn", (3, 32, 32), 10)) == cifar


def test_vgg11_parameter_count_by_hand():
    widths = [3, 64, 128, 256, 256, 512, 512, 512, 512]
    convs = sum(conv(a, b, 3) for a, b in itertools.pairwise(widths))
    norms = sum(2 * c for c in widths[1:])
    assert n_params(build_model("vgg11", (3, 32, 32), 10)) == convs + norms + fc(512, 10)
    plain = build_model("vgg11", (3, 32, 32), 10, groups=None)
    assert not any(isinstance(m, nn.GroupNorm) for m in plain.modules())
    assert n_params(plain) == convs + fc(512, 10)


@pytest.mark.slow
def test_resnet18_counts_and_options():
    cifar = build_model("resnet18", (3, 32, 32), 10)
    assert n_params(cifar) == 11_173_962  # DisPFL's customized ResNet-18 (the DFedMDC lineage)
    norms = [m for m in cifar.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 1 + 16 + 3  # stem, 2 per block, 3 shortcuts
    assert {m.num_groups for m in norms} == {32}
    assert cifar.stem[0].kernel_size == (3, 3) and cifar.stem[0].stride == (1, 1)
    assert not any(isinstance(m, nn.MaxPool2d) for m in cifar.modules())

    imagenet = build_model("resnet18", (3, 32, 32), 10, stem="imagenet", groups=2)
    # torchvision resnet18 has 11,689,512 parameters with a 1000-way fc
    assert n_params(imagenet) == 11_689_512 - fc(512, 1000) + fc(512, 10)
    assert imagenet.stem[0].kernel_size == (7, 7) and imagenet.stem[0].stride == (2, 2)
    assert any(isinstance(m, nn.MaxPool2d) for m in imagenet.modules())
    assert {m.num_groups for m in imagenet.modules() if isinstance(m, nn.GroupNorm)} == {2}
    assert imagenet(torch.randn(1, 3, 32, 32)).shape == (1, 10)


def test_mlp_hidden_and_linear_options():
    model = build_model("mlp", (1, 28, 28), 10, hidden=[50])
    sizes = [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]
    assert sizes == [(784, 50), (50, 10)]
    default = build_model("mlp", (1, 28, 28), 10)
    assert n_params(default) == fc(784, 200) + fc(200, 200) + fc(200, 10)
    lin = build_model("linear", (5,), 1, bias=False)
    assert lin(torch.randn(4, 5)).shape == (4, 1)
    assert lin.head_names == ("head.weight",)


def test_head_names_fallback_is_last_linear():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    assert head_names(net) == ("2.weight", "2.bias")
    assert head_names(nn.Sequential(nn.ReLU())) == ()


def test_seed_is_reproducible_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a = build_model("cnn", (1, 28, 28), 10, seed=3)
    b = build_model("cnn", (1, 28, 28), 10, seed=3)
    c = build_model("cnn", (1, 28, 28), 10, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    for pa, pb, pc in zip(a.parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert not torch.equal(a.head.weight, c.head.weight)


def test_model_options_lists_defaults():
    assert model_options("resnet18") == {"stem": "cifar", "groups": 32}
    assert model_options("cnn") == {}


@pytest.mark.parametrize(
    ("name", "shape", "options", "match"),
    [
        ("resnet", (3, 32, 32), {}, r"model\.name: .*did you mean 'resnet18'"),
        ("cnn", (1, 28, 28), {"groups": 2}, r"model\.options\.groups: model 'cnn' takes no"),
        ("resnet18", (3, 32, 32), {"grups": 2}, r"did you mean 'groups'"),
        ("resnet18", (3, 32, 32), {"stem": "imagenett"}, r"model\.options\.stem.*'imagenet'"),
        ("resnet18", (3, 32, 32), {"groups": 48}, r"model\.options\.groups: must divide"),
        ("vgg11", (3, 32, 32), {"groups": 0}, r"model\.options\.groups: must be a positive"),
        ("mlp", (1, 28, 28), {"hidden": [0]}, r"model\.options\.hidden"),
        ("cnn", (1, 8, 8), {}, r"'cnn' needs image inputs"),
        ("resnet18", (784,), {}, r"'resnet18' needs image inputs"),
        ("lstm", (1, 28, 28), {}, r"'lstm' needs token sequences of shape \(T,\)"),
        ("lstm", (80,), {"hidden": 0}, r"model\.options\.hidden: must be a positive"),
    ],
)
def test_user_errors_name_the_key(name, shape, options, match):
    with pytest.raises(GossipflError, match=match):
        build_model(name, shape, 10, **options)
