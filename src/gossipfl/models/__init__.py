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

from gossipfl.common.rng import derive_seed
from gossipfl.errors import GossipflError, did_you_mean
from gossipfl.models.cnn import cnn, femnist_cnn
from gossipfl.models.mlp import linear, logistic, mlp
from gossipfl.models.resnet import resnet18
from gossipfl.models.text import lstm
from gossipfl.models.vgg import vgg11
from gossipfl.plugins import Registry
from gossipfl.validation import coerce

ModelBuilder = Callable[..., nn.Module]

MODELS: Registry = Registry("model", "model.name", {
    "linear": linear,
    "logistic": logistic,
    "mlp": mlp,
    "cnn": cnn,
    "vgg11": vgg11,
    "resnet18": resnet18,
    "femnist_cnn": femnist_cnn,
    "lstm": lstm,
})

__all__ = ["MODELS", "build_model", "check_model_fits", "check_options", "head_names",
           "model_options", "register_model"]


def register_model(name: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Decorator: make ``builder(input_shape, num_classes, **options)`` available as model
    ``name`` (its keyword arguments after the first two are the model's options)."""
    from gossipfl.plugins import check_signature, origin

    if not isinstance(name, str) or not name.strip() or name != name.strip():
        named = f" ({origin(name)})" if callable(name) else ""
        raise GossipflError(f"register_model needs the model's name, as in "
                            f"@register_model(\"my_model\"), got {name!r:.60}{named}.")

    def decorate(builder: ModelBuilder) -> ModelBuilder:
        check_signature(builder, ("input_shape", "num_classes"), f"model '{name}'")
        return MODELS.add(name, builder, owner=origin(builder))
    return decorate


def model_options(name: str) -> dict[str, object]:
    """The options a model accepts, with their defaults."""
    params = list(inspect.signature(MODELS.lookup(name)).parameters.values())[2:]
    return {p.name: p.default for p in params}


def check_options(name: str, options: dict[str, object]) -> dict[str, object]:
    """The model's options checked against its builder's signature: known names, values of
    the annotated types (``model.options.hidden`` must be a list of integers, ...)."""
    from gossipfl.plugins import option_hints

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
    hints = option_hints(MODELS[name])
    return {key: coerce(f"model.options.{key}", value, hints.get(key, typing.Any))
            for key, value in options.items()}


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
        model = _call_builder(name, shape, int(num_classes), options)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "model_init"))
            model = _call_builder(name, shape, int(num_classes), options)
    model.head_names = head_names(model)
    model.model_name = name  # for messages (check_model_fits)
    return model


def _call_builder(name: str, shape: tuple[int, ...], num_classes: int,
                  options: dict) -> nn.Module:
    """``MODELS[name](shape, num_classes, **options)``, which must be an ``nn.Module`` with
    parameters. A plugin's builder that fails is one sentence naming it and the line."""
    from gossipfl.plugins import check_signature, describe, origin, replaceable, where

    builder = MODELS[name]
    what = f"model.name: model '{name}'"
    check_signature(builder, ("input_shape", "num_classes"), what)
    if not replaceable(builder):
        model = builder(shape, num_classes, **options)
    else:
        try:
            model = builder(shape, num_classes, **options)
        except GossipflError:
            raise
        except Exception as exc:  # noqa: BLE001 - the researcher's builder: say where, in one line
            raise GossipflError(
                f"{what} ({origin(builder)}) failed to build for input shape {shape} and "
                f"{num_classes} classes{where(exc)}: {describe(exc)}") from None
    if not isinstance(model, nn.Module):
        raise GossipflError(f"{what} ({origin(builder)}) must return a torch.nn.Module, got "
                            f"{'None' if model is None else type(model).__name__}.")
    if not any(p.requires_grad for p in model.parameters()):
        raise GossipflError(f"{what} ({origin(builder)}) returned a module without trainable "
                            "parameters.")
    return model


def check_model_fits(model: nn.Module, dataset) -> None:
    """The model takes the dataset's samples and returns one output per class (one for
    regression targets): token-id inputs need an embedding large enough for every id, and
    a forward pass on two training samples must give ``[2, num_classes]``. One sentence
    naming ``model.name`` (or ``model.options.vocab``) and the dataset, else; nothing is
    trained and the model and the global RNG are left as they were."""
    name = getattr(model, "model_name", None)
    what = f"model '{name}'" if name else "the model of model.factory"
    key = "model.name" if name else "model.factory"
    data = f"{dataset.name}'s samples"
    x = dataset.train_x[:2]
    if not x.is_floating_point():
        _check_token_ids(model, dataset, what, key, name)
    outputs = dataset.num_classes or 1
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            out = model(x)
    except GossipflError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure is the model not fitting the data
        from gossipfl.plugins import describe

        raise GossipflError(
            f"{key}: {what} cannot take {data} ({_kind(x)} of shape "
            f"{tuple(x.shape[1:])}): {describe(exc)}") from None
    if not isinstance(out, torch.Tensor) or out.shape[:1] != x.shape[:1]:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise GossipflError(f"{key}: {what} must return one output row per sample, got "
                            f"{shape} for a batch of {len(x)} of {data}.")
    if dataset.num_classes and tuple(out.shape[1:]) != (outputs,):
        raise GossipflError(
            f"{key}: {what} outputs {tuple(out.shape[1:])} values per sample, but "
            f"{dataset.name} has {outputs} classes; a model builder must return num_classes "
            f"outputs.")


def _kind(x: torch.Tensor) -> str:
    return "token ids" if not x.is_floating_point() else f"{str(x.dtype).removeprefix('torch.')} values"


def _check_token_ids(model: nn.Module, dataset, what: str, key: str, name: str | None) -> None:
    """Integer inputs are token ids: the model must embed them, with a row for each id."""
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    shape = tuple(dataset.train_x.shape[1:])
    if not embeddings:
        raise GossipflError(
            f"{key}: {dataset.name}'s samples are token ids (integers, shape {shape}), which "
            f"{what} does not take (it has no nn.Embedding); use a model for token "
            f"sequences, such as 'lstm'.")
    vocab = max(int(dataset.train_x.max()), int(dataset.test_x.max()) if len(dataset.test_x)
                else 0) + 1
    rows = embeddings[0].num_embeddings
    if rows < vocab:
        option = "model.options.vocab" if name and "vocab" in model_options(name) else key
        raise GossipflError(
            f"{option}: {what} embeds {rows} tokens, but {dataset.name}'s samples hold "
            f"token ids up to {vocab - 1} (a vocabulary of {vocab}); give the model at least "
            f"{vocab} tokens.")
