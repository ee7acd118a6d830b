"""The parameter stack: M flat parameter vectors as one ``[M, P]`` tensor, with named views.

Parameter k of the model occupies columns ``offset_k : offset_k + numel_k`` of every row, in
``module.named_parameters()`` order, so ``X[:, offset_k:offset_k+numel_k].view(M, *shape_k)`` is
client-wise parameter k without a copy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class ParamLayout:
    """Names, shapes, offsets and sizes of a module's parameters in the flat vector of size P."""

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]
    offsets: tuple[int, ...]
    numels: tuple[int, ...]
    P: int

    @classmethod
    def from_module(cls, module: nn.Module) -> ParamLayout:
        """The layout of ``module.named_parameters()``."""
        names, shapes, offsets, numels = [], [], [], []
        offset = 0
        for name, param in module.named_parameters():
            names.append(name)
            shapes.append(param.shape)
            offsets.append(offset)
            numels.append(math.prod(param.shape))
            offset += numels[-1]
        return cls(tuple(names), tuple(shapes), tuple(offsets), tuple(numels), offset)

    def _check_module(self, module: nn.Module) -> list[nn.Parameter]:
        params = list(module.named_parameters())
        if [n for n, _ in params] != list(self.names) or any(
            p.shape != s for (_, p), s in zip(params, self.shapes, strict=True)
        ):
            raise ValueError("module parameters do not match this ParamLayout")
        return [p for _, p in params]

    def flatten(self, module: nn.Module) -> Tensor:
        """The module's current parameters as one detached vector ``[P]``."""
        params = self._check_module(module)
        return torch.cat([p.detach().reshape(-1) for p in params])

    def views(self, X: Tensor) -> dict[str, Tensor]:
        """``X [..., P]`` → ``{name: [..., *shape]}``, views sharing memory with ``X``."""
        if X.shape[-1] != self.P:
            raise ValueError(f"last dimension must be P={self.P}, got shape {tuple(X.shape)}")
        return {
            name: X[..., o : o + n].unflatten(-1, shape) if shape else X[..., o]
            for name, shape, o, n in zip(self.names, self.shapes, self.offsets, self.numels,
                                         strict=True)
        }

    def load_into(self, module: nn.Module, x: Tensor) -> None:
        """Copy the flat vector ``x [P]`` into the module's parameters (in place)."""
        params = self._check_module(module)
        with torch.no_grad():
            for p, o, n in zip(params, self.offsets, self.numels, strict=True):
                p.copy_(x[o : o + n].view(p.shape))

    def mask(self, names: Iterable[str], device: torch.device | str | None = None) -> Tensor:
        """Boolean ``[P]``, True on the coordinates of the named parameters."""
        index = {name: k for k, name in enumerate(self.names)}
        out = torch.zeros(self.P, dtype=torch.bool, device=device)
        for name in names:
            if name not in index:
                raise KeyError(f"no parameter named {name!r}; known: {', '.join(self.names)}")
            k = index[name]
            out[self.offsets[k] : self.offsets[k] + self.numels[k]] = True
        return out


def init_stack(
    module: nn.Module,
    num_clients: int,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``[M, P]`` with the module's current (caller-seeded) parameters copied to every row."""
    x = ParamLayout.from_module(module).flatten(module).to(device=device, dtype=dtype)
    return x.unsqueeze(0).repeat(int(num_clients), 1)
