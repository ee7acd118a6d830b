"""Studies: a grid of runs (algorithms × hyperparameters × seeds), then a comparison table.

A study file (YAML)::

    name: baselines            # study folder name (default: the file's stem)
    out: runs                  # parent folder of the study folder (default: base output.dir)
    base: {...}                # a full config, or the path of a config YAML (relative to
                               # the study file); shared by every run
    grid:                      # each key a dotted config path, each value a list
      algorithm:               # `algorithm` entries replace the whole algorithm section
        - {name: dfedavg}
        - {name: dfedavgm, momentum: 0.9}
      train.lr: [0.1, 0.05]    # other entries layered over the base (loading.layer)
    seeds: [0, 1, 2]           # default: [base seed]
    targets: [0.6, 0.7]        # accuracies for the rounds-to-target columns
    metric: test_acc           # default: test_acc, else personalized_acc, else local_acc_mean
    analysis: {top_k: 1, trace: true}   # optional: `gossipfl analyze` each finished run;
                               # the table gains the flatness columns (top eigenvalue, trace)

The grid may instead be a list of points, each a mapping of keys to one value (``- {algorithm:
{name: fedavg}}`` beside ``- {algorithm: {name: dfedavg}, topology.name: ring}``): exactly
those points are run, in that order, when a product would repeat runs or pair values that do
not go together.

Runs are the Cartesian product of the grid values (in the file's order) times the seeds. Each
runs in its own run directory ``<out>/<name>/<label>-seed<s>/``, where the label names the
grid values that vary. Every grid point is validated (config, model options, the topology for
its client count, algorithm parameters) before the first run starts. Running a study again
skips finished (and diverged) runs, retries failed and interrupted ones (from their checkpoint
when they have one), and refuses a run directory whose config no longer matches. At the end
``table.md``, ``table.csv`` and the figures are written into the study folder; the outcome
lists the runs that failed, with why. ``jobs`` > 1 runs that many at a time on worker
processes (:mod:`gossipfl.studies.jobs`), into the same directories; ``pack`` computes runs that differ
in seed and learning rate as one stack of clients (:mod:`gossipfl.studies.packing`), into the same directories.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gossipfl import plugins
from gossipfl.assembly.comparable import comparable_config
from gossipfl.assembly.compat import preflight
from gossipfl.assembly.loading import (
    apply_override,
    layer,
    load_config,
    plain,
    split_override,
)
from gossipfl.config import Config, Replace, read_yaml
from gossipfl.errors import GossipflError, did_you_mean, unknown_choice
from gossipfl.io import FolderInUse, WriteError, atomic_write_text, check_writable, user_path
from gossipfl.output.progress import made_callback
from gossipfl.results.inputs import compute_path, with_absolute_paths
from gossipfl.results.lifecycle import (
    PreparedRun,
    RunOutcome,
    execute,
    prepare_fresh,
    prepare_resume,
)
from gossipfl.results.reporting import (  # noqa: F401 (study_settings: gossipfl.sweep's too)
    STUDY_FILE,
    Report,
    config_labels,
    flatten,
    load_run,
    read_metrics_checked,
    report,
    study_settings,
)
from gossipfl.results.rundir import (
    ACCURACY_METRICS,
    RunDirectory,
    is_vacant,
    slug,
)
from gossipfl.validation import check_callable, check_path

STUDY_KEYS = ("name", "out", "base", "grid", "seeds", "targets", "metric", "analysis")
DONE = ("finished", "diverged")  # statuses a study does not run again


@dataclass
class Study:
    """A parsed study file."""

    name: str
    base: dict
    grid: dict[str, list] | list[dict]
    seeds: list[int]
    targets: list[float] | None = None
    metric: str | None = None
    out: str | None = None
    analysis: dict | None = None  # options of gossipfl.analysis.analyze for every run

    def to_dict(self) -> dict:
        return {"name": self.name, "out": self.out, "base": self.base, "grid": self.grid,
                "seeds": self.seeds, "targets": self.targets, "metric": self.metric,
                "analysis": self.analysis}


@dataclass
class Variant:
    """One run of a study: a grid point and a seed."""

    label: str
    seed: int
    config: Config
    dirname: str


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------
def load_study(source: str | Path | dict, overrides: Sequence[str] = ()) -> Study:
    """Parse a study from a YAML path or a dict; ``overrides`` (``key=value``) go to base,
    after the grid's entries they set (:func:`_settle_overrides`): ``--set`` comes last."""
    where = None
    if isinstance(source, (str, Path)):
        where = Path(source)
        raw = read_yaml(where)
        default_name = where.stem
        if not raw:  # an empty file (or null) would run the quickstart's study
            raise GossipflError(f"study: '{where}' is empty; a study has "
                                f"{', '.join(STUDY_KEYS)}.")
    elif isinstance(source, dict):
        raw, default_name = dict(source), "study"
    else:
        raise GossipflError(f"study: expected a YAML path or a dict, got "
                            f"{type(source).__name__}.")
    for key in raw:
        if key not in STUDY_KEYS:
            raise GossipflError(f"study.{key}: unknown key{did_you_mean(str(key), STUDY_KEYS)};"
                                f" a study has {', '.join(STUDY_KEYS)}.")
    base = _base(raw.get("base"), where)
    grid = _settle_overrides(base, _grid(raw.get("grid")), overrides)
    for item in overrides:
        apply_override(base, item)
    seeds = _int_list("study.seeds", raw.get("seeds", [base.get("seed", 0)]))
    targets = raw.get("targets")
    if targets is not None:
        targets = _target_list(targets)
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise GossipflError(f"study.name: must be a non-empty string, got {name!r}.")
    return Study(name=name, base=base, grid=grid, seeds=seeds,
                 targets=targets, metric=_metric(raw.get("metric")),
                 out=_optional_str("study.out", raw.get("out")),
                 analysis=_analysis(raw.get("analysis")))


