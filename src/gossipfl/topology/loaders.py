"""The files a custom topology reads: a matrix (.npy, .csv, .txt: an adjacency or a mixing
matrix) and an edge list (.npz, or a .csv with the header ``i,j`` or ``i,j,w``), every problem
one sentence naming the config key."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from gossipfl.errors import GossipflError


# --------------------------------------------------------------------------------------------
# Custom matrices
# --------------------------------------------------------------------------------------------
def load_matrix(path: str | Path, key: str = "topology.path") -> np.ndarray:
    """A float64 matrix from a .npy, .csv (comma-separated) or .txt (whitespace) file."""
    file = Path(path).expanduser()
    suffix = file.suffix.lower()
    if suffix not in (".npy", ".csv", ".txt"):
        raise GossipflError(f"{key}: unsupported file type '{suffix or path}'; "
                            "use .npy, .csv or .txt.")
    if not file.is_file():
        raise GossipflError(f"{key}: no such file '{path}'.")
    try:
        if suffix == ".npy":
            return np.asarray(np.load(file, allow_pickle=False), dtype=np.float64)
        with warnings.catch_warnings():  # an empty file: its shape is the one sentence
            warnings.simplefilter("ignore", UserWarning)
            return np.loadtxt(file, delimiter="," if suffix == ".csv" else None,
                              dtype=np.float64, ndmin=2)
    except (ValueError, OSError) as error:
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        raise GossipflError(f"{key}: could not read a matrix from '{path}' ({reason}).") from None


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
    file = Path(path).expanduser()
    if file.suffix.lower() == ".npz":
        return True
    if file.suffix.lower() != ".csv" or not file.is_file():
        return False
    with open(file, encoding="utf-8", errors="replace") as handle:
        head = handle.readline().replace(" ", "").strip().lower()
    return head in ("i,j", "i,j,w")


def load_edges(path: str | Path, m: int, key: str = "topology.path"
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(rows, cols, weights or None) of an edge-list file (:func:`is_edge_file`), every
    index checked to be a client 0..M−1; a bad line or entry is named."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise GossipflError(f"{key}: no such file '{path}'.")
    try:
        if file.suffix.lower() == ".npz":
            with np.load(file, allow_pickle=False) as data:
                missing = [name for name in ("rows", "cols") if name not in data.files]
                if missing:
                    raise GossipflError(f"{key}: '{path}' has no array named "
                                        f"{' or '.join(missing)} (an edge list .npz holds "
                                        "rows, cols and optionally weights).")
                rows, cols = np.asarray(data["rows"]), np.asarray(data["cols"])
                weights = (np.asarray(data["weights"], dtype=np.float64)
                           if "weights" in data.files else None)
            where = "entry"
            offset = 0
        else:
            table = np.loadtxt(file, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
            rows, cols = table[:, 0], table[:, 1]
            weights = table[:, 2] if table.shape[1] == 3 else None
            if table.shape[1] not in (2, 3):
                raise GossipflError(f"{key}: '{path}' has {table.shape[1]} columns; an edge "
                                    "list has i,j or i,j,w.")
            where, offset = "line", 2  # line 1 is the header
    except (ValueError, OSError) as error:
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        raise GossipflError(f"{key}: could not read an edge list from '{path}' "
                            f"({reason}).") from None
    if rows.shape != cols.shape or (weights is not None and weights.shape != rows.shape):
        raise GossipflError(f"{key}: rows, cols and weights of '{path}' differ in length.")
    bad = np.flatnonzero((rows != np.floor(rows)) | (cols != np.floor(cols))
                         | (rows < 0) | (cols < 0) | (rows >= m) | (cols >= m))
    if len(bad):
        b = int(bad[0])
        raise GossipflError(f"{key}: {where} {b + offset} of '{path}' ({rows[b]:g}, "
                            f"{cols[b]:g}) is not a pair of clients in 0..{m - 1}.")
    return rows.astype(np.int64), cols.astype(np.int64), weights
