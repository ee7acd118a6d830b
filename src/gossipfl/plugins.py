"""A researcher's own algorithms, models and datasets, without editing gossipfl.

A plugin is a Python file (``my_algo.py``) or an importable module (``mylab.fl``) that
registers things the way gossipfl's own modules do:

- an algorithm: a subclass of :class:`gossipfl.algorithms.Algorithm` decorated with
  :func:`gossipfl.algorithms.register`;
- a model: a builder ``f(input_shape, num_classes, **options) -> nn.Module`` decorated with
  :func:`gossipfl.models.register_model` (``"name"``);
- a dataset: a loader ``f(root, download, **options) -> gossipfl.data.Dataset`` decorated
  with :func:`gossipfl.data.register_dataset` (``"name"``).

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
import sys
import traceback
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

from gossipfl.errors import GossipflError

_LOADED: dict[str, object] = {}  # plugin (absolute path or module name) -> module
_SESSION: list[str] = []  # plugins named on the command line: added to every config


def is_file(spec: str) -> bool:
    """Whether a plugin names a Python file (rather than a module)."""
    return spec.endswith(".py") or "/" in spec or "\\" in spec


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
        if is_file(spec):
            path = Path(spec).expanduser()
            if not path.is_absolute():
                path = (folder or Path.cwd()) / path
            spec = str(path.resolve())
        if spec not in out:
            out.append(spec)
    return out


def load(specs: Iterable[str], key: str = "plugins") -> None:
    """Import each plugin once (resolved names, see :func:`resolve`)."""
    specs = [spec for spec in specs if spec not in _LOADED]
    if not specs:
        return  # no plugin: no need for the algorithms (and torch) yet
    from gossipfl.algorithms import available_algorithms

    available_algorithms()  # built-ins first, so that a plugin cannot take their names
    for spec in specs:
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


def replaceable(existing: object) -> bool:
    """Whether a registered thing may be replaced under its name: a plugin's may (the plugin
    loaded last wins), gossipfl's own may not."""
    return not getattr(existing, "__module__", "").startswith("gossipfl.")


def _import(spec: str, key: str):
    if is_file(spec):
        path = Path(spec)
        if not path.is_file():
            raise GossipflError(f"{key}: plugin file '{path}' does not exist.")
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
        name = f"gossipfl_plugin_{path.stem}_{digest}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise GossipflError(f"{key}: '{path}' cannot be imported as a Python file.")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        runner = lambda: module_spec.loader.exec_module(module)
    else:
        if importlib.util.find_spec(spec) is None:
            raise GossipflError(f"{key}: no Python file or module named '{spec}'.")
        module = None
        runner = lambda: importlib.import_module(spec)
    try:
        loaded = runner()
    except GossipflError:
        raise
    except Exception as exc:  # noqa: BLE001 - the researcher's own code: say where, in one line
        if is_file(spec):
            sys.modules.pop(name, None)
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if not f.filename.startswith(str(Path(__file__).parent))]
        where = f" (line {frames[-1].lineno} of {frames[-1].filename})" if frames else ""
        raise GossipflError(f"{key}: plugin '{spec}' failed to load{where}: "
                            f"{type(exc).__name__}: {exc}") from None
    return module if module is not None else loaded
