"""The round loop: step rounds, stop on divergence, checkpoint.

The runner owns no algorithm logic and no order of events: it builds the experiment
(:mod:`gossipfl.assembly.experiment`), holds the run's state (:class:`~gossipfl.common.state.RunState`: the
algorithm's, and the namespaces of the compressed gossip, the clocks and the privacy counts,
whose owners write them), asks the schedule (:mod:`gossipfl.schedules`, ``topology.order``)
to run each round, and has the :class:`~gossipfl.core.evaluation.Evaluator` measure the models when
due. A checkpoint is that state (:meth:`Runner.state_dict`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from gossipfl.algorithms.base import NO_PLAN, Context, State
from gossipfl.algorithms.terms import local_step
from gossipfl.assembly.experiment import (  # noqa: F401  (the builders, importable from here too)
    Experiment,
    Perturbation,
    StabilityWarning,
    build_data,
    build_experiment,
    build_model_for,
    resolve_device,
)
from gossipfl.assembly.plan import check_plan
from gossipfl.common.state import RunState
from gossipfl.common.transfer import to_device
from gossipfl.config import Config
from gossipfl.core.evaluation import Evaluator, consensus_distance
from gossipfl.distributed.launch import current as current_processes
from gossipfl.engine.compiled import resolve_graphs
from gossipfl.engine.precision import apply_precision
from gossipfl.errors import Diverged, GossipflError
from gossipfl.output.result import Result
from gossipfl.schedules import Schedule, get_schedule
from gossipfl.schedules.training import LocalTrainer
from gossipfl.systems.rounds import run_round

Callback = Callable[["Runner", int, "dict | None"], None]


class RoundMetrics(dict):
    """A round's training measurements (the metrics row's training columns); ``trained``:
    the personalized models as they left local training, when the round is evaluated on
    them (``eval.personalized_point: before_gossip``), else None."""

    def __init__(self, values: dict, trained: torch.Tensor | None = None):
        super().__init__(values)
        self.trained = trained


class Runner:
    """Runs the rounds of one experiment; resumable from :meth:`state_dict`.

    :meth:`run` is :meth:`step` for every round left, then :meth:`result`; a caller that
    advances several runners in lockstep (gossipfl.studies.stability) calls :meth:`step`
    itself. ``perturb``: see :func:`gossipfl.assembly.experiment.build_experiment`.
    """

    def __init__(self, config: Config, callbacks: Sequence[Callback] = (),
                 perturb: Perturbation | None = None):
        self.callbacks = _callbacks(callbacks)  # before any work: a wrong one fails now
        self.config = config
        self.exp = exp = build_experiment(config, perturb)
        self.round = 0  # rounds completed
        self.rows: list[dict] = []
        self.bytes_total = 0
        self.train_seconds = 0.0
        self.client_steps = 0  # client-steps computed (rows handed to the oracle, per step)
        augment = config.data.augment
        self.trainer = LocalTrainer(config.train, exp.env, exp.fed, exp.sampler, exp.dataset,
                                    augment if augment is not None else exp.dataset.augment,
                                    config.seed,
                                    step=apply_precision(config.engine.precision, exp.device,
                                                         local_step),
                                    block_clients=config.engine.block_clients,
                                    graphs=resolve_graphs(config.engine.cuda_graphs,
                                                          exp.device)[1])
        own = {} if exp.state.schedule is None else {"state": exp.state.schedule}
        self.schedule: Schedule = get_schedule(config.topology.order)(
            exp.algorithm, self.trainer, exp.fed, **own)
        self.evaluator = Evaluator(config, exp.algorithm, exp.fed, exp.oracle, exp.dataset,
                                   self.trainer, exp.eval_subset, exp.local_test_parts,
                                   exp.honest, eval_clients=exp.eval_clients,
                                   members=exp.members)
        self.run_state: RunState = exp.state
        if exp.device.type == "cpu":  # the whole memory plan, before the [M, P] stacks
            processes = current_processes()
            check_plan(config, exp.dataset, exp.layout.P,
                       processes.world if processes.distributed else 1)
        self.state = exp.algorithm.init(exp.x0)

    @property
    def state(self) -> State:
        """The algorithm's state: the RunState's algorithm namespace (what the schedule and
        the evaluator are handed)."""
        return self.run_state.algorithm

    @state.setter
    def state(self, entries: State) -> None:
        """Make ``entries`` the algorithm's state, in place (the namespace object stays)."""
        space = self.run_state.algorithm
        if entries is not space:
            space.clear()
            space.update(entries)

    # -- one round -----------------------------------------------------------------------
    def lr(self, t: int) -> float:
        return self.trainer.lr(t)

    def run_round(self, t: int) -> RoundMetrics:
        """Train and communicate for round t; returns the round's training measurements (and,
        when round t is evaluated on the models as they leave local training, those)."""
        exp = self.exp
        start = time.perf_counter()
        plan = NO_PLAN if exp.systems is None else exp.systems.plan(t)
        ctx = Context(round=t, lr=self.lr(t), rounds=self.config.train.rounds, env=exp.env,
                      plan=plan)
        keep = self.evaluator.measures_before_gossip() and self.should_evaluate(t)
        outcome = run_round(self.schedule, self.state, ctx, keep)
        clock = {} if exp.systems is None else exp.systems.advance(
            t, exp.fed.traffic.clients, plan, outcome.clocks)
        sent = exp.fed.traffic.take()
        return self.round_metrics(t, ctx.lr, outcome, sent, time.perf_counter() - start,
                                  clock)

    def round_metrics(self, t: int, lr: float, outcome, sent: int, seconds: float,
                      clock: dict | None = None) -> RoundMetrics:
        """Round t's training measurements from its outcome (``loss_sum``, ``loss_count``,
        ``extra``, ``trained``), the bytes ``sent`` and its ``seconds``; counts them into the
        run's totals (a packed study hands each of its runs its own share:
        gossipfl.studies.packing)."""
        exp = self.exp
        loss_sum = outcome.loss_sum
        count = to_device([float(outcome.loss_count)], loss_sum.device, loss_sum.dtype)
        totals = exp.fed.total(torch.cat([loss_sum.reshape(1), count]))  # every process's
        if totals.device.type != "cpu":  # the round's one read of the device: both at once
            totals = totals.cpu()
        loss_sum, loss_count = totals[0], int(totals[1])
        self.client_steps += loss_count
        # nobody trained (every client offline, none met the deadline): no loss to report,
        # recorded as missing (an empty cell in metrics.csv), never as 0
        train_loss = float(loss_sum / loss_count) if loss_count else None
        self.train_seconds += seconds
        self.bytes_total += int(sent)
        return RoundMetrics({"round": t + 1, "lr": lr, "train_loss": train_loss,
                             "bytes_round": int(sent), "bytes_total": self.bytes_total,
                             **exp.fed.traffic.columns(), "seconds": seconds,
                             **(clock or {}), **outcome.extra},
                            trained=outcome.trained)

    def evaluate(self, trained: torch.Tensor | None = None, rounds: int | None = None) -> dict:
        """All enabled evaluation protocols on the current models (and, in a private run,
        the privacy spent so far: ``epsilon``, ``epsilon_mean``; and the algorithm's own
        columns, :meth:`~gossipfl.algorithms.base.Algorithm.columns`, after ``rounds`` rounds:
        default the rounds completed before the current one)."""
        row = self.evaluator.evaluate(self.state, self.round, trained)
        if rounds == self.config.train.rounds and getattr(self.exp.members, "spec", None) \
                and self.exp.members.spec.shadows:
            row.update(self.lira_columns())  # LiRA against shadows of the whole run
        row.update(self.exp.algorithm.columns(self.round if rounds is None else rounds))
        if self.exp.privacy is not None:
            row.update(self.exp.privacy.columns())
        return row

    def lira_columns(self) -> dict:
        """eval.membership's LiRA columns on the current models: the shadow federations
        (gossipfl.trust.membership), each a run of this config on halves of the clients'
        samples, then the offline likelihood-ratio test on the evaluated clients."""
        from gossipfl.assembly.loading import load_config
        from gossipfl.trust import membership

        exp, c, data = self.exp, self.exp.members, self.exp.dataset
        halves = membership.shadow_halves(c, self.config.seed)
        plain = self.config.to_dict(api_values=True)
        models = []
        for half in halves:  # one federation of M stacked clients per shadow
            shadow = Runner(load_config(membership.shadow_config(
                plain, half, data.train_x, data.train_y, data.num_classes)))
            shadow.run()
            models.append(shadow.client_models())
        rows, x = self.evaluator.eval_clients, self.client_models()
        return membership.lira_attack(exp.oracle, x if rows is None else x[rows],
                                      torch.stack(models), data.train_x, data.train_y, c,
                                      halves, rows)

    def should_evaluate(self, t: int) -> bool:
        rounds, every = self.config.train.rounds, self.config.eval.every
        return (t + 1) % every == 0 or t + 1 == rounds

    def run(self) -> Result:
        for t in range(self.round, self.config.train.rounds):
            self.step(t)
        return self.result()

    def step(self, t: int, evaluate: bool | None = None,
             measured: RoundMetrics | None = None) -> dict | None:
        """Round t (the next one, ``self.round``): train and communicate, stop with
        :class:`Diverged` on a blow-up, evaluate when due (``evaluate`` True/False: always
        / never; a callback with an ``evaluating(runner, t)`` method is told first), call
        the callbacks; returns the round's metrics row, None when it was not
        evaluated. ``measured``: round t was computed elsewhere (a packed study computes
        its runs' rounds together, gossipfl.studies.packing) and left this run's state and these
        measurements; the rest of the round is as usual."""
        with torch.no_grad():
            measured = self.run_round(t) if measured is None else measured
            self.check_divergence(t, measured)
            row = None
            if self.should_evaluate(t) if evaluate is None else evaluate:
                for callback in self.callbacks:  # e.g. a progress bar saying so
                    getattr(callback, "evaluating", _nothing)(self, t)
                trained = getattr(measured, "trained", None)
                row = {**measured, **self.evaluate(trained, t + 1),
                       "elapsed": self.train_seconds}
                self.rows.append(row)
        self.round = t + 1
        for callback in self.callbacks:
            callback(self, t, row)
        return row

    def client_models(self) -> torch.Tensor:
        """``[M, P]`` the local models now (this process's rows)."""
        return self.exp.algorithm.client_models(self.state)

    def personalized_models(self) -> torch.Tensor:
        """``[M, P]`` what the personalized protocol measures now (after fine-tuning, if the
        algorithm fine-tunes)."""
        return self.evaluator.personalized_models(self.state, self.round)

    def result(self) -> Result:
        """The :class:`Result` of the rounds run so far."""
        algo = self.exp.algorithm
        server = algo.server_model(self.state)
        return Result(config=self.config, metrics=list(self.rows),
                      params=self.exp.fed.gather_to_writer(
                          self.client_models()).detach().clone(),
                      server_params=None if server is None else server.detach().clone(),
                      layout=self.exp.layout, info=dict(self.exp.info))

    def check_divergence(self, t: int, measured: dict) -> None:
        """Raise :class:`Diverged` when round t left a non-finite loss or parameters, or a
        consensus distance above ``train.max_consensus``."""
        x, fed = self.client_models(), self.exp.fed
        loss, bound = measured["train_loss"], self.config.train.max_consensus
        what = None
        held = x[:1] if x.stride(0) == 0 else x  # a replicated server model: check one row
        nonfinite = fed.total(torch.tensor(float(has_nonfinite(held)),
                                           device=x.device))  # every process decides alike
        if loss is not None and not math.isfinite(loss):
            what = f"the training loss is {loss}"
        elif nonfinite > 0:
            what = "the parameters hold NaN or inf"
        elif bound is not None and self.exp.topology is not None:
            distance = consensus_distance(x, fed)
            if distance > bound:
                what = (f"the consensus distance {distance:.3g} exceeds train.max_consensus "
                        f"{bound:g}")
        if what:
            raise Diverged(f"{self.config.algorithm.name} diverged at round {t + 1}: {what}.")

    # -- checkpointing ------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The run's state: the runner's counts and every namespace of the RunState under
        its name (``algorithm``, and ``gossip``, ``systems``, ``privacy`` where the run has
        them); per-client rows with all M rows, however many processes hold them (so any
        number of processes can resume it), on the process that writes the run (the others'
        rows are empty: a collective that only gives them)."""
        return {"round": self.round, "rows": list(self.rows), "bytes_total": self.bytes_total,
                "train_seconds": self.train_seconds,
                **self.run_state.checkpoint(self.exp.fed)}

    def load_state_dict(self, state: dict) -> None:
        self.round = int(state["round"])
        self.rows = list(state["rows"])
        self.bytes_total = int(state["bytes_total"])
        self.train_seconds = float(state["train_seconds"])
        self.run_state.load(state, self.exp.fed)


def _nothing(*_args) -> None:
    pass


def has_nonfinite(x: torch.Tensor) -> bool:
    """Whether ``x`` holds NaN or inf, from its sum: NaN and inf make the sum non-finite, and
    one reduction costs about 1/50 of an elementwise ``isfinite`` over ``[M, P]`` (which cost
    more than a whole round at 2 % participation). Finite entries can make the sum overflow
    only when they average above ~1e38 / (M P): diverged as well."""
    return not bool(torch.isfinite(x.sum()))


__all__ = ["Callback", "Result", "Runner", "build_data", "build_experiment",
           "build_model_for", "consensus_distance", "has_nonfinite"]


def _callbacks(callbacks: Any) -> list:
    """``callbacks`` as a list of functions ``(runner, t, row)`` (None: none); one sentence
    else, before the first round (a wrong one failed after it)."""
    if callbacks is None:
        return []
    if isinstance(callbacks, (str, bytes, dict)) or not hasattr(callbacks, "__iter__"):
        raise GossipflError(f"callbacks: must be a list of functions (runner, t, row), got "
                            f"{callbacks!r:.80}.")
    listed = list(callbacks)
    for callback in listed:
        if not callable(callback):
            raise GossipflError(f"callbacks: each must be a function (runner, t, row), got "
                                f"{callback!r:.80}.")
    return listed

