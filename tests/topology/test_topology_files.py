"""Damaged or odd topology files (``topology.path``): one sentence naming the key and the
file, exit 2, never a traceback or a matrix silently changed."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from gossipfl.errors import GossipflError
from gossipfl.topology import build_topology, load_matrix
from tests.helpers import one_sentence

RING = np.array([[1, 1, 0, 1], [1, 1, 1, 0], [0, 1, 1, 1], [1, 0, 1, 1]]) / 3
ROWS, COLS = np.array([0, 1, 2, 3, 1, 2, 3, 0]), np.array([1, 2, 3, 0, 0, 1, 2, 3])


def _cut_npz(file: Path) -> None:
    np.savez(file, rows=ROWS, cols=COLS)
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


FILES = {  # name: (write it, mixing, what the sentence says after the file's name)
    "empty.npy": (lambda f: f.write_bytes(b""), "custom", "could not read a matrix"),
    "structured.npy": (lambda f: np.save(f, np.zeros(4, dtype=[("a", "f8"), ("b", "f8")])),
                       "custom", "holds a structured array"),
    "complex.npy": (lambda f: np.save(f, RING + 1j), "custom", "holds complex numbers"),
    "cut.npz": (_cut_npz, "metropolis_hastings", "not a whole zip archive"),
    "notzip.npz": (lambda f: f.write_bytes(b"PK\x03\x04" + bytes(200)), "metropolis_hastings",
                   "not a whole zip archive"),
    "header.csv": (lambda f: f.write_text("i,j\n"), "metropolis_hastings", "lists no edges"),
    "text.npz": (lambda f: np.savez(f, rows=np.array(["a"]), cols=np.array(["b"])),
                 "metropolis_hastings", "'rows' in .* holds text"),
    "complex.npz": (lambda f: np.savez(f, rows=ROWS + 0j, cols=COLS + 0j),
                    "metropolis_hastings", "'rows' in .* holds complex numbers"),
    "two_d.npz": (lambda f: np.savez(f, rows=np.zeros((2, 2)), cols=np.zeros((2, 2))),
                  "metropolis_hastings", r"'rows' in .* must be a 1-D array, got shape \(2, 2\)"),
    "weights_2d.npz": (lambda f: np.savez(f, rows=ROWS, cols=COLS, weights=np.ones((8, 2))),
                       "custom", r"'weights' in .* must be a 1-D array, got shape \(8, 2\)"),
    "lengths.npz": (lambda f: np.savez(f, rows=ROWS, cols=COLS[:5]), "metropolis_hastings",
                    r"rows and cols of .* differ in length \(rows 8, cols 5\)"),
    "cols4.csv": (lambda f: f.write_text("i,j\n0,1,2,3\n"), "metropolis_hastings",
                  "has 4 columns"),
}


@pytest.mark.parametrize("name", FILES)
def test_a_bad_topology_file_is_one_sentence_naming_it(tmp_path, capsys, name):
    write, mixing, says = FILES[name]
    file = tmp_path / name
    write(file)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. numpy's ComplexWarning: nothing made real
        err = one_sentence(capsys, "topology", "custom", "--clients", "4", "--mixing", mixing,
                           "--path", str(file))
    assert err.startswith("error: topology.path: ") and f"'{file}'" in err, err
    assert err.count("topology.path") == 1, err  # not one sentence wrapped in another
    assert re.search(says, err), err


def test_the_same_topology_files_written_well_are_read(tmp_path):
    np.save(tmp_path / "ring.npy", RING)
    np.savez(tmp_path / "ring.npz", rows=ROWS, cols=COLS)
    np.savez(tmp_path / "columns.npz", rows=ROWS[:, None], cols=COLS[None, :])  # [E, 1], [1, E]
    (tmp_path / "ring.csv").write_text("i,j\n" + "".join(f"{a},{b}\n" for a, b in
                                                          zip(ROWS, COLS)))
    np.testing.assert_array_equal(load_matrix(tmp_path / "ring.npy"), RING)
    W = build_topology("custom", 4, mixing="custom", path=str(tmp_path / "ring.npy"))
    for edges in ("ring.npz", "columns.npz", "ring.csv"):
        A = build_topology("custom", 4, path=str(tmp_path / edges)).matrix(0)
        np.testing.assert_allclose(A, W.matrix(0))


@pytest.mark.parametrize("matrix", [RING + 0j, torch.tensor(RING + 0j)])
def test_a_complex_api_matrix_is_refused(matrix):
    with pytest.raises(GossipflError, match=r"^topology\.matrix: the matrix holds complex "
                                            r"numbers \(dtype complex128\)"):
        build_topology("custom", 4, mixing="custom", matrix=matrix)
