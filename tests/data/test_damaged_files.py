"""Damaged and hostile dataset files (a fuzzer's findings): samples without values, labels
that are not integers, hostile pickles, damaged archives, extractions that fail or were killed,
downloads that fail. Each is one sentence naming the file, and nothing half-written is left
where a later run would use it."""

from __future__ import annotations

import gzip
import os
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

from gossipfl.data import emnist, formats, from_tensors, load_dataset, read_cifar_batch
from gossipfl.data import tiny_imagenet as tiny
from gossipfl.errors import GossipflError
from tests.dataset_files import (
    EMNIST_STEMS,
    TRAIN_PER_CLASS,
    cifar_arrays,
    damage,
    member_data,
    mnist_arrays,
    write_cifar10_folder,
    write_emnist,
    write_idx,
    write_mnist_folder,
    write_tar_gz,
    write_tree,
    write_zip,
)

CIFAR_ARCHIVE = "cifar-10-python.tar.gz"


def load(name: str, root: Path, **options):
    return load_dataset(name, root=root, download=False, verify=False, **options)


def leftovers(root: Path) -> list[str]:
    """The temporary folders of extractions under ``root``."""
    return sorted(p.name for p in root.rglob("*.extract-*"))


# --------------------------------------------------------------------------------------------
# Samples and labels
# --------------------------------------------------------------------------------------------


def test_samples_without_values_are_refused(tmp_path):
    train_x, train_y, test_x, test_y = mnist_arrays()
    write_mnist_folder(tmp_path / "mnist", (train_x[:, :0, :0], train_y, test_x[:, :0, :0],
                                            test_y))
    with pytest.raises(GossipflError, match=r"^data.dataset: mnist \(read from .*mnist\): "
                                            r"train samples of shape \[1, 0, 0\] hold no values"):
        load("mnist", tmp_path)
    with pytest.raises(GossipflError, match=r"train samples of shape \[0\] hold no values"):
        from_tensors(np.zeros((4, 0)), [0, 1, 0, 1], np.zeros((2, 0)), [0, 1])


@pytest.mark.parametrize(("labels", "shown"), [([0.5, 1.5, 2.5, 3.5, 4.5, 9.5], "0.5"),
                                                ([1, 2, np.nan, 3, 4, 5], "nan")],
                         ids=["fractions", "NaN"])
def test_idx_labels_that_are_not_integers_name_the_labels_file(tmp_path, labels, shown):
    folder = write_mnist_folder(tmp_path / "mnist", mnist_arrays())
    path = write_idx(folder / "train-labels-idx1-ubyte.gz", np.array(labels, np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no NumPy "invalid value encountered in cast" first
        with pytest.raises(GossipflError) as info:
            load("mnist", tmp_path)
    assert str(info.value) == (f"data.dataset: {path} is not a valid labels file (labels must "
                               f"be integers, found {shown}).")


def test_idx_labels_stored_as_whole_floats_are_read(tmp_path):
    arrays = mnist_arrays()
    folder = write_mnist_folder(tmp_path / "mnist", arrays)
    write_idx(folder / "train-labels-idx1-ubyte.gz", arrays[1].astype(np.float32))
    assert load("mnist", tmp_path).train_y.tolist() == arrays[1].tolist()


def test_emnist_fractional_labels_name_the_labels_file(tmp_path):
    write_emnist(tmp_path / "emnist_l", [1, 2, 3], [1])
    path = write_idx(tmp_path / "emnist_l" / f"{EMNIST_STEMS['train', 'y']}.gz",
                     np.array([1.0, 1.5, 2.0], np.float32))
    with pytest.raises(GossipflError, match=f"{path} is not a valid labels file "
                                            r"\(labels must be integers, found 1.5\)"):
        load("emnist_l", tmp_path)


BAD_CIFAR_LABELS = {
    "strings": (["cat"] * 3, "'cat'"),
    "None": ([None] * 3, "None"),
    "a dict": ({"a": 1}, "{'a': 1}"),
    "beyond 64 bits": ([0, 2**70, 1], str(2**70)),
    "fractions": ([0.5] * 3, "0.5"),
}


@pytest.mark.parametrize(("labels", "shown"), BAD_CIFAR_LABELS.values(), ids=BAD_CIFAR_LABELS)
def test_cifar_labels_that_are_not_integers(tmp_path, labels, shown):
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"batch_label": b"x", b"data": np.zeros((3, 3072), np.uint8),
                                   b"labels": labels}, protocol=2))
    with pytest.raises(GossipflError) as info:
        read_cifar_batch(path)
    assert str(info.value) == (f"data.dataset: {path} is not a valid CIFAR batch (labels must "
                               f"be integers, found {shown}).")


