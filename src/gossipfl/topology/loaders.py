"""The files a custom topology reads: a matrix (.npy, .csv, .txt: an adjacency or a mixing
matrix) and an edge list (.npz, or a .csv with the header ``i,j`` or ``i,j,w``), every problem
one sentence naming the config key."""

from __future__ import annotations

import warnings
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from gossipfl.errors import GossipflError
from gossipfl.io import user_path


# --------------------------------------------------------------------------------------------
# Custom matrices
# --------------------------------------------------------------------------------------------
def load_matrix(path: str | Path, key: str = "topology.path") -> np.ndarray:
    """A float64 matrix from a .npy, .csv (comma-separated) or .txt (whitespace) file; a
    file that cannot be read (empty, cut short, not a .npy) or a .npy that does not hold real
    numbers (complex, text, a structured array) is one sentence naming ``key`` and the file."""
    file = user_path(path, key)
    suffix = file.suffix.lower()
    if suffix not in (".npy", ".csv", ".txt"):
        raise GossipflError(f"{key}: unsupported file type '{suffix or path}'; "
                            "use .npy, .csv or .txt.")
    if not file.is_file():
        raise GossipflError(f"{key}: no such file '{path}'.")
    with _reading(path, key, "a matrix"):
        if suffix == ".npy":
            with open(file, "rb") as handle:
                array = np.lib.format.read_array(handle, allow_pickle=False)
            return real_numbers(array, key, f"the matrix in '{path}'")
        return _load_text(file, "," if suffix == ".csv" else None, skiprows=0)


def real_numbers(array: np.ndarray, key: str, what: str) -> np.ndarray:
    """``array`` as float64 when it holds real numbers (bool, integer or float); complex
    numbers, text, objects or a structured array are one sentence naming ``key`` and
    ``what`` (complex numbers are not silently made real)."""
    if array.dtype.kind not in "biuf":
        kind = _KINDS.get(array.dtype.kind, "values that are not numbers")
        raise GossipflError(f"{key}: {what} holds {kind} (dtype {array.dtype}); it must hold "
                            "real numbers.")
    return array.astype(np.float64)


_KINDS = {"c": "complex numbers", "U": "text", "S": "bytes", "O": "Python objects",
          "V": "a structured array", "M": "dates", "m": "time spans"}


@contextmanager
def _reading(path: str | Path, key: str, what: str) -> Iterator[None]:
    """Whatever goes wrong reading ``path`` (numpy's and zipfile's errors on an empty, cut
    short or foreign file) as one sentence naming ``key`` and the file; a
    :class:`GossipflError` raised inside is passed on as it is."""
    try:
        yield
    except GossipflError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as error:
        reason = (str(error).splitlines() or [""])[0] or type(error).__name__
        raise GossipflError(f"{key}: could not read {what} from '{path}' "
                            f"({reason.rstrip('.')}).") from None


def _load_text(file: Path, delimiter: str | None, skiprows: int) -> np.ndarray:
    """The numbers of a text file as a 2-D float64 array (an empty file: shape (0, 1))."""
    with warnings.catch_warnings():  # an empty file: its shape is the one sentence
        warnings.simplefilter("ignore", UserWarning)
        return np.loadtxt(file, delimiter=delimiter, skiprows=skiprows, dtype=np.float64,
                          ndmin=2)


def custom_source(m: int, params: dict) -> tuple[np.ndarray, str]:
    """The user's matrix (float64, checked [M, M]) and the config key it came from."""
    path = params.get("path")
    array = params.get("matrix")
    if (path is None) == (array is None):
        raise GossipflError(
            "topology.path: the custom topology needs exactly one of topology.path (a .npy, "
            f".csv or .txt file) and topology.matrix (API), got {'both' if path else 'neither'}."
        )
    if path is not None:
        matrix, key = load_matrix(path), "topology.path"
    else:
        matrix, key = _api_matrix(array), "topology.matrix"
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise GossipflError(f"{key}: the matrix must be square, got shape {matrix.shape}.")
    if matrix.shape[0] != m:
        raise GossipflError(f"{key}: the matrix is {matrix.shape[0]}×{matrix.shape[0]} but "
                            f"there are {m} clients.")
    return matrix, key


def _api_matrix(array: Any) -> np.ndarray:
    """``topology.matrix`` as float64, or one sentence on what it is instead."""
    if isinstance(array, (str, Path)):
        raise GossipflError(f"topology.matrix: got the file name '{array}'; a matrix file goes "
                            f"in topology.path, topology.matrix takes the [M, M] array itself.")
    if hasattr(array, "detach"):
        array = array.detach().cpu().numpy()
    if isinstance(array, np.ndarray) and array.dtype.kind != "O":
        return real_numbers(array, "topology.matrix", "the matrix")
    try:
        return np.asarray(array, dtype=np.float64)
    except (ValueError, TypeError):
        rows = [len(r) for r in array] if isinstance(array, (list, tuple)) and all(
            isinstance(r, (list, tuple)) for r in array) else None
        if rows is not None and len(set(rows)) > 1:
            raise GossipflError(f"topology.matrix: the rows have different lengths "
                                f"({', '.join(map(str, rows[:8]))}{', ...' if len(rows) > 8 else ''}"
                                f"); a mixing matrix is [M, M] numbers.") from None
        raise GossipflError(f"topology.matrix: must be an [M, M] array of numbers, got "
                            f"{type(array).__name__} {str(array)[:60]!r}.") from None


