"""File formats and downloads: IDX (MNIST family), CIFAR pickle batches, checksummed fetches.

Everything here reads bytes from disk and returns NumPy arrays; normalization and tensors are
the job of :mod:`gossipfl.data.datasets`. Every problem with a file raises
:class:`~gossipfl.errors.GossipflError` with one sentence naming the file.
"""

from __future__ import annotations

import collections
import glob
import gzip
import hashlib
import io
import json
import lzma
import math
import os
import pickle
import shutil
import socket
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gossipfl.errors import GossipflError
from gossipfl.io import atomic_write_text, current_umask, file_stamp, user_path

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
    base = user_path(folder, "GOSSIPFL_CACHE") if folder else Path.home() / ".cache" / "gossipfl"
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
    except (OSError, ValueError, RecursionError):  # unreadable, not JSON, nested too deep
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
}


def _latin1_bytes(*args: object) -> bytes:
    """``_codecs.encode(text, "latin1")``: how pickle protocol 2 stores non-empty bytes."""
    if len(args) != 2 or not isinstance(args[0], str) or args[1] not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"unexpected _codecs.encode{args!r:.40}")
    return args[0].encode("latin1")


def _empty_bytes(*args: object) -> bytes:
    """``__builtin__.bytes()``: how pickle protocol 2 stores ``b""``."""
    if args:
        raise pickle.UnpicklingError(f"unexpected bytes{args!r:.40}")
    return b""


#: the only calls protocol 2 needs to store bytes, each taking the arguments it needs only
_BYTES_BUILDERS = {
    ("_codecs", "encode"): _latin1_bytes,
    ("__builtin__", "bytes"): _empty_bytes,
    ("builtins", "bytes"): _empty_bytes,
}

#: what unpickling an untrusted batch may raise besides UnpicklingError (a call of an allowed
#: global with wrong arguments, a bad memo reference, a dtype or shape that cannot be)
_PICKLE_ERRORS = (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError,
                  LookupError, AttributeError, OverflowError, MemoryError, RecursionError)


class _ArrayUnpickler(pickle.Unpickler):
    """An unpickler that builds only dicts, lists, bytes and NumPy arrays (no code execution):
    the globals of NumPy arrays (:data:`_ALLOWED_GLOBALS`) and of protocol 2's bytes
    (:data:`_BYTES_BUILDERS`: latin-1 text to bytes, empty bytes), nothing else."""

    def find_class(self, module: str, name: str):
        if (module, name) in _BYTES_BUILDERS:
            return _BYTES_BUILDERS[module, name]
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name}")
        if module.startswith("numpy.core.") and hasattr(np, "_core"):
            module = "numpy._core." + module.removeprefix("numpy.core.")  # NumPy 2 name
        return super().find_class(module, name)


def read_cifar_batch(path: str | Path, label_key: str = "labels") -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR "python version" batch: ``b"data"`` uint8 [N, 3072] and a label list.

    Returns images uint8 ``[N, 3, 32, 32]`` (channel-major rows, as stored) and labels int64 [N].
    Checked: the pickle builds only arrays, bytes and containers, is a dict with both keys,
    the data is uint8 [N, 3072], and there are N labels, each an integer
    (:func:`integer_labels`); else one sentence, ``<path> is not a valid CIFAR batch (why)``.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            entry = _ArrayUnpickler(handle, encoding="bytes").load()
        data, labels = _batch_arrays(entry, label_key)
    except _PICKLE_ERRORS as exc:
        raise GossipflError(
            f"{KEY}: {path} is not a valid CIFAR batch ({error_reason(exc)})."
        ) from exc
    return data.reshape(-1, 3, 32, 32), labels


