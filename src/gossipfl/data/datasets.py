"""Datasets as tensors: files on disk (found, extracted or downloaded), generated, or given.

A :class:`Dataset` holds the whole train and test sets as tensors. Images are float32
``[N, C, H, W]`` normalized once at load time, ``x = (pixel / 255 - mean_c) / std_c``, with
fixed per-dataset channel constants (:data:`NORMALIZATION`); augmentation (CIFAR) happens later,
batched, in normalized space (see :mod:`gossipfl.data.augment`).

Where files are looked for, in order: ``<root>/<dataset>/`` (and a few common aliases, such as
torchvision's ``<root>/FashionMNIST/raw``), ``<root>/``, and for Fashion-MNIST the Debian package
folder ``/usr/share/datasets/fashion-mnist``. ``root`` defaults to ``$GOSSIPFL_DATA`` or
``~/.cache/gossipfl/data``; a ``root`` given explicitly (``data.root``, ``--root``) is the only
place looked in. If nothing is found and downloads are allowed, the official files are
downloaded into ``<root>/<dataset>/``. Found or downloaded, the SHA-256 of every file gossipfl
knows is checked (:func:`gossipfl.data.formats.check_file`, cached by size and mtime) unless
``verify=False``; the dataset lists the files it was read from, with their digests.
"""

from __future__ import annotations

import inspect
import math
import os
import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from gossipfl.common.rng import numpy_generator
from gossipfl.data import formats, tiny_imagenet
from gossipfl.errors import GossipflError, unknown_choice
from gossipfl.io import user_path
from gossipfl.plugins import Registry

DATASETS: tuple[str, ...] = ("fashion_mnist", "mnist", "cifar10", "cifar100", "tiny_imagenet",
                             "synthetic", "emnist_l", "femnist", "shakespeare")

#: Datasets registered by plugins (:func:`register_dataset`): name -> loader.
USER_DATASETS: Registry = Registry("dataset", "data.dataset", reserved=DATASETS)


def register_dataset(name: str) -> Callable:
    """Decorator: make ``loader(root, download, **options) -> Dataset`` available as dataset
    ``name`` (``root`` is the data folder: ``data.root``, ``$GOSSIPFL_DATA`` or the cache;
    ``options`` are the config's ``data.options``)."""
    from gossipfl.plugins import check_signature, origin

    if not isinstance(name, str) or not name.strip() or name != name.strip():
        named = f" ({origin(name)})" if callable(name) else ""
        raise GossipflError(f"register_dataset needs the dataset's name, as in "
                            f"@register_dataset(\"my_data\"), got {name!r:.60}{named}.")

    def decorate(loader: Callable[..., Dataset]) -> Callable[..., Dataset]:
        check_signature(loader, ("root", "download"), f"dataset '{name}'")
        return USER_DATASETS.add(name, loader, owner=origin(loader))
    return decorate


def dataset_names() -> tuple[str, ...]:
    """Every dataset gossipfl can load: the built-in ones, then the plugins'."""
    return USER_DATASETS.names()

#: Per-channel (mean, std) of pixel / 255. MNIST: the usual constants; Fashion-MNIST: computed
#: on its training set; CIFAR-10: the values of the papers' code (FL-Simulator lineage);
#: CIFAR-100: the usual training-set statistics.
NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.491, 0.482, 0.447), (0.247, 0.243, 0.262)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "tiny_imagenet": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),  # DisPFL's code (the DFedMDC lineage)
}

IDX_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
CIFAR_LAYOUT = {
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"],
                "labels", 10),
    "cifar100": ("cifar-100-python", ["train"], ["test"], "fine_labels", 100),
}
SUBFOLDERS = {
    "fashion_mnist": ("fashion_mnist", "fashion-mnist", "FashionMNIST/raw"),
    "mnist": ("mnist", "MNIST/raw"),
    "cifar10": ("cifar10",),
    "cifar100": ("cifar100",),
    "tiny_imagenet": ("tiny_imagenet",),
}
NUM_CLASSES = {"cifar100": 100, "tiny_imagenet": 200}
#: Datasets read by their own modules: name -> (module, loader). Loaders are called as
#: ``loader(source, download, **options)``; their keyword parameters are the data.options.
FILE_LOADERS: dict[str, tuple[str, str]] = {
    "emnist_l": ("gossipfl.data.emnist", "load_emnist_l"),
    "femnist": ("gossipfl.data.leaf", "load_femnist"),
    "shakespeare": ("gossipfl.data.leaf", "load_shakespeare"),
}
SYSTEM_FOLDERS = {"fashion_mnist": (Path("/usr/share/datasets/fashion-mnist"),)}
KEY = "data.dataset"
AUGMENTED = ("cifar10", "cifar100", "tiny_imagenet")  # random crop + flip by default


