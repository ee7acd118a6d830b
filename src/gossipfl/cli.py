"""The ``gossipfl`` command.

    gossipfl run [CONFIG.yaml] [--set key.path=value ...] [--out DIR] [--name NAME]
                 [--device cpu|cuda] [--resume RUN_DIR [--allow-changed-inputs]] [--quiet]
                 [--dry-run] [--plugin FILE]
    gossipfl sweep STUDY.yaml [--set ...] [--out DIR] [--device ...] [--jobs N]
                   [--only GLOB ...] [--allow-changed-inputs] [--quiet]
    gossipfl report PATH... [--metric NAME] [--target ACC ...] [--out DIR]
    gossipfl stability CONFIG_OR_STUDY.yaml [--set ...] [--perturb client|sample|none]
                       [--client I] [--every N] [--out DIR] [--device ...] [--quiet]
    gossipfl list
    gossipfl topology NAME --clients M [--mixing RULE] [--k K] [--p P] [--s S] [--path FILE]
                      [--option KEY=VALUE ...] [--plugin FILE] [--draw PNG]
    gossipfl data DATASET --partition NAME --clients M [--alpha A] [--plot PNG]
    gossipfl fetch DATASET [--root DIR]
    gossipfl new algorithm|model|dataset NAME [--kind decentralized|centralized|personalized]
                 [--out DIR]

A user error prints one sentence on stderr and exits with status 2 (no traceback), and so
does a write that fails (disk full: the sentence says how to resume); an interrupted run
(Ctrl-C or SIGTERM) exits with 130 after saying how to resume it; a run that diverges (NaN/inf,
or a consensus distance above train.max_consensus) says so in one sentence and exits with 3;
any other floating-point failure exits with 1; a study in which some run failed exits with 1
after its table, one line per failed run.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gossipfl import __version__
from gossipfl.errors import GossipflError
from gossipfl.io import check_writable, check_writable_file, user_path

#: The experiment ``gossipfl run`` runs without a config (the same as examples/quickstart.yaml):
#: under a minute on 2 idle CPU cores (about 90 s on a busy one), from 10% to about 82% test
#: accuracy of the average model.
QUICKSTART: dict[str, Any] = {
    "name": "quickstart",
    "data": {"dataset": "fashion_mnist", "clients": 20, "partition": "dirichlet",
             "alpha": 0.3},
    "model": {"name": "mlp", "options": {"hidden": [200]}},
    "topology": {"name": "ring", "mixing": "metropolis_hastings"},
    "algorithm": {"name": "dfedavg"},
    "train": {"rounds": 30, "local_steps": 10, "batch_size": 50, "lr": 0.1},
    "eval": {"every": 1, "local_subset": 1000},
    "output": {"dir": "runs", "checkpoint_every": 10},
    "seed": 0,
}


METRIC_NAMES = {"test_acc": "average model on the test set",
                "personalized_acc": "local models on their own test splits",
                "local_acc_mean": "local models on the test set, mean"}


# --------------------------------------------------------------------------------------------
# Output helpers
# --------------------------------------------------------------------------------------------
def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _warn(message: str) -> None:
    _err(f"warning: {message}")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    _warn(str(message))


def format_summary(summary: dict, run_dir: Path) -> str:
    """The block printed when a run finishes."""
    from gossipfl.results.reporting import format_bytes

    what = (f"{summary.get('algorithm')} on {summary.get('dataset')}, "
            f"{summary.get('clients')} clients"
            + (f", {summary['topology']}" if summary.get("topology") else ""))
    metric = summary.get("metric", "test_acc")
    head = f"finished {summary.get('name') or 'run'} ({what}), {summary.get('rounds')} rounds"
    lines = [head]

    def pct(value: Any) -> str:
        return "—" if value is None else f"{100 * value:.2f} %"

    lines.append(f"  final accuracy{'':6} {pct(summary.get('final'))}  "
                 f"({METRIC_NAMES.get(metric, metric)})")
    lines.append(f"  best accuracy{'':7} {pct(summary.get('best'))}  "
                 f"at round {summary.get('best_round')}")
    honest = summary.get("final_honest_local_acc_mean") is not None  # Byzantine clients
    local = "final_honest_local_acc" if honest else "final_local_acc"
    if summary.get(f"{local}_mean") is not None and metric != "local_acc_mean":
        sampled = summary.get("eval_clients")
        sample = f"a sample of {sampled} of the {summary.get('clients')} clients"
        over = (f"over {'the honest clients of ' if honest else ''}{sample}, "
                "eval.local_clients" if sampled else
                f"over the {'honest ' if honest else ''}clients")
        lines.append(f"  local models{'':8} {100 * summary[f'{local}_mean']:.2f} ± "
                     f"{100 * summary.get(f'{local}_std', 0.0):.2f} %  "
                     f"(final, mean ± std {over})")
    if summary.get("final_epsilon") is not None:
        lines.append(f"  privacy spent{'':7} ε = {summary['final_epsilon']:.3g} at δ = "
                     f"{summary.get('delta', 0):g}  (largest over the clients; mean "
                     f"{summary.get('final_epsilon_mean', 0.0):.3g})")
    if summary.get("breakdown"):  # gossipfl.trust.breakdown
        cut = summary["breakdown"]
        ratio = "— (honest graph cut)" if cut["ratio"] is None else f"{cut['ratio']:.3g}"
        lines.append(f"  breakdown inputs{'':4} μ_min = {cut['mu_min']:.3g}, b = "
                     f"{cut['b_max']:.3g} (at most {cut['byzantine_neighbours_max']} "
                     f"Byzantine neighbours), b/μ_min = {ratio}")
        if cut.get("proved"):
            from gossipfl.trust.breakdown import proved_line

            lines.append(f"  proved region{'':7} {proved_line(cut['proved'])}")
    if summary.get("final_pndp_max") is not None:  # Muffliato's pairwise network DP
        lines.append(f"  pairwise privacy{'':4} ε(u→v) = {summary['final_pndp_max']:.3g} in "
                     f"Rényi DP of order α = {summary.get('pndp_alpha', 2):g}  (largest over "
                     f"pairs u ≠ v; mean {summary.get('final_pndp_mean', 0.0):.3g})")
    lines.append(f"  time per round{'':6} {summary.get('seconds_per_round', 0.0):.2f} s")
    lines.append(f"  bytes sent{'':10} {format_bytes(summary.get('bytes_total'))}")
    lines.append(f"  run directory{'':7} {run_dir}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# gossipfl run
# --------------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    if args.resume:
        from gossipfl.results.lifecycle import prepare_resume
        from gossipfl.results.rundir import RunDirectory

        if args.config or args.set or args.out or args.name:
            raise GossipflError("--resume: cannot be combined with a config, --set, --out or "
                                "--name; the run's own config.yaml is used.")
        run_dir = RunDirectory(args.resume)
        if run_dir.is_run() and run_dir.status() == "finished":
            print(f"{run_dir.path} has already finished.")
            print(format_summary(run_dir.read_summary(), run_dir.path))
            return 0
        prepared = prepare_resume(args.resume, args.device, args.allow_changed_inputs)
    elif getattr(args, "dry_run", False):
        from gossipfl.assembly.compat import preflight
        from gossipfl.assembly.loading import load_config
        from gossipfl.assembly.plan import format_fit, format_plan, memory_budget, memory_plan

        config = load_config(args.config if args.config else QUICKSTART, list(args.set))
        preflight(config)  # every refusal the run gives before training that needs no data
        lines, facts = memory_plan(config)
        print(format_plan(lines, facts))
        if not config.device.startswith("cuda"):  # the plan is the host's memory
            print(format_fit(lines, facts, memory_budget()))
        return 0
    else:
        if args.allow_changed_inputs:
            raise GossipflError("--allow-changed-inputs: goes only with --resume (a new run "
                                "records its input files as they are).")
        prepared = _prepare_new(args)
    for note in prepared.notes:
        _err(note)
    return _execute(prepared, args)


def _prepare_new(args: argparse.Namespace):
    from gossipfl.assembly.loading import load_config

    overrides = list(args.set)
    if args.device:
        overrides.append(f"device={args.device}")
    if args.name is not None:
        _check_name(args.name)
        overrides.append(f"name={args.name}")
    if args.config == "":
        raise GossipflError("CONFIG: an empty path; name a config file, or give none for the "
                            "quickstart.")
    config = load_config(args.config if args.config else QUICKSTART, overrides)
    from gossipfl.results.lifecycle import prepare_fresh  # after a config error: not imported
    from gossipfl.results.rundir import new_run_path

    parent = _out_parent(args.out) if args.out else user_path(config.output.dir, "output.dir")
    if args.name:
        return prepare_fresh(config, parent / args.name, key="--name")
    return prepare_fresh(config, new_run_path(config, parent), unique=True,
                         key="--out" if args.out else "output.dir")


def _check_png(path: str, key: str) -> None:
    """A figure's path: a .png file that can be written."""
    if Path(path).suffix.lower() != ".png":
        raise GossipflError(f"{key}: the figure is written as PNG, so its name ends in .png, "
                            f"got '{path}'.")
    check_writable_file(path, key)