def _base(value: Any, where: Path | None) -> dict:
    """The base config; plugin files named in it are made absolute against the folder of
    the file that names them."""
    if value is None:
        return {}
    folder = None if where is None else where.parent
    if isinstance(value, str):
        path = Path(value)
        if not path.is_absolute() and where is not None:
            path = where.parent / path
        base, folder = read_yaml(path), path.parent
    elif isinstance(value, dict):
        base = yaml.safe_load(yaml.safe_dump(value))  # a deep copy
    else:
        raise GossipflError(f"study.base: must be a config mapping or the path of a config "
                            f"file, got {value!r}.")
    base = plain(base)  # the first level: !replace and !default mean nothing here
    if "plugins" in base:
        base["plugins"] = plugins.resolve(base["plugins"], folder, key="study.base.plugins")
    return base


def _grid(value: Any) -> dict[str, list] | list[dict]:
    """The grid: a mapping of keys to lists (their product is run) or a list of points (each
    a mapping of keys to one value: exactly those are run)."""
    if value is None:
        return {}
    if isinstance(value, list):
        for n, point in enumerate(value):
            if not isinstance(point, dict) or not point:
                raise GossipflError(f"study.grid[{n}]: a point must map config keys to "
                                    f"values, got {point!r}.")
        if not value:
            raise GossipflError("study.grid: an empty list of points; give at least one.")
        return [{str(k): v for k, v in point.items()} for point in value]
    if not isinstance(value, dict):
        raise GossipflError(f"study.grid: must map config keys to lists of values (their "
                            f"product is run) or be a list of points, got {value!r}.")
    for key, values in value.items():
        if not isinstance(values, list) or not values:
            raise GossipflError(f"study.grid.{key}: must be a non-empty list of values, "
                                f"got {values!r}.")
    return {str(k): list(v) for k, v in value.items()}


#: a list grid's point that does not set a key
_UNSET = object()


def _settle_overrides(base: dict, grid: dict[str, list] | list[dict],
                      overrides: Sequence[str]) -> dict[str, list] | list[dict]:
    """``--set`` comes last, after a grid point (docs/guide/configuration.md), but goes to
    the base: a grid entry it sets is moved into the base first when the grid gives it one
    value (the same at every point: e.g. ``train.rounds: [10]``), so that the ``--set`` is
    layered over it; one the grid gives several values is refused (the ``--set`` would make
    the points the same). Returns the grid without the entries moved."""
    settings = grid if isinstance(grid, dict) else {
        k: [point.get(k, _UNSET) for point in grid] for k in {k for p in grid for k in p}}
    moved: list[str] = []
    for item in overrides:
        key, value = split_override(item)
        mine = _leaves(key, value)
        for entry, values in settings.items():
            theirs = {entry} if entry == "algorithm" else \
                {leaf for v in values if v is not _UNSET for leaf in _leaves(entry, v)}
            if not any(a == b or a.startswith(b + ".") or b.startswith(a + ".")
                       for a in mine for b in theirs):
                continue
            if _UNSET in values or len({repr(v) for v in values}) > 1:
                raise GossipflError(
                    f"--set {key}: the study's grid gives {entry} several values, "
                    f"which a --set cannot come after at every point; drop the --set or "
                    f"change the grid.")
            moved.append(entry)
    for entry in dict.fromkeys(moved):
        set_key(base, entry, settings[entry][0])
    if isinstance(grid, dict):
        return {k: v for k, v in grid.items() if k not in moved}
    return [{k: v for k, v in point.items() if k not in moved} for point in grid]