@dataclass
class Dataset:
    """Train and test tensors of one dataset.

    ``train_y``/``test_y`` are int64 class labels (or float targets for user regression data,
    then ``num_classes == 0``). ``augment`` asks the trainer for random crop + flip.
    Datasets with writers (LEAF) name them in ``users`` and give each training sample's
    writer as an index into ``users`` (``train_users``, int64): the ``natural`` partition.
    """

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    augment: bool = False
    files: tuple[dict, ...] = ()  # the files read: {"path", "sha256", "verified"} each
    users: tuple[str, ...] = ()  # the writers, when the data has them
    train_users: np.ndarray | None = None  # [N_train] int64 index into users

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, e.g. ``(1, 28, 28)`` or ``(dim,)``."""
        return tuple(self.train_x.shape[1:])

    def to(self, device: str | torch.device) -> Dataset:
        """A copy with all tensors on ``device``."""
        return replace(
            self,
            train_x=self.train_x.to(device),
            train_y=self.train_y.to(device),
            test_x=self.test_x.to(device),
            test_y=self.test_y.to(device),
        )

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}, train={len(self.train_y)}, test={len(self.test_y)}, "
            f"input_shape={self.input_shape}, num_classes={self.num_classes}, "
            f"augment={self.augment})"
        )


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def load_dataset(name: str, root: str | Path | None = None, download: bool = True,
                 verify: bool = True, **options) -> Dataset:
    """Load a dataset by name (one of :data:`DATASETS`).

    Options: for ``synthetic`` see :func:`make_synthetic`; for image datasets
    ``normalize`` (default True) and ``augment`` (default: True for CIFAR). ``verify=False``
    accepts files whose SHA-256 differs from the official files' (the user's own).
    """
    options = check_dataset_options(name, options)
    if name in USER_DATASETS:
        return _user_dataset(name, root, download, options)
    if name in FILE_LOADERS:
        source = Source(data_root(root), root is not None, verify)
        return check_dataset(_file_loaders()[name](source, download, **options))
    if name == "synthetic":
        return check_dataset(make_synthetic(**options))
    normalize, augment = _image_options(name, options)
    found = _load_arrays(name, Source(data_root(root), root is not None, verify), download)
    return check_dataset(_image_dataset(name, found, normalize, augment))


def check_dataset(dataset: Dataset, origin: str | None = None,
                  name: str | None = None, empty_test: bool = False) -> Dataset:
    """A loaded dataset checked for consistency before anything is built on it: a label per
    sample, train and test samples of one shape holding at least one value (not
    ``[N, 0, 0]``), neither split empty, labels within
    ``0..num_classes - 1``, inputs of floats or token ids (int64), and users (when given)
    that own every training sample. One sentence naming the dataset and where it came from
    (``name``, else its own; ``origin``, else the folder of its files), else.
    ``empty_test``: the test split may be empty (:func:`from_tensors`' data, which the Python
    API runs without measuring)."""
    name = name or dataset.name
    where = f" ({origin})" if origin else _files_folder(dataset)
    what = f"{KEY}: {name}{where}"
    for split in ("train", "test"):
        x, y = getattr(dataset, f"{split}_x"), getattr(dataset, f"{split}_y")
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            raise GossipflError(f"{what}: {split}_x and {split}_y must be tensors, got "
                                f"{type(x).__name__} and {type(y).__name__}.")
        if x.ndim < 2:
            raise GossipflError(f"{what}: {split} inputs need a sample axis and the sample's "
                                f"own (shape [N, features...]), got {list(x.shape)}.")
        if not math.prod(x.shape[1:]):
            raise GossipflError(f"{what}: {split} samples of shape {list(x.shape[1:])} hold "
                                f"no values, so there is nothing to learn from.")
        if y.ndim != 1 or len(x) != len(y):
            raise GossipflError(f"{what}: the {split} split needs one label per sample, got "
                                f"inputs {list(x.shape)} and labels {list(y.shape)}.")
        if not len(y) and not (split == "test" and empty_test):
            raise GossipflError(f"{what}: the {split} split is empty, so there is nothing to "
                                f"{'train on' if split == 'train' else 'measure accuracy on'}.")
        if not (x.is_floating_point() or x.dtype == torch.int64):
            raise GossipflError(f"{what}: {split} inputs must be floats or int64 token ids, "
                                f"got {x.dtype}.")
        for values, kind in ((x, "inputs"), (y, "labels")):
            first = _first_not_finite(values)
            if first is not None:
                raise GossipflError(f"{what}: {split} {kind} hold NaN or infinite values "
                                    f"(the first in sample {first}), which no model can "
                                    f"learn from.")
    if dataset.train_x.shape[1:] != dataset.test_x.shape[1:] \
            or dataset.train_x.dtype != dataset.test_x.dtype:
        raise GossipflError(
            f"{what}: train and test samples differ ({dataset.train_x.dtype} "
            f"{list(dataset.train_x.shape[1:])} vs {dataset.test_x.dtype} "
            f"{list(dataset.test_x.shape[1:])}).")
    classes = dataset.num_classes
    if isinstance(classes, bool) or not isinstance(classes, int | np.integer) or classes < 0:
        raise GossipflError(f"{what}: num_classes must be an integer >= 0, got {classes!r}.")
    if classes:
        for split in ("train", "test"):
            y = getattr(dataset, f"{split}_y")
            if y.is_floating_point():
                raise GossipflError(f"{what}: {split} labels must be integer classes for "
                                    f"{classes} classes, got {y.dtype}.")
            low, high = (int(y.min()), int(y.max())) if len(y) else (0, 0)
            if low < 0 or high >= classes:
                raise GossipflError(f"{what}: {split} labels must lie in 0..{classes - 1} "
                                    f"({classes} classes), found {low}..{high}.")
    if dataset.train_users is not None:
        owners = np.asarray(dataset.train_users)
        users = len(dataset.users)
        if owners.shape != (len(dataset.train_y),) or not users \
                or owners.min() < 0 or owners.max() >= users:
            raise GossipflError(f"{what}: train_users must give each of the "
                                f"{len(dataset.train_y)} training samples one of the {users} "
                                f"users.")
        idle = np.flatnonzero(np.bincount(owners, minlength=users) == 0)
        if len(idle):
            raise GossipflError(f"{what}: user {dataset.users[idle[0]]!r} has no training "
                                f"samples, so its client would have nothing to train on.")
    return dataset


def _first_not_finite(values: torch.Tensor, rows: int = 4096) -> int | None:
    """The first sample of ``values`` holding a NaN or an infinity (None: none, or not
    floats). Their sum screens them (a NaN or an infinity makes it one; a finite sum means
    none; an order of magnitude faster than ``isfinite`` over every value), then the samples
    are searched ``rows`` at a time (a sum that overflowed finds none). Half-precision
    values are summed in float32, which their range cannot overflow in practice."""
    if not values.is_floating_point():
        return None
    wide = torch.float32 if values.element_size() < 4 else None
    if bool(torch.isfinite(values.sum(dtype=wide))):
        return None
    for start in range(0, len(values), rows):
        finite = torch.isfinite(values[start:start + rows].reshape(
            min(rows, len(values) - start), -1)).all(1)
        if not bool(finite.all()):
            return start + int(torch.nonzero(~finite)[0])
    return None


def _files_folder(dataset: Dataset) -> str:
    """`` (read from FOLDER)``: the folder holding the dataset's files, or ''."""
    paths = [str(Path(f["path"]).parent) for f in dataset.files if "path" in f]
    if not paths:
        return ""
    return f" (read from {os.path.commonpath(paths)})"


