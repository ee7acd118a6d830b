"""The rounds of S runs computed as one: a stack of S·M clients (run r's clients are rows
r·M … (r+1)·M − 1), each run's numbers those it computes alone.

The runs differ in their seeds and, where the algorithm's update takes the learning rate
only through the phase's local optimizer (``fits.RATE_PACKABLE``), in ``train.lr``: each
run's rows then step with their own rate (:meth:`PackedTrainer.row_rates`).

What is joined, and how each run keeps its own numbers:

- the local training: one :class:`~gossipfl.schedules.training.LocalTrainer` over all rows, so every
  local step is one batched product for all runs; its minibatches come from each run's own
  sampler (:class:`PackedSampler`: run r's rows draw with run r's seed and their run-local
  client ids), its augmentation likewise, and the loss is summed per run in each run's own
  order (:class:`LossTally`);
- the gossip: :class:`PackedFederation` mixes each run's block with that run's own mixer
  (its topology and W), and counts each run's bytes in its own rows of the traffic;
- everything else stays each run's own: its :class:`~gossipfl.core.runner.Runner` evaluates its
  block, checks it for divergence, records and checkpoints it (gossipfl.studies.packing.execute).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from gossipfl.algorithms.base import NO_PLAN, Context, Work
from gossipfl.algorithms.local import LocalOptimizer
from gossipfl.common.state import Namespace, RunState
from gossipfl.common.transfer import to_device
from gossipfl.data.sampler import ClientSampler, IndexBatch
from gossipfl.network.clients import ClientEnv
from gossipfl.network.federation import Federation
from gossipfl.network.wire import Wire
from gossipfl.schedules import RoundOutcome, get_schedule
from gossipfl.schedules.training import LocalTrainer
from gossipfl.systems.rounds import run_round


class PackedWire(Wire):
    """The wire of S runs of M clients each: each run's block mixed by that run's own wire
    (its topology and W), its messages counted in its own rows."""

    def __init__(self, members: Sequence[Wire], *args):
        super().__init__(*args)
        self.members = list(members)
        self.m = members[0].num_clients

    def mix(self, x: Tensor, t: int, steps: int) -> Tensor:
        # each block copied to its own allocation: the products see run r's rows exactly as
        # run r alone does (BLAS kernels may round differently at another memory alignment)
        m = self.m
        return torch.cat([wire.mix(x[r * m:(r + 1) * m].clone(), t, steps)
                          for r, wire in enumerate(self.members)])

    def out_degree(self, t: int) -> np.ndarray:
        return np.concatenate([wire.out_degree(t) for wire in self.members])


class PackedFederation(Federation):
    """The federation of S runs of M clients each: gossip mixes each run's block with that
    run's mixer (:class:`PackedWire`); bytes are counted per client (run r's clients are its
    rows)."""

    def __init__(self, members: Sequence[Federation], groups, sample_sizes: Tensor,
                 channels: Sequence[str] = ("x",)):
        self.members = list(members)
        self.m = members[0].num_clients
        super().__init__(self.m * len(members), groups, sample_sizes, seed=members[0].seed,
                         channels=channels)

    def _wire(self, mixer) -> PackedWire:
        return PackedWire([fed.wire for fed in self.members], self.num_clients, mixer,
                          self.traffic, self.seed)

    def run_bytes(self) -> list[int]:
        """Each run's bytes since the last call (one round's), and start afresh."""
        m, sent = self.m, self.traffic.clients
        out = [int(sent[r * m:(r + 1) * m].sum()) for r in range(len(self.members))]
        self.traffic.take()
        return out


def _split(clients: Tensor | np.ndarray, m: int, runs: int) -> list[tuple[Tensor, Tensor]]:
    """For each run: the positions in ``clients`` (joint ids; the host's, or on the device,
    read once) of its rows, and their run-local ids, on the host."""
    ids = clients if isinstance(clients, np.ndarray) else \
        torch.as_tensor(clients).cpu().numpy()
    run = ids // m
    out = []
    for r in range(runs):
        pos = np.flatnonzero(run == r)
        out.append((torch.from_numpy(pos), torch.from_numpy(ids[pos] - r * m)))
    return out


def run_keys(ids: Tensor | np.ndarray, counters, m: int, runs: int, device,
             keys_of: Callable[[int, np.ndarray, list | None], Tensor]) -> Tensor:
    """``[len(ids)]`` int64 keys of joint rows (ids on the device, or the host's), each
    derived by its own run: ``keys_of(r, run-local ids on the host, their counters or
    None)`` for run r's rows, on ``device``."""
    out = torch.zeros(len(ids), dtype=torch.int64, device=device)
    for r, (pos, local) in enumerate(_split(ids, m, runs)):
        if len(pos):
            sub = None if counters is None else [counters[i] for i in pos.tolist()]
            out[to_device(pos, device)] = keys_of(r, local.numpy(), sub)
    return out


class RunSplit:
    """:func:`_split` of the rows a local step works on, read from the device once a phase
    rather than once a step (on a GPU each read is a host synchronization, which stops the
    host from running ahead of the device). A phase's steps work on prefixes of one id
    tensor (the rows ordered by data size, the idle ones last, ``LocalTrainer.train``), and
    run r's positions in a prefix of n rows are its positions below n: a prefix of its
    sorted positions. Each run: its positions (a NumPy array on the host) and the same on
    the device."""

    def __init__(self, m: int, runs: int):
        self.m, self.runs = m, runs
        self._base: Tensor | None = None  # the id tensor split last (held: no reuse of it)
        self._key: tuple[int, int] = (0, 0)  # its data pointer and length
        self._parts: list[tuple[np.ndarray, Tensor]] = []
        self._every: dict[tuple[int, torch.device], Tensor] = {}

    def ids(self, clients: Tensor | None, n: int, device) -> Tensor:
        """``clients``, or the ids of every client in order (one tensor per length)."""
        if clients is not None:
            return clients
        key = (n, torch.device(device))
        if key not in self._every:
            self._every[key] = torch.arange(n, device=device)
        return self._every[key]

    def __call__(self, ids: Tensor, device) -> list[tuple[np.ndarray, Tensor]]:
        """For each run: the positions in ``ids`` of its rows (host, then ``device``)."""
        base = ids if ids._base is None else ids._base
        n, device = len(ids), torch.device(device)
        reuse = base is self._base and ids.data_ptr() == self._key[0] and n <= self._key[1]
        if not reuse:
            self._base, self._key = base, (ids.data_ptr(), n)
            self._parts = []
            for pos, _ in _split(ids, self.m, self.runs):
                self._parts.append((pos.numpy(), to_device(pos, device)))
        out = []
        for pos, on_device in self._parts:
            k = int(np.searchsorted(pos, n))  # the run's positions below n
            out.append((pos[:k], on_device[:k].to(device)))
        return out


class PackedSampler(ClientSampler):
    """Minibatches of the joint rows, drawn for every run at once: row r·M + i draws what
    client i of run r draws alone (its run's seed, its run-local client id, its data). The
    sampler's draw (:class:`~gossipfl.data.sampler.ClientSampler`) over the joint rows,
    each row keyed by its run's own sampler (:meth:`stream_keys`): one shuffle of every run's
    streams instead of one per run. Every run has the same batch size; a run with fewer
    batches in an epoch gets its last batch's indices, masked out, on the extra steps (as a
    client with little data gets empty rows alone).

    The same rows as alone up to a tie: a stream's order sorts hashes cut to the bits that
    the segments of the whole draw leave (62 − ⌈log₂ segments⌉, 52 for 8 runs of 20
    clients), and two elements of one segment whose hashes agree on those bits but not on
    the run's own (55) take their stored order: a chance of about 10⁻¹² a segment, the one
    that any subset of a run's clients already takes (gossipfl.data.sampler)."""

    def __init__(self, members: Sequence[ClientSampler], m: int):
        self.members = list(members)
        self.m = m
        first = self.members[0]
        parts = [row[:n] for s in self.members
                 for row, n in zip(s.index_matrix.cpu().numpy(), s.sizes.tolist(), strict=True)]
        # keys come from each run's own sampler (stream_keys): this seed is never used
        super().__init__(parts, first.batch_size, seed=first.seed, device=first.device)

    def stream_keys(self, ids: Tensor | np.ndarray, keys: tuple, counters) -> Tensor:
        """Each row's stream key as its run's sampler derives it for its run-local id."""
        return run_keys(ids, counters, self.m, len(self.members), self.device,
                        lambda r, local, sub: self.members[r].stream_keys(local, keys, sub))

    def epoch_streams(self, round: int, epoch: int, *stream: object, clients=None,
                      counters=None) -> IndexBatch:
        """The joint epoch, each row past its run's own epoch (the run's steps per epoch
        for its rows asked for) given its last batch's indices (masked out already)."""
        idx, mask = super().epoch_streams(round, epoch, *stream, clients=clients,
                                          counters=counters)
        batch, width = self.batch_size, idx.shape[1]
        host = self.host_ids(clients)
        ids = self._ids(clients) if host is None else host
        own = torch.full((len(ids),), width, dtype=torch.int64)  # host: no synchronization
        for r, (pos, local) in enumerate(_split(ids, self.m, len(self.members))):
            if len(pos):
                own[pos] = self.members[r].steps_per_epoch(local) * batch
        if bool((own < width).any()):
            cols = torch.arange(width, device=self.device)[None, :]
            w = to_device(own, self.device)[:, None]
            idx = torch.gather(idx, 1, torch.where(cols < w, cols, w - batch + (cols - w) % batch))
        return idx, mask


class LossTally:
    """Wraps a local step: each run's training loss summed over its own rows, step by step
    in the order its rows have alone, and the client-steps it computed."""

    def __init__(self, step: Callable, m: int, runs: int, device):
        self.step, self.m, self.runs = step, m, runs
        self.device = device
        self.split = RunSplit(m, runs)
        self.reset()

    def reset(self) -> None:
        self.sums = [torch.zeros((), device=self.device) for _ in range(self.runs)]
        self.counts = [0] * self.runs

    def __call__(self, ctx: Context, work, batch) -> Tensor:
        loss = self.step(ctx, work, batch)
        ids = self.split.ids(work.clients, len(loss), loss.device)  # None: all, in order
        for r, (pos, rows) in enumerate(self.split(ids, loss.device)):
            if len(pos):  # the run's losses in its own order, summed as alone
                self.sums[r] += loss.index_select(0, rows).sum()
                self.counts[r] += len(pos)
        return loss


class PackedTrainer(LocalTrainer):
    """The local trainer of the joint rows; each row's augmentation is drawn with its run's
    seed and its run-local client id (``members``: the runs' own trainers)."""

    def __init__(self, members: Sequence[LocalTrainer], m: int, *args: Any):
        super().__init__(*args)
        self.members = list(members)
        self.m = m

    def local_optimizer(self, phase, t: int, lr: float, momentum: float,
                        inner: Work) -> LocalOptimizer:
        """Each row at its own run's rate when the runs' rates differ (:meth:`row_rates`)."""
        clients = inner.clients if inner.clients is not None else \
            torch.arange(len(inner), device=inner.y.device)
        rates = self.row_rates(phase, t, clients, inner.y)
        return super().local_optimizer(phase, t, lr if rates is None else rates, momentum,
                                       inner)

    def row_rates(self, phase, t: int, clients: Tensor, like: Tensor) -> Tensor | None:
        """``[S, 1]``: the rate of round t's ``phase`` of each row's run (the rows of the joint
        ids ``clients``), elementwise the same numbers as each run alone
        (:func:`gossipfl.algorithms.local.descend`); None when the runs' rates agree."""
        rates = [member.phase_lr(phase, t) for member in self.members]
        if len(set(rates)) == 1:
            return None
        per_run = to_device(rates, like.device, like.dtype)
        return per_run[clients // self.m][:, None]

    def augment_keys(self, t: int, rows: Tensor | np.ndarray, counters=None,
                     device: torch.device | None = None) -> Tensor | None:
        if not self.augment:
            return None
        device = rows.device if device is None else device
        return run_keys(rows, counters, self.m, len(self.members), device,
                        lambda r, local, sub: self.members[r].augment_keys(t, local, sub,
                                                                           device=device))

    # -- a phase replayed from a graph: each run's rate and loss on the device ------------
    @property
    def graph_step(self):
        return self.local_step.step  # the step the loss tally wraps

    def graph_refusal(self, rows: Tensor, ragged: bool = False) -> str | None:
        reason = super().graph_refusal(rows, ragged)
        if reason is not None:
            return reason
        counts = {len(pos) for pos, _ in self.local_step.split(rows, rows.device)}
        return None if len(counts) == 1 else "the runs have unequal rows at work"

    def graph_key(self, rows: Tensor, ragged: bool) -> Any:
        """A ragged phase's tally sums each run's prefix of rows step by step: which rows are
        whose is part of its recording (its runs' positions)."""
        if not ragged:
            return None
        return tuple(tuple(pos.tolist()) for pos, _ in self.local_step.split(rows, rows.device))

    def graph_rate(self, phase, t: int, lr: float, rows: Tensor, like: Tensor) -> Tensor:
        """One η per row (``[S, 1]``: its run's), or one for all when the runs' agree."""
        rates = self.row_rates(phase, t, rows, like)
        return super().graph_rate(phase, t, lr, rows, like) if rates is None else rates

    def graph_tally(self, rows: Tensor, loss_sum: Tensor) -> tuple[Tensor, ...]:
        """Each run's loss sum (``[runs]``, the tally's), then the rows run by run, each
        run's in its own order (positions in ``rows``): all runs' together, then each run's
        alone (a ragged phase's steps tally each run's prefix of them)."""
        tally = self.local_step
        parts = tally.split(rows, rows.device)
        self._graph_positions = [pos for pos, _ in parts]
        return (torch.stack(tally.sums), torch.cat([on_device for _, on_device in parts]),
                *(on_device for _, on_device in parts))

    def tally_in_graph(self, loss: Tensor, sums: Tensor, *tally: Tensor) -> None:
        """Each run's loss summed over its rows in its own order, as alone: all rows at once
        when every row has a minibatch, else each run's rows among the first ``len(loss)``
        (their count fixed by the recording), as :class:`LossTally` sums them."""
        runs = len(self.members)
        if len(loss) == sum(len(pos) for pos in self._graph_positions):
            sums += loss.index_select(0, tally[0]).view(runs, -1).sum(1)
            return
        for r, (pos, on_device) in enumerate(zip(self._graph_positions, tally[1:],
                                                 strict=True)):
            k = int(np.searchsorted(pos, len(loss)))  # the run's rows with a minibatch
            if k:
                sums[r] += loss.index_select(0, on_device[:k]).sum()

    def graph_tallied(self, tally: tuple[Tensor, ...], actives: Sequence[int]) -> None:
        counter = self.local_step
        counter.sums = list(tally[0].unbind())
        for r, pos in enumerate(self._graph_positions):
            counter.counts[r] += sum(int(np.searchsorted(pos, a)) for a in actives)


class Pack:
    """S runners (same config but the seed and the learning rate, same round) computed as
    one stack.

    Each round :meth:`round` trains and gossips the joint stack, hands every runner its own
    block of the state (a copy, at the alignment a run alone has) and returns each runner's
    round measurements for :meth:`~gossipfl.core.runner.Runner.step`."""

    def __init__(self, runners: Sequence[Any]):
        self.runners = list(runners)
        first = self.runners[0]
        exps = [r.exp for r in self.runners]
        self.m = m = exps[0].fed.num_clients
        runs = len(exps)
        env0 = exps[0].env
        sizes = torch.cat([e.env.sample_sizes for e in exps])
        counts = None if env0.label_counts is None else torch.cat(
            [e.env.label_counts for e in exps])
        fields = {f.name: getattr(env0, f.name) for f in dataclasses.fields(env0)}
        fields.update(sample_sizes=sizes, label_counts=counts)
        self.env = ClientEnv(**fields)
        self.fed = PackedFederation([e.fed for e in exps], env0.groups, sizes,
                                    type(exps[0].algorithm).gossip_channels)
        config = first.config
        self.algorithm = type(exps[0].algorithm)(config.algorithm.params, self.env, self.fed)
        trainers = [r.trainer for r in self.runners]
        self.tally = LossTally(first.trainer.local_step, m, runs, exps[0].device)
        self.trainer = PackedTrainer(trainers, m, config.train, self.env, self.fed,
                                     PackedSampler([e.sampler for e in exps], m),
                                     first.trainer.dataset, first.trainer.augment, config.seed,
                                     self.tally, None, first.trainer.phase_graphs is not None)
        self.schedule = get_schedule(config.topology.order)(self.algorithm, self.trainer,
                                                            self.fed)
        keys = self.algorithm.client_state
        # the joint rows' state: an algorithm namespace of a RunState, as a run's (packed
        # runs are synchronous: the schedule keeps no rows of its own)
        self.run_state = RunState(algorithm=Namespace(
            f"algorithm {self.algorithm.name} (packed)", rows=keys, kept=keys))
        self.run_state.algorithm.update(
            {k: torch.cat([r.state[k] for r in self.runners]) for k in keys})

    @property
    def state(self):
        """The joint rows' algorithm state (the RunState's algorithm namespace)."""
        return self.run_state.algorithm

    def round(self, t: int) -> list:
        """Round t of every run; each runner's state is then its block, and the list holds
        each runner's round measurements."""
        start = time.perf_counter()
        first, m = self.runners[0], self.m
        ctx = Context(round=t, lr=first.lr(t), rounds=first.config.train.rounds,
                      env=self.env, plan=NO_PLAN)
        keep = any(r.evaluator.measures_before_gossip() and r.should_evaluate(t)
                   for r in self.runners)
        self.tally.reset()
        outcome = run_round(self.schedule, self.state, ctx, keep)
        sent = self.fed.run_bytes()
        seconds = (time.perf_counter() - start) / len(self.runners)  # each run's share
        measured = []
        sums = torch.stack(self.tally.sums).cpu()  # every run's loss in one read of the device
        for r, runner in enumerate(self.runners):
            block = slice(r * m, (r + 1) * m)
            runner.state.update({k: v[block].clone() for k, v in self.state.items()})
            trained = None if outcome.trained is None else outcome.trained[block]
            own = RoundOutcome(sums[r], self.tally.counts[r], dict(outcome.extra),
                               trained=trained)
            measured.append(runner.round_metrics(t, runner.lr(t), own, sent[r], seconds))
        return measured