def test_cifar_batch_pickled_by_python_3_with_protocol_2(tmp_path):
    """Python 3 pickles bytes for protocol 2 as ``_codecs.encode(text, "latin1")`` and b""
    as ``__builtin__.bytes()``: both are read."""
    data = (np.arange(2 * 3072) % 251).astype(np.uint8).reshape(2, 3072)
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"batch_label": b"", b"data": data, b"labels": [3, 4],
                                   b"filenames": [b"a.png", b""]}, protocol=2))
    x, y = read_cifar_batch(path)
    np.testing.assert_array_equal(x.reshape(2, 3072), data)
    assert y.tolist() == [3, 4]


@pytest.mark.parametrize(("payload", "why"), [
    (b"c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00nopex\x86R.",
     "unexpected _codecs.encode('a', 'nopex')"),
    (b"c_codecs\nencode\n)R.", "unexpected _codecs.encode()"),
    (b"c__builtin__\nbytes\nJ\x00\x00\x00\x7f\x85R.", "unexpected bytes(2130706432,)"),
    (b"c__builtin__\neval\nX\x01\x00\x00\x001\x85R.", "unexpected object __builtin__.eval"),
], ids=["unknown encoding", "no arguments", "bytes of a size", "eval"])
def test_protocol_2_bytes_builders_take_only_what_bytes_need(tmp_path, payload, why):
    path = tmp_path / "data_batch_1"
    path.write_bytes(b"\x80\x02" + payload)
    with pytest.raises(GossipflError) as info:
        read_cifar_batch(path)
    assert str(info.value) == f"data.dataset: {path} is not a valid CIFAR batch ({why})."


# --------------------------------------------------------------------------------------------
# Archives: damaged, failed, killed
# --------------------------------------------------------------------------------------------


def cifar_archive(tmp_path: Path) -> tuple[Path, tuple]:
    """A good CIFAR-10 archive of small batches, and its arrays."""
    train, test = cifar_arrays(10, seed=3)
    batches = write_cifar10_folder(tmp_path / "build", train, test)
    return write_tar_gz(tmp_path / "good" / CIFAR_ARCHIVE, batches), (train, test)


def truncated_tar(archive: Path) -> None:
    """A valid gzip stream of a tar cut inside its last member (test_batch)."""
    with tarfile.open(archive) as tar:
        cut = tar.getmember("cifar-10-batches-py/test_batch").offset_data + 100
    archive.write_bytes(gzip.compress(gzip.decompress(archive.read_bytes())[:cut]))