def _check_name(name: str) -> None:
    """``--name``: the run's folder in ``--out``, one folder name."""
    if name in (".", "..") or "/" in name or "\\" in name or not name.strip():
        raise GossipflError(f"--name: the name of the run's own folder (one name, without "
                            f"'/'), got '{name}'; --out is the folder it goes in.")


def _out_parent(out: str) -> Path:
    """``--out``: the folder the run's directory goes in (as for ``sweep``); an existing run
    directory there is the old meaning of ``--out`` (the run's own directory), refused."""
    from gossipfl.results.rundir import RunDirectory

    if RunDirectory(out).is_run():
        raise GossipflError(f"--out: '{out}' is a run directory, but --out is the folder a run's "
                            f"directory goes in (as for gossipfl sweep); give --out PARENT "
                            f"--name NAME for the folder PARENT/NAME, or --resume {out} to "
                            f"continue that run.")
    check_writable(out, "--out")
    return Path(out)


def command_line(*args: str) -> str:
    """A gossipfl command line that works without an activated virtual environment: the
    full path of the ``gossipfl`` script that is running, else ``<python> -m gossipfl``."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "gossipfl" and script.is_file():
        head = [str(script.absolute())]
    else:
        head = [sys.executable, "-m", "gossipfl"]
    return shlex.join([*head, *args])


def _option_args(args: argparse.Namespace, names: Sequence[str]) -> list[str]:
    """``--name value`` for each option in ``names`` the user gave (repeatable ones too)."""
    out: list[str] = []
    for name in names:
        value = getattr(args, name, None)
        for item in value if isinstance(value, list) else [value] if value else []:
            out += [f"--{name}", str(item)]
    return out


def _resume_run_command(args: argparse.Namespace, run_dir: Path) -> str:
    return command_line("run", "--resume", str(run_dir),
                        *_option_args(args, ("device", "plugin")))


def _resume_sweep_command(args: argparse.Namespace) -> str:
    jobs = ("jobs",) if getattr(args, "jobs", 1) != 1 else ()
    pack = ("--pack",) if getattr(args, "pack", False) else ()
    return command_line("sweep", args.study,
                        *_option_args(args, ("out", "set", "device", *jobs, "only", "plugin")),
                        *pack)


def _execute(prepared: Any, args: argparse.Namespace) -> int:
    from gossipfl.results.lifecycle import execute

    run_dir = prepared.run_dir.path
    reports = prepared.run_dir.writes  # under torchrun, rank 0 reports for the job
    from gossipfl.output.progress import RoundBar
    from gossipfl.results.rundir import primary_metric

    bar = RoundBar(prepared.runner, run_dir.name, disable=args.quiet or not reports,
                   metric=primary_metric)
    try:
        outcome = execute(prepared, [bar], warn=_warn)
    except KeyboardInterrupt:
        bar.close()
        _report_interrupt(prepared, _resume_run_command(args, run_dir))
        return 130
    bar.close()
    if outcome.status == "failed":
        return _report_failure(outcome, _resume_run_command(args, run_dir))
    if outcome.status == "diverged":
        if reports:
            _err(f"error: {outcome.error} (results so far in {outcome.run_dir.path})")
        return outcome.error.exit_status
    if not reports:
        return 0
    if args.quiet:
        print(run_dir)
    else:
        print(format_summary(outcome.summary, run_dir))
        figures = sorted(p.name for p in run_dir.glob("*.png"))
        if figures:
            print(f"  figures{'':13} {', '.join(figures)}")
    return 0


def _report_interrupt(prepared: Any, resume: str) -> None:
    summary = prepared.run_dir.read_summary()
    done, at = summary.get("rounds_done"), summary.get("checkpoint_round")
    where = (f"the last checkpoint is at round {at}" if at
             else "no checkpoint was written yet, so a resume starts again from round 0")
    _err(f"interrupted after round {done}; {where}.")
    _err(f"resume with: {resume}")


def _report_failure(outcome: Any, resume: str) -> int:
    from gossipfl.io import WriteError
    from gossipfl.plugins import describe, raised_in_plugin

    error = outcome.error
    kept = outcome.run_dir.path.exists()
    if isinstance(error, WriteError):
        _err(f"error: {error}; {_after_write_error(error, resume if kept else None)}")
        return error.exit_status
    so_far = f" (results so far in {outcome.run_dir.path})" if kept else ""
    at = None if isinstance(error, GossipflError) else raised_in_plugin(error)
    if at is not None:  # the researcher's plugin failed while training: its place, one line
        done = outcome.summary.get("rounds_done") or 0
        _err(f"error: a plugin failed in round {done + 1}{at}: {describe(error)}{so_far}.")
        return 2
    if not isinstance(error, FloatingPointError):  # user errors exit 2 in main; bugs show a
        raise error                                   # traceback
    _err(f"error: {error}{so_far}")
    return 1


def _after_write_error(error: Any, command: str | None, action: str = "resume") -> str:
    """What to do after a failed write: free space (or fix the folder), then ``command``."""
    fix = "free space" if error.no_space else "fix that"
    return f"{fix} and {action} with: {command}" if command else \
        f"{fix} and run the command again."


# --------------------------------------------------------------------------------------------
# gossipfl sweep / report
# --------------------------------------------------------------------------------------------
def cmd_sweep(args: argparse.Namespace) -> int:
    from gossipfl.api import sweep

    log = (lambda _m: None) if args.quiet else print
    try:
        outcome = sweep(args.study, overrides=args.set, out=args.out, device=args.device,
                        quiet=args.quiet, log=log, warn=_warn,
                        allow_changed_inputs=args.allow_changed_inputs, jobs=args.jobs,
                        only=args.only, pack=args.pack)
    except KeyboardInterrupt:
        _err(f"interrupted; finished runs are kept and the interrupted one keeps its last "
             f"checkpoint. Resume with: {_resume_sweep_command(args)}")
        return 130
    if outcome.report is not None:
        _print_report(outcome.report, outcome.path)
    status = _report_failed_runs(outcome.outcome, _resume_sweep_command(args))
    error = outcome.report_error
    if error is None:
        return status
    report = command_line("report", str(outcome.path))
    _err(f"error: {error}; {_after_write_error(error, report, 'write the table')}")
    return error.exit_status


def _report_failed_runs(outcome: Any, resume: str) -> int:
    """One line per run that failed; status 1 when any did."""
    if not outcome.failed:
        return 0
    for dirname, reason in outcome.failed.items():
        _err(f"failed: {dirname}: {reason}")
    _err(f"{len(outcome.failed)} of {len(outcome.variants)} runs failed; the table shows the "
         f"others. Fix the cause, then retry the failed runs with: {resume}")
    return 1


def cmd_report(args: argparse.Namespace) -> int:
    from gossipfl.api import report

    result = report(args.paths, targets=args.target or None, metric=args.metric,
                    out=args.out, target_key="--target")
    _print_report(result, result.files[0].parent)
    return 0


def _print_report(result: Any, out: Path) -> None:
    for line in result.left_out:
        _warn(line)
    print(result.markdown, end="")
    print(f"written to {out}: {', '.join(p.name for p in result.files)}")


# --------------------------------------------------------------------------------------------
# gossipfl stability
# --------------------------------------------------------------------------------------------
def cmd_stability(args: argparse.Namespace) -> int:
    from gossipfl.studies.stability import stability

    try:
        outcome = stability(args.source, overrides=args.set, perturb=args.perturb,
                            client=args.client, every=args.every, out=args.out,
                            device=args.device, quiet=args.quiet,
                            log=(lambda _m: None) if args.quiet else print, warn=_warn)
    except KeyboardInterrupt:
        _err("interrupted; nothing was written (run the command again).")
        return 130
    print(outcome.table)
    print(f"written to {outcome.path}: {', '.join(p.name for p in outcome.files)}")
    return 0


# --------------------------------------------------------------------------------------------
# gossipfl list / topology / data / fetch
# --------------------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    from gossipfl.algorithms import available_algorithms
    from gossipfl.data import PARTITIONERS, dataset_names
    from gossipfl.models import MODELS
    from gossipfl.schedules import schedule_names
    from gossipfl.topology import mixing_rule_names, topology_kind, topology_names

    algorithms = available_algorithms()
    width = max(len(n) for n in algorithms)
    print("algorithms (algorithm.name; its parameters beside it):")
    for name, cls in algorithms.items():
        kind = "centralized" if cls.centralized else "decentralized"
        params = _algorithm_params(cls)  # the paper, then the parameters with defaults
        print(f"  {name:<{width}}  {kind:<13}  {cls.paper}" + (f"; {params}" if params else ""))
    for title, names in (("datasets", dataset_names()), ("partitions", (*PARTITIONERS, "natural")),
                         ("models", MODELS)):
        print(f"{title}: {', '.join(names)}")
    for title, options in (("model options (model.options)", _model_options()),
                           ("dataset options (data.options)", _dataset_options())):
        print(f"{title}:")
        width = max(len(n) for n in options)
        for name, described in options.items():
            print(f"  {name:<{width}}  {described or '(none)'}")
    from gossipfl.compression import COMPRESSORS
    from gossipfl.trust import ATTACKS, RULES

    # the pieces a config names with their parameters beside the name ({name: x, param: v})
    for title, params in (
            ("topologies (topology.name; its parameters beside it)",
             {name: topology_kind(name).describe() for name in topology_names()}),
            ("compressors (topology.compression.compressor; its parameters beside it)",
             {name: cls.Params.describe() for name, cls in COMPRESSORS.items()})):
        print(f"{title}:")
        width = max(len(n) for n in params)
        for name, described in params.items():
            print(f"  {name:<{width}}  {described}".rstrip())
    from gossipfl.topology.stages import STAGES

    stages = {name: cls.Params.describe() for name, cls in STAGES.items()}
    if stages:  # the plugins' (gossipfl's own are asked for by their own keys)
        print("gossip stages (topology.stages: [{stage: name, <its parameters>}]):")
        width = max(len(n) for n in stages)
        for name, described in stages.items():
            print(f"  {name:<{width}}  {described}".rstrip())
    print(f"mixing rules (topology.mixing): {', '.join(mixing_rule_names())}")
    print(f"schedules (topology.order): {', '.join(schedule_names())}")
    for title, pieces in (("robust rules (topology.robust.rule)", RULES),
                          ("attacks (byzantine.attack)", ATTACKS)):
        print(f"{title}:")
        width = max(len(n) for n in pieces)
        for name, cls in pieces.items():  # the paper, then the parameters with defaults
            params = cls.Params.describe()
            print(f"  {name:<{width}}  {cls.paper}" + (f"; {params}" if params else ""))
    return 0


def _algorithm_params(cls: Any) -> str:
    """An algorithm's hyperparameters with their defaults (and rules, where it has them)."""
    import dataclasses

    from gossipfl.validation import describe_params

    fields = [f for f in dataclasses.fields(cls.Params) if f.init]
    rules = {}
    for base in reversed(cls.Params.__mro__):
        rules.update(vars(base).get("rules", {}))
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    return describe_params({f.name: rules.get(f.name) for f in fields}, defaults)