def is_edge_file(path: Any) -> bool:
    """Whether ``topology.path`` holds an edge list: a .npz (``rows``, ``cols``, optional
    ``weights``) or a .csv whose first line is the header ``i,j`` or ``i,j,w``."""
    if not isinstance(path, str | Path):
        return False
    file = user_path(path, "topology.path")
    if file.suffix.lower() == ".npz":
        return True
    if file.suffix.lower() != ".csv" or not file.is_file():
        return False
    with open(file, encoding="utf-8", errors="replace") as handle:
        head = handle.readline().replace(" ", "").strip().lower()
    return head in ("i,j", "i,j,w")


def load_edges(path: str | Path, m: int, key: str = "topology.path"
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(rows, cols, weights or None) of an edge-list file (:func:`is_edge_file`).

    Checked, each problem one sentence naming ``key`` and the file: the file can be read (a
    .npz is a whole zip archive holding ``rows`` and ``cols``; a .csv has 2 or 3 columns);
    it lists at least one edge; the arrays are 1-D, of equal length and real numbers; every
    index is a client 0..M−1 (the bad line or entry named).
    """
    file = user_path(path, key)
    if not file.is_file():
        raise GossipflError(f"{key}: no such file '{path}'.")
    with _reading(path, key, "an edge list"):
        if file.suffix.lower() == ".npz":
            rows, cols, weights = _npz_edges(file, path, key)
            where, offset = "entry", 0
        else:
            table = _load_text(file, ",", skiprows=1)
            if not table.size:  # the header line alone
                table = table.reshape(0, 2)
            if table.shape[1] not in (2, 3):
                raise GossipflError(f"{key}: '{path}' has {table.shape[1]} columns; an edge "
                                    "list has i,j or i,j,w.")
            rows, cols = table[:, 0], table[:, 1]
            weights = table[:, 2] if table.shape[1] == 3 else None
            where, offset = "line", 2  # line 1 is the header
    if not len(rows):
        raise GossipflError(f"{key}: '{path}' lists no edges.")
    bad = np.flatnonzero((rows != np.floor(rows)) | (cols != np.floor(cols))
                         | (rows < 0) | (cols < 0) | (rows >= m) | (cols >= m))
    if len(bad):
        b = int(bad[0])
        raise GossipflError(f"{key}: {where} {b + offset} of '{path}' ({rows[b]:g}, "
                            f"{cols[b]:g}) is not a pair of clients in 0..{m - 1}.")
    return rows.astype(np.int64), cols.astype(np.int64), weights


def _npz_edges(file: Path, path: str | Path, key: str
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``rows``, ``cols`` and ``weights`` (None when absent) of an edge-list .npz as float64,
    each checked to be a 1-D array of real numbers (a column ``[E, 1]`` read as one), all of
    one length."""
    if not zipfile.is_zipfile(file):
        raise GossipflError(f"{key}: could not read an edge list from '{path}' (it is not a "
                            ".npz file: not a whole zip archive).")
    with np.load(file, allow_pickle=False) as data:
        missing = [name for name in ("rows", "cols") if name not in data.files]
        if missing:
            raise GossipflError(f"{key}: '{path}' has no array named "
                                f"{' or '.join(missing)} (an edge list .npz holds "
                                "rows, cols and optionally weights).")
        names = [name for name in ("rows", "cols", "weights") if name in data.files]
        arrays = {name: np.asarray(data[name]) for name in names}
    for name, array in arrays.items():
        if array.ndim > 1 and sum(n > 1 for n in array.shape) <= 1:  # a column: [E, 1]
            arrays[name] = array = array.reshape(-1)
        if array.ndim != 1:
            raise GossipflError(f"{key}: '{name}' in '{path}' must be a 1-D array, got shape "
                                f"{array.shape}.")
    lengths = {name: len(array) for name, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        listed = f"{', '.join(names[:-1])} and {names[-1]}"
        raise GossipflError(f"{key}: {listed} of '{path}' differ in length ("
                            f"{', '.join(f'{n} {k}' for n, k in lengths.items())}).")
    real = {name: real_numbers(array, key, f"'{name}' in '{path}'")
            for name, array in arrays.items()}
    return real["rows"], real["cols"], real.get("weights")
