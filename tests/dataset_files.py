"""Small dataset files in the real formats, written from the format descriptions (independent
of the readers under test), for the tests that read them: MNIST's gzip IDX files and CIFAR's
pickled batches (tests/data/test_data_formats.py), EMNIST-L and LEAF's FEMNIST and Shakespeare
JSON (tests/data/test_leaf_emnist.py), a Tiny-ImageNet folder tree of JPEGs
(tests/data/test_tiny_imagenet.py), their archives and damaged copies
(tests/data/test_damaged_files.py); tests/test_reliability*.py use them too."""

from __future__ import annotations

import gzip
import json
import struct
import tarfile
import zipfile
from pathlib import Path

import numpy as np
from PIL import Image

# --------------------------------------------------------------------------------------------
# IDX and MNIST
# --------------------------------------------------------------------------------------------

IDX_CODES = {np.uint8: (0x08, "B"), np.int16: (0x0B, ">h"), np.int32: (0x0C, ">i"),
             np.float32: (0x0D, ">f"), np.float64: (0x0E, ">d")}


def idx_bytes(array: np.ndarray) -> bytes:
    code, fmt = IDX_CODES[array.dtype.type]
    header = struct.pack(">BBBB", 0, 0, code, array.ndim)
    header += b"".join(struct.pack(">I", d) for d in array.shape)
    body = b"".join(struct.pack(fmt, v) for v in array.ravel().tolist())
    return header + body


def write_idx(path: Path, array: np.ndarray) -> Path:
    data = idx_bytes(array)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def mnist_arrays(seed: int = 0, train: int = 6, test: int = 4):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (train, 28, 28), dtype=np.uint8), rng.integers(0, 10, train),
            rng.integers(0, 256, (test, 28, 28), dtype=np.uint8), rng.integers(0, 10, test))


def write_mnist_folder(folder: Path, arrays, suffix: str = ".gz") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte"]
    for name, array in zip(names, arrays, strict=True):
        dtype = np.uint8
        write_idx(folder / f"{name}{suffix}", np.asarray(array, dtype=dtype))
    return folder


# --------------------------------------------------------------------------------------------
# CIFAR
# --------------------------------------------------------------------------------------------


def pickle_short(b: bytes) -> bytes:
    """A Python 2 str in a pickle: SHORT_BINSTRING, or BINSTRING from 256 bytes."""
    return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b


def _pickle_int(v: int) -> bytes:
    return b"J" + struct.pack("<i", v)


def py2_cifar_pickle(data: np.ndarray, labels, label_key: bytes) -> bytes:
    """A batch exactly as Python 2 cPickle wrote the CIFAR "python version" files: py2 str
    (BINSTRING) keys, a numpy.core.multiarray._reconstruct array and a list of int labels."""
    out = b"\x80\x02}(" + pickle_short(b"data")
    out += b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85"
    out += pickle_short(b"b") + b"\x87R(K\x01" + _pickle_int(data.shape[0])
    out += _pickle_int(data.shape[1]) + b"\x86"
    out += b"cnumpy\ndtype\n" + pickle_short(b"u1") + b"K\x00K\x01\x87R"
    out += b"(K\x03" + pickle_short(b"|") + b"NNN" + _pickle_int(-1) + _pickle_int(-1)
    out += b"K\x00tb\x89" + pickle_short(data.tobytes()) + b"tb"
    out += pickle_short(label_key) + b"](" + b"".join(_pickle_int(int(v)) for v in labels)
    return out + b"eu."


def cifar_arrays(num_classes: int, seed: int = 0, per_batch: int = 3):
    rng = np.random.default_rng(seed)
    train = [(rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
              rng.integers(0, num_classes, per_batch)) for _ in range(5)]
    test = (rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            rng.integers(0, num_classes, per_batch))
    return train, test


def write_cifar10_folder(folder: Path, train, test) -> Path:
    batches = folder / "cifar-10-batches-py"
    batches.mkdir(parents=True)
    for i, (x, y) in enumerate(train, 1):
        (batches / f"data_batch_{i}").write_bytes(py2_cifar_pickle(x, y, b"labels"))
    (batches / "test_batch").write_bytes(py2_cifar_pickle(*test, b"labels"))
    return batches


# --------------------------------------------------------------------------------------------
# Archives, and damaged copies
# --------------------------------------------------------------------------------------------


def write_tar_gz(archive: Path, folder: Path) -> Path:
    """``folder`` as ``archive`` (a .tar.gz), under the folder's own name."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return archive


def write_zip(archive: Path, folder: Path, first: str | None = None) -> Path:
    """``folder``'s files as a deflated ``archive``, under the folder's own name (the file
    named ``first`` first, the others sorted)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    files = sorted((p for p in folder.rglob("*") if p.is_file()),
                   key=lambda p: (p.name != first, p))
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in files:
            bundle.write(path, path.relative_to(folder.parent))
    return archive


def damage(path: Path, start: int, stop: int) -> Path:
    """Invert the bytes ``start:stop`` of ``path`` (a disk or a transfer that went wrong)."""
    data = bytearray(path.read_bytes())
    data[start:stop] = bytes(b ^ 0xFF for b in data[start:stop])
    path.write_bytes(bytes(data))
    return path