def _leaves(key: str, value: Any) -> set[str]:
    """The keys a setting of ``key`` to ``value`` sets: a mapping's own keys, key by key (it
    merges), else ``key`` itself (``!replace`` and any other value replace it whole)."""
    if isinstance(value, dict) and not isinstance(value, Replace) and value:
        return {leaf for k, v in value.items() for leaf in _leaves(f"{key}.{k}", v)}
    return {key}


def _metric(value: Any) -> str | None:
    """``study.metric``: one of the accuracies a run records, checked before any run (the
    report checks that some run holds it)."""
    metric = _optional_str("study.metric", value)
    if metric is not None and metric not in ACCURACY_METRICS:
        raise unknown_choice("study.metric", metric, ACCURACY_METRICS)
    return metric


def _int_list(key: str, value: Any) -> list[int]:
    if not isinstance(value, list):
        value = [value]
    if not value or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise GossipflError(f"{key}: must be a non-empty list of integers, got {value!r}.")
    if len(set(value)) != len(value):
        raise GossipflError(f"{key}: lists a seed twice, got {value!r}.")
    return value


def _target_list(value: Any) -> list[float]:
    if not isinstance(value, list):
        value = [value]
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise GossipflError(f"study.targets: accuracies must be numbers in (0, 1], "
                                f"got {v!r}.")
    return [float(v) for v in value]


def _analysis(value: Any) -> dict | None:
    """The study's ``analysis`` options, every one checked now, before any run
    (``study.analysis.<key>``; :func:`gossipfl.analysis.options.check_study_analysis`)."""
    from gossipfl.analysis.options import check_study_analysis

    return check_study_analysis(value)


def analyze_run(path: Path, options: dict, log: Callable[[str], None],
                device: str | None = None) -> None:
    """The study's flatness analysis of one finished run, unless it was already done, on
    :func:`analysis_device` (without bars of its own: the line it logs says it is done)."""
    from gossipfl.analysis import analysis_columns, analyze

    if RunDirectory(path).status() != "finished" or analysis_columns(path):
        return
    analyze(path, hessian=True, device=analysis_device(path, device), quiet=True, **options)
    found = ", ".join(f"{key} {value:.4g}" for key, value in analysis_columns(path).items())
    log(f"  analyzed: {found}")


def analysis_device(path: Path, device: str | None) -> str:
    """Where a study analyzes a run: the sweep's ``--device``, else the device the run
    trained on (its config's ``device``) when this machine has it, else the CPU. A study
    trained on a GPU is analyzed there, not on the CPU beside it."""
    if device is not None:
        return device
    trained_on = str(RunDirectory(path).read_config_dict().get("device", "cpu"))
    if trained_on.startswith("cuda"):
        import torch

        return trained_on if torch.cuda.is_available() else "cpu"
    return trained_on


def _optional_str(key: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise GossipflError(f"{key}: must be a string, got {value!r}.")
    return value


# --------------------------------------------------------------------------------------------
# Expanding the grid
# --------------------------------------------------------------------------------------------
def set_key(raw: dict, key: str, value: Any) -> None:
    """Apply one grid entry to a raw config dict (see the module docstring)."""
    if key == "algorithm":  # a whole section: an algorithm's parameters are its own
        raw["algorithm"] = {"name": value} if isinstance(value, str) else plain(value)
        return
    layer(raw, key.split("."), value, where=f"study.grid.{key}")


def expand(study: Study) -> list[Variant]:
    """Every run of the study, each config validated (errors before anything runs)."""
    if isinstance(study.grid, list):
        points = [dict(point) for point in study.grid]
    else:
        points = [dict(zip(study.grid, values))
                  for values in itertools.product(*study.grid.values())] or [{}]
    configs = [_point_config(study, point) for point in points]
    labels = config_labels([flatten(comparable_config(c)) for c in configs])
    variants = []
    for label, name, config in zip(labels, distinct_slugs(labels), configs):
        for seed in study.seeds:
            run = load_config(config, [f"seed={seed}", f"name={name}"])
            try:
                check_trust(run)
            except GossipflError as exc:
                raise GossipflError(f"{str(exc).rstrip('.')} (in the study's grid point "
                                    f"'{label}', seed {seed}).") from None
            variants.append(Variant(label, seed, run, f"{name}-seed{seed}"))
    return variants


def distinct_slugs(labels: Sequence[str]) -> list[str]:
    """Each label as a file name (:func:`slug`), kept apart where two labels make one
    (``root=/x/y`` and ``root=/x_y``): the later gets ``_2``, ``_3``, as its run's folder."""
    names: list[str] = []
    for label in labels:
        name, n = slug(label), 1
        while name in names:
            n += 1
            name = f"{slug(label)}_{n}"
        names.append(name)
    return names


def _point_config(study: Study, point: dict) -> Config:
    """The validated config of one grid point; an error names the point."""
    try:
        raw = yaml.safe_load(yaml.safe_dump(study.base))
        for key, value in point.items():
            set_key(raw, key, value)
        config = load_config(raw)
        check_buildable(config)
    except GossipflError as exc:
        raise GossipflError(f"{str(exc).rstrip('.')} (in the study's grid point "
                            f"'{point_label(point)}').") from None
    return config


def point_label(point: dict) -> str:
    """``key=value, ...`` of a grid point (``base`` when the grid is empty)."""
    parts = [f"{key}={_compact(value)}" for key, value in point.items()]
    return ", ".join(parts) or "base"


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_compact(v)}" for k, v in value.items()) + "}"
    return str(value)


