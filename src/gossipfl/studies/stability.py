"""Global-update stability on neighbouring datasets, and the generalization gap over rounds.

The FedSAGD paper (*Federated Learning with Stable and Accelerated Client Gradient Descent*,
anonymous ICLR submission) measures how far two trainings drift apart when their data differ
in one client: ‖x_t − x′_t‖ against rounds t for every algorithm (its Fig. 2; Table 1 bounds
it), and the empirical generalization gap over rounds (its Fig. 3). Here, for one config or
for each grid point and seed of a study file (expanded and labelled as ``gossipfl sweep``
does, :func:`gossipfl.studies.sweep.expand`):

- two runs are built from the same config (same seed, hence the same initial model, the same
  partition, the same sampled clients every round and the same per-client minibatch
  streams); the second run's training data is the **neighbouring dataset**;
- both advance in lockstep, one round at a time (:meth:`gossipfl.core.runner.Runner.step`), and
  after every ``every``-th round (and the last) the distance ``‖x_t − x′_t‖₂`` between the
  two runs' global models is recorded, in float64: the server model of a centralized
  algorithm, the average of the client models of a decentralized one (what
  ``Algorithm.global_model`` returns and the runner evaluates as the "average model");
- at the same rounds the first run's global model is evaluated on the test set and on a
  fixed random subset of ``eval.generalization`` training samples (10 000 when unset; all of
  them when there are fewer), giving ``gap_loss`` = train loss − test loss and ``gap_acc`` =
  train accuracy − test accuracy (:func:`gossipfl.analysis.columns.generalization_gap`;
  usually negative). The paper plots the magnitudes |train − test|; the gap figure shows
  ``|gap_loss|``, the CSV keeps the sign.

**Neighbouring datasets** (``perturb``). One client c — ``client``, by default the
lowest-numbered client that trains in round 1: the first of round 1's sampled clients for
a centralized algorithm with partial participation, else client 0 — has its data replaced
by test samples, which stand for fresh draws that are not in the training set:

- ``client`` (the paper's definition: neighbouring client sets differ in one client): every
  training sample of client c is replaced. The j-th sample of class k of client c (in index
  order) becomes the (j mod N_k)-th test sample of class k (N_k test samples of class k):
  the client keeps its size and its label counts, so the replacement is a new client with
  the same label mix. For float (regression) targets the j-th sample becomes the
  (j mod N_test)-th test sample.
- ``sample``: only client c's first training sample (its lowest train index) is replaced,
  by the first test sample of the same class (the first test sample for float targets).
- ``none``: both runs use the same data (a control: the distance is 0 every round).

The partition, the clients' sample sizes and their index sets are unchanged, so nothing but
the data differs between the two runs.

Outputs in the output folder, each written atomically: ``stability.csv`` (one row per label,
seed and recorded round), ``stability.md`` (the final values), ``stability_distance.png``
(distance vs round, log y, one line per label: mean ± std over seeds) and
``generalization_gap.png`` (|train loss − test loss| vs round).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from gossipfl.assembly.loading import load_config
from gossipfl.config import Config, read_yaml
from gossipfl.errors import Diverged, GossipflError, unknown_choice
from gossipfl.io import atomic_write_text, check_writable, user_path
from gossipfl.output.progress import made_callback
from gossipfl.validation import check_callable, check_flags, check_path

PERTURBATIONS = ("client", "sample", "none")
DEFAULT_GAP_SAMPLES = 10_000
CSV_FILE = "stability.csv"
TABLE_FILE = "stability.md"
DISTANCE_FIGURE = "stability_distance.png"
GAP_FIGURE = "generalization_gap.png"
COLUMNS = ("label", "seed", "algorithm", "perturb", "client", "round", "distance", "test_acc",
           "test_loss", "train_acc", "train_eval_loss", "gap_loss", "gap_acc")


# --------------------------------------------------------------------------------------------
# The neighbouring dataset
# --------------------------------------------------------------------------------------------
def stand_ins(labels: np.ndarray, test_labels: np.ndarray, regression: bool,
              client: int) -> np.ndarray:
    """The test indices that replace training samples with ``labels`` (in index order): the
    j-th sample of class k takes the (j mod N_k)-th test sample of class k (for float
    targets, one class: the j-th takes test sample j mod N_test)."""
    if regression:
        labels, test_labels = np.zeros(len(labels)), np.zeros(len(test_labels))
    out = np.empty(len(labels), dtype=np.int64)
    for k in np.unique(labels):
        where = np.flatnonzero(labels == k)
        pool = np.flatnonzero(test_labels == k)
        if not len(pool):
            what = "no samples" if regression else f"no sample of class {k}"
            raise GossipflError(f"--perturb: the test set has {what}, which client {client} "
                                f"trains on, so no test sample can stand in for it.")
        out[where] = pool[np.arange(len(where)) % len(pool)]
    return out


@dataclass(frozen=True)
class Neighbour:
    """The perturbation of :mod:`gossipfl.studies.stability`'s docstring, as a
    ``(dataset, parts) -> dataset`` hook of :class:`gossipfl.core.runner.Runner`."""

    perturb: str
    client: int

    def targets(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        """The train indices that are replaced."""
        own = np.asarray(parts[self.client], dtype=np.int64)
        return {"client": own, "sample": own[:1], "none": own[:0]}[self.perturb]

    def __call__(self, dataset: Any, parts: Sequence[np.ndarray]) -> Any:
        if self.perturb == "none":
            return dataset
        targets = self.targets(parts)
        train_y, test_y = dataset.train_y, dataset.test_y
        source = stand_ins(train_y[targets].cpu().numpy(), test_y.cpu().numpy(),
                           train_y.is_floating_point(), self.client)
        train_x, train_y = dataset.train_x.clone(), train_y.clone()
        train_x[targets] = dataset.test_x[source].to(train_x.dtype)
        train_y[targets] = test_y[source].to(train_y.dtype)
        return replace(dataset, train_x=train_x, train_y=train_y)


def first_client(runner: Any) -> int:
    """The lowest-numbered client that trains in round 1: the first of round 1's sampled
    clients for a centralized algorithm with partial participation, else client 0."""
    algorithm = runner.exp.algorithm
    fraction = getattr(algorithm.params, "participation", None)
    if algorithm.centralized and fraction is not None:
        return int(runner.exp.fed.sample(0, fraction)[0])
    return 0


# --------------------------------------------------------------------------------------------
# One pair of runs
# --------------------------------------------------------------------------------------------
@dataclass
class PairResult:
    """The record of one pair of runs: ``rows`` (the :data:`COLUMNS`), ``status``
    (``finished`` or ``diverged``), ``error`` (why it stopped early)."""

    label: str
    seed: int
    algorithm: str
    client: int
    rows: list[dict] = field(default_factory=list)
    status: str = "finished"
    error: str | None = None


def check_request(perturb: str, client: int | None = None, every: int | None = None) -> None:
    """One sentence for an unknown ``perturb``, a negative ``client`` or an ``every`` < 1."""
    if perturb not in PERTURBATIONS:
        raise unknown_choice("--perturb", perturb, PERTURBATIONS)
    for key, value, low in (("--client", client, 0), ("--every", every, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < low):
            raise GossipflError(f"{key}: must be an integer >= {low}, got {value!r}.")


def check_config(config: Config, client: int | None, where: str = "") -> None:
    """What refuses a config before its data are loaded: the distributed backend (both runs
    live in one process), a device this machine lacks and a ``client`` out of range."""
    from gossipfl.assembly.compat import stability_refusal
    from gossipfl.core.runner import resolve_device

    resolve_device(config.device)
    refusal = stability_refusal(config, where)
    if refusal:
        raise GossipflError(refusal)
    m = config.data.clients
    if client is not None and not client < m:
        raise GossipflError(f"--client: must be in 0..{m - 1} for {m} clients, "
                            f"got {client}{where}.")


def run_pair(config: Config | dict | str | Path, *, perturb: str = "client",
             client: int | None = None, every: int | None = None, label: str | None = None,
             progress: Callable[[Any, str], Any] | None = None) -> PairResult:
    """Two runs of ``config`` on neighbouring datasets (``perturb``, ``client``: see the
    module docstring), advanced in lockstep; the distance and the gap of the first every
    ``every`` rounds (default ``eval.every``) and at the last round."""
    from gossipfl.core.runner import Runner

    check_request(perturb, client, every)
    config = load_config(config)
    check_config(config, client)
    every = every or config.eval.every
    label = label or config.name or config.algorithm.name
    first = Runner(config)
    chosen = first_client(first) if client is None else client
    second = Runner(config, perturb=Neighbour(perturb, chosen))
    result = PairResult(label, config.seed, config.algorithm.name, chosen)
    rounds = config.train.rounds
    with made_callback(progress, first, label) as callbacks:
        first.callbacks.extend(callbacks)
        for t in range(rounds):
            try:
                first.step(t, evaluate=False)
                second.step(t, evaluate=False)
            except Diverged as exc:
                result.status, result.error = "diverged", str(exc)
                break
            if (t + 1) % every == 0 or t + 1 == rounds:
                result.rows.append(_record(first, second, result, perturb, t + 1))
    return result


def _record(first: Any, second: Any, pair: PairResult, perturb: str, round_: int) -> dict:
    """One row of :data:`COLUMNS` after ``round_`` rounds."""
    x = first.exp.algorithm.global_model(first.state).double()
    y = second.exp.algorithm.global_model(second.state).double()
    row = {"label": pair.label, "seed": pair.seed, "algorithm": pair.algorithm,
           "perturb": perturb, "client": pair.client, "round": round_,
           "distance": float((x - y).norm())}
    data = first.exp.dataset
    if len(data.test_y):
        evaluator, state = first.evaluator, first.state
        test_acc, test_loss = evaluator.global_fit(state, data.test_x, data.test_y)
        size = first.config.eval.generalization or DEFAULT_GAP_SAMPLES
        row.update(test_acc=test_acc, test_loss=test_loss,
                   **evaluator.generalization(state, size, test_acc, test_loss))
    return row


# --------------------------------------------------------------------------------------------
# A config or a study
# --------------------------------------------------------------------------------------------
@dataclass
class StabilityOutcome:
    path: Path
    pairs: list[PairResult]
    files: list[Path] = field(default_factory=list)
    table: str = ""  # stability.md: final distance and gaps per label, mean ± std over seeds

    @property
    def frame(self) -> Any:
        """stability.csv as a pandas DataFrame (one row per label, seed and recorded
        round)."""
        from gossipfl.studies.frames import pandas

        pd = pandas("gossipfl.stability(...).frame")
        rows = [row for pair in self.pairs for row in pair.rows]
        return pd.DataFrame.from_records(rows, columns=list(COLUMNS))


def load_pairs(source: Config | dict | str | Path, overrides: Sequence[str] = ()
               ) -> tuple[list[tuple[str, Config]], Path]:
    """``(label, config)`` of every run the source asks for — one config, or every grid
    point and seed of a study file (``base``/``grid`` at the top) — and the default output
    folder: ``<output.dir>/<name>-stability`` (for a study: next to its sweep folder)."""
    from gossipfl.results.rundir import slug
    from gossipfl.studies.sweep import expand, load_study, study_path

    raw = read_yaml(Path(source)) if isinstance(source, (str, Path)) else source
    if isinstance(raw, dict) and ("grid" in raw or "base" in raw):
        study = load_study(source, overrides)
        variants = expand(study)
        path = study_path(study)
        return ([(v.label, v.config) for v in variants],
                path.with_name(f"{path.name}-stability"))
    config = load_config(source, overrides)
    label = config.name or config.algorithm.name
    return [(label, config)], user_path(config.output.dir, "output.dir") / \
        f"{slug(label)}-stability"


def stability(source: Config | dict | str | Path, *, overrides: Sequence[str] = (),
              perturb: str = "client", client: int | None = None, every: int | None = None,
              out: str | Path | None = None, device: str | None = None,
              progress: Callable[[Any, str], Any] | None = None,
              log: Callable[[str], None] | None = None,
              warn: Callable[[str], None] | None = None,
              quiet: bool = False) -> StabilityOutcome:
    """Run :func:`run_pair` for every run of ``source`` (a config or a study file), then
    write the CSV, the table and the two figures into ``out``. Every input is checked
    before the first run starts. ``log`` gets a line per run (default: nothing), ``warn``
    each warning (default: ``warnings.warn``); a progress bar over each pair's rounds on
    stderr (``progress``: your own, as for :func:`gossipfl.sweep`) unless ``quiet``."""
    from gossipfl.output.progress import round_bars
    from gossipfl.results.rundir import primary_metric
    from gossipfl.studies.sweep import _silent, _warning

    if source is None:  # the signature's own: a config or a study file
        raise GossipflError("source: must be a config (a dict, a YAML path or a Config) or "
                            "a study file, got None.")
    if out is not None:
        check_path(out, "out")
    for key, function in (("progress", progress), ("log", log), ("warn", warn)):
        check_callable(function, key)
    check_flags(quiet=quiet)
    progress = progress if progress is not None or quiet else round_bars(quiet, primary_metric)
    log = log or _silent
    warn = warn or _warning
    check_request(perturb, client, every)
    pairs, default_out = load_pairs(source, overrides)
    if device is not None:
        pairs = [(label, load_config(c, [f"device={device}"])) for label, c in pairs]
    for label, config in pairs:
        check_config(config, client, f" (in '{label}')" if len(pairs) > 1 else "")
    path = user_path(out, "--out") if out is not None else default_out
    check_writable(path, "--out")
    done = []
    for i, (label, config) in enumerate(pairs, 1):
        log(f"[{i}/{len(pairs)}] {label}, seed {config.seed}")
        pair = run_pair(config, perturb=perturb, client=client, every=every, label=label,
                        progress=progress)
        if pair.status == "diverged":
            warn(f"{label} (seed {pair.seed}) stopped early: {pair.error}")
        done.append(pair)
    files = write_outputs(done, path, perturb)
    return StabilityOutcome(path, done, files, format_table(done))


# --------------------------------------------------------------------------------------------
# Outputs
# --------------------------------------------------------------------------------------------
def write_outputs(pairs: Sequence[PairResult], path: Path, perturb: str) -> list[Path]:
    """``stability.csv``, ``stability.md`` and the two figures in ``path``."""
    from gossipfl.output.plots import line_figure

    rows = [row for pair in pairs for row in pair.rows]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path / CSV_FILE, buffer.getvalue())
    atomic_write_text(path / TABLE_FILE, format_table(pairs) + "\n")
    files = [path / CSV_FILE, path / TABLE_FILE]
    distance = curves(pairs, "distance")
    if distance:
        positive = [positive_points(c) for c in distance]
        log_y = all(len(c.x) for c in positive)
        line_figure(positive if log_y else distance, path / DISTANCE_FIGURE, xlabel="round",
                    ylabel="‖x_t − x′_t‖₂ of the global models", log_y=log_y,
                    title=f"global-update stability (perturb: {perturb})")
        files.append(path / DISTANCE_FIGURE)
    gap = curves(pairs, "gap_loss", absolute=True)
    if gap:
        line_figure(gap, path / GAP_FIGURE, xlabel="round", ylabel="|train loss − test loss|",
                    title="generalization gap of the global model")
        files.append(path / GAP_FIGURE)
    return files


def curves(pairs: Sequence[PairResult], key: str, absolute: bool = False) -> list:
    """One :class:`gossipfl.output.plots.Curve` per label: ``key`` over the rounds every seed
    recorded, mean ± std over the seeds."""
    from gossipfl.output.plots import Curve
    from gossipfl.results.reporting import mean_over_rounds

    out = []
    for label in dict.fromkeys(p.label for p in pairs):
        series = [[{"round": r["round"], key: abs(r[key]) if absolute else r[key]}
                   for r in p.rows if _finite(r.get(key))]
                  for p in pairs if p.label == label]
        stats = mean_over_rounds(series, "round", key)
        if stats is None:
            continue
        rounds, mean, std = stats
        style = "-" if len(out) < 10 else "--"  # matplotlib's cycle has 10 colours
        out.append(Curve(label, rounds, mean, std if len(series) > 1 else None, style))
    return out


def positive_points(curve: Any) -> Any:
    """``curve`` without its points at or below 0 (for a log axis)."""
    keep = curve.mean > 0
    return replace(curve, x=curve.x[keep], mean=curve.mean[keep],
                   std=None if curve.std is None else curve.std[keep])


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def format_table(pairs: Sequence[PairResult]) -> str:
    """Per label the final distance and gaps (mean ± std over seeds), as Markdown."""
    head = ("| label | seeds | client | rounds | final distance | final gap_loss (train − test) "
            "| final gap_acc (%) | final test_acc (%) |")
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for label in dict.fromkeys(p.label for p in pairs):
        group = [p for p in pairs if p.label == label]
        last = [p.rows[-1] for p in group if p.rows]
        clients = ", ".join(str(c) for c in dict.fromkeys(p.client for p in group))
        rounds = ", ".join(str(r) for r in dict.fromkeys(row["round"] for row in last)) or "—"
        if any(p.status != "finished" for p in group):
            rounds += " (diverged)"
        cells = [_stat([row.get("distance") for row in last], "{:.4g}"),
                 _stat([row.get("gap_loss") for row in last], "{:+.4f}"),
                 _stat([row.get("gap_acc") for row in last], "{:+.2f}", 100),
                 _stat([row.get("test_acc") for row in last], "{:.2f}", 100)]
        lines.append(f"| {label} | {len(group)} | {clients} | {rounds} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def _stat(values: list, fmt: str, scale: float = 1.0) -> str:
    numbers = [scale * v for v in values if _finite(v)]
    if not numbers:
        return "—"
    if len(numbers) == 1:
        return fmt.format(numbers[0])
    return f"{fmt.format(np.mean(numbers))} ± {fmt.format(np.std(numbers)).lstrip('+')}"
