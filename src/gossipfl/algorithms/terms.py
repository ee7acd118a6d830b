"""Local directions as a chain of small terms (in the manner of optax's ``chain``).

A :class:`Direction` starts from a gradient ``source`` and passes the direction d through its
``terms`` in order; each term is a function ``(ctx, work, d) -> d``. With ``Y`` ``[S, P]`` the
working iterates of the S clients at work (``work.y``), η the learning rate, ``wd`` the
coupled L2 weight decay of SGD (``train.weight_decay``) and ``c`` the optional per-client clip
norm (``train.clip_norm``):

=================================  ===========================================================
:func:`gradient`                   g = ∇F_i(y; ξ) of the phase's group, clipped to c; with the
                                   phase's ρ > 0, SAM (Foret et al. 2021): ∇F_i(y + ρ ĝ/‖ĝ‖; ξ)
                                   with ĝ the unclipped gradient at y, on the same ξ
:func:`weight_decay` (μ)           d + μ y   (μ = None: ``train.weight_decay``; 0: d)
:func:`prox` (λ, anchor)           d + λ (y − a), a = ``work[anchor]`` (FedProx, Catalyst's
                                   Moreau envelope, Ditto, FedACG, FedDyn's α term)
:func:`shift` (key, κ)             d + κ ``work[key]`` (SCAFFOLD's c − c_i, FedDyn's −h_i)
:func:`masked` (key)               d ⊙ ``work[key]`` (DisPFL's sparse models)
=================================  ===========================================================

An algorithm's own transformation is any function of the same shape. The default direction
of a phase is :func:`sgd` = ``chain(gradient(), weight_decay())``: SGD (SAM when the phase
sets ρ) with weight decay, as ``torch.optim.SGD(weight_decay=wd)`` after ``clip_grad_norm_``
computes it; ``sgd(term, ...)`` adds an algorithm's terms after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from gossipfl.algorithms.base import Batch, Context, Work
from gossipfl.engine.fused_update import sgd_update, takes

Term = Callable[[Context, Work, Tensor], Tensor]
Source = Callable[[Context, Work, Batch], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class Direction:
    """loss, d = source(ctx, work, batch); then d = term(ctx, work, d) for each term.

    :attr:`graphable`: whether a phase of it may be replayed from a CUDA graph
    (gossipfl.schedules.phase_graph): its source and every term declare that they read
    nothing of the round on the host, only tensors of the Work and fixed numbers (a
    function's ``graphable`` attribute; :func:`pure` sets it; the built-in ones have it)."""

    source: Source
    terms: tuple[Term, ...] = ()

    @property
    def graphable(self) -> bool:
        return all(getattr(f, "graphable", False) for f in (self.source, *self.terms))

    def __call__(self, ctx: Context, work: Work, batch: Batch) -> tuple[Tensor, Tensor]:
        loss, d = self.source(ctx, work, batch)
        for term in self.terms:
            d = term(ctx, work, d)
        return loss, d


def pure(function: Callable) -> Callable:
    """Declare a source, a term, a lookahead point or a phase's own update graphable
    (:attr:`Direction.graphable`, gossipfl.schedules.phase_graph): it reads only tensors (of
    the Work, the batch, the context's η) and numbers fixed for the run, never the round, so
    a CUDA graph that records it once replays what it computes every round. It may write the
    Work's tensors in place (the graph copies them back)."""
    function.graphable = True
    return function


def _pure_if(function: Callable, *parts: Callable | None) -> Callable:
    """``function``, declared :func:`pure` when each of ``parts`` is (or is None)."""
    if all(p is None or getattr(p, "graphable", False) for p in parts):
        return pure(function)
    return function


def chain(source: Source, *terms: Term) -> Direction:
    """The direction ``source`` followed by ``terms``, in order."""
    return Direction(source, terms)


def sgd(*terms: Term) -> Direction:
    """SGD's direction, or SAM's with the phase's ρ, with ``train.weight_decay``, then
    ``terms`` in order: ``chain(gradient(), weight_decay(), *terms)`` — what every algorithm
    that adds a term to the local step (a proximal pull, a correction, a mask) starts from."""
    return chain(gradient(), weight_decay(), *terms)


def default_direction() -> Direction:
    """SGD, or SAM with the phase's ρ, on the phase's group, plus ``train.weight_decay``."""
    return _DEFAULT


def phase_direction(ctx: Context, work: Work, batch: Batch) -> tuple[Tensor, Tensor]:
    """Loss ``[S]`` and the descent direction of ``ctx.phase`` at ``work.y`` (its
    ``direction``, or :func:`default_direction`)."""
    direction = ctx.phase.direction
    return (direction if direction is not None else _DEFAULT)(ctx, work, batch)


def local_step(ctx: Context, work: Work, batch: Batch) -> Tensor:
    """One local iteration of ``ctx.phase`` on ``work`` (in place); the per-row loss. The
    phase's ``update``, or its direction followed by its local optimizer's step."""
    phase = ctx.phase
    if phase.update is not None:
        return phase.update(ctx, work, batch)
    if _fusable(ctx):
        return _fused_step(ctx, work, batch)
    loss, direction = phase_direction(ctx, work, batch)
    ctx.optimizer.step(work, direction)
    return loss


#: a phase of default steps may be replayed from one CUDA graph (gossipfl.schedules.phase_graph):
#: the step reads nothing of the round on the host
local_step.graphable = True


def _fusable(ctx: Context) -> bool:
    """Whether the phase's step is an elementwise update of the whole model from the
    gradient: the default direction on the group ``all``."""
    return ctx.phase.direction is None and ctx.optimizer.group.is_all and ctx.env.fused


def _fused_step(ctx: Context, work: Work, batch: Batch) -> Tensor:
    """The step of a :func:`_fusable` phase with the update fused into the (last) gradient
    (:meth:`~gossipfl.network.clients.ClientEnv.fused_step`): d = g + wd y, then the local
    optimizer's update of y (and v), parameter by parameter; the same numbers, no gradient
    stack. On the CPU a decayed or momentum update is one pass
    (:func:`gossipfl.engine.fused_update.sgd_update`, the same bits as the torch ops)."""
    phase, optimizer, decay = ctx.phase, ctx.optimizer, ctx.env.train.weight_decay
    one_pass = not isinstance(optimizer.lr, Tensor) and takes(work.y, decay, optimizer.momentum)

    def update(grad: Tensor, y: Tensor, *rest: Tensor) -> None:  # grad is ours to overwrite
        if not (one_pass and sgd_update(grad, y, rest[0] if rest else None, decay,
                                        optimizer.lr, optimizer.momentum)):
            optimizer.update(_decayed(grad, y, decay, inplace=True), y, *rest)

    state = optimizer.state(work)
    update.whole_rows = one_pass  # one pass on the CPU, the same bits: no pieces
    if not phase.rho:
        return ctx.env.fused_step(batch, update, state)
    loss, point = sam_point(ctx, work.y, batch, phase.rho, phase.group)
    ctx.env.fused_step(batch, update, state, at=point)
    return loss


def sam_point(ctx: Context, y: Tensor, batch: Batch, rho: float, group: str
              ) -> tuple[Tensor, Tensor]:
    """Loss at ``y`` and SAM's ascent point y + ρ g/‖g‖₂, g = ∇F_i(y; ξ) unclipped, ‖·‖ over
    the group (only its coordinates move)."""
    loss, grad = ctx.env.raw_gradient(y, batch, group)
    norm = grad.norm(dim=1, keepdim=True).clamp_min(1e-12)  # the group's: the rest is 0
    return loss, y.addcdiv(grad, norm, value=rho)  # y + (ρ·g) / ‖g‖, one pass


def sam_gradient(ctx: Context, y: Tensor, batch: Batch, rho: float,
                 group: str) -> tuple[Tensor, Tensor]:
    """Loss at ``y`` and the SAM gradient ∇F_i(y + ρ g/‖g‖₂; ξ), g = ∇F_i(y; ξ) unclipped,
    ‖·‖ over the group (only its coordinates are perturbed; the perturbed gradient is clipped
    as every gradient is). ρ = 0: the plain (clipped) gradient at y."""
    env = ctx.env
    if rho == 0:
        return env.gradient(y, batch, group)
    loss, point = sam_point(ctx, y, batch, rho, group)
    _, perturbed = env.gradient(point, batch, group)
    return loss, perturbed


def gradient(at: Callable[[Context, Work], Tensor] | None = None,
             rho: float | None = None) -> Source:
    """The phase's gradient (SAM with ρ = ``rho``, None: the phase's ρ) on its group, at
    ``work.y`` or at the point ``at(ctx, work)`` (a lookahead)."""

    def source(ctx: Context, work: Work, batch: Batch) -> tuple[Tensor, Tensor]:
        phase = ctx.phase
        y = work.y if at is None else at(ctx, work)
        return sam_gradient(ctx, y, batch, phase.rho if rho is None else rho, phase.group)

    return _pure_if(source, at)


def weight_decay(coef: float | None = None, at: Callable[[Context, Work], Tensor] | None = None
                 ) -> Term:
    """d + μ y (μ = ``coef``, None: ``train.weight_decay``; nothing when μ = 0); ``at``: the
    point whose decay is added (default ``work.y``)."""

    def term(ctx: Context, work: Work, d: Tensor) -> Tensor:
        mu = ctx.env.train.weight_decay if coef is None else coef
        if not mu:
            return d
        return _decayed(d, work.y if at is None else at(ctx, work), mu)

    return _pure_if(term, at)


def _decayed(d: Tensor, y: Tensor, mu: float, inplace: bool = False) -> Tensor:
    """d + μ y (d itself when μ = 0); ``inplace``: written into d (the same numbers)."""
    if not mu:
        return d
    return d.add_(mu * y) if inplace else d + mu * y


def prox(coef: float, anchor: str = "anchor", skip_zero: bool = False) -> Term:
    """d + λ (y − work[anchor]) (``skip_zero``: nothing when λ = 0)."""

    def term(ctx: Context, work: Work, d: Tensor) -> Tensor:
        if skip_zero and not coef:
            return d
        return d + coef * (work.y - work[anchor])

    return pure(term)


def shift(key: str, coef: float = 1.0) -> Term:
    """d + κ work[key] (κ = −1: d − work[key])."""

    def term(ctx: Context, work: Work, d: Tensor) -> Tensor:
        if coef == 1.0:
            return d + work[key]
        if coef == -1.0:
            return d - work[key]
        return d + coef * work[key]

    return pure(term)


def masked(key: str) -> Term:
    """d ⊙ work[key]."""

    def term(ctx: Context, work: Work, d: Tensor) -> Tensor:
        return d * work[key]

    return pure(term)


def extrapolate(x: Tensor, reference: Tensor, beta: float) -> Tensor:
    """x + β (x − reference): Ole (reference = own last local model) or Catalyst/Nesterov
    (reference = previous mixed model)."""
    return x + beta * (x - reference) if beta else x.clone()


_DEFAULT = sgd()

__all__ = ["Direction", "Term", "chain", "default_direction", "extrapolate", "gradient",
           "local_step", "masked", "phase_direction", "prox", "pure", "sam_gradient", "sgd",
           "shift", "weight_decay"]