def check_trust(config: Config) -> None:
    """Byzantine clients and the robust rule, as the run would draw them (its seed): the honest
    clients connected without the Byzantine ones, every receiver's degree enough for the
    rule's b, the algorithm able to gossip robustly — refused before any run of a study
    trains (without the data: the topology alone; :func:`gossipfl.assembly.compat.preflight`)."""
    if config.byzantine is None and config.topology.robust is None:
        return
    preflight(config)


def check_buildable(config: Config) -> None:
    """What can be checked without the data: whether the gossip order (schedule) is defined
    for the algorithm and its parameters, the compute-speeds file (one number per client),
    and the algorithm's topology for the client count (a graph that cannot be built, or is
    too large for memory, is refused here)."""
    from gossipfl.assembly.compat import declared_features, schedule_refusal
    from gossipfl.topology import build_topology

    f = declared_features(config)
    refusal = schedule_refusal(f)
    if refusal:
        raise GossipflError(refusal)
    speeds = compute_path(config)
    if speeds is not None and config.data.tensors is None:  # one number per client
        from gossipfl.systems.model import read_values

        read_values(speeds, config.data.clients)
    topo = config.topology
    if f.algorithm.centralized or topo.matrix is not None:
        return
    build_topology(topo.name, config.data.clients, mixing=topo.mixing, seed=config.seed,
                   **topo.parameters())


def check_analysis_fits(analysis: dict, variants: list[Variant]) -> None:
    """What the study's ``analysis`` section asks of every grid point, before any run: local
    models exist (not a centralized algorithm's) and ``top_k`` ≤ P (the model's parameters,
    counted on the meta device from the data's shapes; each dataset is loaded once)."""
    from gossipfl.algorithms import get_algorithm
    from gossipfl.assembly.experiment import build_data, count_parameters

    top_k, shapes = analysis.get("top_k"), {}
    for variant in variants:
        config, where = variant.config, f" (in the study's grid point '{variant.label}')"
        if analysis.get("models") == "local" and get_algorithm(config.algorithm.name).centralized:
            raise GossipflError(f"study.analysis.models: '{config.algorithm.name}' is "
                                f"centralized and keeps only the server model; use average"
                                f"{where}.")
        if top_k is None or config.data.tensors is not None:
            continue
        key = yaml.safe_dump(comparable_config(config)["data"], sort_keys=True)
        if key not in shapes:
            shapes[key] = build_data(config)[0]
        P = count_parameters(config, shapes[key])
        if P is not None and top_k > P:
            raise GossipflError(f"study.analysis.top_k: must be at most P = {P} (the model's "
                                f"parameters), got {top_k}{where}.")


def study_path(study: Study, out: str | Path | None = None) -> Path:
    """``<out>/<name>``: ``out`` from the argument, the study, or the base output.dir."""
    key = "--out" if out else "study.out" if study.out else "output.dir"
    parent = out or study.out or study.base.get("output", {}).get("dir") or "runs"
    return user_path(parent, key) / slug(study.name)


def check_same_study(study: Study, path: Path) -> None:
    """The study folder ``path`` is this study's or a new one: names that differ only in
    what a file name cannot hold (``a/b`` and ``a b`` are both ``a_b``) would otherwise run
    into one folder, the second study's ``study.yaml`` replacing the first's."""
    try:
        recorded = read_yaml(path / STUDY_FILE)
    except (OSError, GossipflError):
        return  # none yet (or unreadable: the report says so)
    other = recorded.get("name") if isinstance(recorded, dict) else None
    if isinstance(other, str) and other != study.name:
        raise GossipflError(f"study.name: {study.name!r} is written to '{path}', which holds "
                            f"the study {other!r} (both names become "
                            f"'{path.name}' as a folder name); rename this study or give it "
                            f"another out.")


