"""A local phase replayed from one CUDA graph (``engine.cuda_graphs``).

A small model's round is launch-bound on a GPU: a local step of the mlp is a few dozen
kernels of microseconds each, and the host's Python between them (the minibatch, the
context, the fused update parameter by parameter, the counters, the loss tally) takes longer
than the kernels. A graph of the block alone (:class:`gossipfl.engine.compiled.GraphedBlocks`
in the oracle) leaves that host work eager. :class:`PhaseGraphs` captures the **whole phase**
instead — its K steps, each

    ξ = the step's minibatch (gathered from the dataset on the device, augmented),
    counters: drawn += |ξ_i|, steps += 1,
    loss, y ← the phase's fused step at y (forward, backward, the update of y and v),
    loss_sum += Σ_i loss_i

— once per signature, and replays it: one launch a phase, after the rows are copied into the
graph's static inputs (and back: a pass over y each way).

What changes from call to call enters as a tensor, a static input of the graph: the rows y,
the step and sample counters, the loss sum, the learning rate η (a 0-dim tensor, so a decayed
η needs no new capture: :func:`gossipfl.algorithms.local.descend`), the clients' ids, the
phase's minibatch indices and masks ``[K, S, B]`` and the augmentation keys. What is fixed
is in the graph's key: the phase, its index and momentum, K, S, B. On CUDA, y − η d with a
tensor η is the same fused multiply-add as with a number, so the replayed phase is the eager
one to the bit where the eager block is (the mlp); the CPU has no CUDA graph, and its stand-in
(:class:`gossipfl.engine.compiled.TracedGraph`) checks the same contract in the tests.

Which phases: :meth:`PhaseGraphs.refusal` says why a phase runs step by step instead, in one
place — a step that may read more than tensors (an algorithm's own update, or a direction
with a term, not declared :func:`~gossipfl.algorithms.terms.pure`: the built-in ``gradient``,
``weight_decay``, ``prox``, ``shift`` and ``masked`` are, and the algorithms' own updates and
terms that read only tensors and fixed numbers; DP-SGD, whose noise is drawn on the host; a
step wrapped by something that keeps state on the host, such as a packed study's loss tally,
whose trainer records the tally on the device instead), rows larger than
:data:`gossipfl.engine.stacked.GRAPH_MAX_ROWS_BYTES`, or more phases than
:data:`PhaseGraphs.MAX_GRAPHS`. The scratch tensors of the round's rows (an anchor, a
correction, a mask, an update's kept step) are inputs too, and those the phase writes are
copied back; a phase that an algorithm builds afresh every round with the same terms and
coefficients keeps its recording (:func:`fingerprint`). A phase whose capture fails runs
step by step, with its reason logged once (:class:`~gossipfl.engine.compiled.GraphedBlocks`).

**Ragged phases.** Clients of unequal data run out of minibatches at different steps of an
epoch (the papers' Dirichlet partitions, ``local_epochs``): the rows are ordered by data size,
so at step k the rows with a sample are the first ``a_k``, and the step-by-step loop moves
those only. A recording of such a phase bakes ``(a_1 … a_K)`` in (part of its key) and moves
the same prefixes: the same numbers, no step of an exhausted row. With all the clients at work
the prefixes are the same every round; a sampled set of clients (partial participation,
clients offline) may never repeat its own, so a ragged phase is recorded when its prefixes
come a second time, and runs step by step the first.
"""

from __future__ import annotations

import collections
import dataclasses
import types
from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor

from gossipfl.algorithms.base import NO_PLAN, Context, Phase, Work
from gossipfl.algorithms.local import LocalOptimizer
from gossipfl.engine.compiled import GraphedBlocks
from gossipfl.engine.stacked import GRAPH_MAX_ROWS_BYTES


