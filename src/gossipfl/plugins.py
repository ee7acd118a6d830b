"""A researcher's own pieces, without editing gossipfl, and the one registry they go into.

A plugin is a Python file (``my_algo.py``) or an importable module (``mylab.fl``) that
registers pieces the way gossipfl's own modules do. Every kind of piece lives in one
:class:`Registry` (register by name, look up with a did-you-mean, gossipfl's own names kept):

=====================  ===========================================  ============================
kind                   registered with                              named by
=====================  ===========================================  ============================
algorithm              ``gossipfl.algorithms.register``             ``algorithm.name``
model                  ``gossipfl.models.register_model("name")``   ``model.name``
dataset                ``gossipfl.data.register_dataset("name")``   ``data.dataset``
partitioner            ``gossipfl.data.register_partitioner``       ``data.partition``
server optimizer       ``register_server_optimizer("name")``        ``algorithm.server_optimizer``
schedule               ``gossipfl.schedules.register_schedule``     ``topology.order``
topology               ``gossipfl.topology.register_topology``      ``topology.name``
mixing rule            ``gossipfl.topology.register_mixing_rule``   ``topology.mixing``
compressor             ``gossipfl.compression.register_compressor`` ``topology.compression``
robust rule            ``gossipfl.trust.register_rule``             ``topology.robust.rule``
attack                 ``gossipfl.trust.register_attack``           ``byzantine.attack``
gossip stage           ``gossipfl.topology.register_stage``         ``topology.stages``
=====================  ===========================================  ============================

A piece that a config names with parameters beside its name (a compressor, a robust rule,
an attack, a topology) declares them once, as a frozen dataclass subclassing :class:`Params`
(fields, defaults and their ``rules``); :func:`typed` is the one function that builds it from
a config mapping, and ``gossipfl list`` shows it.

Plugins are named in a config (``plugins: [my_algo.py]``, paths relative to the config
file) or on the command line (``gossipfl run --plugin my_algo.py``, for every config that
command reads). A run directory's ``config.yaml`` records them with absolute paths, so
``--resume`` and re-running the config load them again. Each plugin is imported once per
process. ``docs/design.md`` walks through an example.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
import traceback
import typing
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.io import user_path
from gossipfl.validation import Params, typed  # noqa: F401 - a piece's parameters, for plugins

_LOADED: dict[str, object] = {}  # plugin (absolute path or module name) -> module
_SESSION: list[str] = []  # plugins named on the command line: added to every config


def is_file(spec: str, folder: Path | None = None) -> bool:
    """Whether a plugin names a file (rather than a module): a ``.py`` name, a path, or the
    name of a file that exists (relative to ``folder``, else the working directory)."""
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        return True
    try:
        return ((folder or Path.cwd()) / Path(spec).expanduser()).is_file()
    except (OSError, RuntimeError):  # RuntimeError: ~someone, no such user (not a file)
        return False


def resolve(specs: object, folder: Path | None = None, key: str = "plugins") -> list[str]:
    """The plugin list with file paths made absolute (relative ones against ``folder``, else
    the working directory); one sentence for anything that is not a list of names."""
    if specs is None:
        return []
    if isinstance(specs, str):
        specs = [specs]
    if not isinstance(specs, list | tuple) or not all(isinstance(s, str) and s.strip()
                                                      for s in specs):
        raise GossipflError(f"{key}: must be a list of Python files or module names, got "
                            f"{specs!r}.")
    out = []
    for spec in specs:
        spec = spec.strip()
        if is_file(spec, folder):
            path = user_path(spec, key)
            if not path.is_absolute():
                path = (folder or Path.cwd()) / path
            spec = str(path.resolve())
        if spec not in out:
            out.append(spec)
    return out


def load(specs: Iterable[str], key: str = "plugins") -> None:
    """Import each plugin once (resolved names, see :func:`resolve`)."""
    specs = [spec for spec in specs if spec not in _LOADED]
    for spec in specs:  # (gossipfl.algorithms.register loads its own names before a plugin's)
        if spec not in _LOADED:
            _LOADED[spec] = _import(spec, key)


@contextmanager
def session(specs: Iterable[str]):
    """Within the block, plugins named on the command line are loaded and added to every
    config read (so that the run directories record them)."""
    resolved = resolve(list(specs), key="--plugin")
    load(resolved, key="--plugin")
    saved = list(_SESSION)
    _SESSION.extend(s for s in resolved if s not in _SESSION)
    try:
        yield resolved
    finally:
        _SESSION[:] = saved


def session_plugins() -> list[str]:
    return list(_SESSION)


#: What a piece's name may be (every registry's): a word, as configs and --set write it.
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\Z")


class Registry(dict):
    """The pieces of one kind by name: the one registry pattern of gossipfl (the table of the
    module docstring). A ``dict`` of name -> piece, with

    - :meth:`add`: register a piece under a name that is a word (:data:`NAME`); a name
      that is gossipfl's own (an entry made by a
      ``gossipfl.`` module, or one of ``reserved``) is refused in one sentence naming the
      kind, a plugin's may be replaced (the plugin loaded last wins, with a warning naming both
      when the replacing piece is another function or class);
    - :meth:`lookup`: the piece of a name, or one sentence naming ``key`` with the names
      there are and the closest one;
    - :meth:`names`: every name, gossipfl's own first.

    ``load`` imports gossipfl's own pieces of the kind (decorated in their modules) on first
    use, so that a plugin cannot take their names and a lookup finds them; ``reserved``: names
    of gossipfl's own that are not entries (the built-in datasets, read by other loaders)."""

    def __init__(self, kind: str, key: str, entries: dict | None = None,
                 load: Callable[[], None] | None = None, reserved: Iterable[str] = ()):
        super().__init__(entries or {})
        self.kind = kind
        self.key = key
        self.reserved = tuple(reserved)
        self._load = load
        self._loaded = load is None

    def ensure_loaded(self) -> None:
        """Import gossipfl's own pieces of this kind (once)."""
        if not self._loaded:
            self._loaded = True
            self._load()

    def add(self, name: str, piece: typing.Any,
            made_by: Callable[[typing.Any], object] = lambda piece: piece,
            owner: str | None = None) -> typing.Any:
        """``self[name] = piece``; ``made_by(piece)``: what the module that registered it is
        read from (the piece itself for a class or function; its function for a record);
        ``owner``: how the refusal names the piece being registered."""
        named = "" if owner is None else f" for {owner}"
        if not isinstance(name, str) or not NAME.match(name):
            raise GossipflError(f"{self.kind} name {name!r:.60}{named}: must be a word of "
                                f"letters, digits, '_' and '-' that starts with a letter (it "
                                f"is written in configs, in --set and in folders' names).")
        if replaceable(made_by(piece)):
            self.ensure_loaded()
        existing = self.get(name, piece)
        if name in self.reserved or (existing is not piece
                                     and not replaceable(made_by(existing))):
            raise GossipflError(f"{self.kind} name {name!r} is gossipfl's own; choose "
                                f"another{named}.")
        if existing is not piece and origin(made_by(existing)) != origin(made_by(piece)):
            import warnings

            warnings.warn(f"{self.kind} name {name!r}: {origin(made_by(piece))} replaces "
                          f"{origin(made_by(existing))}, registered under the same name "
                          f"before (the plugin loaded last wins).", stacklevel=3)
        self[name] = piece
        return piece

    def lookup(self, name: str) -> typing.Any:
        """The piece registered as ``name`` (one sentence naming ``key`` otherwise)."""
        self.ensure_loaded()
        if name not in self:
            raise unknown_choice(self.key, name, self.names())
        return self[name]

    def names(self) -> tuple[str, ...]:
        """Every name: gossipfl's own (``reserved`` first), then the plugins'."""
        self.ensure_loaded()
        return (*self.reserved, *self)