def check_parent(out: Path) -> None:
    """``--out`` is the folder the study's folder goes in (as for ``gossipfl run``): a study
    folder or a run directory given as ``--out`` is refused, saying what to write."""
    if (out / STUDY_FILE).is_file() or RunDirectory(out).is_run():
        what = "a run directory" if RunDirectory(out).is_run() else "a study folder"
        raise GossipflError(f"--out: '{out}' is {what}, but --out is the folder a study's "
                            f"folder goes in (as for gossipfl run); give --out "
                            f"'{out.parent}' to write <out>/<study name>.")


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------
Progress = Callable[[PreparedRun, str], Any]  # returns a runner callback (or None)


@dataclass
class StudyOutcome:
    path: Path
    variants: list[Variant]
    outcomes: dict[str, str] = field(default_factory=dict)  # dirname → ran | skipped | ...
    failed: dict[str, str] = field(default_factory=dict)  # dirname → why
    report: Report | None = None
    report_error: WriteError | None = None  # the table or a figure could not be written


def _silent(_message: str) -> None:
    pass


def _warning(message: str) -> None:
    import warnings

    warnings.warn(message, stacklevel=3)


def plan(variant: Variant, path: Path) -> str:
    """``fresh``, ``resume`` or ``skip`` for the run directory ``path`` (a failed or
    interrupted run is resumed: from its checkpoint, else from round 0)."""
    run_dir = RunDirectory(path)
    if is_vacant(path):
        return "fresh"
    if not run_dir.is_run():
        raise GossipflError(f"study: '{path}' exists but is not a run directory; remove it.")
    wanted = with_absolute_paths(variant.config)  # as its run directory records it
    if comparable_config(run_dir.read_config()) != comparable_config(wanted):
        raise GossipflError(f"study: run directory '{path}' holds a different config than "
                            f"the study asks for; remove it or rename the study.")
    status = run_dir.status()
    if status == "finished":  # its rows are the study's: a damaged file is said, not skipped
        problem = read_metrics_checked(run_dir)[1]
        if problem is not None:
            raise GossipflError(f"study: run directory '{path}' is finished, but {problem}, "
                                f"so the study's table would leave it out; restore the file "
                                f"or remove the folder to run it again.")
    return "skip" if status in DONE else "resume"


def run_variant(variant: Variant, path: Path, device: str | None, progress: Progress | None,
                log: Callable[[str], None], warn: Callable[[str], None],
                allow_changed_inputs: bool = False) -> tuple[str, RunOutcome | None]:
    """Run (or skip, or resume) one variant; returns what happened and the outcome."""
    action = plan(variant, path)
    if action == "skip":
        return "skipped", None
    prepared = _prepare(variant, path, device, action, allow_changed_inputs)
    for note in prepared.notes:
        log(f"  {note}")
    try:
        with made_callback(progress, prepared, variant.dirname) as callbacks:
            outcome = execute(prepared, callbacks, warn=warn)
    finally:
        prepared.abandon()  # when making the callback failed
    return ("resumed" if action == "resume" else "ran"), outcome


def _prepare(variant: Variant, path: Path, device: str | None, action: str,
             allow_changed_inputs: bool = False) -> PreparedRun:
    if action == "resume":
        return prepare_resume(path, device, allow_changed_inputs)
    config = variant.config if device is None else load_config(
        variant.config, [f"device={device}"])
    return prepare_fresh(config, path, key="study")


