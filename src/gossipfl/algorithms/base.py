"""The algorithm interface (docs/design.md).

An algorithm is tensor algebra over the rows of the ``[M, P]`` stack. It talks to other
clients only through the :class:`~gossipfl.federation.Federation` (gossip, server
aggregation, broadcast, client sampling), declares its local work as a list of
:class:`Phase`, and keeps its state in three declared kinds:

- **per-client** state (``client_state``: tensors with one row per client, e.g. the models x),
- **global** state (``global_state``: the server model, a control variate, optimizer moments),
- **scratch** (per round, never checkpointed): whatever :class:`Work` carries.

A round has three moments: ``begin_round(ctx)`` returns the :class:`Work` (the working
iterates ``y [S, P]`` of the S clients that train this round and their per-row scratch),
``local_step(ctx, work, batch)`` is one local iteration of those rows (``begin_phase`` runs
before each phase), and
``end_round(ctx, work)`` communicates. Bytes are counted by the Federation.

In ``local_step`` every row of ``work`` has data in ``batch``: the runner hands the algorithm
only the clients that still have a minibatch at this step, as a view of the first rows of
the round's work (see :meth:`Work.head`), so the algorithm updates ``work`` **in place**.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from gossipfl.errors import GossipflError, unknown_choice


@dataclass
class Batch:
    """One local minibatch of the rows at work: ``[S, B, ...]`` inputs, ``[S, B]`` mask."""

    inputs: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor

    def rows(self, index: torch.Tensor | slice) -> Batch:
        return Batch(self.inputs[index], self.targets[index], self.mask[index])


@dataclass(frozen=True)
class Phase:
    """One stretch of local work in a round.

    ``epochs`` / ``steps``: how long (both None: the ``train`` section's ``local_epochs`` /
    ``local_steps``); ``lr``: the phase's learning rate before the per-round decay (None:
    ``train.lr``); ``group``: the parameter group that moves (``all``, ``shared``,
    ``personal``); ``momentum``: local heavy-ball momentum μ, reset every round (None:
    ``train.momentum``); ``rho``: SAM radius ρ of the phase's gradients (0: plain SGD).
    """

    name: str = "local"
    epochs: int | None = None
    steps: int | None = None
    lr: float | None = None
    group: str = "all"
    momentum: float | None = None
    rho: float = 0.0


@dataclass
class Context:
    """Where a call happens: the round, its learning rate, the run's total rounds, and in a
    local step the phase, the step's index within the phase and the phase's local
    optimizer."""

    round: int
    lr: float
    phase: Phase | None = None
    rounds: int | None = None  # the run's total rounds T (annealed schedules)
    phase_index: int = 0
    step: int = 0
    optimizer: Any = None  # gossipfl.algorithms.local.LocalOptimizer during local steps


class Work:
    """The round's working rows: iterates ``y [S, P]``, the clients they belong to (None =
    all M in order) and per-row scratch tensors (first dimension S), e.g. a proximal anchor.
    """

    def __init__(self, y: torch.Tensor, clients: torch.Tensor | None = None,
                 **scratch: torch.Tensor):
        self.y = y
        self.clients = clients
        self.scratch = scratch

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.scratch[key]

    def __len__(self) -> int:
        return self.y.shape[0]

    def head(self, rows: int) -> Work:
        """The first ``rows`` rows, as views (in-place updates reach this Work)."""
        if rows == len(self):
            return self
        clients = None if self.clients is None else self.clients[:rows]
        return Work(self.y[:rows], clients, **{k: v[:rows] for k, v in self.scratch.items()})

    def take(self, order: torch.Tensor, clients: torch.Tensor | None) -> Work:
        """A copy with rows in ``order`` (and the given client ids)."""
        return Work(self.y[order], clients, **{k: v[order] for k, v in self.scratch.items()})

    def restore(self, other: Work, order: torch.Tensor) -> None:
        """Set this Work's rows (and scratch) to ``other``'s rows in ``order``, in place."""
        self.y.copy_(other.y[order])
        for key, value in self.scratch.items():
            value.copy_(other.scratch[key][order])


@dataclass(frozen=True)
class Rule:
    """A constraint on one hyperparameter: ``holds(value)``, and what it says when it fails."""

    holds: Callable[[Any], bool]
    words: str  # "must be <words>, got <value>."
    choices: Sequence[str] = ()  # for a choice: the "unknown value ...; choose one of" error

    def check(self, key: str, value: Any) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            raise GossipflError(f"algorithm.{key}: must be a finite number, got {value}.")
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
    """Base class. Subclasses set ``name``, ``paper``, ``Params`` and override the hooks.

    Declarations read by the runner: ``centralized`` (a server model instead of a topology),
    ``client_state`` / ``global_state`` (what a checkpoint keeps) and ``evaluations`` (which
    models the evaluation protocols measure: ``average``, ``local``; ``personalized``: the
    algorithm trains personal models, measured on each client's local test split by default
    and reported first in tables).
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    centralized: ClassVar[bool] = False
    Params: ClassVar[type] = NoParams
    client_state: ClassVar[tuple[str, ...]] = ("x",)
    global_state: ClassVar[tuple[str, ...]] = ()
    evaluations: ClassVar[tuple[str, ...]] = ("average", "local")
    #: the ``topology.order`` values the round is defined for (gossipfl.sequential)
    orders: ClassVar[tuple[str, ...]] = ("synchronous",)

    def __init__(self, params: Any, fed: Any):
        self.params = params if params is not None else self.Params()
        self.fed = fed  # gossipfl.federation.Federation
        self.state: dict[str, torch.Tensor] = {}

    # -- declarations ------------------------------------------------------------------------
    def phases(self) -> list[Phase]:
        """The round's local work (default: one phase as the ``train`` section says)."""
        return [Phase()]

    def check(self, topology: Any) -> list[str]:
        """Warnings about this algorithm on ``topology`` (None for centralized), before
        training (e.g. an unstable extrapolation)."""
        return []

    def order_error(self, order: str) -> str | None:
        """Why ``topology.order: order`` is not defined for this algorithm (None: it is)."""
        if order in self.orders:
            return None
        return (f"topology.order: {order} is not defined for algorithm {self.name}, whose round "
                f"is not 'start from the mixed neighbours, then train' (use synchronous).")

    # -- a round -----------------------------------------------------------------------------
    def init(self, x0: torch.Tensor) -> None:
        """Allocate state from the initial client models ``x0`` ``[M, P]``."""
        self.state = {"x": x0.clone()}

    def begin_round(self, ctx: Context) -> Work:
        """The round's working rows (default: a copy of every client's model)."""
        return Work(self.state["x"].clone())

    def begin_phase(self, ctx: Context, work: Work) -> None:
        """Called with all the round's rows before each phase's first step (``ctx`` holds the
        phase and its optimizer): e.g. switch the rows to another iterate (Ditto)."""

    def local_step(self, ctx: Context, work: Work, batch: Batch) -> torch.Tensor:
        """One local iteration of ``work`` (in place); returns the per-row loss."""
        loss, direction = self.direction(ctx, work, batch)
        ctx.optimizer.step(work, direction)
        return loss

    def direction(self, ctx: Context, work: Work,
                  batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and local descent direction at ``work.y`` (SGD, or SAM when the phase's ρ > 0)."""
        from gossipfl.algorithms.steps import local_direction

        return local_direction(self.fed, work.y, batch, ctx)

    def keep(self, ctx: Context, work: Work) -> None:
        """What a client remembers of its round before communicating (per-client state rows
        only, e.g. its local result): called by ``end_round`` and, in the sequential order,
        on the few clients of each wave (gossipfl.sequential)."""

    def end_round(self, ctx: Context, work: Work) -> None:
        """Communicate (through the Federation, which counts the bytes)."""
        raise NotImplementedError

    # -- what is evaluated -------------------------------------------------------------------
    def client_models(self) -> torch.Tensor:
        """``[M, P]`` current local models (what local evaluation measures)."""
        return self.state["x"]

    def personalized_models(self) -> torch.Tensor:
        """``[M, P]`` each client's own model, what the personalized protocol measures on its
        local test split (default: :meth:`client_models`)."""
        return self.client_models()

    def trained_models(self, work: Work) -> torch.Tensor:
        """``[M, P]`` each client's personalized model right after its local training, before
        communication (``eval.personalized_point: before_gossip``; decentralized algorithms,
        whose round trains every row): default ``work.y``."""
        return work.y

    def finetune_phases(self) -> list[Phase]:
        """Local work every client does on its :meth:`personalized_models` before the
        personalized protocol measures them (FedBABU's fine-tuning); none by default."""
        return []

    def global_model(self) -> torch.Tensor:
        """``[P]`` the model evaluated as "average model": mean of clients, or the server's."""
        return self.fed.mean(self.state["x"])

    def server_model(self) -> torch.Tensor | None:
        return None

    # -- checkpointing: per-client and global state only --------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: self.state[k].clone() for k in (*self.client_state, *self.global_state)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = set(self.client_state) | set(self.global_state)
        missing -= set(state)
        if missing:
            raise GossipflError(f"checkpoint: algorithm {self.name} state lacks {sorted(missing)}.")
        for key in (*self.client_state, *self.global_state):
            self.state[key] = state[key].to(self.state[key].device)

