"""Every option of an analysis, checked in one place before anything is loaded or computed.

The same rules serve ``gossipfl analyze`` (an error names the flag, ``--top-k``), the Python
function :func:`gossipfl.analysis.analyze` (the same names) and a study's ``analysis:``
section (the study key, ``study.analysis.top_k``), so a value refused by one is refused by
all, in one sentence, before any work. Out of range means: not an integer where one is
needed, NaN or infinite, zero or negative where it must be positive, or beyond the bound
that keeps the computation finite (grid points).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gossipfl.errors import GossipflError
from gossipfl.validation import Rule, one_of

MODEL_CHOICES = ("average", "local", "all")
LANDSCAPES = ("1d", "2d")
SPLITS = ("train", "test")
#: Points per axis of a landscape: at most this many on a line, and on each axis of a
#: surface (a 2-D grid of N×N models; 201 is already 40 401 models to evaluate).
MAX_GRID = {"1d": 1001, "2d": 201}

#: The options a study's ``analysis`` section may set (the Hessian part of ``analyze``).
STUDY_KEYS = ("top_k", "trace", "models", "data", "samples", "seed", "tol", "max_iter",
              "trace_tol", "trace_max_iter", "batch_size")


def _integer(low: int) -> Rule:
    return Rule(lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= low,
                "an integer" + (f" >= {low}" if low > -(2**63) else ""), quoted=True)


def _number(holds: Callable[[float], bool], words: str) -> Rule:
    return Rule(lambda v: not isinstance(v, bool) and isinstance(v, (int, float))
                and math.isfinite(v) and holds(v), words, finite=False, quoted=True)


_FLAG = Rule(lambda v: isinstance(v, bool), "true or false", quoted=True)

#: option → its rule (gossipfl.validation's vocabulary).
RULES: dict[str, Rule] = {
    "hessian": _FLAG,
    "top_k": _integer(1),
    "trace": _FLAG,
    "landscape": one_of(*LANDSCAPES).or_none(say_null=False),
    "models": one_of(*MODEL_CHOICES),
    "data": one_of(*SPLITS),
    "samples": _integer(1).or_none(say_null=False),
    "round": _integer(0).or_none(say_null=False),
    "grid": _integer(2),
    "span": _number(lambda v: v > 0, "a finite positive number"),
    "seed": _integer(-(2**63)),
    "tol": _number(lambda v: 0 < v < 1, "a number in (0, 1)"),
    "max_iter": _integer(1),
    "trace_tol": _number(lambda v: 0 < v < 1, "a number in (0, 1)"),
    "trace_max_iter": _integer(1),
    "batch_size": _integer(1),
}


def flag(option: str) -> str:
    """``top_k`` → ``--top-k`` (the CLI's name)."""
    return "--" + option.replace("_", "-")


def check_options(values: dict[str, Any], name: Callable[[str], str] = flag) -> None:
    """Refuse, in one sentence naming ``name(option)`` and the value, the first option of
    ``values`` that is out of range."""
    for option, value in values.items():
        RULES[option].check(name(option), value)
    grid, landscape = values.get("grid"), values.get("landscape")
    if landscape is not None and grid is not None and grid > MAX_GRID[landscape]:
        raise GossipflError(f"{name('grid')}: must be at most {MAX_GRID[landscape]} points "
                            f"per axis for a {landscape} landscape, got {grid}.")


def check_study_analysis(value: Any) -> dict | None:
    """A study's ``analysis`` section, every option checked (``study.analysis.<key>``)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise GossipflError(f"study.analysis: must map analysis options "
                            f"({', '.join(STUDY_KEYS)}) to values, got {value!r}.")
    from gossipfl.errors import did_you_mean

    for key in value:
        if key not in STUDY_KEYS:
            raise GossipflError(f"study.analysis.{key}: unknown option"
                                f"{did_you_mean(str(key), STUDY_KEYS)}; choose from "
                                f"{', '.join(STUDY_KEYS)}.")
    check_options(dict(value), name=lambda option: f"study.analysis.{option}")
    return dict(value)


def check_device(device: Any, key: str = "--device") -> Any:
    """The torch device ``device`` names (cpu, cuda, cuda:N or auto), refused in one
    sentence when it is malformed or not on this machine (as ``gossipfl run`` does,
    :func:`gossipfl.core.runner.resolve_device`)."""
    import torch

    from gossipfl.assembly.experiment import resolve_device

    if not isinstance(device, str) or not (
            device in ("cpu", "auto", "cuda") or (device.startswith("cuda:")
                                                   and device[5:].isdigit())):
        raise GossipflError(f"{key}: must be cpu, cuda, cuda:N or auto, got {device!r}.")
    try:
        resolved = resolve_device(device)
    except GossipflError as exc:
        raise GossipflError(f"{key}: {str(exc).split(': ', 1)[-1]}") from None
    if resolved.type == "cuda" and resolved.index is not None \
            and resolved.index >= torch.cuda.device_count():
        raise GossipflError(f"{key}: '{device}' was asked for but this machine has "
                            f"{torch.cuda.device_count()} CUDA device(s).")
    return resolved