def run_study(study: Study, *, out: str | Path | None = None, device: str | None = None,
              progress: Progress | None = None, log: Callable[[str], None] | None = None,
              warn: Callable[[str], None] | None = None,
              allow_changed_inputs: bool = False, jobs: int = 1,
              only: Sequence[str] = (), pack: bool = False, quiet: bool = True) -> StudyOutcome:
    """Run every variant not yet done, then write the table and figures. ``log`` gets a
    line per run (default: nothing), ``warn`` each warning (default: ``warnings.warn``).
    ``jobs`` > 1: the runs on that many worker processes (:mod:`gossipfl.studies.jobs`); ``only``:
    the runs whose directory name matches one of these ``fnmatch`` patterns (the table
    still shows every run of the study that is there); ``pack``: runs that differ in seed
    and learning rate computed as one stack, each into its own run directory (:mod:`gossipfl.studies.packing`;
    not with ``jobs`` > 1); ``quiet`` False: with ``jobs`` > 1, a bar over the runs on stderr
    (:class:`gossipfl.output.progress.StudyBar`; ``progress`` makes each run's own bar otherwise)."""
    if out is not None:
        out = user_path(check_path(out, "out"), "--out")
    for key, function in (("progress", progress), ("log", log), ("warn", warn)):
        check_callable(function, key)
    log = log or _silent
    warn = warn or _warning
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise GossipflError(f"--jobs: must be a whole number of worker processes >= 1, got "
                            f"{jobs!r}.")
    if pack and jobs > 1:
        raise GossipflError("--pack: a packed study computes its runs together in one "
                            "process, so it takes no --jobs; use one of the two.")
    if device is not None:  # also when every run is done (nothing then builds a run)
        from gossipfl.analysis.options import check_device

        check_device(device)
    variants = expand(study)
    chosen = select(variants, only)
    if study.analysis is not None:
        check_analysis_fits(study.analysis, chosen)
    if out is not None:
        check_parent(out)
    path = study_path(study, out)
    check_writable(path, "study.out" if out is None else "--out")
    check_same_study(study, path)
    result = StudyOutcome(path, variants)
    if jobs > 1:
        return _run_on_workers(study, variants, chosen, path, result, device, log, warn,
                               allow_changed_inputs, jobs, quiet)
    if pack:
        atomic_write_text(path / STUDY_FILE, yaml.safe_dump(study.to_dict(), sort_keys=False))
        run_packed(study, chosen, path, result, device, progress, log, warn,
                   allow_changed_inputs)
        return _report(study, variants, path, result)
    for i, variant in enumerate(chosen, 1):
        log(f"[{i}/{len(chosen)}] {variant.label}, seed {variant.seed}")
        try:
            what, outcome = run_variant(variant, path / variant.dirname, device, progress, log,
                                        warn, allow_changed_inputs)
        except (WriteError, FolderInUse) as exc:  # this run cannot proceed; the others can
            what, outcome = "failed", None
            result.failed[variant.dirname] = str(exc)
        record_outcome(result, variant.dirname, what, outcome, log, warn)
        if study.analysis is not None:
            analyze_run(path / variant.dirname, study.analysis, log, device)
        if i == 1:
            atomic_write_text(path / STUDY_FILE, yaml.safe_dump(study.to_dict(), sort_keys=False))
    return _report(study, variants, path, result)


def record_outcome(result: StudyOutcome, dirname: str, what: str, outcome: RunOutcome | None,
                   log: Callable[[str], None], warn: Callable[[str], None]) -> None:
    """What happened to the run ``dirname`` (``what``: ran, resumed, skipped, failed), into
    ``result``, logged (a failure with why, a divergence as a warning)."""
    if outcome is not None and outcome.status == "failed":
        what = "failed"
        result.failed[dirname] = str(outcome.error)
    result.outcomes[dirname] = what
    if what == "skipped":
        log("  already done; skipped")
    elif what == "failed":
        log(f"  failed: {result.failed[dirname]}")
    elif outcome is not None and outcome.status == "diverged":
        warn(f"run {dirname} diverged: {outcome.error}")


def _report(study: Study, variants: list[Variant], path: Path,
            result: StudyOutcome) -> StudyOutcome:
    try:
        result.report = report_study(study, variants, path)
    except WriteError as exc:
        result.report_error = exc
    return result


def select(variants: list[Variant], only: Sequence[str]) -> list[Variant]:
    """The variants whose directory name matches one of the ``only`` patterns (all without
    patterns); one sentence when none does."""
    from fnmatch import fnmatch

    if isinstance(only, str):
        only = [only]
    if not only:
        return variants
    chosen = [v for v in variants if any(fnmatch(v.dirname, g) for g in only)]
    if not chosen:
        names = ", ".join(v.dirname for v in variants[:4]) + (", ..." if len(variants) > 4
                                                              else "")
        raise GossipflError(f"--only: no run of the study matches {', '.join(only)}; its runs "
                            f"are {names}.")
    return chosen