DAMAGE = {
    "damaged stream": lambda p: damage(p, p.stat().st_size // 2, p.stat().st_size // 2 + 64),
    "truncated file": lambda p: p.write_bytes(p.read_bytes()[:p.stat().st_size * 3 // 4]),
    "truncated tar": truncated_tar,
}


@pytest.mark.parametrize("spoil", DAMAGE.values(), ids=DAMAGE)
def test_a_damaged_cifar_archive_says_so_and_leaves_nothing(tmp_path, spoil):
    good, (_, test) = cifar_archive(tmp_path)
    root = tmp_path / "root"
    archive = root / "cifar10" / CIFAR_ARCHIVE
    archive.parent.mkdir(parents=True)
    shutil.copy(good, archive)
    spoil(archive)
    with pytest.raises(GossipflError, match=f"^data.dataset: cannot extract {archive} into "
                                            rf"{archive.parent} \(it is damaged or incomplete: "):
        load("cifar10", root)
    assert sorted(p.name for p in archive.parent.iterdir()) == [CIFAR_ARCHIVE]
    assert leftovers(root) == []
    shutil.copy(good, archive)  # the archive downloaded again
    data = load("cifar10", root, normalize=False)
    assert data.test_y.tolist() == test[1].tolist()


def test_a_killed_extraction_is_removed_and_done_again(tmp_path):
    good, _ = cifar_archive(tmp_path)
    root = tmp_path / "root"
    (root / "cifar10").mkdir(parents=True)
    shutil.copy(good, root / "cifar10" / CIFAR_ARCHIVE)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    here = formats._extraction_prefix()
    killed = root / "cifar10" / f"{here}{ended}-k1ll3d" / "new" / "cifar-10-batches-py"
    killed.mkdir(parents=True)
    (killed / "data_batch_1").write_bytes(b"half a batch")
    running = root / "cifar10" / f"{here}{os.getpid()}-runn1n"  # another extraction, going on
    running.mkdir()
    # another machine's (a shared data folder): its pid means nothing here
    elsewhere = root / "cifar10" / f"{formats.EXTRACTING}otherhost-{ended}-g01ng"
    elsewhere.mkdir()
    assert len(load("cifar10", root).train_y) == 15
    assert leftovers(root) == sorted([running.name, elsewhere.name])


def test_an_extraction_works_where_the_data_folder_is_a_link_to_another_place(tmp_path):
    """The temporary folder is made inside the dataset's folder: a link to another disk (or
    a parent that is not writable) keeps the renames on one file system."""
    good, _ = cifar_archive(tmp_path)
    shm = Path("/dev/shm")  # another file system where there is one (the renames crossed it)
    disk = shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path
    elsewhere = Path(tempfile.mkdtemp(dir=disk)) / "cifar10"
    try:
        elsewhere.mkdir()
        shutil.copy(good, elsewhere / CIFAR_ARCHIVE)
        root = tmp_path / "root"
        root.mkdir()
        (root / "cifar10").symlink_to(elsewhere)
        assert len(load("cifar10", root).train_y) == 15
        assert (elsewhere / "cifar-10-batches-py").is_dir() and leftovers(root) == []
    finally:
        shutil.rmtree(elsewhere.parent, ignore_errors=True)


def test_an_emnist_extraction_that_cannot_write_leaves_nothing(tmp_path):
    """The disk fills (here: a file size limit) while the third of the four members is
    written: no letters file is left, and the next run extracts them all."""
    staging = tmp_path / "gzip"
    write_emnist(staging, [1, 2, 3], list(range(1, 11)) * 3)  # test images: the largest file
    root = tmp_path / "root"
    write_zip(root / "emnist" / emnist.REMOTE.name, staging)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it: EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, hard))
    try:
        with pytest.raises(GossipflError, match=r"cannot extract .*gzip.zip .*File too large"):
            load("emnist_l", root)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert not (root / "emnist_l").exists() and leftovers(root) == []
    assert len(load("emnist_l", root).test_y) == 30


def test_a_damaged_tiny_imagenet_member_leaves_no_half_extracted_folder(tmp_path):
    """wnids.txt comes first, a training image later is damaged: nothing is extracted (a
    wnids.txt would mark the folder as ready), and a good archive is extracted next time."""
    good = write_zip(tmp_path / "good" / tiny.ARCHIVE, write_tree(tmp_path / "build"),
                     first="wnids.txt")
    root = tmp_path / "root"
    archive = root / "tiny_imagenet" / tiny.ARCHIVE
    archive.parent.mkdir(parents=True)
    shutil.copy(good, archive)
    start, size = member_data(archive, 3)  # a training image
    damage(archive, start + size // 4, start + size // 2)
    with pytest.raises(GossipflError, match=f"cannot extract {archive} into {archive.parent} "
                                            r"\(it is damaged or incomplete: "):
        load("tiny_imagenet", root)
    assert sorted(p.name for p in archive.parent.iterdir()) == [tiny.ARCHIVE]
    assert leftovers(root) == []
    shutil.copy(good, archive)
    assert len(load("tiny_imagenet", root).train_y) == 3 * TRAIN_PER_CLASS


def test_an_archive_without_the_dataset_is_refused_before_extracting(tmp_path):
    root = tmp_path / "root"
    other = tmp_path / "other"
    other.mkdir()
    (other / "README").write_text("not CIFAR")
    write_tar_gz(root / "cifar10" / CIFAR_ARCHIVE, other)
    with pytest.raises(GossipflError, match=f"{CIFAR_ARCHIVE} does not contain "
                                            "cifar-10-batches-py/data_batch_1, so it is "
                                            "incomplete or not the official"):
        load("cifar10", root)
    assert sorted(p.name for p in (root / "cifar10").iterdir()) == [CIFAR_ARCHIVE]


# --------------------------------------------------------------------------------------------
# Downloads
# --------------------------------------------------------------------------------------------


def test_a_failed_download_creates_no_folders(tmp_path, monkeypatch):
    """A mistyped data.root is not created by a download that fails."""
    nowhere = tmp_path / "nowhere"
    monkeypatch.setitem(formats.SOURCES, "mnist", tuple(
        formats.RemoteFile(r.name, ((nowhere / r.name).as_uri(),), r.checksum)
        for r in formats.SOURCES["mnist"]))
    monkeypatch.setattr(emnist, "REMOTE", formats.RemoteFile(
        "gzip.zip", ((nowhere / "gzip.zip").as_uri(),), emnist.REMOTE.checksum, "md5"))
    for name in ("mnist", "emnist_l"):
        with pytest.raises(GossipflError, match="downloading it failed"):
            load_dataset(name, root=tmp_path / "typo" / "data")
        assert sorted(p.name for p in tmp_path.iterdir()) == []