def dataset_options(name: str) -> list[str] | None:
    """The option names dataset ``name`` takes (None: no such dataset)."""
    if name in USER_DATASETS:
        return list(inspect.signature(USER_DATASETS[name]).parameters)[2:]
    if name in FILE_LOADERS:
        return list(inspect.signature(_file_loaders()[name]).parameters)[2:]
    if name == "synthetic":
        return list(inspect.signature(make_synthetic).parameters)
    return list(IMAGE_OPTIONS) if name in DATASETS else None


def check_dataset_options(name: str, options: dict) -> dict:
    """``data.options`` checked against dataset ``name`` without reading or generating any
    data: known option names, values of the annotated types (a plugin's unannotated option:
    its default's type), synthetic's ranges."""
    from gossipfl.plugins import option_hints

    if name not in USER_DATASETS and name not in DATASETS:
        raise unknown_choice(KEY, name, dataset_names())
    _check_options(name, options, dataset_options(name))
    if name in USER_DATASETS:
        return _typed_options(options, option_hints(USER_DATASETS[name]))
    if name in FILE_LOADERS:
        return _typed_options(options, typing.get_type_hints(_file_loaders()[name]))
    if name != "synthetic":
        _image_options(name, options)
        return options
    options = _typed_options(options, typing.get_type_hints(make_synthetic))
    bound = inspect.signature(make_synthetic).bind(**options)
    bound.apply_defaults()
    _check_synthetic(**{k: v for k, v in bound.arguments.items() if k != "seed"})
    return options


