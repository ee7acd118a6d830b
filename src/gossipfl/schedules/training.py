"""The local loop: a round's phases on the rows at work, each client on its own minibatches.

:meth:`LocalTrainer.train` runs the phases a schedule hands it on the rows of a
:class:`~gossipfl.algorithms.base.Work`, in place. The rows are ordered by data size
(largest first), so that at every local step the clients that still have a minibatch are a
prefix of the rows: each step's phase update gets that prefix only (views), and clients whose
data ran out (or that sit out the round) cost nothing. Minibatches and augmentation are drawn
per client (hashed from the seed, round, phase and client id), so the rows of any subset of
clients come out as they would with all the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from gossipfl.algorithms.base import NO_PLAN, Batch, Context, Phase, RoundPlan, Work
from gossipfl.algorithms.local import LocalOptimizer
from gossipfl.algorithms.terms import local_step
from gossipfl.common.rng import client_keys, vectorized_keys
from gossipfl.common.transfer import to_device
from gossipfl.data import ClientSampler, Dataset, apply_crop_flip, hashed_crop_flip_params
from gossipfl.data.sampler import step_major
from gossipfl.network.clients import ClientEnv
from gossipfl.network.federation import Federation
from gossipfl.schedules.phase_graph import PhaseGraphs


class LocalTrainer:
    """Local phases of any rows: learning rates per round and phase, minibatch streams,
    augmentation, and the loss and client-steps they cost. ``train``: the config's ``train``
    section (lr, lr_decay, local_steps / local_epochs, full_batch, rounds)."""

    def __init__(self, train: Any, env: ClientEnv, fed: Federation,
                 sampler: ClientSampler, dataset: Dataset, augment: bool, seed: int,
                 step: Callable = local_step, block_clients: int | None = None,
                 graphs: bool = False):
        self.train_config = train
        self.env = env
        self.fed = fed
        self.sampler = sampler
        self.dataset = dataset
        self.augment = augment
        self.seed = seed
        # one phase step (terms.local_step, or it wrapped: precision, a profiler, packing)
        self.local_step = step
        self.block_clients = block_clients  # block-major order: clients per block
        # engine.cuda_graphs: whole phases replayed from CUDA graphs where they can be
        self.phase_graphs = PhaseGraphs(self) if graphs else None
        # the process's client ids on the host
        self._own_clients: np.ndarray | None = None
        self._own_device: torch.Tensor | None = None  # their ids on the device
        self._last_rows: tuple | None = None  # (ids, order, ids[order]) of the last round

    def lr(self, t: int) -> float:
        train = self.train_config
        return train.lr * train.lr_decay ** t

    def phase_lr(self, phase: Phase, t: int) -> float:
        train = self.train_config
        return (train.lr if phase.lr is None else phase.lr) * train.lr_decay ** t

    def phase_length(self, phase: Phase) -> tuple[str, int]:
        """``("steps", K)`` or ``("epochs", E)``: the phase's own, else the config's."""
        train = self.train_config
        if phase.steps is not None or phase.epochs is not None:
            return ("steps", phase.steps) if phase.steps is not None else \
                ("epochs", phase.epochs)
        if train.local_steps:
            return "steps", train.local_steps
        return "epochs", train.local_epochs

    def phase_batches(self, t: int, index: int, phase: Phase, rows: torch.Tensor | np.ndarray,
                      stream: str = "phase", counters=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The index batches of a phase of round t for the clients ``rows`` (in that order;
        on the device, or the host's ids as a NumPy array), from the sampler's ``stream``
        (``counters``: one integer per row that the row's stream also hashes, e.g. its
        update count), step-major: ``(idx [K, S, B], mask [K, S, B])``, step k's minibatch of
        row i at ``[k, i]`` (views of the sampler's streams)."""
        train = self.train_config
        kind, count = self.phase_length(phase)
        if train.full_batch:
            idx, mask = self.sampler.full_batch(rows)
            return idx.expand(count, *idx.shape), mask.expand(count, *mask.shape)
        batch = self.sampler.batch_size
        if kind == "steps":
            streams = self.sampler.step_streams(t, count, stream, index, clients=rows,
                                                counters=counters)
            return step_major(*streams, count, batch)
        epochs = [self.sampler.epoch_streams(t, e, stream, index, clients=rows,
                                             counters=counters) for e in range(count)]
        epochs = [step_major(idx, mask, idx.shape[1] // batch, batch) for idx, mask in epochs]
        if len(epochs) == 1:
            return epochs[0]
        return torch.cat([idx for idx, _ in epochs]), torch.cat([mask for _, mask in epochs])

    def local_optimizer(self, phase: Phase, t: int, lr: float, momentum: float,
                        inner: Work) -> LocalOptimizer:
        """The optimizer of round t's ``phase`` on the rows ``inner`` (a packed study's
        trainer gives each run's rows its own learning rate, gossipfl.studies.packing)."""
        return LocalOptimizer(self.env.groups[phase.group], lr, momentum, len(inner), inner.y)

    # -- a phase replayed from a graph (gossipfl.schedules.phase_graph) ---------------------
    @property
    def graph_step(self) -> Callable:
        """The step a phase graph records (the trainer's local step)."""
        return self.local_step

    def graph_refusal(self, rows: torch.Tensor, ragged: bool = False) -> str | None:
        """Why this trainer's phase on the clients ``rows`` cannot be recorded (None: it
        can); ``ragged``: some rows have no minibatch at some step. A step that keeps state
        on the host would keep what it had at the recording."""
        if not getattr(self.graph_step, "graphable", False):
            return "the local step keeps state on the host"
        return None

    def graph_rate(self, phase: Phase, t: int, lr: float, rows: torch.Tensor,
                   like: torch.Tensor) -> torch.Tensor:
        """η of round t's ``phase`` for the rows of the clients ``rows``, as a graph reads
        it: a 0-dim tensor."""
        return torch.full((), lr, dtype=like.dtype, device=like.device)

    def graph_tally(self, rows: torch.Tensor, loss_sum: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The loss tally a graph updates: its accumulator first (changed in place), then
        what it reads (here: the block's loss sum alone)."""
        return (loss_sum,)

    def tally_in_graph(self, loss: torch.Tensor, total: torch.Tensor,
                       *tally: torch.Tensor) -> None:
        """A recorded step's loss added to the tally: the sum of the rows', as a step does."""
        total += loss.sum()

    def graph_tallied(self, tally: tuple[torch.Tensor, ...], actives: Sequence[int]) -> None:
        """After a replay of a phase whose step k moved the first ``actives[k]`` rows: what
        the tally keeps on the host."""

    def graph_key(self, rows: torch.Tensor, ragged: bool) -> Any:
        """What else a recording of a phase on the clients ``rows`` depends on (None:
        nothing; a packed study's ragged phase: which rows are whose run)."""
        return None

    def make_batch(self, idx: torch.Tensor, mask: torch.Tensor,
                   augment: tuple[torch.Tensor, torch.Tensor] | None,
                   clients: torch.Tensor | None = None, every_row_active: bool = False
                   ) -> Batch:
        """The minibatch of the rows ``idx [S, B]`` (of the clients ``clients [S]``). With
        ``augment = (keys [S], drawn [S])``
        the image in column b of row s is cropped and flipped by the hash of (client s's key,
        drawn[s] + b), where drawn[s] counts the samples client s has drawn this round."""
        data = self.dataset
        inputs = data.train_x[idx]
        if augment is not None:
            keys, drawn = augment
            counters = drawn[:, None] + torch.arange(idx.shape[1], device=idx.device)
            dy, dx, flip = hashed_crop_flip_params(keys, counters)
            inputs = apply_crop_flip(inputs, dy, dx, flip)
        return Batch(inputs=inputs, targets=data.train_y[idx], mask=mask, clients=clients,
                     every_row_active=every_row_active)

    def augment_keys(self, t: int, rows: torch.Tensor | np.ndarray, counters=None,
                     device: torch.device | None = None) -> torch.Tensor | None:
        """The augmentation keys of round t of the clients ``rows`` (on the device, or the
        host's ids), on ``device`` (None: the rows')."""
        if not self.augment:
            return None
        return client_keys(self.seed, rows, "augment", t,
                           device=rows.device if device is None else device,
                           counters=counters, vectorized=vectorized_keys(self.fed.num_clients))

    def train(self, t: int, work: Work, phases: Sequence[Phase],
              stream: str = "phase", counters: torch.Tensor | None = None,
              offline=None, plan: RoundPlan | None = None) -> tuple[torch.Tensor, int]:
        """Round t's ``phases`` on the rows of ``work`` (in place), minibatches from the
        sampler's ``stream``; returns the summed per-row loss and the number of client-steps
        computed. ``counters`` (``[S]`` ints, one per row of ``work``): hashed into each
        row's minibatch and augmentation streams, so that a client computing several times
        in one round (an asynchronous order) draws new samples each time. ``plan``: the
        round's :class:`~gossipfl.algorithms.base.RoundPlan`, carried into every step's
        context; its ``offline`` (``[M]`` bool; or ``offline`` given alone): the clients that
        sit the round out, handed no minibatch, so they cost no compute and add no loss.

        With ``block_clients`` set (block-major order), the rows run in blocks of that many
        clients, each block through all its phases and steps before the next: the same
        numbers to float rounding (each row's minibatches and updates are its own; the
        batched products over fewer rows sum in another order, ~1e-7), with a block's
        parameters hot in the cache instead of the whole stack streamed from memory at every
        step."""
        plan = NO_PLAN if plan is None else plan
        offline = plan.offline if offline is None else offline
        clients = work.clients
        ids = self._own_ids(work.y.device) if clients is None else clients
        host = None if offline is not None else self._host_rows(clients)
        if host is not None:  # the order from the host's copy of the sizes: no device read
            order_host = np.argsort(-self.sampler.host_sizes[host], kind="stable")
            permuted = bool((order_host != np.arange(len(order_host))).any())
            order = to_device(order_host, ids.device) if permuted else None
            rows, host = (self._ordered(ids, order, order_host), host[order_host]) \
                if permuted else (ids, host)
            out = idle = None
        else:
            sizes = self.env.sample_sizes[ids]
            out = None if offline is None else \
                torch.as_tensor(offline, device=ids.device)[ids]
            if out is not None:  # they sort last, and every batch of theirs is empty
                sizes = torch.where(out, torch.zeros_like(sizes), sizes)
            order = torch.argsort(sizes, descending=True, stable=True)
            permuted = not bool((order == torch.arange(len(order), device=order.device)).all())
            rows = ids[order]
            idle = None if out is None or not bool(out.any()) else out[order]
        # permuted rows are no longer "all the process's clients in order": name them, so
        # that a step reading its rows' clients (a packed study's runs, FedRoD's priors)
        # reads theirs
        inner = work.take(order, rows) if permuted else work
        if counters is not None:
            counters = (counters.cpu() if order is None else counters.cpu()[order.cpu()]).tolist()
        keys = self.augment_keys(t, rows if host is None else host, counters,
                                 device=rows.device)
        loss_sum = torch.zeros((), device=work.y.device)
        loss_count = 0
        span = max(len(rows), 1)  # one block even without rows (a rank holding no client)
        size = self.block_clients or span
        for start in range(0, span, size):
            stop = min(start + size, len(rows))
            block = inner.block(start, stop, rows[start:stop])
            block_loss, block_count = self._train_block(
                t, block, rows[start:stop], phases, stream,
                None if counters is None else counters[start:stop],
                None if keys is None else keys[start:stop],
                None if idle is None else idle[start:stop], plan,
                None if host is None else host[start:stop])
            loss_sum += block_loss
            loss_count += block_count
        if permuted:
            work.restore(inner, torch.argsort(order))
        return loss_sum, loss_count

    def _host_rows(self, clients: torch.Tensor | None) -> np.ndarray | None:
        """The host's ids of the rows of ``clients`` (None: all this process's, in order),
        where the host has them without reading the device (a server's sampled clients:
        :meth:`~gossipfl.network.federation.Federation.host_ids`; else None)."""
        if clients is None:
            if self._own_clients is None:
                self._own_clients = self.fed.own_clients("cpu").numpy()
            return self._own_clients
        return self.fed.host_ids(clients)  # a server's draw, or ids on the CPU

    def _own_ids(self, device: torch.device) -> torch.Tensor:
        """The process's client ids on ``device``, one tensor from round to round (what is
        split from it, a packed study's runs, is kept with it: gossipfl.studies.packing)."""
        if self._own_device is None or self._own_device.device != device:
            self._own_device = self.fed.own_clients(device)
        return self._own_device

    def _ordered(self, ids: torch.Tensor, order: torch.Tensor, order_host: np.ndarray
                 ) -> torch.Tensor:
        """``ids[order]``: the same tensor as the last round's when ``ids`` and the order
        are (all the clients at work: the rows are the same every round)."""
        last = self._last_rows
        if last is not None and last[0] is ids and np.array_equal(last[1], order_host):
            return last[2]
        rows = ids[order]
        self._last_rows = (ids, order_host, rows)
        return rows

    def _train_block(self, t: int, inner: Work, rows: torch.Tensor, phases: Sequence[Phase],
                     stream: str, counters: list | None, keys: torch.Tensor | None,
                     idle: torch.Tensor | None = None, plan: RoundPlan = NO_PLAN,
                     host: np.ndarray | None = None) -> tuple[torch.Tensor, int]:
        """All phases and steps of the rows ``inner`` (clients ``rows``, largest data first;
        ``idle``: the rows that sit the round out, last; ``host``: the rows' ids on the host,
        whence the minibatches' shapes are known without reading the device), every
        context with the round's ``plan``."""
        drawn = torch.zeros(len(rows), dtype=torch.int64, device=rows.device)
        loss_sum = torch.zeros((), device=inner.y.device)
        loss_count = 0
        momentum_default, rounds = self.env.train.momentum, self.train_config.rounds
        for index, phase in enumerate(phases):
            lr = self.phase_lr(phase, t)
            momentum = momentum_default if phase.momentum is None else phase.momentum
            # made when it is used: a phase replayed from a graph makes its own
            optimizer = None if phase.begin is None else \
                self.local_optimizer(phase, t, lr, momentum, inner)
            if phase.begin is not None:
                phase.begin(Context(round=t, lr=lr, phase=phase, rounds=rounds,
                                    phase_index=index, optimizer=optimizer, env=self.env,
                                    plan=plan), inner)
            steps_idx, steps_mask = self.phase_batches(
                t, index, phase, rows if host is None else host, stream, counters)
            if idle is not None:
                steps_mask = steps_mask & ~idle[None, :, None]
            actives = _active_rows(steps_mask) if host is None else host_active_rows(
                *self.phase_length(phase), self.sampler.host_sizes[host],
                None if self.train_config.full_batch else self.sampler.batch_size)
            graphs = self.phase_graphs
            if graphs is not None and \
                    graphs.refusal(phase, inner, rows, actives) is None and \
                    graphs.run(t, index, phase, inner, rows, steps_idx, steps_mask, keys, drawn,
                               loss_sum, lr, momentum, actives):
                loss_count += sum(actives)
                continue
            if optimizer is None:
                optimizer = self.local_optimizer(phase, t, lr, momentum, inner)
            for step, active in enumerate(actives):
                if active == 0:
                    continue
                idx = steps_idx[step, :active].contiguous()
                mask = steps_mask[step, :active].contiguous()
                augment = None if keys is None else (keys[:active], drawn[:active])
                batch = self.make_batch(idx, mask, augment, rows[:active],
                                        every_row_active=True)
                drawn[:active] += mask.sum(dim=1)
                step_ctx = Context(round=t, lr=lr, phase=phase, rounds=rounds, phase_index=index,
                                   step=step, optimizer=optimizer, env=self.env, plan=plan)
                rows_at_work = inner.head(active)
                rows_at_work.steps.add_(1)
                loss = self.local_step(step_ctx, rows_at_work, batch)
                loss_sum += loss.sum()
                loss_count += active
        return loss_sum, loss_count


def host_active_rows(kind: str, count: int, sizes: np.ndarray, batch: int | None
                     ) -> list[int]:
    """:func:`_active_rows` from the rows' data ``sizes`` (largest first, on the host): the
    rows with a sample at each step of a phase of ``count`` local steps or epochs of batches
    of ``batch`` (None: full batch), without reading the device. A row with data has a
    sample at every local step and full batch, and in step s of an epoch while s <
    ⌈n_i / B⌉."""
    with_data = int((sizes > 0).sum())
    if batch is None or kind == "steps":
        return [with_data] * count
    batches = -(-sizes // batch)  # ⌈n_i / B⌉, 0 for an empty row
    per_epoch = max(int(batches.max()) if len(batches) else 0, 1)
    epoch = [int((batches > s).sum()) for s in range(per_epoch)]
    return epoch * count


def _active_rows(mask: torch.Tensor) -> list[int]:
    """For each step of a phase's ``mask [K, S, B]``: how many rows have a sample, read from
    the device once for the whole phase (not once a step). The rows are ordered by data size
    with the idle ones last, so the rows with a sample are a prefix: every row of
    ``mask[k, :active]`` has one."""
    return mask.any(dim=2).sum(dim=1).tolist()
