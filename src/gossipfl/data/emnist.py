"""EMNIST-L: the first ten letters (a–j) of EMNIST "letters" (Cohen et al., "EMNIST: an
extension of MNIST to handwritten letters", 2017), as used by the FedSAGD experiments.

Files: the official gzip IDX files ``emnist-letters-{train,test}-{images-idx3,labels-idx1}-ubyte``
(``.gz`` or not), found in ``<root>/emnist_l/``, ``<root>/emnist/``, ``<root>/emnist/gzip/``,
torchvision's ``<root>/EMNIST/raw/`` or ``<root>/``; or the official archive ``gzip.zip`` in one
of those folders, whose four letters files are then extracted into ``<root>/emnist_l/``.
Downloads fetch that archive (about 536 MiB) from NIST.

Labels in the files are 1..26 (a..z); samples with labels 1..10 are kept and mapped to 0..9.
EMNIST stores every image transposed relative to MNIST (column-major), so each image is
transposed back to the upright orientation. Pixels are normalized with the mean and standard
deviation of the kept training images (computed at load time from the files read).
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import numpy as np
import torch

from gossipfl.data import formats
from gossipfl.data.datasets import KEY, Dataset, Source, check_idx_pair
from gossipfl.errors import GossipflError

NAME = "emnist_l"
LETTERS = 10  # a..j
FILES = {
    "train_x": "emnist-letters-train-images-idx3-ubyte",
    "train_y": "emnist-letters-train-labels-idx1-ubyte",
    "test_x": "emnist-letters-test-images-idx3-ubyte",
    "test_y": "emnist-letters-test-labels-idx1-ubyte",
}
FOLDERS = ("emnist_l", "emnist", "emnist/gzip", "EMNIST/raw")
ARCHIVE_FOLDER = "gzip"  # the members' folder inside gzip.zip

# The official archive. Its MD5 is the one torchvision's EMNIST class pins for this file; no
# SHA-256 is published, so the download is checked by MD5 and the extracted IDX files by their
# structure (magic numbers, sizes, label range) only.
REMOTE = formats.RemoteFile(
    "gzip.zip", ("https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip",),
    "58c8d27c78d21e728a6bc7b3cc06412e", "md5")


def load_emnist_l(source: Source, download: bool, normalize: bool = True) -> Dataset:
    """EMNIST letters a–j as 1×28×28 images with labels 0..9 (``normalize``: standardize with
    the training images' mean and std; off: pixel values 0..255 as floats)."""
    folders = _folders(source.root)
    for folder in folders:
        paths = _find_files(folder) or _extract_from_archive(folder / REMOTE.name, source)
        if paths:
            return _read(paths, source, normalize)
    where = " or ".join(str(f) for f in folders)
    if not download:
        raise GossipflError(f"{KEY}: {NAME} not found in {where}, and downloads are off; put "
                            "the EMNIST letters IDX files (or gzip.zip) there or allow downloads.")
    target = source.root / FOLDERS[0]
    try:
        archive = formats.download_remote(REMOTE, target)
    except OSError as exc:
        raise GossipflError(
            f"{KEY}: {NAME} not found in {where}, and downloading it failed "
            f"({formats.error_reason(exc)}); put the files there or allow downloads.") from exc
    paths = _extract_from_archive(archive, source)
    if not paths:
        raise GossipflError(f"{KEY}: {archive} does not contain the EMNIST letters files.")
    return _read(paths, source, normalize)


def _folders(root: Path) -> list[Path]:
    return [*(root / sub for sub in FOLDERS), root]


def _find_files(folder: Path) -> dict[str, Path] | None:
    paths = {}
    for key, stem in FILES.items():
        found = next((p for p in (folder / stem, folder / f"{stem}.gz") if p.is_file()), None)
        if found is None:
            return None
        paths[key] = found
    return paths


def _extract_from_archive(archive: Path, source: Source) -> dict[str, Path] | None:
    """The four letters files taken out of the official ``gzip.zip`` into ``<root>/emnist_l``,
    all or nothing (:func:`formats.extract_archive`)."""
    if not archive.is_file():
        return None
    target = source.root / FOLDERS[0]
    formats.extract_archive(archive, target, _unpack_letters,
                            needs=tuple(f"{stem}.gz" for stem in FILES.values()))
    return _find_files(target)


def _unpack_letters(archive: Path, folder: Path) -> None:
    """The archive's letters files (``gzip/emnist-letters-*.gz``), those it has, into
    ``folder``."""
    with zipfile.ZipFile(archive) as bundle:
        members = {Path(n).name: n for n in bundle.namelist()}
        for stem in FILES.values():
            if f"{stem}.gz" in members:
                with bundle.open(members[f"{stem}.gz"]) as member, \
                        open(folder / f"{stem}.gz", "wb") as out:
                    shutil.copyfileobj(member, out, 1 << 20)


def _read(paths: dict[str, Path], source: Source, normalize: bool) -> Dataset:
    files = [formats.check_file(p, NAME, source.verify) for p in paths.values()]
    split = {}
    for part in ("train", "test"):
        xp, yp = paths[f"{part}_x"], paths[f"{part}_y"]
        x = formats.read_idx(xp)
        y = check_idx_pair(xp, x, yp, formats.read_idx(yp))
        if y.size and (y.min() < 1 or y.max() > 26):
            raise GossipflError(f"{KEY}: {yp} has labels outside the letters' 1..26 "
                                f"(found {int(y.min())}..{int(y.max())}).")
        keep = y <= LETTERS
        if not keep.any():
            found = f"only {int(y.min())}..{int(y.max())}" if y.size else "no labels"
            raise GossipflError(
                f"{KEY}: {yp} has no letters a–j (labels 1..{LETTERS}; it holds {found}), so "
                f"{NAME}'s {part} split would be empty.")
        images = np.ascontiguousarray(x[keep].transpose(0, 2, 1))[:, None]  # upright
        split[part] = (images, y[keep] - 1)
    train_x, test_x = (torch.from_numpy(split[p][0]).float() for p in ("train", "test"))
    if normalize:
        scaled = train_x / 255.0
        mean, std = scaled.mean(), scaled.std().clamp_min(1e-6)
        train_x, test_x = ((t / 255.0 - mean) / std for t in (train_x, test_x))
    return Dataset(NAME, train_x, torch.from_numpy(split["train"][1]), test_x,
                   torch.from_numpy(split["test"][1]), LETTERS, False, tuple(files))