def check_params_class(piece: type, what: str) -> None:
    """A class-based piece (a compressor, a robust rule, an attack) declares its parameters
    once, as ``Params``: a frozen dataclass subclassing :class:`~gossipfl.validation.Params`
    (its fields, their defaults and ``rules``); one sentence naming ``what`` it is, else
    (also for the former form, a ``rules`` mapping on the piece itself)."""
    import dataclasses

    if "rules" in vars(piece):
        raise GossipflError(
            f"{what} ({origin(piece)}) declares its parameters as a 'rules' mapping; declare "
            f"them once as a frozen dataclass 'Params' subclassing gossipfl.plugins.Params "
            f"(fields with their defaults, 'rules' beside them), as docs/guide/plugins.md "
            f"shows.")
    params = getattr(piece, "Params", None)
    if not (isinstance(params, type) and issubclass(params, Params)
            and dataclasses.is_dataclass(params)
            and params.__dataclass_params__.frozen):
        raise GossipflError(f"{what} ({origin(piece)}): its Params must be a frozen dataclass "
                            f"subclassing gossipfl.plugins.Params, got {params!r:.60}.")


def replaceable(existing: object) -> bool:
    """Whether a registered thing may be replaced under its name: a plugin's may (the plugin
    loaded last wins), gossipfl's own may not."""
    return not getattr(existing, "__module__", "").startswith("gossipfl.")


