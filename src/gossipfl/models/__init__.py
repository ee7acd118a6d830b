"""Models by name: plain torch modules, GroupNorm (never BatchNorm) so that vmap works.

Convention: the classifier head is the model's last ``nn.Linear``; every built-in model names
it ``head``, and :func:`build_model` stores its parameter names in ``model.head_names``
(the personal part for FedPer/FedRep/DFedMDC; the body is everything else).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence

import torch
from torch import nn

from gossipfl.errors import GossipflError, did_you_mean
from gossipfl.models.cnn import cnn, femnist_cnn
from gossipfl.models.mlp import linear, logistic, mlp
from gossipfl.models.resnet import resnet18
from gossipfl.models.text import lstm
from gossipfl.models.vgg import vgg11
from gossipfl.rng import derive_seed
from gossipfl.validation import choose, coerce

ModelBuilder = Callable[..., nn.Module]

MODELS: dict[str, ModelBuilder] = {
    "linear": linear,
    "logistic": logistic,
    "mlp": mlp,
    "cnn": cnn,
    "vgg11": vgg11,
    "resnet18": resnet18,
    "femnist_cnn": femnist_cnn,
    "lstm": lstm,
}

__all__ = ["MODELS", "build_model", "check_options", "head_names", "model_options",
           "register_model"]


def register_model(name: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Decorator: make ``builder(input_shape, num_classes, **options)`` available as model
    ``name`` (its keyword arguments after the first two are the model's options)."""
    def decorate(builder: ModelBuilder) -> ModelBuilder:
        from gossipfl.plugins import replaceable

        if not replaceable(MODELS.get(name, builder)):
            raise ValueError(f"model name {name!r} is gossipfl's own; choose another")
        MODELS[name] = builder
        return builder
    return decorate


def model_options(name: str) -> dict[str, object]:
    """The options a model accepts, with their defaults."""
    choose("model.name", name, MODELS)
    params = list(inspect.signature(MODELS[name]).parameters.values())[2:]
    return {p.name: p.default for p in params}


def check_options(name: str, options: dict[str, object]) -> dict[str, object]:
    """The model's options checked against its builder's signature: known names, values of
    the annotated types (``model.options.hidden`` must be a list of integers, ...)."""
    if not isinstance(options, dict):
        raise GossipflError(f"model.options: must be a mapping, got {options!r}.")
    allowed = model_options(name)
    for key in options:
        if key not in allowed:
            if not allowed:
                raise GossipflError(
                    f"model.options.{key}: model '{name}' takes no options, got '{key}'."
                )
            raise GossipflError(
                f"model.options.{key}: not an option of model '{name}'"
                f"{did_you_mean(str(key), allowed)}; it takes {', '.join(allowed)}.")
    hints = _option_hints(MODELS[name])
    return {key: coerce(f"model.options.{key}", value, hints.get(key, typing.Any))
            for key, value in options.items()}


def _option_hints(builder: ModelBuilder) -> dict[str, object]:
    """The builder's type annotations (none for a plugin whose annotations do not resolve)."""
    try:
        return typing.get_type_hints(builder)
    except Exception:  # noqa: BLE001 - unresolvable annotations: the values go unchecked
        return {}


def head_names(model: nn.Module) -> tuple[str, ...]:
    """Parameter names of the classifier head: ``model.head_names`` if set, else the
    parameters of the last ``nn.Linear`` in module order."""
    names = getattr(model, "head_names", None)
    if names is not None:
        return tuple(names)
    last = None
    for prefix, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = prefix
    if last is None:
        return ()
    params = model.get_submodule(last).named_parameters()
    return tuple(f"{last}.{n}" if last else n for n, _ in params)


def build_model(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    seed: int | None = None,
    **options,
) -> nn.Module:
    """Build model ``name`` for samples of shape ``input_shape`` and ``num_classes`` outputs.

    With ``seed``, the initial weights come from the stream derived from (seed, "model_init")
    and the global RNG state is left untouched; without it, torch's global RNG is used.
    """
    options = check_options(name, options)
    if isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 1:
        raise GossipflError(f"model: num_classes must be a positive integer, got {num_classes}.")
    shape = tuple(int(d) for d in input_shape)
    if seed is None:
        model = MODELS[name](shape, int(num_classes), **options)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "model_init"))
            model = MODELS[name](shape, int(num_classes), **options)
    model.head_names = head_names(model)
    return model
