"""``gossipfl new``: every scaffold's plugin runs as written and its generated test passes
unchanged, run with pytest from the folder it was written to."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gossipfl.cli import main

SRC = Path(__file__).resolve().parents[2] / "src"

PIECES = [  # (piece, NAME, --kind, the config key that names it)
    ("algorithm", "scaf_dec", "decentralized", "algorithm.name"),
    ("algorithm", "scaf_cen", "centralized", "algorithm.name"),
    ("algorithm", "scaf_pers", "personalized", "algorithm.name"),
    ("model", "scaf_model", None, "model.name"),
    ("dataset", "scaf_data", None, "data.dataset"),
]

TINY = {
    "name": "tiny",
    "data": {"dataset": "synthetic", "clients": 4, "partition": "iid",
             "options": {"dim": 6, "train_size": 120, "test_size": 40, "num_classes": 3}},
    "model": {"name": "mlp", "options": {"hidden": [8]}},
    "topology": {"name": "ring"},
    "algorithm": {"name": "dfedavg"},
    "train": {"rounds": 2, "local_steps": 2, "batch_size": 8, "lr": 0.1},
    "eval": {"every": 1},
}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Every kind of piece written by the CLI into one folder."""
    folder = tmp_path_factory.mktemp("scaffolds")
    for piece, name, kind, _ in PIECES:
        args = ["new", piece, name, "--out", str(folder)] + (["--kind", kind] if kind else [])
        assert main(args) == 0
        assert (folder / f"{name}.py").is_file() and (folder / f"test_{name}.py").is_file()
    return folder


@pytest.mark.slow
def test_generated_tests_pass_unchanged_with_pytest(generated):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                           *(f"test_{name}.py" for _, name, _, _ in PIECES)],
                          cwd=generated, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for _, name, _, _ in PIECES:  # each file's tests ran and passed
        assert f"PASSED test_{name}.py::test_{name}_" in done.stdout


@pytest.mark.parametrize("piece,name,kind,key", PIECES, ids=[p[1] for p in PIECES])
def test_generated_plugin_runs_with_gossipfl_run(generated, tmp_path, monkeypatch, capsys,
                                                 piece, name, kind, key):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    extra = ["--set", "data.options={}"] if piece == "dataset" else []
    status = main(["run", "tiny.yaml", "--plugin", str(generated / f"{name}.py"),
                   "--set", f"{key}={name}", *extra, "--out", ".", "--name", "run", "--quiet"])
    assert status == 0, capsys.readouterr().err
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert str(generated / f"{name}.py") in config["plugins"]
    assert len((tmp_path / "run" / "metrics.csv").read_text().splitlines()) == 3


def test_new_refuses_to_overwrite_and_bad_names(tmp_path, capsys):
    out = ["--out", str(tmp_path)]
    assert main(["new", "model", "my_net", *out]) == 0
    before = (tmp_path / "my_net.py").read_text()
    (tmp_path / "test_other.py").write_text("kept")
    cases = [
        (["new", "model", "my_net", *out], "already exists; nothing was written"),
        (["new", "algorithm", "other", *out], "test_other.py' already exists"),
        (["new", "algorithm", "dfedavg", *out], "already one of gossipfl's own algorithms"),
        (["new", "model", "mlp", *out], "already one of gossipfl's own models"),
        (["new", "dataset", "fashion_mnist", *out], "already one of gossipfl's own datasets"),
        (["new", "model", "2nets", *out], "is not a Python identifier"),
        (["new", "model", "class", *out], "is not a Python identifier"),
        (["new", "dataset", "numpy", *out], "importable module"),
        (["new", "dataset", "test_data", *out], "starts with 'test_'"),
        (["new", "model", "net2", "--kind", "centralized", *out], "only an algorithm has a"),
        (["new", "algorithm", "algo2", "--kind", "federated", *out], "unknown kind"),
    ]
    for args, words in cases:
        capsys.readouterr()
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and words in err and err.count("\n") == 0, err
    assert (tmp_path / "my_net.py").read_text() == before
    assert (tmp_path / "test_other.py").read_text() == "kept"
    assert not (tmp_path / "other.py").exists() and not (tmp_path / "algo2.py").exists()


def test_new_says_how_to_get_pytest_where_it_is_missing(tmp_path, capsys, monkeypatch):
    """After a wheel install (no pytest), `gossipfl new` says how to get the test tools: the
    `test` extra, which holds pytest."""
    import importlib.util
    import tomllib

    extras = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(req.startswith("pytest") for req in extras["test"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pytest" else real(name, *a))
    assert main(["new", "model", "net_a", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].strip().startswith("pip install 'gossipfl[test]'")
    assert lines[2].strip() == f"python -m pytest {tmp_path / 'test_net_a.py'}"
    monkeypatch.setattr(importlib.util, "find_spec", real)
    assert main(["new", "model", "net_b", "--out", str(tmp_path)]) == 0
    assert "gossipfl[test]" not in capsys.readouterr().out  # pytest is there