def _import(spec: str, key: str):
    if is_file(spec):
        path = Path(spec)
        if path.is_dir():
            raise GossipflError(f"{key}: plugin '{path}' is a folder; name a Python file "
                                "(.py) or an importable module.")
        if not path.is_file():
            what = "is not a regular file" if path.exists() else "does not exist"
            raise GossipflError(f"{key}: plugin file '{path}' {what}.")
        if path.suffix != ".py":
            raise GossipflError(f"{key}: plugin '{path}' is not a Python file; a plugin is a "
                                "file ending in .py or the name of an importable module.")
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
        name = f"gossipfl_plugin_{path.stem}_{digest}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise GossipflError(f"{key}: '{path}' cannot be imported as a Python file.")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        runner = lambda: module_spec.loader.exec_module(module)
    else:
        if not _module_exists(spec, key):
            raise GossipflError(f"{key}: no Python file or module named '{spec}'.")
        module = None
        runner = lambda: importlib.import_module(spec)
    try:
        loaded = runner()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the researcher's own code: say
        # where, in one line (a sys.exit() at import too: it ended the run silently)
        if is_file(spec):
            sys.modules.pop(name, None)
        reason = f"it called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else \
            describe(exc)
        raise GossipflError(f"{key}: plugin '{spec}' failed to load{where(exc)}: "
                            f"{reason}") from None
    return module if module is not None else loaded


def _module_exists(spec: str, key: str) -> bool:
    """Whether ``spec`` names an importable module (a dotted name whose parent package is
    missing, or not a package, is not one)."""
    try:
        return importlib.util.find_spec(spec) is not None
    except (ImportError, ValueError, AttributeError):
        return False
    except Exception as exc:  # noqa: BLE001 - a parent package of the researcher's that fails
        raise GossipflError(f"{key}: plugin '{spec}' failed to load{where(exc)}: "
                            f"{describe(exc)}") from None