def _file_loaders() -> dict[str, Callable[..., Dataset]]:
    """The loaders of :data:`FILE_LOADERS`, imported on first use (they import this module)."""
    import importlib

    return {name: getattr(importlib.import_module(module), attr)
            for name, (module, attr) in FILE_LOADERS.items()}


def _user_dataset(name: str, root, download: bool, options: dict) -> Dataset:
    """A plugin's dataset: its loader's failures and results are one sentence naming it."""
    from gossipfl.plugins import call_piece, origin

    loader = USER_DATASETS[name]
    dataset = call_piece(KEY, f"dataset '{name}'", loader, (data_root(root), download),
                         Dataset, "load", options)
    return check_dataset(dataset, origin=f"the plugin loader {origin(loader)}", name=name)


def from_tensors(train_x, train_y, test_x, test_y, num_classes: int | None = None,
                 name: str = "custom") -> Dataset:
    """Wrap user data (tensors or arrays). Integer labels are classes; ``num_classes`` defaults
    to ``max label + 1``; float labels are regression targets (``num_classes = 0``). Floating
    inputs keep their dtype, integer (or boolean) inputs become float32. The result is
    checked as a plugin's dataset is (:func:`check_dataset`: shapes, labels, empty splits,
    values that are not finite)."""
    if not isinstance(name, str) or not name:
        raise GossipflError(f"{KEY}: from_tensors needs a name that is a non-empty string, "
                            f"got {name!r:.60}.")
    if num_classes is not None and (isinstance(num_classes, bool)
                                    or not isinstance(num_classes, int | np.integer)
                                    or num_classes < 1):
        raise GossipflError(f"data.num_classes: {name} classes must be counted by an integer "
                            f">= 1 (or None: the largest label + 1), got {num_classes!r:.60}.")
    train_x, test_x = _as_tensor(train_x, name, "train inputs"), _as_tensor(test_x, name,
                                                                           "test inputs")
    train_y, test_y = _as_tensor(train_y, name, "train labels"), _as_tensor(test_y, name,
                                                                           "test labels")
    for split, x, y in (("train", train_x, train_y), ("test", test_x, test_y)):
        if x.ndim < 1 or y.ndim != 1 or len(x) != len(y):
            raise GossipflError(
                f"{KEY}: {name} {split} data needs one label per sample, got inputs "
                f"{list(x.shape)} and labels {list(y.shape)}."
            )
    if train_x.shape[1:] != test_x.shape[1:]:
        raise GossipflError(
            f"{KEY}: {name} train and test samples differ in shape "
            f"({list(train_x.shape[1:])} vs {list(test_x.shape[1:])})."
        )
    classification = not (train_y.is_floating_point() or test_y.is_floating_point())
    if classification:
        train_y, test_y = train_y.long(), test_y.long()
        num_classes = _check_classes(name, train_y, test_y, num_classes)
    else:
        num_classes = 0
    x_dtype = torch.float32 if not train_x.is_floating_point() else train_x.dtype
    dataset = Dataset(name, train_x.to(x_dtype), train_y, test_x.to(x_dtype), test_y,
                      num_classes)
    return check_dataset(dataset, origin="from_tensors", empty_test=True)