def _model_options() -> dict[str, str]:
    from gossipfl.models import MODELS, model_options
    from gossipfl.validation import describe_params

    return {name: describe_params(dict.fromkeys(model_options(name)), model_options(name))
            for name in MODELS}


def _dataset_options() -> dict[str, str]:
    import inspect

    from gossipfl.data.datasets import (
        USER_DATASETS,
        _file_loaders,
        dataset_names,
        dataset_options,
        make_synthetic,
    )
    from gossipfl.validation import describe_params

    out = {}
    for name in dataset_names():
        loader = USER_DATASETS.get(name) or _file_loaders().get(name) or (
            make_synthetic if name == "synthetic" else None)
        signature = {} if loader is None else inspect.signature(loader).parameters
        defaults = {key: p.default for key, p in signature.items()
                    if p.default is not inspect.Parameter.empty}
        if loader is None:  # gossipfl's image datasets: normalized, augmented where usual
            defaults = {"normalize": True, "augment": "the dataset's (on for CIFAR)"}
        keys = dataset_options(name) or []
        out[name] = describe_params(dict.fromkeys(keys), defaults)
    return out


def cmd_topology(args: argparse.Namespace) -> int:
    from gossipfl.topology import build_topology

    params = {k: v for k, v in (("k", args.k), ("p", args.p), ("s", args.s),
                                ("path", args.path)) if v is not None}
    params.update(_topology_option(item) for item in args.option)
    if args.round < 0:
        raise GossipflError(f"--round: must be a round number >= 0 (rounds count from 0), got "
                            f"{args.round}.")
    if args.draw:
        _check_png(args.draw, "--draw")
    topology = build_topology(args.name, args.clients, mixing=args.mixing, seed=args.seed,
                              **params)
    info = topology.describe()
    print(f"{args.name} on {args.clients} clients, mixing {topology.mixing}"
          + (" (time-varying: statistics over rounds 0..4)" if topology.time_varying else ""))
    yes = {True: "yes", False: "no"}
    degree = (f"min {info['degree_min']}, mean {info['degree_mean']:.2f}, "
              f"max {info['degree_max']}")
    rows = [("degree", degree),
            ("spectral gap", "not computed (a graph this large is kept as edges)"
             if info["spectral_gap"] is None else
             f"{info['spectral_gap']:.4f}  (1 − second-largest |eigenvalue|)"),
            ("symmetric", yes[info["symmetric"]]),
            ("doubly stochastic", yes[info["doubly_stochastic"]]),
            ("stochastic", f"{info['stochastic']}  (what every round's W is)"),
            ("connected", "yes" + (f" (over {max(10, topology.period or 0)} rounds)"
                                   if topology.time_varying else "")),
            *([("period", f"{topology.period} rounds")] if topology.period else []),
            ("messages / gossip step", f"{info['messages_per_step']:.0f}")]
    for key, value in rows:
        print(f"  {key:<23} {value}")
    if args.draw:
        _draw_topology(topology, args.draw, args.round)
        print(f"drawing written to {args.draw}")
    return 0