def where(exc: BaseException) -> str:
    """`` (line N of FILE)`` for the innermost frame of ``exc``'s traceback outside gossipfl
    (the researcher's code), or '' when there is none; a syntax error at its own file and
    line (the traceback ends in importlib's frozen frames)."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f" (line {exc.lineno} of {exc.filename})"
    package = str(Path(__file__).parent)
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith(package)]
    libraries = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    own = [f for f in frames if not f.filename.startswith(("<", *libraries))]
    frames = own or frames  # the researcher's file rather than torch's or importlib's
    return f" (line {frames[-1].lineno} of {frames[-1].filename})" if frames else ""


def call_piece(key: str, what: str, piece: Callable, args: tuple, returns: type,
               verb: str, kwargs: dict | None = None) -> typing.Any:
    """``piece(*args, **kwargs)``, a plugin's builder or loader (``what``: ``"topology 'x'"``): an
    exception it raises (other than gossipfl's own sentences) is one sentence naming ``key``,
    the piece and the line of its code that raised (``verb``: what it failed to do), and so
    is a result that is not a ``returns``."""
    plugin = f"{what} ({origin(piece)})"
    try:
        made = piece(*args, **(kwargs or {}))
    except GossipflError:
        raise
    except Exception as exc:  # noqa: BLE001 - the researcher's code: say where, in one line
        raise GossipflError(f"{key}: {plugin} failed to {verb}{where(exc)}: "
                            f"{describe(exc)}") from None
    if not isinstance(made, returns):
        raise GossipflError(f"{key}: {plugin} must return a gossipfl {returns.__name__}, got "
                            f"{type(made).__name__}.")
    return made


def raised_in_plugin(exc: BaseException) -> str | None:
    """`` (line N of FILE)`` for the innermost frame of ``exc``'s traceback in a loaded
    plugin's own code (its file, or its package's folder), None when the plugin's code is not
    in it (the error is gossipfl's, or a library's called by gossipfl)."""
    places = []
    for module in _LOADED.values():
        file = getattr(module, "__file__", None)
        if file:
            package = getattr(module, "__path__", None)
            places.append(str(Path(file).parent) + "/" if package else file)
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if any(f.filename == p or (p.endswith("/") and f.filename.startswith(p))
                     for p in places)]
    return f" (line {frames[-1].lineno} of {frames[-1].filename})" if frames else None


def describe(exc: BaseException) -> str:
    """An exception in one line: gossipfl's own sentences as they are, others with their
    type (``RuntimeError: boom``)."""
    text = " ".join(str(exc).split())
    if isinstance(exc, GossipflError):
        return text
    if isinstance(exc, SyntaxError) and exc.msg:  # its place is said by where()
        text = exc.msg
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def origin(thing: object) -> str:
    """Where a registered function or class comes from, for messages: ``name in FILE``."""
    name = getattr(thing, "__qualname__", None) or getattr(thing, "__name__", None) \
        or type(thing).__name__
    try:
        source = inspect.getsourcefile(thing) or inspect.getfile(thing)
    except (TypeError, OSError):
        source = getattr(thing, "__module__", None)
    return f"{name} in {source}" if source else str(name)


def check_signature(function: object, positional: tuple[str, ...], what: str,
                    options: bool = True) -> None:
    """A builder or loader ``function`` must take ``positional`` arguments first (then, with
    ``options``, its options as keywords); one sentence naming ``what`` it is, else."""
    if not callable(function):
        raise GossipflError(f"{what} must be a function, got {type(function).__name__} "
                            f"{function!r:.60}.")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return  # a builtin or C function: nothing to check
    try:
        signature.bind(*positional)
    except TypeError:
        raise GossipflError(
            f"{what} ({origin(function)}) must take ({', '.join(positional)}"
            f"{', **options' if options else ''}) as its arguments; its signature is "
            f"{signature}.") from None


def option_hints(function: object) -> dict[str, object]:
    """The types that ``function``'s options must have: its annotations (none when they do
    not resolve, as in a plugin that annotates with names it does not import) and, for an
    option without one, the type of its default (``hidden=32``: an integer; ``name="x"``: a
    string; ``flag=False``: true or false)."""
    try:
        hints = dict(typing.get_type_hints(function))
    except Exception:  # noqa: BLE001 - unresolvable annotations: the defaults' types only
        hints = {}
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return hints
    for parameter in parameters:
        default = parameter.default
        if parameter.name in hints or parameter.annotation is not inspect.Parameter.empty:
            continue
        if isinstance(default, bool):
            hints[parameter.name] = bool
        elif isinstance(default, int):
            hints[parameter.name] = int
        elif isinstance(default, float):
            hints[parameter.name] = float
        elif isinstance(default, str):
            hints[parameter.name] = str
        elif isinstance(default, list | tuple):
            hints[parameter.name] = list
    return hints