def run_task(task: Any, report: Callable[[int], None] | None = None
             ) -> tuple[str, str | None, str | None]:
    """One run of a ``--jobs`` sweep, in its worker process (:mod:`gossipfl.studies.jobs`): its config
    rebuilt from YAML, run (or resumed) into its directory, analyzed when the study says so;
    ``(what, status, error)``. ``report(n)``: called after each round, n the rounds done."""
    import torch

    torch.set_num_threads(task.threads)

    def log(message: str) -> None:
        if not task.quiet:
            print(f"[{task.dirname}] {message.strip()}", flush=True)

    def warn(message: str) -> None:
        print(f"[{task.dirname}] warning: {message.strip()}", flush=True)

    config = load_config(yaml.safe_load(task.config_yaml))
    variant = Variant(task.label, task.seed, config, task.dirname)
    progress = None if report is None else _reporter(report)
    what, outcome = run_variant(variant, Path(task.path), task.device, progress, log, warn,
                                task.allow_changed_inputs)
    status = None if outcome is None else outcome.status
    error = None if outcome is None or outcome.error is None else str(outcome.error)
    if status == "failed":
        what = "failed"
    if task.analysis is not None:
        analyze_run(Path(task.path), task.analysis, log, task.device)
    return what, status, error


class _Reporter:
    """A run's callback in a ``--jobs`` worker: the rounds done, to the sweep's process."""

    def __init__(self, report: Callable[[int], None]):
        self.report = report

    def __call__(self, runner: Any, t: int, row: dict | None) -> None:
        self.report(runner.round)

    def close(self) -> None:
        pass


def _reporter(report: Callable[[int], None]) -> Progress:
    return lambda _prepared, _name: _Reporter(report)


