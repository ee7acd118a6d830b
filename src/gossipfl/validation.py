"""The one validation vocabulary: a :class:`Rule` says what a value must be and the sentence
it says when it is not, with the full key (``algorithm.beta``, ``train.lr``,
``model.options.hidden``). Config sections, algorithm hyperparameters and the options of
models, datasets and partitioners check their values with these rules; a closed set of names
is :func:`one_of` (its error lists the valid names, from the registry that defines them).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from gossipfl.errors import GossipflError, did_you_mean, unknown_choice


@dataclass(frozen=True)
class Rule:
    """A constraint on one value: ``holds(value)``, and what it says when it fails.

    ``finite``: NaN and infinities are refused first, as "must be a finite number" (False: the
    rule's own words cover them); ``quoted``: the value is shown as Python writes it
    (``'two'``), as command-line options are."""

    holds: Callable[[Any], bool]
    words: str  # "must be <words>, got <value>."
    choices: tuple[str, ...] = ()  # for a choice: the "unknown value ...; choose one of" error
    finite: bool = True
    quoted: bool = False

    def check(self, key: str, value: Any) -> None:
        """Raise a one-sentence :class:`GossipflError` naming ``key`` unless ``value`` holds."""
        if self.finite and isinstance(value, float) and not math.isfinite(value):
            raise GossipflError(f"{key}: must be a finite number, got {value}.")
        try:
            holds = self.holds(value)
        except TypeError:
            holds = False
        if holds:
            return
        if self.choices:
            raise unknown_choice(key, value, self.choices)
        shown = repr(value) if self.quoted else value
        raise GossipflError(f"{key}: must be {self.words}, got {shown}.")

    def or_none(self, say_null: bool = True) -> Rule:
        """The same rule, or null (a setting that falls back to another one); ``say_null``:
        the sentence names null as a choice (False: an option whose absence is the default)."""
        words = f"{self.words} or null" if say_null else self.words
        return Rule(lambda v: v is None or self.holds(v), words, self.choices, self.finite,
                    self.quoted)


NON_NEGATIVE = Rule(lambda v: v >= 0, ">= 0")
POSITIVE = Rule(lambda v: v > 0, "> 0")
UNIT_INTERVAL = Rule(lambda v: 0 <= v < 1, "in [0, 1)")
FRACTION = Rule(lambda v: 0 < v <= 1, "in (0, 1]")
AT_LEAST_ONE = Rule(lambda v: v >= 1, "an integer >= 1")
COUNT = Rule(lambda v: not isinstance(v, bool) and v >= 1 and int(v) == v, "an integer >= 1")
BOOLEAN = Rule(lambda v: isinstance(v, bool), "true or false")

#: The largest number a float32 tensor holds: a hyperparameter beyond it (train.lr = 1e308)
#: overflows the moment it meets the parameters, so no config number may pass it.
FLOAT32_MAX = 3.4028234663852886e38
INT64_MAX = 2 ** 63 - 1


def one_of(*choices: str) -> Rule:
    """A closed set of names (an error lists them all)."""
    return Rule(lambda v: v in choices, "", tuple(choices))


@dataclass(frozen=True)
class Params:
    """A piece's parameters, declared once: the base of every registered piece's parameter
    dataclass (a compressor's, a robust rule's, an attack's, a topology's). Each field is a
    parameter a config may give the piece beside its name, its annotation the type and its
    default the value a config leaves out (a field without a default must be given);
    ``rules`` (a class attribute, not a field) maps fields to their :class:`Rule`, and a
    subclass lists only the fields it adds (the rules of its bases apply too).

    :func:`typed` builds one from a config mapping (one sentence naming the key and value for
    an unknown parameter, a bad value or a missing one); ``gossipfl list`` shows
    :meth:`describe`. ``check_together`` is the place of a rule between parameters::

        @dataclass(frozen=True)
        class SparseParams(Params):
            k: int | None = None
            fraction: float | None = None
            rules: ClassVar = {"k": COUNT, "fraction": FRACTION}
    """

    rules: ClassVar[dict[str, Rule]] = {}

    @classmethod
    def parameter_rules(cls) -> dict[str, Rule | None]:
        """Every parameter (the fields, in order) with its rule (None: only its type)."""
        rules: dict[str, Rule] = {}
        for base in reversed(cls.__mro__):
            rules.update(vars(base).get("rules", {}))
        return {f.name: rules.get(f.name) for f in dataclasses.fields(cls) if f.init}

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The parameters that have a default, with it."""
        out = {}
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out

    @classmethod
    def check_together(cls, key: str, given: dict[str, Any], name: str) -> None:
        """One sentence, naming ``key.param``, for parameters that are valid alone but not
        together (``given``: those the config set, each past its rule; ``name``: the
        piece's)."""

    @classmethod
    def describe(cls) -> str:
        """The parameters for ``gossipfl list``: ``k = 10 (an integer >= 1)``, each with its
        default where a config may leave it out (a None default that its rule refuses, an
        absent parameter, is not shown); '' for none."""
        rules = cls.parameter_rules()
        defaults = {key: value for key, value in cls.defaults().items()
                    if value is not None or rules[key] is None or _holds(rules[key], None)}
        return describe_params(rules, defaults)

    def given(self) -> dict[str, Any]:
        """The parameters as a mapping (name -> value)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}


def _holds(rule: Rule, value: Any) -> bool:
    try:
        return bool(rule.holds(value))
    except TypeError:
        return False


P = typing.TypeVar("P", bound=Params)


def typed(params: type[P], given: dict[str, Any], key: str, kind: str, name: str,
          also: Sequence[str] = (), near: Sequence[str] = ()) -> P:
    """The one function that types a piece's parameters: ``params`` (the piece's
    :class:`Params` dataclass) from the mapping a config ``given`` it, as :func:`check_piece_
    params` checks them (an unknown one, listing those it takes and ``also``; a value its rule
    refuses), then a parameter without a default that ``given`` lacks, then the class's
    ``check_together``; each a sentence naming ``key.param``. An integral number for an
    ``int`` field becomes an int, an integer for a ``float`` field a float."""
    rules = params.parameter_rules()
    check_piece_params(key, kind, name, given, rules, also, near)
    defaults = params.defaults()
    for param, rule in rules.items():
        if param not in given and param not in defaults:
            words = f" ({rule.words})" if rule is not None and rule.words else ""
            raise GossipflError(f"{key}.{param}: {kind} '{name}' needs this parameter{words}; "
                                f"set it.")
    params.check_together(key, dict(given), name)
    try:
        hints = typing.get_type_hints(params)
    except Exception:  # noqa: BLE001 - a plugin's unresolvable annotations: values as given
        hints = {}
    return params(**{param: _as_annotated(value, hints.get(param))
                     for param, value in given.items()})


def _as_annotated(value: Any, hint: Any) -> Any:
    """``value`` as its field's type where a number is of the other kind (2.0 for an int, 2
    for a float, also in an ``X | None`` or ``X | str``); anything else as it is."""
    options = set(typing.get_args(hint)) if typing.get_origin(hint) in (
        typing.Union, types.UnionType) else {hint}
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if int in options and float not in options and isinstance(value, float) \
            and value.is_integer():
        return int(value)
    if float in options and int not in options and isinstance(value, int):
        return float(value)
    return value


def check_piece_params(key: str, kind: str, name: str, params: dict[str, Any],
                       rules: dict[str, Rule | None], also: Sequence[str] = (),
                       near: Sequence[str] = ()) -> None:
    """The parameters a config gives a registered piece (``kind`` ``name``: a compressor, a
    robust rule, an attack, a topology): each one it takes (``rules``; ``also``: the other
    keys the mapping may hold), with a valid value; otherwise one sentence naming
    ``key.param``, the allowed keys and the closest one (among them and ``near``, keys of the
    section not listed, such as a topology's shared ones)."""
    for p, v in params.items():
        if p not in rules:
            keys = [*sorted(rules), *also]
            raise GossipflError(f"{key}.{p}: unknown parameter of {kind} '{name}' (value "
                                f"{v!r}){did_you_mean(p, [*keys, *near])}; allowed: "
                                f"{', '.join(keys) or 'none'}.")
        if rules[p] is not None:
            rules[p].check(f"{key}.{p}", v)


def shown(value: Any) -> str:
    """A default as a config writes it (null, true, false, [200, 200])."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, tuple):
        return str(list(value))
    return str(value)


def describe_params(rules: dict[str, Rule | None], defaults: dict[str, Any]) -> str:
    """A piece's parameters for ``gossipfl list``: ``k = 10 (an integer >= 1), p (in (0,
    1])``, each with its default where it has one (a parameter without a rule: its default
    alone); '' for none."""
    def words(rule: Rule | None) -> str:
        if rule is None:
            return ""
        choices = ", ".join(rule.choices)
        return f" ({rule.words or f'one of {choices}'})"

    return ", ".join(f"{key} = {shown(defaults[key])}{words(rule)}" if key in defaults
                     else f"{key}{words(rule)}" for key, rule in rules.items())


def check_all(prefix: str, values: dict[str, Any], rules: dict[str, Rule]) -> None:
    """Check ``values[key]`` against ``rules[key]`` for every rule, naming ``prefix.key``."""
    for key, rule in rules.items():
        if key in values:
            rule.check(f"{prefix}.{key}" if prefix else key, values[key])


def choose(key: str, value: Any, choices: Iterable[str]) -> None:
    """``value`` must be one of ``choices`` (e.g. a registry's names)."""
    choices = tuple(choices)
    if value not in choices:
        raise unknown_choice(key, value, choices)


# -- values checked against a type hint (config fields, model and dataset options) ----------
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def check_finite(key: str, value: Any) -> None:
    """Reject NaN, infinite numbers and numbers beyond float32's range (which the run's
    float32 tensors cannot hold) anywhere in ``value`` (nested mappings and lists)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise GossipflError(f"{key}: must be a finite number, got {value}.")
    if isinstance(value, float) and abs(value) > FLOAT32_MAX:
        raise GossipflError(f"{key}: must be at most {FLOAT32_MAX:.4g} in magnitude (the "
                            f"largest float32), got {value:g}.")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
        raise GossipflError(f"{key}: must be at most {INT64_MAX} in magnitude (the largest "
                            f"int64), got {value:.4g}.")
    if isinstance(value, dict):
        for k, v in value.items():
            check_finite(f"{key}.{k}", v)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_finite(f"{key}[{i}]", v)


def coerce(key: str, value: Any, hint: Any) -> Any:
    """Check ``value`` against a type hint (int, float, bool, str, X | None, unions, lists of
    those); numbers must be finite. Returns the value converted (an integral float to int).
    A NaN or infinity where a number may go is called not finite; where none may (a name,
    a path), the type is named (``name: must be a string, got nan``)."""
    try:
        converted = _coerce(key, value, hint)
    except GossipflError:
        if _takes_numbers(hint):
            check_finite(key, value)
        raise
    check_finite(key, converted)  # also a string "1e308" converted to a number
    return converted


def _takes_numbers(hint: Any) -> bool:
    """Whether a value of type ``hint`` may be (or hold) a number."""
    if hint in (Any, int, float):
        return True
    return any(_takes_numbers(arg) for arg in typing.get_args(hint) if arg is not Ellipsis)


def _coerce(key: str, value: Any, hint: Any) -> Any:
    if hint is Any:
        return value
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(key, value, option)
            except GossipflError as exc:
                errors.append(exc)
        names = " or ".join(_type_name(o) for o in options)
        raise GossipflError(f"{key}: must be {names}, got {value!r}.")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise GossipflError(f"{key}: must be true or false, got {value!r}.")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise GossipflError(f"{key}: must be an integer, got {value!r}.")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            return float(value)  # a string "5e-4" from the Python API means the number
        raise GossipflError(f"{key}: must be a number, got {value!r}.")
    if hint is str:
        if isinstance(value, str):
            return value
        raise GossipflError(f"{key}: must be a string, got {value!r}.")
    if hint is dict or origin is dict:
        if isinstance(value, dict):
            return value
        raise GossipflError(f"{key}: must be a mapping, got {value!r}.")
    if origin in (list, tuple, Sequence) or hint in (list, tuple, Sequence):
        if not isinstance(value, (list, tuple)):
            raise GossipflError(f"{key}: must be a list, got {value!r}.")
        args = typing.get_args(hint)
        if len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis):
            return [_coerce(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value)]
        return list(value)
    return value


def _type_name(hint: Any) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false",
            dict: "a mapping", type(None): "null"}.get(hint, getattr(hint, "__name__", str(hint)))


def check_path(value: Any, key: str) -> Any:
    """``value`` when it is a path (a string or an ``os.PathLike``), else one sentence naming
    ``key`` (the Python verbs' path arguments)."""
    if isinstance(value, str) or (isinstance(value, os.PathLike)
                                  and isinstance(os.fspath(value), str)):
        return value
    raise GossipflError(f"{key}: must be a path (a string or a pathlib.Path), got {value!r:.80}.")


def check_paths(value: Any, key: str) -> list:
    """A path, or any iterable of paths, as a list, each checked by :func:`check_path`."""
    if isinstance(value, (str, os.PathLike, bytes, dict)) or not hasattr(value, "__iter__"):
        return [check_path(value, key)]
    return [check_path(v, key) for v in value]


def check_flags(**flags: Any) -> None:
    """Each of a verb's switches (``quiet``, ``download``, ``pack``) is True or False: a
    string such as ``"no"`` would otherwise count as True; the value is shown as Python
    writes it."""
    flag = dataclasses.replace(BOOLEAN, quoted=True)
    for key, value in flags.items():
        flag.check(key, value)


def check_callable(value: Any, key: str) -> Any:
    """``value`` when it is None or callable (a verb's ``log``, ``warn``, ``progress``)."""
    if value is not None and not callable(value):
        raise GossipflError(f"{key}: must be a function (or None), got {value!r:.80}.")
    return value

