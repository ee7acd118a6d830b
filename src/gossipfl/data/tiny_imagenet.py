"""Tiny-ImageNet (Le & Yang 2015, "Tiny ImageNet Visual Recognition Challenge") from its
standard folder layout, decoded once into a cached tensor file.

The layout of ``tiny-imagenet-200.zip``::

    tiny-imagenet-200/wnids.txt                      200 WordNet ids; class c = line c
    tiny-imagenet-200/train/<wnid>/images/*.JPEG     500 64x64 images per class
    tiny-imagenet-200/val/val_annotations.txt        <file> TAB <wnid> TAB <bbox ...> per line
    tiny-imagenet-200/val/images/*.JPEG              10 000 images: gossipfl's test set

(the ``test/`` folder has no labels and is not read). Decoding 110 000 JPEGs takes a while, so
the uint8 tensors are written once, atomically, to ``gossipfl-cache.pt`` in the dataset folder
and reused while the listing they were decoded from (paths, sizes, modification times) is the
same. Every problem with the files is one sentence naming the file.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from gossipfl.data import formats
from gossipfl.errors import GossipflError
from gossipfl.io import WriteError, atomic_torch_save

FOLDER = "tiny-imagenet-200"
ARCHIVE = "tiny-imagenet-200.zip"
CACHE = "gossipfl-cache.pt"
SIDE = 64
CLASSES = 200
KEY = "data.dataset"
REMOTE = formats.SOURCES["tiny_imagenet"][0]  # the archive, with its MD5


def dataset_folder(folder: Path) -> Path | None:
    """The ``tiny-imagenet-200`` folder in or at ``folder`` (recognized by its wnids.txt)."""
    for candidate in (folder / FOLDER, folder):
        if (candidate / "wnids.txt").is_file():
            return candidate
    return None


def extract(archive: Path, dest: Path, verify: bool) -> Path:
    """Check the archive's MD5 (unless ``verify`` is off) and unzip it into ``dest``, all or
    nothing (:func:`formats.extract_archive`: a damaged member leaves nothing behind); the
    archive must hold ``tiny-imagenet-200/wnids.txt``."""
    if verify:
        formats.verify_checksum(archive, REMOTE.checksum, REMOTE.algorithm)
    formats.extract_archive(archive, dest, needs=(f"{FOLDER}/wnids.txt",))
    return dest / FOLDER


def read(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """uint8 ``[N, 3, 64, 64]`` images and int64 labels of the train and val splits of the
    dataset folder ``folder``, from its cache when the cache matches the files."""
    wnids = read_wnids(folder / "wnids.txt")
    train = train_files(folder, wnids)
    val = val_files(folder, wnids)
    signature = listing_signature(folder, [folder / "wnids.txt", *(p for p, _ in train),
                                           *(p for p, _ in val)])
    cache = folder / CACHE
    cached = _read_cache(cache, signature)
    if cached is not None:
        return cached
    arrays = (decode(p for p, _ in train), np.array([c for _, c in train], dtype=np.int64),
              decode(p for p, _ in val), np.array([c for _, c in val], dtype=np.int64))
    try:
        atomic_torch_save({"signature": signature,
                           **{k: torch.from_numpy(a) for k, a in zip(_KEYS, arrays, strict=True)}},
                          cache)
    except WriteError as exc:
        warnings.warn(f"{exc}; Tiny-ImageNet will be decoded again next time.", stacklevel=2)
    return arrays


_KEYS = ("train_x", "train_y", "test_x", "test_y")


def read_wnids(path: Path) -> list[str]:
    """The class ids, one per line, in the order that numbers the classes."""
    try:
        wnids = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise GossipflError(f"{KEY}: cannot read {path} ({formats.error_reason(exc)}).") from exc
    if not wnids or len(set(wnids)) != len(wnids):
        raise GossipflError(f"{KEY}: {path} must list distinct class ids, one per line.")
    if len(wnids) > CLASSES:
        raise GossipflError(f"{KEY}: {path} lists {len(wnids)} classes; Tiny-ImageNet has "
                            f"{CLASSES}.")
    return wnids


def train_files(folder: Path, wnids: list[str]) -> list[tuple[Path, int]]:
    """``(image, class)`` for ``train/<wnid>/images/*.JPEG``, classes in wnids order."""
    out = []
    for label, wnid in enumerate(wnids):
        images = folder / "train" / wnid / "images"
        if not images.is_dir():
            raise GossipflError(f"{KEY}: {images} is missing (class {wnid} of "
                                f"{folder / 'wnids.txt'}).")
        found = sorted(images.glob("*.JPEG"))
        if not found:
            raise GossipflError(f"{KEY}: {images} holds no .JPEG images, so class {wnid} of "
                                f"{folder / 'wnids.txt'} would have no training samples.")
        out += [(path, label) for path in found]
    return out


def val_files(folder: Path, wnids: list[str]) -> list[tuple[Path, int]]:
    """``(image, class)`` for the lines of ``val/val_annotations.txt``, in file order."""
    path = folder / "val" / "val_annotations.txt"
    index = {wnid: c for c, wnid in enumerate(wnids)}
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise GossipflError(f"{KEY}: cannot read {path} ({formats.error_reason(exc)}).") from exc
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise GossipflError(f"{KEY}: {path} line {number} must hold a file name and a "
                                f"class id separated by a tab.")
        name, wnid = fields[0], fields[1]
        if wnid not in index:
            raise GossipflError(f"{KEY}: {path} line {number} names class {wnid!r}, which is "
                                f"not in {folder / 'wnids.txt'}.")
        out.append((folder / "val" / "images" / name, index[wnid]))
    if not out:
        raise GossipflError(f"{KEY}: {path} lists no images.")
    return out


def decode(paths) -> np.ndarray:
    """The JPEGs at ``paths`` as uint8 ``[N, 3, 64, 64]`` RGB (grayscale ones converted)."""
    from PIL import Image, UnidentifiedImageError

    images = []
    for path in paths:
        try:
            with Image.open(path) as image:
                rgb = np.asarray(image.convert("RGB"))
        except (OSError, UnidentifiedImageError, SyntaxError) as exc:
            raise GossipflError(f"{KEY}: cannot decode {path} "
                                f"({formats.error_reason(exc)}).") from exc
        if rgb.shape != (SIDE, SIDE, 3):
            raise GossipflError(f"{KEY}: {path} is {rgb.shape[1]}x{rgb.shape[0]} pixels; "
                                f"Tiny-ImageNet images are {SIDE}x{SIDE}.")
        images.append(rgb)
    return np.ascontiguousarray(np.stack(images).transpose(0, 3, 1, 2))


def listing_signature(folder: Path, paths: list[Path]) -> str:
    """SHA-256 of every path (relative to ``folder``) with its size and modification time:
    the files a cache was decoded from."""
    digest = hashlib.sha256()
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError as exc:
            raise GossipflError(f"{KEY}: cannot read {path} "
                                f"({formats.error_reason(exc)}).") from exc
        digest.update(f"{path.relative_to(folder)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _read_cache(path: Path, signature: str):
    if not path.is_file():
        return None
    try:
        saved = torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 - a damaged cache is decoded again, not an error
        return None
    if not isinstance(saved, dict) or saved.get("signature") != signature:
        return None
    return tuple(saved[k].numpy() for k in _KEYS)