class PhaseGraphs:
    """The phases of ``trainer`` (a :class:`~gossipfl.schedules.training.LocalTrainer`)
    replayed from graphs (see the module docstring). ``capture``: what
    records a phase (None: a CUDA graph, for rows on a CUDA device; a test hands
    :class:`~gossipfl.engine.compiled.TracedGraph` to check the contract on the CPU)."""

    #: distinct phases (index, momentum, shapes) kept as graphs; the others run step by step
    MAX_GRAPHS = 4
    #: ragged phases remembered as seen once (the latest ones)
    SEEN = 64

    def __init__(self, trainer: Any, capture: Callable[..., Any] | None = None):
        self.trainer = trainer
        self.capture = capture
        self._graphs: dict[tuple, GraphedBlocks] = {}
        # ragged phases run once (recorded the next time), the latest SEEN of them
        self._seen: collections.OrderedDict[tuple, None] = collections.OrderedDict()

    @property
    def replays(self) -> int:
        """Phases replayed from a graph so far."""
        return sum(graph.replays for graph in self._graphs.values())

    def refusal(self, phase: Phase, inner: Work, rows: Tensor, actives: Sequence[int]
                ) -> str | None:
        """Why ``phase`` on the rows ``inner`` (the clients ``rows``) runs step by step (None:
        it can be a graph)."""
        trainer, env = self.trainer, self.trainer.env
        if self.capture is None and inner.y.device.type != "cuda":
            return "the rows are not on a CUDA device"
        if env.privacy is not None or not all(
                f is None or getattr(f, "graphable", False)
                for f in (phase.update, phase.direction)):
            return "the phase's step reads more than tensors (an update or a direction of " \
                "its own not declared pure, DP-SGD)"
        if not any(actives):
            return "no row has a minibatch"
        if inner.y.numel() * inner.y.element_size() > GRAPH_MAX_ROWS_BYTES:
            return "the rows are larger than a graph keeps"
        return trainer.graph_refusal(rows, ragged=_ragged(actives, len(inner)))

    def run(self, t: int, index: int, phase: Phase, inner: Work, rows: Tensor, idx: Tensor,
            mask: Tensor, keys: Tensor | None, drawn: Tensor, loss_sum: Tensor, lr: float,
            momentum: float, actives: Sequence[int]) -> bool:
        """Round t's ``phase`` on ``inner`` (in place; ``drawn`` and the trainer's loss tally
        too), its minibatches ``idx``, ``mask`` ``[K, S, B]`` of which the first
        ``actives[k]`` rows have a sample at step k, from a graph; False, touching nothing,
        when this phase's graph is one too many, or its rows run out of minibatches in an
        order seen for the first time."""
        trainer = self.trainer
        scratch = {k: v for k, v in inner.scratch.items() if k != "steps"}
        names = tuple(scratch)
        ragged = _ragged(actives, len(inner))
        key = (index, fingerprint(phase), momentum, keys is not None, names,
               tuple(actives) if ragged else None, trainer.graph_key(rows, ragged))
        graph = self._graphs.get(key)
        if graph is None:
            if len(self._graphs) >= self.MAX_GRAPHS:
                return False
            if ragged and not self._seen_before(key):
                return False
            graph = self._graphs[key] = GraphedBlocks(
                self._phase_function(index, phase, momentum, names,
                                     tuple(actives) if ragged else None),
                capture=self.capture)
        rate = trainer.graph_rate(phase, t, lr, rows, inner.y)
        tally = trainer.graph_tally(rows, loss_sum)
        if keys is None:
            keys = rows.new_empty(0)
        graph(inner.y, inner.steps, drawn, tally[0], rate, rows, idx, mask, keys,
              *scratch.values(), *tally[1:])
        trainer.graph_tallied(tally, actives)
        return True

    def _seen_before(self, key: tuple) -> bool:
        """Whether a phase of ``key`` ran before (it is counted now): the rows of a ragged
        phase run out of minibatches in an order that a sampled set of clients may never
        repeat, so it is recorded when it comes again (full participation: every round)."""
        seen = key in self._seen
        self._seen[key] = None
        self._seen.move_to_end(key)
        while len(self._seen) > self.SEEN:  # a key may hold a round's tensors (by identity)
            self._seen.popitem(last=False)
        return seen

    def _phase_function(self, index: int, phase: Phase, momentum: float,
                        names: tuple[str, ...], actives: tuple[int, ...] | None) -> Callable:
        """The phase's K steps; with ``actives``, step k moves the first ``actives[k]`` rows
        only (the others have no minibatch left), as the step-by-step loop does."""
        trainer = self.trainer
        env, rounds, step = trainer.env, trainer.train_config.rounds, trainer.graph_step
        group = env.groups[phase.group]

        def steps_of_phase(y: Tensor, steps: Tensor, drawn: Tensor, total: Tensor,
                           lr: Tensor, rows: Tensor, idx: Tensor, mask: Tensor, keys: Tensor,
                           *rest: Tensor) -> Tensor:
            scratch, tally = dict(zip(names, rest, strict=False)), rest[len(names):]
            work = Work(y, rows, steps=steps, **scratch)
            optimizer = LocalOptimizer(group, lr, momentum, len(y), y)
            for k in range(idx.shape[0]):
                active = len(y) if actives is None else actives[k]
                if active == 0:
                    continue
                augment = (keys[:active], drawn[:active]) if keys.numel() else None
                batch = trainer.make_batch(idx[k, :active], mask[k, :active], augment,
                                           rows[:active], every_row_active=True)
                drawn[:active] += mask[k, :active].sum(dim=1)
                rows_at_work = work.head(active)
                rows_at_work.steps.add_(1)
                # round None: nothing of the round may be read here (it would be baked in)
                ctx = Context(round=None, lr=lr, phase=phase, rounds=rounds,
                              phase_index=index, step=k, optimizer=optimizer, env=env,
                              plan=NO_PLAN)
                trainer.tally_in_graph(step(ctx, rows_at_work, batch), total, *tally)
            return total

        return steps_of_phase


def _ragged(actives: Sequence[int], rows: int) -> bool:
    """Whether some row has no minibatch at some step of the phase (unequal epochs, clients
    offline)."""
    return any(a != rows for a in actives)


class _Same:
    """An object compared by identity (and held, so that its id is not reused)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


def fingerprint(value: Any) -> Any:
    """What a recording of ``value`` depends on, comparable across rounds: numbers and
    strings as they are; a function by its code and what its closure holds (an algorithm
    builds its phases' terms afresh every round, with the same code and coefficients: they
    share one recording), a bound method by its function and its object; a dataclass (a phase, a direction) field by field; anything else by
    identity (a new object, a new recording)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, *(fingerprint(v) for v in value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value), *(fingerprint(getattr(value, f.name))
                               for f in dataclasses.fields(value)))
    if isinstance(value, types.FunctionType):
        cells = tuple(fingerprint(c.cell_contents) for c in value.__closure__ or ())
        return (value.__code__, cells, fingerprint(value.__defaults__))
    if isinstance(value, types.MethodType):  # made afresh at every attribute access
        return (fingerprint(value.__func__), _Same(value.__self__))
    return _Same(value)


__all__ = ["PhaseGraphs", "fingerprint"]
