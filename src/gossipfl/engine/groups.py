"""Parameter groups: named sets of columns of the ``[M, P]`` stack.

Personalized FL splits a model into a **shared** body, which clients exchange, and a
**personal** part (by default the classifier head), which never leaves its client (FedPer,
FedRep, DFedMDC). A :class:`ParamGroup` is a set of columns stored as contiguous ranges, so
that the usual groups — a head at the end of the vector, the body before it — are plain
column slices (views, no copies) of every row.

:class:`ParamGroups` holds ``all``, ``shared`` and ``personal`` for one model layout.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from gossipfl.engine.params import ParamLayout
from gossipfl.errors import GossipflError

GROUPS = ("all", "shared", "personal")


@dataclass(frozen=True)
class ParamGroup:
    """Columns ``ranges`` (half-open, sorted, disjoint) of a P-vector, named ``name``."""

    name: str
    ranges: tuple[tuple[int, int], ...]
    P: int

    @property
    def numel(self) -> int:
        return sum(b - a for a, b in self.ranges)

    @property
    def is_all(self) -> bool:
        return self.ranges == ((0, self.P),)

    @property
    def is_empty(self) -> bool:
        return not self.ranges

    def mask(self, device: torch.device | str | None = None) -> Tensor:
        """Boolean ``[P]``, True on the group's columns."""
        out = torch.zeros(self.P, dtype=torch.bool, device=device)
        for a, b in self.ranges:
            out[a:b] = True
        return out

    def columns(self, x: Tensor) -> list[Tensor]:
        """The group's column blocks of ``x [..., P]`` as views, one per range."""
        return [x[..., a:b] for a, b in self.ranges]

    def select(self, x: Tensor) -> Tensor:
        """``x [..., P]`` restricted to the group: ``[..., numel]`` (a view for one range)."""
        blocks = self.columns(x)
        if len(blocks) == 1:
            return blocks[0]
        return torch.cat(blocks, dim=-1) if blocks else x[..., :0]

    def assign(self, x: Tensor, values: Tensor) -> None:
        """Write ``values [..., numel]`` into the group's columns of ``x`` (in place)."""
        start = 0
        for block in self.columns(x):
            width = block.shape[-1]
            block.copy_(values[..., start:start + width])
            start += width


def group_from_mask(name: str, mask: Sequence[bool] | Tensor) -> ParamGroup:
    """The group of the True entries of a boolean ``[P]`` mask."""
    flags = torch.as_tensor(mask, dtype=torch.bool).cpu()
    padded = torch.cat([torch.zeros(1, dtype=torch.int8), flags.to(torch.int8),
                        torch.zeros(1, dtype=torch.int8)])
    edges = torch.nonzero(padded[1:] != padded[:-1]).flatten().tolist()
    return ParamGroup(name, tuple(zip(edges[0::2], edges[1::2], strict=True)), len(flags))


@dataclass(frozen=True)
class ParamGroups:
    """``all``, ``shared`` and ``personal`` columns of a model's flat vector."""

    all: ParamGroup
    shared: ParamGroup
    personal: ParamGroup
    personal_names: tuple[str, ...]
    shared_names: tuple[str, ...]

    @classmethod
    def build(cls, layout: ParamLayout, personal: Iterable[str],
              key: str = "model.personal") -> ParamGroups:
        """Groups for ``layout`` with the parameters matching any of the name patterns
        ``personal`` (``fnmatch`` style, e.g. ``head.*``) personal, the rest shared."""
        patterns = list(personal)
        names = tuple(n for n in layout.names if any(fnmatch.fnmatchcase(n, p) for p in patterns))
        for pattern in patterns:
            if not any(fnmatch.fnmatchcase(n, pattern) for n in layout.names):
                raise GossipflError(f"{key}: '{pattern}' matches no parameter of the model; "
                                    f"its parameters are {', '.join(layout.names)}.")
        mask = layout.mask(names)
        return cls(all=ParamGroup("all", ((0, layout.P),), layout.P),
                   shared=group_from_mask("shared", ~mask),
                   personal=group_from_mask("personal", mask),
                   personal_names=names,
                   shared_names=tuple(n for n in layout.names if n not in names))

    def parameter_names(self, name: str) -> tuple[str, ...] | None:
        """The model parameters whose columns make group ``name`` (None for ``all``): what a
        phase that moves only this group needs the gradient of."""
        if self[name].is_all:
            return None
        return self.personal_names if name == "personal" else self.shared_names

    def __getitem__(self, name: str) -> ParamGroup:
        """Group ``name``; an empty ``shared`` or ``personal`` group is refused (one sentence
        about ``model.personal``): whatever asks for it would train or send nothing."""
        if name not in GROUPS:
            raise KeyError(f"no parameter group {name!r}; groups are {', '.join(GROUPS)}")
        group = getattr(self, name)
        if group.is_empty:
            raise GossipflError(self.empty_message(name))
        return group

    def empty_message(self, name: str, user: str = "the algorithm") -> str:
        """Why ``user`` cannot use the empty group ``name``, naming ``model.personal``."""
        names = self.personal_names + self.shared_names
        listed = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
        if name == "personal":
            return (f"model.personal: no parameter of the model is personal (model.personal "
                    f"is empty, or unset and the model has no head: no nn.Linear layer), but "
                    f"{user} keeps a personal part on each client; set model.personal to the "
                    f"name patterns of the personal parameters (the model's are {listed}).")
        return (f"model.personal: every parameter of the model is personal, so {user} would "
                f"share nothing (0 bytes sent); leave the shared body out of model.personal "
                f"(the model's parameters are {listed}).")

    def check_used(self, algorithm: object) -> None:
        """Before training: the groups ``algorithm`` trains or exchanges — its phases'
        ``group`` and the ``exchanged`` / ``kept`` groups of a server that personalizes —
        must not be empty (a personalized split needs both a shared body and a personal
        head). One sentence naming ``model.personal``, else."""
        used = [getattr(phase, "group", "all") for phase in algorithm.phases()]
        used += [getattr(algorithm, attr, "all") for attr in ("exchanged", "kept")]
        label = f"algorithm '{getattr(algorithm, 'name', type(algorithm).__name__)}'"
        for name in ("personal", "shared"):
            if name in used and getattr(self, name).is_empty:
                raise GossipflError(self.empty_message(name, label))
