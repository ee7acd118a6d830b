"""The test suite's own layout (issue 38): no module under tests/ imports a test module
(tests/test_*.py). What several modules share lives in a plain module beside them
(tests/lsq.py, tests/helpers.py, tests/dataset_files.py, tests/*_cases.py, ...) or, when it
is a fixture, in tests/conftest.py; each test module then stands on its own."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _is_test_module(dotted: str) -> bool:
    """``tests.test_x``, ``test_x`` (rootdir on sys.path) or anything below one of them."""
    parts = dotted.split(".")
    return (parts[0] == "tests" or parts[0].startswith("test_")) and any(
        part.startswith("test_") for part in parts)


def _is_package(dotted: str) -> bool:
    return (ROOT.joinpath(*dotted.split("."))).is_dir()


def imported_test_modules(source: str) -> list[tuple[int, str]]:
    """(line, module) of every import of a test module in ``source``, at any depth (imports
    inside functions too), relative imports and ``importlib.import_module("...")`` included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names
                      if _is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # from . import test_x, from .test_x import y
                names = [module] if module else [alias.name for alias in node.names]
                found += [(node.lineno, "." * node.level + name) for name in names
                          if any(part.startswith("test_") for part in name.split("."))]
            elif _is_test_module(module):
                found.append((node.lineno, module))
            elif module.split(".")[0] == "tests" and _is_package(module):  # from tests import
                found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names
                          if alias.name.startswith("test_")]
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            arg = node.args[0]
            if name in ("import_module", "__import__") and isinstance(arg, ast.Constant) \
                    and isinstance(arg.value, str) and _is_test_module(arg.value):
                found.append((node.lineno, arg.value))
    return found


def test_no_module_of_the_suite_imports_a_test_module():
    offenders = [f"{path.relative_to(ROOT)}:{line} imports {module}"
                 for path in sorted(TESTS.rglob("*.py"))
                 for line, module in imported_test_modules(path.read_text())]
    assert not offenders, (
        "test modules import other test modules; move what they share into a plain module "
        "beside them (tests/*_cases.py, tests/helpers.py, ...) or, for a fixture, into "
        "tests/conftest.py:\n" + "\n".join(offenders))


def test_the_check_sees_every_form_of_import():
    caught = [
        "import tests.trust.test_trust",
        "import tests.trust.test_trust as trust",
        "import os, test_trust",
        "from tests.trust.test_trust import run",
        "from tests import lsq, test_trust",
        "from tests import test_algorithms_fedsagd as sagd",
        "from . import test_trust",
        "from .test_trust import run",
        "def helper():\n    from tests.algorithms.test_sgp import push_matrix\n",
        "import importlib\nimportlib.import_module('tests.trust.test_trust')",
    ]
    for source in caught:
        assert imported_test_modules(source), source
    allowed = [
        "from tests.trust_cases import run",
        "from tests import distributed_cases as cases",
        "from tests.helpers import TINY",
        "from . import lsq",
        "import unittest\nfrom torch import testing\nfrom test import support",
        "import importlib\nimportlib.import_module('gossipfl.analysis.analyze')",
    ]
    for source in allowed:
        assert not imported_test_modules(source), source


def test_every_module_the_conftest_names_exists():
    """The tiers are marked on the tests themselves; the one list left (the modules whose
    every test starts processes) names only modules that exist."""
    from tests import conftest

    assert not hasattr(conftest, "SLOW") and not hasattr(conftest, "REPRESENTED")
    assert all(any(TESTS.rglob(name)) for name in conftest.DISTRIBUTED)


#: Test modules that are about the package as a whole stay at tests/'s root.
WHOLE_PACKAGE = {"test_import_layers.py", "test_suite_layout.py"}


def test_the_tests_mirror_the_packages():
    """Each test module lives in the folder of the package it tests (issue 49): a folder of
    tests/ is named like a package of gossipfl (or ``cli``/``docs`` for the commands and the
    documentation), and tests/'s root holds shared helpers, not tests."""
    import gossipfl

    package = Path(gossipfl.__file__).resolve().parent
    names = {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert folders <= names | {"cli", "docs"}, sorted(folders - names - {"cli", "docs"})
    loose = {p.name for p in TESTS.glob("test_*.py")} - WHOLE_PACKAGE
    assert not loose, f"test modules at tests/'s root: {sorted(loose)}"