def member_data(archive: Path, index: int) -> tuple[int, int]:
    """Where the compressed bytes of the ``index``-th member of a zip ``archive`` lie:
    (offset, size)."""
    with zipfile.ZipFile(archive) as bundle:
        info = bundle.infolist()[index]
    with open(archive, "rb") as handle:  # the local header: 30 bytes, the name, the extra
        handle.seek(info.header_offset + 26)
        name, extra = struct.unpack("<HH", handle.read(4))
    return info.header_offset + 30 + name + extra, info.compress_size


# --------------------------------------------------------------------------------------------
# EMNIST-L and LEAF (FEMNIST, Shakespeare)
# --------------------------------------------------------------------------------------------

EMNIST_STEMS = {
    ("train", "x"): "emnist-letters-train-images-idx3-ubyte",
    ("train", "y"): "emnist-letters-train-labels-idx1-ubyte",
    ("test", "x"): "emnist-letters-test-images-idx3-ubyte",
    ("test", "y"): "emnist-letters-test-labels-idx1-ubyte",
}


def idx_gz(array: np.ndarray) -> bytes:
    """gzip of an IDX file: 0x0000, type 0x08 (ubyte), ndim, big-endian sizes, the bytes."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(struct.pack(">I", d)
                                                        for d in array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def emnist_arrays(n: int, labels: list[int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), np.array(labels, dtype=np.uint8)


def write_emnist(folder: Path, train_labels: list[int], test_labels: list[int]) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {"train": emnist_arrays(len(train_labels), train_labels, 1),
              "test": emnist_arrays(len(test_labels), test_labels, 2)}
    for (split, kind), stem in EMNIST_STEMS.items():
        x, y = arrays[split]
        (folder / f"{stem}.gz").write_bytes(idx_gz(x if kind == "x" else y))
    return arrays


def write_leaf(folder: Path, per_file: list[dict[str, tuple[list, list]]]) -> Path:
    """One LEAF JSON file per dict {user: (x, y)} in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, users in enumerate(per_file):
        content = {"users": list(users), "num_samples": [len(x) for x, _ in users.values()],
                   "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()}}
        (folder / f"all_data_{i}_niid_0_keep_0_train_9.json").write_text(json.dumps(content))
    return folder


def text_samples(text: str, n: int, offset: int = 0) -> tuple[list[str], list[str]]:
    """n (80 characters, next character) windows of ``text`` repeated."""
    long = text * (1 + (n + offset + 81) // max(len(text), 1))
    xs = [long[i + offset: i + offset + 80] for i in range(n)]
    ys = [long[i + offset + 80] for i in range(n)]
    return xs, ys


SPEECH = "To be, or not to be: that is the question.\nWhether 'tis nobler (in the mind)? "


def write_shakespeare(root: Path, sizes=(5, 12, 7), test_size: int = 3) -> Path:
    base = root / "shakespeare" / "data"
    users = [f"THE_TRAGEDY_{k}" for k in range(len(sizes))]
    write_leaf(base / "train", [{users[0]: text_samples(SPEECH, sizes[0])},
                                {u: text_samples(SPEECH, n, 3 * k)
                                 for k, (u, n) in enumerate(zip(users[1:], sizes[1:]), 1)}])
    write_leaf(base / "test", [{u: text_samples(SPEECH, test_size, 7) for u in users}])
    return base


def femnist_user(n: int, seed: int) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    return rng.random((n, 784)).round(3).tolist(), rng.integers(0, 62, n).tolist()


# --------------------------------------------------------------------------------------------
# Tiny-ImageNet
# --------------------------------------------------------------------------------------------

WNIDS = ["n01443537", "n01629819", "n01641577"]
COLOURS = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]  # one solid colour per class
TRAIN_PER_CLASS = 4
VAL = [("val_0.JPEG", 2), ("val_1.JPEG", 0), ("val_2.JPEG", 1), ("val_3.JPEG", 1),
       ("val_4.JPEG", 0), ("val_5.JPEG", 2)]


def jpeg(path: Path, colour, mode: str = "RGB", side: int = 64) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", (side, side), colour)
    (image.convert("L") if mode == "L" else image).save(path, "JPEG", quality=95)


def write_tree(root: Path) -> Path:
    """A small Tiny-ImageNet tree in the real layout under ``root/tiny-imagenet-200``."""
    folder = root / "tiny-imagenet-200"
    folder.mkdir(parents=True)
    (folder / "wnids.txt").write_text("\n".join(WNIDS) + "\n")
    for wnid, colour in zip(WNIDS, COLOURS, strict=True):
        for i in range(TRAIN_PER_CLASS):
            jpeg(folder / "train" / wnid / "images" / f"{wnid}_{i}.JPEG", colour)
        (folder / "train" / wnid / f"{wnid}_boxes.txt").write_text("")
    lines = [f"{name}\t{WNIDS[c]}\t0\t0\t63\t63" for name, c in VAL]
    (folder / "val" / "val_annotations.txt").parent.mkdir(parents=True)
    (folder / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    for name, c in VAL:
        jpeg(folder / "val" / "images" / name, COLOURS[c])
    return folder
