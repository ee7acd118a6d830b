"""Errors a user can cause.

Every mistake in a config, a data directory or a topology raises :class:`GossipflError`
with one sentence that names the offending key and value. The CLI prints the sentence
without a traceback and exits with status 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class GossipflError(ValueError):
    """A user error: bad config value, missing data, invalid topology."""

    exit_status = 2


class IgnoredSetting(UserWarning):
    """A setting that the chosen components do not read (it is valid, and has no effect)."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean 'x'?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_choice(key: str, value: object, choices: Iterable[str]) -> GossipflError:
    """Build the error for a value that is not one of the known names."""
    choices = sorted(choices)
    return GossipflError(
        f"{key}: unknown value '{value}'{did_you_mean(str(value), choices)}; "
        f"choose one of: {', '.join(choices)}."
    )


class Diverged(FloatingPointError):
    """A run whose parameters, training loss or consensus distance blew up: it stops with
    status ``diverged`` (its results so far kept) and the CLI exits with status 3."""

    exit_status = 3