def _topology_option(item: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``gossipfl topology --option``: a parameter of the topology, the value
    read as YAML (as ``--set`` reads it)."""
    from gossipfl.assembly.loading import override_value

    key, text = _option_pair(item, "a parameter of the topology")
    return key, override_value(text)


def _option_pair(item: str, what: str) -> tuple[str, str]:
    """``(KEY, VALUE text)`` of an ``--option KEY=VALUE`` (``what``: what KEY names)."""
    key, equals, text = item.partition("=")
    if not equals or not key.strip():
        raise GossipflError(f"--option: expected KEY=VALUE ({what}), got '{item}'.")
    return key.strip(), text


def _draw_topology(topology: Any, path: str, round: int) -> None:
    from gossipfl.output.plots import topology_figure
    from gossipfl.topology import spectral_gap

    grid = (topology.params["rows"], topology.params["cols"]) if topology.name == "grid" \
        else None
    layout = "grid" if grid else "spring" if topology.name in ("erdos_renyi", "custom") \
        else "circular"
    title = (f"{topology.name}, {topology.num_clients} clients"
             + (f", round {round}" if topology.time_varying else "")
             + f"; spectral gap {spectral_gap(topology.matrix(round)):.3f}")
    topology_figure(topology.adjacency(round), path, title=title, layout=layout, grid=grid)


def cmd_data(args: argparse.Namespace) -> int:
    from gossipfl.assembly.loading import load_config
    from gossipfl.core.runner import build_data
    from gossipfl.data import summarize_partition

    data: dict[str, Any] = {"dataset": args.dataset, "partition": args.partition,
                            "clients": args.clients, "download": not args.no_download}
    for key in ("alpha", "classes_per_client", "root"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    for item in args.option:
        _option_pair(item, "an option of the dataset")
    overrides = [f"data.options.{item}" for item in args.option]
    config = load_config({"data": data, "seed": args.seed}, overrides)
    if args.plot:
        _check_png(args.plot, "--plot")
    dataset, parts = build_data(config)
    print(f"{dataset.name}: {len(dataset.train_y)} train / {len(dataset.test_y)} test samples, "
          f"input {list(dataset.input_shape)}, {dataset.num_classes} classes")
    summary = summarize_partition(parts, dataset.train_y.numpy(), dataset.num_classes)
    print(summary.table(max_rows=args.rows))
    if args.plot:
        from gossipfl.output.plots import partition_figure

        what = args.partition + (f", alpha {config.data.alpha:g}"
                                  if args.partition == "dirichlet" else "")
        partition_figure(summary.class_counts, args.plot,
                         title=f"{dataset.name}: {args.clients} clients, {what}")
        print(f"figure written to {args.plot}")
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from gossipfl.api import fetch

    dataset = fetch(args.dataset, root=args.root, download=not args.no_download,
                    verify=not args.no_verify)
    print(f"{dataset.name}: {len(dataset.train_y)} train / {len(dataset.test_y)} test "
          f"samples ready.")
    for file in dataset.files:
        check = "official SHA-256" if file["verified"] else "SHA-256 not checked"
        print(f"  {file['path']}  {check} {file['sha256']}")
    return 0


def cmd_new(args: argparse.Namespace) -> int:
    from gossipfl.scaffold import new

    paths = new(args.piece, args.name, args.out, args.kind)
    import importlib.util

    print(f"wrote {paths[0]} and {paths[1]}; try them:")
    option = {"algorithm": "algorithm.name", "model": "model.name",
              "dataset": "data.dataset"}[args.piece]
    if importlib.util.find_spec("pytest") is None:  # a wheel install has no test tools
        print("  pip install 'gossipfl[test]'    # pytest, which runs the test")
    print(f"  python -m pytest {shlex.quote(str(paths[1]))}")
    print(f"  gossipfl run --plugin {shlex.quote(str(paths[0]))} --set {option}={args.name}")
    return 0


# --------------------------------------------------------------------------------------------
# Parser and entry point
# --------------------------------------------------------------------------------------------
def _positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse with gossipfl's one-sentence errors: the option and what was wrong with its
    value, where ``--help`` lists the options (argparse prints its usage block first)."""

    def error(self, message: str):
        if message.startswith("argument "):
            message = message.removeprefix("argument ")
        sys.stderr.write(f"error: {message.rstrip('.')} (`{self.prog} --help` lists the "
                         f"options).\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gossipfl", description="Decentralized federated learning experiments.")
    parser.add_argument("--version", action="version", version=f"gossipfl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run one experiment (the quickstart without a config)")
    run.add_argument("config", nargs="?", help="experiment YAML (default: the quickstart)")
    _add_set(run)
    run.add_argument("--out", metavar="DIR",
                     help="the folder the run's directory goes in, as for sweep (default: "
                          "output.dir, runs)")
    run.add_argument("--name", help="the run's name and its directory's: DIR/NAME, which must "
                                    "be free (default: DIR/<name>-<timestamp>)")
    run.add_argument("--device", help="cpu, cuda, cuda:N or auto")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run")
    run.add_argument("--allow-changed-inputs", action="store_true",
                     help="with --resume: go on (with a warning) when a file the run read "
                          "has changed since it started")
    run.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    run.add_argument("--dry-run", action="store_true",
                     help="check what the run checks before training (the same refusals), "
                          "print the memory it will hold, state by state, and stop")
    run.set_defaults(func=cmd_run)

    sweep = sub.add_parser("sweep", help="run a study: a grid of runs, then a table")
    sweep.add_argument("study", help="study YAML")
    _add_set(sweep, "override a config key of every run, after its grid point (not a key "
                    "the grid gives several values)")
    sweep.add_argument("--out", help="parent folder of the study folder")
    sweep.add_argument("--device", help="cpu, cuda, cuda:N or auto")
    sweep.add_argument("--jobs", type=int, default=1, metavar="N",
                       help="runs at a time, each on a worker process of its own (default 1)")
    sweep.add_argument("--pack", action="store_true",
                       help="compute runs that differ in seed (and lr) as one stack of clients "
                            "(each run's numbers as alone; not with --jobs)")
    sweep.add_argument("--only", action="append", default=[], metavar="GLOB",
                       help="run only the runs whose directory name matches (repeatable)")
    sweep.add_argument("--allow-changed-inputs", action="store_true",
                       help="resume runs (with a warning) whose input files have changed")
    sweep.add_argument("--quiet", action="store_true", help="no progress bars")
    sweep.set_defaults(func=cmd_sweep)

    rep = sub.add_parser("report", help="table and figures for existing runs or studies")
    rep.add_argument("paths", nargs="+", metavar="PATH", help="run or study directories")
    rep.add_argument("--metric", help="accuracy column (default: test_acc)")
    rep.add_argument("--target", action="append", default=[],
                     help="accuracy for a rounds-to-target column: a fraction in (0, 1] or a "
                          "percentage such as 70%% (repeatable)")
    rep.add_argument("--out", help="where table.md/.csv and figures go (default: the one "
                                   "PATH given, else ./report)")
    rep.set_defaults(func=cmd_report)

    stab = sub.add_parser("stability", help="distance between runs on neighbouring datasets "
                                            "and the generalization gap, over rounds")
    stab.add_argument("source", metavar="CONFIG_OR_STUDY",
                      help="experiment YAML, or a study YAML (every grid point and seed)")
    _add_set(stab, "override a config key (of a study's base config)")
    stab.add_argument("--perturb", default="client", metavar="client|sample|none",
                      help="client: one client's data replaced by test samples of the same "
                           "classes (default); sample: its first sample only; none: a control")
    stab.add_argument("--client", type=int, metavar="I",
                      help="the perturbed client (default: the first that trains in round 1)")
    stab.add_argument("--every", type=int, metavar="N",
                      help="record every N rounds and the last (default: eval.every)")
    stab.add_argument("--out", help="output folder (default: <output.dir>/<name>-stability)")
    stab.add_argument("--device", help="cpu, cuda, cuda:N or auto")
    stab.add_argument("--quiet", action="store_true", help="no progress bars")
    stab.set_defaults(func=cmd_stability)

    sub.add_parser("list", help="algorithms, datasets, models, topologies, mixing rules, "
                   "robust rules, attacks"
                   ).set_defaults(func=cmd_list)

    topo = sub.add_parser("topology", help="degree, spectral gap and a drawing of a graph")
    topo.add_argument("name")
    topo.add_argument("--clients", type=int, required=True)
    topo.add_argument("--mixing", default="metropolis_hastings")
    topo.add_argument("--k", type=int)
    topo.add_argument("--p", type=float)
    topo.add_argument("--s", type=int, help="epidemic: peers each client sends to per round")
    topo.add_argument("--path", help="matrix file for the custom topology")
    topo.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                      help="a parameter of the topology, e.g. period=2 for a plugin's "
                           "(repeatable; gossipfl list names them)")
    topo.add_argument("--seed", type=int, default=0)
    topo.add_argument("--round", type=int, default=0, help="round drawn (time-varying graphs)")
    topo.add_argument("--draw", metavar="PNG", help="write a drawing of the graph")
    topo.set_defaults(func=cmd_topology)

    data = sub.add_parser("data", help="samples and classes per client of a partition")
    data.add_argument("dataset")
    data.add_argument("--partition", default="dirichlet")
    data.add_argument("--clients", type=int, required=True)
    data.add_argument("--alpha", type=float)
    data.add_argument("--classes-per-client", type=int)
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--root", help="data folder")
    data.add_argument("--no-download", action="store_true")
    data.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                      help="dataset option, e.g. dim=20 for synthetic (repeatable)")
    data.add_argument("--rows", type=_positive_int, default=20,
                      help="clients listed (default 20)")
    data.add_argument("--plot", metavar="PNG", help="write a figure of the partition")
    data.set_defaults(func=cmd_data)

    fetch = sub.add_parser("fetch", help="find or download a dataset (checksums verified)")
    fetch.add_argument("dataset")
    fetch.add_argument("--root", help="data folder (default: $GOSSIPFL_DATA or "
                                      "~/.cache/gossipfl/data)")
    fetch.add_argument("--no-download", action="store_true",
                       help="only look for the files (exit 2 when they are not there)")
    fetch.add_argument("--no-verify", action="store_true",
                       help="accept files whose SHA-256 is not the official files' (your own)")
    fetch.set_defaults(func=cmd_fetch)

    new = sub.add_parser("new", help="write a plugin file and its test for a new algorithm, "
                                     "model or dataset")
    new.add_argument("piece", choices=("algorithm", "model", "dataset"))
    new.add_argument("name", metavar="NAME", help="its registry name (a Python identifier)")
    new.add_argument("--kind", metavar="decentralized|centralized|personalized",
                     help="an algorithm's kind (default: decentralized)")
    new.add_argument("--out", default=".", metavar="DIR",
                     help="folder of NAME.py and test_NAME.py (default: .)")
    new.set_defaults(func=cmd_new)

    from gossipfl.analysis.command import add_parser as add_analyze  # gossipfl analyze

    add_analyze(sub)
    for command in (run, sweep, rep, stab, sub.choices["list"], sub.choices["analyze"], topo):
        command.add_argument("--plugin", action="append", default=[], metavar="FILE|MODULE",
                             help="load your own algorithm, model or dataset module "
                                  "(repeatable; see docs/design.md)")
    return parser


def _add_set(parser: argparse.ArgumentParser, text: str = "override a config key") -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"{text}, e.g. train.lr=0.05 (repeatable)")


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status. SIGTERM is handled as Ctrl-C."""
    previous = _handle_sigterm()
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _handle_sigterm() -> Any:
    """Make SIGTERM raise KeyboardInterrupt (main thread only); returns the old handler."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _terminate)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    try:
        if isinstance(getattr(args, "out", None), str):  # '--out ~/x' quoted: no shell expanded it
            args.out = str(user_path(args.out, "--out"))
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            from gossipfl.plugins import session

            with session(getattr(args, "plugin", None) or ()):
                return args.func(args)
    except GossipflError as exc:
        _err(f"error: {exc}")
        return exc.exit_status
    except KeyboardInterrupt:
        _err("interrupted.")
        return 130


if __name__ == "__main__":
    sys.exit(main())
