"""Start-up (issue 23): the quick commands import only what they need.

No timing here (machines are noisy; benchmarks/startup.py times them): each case runs the
CLI's main in a fresh interpreter and checks which modules ``sys.modules`` ends up with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gossipfl

SRC = str(Path(gossipfl.__file__).resolve().parent.parent)  # this checkout's code, not another

PROBE = """
import contextlib, io, json, sys
from gossipfl.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

#: Never needed by these commands: plotting, the analysis code (only the parser of
#: ``gossipfl analyze`` is), graph building.
HEAVY = ("matplotlib", "networkx", "gossipfl.output.plots", "gossipfl.results.reporting")
ANALYSIS_ALLOWED = {"gossipfl.analysis", "gossipfl.analysis.command"}


def imported(*argv: str, cwd: Path) -> tuple[int, set[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [SRC, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], check=False,
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["code"], set(result["modules"])


def loaded(modules: set[str], package: str) -> list[str]:
    return sorted(m for m in modules if m == package or m.startswith(package + "."))


@pytest.mark.represented
@pytest.mark.parametrize("argv, code, torch_free", [
    (["--help"], 0, True),
    (["run", "--help"], 0, True),
    (["run", "--set", "train.lrr=0.1"], 2, True),  # a config error (unknown key)
    (["list"], 0, False),                           # the registries: torch, rightly
], ids=["help", "run-help", "config-error", "list"])
def test_quick_commands_import_little(argv, code, torch_free, tmp_path):
    exit_code, modules = imported(*argv, cwd=tmp_path)
    assert exit_code == code
    for package in HEAVY:
        assert not loaded(modules, package), f"{' '.join(argv)} imports {package}"
    analysis = set(loaded(modules, "gossipfl.analysis"))
    assert analysis <= ANALYSIS_ALLOWED, f"{' '.join(argv)} imports {analysis - ANALYSIS_ALLOWED}"
    if torch_free:
        assert not loaded(modules, "torch"), f"{' '.join(argv)} imports torch"
    assert not list(tmp_path.iterdir()), "nothing is written"


@pytest.mark.slow
def test_lazy_analysis_names_resolve():
    """gossipfl.analysis imports on first use; the function ``analyze`` stays the function
    even after its submodule ``gossipfl.analysis.analyze`` was imported directly."""
    code = """
import sys
from gossipfl.analysis.analyze import analyze as direct
import gossipfl.analysis as analysis
from gossipfl.analysis import analyze, surface, COLUMNS, load_run_models
assert analyze is direct and analysis.analyze is direct, analysis.analyze
assert callable(surface) and callable(load_run_models) and COLUMNS
assert sorted(analysis.__all__) == sorted(analysis._LAZY)
import gossipfl
assert callable(gossipfl.run) and gossipfl.Result.__name__ == "Result"
"""
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