def _run_on_workers(study: Study, variants: list[Variant], chosen: list[Variant], path: Path,
                    result: StudyOutcome, device: str | None, log: Callable[[str], None],
                    warn: Callable[[str], None], allow_changed_inputs: bool,
                    jobs: int, quiet: bool = True) -> StudyOutcome:
    """:func:`run_study` with ``jobs`` worker processes (gossipfl.studies.jobs); unless ``quiet``, a
    bar over the runs (:class:`~gossipfl.output.progress.StudyBar`)."""
    import os

    from gossipfl.output.progress import StudyBar
    from gossipfl.studies.jobs import Task, portable, run_parallel

    threads = max(1, (os.cpu_count() or 1) // jobs)
    tasks = []
    for i, variant in enumerate(chosen):
        run_path = path / variant.dirname
        if plan(variant, run_path) == "skip":
            result.outcomes[variant.dirname] = "skipped"
            log(f"{variant.dirname}: already done; skipped")
            if study.analysis is not None:
                analyze_run(run_path, study.analysis, log, device)
            continue
        tasks.append(Task(i, variant.label, variant.seed, variant.dirname,
                          portable(variant.config), str(run_path), device,
                          allow_changed_inputs, study.analysis, threads,
                          quiet=log is _silent, rounds=variant.config.train.rounds))
    atomic_write_text(path / STUDY_FILE, yaml.safe_dump(study.to_dict(), sort_keys=False))
    finished = 0
    bar = StudyBar(len(tasks), disable=quiet)
    log = bar.log(log)

    def rounds(task: Any, n: int) -> None:
        if n == 0:
            bar.started(task.dirname, task.rounds)
        else:
            bar.round(task.dirname, n, task.rounds)

    def done(task: Any, what: str, status: str | None, error: str | None) -> None:
        nonlocal finished
        finished += 1
        bar.finished(task.dirname)
        result.outcomes[task.dirname] = what
        if what == "failed":
            result.failed[task.dirname] = error or "failed"
            log(f"[{finished}/{len(tasks)}] {task.dirname}: failed: {error}")
        elif what == "interrupted":
            log(f"[{finished}/{len(tasks)}] {task.dirname}: interrupted (checkpoint kept)")
        else:
            log(f"[{finished}/{len(tasks)}] {task.dirname}: {what}"
                + (f" ({status})" if status not in (None, "finished") else ""))
            if status == "diverged":
                warn(f"run {task.dirname} diverged: {error}")

    try:
        run_parallel(tasks, jobs, log, done, run_task, rounds)
    finally:
        bar.close()
    return _report(study, variants, path, result)


def report_study(study: Study, variants: list[Variant], path: Path,
                 statuses: Sequence[str] | None = None) -> Report | None:
    """The study's table and figures in ``path`` from its run directories there (only those
    whose status is one of ``statuses``, when given); None when there is none (a run that
    failed before recording anything leaves no directory)."""
    def reported(run_dir: RunDirectory) -> bool:
        return run_dir.is_run() and (statuses is None or run_dir.status() in statuses)

    runs = [load_run(path / v.dirname) for v in variants
            if reported(RunDirectory(path / v.dirname))]
    if not runs:
        return None
    return report(runs, path, metric=study.metric, targets=study.targets,
                  metric_key="study.metric")


# --------------------------------------------------------------------------------------------
# Packed studies (``gossipfl sweep STUDY --pack``): the runs not yet done, packed where they
# differ only in seed and learning rate (gossipfl.studies.packing.fits.pack_groups), the others one
# at a time as above, each into its own run directory
# --------------------------------------------------------------------------------------------
def run_packed(study: Any, chosen: list, path: Path, result: StudyOutcome,
               device: str | None, progress: Any, log: Callable[[str], None],
               warn: Callable[[str], None], allow_changed_inputs: bool) -> None:
    """Every run of ``chosen`` into ``result``: skipped when done, else packed with the runs
    it packs with, else alone (the sweep's output says why)."""
    from gossipfl.studies.packing.fits import pack_groups
    todo = []
    for variant in chosen:
        if plan(variant, path / variant.dirname) == "skip":
            log(f"{variant.dirname}: already done; skipped")
            result.outcomes[variant.dirname] = "skipped"
        else:
            todo.append(variant)
    for members, why in pack_groups(todo):
        if why is None:
            _run_group(members, path, result, device, progress, log, warn,
                       allow_changed_inputs)
        else:
            variant = members[0]
            log(f"{variant.dirname}: runs alone ({why})")
            try:
                what, outcome = run_variant(variant, path / variant.dirname, device, progress,
                                            log, warn, allow_changed_inputs)
            except (WriteError, FolderInUse) as exc:
                what, outcome = "failed", None
                result.failed[variant.dirname] = str(exc)
            record_outcome(result, variant.dirname, what, outcome, log, warn)
    if study.analysis is not None:
        for variant in todo:
            analyze_run(path / variant.dirname, study.analysis, log, device)


def _run_group(members: list, path: Path, result: StudyOutcome, device: str | None,
               progress: Any, log: Callable[[str], None], warn: Callable[[str], None],
               allow_changed_inputs: bool) -> None:
    """The runs of one pack group: each prepared (fresh or resumed), then those at the same
    round, on the same data, packed."""
    from gossipfl.studies.packing.execute import execute_packed
    prepared: list = []
    try:
        for variant in members:
            run_path = path / variant.dirname
            try:
                action = plan(variant, run_path)
                one = _prepare(variant, run_path, device, action, allow_changed_inputs)
            except (WriteError, FolderInUse) as exc:
                result.failed[variant.dirname] = str(exc)
                record_outcome(result, variant.dirname, "failed", None, log, warn)
                continue
            for note in one.notes:
                log(f"  {variant.dirname}: {note}")
            if prepared:  # one copy of the data in memory, not one per run
                share_data(prepared[0][2].runner, one.runner)
            prepared.append((variant, action, one))
        for batch in _batches(prepared, log):
            names = ", ".join(v.dirname for v, _, _ in batch)
            log(f"packed: {names} ({len(batch)} runs as one stack of "
                f"{len(batch) * batch[0][2].runner.exp.fed.num_clients} clients)")
            first = batch[0]
            with made_callback(progress, first[2],
                               f"{first[0].dirname} +{len(batch) - 1}") as callbacks:
                outcomes = execute_packed([p for _, _, p in batch], warn,
                                          callbacks=[callbacks if i == 0 else []
                                                     for i in range(len(batch))])
            for (variant, action, _), outcome in zip(batch, outcomes, strict=True):
                what = "resumed" if action == "resume" else "ran"
                record_outcome(result, variant.dirname, what, outcome, log, warn)
    finally:  # a run refused after others were prepared, or a failed progress
        for _, _, one in prepared:
            one.abandon()


def _batches(prepared: list, log: Callable[[str], None]) -> list[list]:
    """The prepared runs in packs: those at the same round whose data are the first's (one
    copy of the data is kept for them all); a run at another round, or on other data, in a
    pack of its own."""
    batches: list[list] = []
    for item in prepared:
        runner = item[2].runner
        for batch in batches:
            head = batch[0][2].runner
            if head.round == runner.round and share_data(head, runner):
                batch.append(item)
                break
        else:
            if batches:
                log(f"  {item[0].dirname}: packed apart (another round or other data)")
            batches.append([item])
    return batches


def share_data(first: Any, runner: Any) -> bool:
    """Whether ``runner``'s dataset holds the same tensors as ``first``'s; if so, ``runner``
    uses ``first``'s from now on (its own copy is freed)."""
    import torch

    mine, theirs = runner.exp.dataset, first.exp.dataset
    if mine is theirs:
        return True
    names = ("train_x", "train_y", "test_x", "test_y")
    try:
        same = all(torch.equal(getattr(mine, n), getattr(theirs, n)) for n in names)
    except (RuntimeError, AttributeError, GossipflError):
        return False
    if same:
        runner.exp.dataset = runner.trainer.dataset = runner.evaluator.dataset = theirs
    return same