def make_synthetic(num_classes: int = 10, dim: int = 20, train_size: int = 1000,
                   test_size: int = 200, seed: int = 0, separation: float = 1.0) -> Dataset:
    """Gaussian class clusters: ``mu_c ~ N(0, separation^2 I)``, ``x = mu_y + N(0, I)``.

    Classes are balanced (``y = n mod C``, shuffled); deterministic in ``seed``.
    """
    _check_synthetic(num_classes, dim, train_size, test_size, separation)
    means = numpy_generator(seed, "synthetic", "means").normal(size=(num_classes, dim))
    means *= separation

    def draw(split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = numpy_generator(seed, "synthetic", split)
        y = rng.permutation(np.arange(n) % num_classes)
        x = means[y] + rng.normal(size=(n, dim))
        return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.int64))

    (train_x, train_y), (test_x, test_y) = draw("train", train_size), draw("test", test_size)
    return Dataset("synthetic", train_x, train_y, test_x, test_y, num_classes)


def _check_synthetic(num_classes: int, dim: int, train_size: int, test_size: int,
                     separation: float) -> None:
    for key, value, low in (("num_classes", num_classes, 2), ("dim", dim, 1),
                            ("train_size", train_size, 1), ("test_size", test_size, 1)):
        if not isinstance(value, int | np.integer) or value < low:
            raise GossipflError(f"data.options.{key}: must be an integer >= {low}, "
                                f"got {value}.")
    if not separation > 0:
        raise GossipflError(f"data.options.separation: must be > 0, got {separation}.")


def data_root(root: str | Path | None = None) -> Path:
    """The data folder: ``root``, else ``$GOSSIPFL_DATA``, else ``~/.cache/gossipfl/data``."""
    if root is not None:
        return user_path(root, "data.root")
    env = os.environ.get("GOSSIPFL_DATA")
    return user_path(env, "GOSSIPFL_DATA") if env else Path.home() / ".cache" / "gossipfl" / "data"


def search_folders(name: str, root: Path, only_root: bool = False) -> list[Path]:
    """Folders looked in for ``name``, in order (system folders unless ``only_root``)."""
    folders = [root / sub for sub in SUBFOLDERS.get(name, (name,))]
    return [*folders, root, *(() if only_root else SYSTEM_FOLDERS.get(name, ()))]


def normalize_images(pixels: np.ndarray, name: str) -> torch.Tensor:
    """uint8 ``[N, C, H, W]`` -> float32 ``(pixels / 255 - mean) / std`` per channel."""
    mean, std = (torch.tensor(v, dtype=torch.float32).view(-1, 1, 1) for v in NORMALIZATION[name])
    return (torch.from_numpy(pixels).float().div_(255.0) - mean).div_(std)


# --------------------------------------------------------------------------------------------
# Finding, extracting and downloading files
# --------------------------------------------------------------------------------------------

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Source:
    """Where files are looked for and how they are checked."""

    root: Path
    user_root: bool  # set by the user: never replaced by another folder
    verify: bool = True


@dataclass
class Found:
    """Arrays read from files, and those files (path, SHA-256)."""

    arrays: Arrays
    files: list[dict]


