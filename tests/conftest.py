"""Fixtures every test module may use, and the test tiers.

Tiers (``make test`` runs the fast one, ``make test-all`` every test):

- ``slow``: trains for seconds or more, or repeats a cross-product that a representative of
  the fast tier already covers; left out of ``make test``.
- ``distributed``: starts several processes (the torch.distributed backend).
- ``docs``: runs a code block of the documentation.
- ``data``: reads the real Fashion-MNIST files (skips where they cannot be had).

``make test`` is ``-m "not slow"``: every module keeps its fast tests there, so a change to any
module meets a test within minutes; the markers are set in the test modules themselves.
"""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import TINY


@pytest.fixture(autouse=True)
def fast_figures(request, monkeypatch):
    """Skip the per-run figures (about 0.3 s a run) unless the test is ``with_figures``."""
    if not getattr(request.function, "real_figures", False):
        monkeypatch.setattr("gossipfl.results.lifecycle.write_run_figures", lambda run_dir: [])


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A working directory holding tiny.yaml (runs land in ./runs)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    return tmp_path


# --------------------------------------------------------------------------------------------
# The slow tier
# --------------------------------------------------------------------------------------------
# Marked on the tests themselves: ``@pytest.mark.slow`` (a test that took over two seconds on the
# 2-core machine, ``python -m pytest --durations=0``, in a module that keeps fast tests in
# ``make test``), ``@pytest.mark.represented`` (a cross-product over every algorithm, oracle or
# model whose first parametrization stays in the fast tier as the family's representative, the
# others slow). No list of names: a renamed test keeps its marker.

#: Modules whose every test starts several processes (torch.distributed).
DISTRIBUTED = frozenset({"test_distributed.py", "test_shm.py"})


def pytest_collection_modifyitems(config, items):
    seen: set[str] = set()
    for item in items:
        key = f"{item.path.name}::{item.originalname}"
        if item.get_closest_marker("represented") is not None and key in seen:
            item.add_marker(pytest.mark.slow)
        if item.path.name in DISTRIBUTED:
            item.add_marker(pytest.mark.distributed)
        seen.add(key)
