"""The files a run reads besides its config: recorded when the run starts, checked on resume.

A run reads files that its config only names: a custom mixing matrix (``topology.path``),
the compute-speeds file (``systems.compute.path``), plugins (``plugins``) and the dataset's
files. A fresh run records each with its absolute path and SHA-256 in ``inputs.json`` of
its run directory (and its config.yaml names them by absolute path, so the run resumes from
any working directory). ``--resume`` compares every recorded file with what is there now: a
file that changed or went missing is refused in one sentence naming its key and path, unless
the resume says ``--allow-changed-inputs`` (then it is a warning, and ``inputs.json`` keeps
the old digest under ``previous``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from gossipfl.errors import GossipflError
from gossipfl.io import atomic_write_text, user_path

INPUTS_FILE = "inputs.json"
ALLOW_FLAG = "--allow-changed-inputs"


def sha256_of(path: str | Path) -> str | None:
    """The file's SHA-256 (hex), None when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _absolute(path: str, key: str) -> str:
    return str(user_path(path, key).absolute())


def reads_topology_path(config: Any) -> bool:
    """Whether the run reads ``topology.path``: a decentralized algorithm's custom graph."""
    from gossipfl.algorithms import get_algorithm

    try:
        centralized = get_algorithm(config.algorithm.name).centralized
    except GossipflError:
        centralized = False
    return (config.topology.path is not None and config.topology.name == "custom"
            and not centralized)


def compute_path(config: Any) -> str | None:
    systems = config.systems
    compute = getattr(systems, "compute", None)
    if isinstance(compute, dict) and isinstance(compute.get("path"), str):
        return compute["path"]
    return None


def with_absolute_paths(config: Any) -> Any:
    """``config`` with ``topology.path`` and ``systems.compute.path`` made absolute (against
    the working directory, which is where a relative path is read from); the config given is
    not changed."""
    topology_path, speeds = config.topology.path, compute_path(config)
    if topology_path is None and speeds is None:
        return config
    config = dataclasses.replace(config)
    if topology_path is not None:
        config.topology = dataclasses.replace(config.topology,
                                              path=_absolute(topology_path, "topology.path"))
    if speeds is not None:
        compute = {**config.systems.compute, "path": _absolute(speeds, "systems.compute.path")}
        config.systems = dataclasses.replace(config.systems, compute=compute)
    return config


def input_files(config: Any) -> dict[str, str]:
    """``{key: absolute path}`` of every file the config makes a run read (the dataset's
    files aside: the dataset lists those itself)."""
    from gossipfl.plugins import is_file

    files = {}
    if reads_topology_path(config):
        files["topology.path"] = _absolute(config.topology.path, "topology.path")
    speeds = compute_path(config)
    if speeds is not None:
        files["systems.compute.path"] = _absolute(speeds, "systems.compute.path")
    for i, spec in enumerate(config.plugins or []):
        if is_file(spec):
            key = f"plugins[{i}]" if len(config.plugins) > 1 else "plugins"
            files[key] = _absolute(spec, key)
    return files


def record(config: Any, dataset: Any = None) -> dict:
    """What ``inputs.json`` holds: ``{"files": [{key, path, sha256}, ...]}``."""
    entries = [{"key": key, "path": path, "sha256": sha256_of(path)}
               for key, path in input_files(config).items()]
    for file in getattr(dataset, "files", ()) or ():
        if "path" in file and file.get("sha256"):
            entries.append({"key": "data", "path": _absolute(file["path"], "data.root"),
                            "sha256": file["sha256"]})
    return {"files": entries}


def write(run_dir: Any, inputs: dict) -> None:
    atomic_write_text(run_dir.file(INPUTS_FILE), json.dumps(inputs, indent=2) + "\n")


def read(run_dir: Any) -> dict | None:
    """The run's recorded inputs; None for a run that recorded none (an older gossipfl)."""
    path = run_dir.file(INPUTS_FILE)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise GossipflError(f"--resume: '{path}' cannot be read (damaged); restore it or start "
                            f"a new run.")
    return data


def check(recorded: dict | None, allow_changed: bool = False,
          dataset_files: tuple | list | None = None) -> list[str]:
    """Compare the files ``recorded`` (what :func:`read` returned) with what is there now.

    Raises one sentence for the first file that changed or is missing (naming its key and
    path), unless ``allow_changed``: then returns a warning for each changed file and puts
    the new digests into ``recorded`` (the old ones under ``previous``; the caller writes
    it). ``dataset_files``: the dataset's files as the rebuilt run read them (their digests
    computed on reading); None checks the other inputs.
    """
    if recorded is None:
        return []
    now = {_absolute(f["path"], "data.root"): f.get("sha256") for f in dataset_files or ()
           if "path" in f}
    warnings = []
    for entry in recorded["files"]:
        if not isinstance(entry, dict) or "path" not in entry:
            continue
        key, path, before = entry.get("key", "input"), entry["path"], entry.get("sha256")
        if key == "data":
            if dataset_files is None or path not in now:
                continue
            after = now[path]
        else:
            if dataset_files is not None:
                continue
            after = sha256_of(path)
        if after == before:
            continue
        if after is None:
            what = f"{key}: '{path}' was read by this run but is missing now"
        else:
            what = (f"{key}: '{path}' has changed since the run started (SHA-256 "
                    f"{str(before)[:12]}… then, {after[:12]}… now)")
        if not allow_changed:
            raise GossipflError(f"--resume: {what}; restore it, or resume with {ALLOW_FLAG} "
                                f"to go on with the file as it is now.")
        if after is None:
            raise GossipflError(f"--resume: {what}; restore it (a missing file cannot be "
                                f"used even with {ALLOW_FLAG}).")
        warnings.append(f"{what}; going on with the file as it is now ({ALLOW_FLAG}), so the "
                        f"rounds after the resume use it")
        entry.setdefault("previous", []).append(before)
        entry["sha256"] = after
    return warnings