def _load_arrays(name: str, source: Source, download: bool) -> Found:
    """uint8 images ``[N, C, H, W]`` and int64 labels for train and test."""
    reader = READERS[name]
    root = source.root
    folders = search_folders(name, root, only_root=source.user_root)
    for folder in folders:
        found = reader(name, folder, source)
        if found is not None:
            return found
    where = " or ".join(str(f) for f in folders)
    if not download:
        raise GossipflError(
            f"{KEY}: {name} not found in {where}, and downloads are off; "
            "put the files there or allow downloads."
        )
    target = root / SUBFOLDERS[name][0]
    try:
        for remote in formats.SOURCES[name]:
            formats.download_remote(remote, target)
    except OSError as exc:
        raise GossipflError(
            f"{KEY}: {name} not found in {where}, and downloading it failed "
            f"({formats.error_reason(exc)}); put the files there or allow downloads."
        ) from exc
    found = reader(name, target, source)
    if found is None:
        raise GossipflError(f"{KEY}: {name} was downloaded to {target} but cannot be found there.")
    return found


def _find_file(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _read_idx_folder(name: str, folder: Path, source: Source) -> Found | None:
    paths = {key: _find_file(folder, stem) for key, stem in IDX_FILES.items()}
    if any(p is None for p in paths.values()):
        return None
    files = [formats.check_file(p, name, source.verify) for p in paths.values()]
    arrays = {key: formats.read_idx(path) for key, path in paths.items()}
    for split in ("train", "test"):
        x, xp, yp = arrays[f"{split}_x"], paths[f"{split}_x"], paths[f"{split}_y"]
        arrays[f"{split}_y"] = check_idx_pair(xp, x, yp, arrays[f"{split}_y"])
        _check_label_range(yp, arrays[f"{split}_y"], 10)
    return Found((arrays["train_x"][:, None], arrays["train_y"],
                  arrays["test_x"][:, None], arrays["test_y"]), files)


def _cifar_batch_folder(name: str, folder: Path, source: Source) -> Path | None:
    """The folder holding the CIFAR batches, extracting the archive if only that is there
    (after checking its SHA-256; all or nothing, :func:`formats.extract_archive`)."""
    sub, train, test, _, _ = CIFAR_LAYOUT[name]
    for candidate in (folder / sub, folder):
        if all((candidate / f).is_file() for f in (*train, *test)):
            return candidate
    archive = folder / formats.SOURCES[name][0].name
    if not archive.is_file():
        return None
    formats.check_file(archive, name, source.verify)
    target = source.root / SUBFOLDERS[name][0]
    formats.extract_archive(archive, target, needs=tuple(f"{sub}/{f}" for f in (*train, *test)))
    return target / sub


def _read_cifar_folder(name: str, folder: Path, source: Source) -> Found | None:
    batch_folder = _cifar_batch_folder(name, folder, source)
    if batch_folder is None:
        return None
    _, train, test, label_key, num_classes = CIFAR_LAYOUT[name]
    files = [formats.check_file(batch_folder / f, name, source.verify) for f in (*train, *test)]

    def read(files: list[str]) -> tuple[np.ndarray, np.ndarray]:
        parts = [formats.read_cifar_batch(batch_folder / f, label_key) for f in files]
        for f, (_, y) in zip(files, parts, strict=True):
            _check_label_range(batch_folder / f, y, num_classes)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    return Found((*read(train), *read(test)), files)


def _read_tiny_folder(name: str, folder: Path, source: Source) -> Found | None:
    """Tiny-ImageNet's folder layout (extracting ``tiny-imagenet-200.zip`` if only that is
    there); the files recorded are the archive or the listing files, and the decoded cache."""
    dataset = tiny_imagenet.dataset_folder(folder)
    archive = folder / tiny_imagenet.ARCHIVE
    if dataset is None and archive.is_file():
        dataset = tiny_imagenet.extract(archive, source.root / SUBFOLDERS[name][0], source.verify)
    if dataset is None:
        return None
    arrays = tiny_imagenet.read(dataset)
    read = [dataset / "wnids.txt", dataset / "val" / "val_annotations.txt",
            dataset / tiny_imagenet.CACHE]
    files = [formats.check_file(p, name, source.verify) for p in read if p.is_file()]
    return Found(arrays, files)


READERS = {"mnist": _read_idx_folder, "fashion_mnist": _read_idx_folder,
           "cifar10": _read_cifar_folder, "cifar100": _read_cifar_folder,
           "tiny_imagenet": _read_tiny_folder}


def check_idx_pair(xp: Path, x: np.ndarray, yp: Path, y: np.ndarray) -> np.ndarray:
    """One split read from IDX files: uint8 images ``[N, H, W]`` in ``xp`` and N labels in
    ``yp``, each an integer (whole floats pass, :func:`formats.integer_labels`); returns the
    labels as int64, else one sentence naming the file."""
    if x.ndim != 3 or x.dtype != np.uint8:
        raise GossipflError(f"{KEY}: {xp} must hold uint8 images [N, H, W], "
                            f"got {x.dtype} {list(x.shape)}.")
    if y.ndim != 1 or len(y) != len(x):
        raise GossipflError(f"{KEY}: {yp} must hold {len(x)} labels to match {xp}, "
                            f"got shape {list(y.shape)}.")
    try:
        return formats.integer_labels(y)
    except ValueError as exc:
        raise GossipflError(f"{KEY}: {yp} is not a valid labels file ({exc}).") from None


def _check_label_range(path: Path, labels: np.ndarray, num_classes: int) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise GossipflError(
            f"{KEY}: {path} has labels outside 0..{num_classes - 1} "
            f"(found {int(labels.min())}..{int(labels.max())})."
        )


# --------------------------------------------------------------------------------------------
# Building Dataset objects
# --------------------------------------------------------------------------------------------


def _check_options(name: str, options: dict, allowed) -> None:
    unknown = set(options) - set(allowed)
    if unknown:
        raise GossipflError(f"data.options.{min(unknown)}: not an option of dataset '{name}' "
                            f"(it takes {', '.join(allowed)}).")


def _typed_options(options: dict, hints: dict) -> dict:
    """``options`` checked against the type ``hints`` (finite numbers, lists, booleans)."""
    from gossipfl.validation import coerce

    return {key: coerce(f"data.options.{key}", value, hints.get(key, typing.Any))
            for key, value in options.items()}


#: The options of the image datasets read from their files by gossipfl itself.
IMAGE_OPTIONS = ("normalize", "augment")


def _image_options(name: str, options: dict) -> tuple[bool, bool]:
    _check_options(name, options, IMAGE_OPTIONS)
    options = _typed_options(options, {"normalize": bool, "augment": bool | None})
    augment = options.get("augment")
    return bool(options.get("normalize", True)), (
        name in AUGMENTED if augment is None else bool(augment))


def _image_dataset(name: str, found: Found, normalize: bool, augment: bool) -> Dataset:
    train_x, train_y, test_x, test_y = found.arrays
    convert: Callable[[np.ndarray], torch.Tensor] = (
        (lambda a: normalize_images(a, name)) if normalize
        else (lambda a: torch.from_numpy(a).float())
    )
    num_classes = NUM_CLASSES.get(name, 10)
    return Dataset(name, convert(train_x), torch.from_numpy(train_y), convert(test_x),
                   torch.from_numpy(test_y), num_classes, augment, tuple(found.files))


def _as_tensor(value: object, name: str, what: str) -> torch.Tensor:
    """``value`` (a tensor, an array, nested lists) as a tensor of real numbers, or one
    sentence saying what it holds instead."""
    if not isinstance(value, torch.Tensor):
        try:
            array = np.asarray(value)
        except ValueError:  # ragged nested lists
            raise GossipflError(f"{KEY}: {name} {what} must be an array of numbers; rows of "
                                f"different lengths were given.") from None
        if array.dtype.kind not in "biuf":
            raise GossipflError(f"{KEY}: {name} {what} must be numbers (booleans, integers or "
                                f"floats), got an array of {array.dtype}.")
        value = torch.as_tensor(array)
    if value.is_complex():
        raise GossipflError(f"{KEY}: {name} {what} must be real numbers, got {value.dtype}.")
    return value


def _check_classes(name: str, train_y: torch.Tensor, test_y: torch.Tensor,
                   num_classes: int | None) -> int:
    labels = torch.cat([train_y, test_y])
    low, high = (int(labels.min()), int(labels.max())) if labels.numel() else (0, -1)
    if num_classes is None:
        num_classes = high + 1
    if low < 0 or high >= num_classes:
        raise GossipflError(
            f"data.num_classes: {name} labels must lie in 0..{num_classes - 1}, "
            f"found {low}..{high}."
        )
    return int(num_classes)
