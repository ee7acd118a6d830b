"""The algorithm interface (DESIGN.md §3).

An algorithm owns its extra state (a dict of tensors, so checkpointing is generic) and three
moments of a round:

- ``begin_round(t)`` returns the working iterates ``Y`` ``[S, P]`` and which clients they
  belong to (all M for decentralized algorithms, the sampled ones for centralized);
- ``local_step(t, Y, batch, lr)`` does one local iteration for all working clients at once;
- ``end_round(t, Y, lr)`` gossips or aggregates and returns the bytes sent this round.

Local iterations of a client whose minibatch is empty (a client with fewer batches in an
epoch than the largest) leave that client's iterate and buffers unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from gossipfl.errors import GossipflError, unknown_choice


@dataclass
class Batch:
    """One local minibatch for the working clients: ``[S, B, ...]`` inputs, ``[S, B]`` mask."""

    inputs: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor

    @property
    def active(self) -> torch.Tensor:
        """``[S]`` bool: clients with at least one sample in this batch."""
        return self.mask.any(dim=1)


@dataclass
class Federation:
    """What an algorithm may use: the oracle, the mixer, sizes, seed, shared optimizer knobs."""

    num_clients: int
    oracle: Any  # gossipfl.engine.oracle.Oracle
    mixer: Any  # gossipfl.topology.Mixer, None for centralized algorithms
    sample_sizes: torch.Tensor  # [M] float, n_i
    seed: int
    weight_decay: float = 0.0

    @property
    def model_bytes(self) -> int:
        """Bytes of one model message (P parameters in fp32)."""
        return self.oracle.layout.P * 4


@dataclass(frozen=True)
class Rule:
    """A constraint on one hyperparameter: ``holds(value)``, and what it says when it fails."""

    holds: Callable[[Any], bool]
    words: str  # "must be <words>, got <value>."
    choices: Sequence[str] = ()  # for a choice: the "unknown value ...; choose one of" error

    def check(self, key: str, value: Any) -> None:
        if self.holds(value):
            return
        if self.choices:
            raise unknown_choice(f"algorithm.{key}", value, self.choices)
        raise GossipflError(f"algorithm.{key}: must be {self.words}, got {value}.")


NON_NEGATIVE = Rule(lambda v: v >= 0, ">= 0")
POSITIVE = Rule(lambda v: v > 0, "> 0")
UNIT_INTERVAL = Rule(lambda v: 0 <= v < 1, "in [0, 1)")
FRACTION = Rule(lambda v: 0 < v <= 1, "in (0, 1]")
AT_LEAST_ONE = Rule(lambda v: v >= 1, "an integer >= 1")


def one_of(*choices: str) -> Rule:
    return Rule(lambda v: v in choices, "", choices)


class Hyperparams:
    """Base of the algorithms' hyperparameter dataclasses. ``rules`` (a plain class attribute,
    not a field) maps field names to :class:`Rule`; ``validate`` checks the rules of the class
    and of all its bases, so a subclass lists only the fields it adds."""

    rules: ClassVar[dict[str, Rule]] = {}

    def validate(self) -> None:
        for cls in reversed(type(self).__mro__):
            for key, rule in vars(cls).get("rules", {}).items():
                rule.check(key, getattr(self, key))


@dataclass
class NoParams(Hyperparams):
    """Algorithms without hyperparameters of their own."""


class Algorithm:
    """Base class. Subclasses set ``name``, ``paper``, ``Params`` and override the hooks."""

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    centralized: ClassVar[bool] = False
    Params: ClassVar[type] = NoParams

    def __init__(self, params: Any, fed: Federation):
        self.params = params if params is not None else self.Params()
        self.fed = fed
        self.state: dict[str, torch.Tensor] = {}

    # -- local work: None means "as train config says"; ("steps", K) or ("epochs", E) forces it
    def local_work(self) -> tuple[str, int] | None:
        return None

    def init(self, x0: torch.Tensor) -> None:
        """Allocate state from the initial client models ``x0`` ``[M, P]``."""
        self.state = {"x": x0.clone()}

    def begin_round(self, t: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Working iterates ``Y`` and client ids (None = all clients in order)."""
        return self.state["x"].clone(), None

    def local_step(self, t: int, y: torch.Tensor, batch: Batch,
                   lr: float) -> tuple[torch.Tensor, torch.Tensor]:
        """One local iteration; returns the new ``Y`` and the per-client loss ``[S]``."""
        raise NotImplementedError

    def end_round(self, t: int, y: torch.Tensor, lr: float) -> int:
        """Communicate; return the bytes sent this round."""
        raise NotImplementedError

    def client_models(self) -> torch.Tensor:
        """``[M, P]`` current local models (what local evaluation measures)."""
        return self.state["x"]

    def global_model(self) -> torch.Tensor:
        """``[P]`` the model evaluated as "average model": mean of clients, or the server's."""
        return self.state["x"].mean(dim=0)

    def server_model(self) -> torch.Tensor | None:
        return None

    # -- checkpointing
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.state.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = set(self.state) - set(state)
        if missing:
            raise GossipflError(f"checkpoint: algorithm {self.name} state lacks {sorted(missing)}.")
        self.state = {k: v.to(self.state[k].device) for k, v in state.items()}
