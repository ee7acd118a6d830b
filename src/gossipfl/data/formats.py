"""File formats and downloads: IDX (MNIST family), CIFAR pickle batches, checksummed fetches.

Everything here reads bytes from disk and returns NumPy arrays; normalization and tensors are
the job of :mod:`gossipfl.data.datasets`. Every problem with a file raises
:class:`~gossipfl.errors.GossipflError` with one sentence naming the file.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import io
import json
import math
import os
import pickle
import shutil
import tarfile
import tempfile
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gossipfl.errors import GossipflError
from gossipfl.io import atomic_write_text, current_umask, file_stamp

#: IDX type code -> big-endian NumPy dtype (LeCun's format description).
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
GZIP_MAGIC = b"\x1f\x8b"
HASH_ALGORITHMS = ("sha256", "md5")
KEY = "data.dataset"


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file: its name, the mirrors that serve it and its checksum."""

    name: str
    urls: tuple[str, ...]
    checksum: str
    algorithm: str = "sha256"


def _idx_set(base_urls: tuple[str, ...], sha256: dict[str, str]) -> tuple[RemoteFile, ...]:
    return tuple(
        RemoteFile(name, tuple(url + name for url in base_urls), digest)
        for name, digest in sha256.items()
    )


# SHA-256 values of the official files, as published by TensorFlow Datasets
# (tensorflow_datasets/url_checksums/{fashion_mnist.txt, mnist.txt, cifar10.csv, cifar100.csv});
# sizes there: Fashion-MNIST train-images 26421880 bytes, MNIST train-images 9912422 bytes.
# Downloads and local files are both checked against them (see LOCAL_DIGESTS for the other
# forms of the same files).
SOURCES: dict[str, tuple[RemoteFile, ...]] = {
    "fashion_mnist": _idx_set(
        ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
        {
            "train-images-idx3-ubyte.gz":
                "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
            "train-labels-idx1-ubyte.gz":
                "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
            "t10k-images-idx3-ubyte.gz":
                "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
            "t10k-labels-idx1-ubyte.gz":
                "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        },
    ),
    # yann.lecun.com no longer serves the files without a login; these mirrors serve the
    # original bytes (same sizes and hashes).
    "mnist": _idx_set(
        (
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
        ),
        {
            "train-images-idx3-ubyte.gz":
                "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
            "train-labels-idx1-ubyte.gz":
                "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
            "t10k-images-idx3-ubyte.gz":
                "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
            "t10k-labels-idx1-ubyte.gz":
                "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        },
    ),
    "cifar10": (
        RemoteFile(
            "cifar-10-python.tar.gz",
            ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
            "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
        ),
    ),
    "cifar100": (
        RemoteFile(
            "cifar-100-python.tar.gz",
            ("https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",),
            "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7",
        ),
    ),
    # Stanford CS231n's archive; its publishers give no SHA-256, the MD5 every public loader of
    # this file checks is used (248 100 043 bytes).
    "tiny_imagenet": (
        RemoteFile(
            "tiny-imagenet-200.zip",
            ("http://cs231n.stanford.edu/tiny-imagenet-200.zip",),
            "90528d7ca1a48142e341f4ef8d21d0de",
            algorithm="md5",
        ),
    ),
}


#: Other forms of the official files, by dataset and file name. The Debian package
#: ``dataset-fashion-mnist`` ships the official gzip streams recompressed without the gzip
#: FNAME header field (each file shorter by len(name) + 1 bytes, e.g. train-images 26421856
#: bytes), so their SHA-256 differ; the uncompressed IDX files (torchvision's ``raw/``) are the
#: decompressed content of both.
LOCAL_DIGESTS: dict[str, dict[str, str]] = {
    "fashion_mnist": {
        "train-images-idx3-ubyte.gz":
            "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
        "train-labels-idx1-ubyte.gz":
            "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
        "t10k-images-idx3-ubyte.gz":
            "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
        "t10k-labels-idx1-ubyte.gz":
            "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
        "train-images-idx3-ubyte":
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        "train-labels-idx1-ubyte":
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        "t10k-images-idx3-ubyte":
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        "t10k-labels-idx1-ubyte":
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    },
}


def known_digests(dataset: str) -> dict[str, tuple[str, ...]]:
    """File name -> the SHA-256 values gossipfl accepts for it (the official one first)."""
    known: dict[str, tuple[str, ...]] = {
        remote.name: (remote.checksum,) for remote in SOURCES.get(dataset, ())
        if remote.algorithm == "sha256"}
    for name, digest in LOCAL_DIGESTS.get(dataset, {}).items():
        known[name] = (*known.get(name, ()), digest)
    return known


def check_file(path: Path, dataset: str, verify: bool = True) -> dict:
    """The SHA-256 of a dataset file (cached by size and mtime), checked against the known
    values of that file unless ``verify`` is off; returns what a run directory records."""
    digest = cached_digest(path)
    accepted = known_digests(dataset).get(path.name)
    if verify and accepted and digest not in accepted:
        raise GossipflError(
            f"{KEY}: {path} has SHA-256 {digest}, not the official {accepted[0]}; replace it "
            f"with the official file, or set data.verify: false to use it knowingly.")
    return {"path": str(path.absolute()), "sha256": digest,
            "verified": bool(verify and accepted)}


def digest_cache_path() -> Path:
    """``$GOSSIPFL_CACHE/checksums.json``, else ``~/.cache/gossipfl/checksums.json``."""
    folder = os.environ.get("GOSSIPFL_CACHE")
    base = Path(folder).expanduser() if folder else Path.home() / ".cache" / "gossipfl"
    return base / "checksums.json"


def cached_digest(path: Path) -> str:
    """SHA-256 of ``path``, computed once per (path, :func:`~gossipfl.io.file_stamp`): a
    second load of the same files reads the digest from :func:`digest_cache_path`."""
    key, stamp = str(path.absolute()), list(file_stamp(path.stat()))
    cache = _read_digest_cache()
    entry = cache.get(key)
    if isinstance(entry, dict) and entry.get("stamp") == stamp and entry.get("sha256"):
        return str(entry["sha256"])
    digest = file_digest(path)
    cache = {k: v for k, v in cache.items() if Path(k).exists()}  # forget deleted files
    cache[key] = {"stamp": stamp, "sha256": digest}
    try:
        atomic_write_text(digest_cache_path(), json.dumps(cache, indent=1) + "\n")
    except GossipflError:
        pass  # an unwritable cache costs time, not correctness
    return digest


def _read_digest_cache() -> dict:
    try:
        cache = json.loads(digest_cache_path().read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


# --------------------------------------------------------------------------------------------
# IDX
# --------------------------------------------------------------------------------------------


#: decompressed files kept in this process (the runs of a study load the same files),
#: their total size at most :data:`KEPT_BYTES`, the least recently read let go first
_KEPT: collections.OrderedDict[tuple, bytes] = collections.OrderedDict()
KEPT_BYTES = 256 * 2**20


def read_bytes(path: str | Path) -> bytes:
    """The content of ``path``, transparently gunzipped when it starts with the gzip magic.

    A compressed file read again in this process, unchanged (the same
    :func:`~gossipfl.io.file_stamp`: inode, size, modification and change times), is not
    decompressed again: a study's runs load the same dataset files, whose
    decompression was most of a load (0.3 s of 0.55 s for Fashion-MNIST's on a 2-core CPU).
    The bytes are immutable, so every caller gets the same content."""
    path = Path(path)
    try:
        key = (str(path.absolute()), *file_stamp(path.stat()))
        if key in _KEPT:
            _KEPT.move_to_end(key)
            return _KEPT[key]
        raw = path.read_bytes()
        if raw[:2] != GZIP_MAGIC:
            return raw
        data = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise GossipflError(f"{KEY}: cannot read {path} ({error_reason(exc)}).") from exc
    if len(data) <= KEPT_BYTES:
        _KEPT[key] = data
        while sum(len(v) for v in _KEPT.values()) > KEPT_BYTES:
            _KEPT.popitem(last=False)
    return data


def parse_idx(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """Parse an IDX buffer: ``00 00 <type> <ndim>``, ndim big-endian uint32 sizes, then data.

    The result has the native-endian dtype of the type code and shape ``(d_1, ..., d_ndim)``.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise _idx_error(source, "bad magic number: it must start with two zero bytes")
    code, ndim = data[2], data[3]
    if code not in IDX_DTYPES:
        raise _idx_error(source, f"unknown type code 0x{code:02x}")
    if ndim < 1:
        raise _idx_error(source, "zero dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise _idx_error(source, f"truncated header: {len(data)} bytes, need {header}")
    dims = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = IDX_DTYPES[code]
    expected = math.prod(dims) * dtype.itemsize  # Python ints: no overflow to negative
    found = len(data) - header
    if found != expected:
        kind = "truncated" if found < expected else "trailing bytes"
        raise _idx_error(source, f"{kind}: expected {expected} data bytes, found {found}")
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)
    return array.astype(dtype.newbyteorder("="))  # a writable native-endian copy


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (raw or gzip-compressed)."""
    return parse_idx(read_bytes(path), str(path))


def _idx_error(source: str, why: str) -> GossipflError:
    return GossipflError(f"{KEY}: {source} is not a valid IDX file ({why}).")


# --------------------------------------------------------------------------------------------
# CIFAR pickle batches
# --------------------------------------------------------------------------------------------

_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _ArrayUnpickler(pickle.Unpickler):
    """An unpickler that builds only dicts, lists, bytes and NumPy arrays (no code execution)."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name}")
        if module.startswith("numpy.core.") and hasattr(np, "_core"):
            module = "numpy._core." + module.removeprefix("numpy.core.")  # NumPy 2 name
        return super().find_class(module, name)


def read_cifar_batch(path: str | Path, label_key: str = "labels") -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR "python version" batch: ``b"data"`` uint8 [N, 3072] and a label list.

    Returns images uint8 ``[N, 3, 32, 32]`` (channel-major rows, as stored) and labels int64 [N].
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            entry = _ArrayUnpickler(handle, encoding="bytes").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError) as exc:
        raise GossipflError(
            f"{KEY}: {path} is not a valid CIFAR batch ({error_reason(exc)})."
        ) from exc
    if not isinstance(entry, dict):
        raise GossipflError(f"{KEY}: {path} is not a valid CIFAR batch (not a dict).")
    entry = {k.encode() if isinstance(k, str) else k: v for k, v in entry.items()}
    if b"data" not in entry or label_key.encode() not in entry:
        raise GossipflError(
            f"{KEY}: {path} is not a valid CIFAR batch (missing b'data' or b'{label_key}')."
        )
    data = np.asarray(entry[b"data"])
    labels = np.asarray(entry[label_key.encode()], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise GossipflError(
            f"{KEY}: {path} is not a valid CIFAR batch "
            f"(data must be uint8 [N, 3072], got {data.dtype} {list(data.shape)})."
        )
    if labels.shape != (data.shape[0],):
        raise GossipflError(
            f"{KEY}: {path} is not a valid CIFAR batch "
            f"({data.shape[0]} images but {labels.size} labels)."
        )
    return data.reshape(-1, 3, 32, 32), labels


def extract_archive(archive: str | Path, dest: str | Path) -> Path:
    """Extract a ``.tar.gz`` into ``dest`` (members must stay inside ``dest``)."""
    archive, dest = Path(archive), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(dest, filter="data")
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        raise GossipflError(f"{KEY}: cannot extract {archive} ({error_reason(exc)}).") from exc
    return dest


# --------------------------------------------------------------------------------------------
# Checksums and downloads
# --------------------------------------------------------------------------------------------


def file_digest(path: str | Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file (``sha256`` or ``md5``)."""
    hasher = _hasher(algorithm)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def verify_checksum(path: str | Path, expected: str, algorithm: str = "sha256") -> None:
    """Raise when the file's digest differs from ``expected``."""
    actual = file_digest(path, algorithm)
    if actual != expected.lower():
        raise checksum_error(Path(path), algorithm, expected, actual)


def checksum_error(path: Path, algorithm: str, expected: str, actual: str) -> GossipflError:
    """The error for a file whose checksum does not match."""
    return GossipflError(
        f"{KEY}: checksum mismatch for {path}: expected {algorithm} {expected.lower()}, "
        f"got {actual}."
    )


def fetch_url(url: str, handle: io.BufferedIOBase, timeout: float = 60.0) -> None:
    """Copy the body of ``url`` (http, https or file) into an open binary file."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        shutil.copyfileobj(response, handle, 1 << 20)


Fetcher = Callable[[str, io.BufferedIOBase], None]


def download_file(url: str, dest: str | Path, checksum: str, algorithm: str = "sha256",
                  fetch: Fetcher | None = None) -> Path:
    """Download ``url`` to ``dest`` atomically: temp file in the same folder, verify, rename.

    Network errors propagate as ``OSError``; a checksum mismatch raises a GossipflError naming
    the file, the expected and the actual digest, and leaves nothing behind.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600
        with os.fdopen(fd, "wb") as handle:
            (fetch or fetch_url)(url, handle)
        actual = file_digest(tmp, algorithm)
        if actual != checksum.lower():
            raise checksum_error(dest, algorithm, checksum, actual)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def download_remote(remote: RemoteFile, folder: str | Path, fetch: Fetcher | None = None) -> Path:
    """Download one :class:`RemoteFile` into ``folder``, trying its mirrors in order.

    Raises the checksum error if a mirror served wrong bytes and none served right ones,
    otherwise ``OSError`` with the last network failure.
    """
    failure: Exception | None = None
    for url in remote.urls:
        try:
            return download_file(url, Path(folder) / remote.name, remote.checksum,
                                 remote.algorithm, fetch)
        except GossipflError as exc:
            failure = exc
        except (OSError, ValueError) as exc:
            failure = failure if isinstance(failure, GossipflError) else exc
    if isinstance(failure, GossipflError):
        raise failure
    raise OSError(f"{remote.name}: {error_reason(failure)}") if failure else OSError("no mirror")


def _hasher(algorithm: str):
    if algorithm not in HASH_ALGORITHMS:
        raise ValueError(f"unsupported checksum algorithm {algorithm!r}")
    return hashlib.new(algorithm)


def error_reason(exc: BaseException | None) -> str:
    """A short description of an exception for an error sentence."""
    text = str(exc).strip() if exc is not None else ""
    return text.rstrip(".") or type(exc).__name__
