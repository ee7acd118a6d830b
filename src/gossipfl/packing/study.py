"""``gossipfl sweep STUDY --pack``: the runs of a study not yet done, packed where they
differ only in seed and learning rate (:func:`~gossipfl.packing.fits.pack_groups`), the
others one at a time as the sweep runs them, each into its own run directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gossipfl.errors import GossipflError
from gossipfl.io import FolderInUse, WriteError
from gossipfl.packing.execute import execute_packed
from gossipfl.packing.fits import pack_groups
from gossipfl.sweep import (
    StudyOutcome,
    _prepare,
    analyze_run,
    plan,
    record_outcome,
    run_variant,
)


def run_packed(study: Any, chosen: list, path: Path, result: StudyOutcome,
               device: str | None, progress: Any, log: Callable[[str], None],
               warn: Callable[[str], None], allow_changed_inputs: bool) -> None:
    """Every run of ``chosen`` into ``result``: skipped when done, else packed with the runs
    it packs with, else alone (the sweep's output says why)."""
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
    prepared = []
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
        bar = progress(first[2], f"{first[0].dirname} +{len(batch) - 1}") if progress \
            else None
        try:
            outcomes = execute_packed([p for _, _, p in batch], warn,
                                      callbacks=[[bar] if bar and i == 0 else []
                                                 for i in range(len(batch))])
        finally:
            if bar is not None:
                bar.close()
        for (variant, action, _), outcome in zip(batch, outcomes, strict=True):
            what = "resumed" if action == "resume" else "ran"
            record_outcome(result, variant.dirname, what, outcome, log, warn)


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