def _batch_arrays(entry: object, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """The data and labels of an unpickled batch; ValueError or TypeError saying what is
    wrong."""
    if not isinstance(entry, dict):
        raise TypeError("not a dict")
    entry = {k.encode() if isinstance(k, str) else k: v for k, v in entry.items()}
    if b"data" not in entry or label_key.encode() not in entry:
        raise ValueError(f"missing b'data' or b'{label_key}'")
    data = np.asarray(entry[b"data"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"data must be uint8 [N, 3072], got {data.dtype} {list(data.shape)}")
    labels = integer_labels(entry[label_key.encode()])
    if labels.shape != (data.shape[0],):
        raise ValueError(f"{data.shape[0]} images but {labels.size} labels")
    return data, labels


def integer_labels(values: object) -> np.ndarray:
    """``values`` (an array or a list) as int64 labels: integers within 64 bits, or floats
    with whole values; else ValueError naming the first value that is not (a fraction, a
    NaN, a string, None, an integer beyond 64 bits, a boolean)."""
    try:
        array = np.asarray(values)
    except (ValueError, TypeError, OverflowError) as exc:  # ragged nested lists
        raise ValueError(f"labels must be integers ({error_reason(exc)})") from None
    flat = array.ravel()
    if array.dtype.kind == "i":
        fits = np.ones(flat.shape, bool)
    elif array.dtype.kind == "u":
        fits = flat <= np.iinfo(np.int64).max
    elif array.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            fits = np.isfinite(flat) & (flat == np.floor(flat)) & (np.abs(flat) < 2.0**63)
    elif array.dtype.kind == "O":
        fits = np.array([_is_int64(v) for v in flat], bool)
    else:
        fits = np.zeros(flat.shape, bool)
    if not fits.all():
        bad = flat[int(np.argmin(fits))]
        bad = bad.item() if isinstance(bad, np.generic) else bad
        raise ValueError(f"labels must be integers, found {bad!r:.40}")
    return flat.astype(np.int64).reshape(array.shape)


def _is_int64(value: object) -> bool:
    return (isinstance(value, int | np.integer) and not isinstance(value, bool)
            and -2**63 <= value < 2**63)


# --------------------------------------------------------------------------------------------
# Archives
# --------------------------------------------------------------------------------------------

#: what reading a damaged tar or zip archive raises (gzip.BadGzipFile is an OSError; zipfile
#: says NotImplementedError for an unknown compression method, RuntimeError for encryption)
ARCHIVE_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError, tarfile.TarError,
                  zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError)
EXTRACTING = ".extract-"  # starts the names of the temporary folders of extractions


def extract_archive(archive: str | Path, dest: str | Path,
                    unpack: Callable[[Path, Path], None] | None = None,
                    needs: tuple[str, ...] = ()) -> Path:
    """Extract ``archive`` into ``dest``, all or nothing: ``unpack(archive, folder)``
    (default :func:`unpack_all`: every member of a tar or zip archive) writes into a new
    temporary folder inside ``dest`` (``.extract-<host>-<pid>-*``: on the file system ``dest``
    is on, a mount or a link to another disk included, and needing no more than ``dest`` to be
    writable); only when it has finished and every path in ``needs`` (relative to the
    archive's root) is there are its entries moved into ``dest``, replacing entries of the same
    name (left incomplete by an earlier failure). A damaged archive (one of
    :data:`ARCHIVE_ERRORS`), a failed write (disk full) or an archive without ``needs`` is one
    sentence naming it and leaves nothing behind. Temporary folders of this host's
    extractions whose process is gone (killed) are removed first; another host's (a shared
    data folder) are left alone."""
    archive, dest = Path(archive), Path(dest)
    work, made = None, not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        _remove_stale_extractions(dest)
        work = Path(tempfile.mkdtemp(prefix=f"{_extraction_prefix()}{os.getpid()}-", dir=dest))
        unpacked = work / "new"
        unpacked.mkdir()
        (unpack or unpack_all)(archive, unpacked)
        _check_contains(archive, unpacked, needs)
        for entry in sorted(unpacked.iterdir()):
            _move_into_place(entry, dest / entry.name, work)
    except ARCHIVE_ERRORS as exc:
        why = error_reason(exc)
        if not (isinstance(exc, OSError) and exc.errno):  # the archive's fault, not a write's
            why = f"it is damaged or incomplete: {why}"
        raise GossipflError(f"{KEY}: cannot extract {archive} into {dest} ({why}).") from exc
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        if made:
            _remove_empty([dest])  # a failed extraction leaves no folder it made
    return dest


def _check_contains(archive: Path, unpacked: Path, needs: tuple[str, ...]) -> None:
    missing = [need for need in needs if not (unpacked / need).exists()]
    if missing:
        raise GossipflError(f"{KEY}: {archive} does not contain {missing[0]}, so it is "
                            f"incomplete or not the official {archive.name}.")


def unpack_all(archive: Path, folder: Path) -> None:
    """Every member of a ``.zip`` or of a tar archive (compressed or not) into ``folder``:
    member paths are kept inside it (tarfile's ``data`` filter), and every byte of the archive
    is read (gzip's and zip's CRCs check the whole of it)."""
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(folder)  # zipfile drops absolute and ".." member paths
        return
    with tarfile.open(archive, "r:*") as tar:
        tar.extractall(folder, filter="data")
        while tar.fileobj.read(1 << 20):  # to the end: a damaged tail fails gzip's CRC
            pass


def _move_into_place(entry: Path, target: Path, work: Path) -> None:
    """Rename ``entry`` to ``target``; an old ``target`` folder is first moved into ``work``
    (deleted with it), an old file replaced."""
    if target.is_dir() and not target.is_symlink():
        target.rename(work / f"old-{target.name}")
    os.replace(entry, target)


def _extraction_prefix() -> str:
    """The start of this host's temporary extraction folders' names (the pid follows)."""
    return f"{EXTRACTING}{socket.gethostname().replace('-', '_')}-"


def _remove_stale_extractions(dest: Path) -> None:
    """Delete the temporary folders in ``dest`` of this host's extractions whose process is
    gone."""
    prefix = _extraction_prefix()
    for folder in dest.glob(f"{glob.escape(prefix)}*"):
        pid = folder.name.removeprefix(prefix).split("-")[0]
        if pid.isdigit() and not _process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True


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
    the file, the expected and the actual digest. A failed download leaves nothing behind,
    not even the folders it created for ``dest``.
    """
    dest = Path(dest)
    created = [p for p in (dest.parent, *dest.parent.parents) if not p.exists()]
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part",
                                        dir=dest.parent)
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
    except BaseException:
        _remove_empty(created)
        raise
    return dest


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


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
    """A short description of an exception for an error sentence: its message's first line
    (tarfile's, for one, lists each compression it tried on a line of its own)."""
    lines = str(exc).strip().splitlines() if exc is not None else []
    return (lines[0].rstrip(".:") if lines else "") or type(exc).__name__
