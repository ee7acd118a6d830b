"""Oracles by name (``engine.oracle``): which one ``auto`` picks, and building one. Above
both implementations (:mod:`gossipfl.engine.oracle`'s vmap and loop oracles, and
:mod:`gossipfl.engine.stacked`), so that neither imports the other's factory."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from gossipfl.engine.oracle import (
    ORACLES,
    LoopOracle,
    Oracle,
    VmapOracle,
    check_chunk_size,
    check_loss,
    has_batchnorm,
    has_rnn,
)
from gossipfl.engine.stacked import StackedOracle, supports
from gossipfl.errors import GossipflError, unknown_choice


def auto_oracle(model: nn.Module, device: torch.device | str = "cpu") -> str:
    """The oracle "auto" picks for ``model`` on ``device``: "stacked" whenever it can run the
    model (fastest on CPU in docs/benchmarks.md, for every built-in model; the same batched
    kernels on CUDA), else "loop" for BatchNorm and recurrent models (vmap cannot evaluate an
    LSTM and trains it several times slower, docs/benchmarks.md), else "vmap"."""
    if supports(model):
        return "stacked"
    return "loop" if has_batchnorm(model) or has_rnn(model) else "vmap"


def make_oracle(
    kind: str,
    model: nn.Module,
    loss: str = "cross_entropy",
    chunk_size: int | None = None,
    device: torch.device | str = "cpu",
    compile: bool = False,
    cuda_graphs: bool = False,
) -> Oracle:
    """Build an oracle by name (config ``engine.oracle``): "stacked", "vmap", "loop" or
    "auto" (:func:`auto_oracle`). ``compile`` and ``cuda_graphs`` (``engine.compile``,
    ``engine.cuda_graphs``, resolved for the device: :mod:`gossipfl.engine.compiled`) apply
    to the stacked oracle; the others run as they are."""
    if kind not in ORACLES:
        raise unknown_choice("engine.oracle", kind, ORACLES)
    check_loss(loss)
    check_chunk_size(chunk_size)
    model = model.to(device)
    if kind == "auto":
        kind = auto_oracle(model, device)
    if kind == "vmap" and has_rnn(model):
        raise GossipflError(
            "engine.oracle: 'vmap' cannot run a model with recurrent layers (torch has no vmap "
            "rule for the LSTM kernel in evaluation, and trains it client by client, slower "
            "than 'loop'); use 'loop' or 'auto'.")
    builders: dict[str, Callable[[], Oracle]] = {
        "stacked": lambda: StackedOracle(model, loss=loss, chunk_size=chunk_size,
                                         compile=compile, cuda_graphs=cuda_graphs),
        "vmap": lambda: VmapOracle(model, loss=loss, chunk_size=chunk_size),
        "loop": lambda: LoopOracle(model, loss=loss),
    }
    return builders[kind]()
