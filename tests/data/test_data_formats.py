"""Dataset files: IDX and CIFAR readers, folder search, archives, downloads, generated data."""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from gossipfl.data import (
    NORMALIZATION,
    datasets,
    download_file,
    formats,
    from_tensors,
    load_dataset,
    make_synthetic,
    parse_idx,
    read_cifar_batch,
    read_idx,
    verify_checksum,
)
from gossipfl.errors import GossipflError
from tests.dataset_files import (
    cifar_arrays,
    idx_bytes,
    mnist_arrays,
    pickle_short,
    py2_cifar_pickle,
    write_cifar10_folder,
    write_idx,
    write_mnist_folder,
)

DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------------------------
# IDX
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip_every_type(tmp_path, dtype, suffix):
    array = (np.arange(2 * 3 * 5).reshape(2, 3, 5) * 37 % 251 - 100 * (dtype != np.uint8))
    array = array.astype(dtype)
    path = write_idx(tmp_path / f"a{suffix}", array)
    out = read_idx(path)
    assert out.dtype == np.dtype(dtype) and out.shape == (2, 3, 5)
    np.testing.assert_array_equal(out, array)
    out[0, 0, 0] = 1  # writable, native endian


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b"\x01" + b[1:], "magic"),
        (lambda b: b[:2] + b"\x07" + b[3:], "type code 0x07"),
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\x00", "trailing"),
        (lambda b: b[:6], "truncated header"),
        (lambda b: b"", "magic"),
    ],
)
def test_corrupt_idx_names_the_file(tmp_path, mutate, message):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(mutate(idx_bytes(np.zeros((2, 4, 4), np.uint8))))
    with pytest.raises(GossipflError, match=message) as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_truncated_gzip_names_the_file(tmp_path):
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.ones((3, 28, 28), np.uint8)))[:-12])
    with pytest.raises(GossipflError, match=str(path)):
        read_idx(path)


def test_parse_idx_is_big_endian():
    data = bytes([0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 1, 2, 0xFF, 0xFF, 0xFF, 0xFE])
    np.testing.assert_array_equal(parse_idx(data), [258, -2])


# --------------------------------------------------------------------------------------------
# MNIST-family folders
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_mnist_round_trip_from_dataset_subfolder(tmp_path, name):
    arrays = mnist_arrays()
    write_mnist_folder(tmp_path / name, arrays)
    raw = load_dataset(name, root=tmp_path, download=False, verify=False, normalize=False)
    assert raw.train_x.shape == (6, 1, 28, 28) and raw.test_x.shape == (4, 1, 28, 28)
    assert raw.num_classes == 10 and raw.input_shape == (1, 28, 28) and not raw.augment
    np.testing.assert_array_equal(raw.train_x[:, 0].numpy(), arrays[0])
    np.testing.assert_array_equal(raw.test_x[:, 0].numpy(), arrays[2])
    assert raw.train_y.dtype == torch.int64
    np.testing.assert_array_equal(raw.train_y.numpy(), arrays[1])
    np.testing.assert_array_equal(raw.test_y.numpy(), arrays[3])
    norm = load_dataset(name, root=tmp_path, download=False, verify=False)
    (mean,), (std,) = NORMALIZATION[name]
    pixels = torch.round((norm.train_x * std + mean) * 255)
    np.testing.assert_array_equal(pixels[:, 0].numpy(), arrays[0])


def test_raw_files_directly_in_root_and_env_default(tmp_path, monkeypatch):
    arrays = mnist_arrays(seed=1)
    write_mnist_folder(tmp_path, arrays, suffix="")
    monkeypatch.setenv("GOSSIPFL_DATA", str(tmp_path))
    data = load_dataset("mnist", download=False, verify=False, normalize=False)
    np.testing.assert_array_equal(data.test_x[:, 0].numpy(), arrays[2])


def test_dataset_subfolder_wins_over_root(tmp_path):
    write_mnist_folder(tmp_path, mnist_arrays(seed=1))
    sub = mnist_arrays(seed=2)
    write_mnist_folder(tmp_path / "mnist", sub)
    data = load_dataset("mnist", root=tmp_path, download=False, verify=False, normalize=False)
    np.testing.assert_array_equal(data.train_y.numpy(), sub[1])


def test_label_count_mismatch_names_file(tmp_path):
    train_x, train_y, test_x, test_y = mnist_arrays()
    write_mnist_folder(tmp_path, (train_x, train_y[:-1], test_x, test_y))
    with pytest.raises(GossipflError, match="train-labels-idx1-ubyte.gz must hold 6 labels"):
        load_dataset("mnist", root=tmp_path, download=False, verify=False)


def test_label_out_of_range(tmp_path):
    train_x, train_y, test_x, _ = mnist_arrays()
    write_mnist_folder(tmp_path, (train_x, train_y, test_x, np.array([0, 1, 2, 12])))
    with pytest.raises(GossipflError, match=r"t10k-labels.*outside 0\.\.9"):
        load_dataset("mnist", root=tmp_path, download=False, verify=False)


def test_missing_without_download_lists_folders(tmp_path):
    with pytest.raises(GossipflError) as info:
        load_dataset("cifar10", root=tmp_path, download=False, verify=False)
    text = str(info.value)
    assert text.startswith("data.dataset: cifar10 not found in")
    assert str(tmp_path / "cifar10") in text and "downloads are off" in text


def test_unknown_dataset_and_option():
    with pytest.raises(GossipflError, match="did you mean 'mnist'"):
        load_dataset("mnsit")
    with pytest.raises(GossipflError, match="data.options.alpha: not an option"):
        load_dataset("mnist", alpha=1.0)


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.skipif(not DEBIAN_FASHION.is_dir(), reason="Debian dataset-fashion-mnist missing")
def test_real_fashion_mnist_from_debian_package(tmp_path, monkeypatch):
    monkeypatch.setenv("GOSSIPFL_DATA", str(tmp_path))  # the default root: system folders too
    data = load_dataset("fashion_mnist", download=False)
    assert [Path(f["path"]).parent for f in data.files] == [DEBIAN_FASHION] * 4
    assert all(f["verified"] for f in data.files)
    assert len(data.train_y) == 60000 and len(data.test_y) == 10000
    assert data.num_classes == 10 and data.input_shape == (1, 28, 28)
    assert data.train_x.dtype == torch.float32
    np.testing.assert_array_equal(np.bincount(data.train_y.numpy()), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(data.test_y.numpy()), [1000] * 10)
    # The constants are the training set's own statistics.
    assert abs(float(data.train_x.mean())) < 1e-3
    assert abs(float(data.train_x.std()) - 1) < 1e-3


# --------------------------------------------------------------------------------------------
# CIFAR
# --------------------------------------------------------------------------------------------


def _check_cifar(data, train, test, num_classes):
    x_train = np.concatenate([x for x, _ in train]).reshape(-1, 3, 32, 32)
    assert data.train_x.shape == (15, 3, 32, 32) and data.test_x.shape == (3, 3, 32, 32)
    assert data.num_classes == num_classes and data.augment
    np.testing.assert_array_equal(data.train_x.numpy(), x_train)
    # Channel-major rows: the first 1024 bytes are the red plane, row by row.
    np.testing.assert_array_equal(data.test_x[:, 0].numpy(), test[0][:, :1024].reshape(3, 32, 32))
    np.testing.assert_array_equal(data.train_y.numpy(), np.concatenate([y for _, y in train]))
    np.testing.assert_array_equal(data.test_y.numpy(), test[1])


def test_cifar10_python2_batches(tmp_path):
    train, test = cifar_arrays(10)
    write_cifar10_folder(tmp_path / "cifar10", train, test)
    raw = load_dataset("cifar10", root=tmp_path, download=False, verify=False, normalize=False)
    _check_cifar(raw, train, test, 10)
    norm = load_dataset("cifar10", root=tmp_path, download=False, verify=False)
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in NORMALIZATION["cifar10"])
    np.testing.assert_array_equal(torch.round((norm.train_x * std + mean) * 255).numpy(),
                                  raw.train_x.numpy())


def test_cifar10_from_archive_is_extracted(tmp_path):
    train, test = cifar_arrays(10, seed=3)
    batches = write_cifar10_folder(tmp_path / "src", train, test)
    root = tmp_path / "root"
    root.mkdir()
    with tarfile.open(root / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(batches, arcname="cifar-10-batches-py")
    data = load_dataset("cifar10", root=root, download=False, verify=False, normalize=False)
    _check_cifar(data, train, test, 10)
    assert (root / "cifar10" / "cifar-10-batches-py" / "test_batch").is_file()


def test_cifar100_fine_labels(tmp_path):
    train, test = cifar_arrays(100, seed=4)
    folder = tmp_path / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    x = np.concatenate([b[0] for b in train])
    y = np.concatenate([b[1] for b in train])
    entry = {b"data": x, b"fine_labels": list(y), b"coarse_labels": list(y // 5)}
    (folder / "train").write_bytes(pickle.dumps(entry, protocol=4))  # a Python 3 pickle
    (folder / "test").write_bytes(py2_cifar_pickle(*test, b"fine_labels"))
    data = load_dataset("cifar100", root=tmp_path, download=False, verify=False, normalize=False)
    _check_cifar(data, train, test, 100)


def test_corrupt_and_malicious_batches(tmp_path):
    good = py2_cifar_pickle(np.zeros((2, 3072), np.uint8), [1, 2], b"labels")
    (tmp_path / "truncated").write_bytes(good[:-40])
    with pytest.raises(GossipflError, match=f"{tmp_path / 'truncated'} is not a valid CIFAR"):
        read_cifar_batch(tmp_path / "truncated")
    marker = tmp_path / "pwned"
    evil = b"cos\nsystem\n(" + pickle_short(f"touch {marker}".encode()) + b"tR."
    (tmp_path / "evil").write_bytes(evil)
    with pytest.raises(GossipflError, match="unexpected object os.system"):
        read_cifar_batch(tmp_path / "evil")
    assert not marker.exists()
    (tmp_path / "short").write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8),
                                                   b"labels": [0, 1]}))
    with pytest.raises(GossipflError, match=r"uint8 \[N, 3072\]"):
        read_cifar_batch(tmp_path / "short")


def test_corrupt_archive_names_it(tmp_path):
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"\x1f\x8b not really a tarball")
    with pytest.raises(GossipflError, match="cannot extract .*cifar-10-python.tar.gz"):
        load_dataset("cifar10", root=tmp_path, download=False, verify=False)


# --------------------------------------------------------------------------------------------
# Checksums and downloads
# --------------------------------------------------------------------------------------------


def _serve_mnist(monkeypatch, tmp_path, digests=None, mirrors=("server",)):
    """Publish tiny MNIST gz files under file:// URLs in place of the official ones."""
    arrays = mnist_arrays(seed=7)
    server = write_mnist_folder(tmp_path / "server", arrays)
    remotes = tuple(
        formats.RemoteFile(
            r.name,
            tuple((tmp_path / m / r.name).as_uri() for m in mirrors),
            (digests or {}).get(r.name, sha256(server / r.name)),
        )
        for r in formats.SOURCES["mnist"]
    )
    monkeypatch.setitem(formats.SOURCES, "mnist", remotes)
    return arrays


def test_download_from_file_url(tmp_path, monkeypatch):
    arrays = _serve_mnist(monkeypatch, tmp_path, mirrors=("gone", "server"))
    root = tmp_path / "data"
    data = load_dataset("mnist", root=root, normalize=False)
    np.testing.assert_array_equal(data.train_x[:, 0].numpy(), arrays[0])
    assert sorted(p.name for p in (root / "mnist").iterdir()) == sorted(
        r.name for r in formats.SOURCES["mnist"])


def test_download_checksum_mismatch(tmp_path, monkeypatch):
    wrong = "0" * 64
    _serve_mnist(monkeypatch, tmp_path, {"train-labels-idx1-ubyte.gz": wrong})
    root = tmp_path / "data"
    with pytest.raises(GossipflError) as info:
        load_dataset("mnist", root=root)
    actual = sha256(tmp_path / "server" / "train-labels-idx1-ubyte.gz")
    text = str(info.value)
    assert str(root / "mnist" / "train-labels-idx1-ubyte.gz") in text
    assert f"expected sha256 {wrong}" in text and f"got {actual}" in text
    assert not (root / "mnist" / "train-labels-idx1-ubyte.gz").exists()
    assert not list((root / "mnist").glob("*.part"))


def test_download_failure_is_one_sentence(tmp_path, monkeypatch):
    _serve_mnist(monkeypatch, tmp_path, mirrors=("nowhere",))
    with pytest.raises(GossipflError) as info:
        load_dataset("mnist", root=tmp_path / "data")
    text = str(info.value)
    assert text.startswith("data.dataset: mnist not found in ")
    assert "downloading it failed (" in text and text.endswith("allow downloads.")


def test_download_file_with_fetch_function_and_md5(tmp_path):
    payload = b"gossip" * 1000

    def fetch(url, handle):
        assert url == "https://example.org/f.bin"
        handle.write(payload)

    md5 = hashlib.md5(payload).hexdigest()
    dest = download_file("https://example.org/f.bin", tmp_path / "f.bin", md5.upper(), "md5",
                         fetch=fetch)
    assert dest.read_bytes() == payload
    verify_checksum(dest, hashlib.sha256(payload).hexdigest())
    with pytest.raises(GossipflError, match=f"expected md5 {'1' * 32}, got {md5}"):
        download_file("https://example.org/f.bin", tmp_path / "g.bin", "1" * 32, "md5",
                      fetch=fetch)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]


def test_download_interrupted_leaves_nothing(tmp_path):
    def fetch(url, handle):
        handle.write(b"partial")
        raise OSError("connection reset")

    with pytest.raises(OSError, match="connection reset"):
        download_file("https://example.org/x", tmp_path / "x", "0" * 64, fetch=fetch)
    assert list(tmp_path.iterdir()) == []


def test_a_checksum_cache_nested_too_deep_is_hashed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GOSSIPFL_CACHE", str(tmp_path / "cache"))
    cache = formats.digest_cache_path()
    cache.parent.mkdir()
    cache.write_text("[" * 100_000 + "]" * 100_000)
    path = tmp_path / "file.bin"
    path.write_bytes(b"gossip")
    assert formats.cached_digest(path) == hashlib.sha256(b"gossip").hexdigest()


def test_official_sources_are_pinned():
    for name in ("fashion_mnist", "mnist", "cifar10", "cifar100"):
        for remote in formats.SOURCES[name]:
            assert remote.algorithm == "sha256" and len(remote.checksum) == 64
            assert all(url.endswith(remote.name) for url in remote.urls)
    assert [r.name for r in formats.SOURCES["mnist"]] == [
        f"{datasets.IDX_FILES[k]}.gz" for k in ("train_x", "train_y", "test_x", "test_y")]


# --------------------------------------------------------------------------------------------
# Generated and user data
# --------------------------------------------------------------------------------------------


def test_synthetic_is_deterministic_balanced_and_learnable():
    a = load_dataset("synthetic", num_classes=4, dim=8, train_size=400, test_size=100, seed=3)
    b = make_synthetic(num_classes=4, dim=8, train_size=400, test_size=100, seed=3)
    c = make_synthetic(num_classes=4, dim=8, train_size=400, test_size=100, seed=4)
    assert a.input_shape == (8,) and a.num_classes == 4 and a.train_x.dtype == torch.float32
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.test_y, b.test_y)
    assert not torch.equal(a.train_x, c.train_x)
    np.testing.assert_array_equal(np.bincount(a.train_y.numpy()), [100] * 4)
    means = torch.stack([a.train_x[a.train_y == k].mean(0) for k in range(4)])
    predicted = torch.cdist(a.test_x, means).argmin(1)
    assert (predicted == a.test_y).float().mean() > 0.8


def test_synthetic_option_errors():
    with pytest.raises(GossipflError,
                       match="data.options.num_classes: must be an integer >= 2, got 1"):
        make_synthetic(num_classes=1)
    with pytest.raises(GossipflError, match="data.options.train_size"):
        load_dataset("synthetic", train_size=0)
    with pytest.raises(GossipflError,
                       match="data.options.size: not an option of dataset 'synthetic'"):
        load_dataset("synthetic", size=3)


def test_from_tensors_and_to():
    x = np.random.default_rng(0).normal(size=(10, 3))
    data = from_tensors(x, np.arange(10) % 3, x[:4], np.array([0, 1, 2, 4]))
    assert data.num_classes == 5 and data.train_y.dtype == torch.int64
    assert data.train_x.dtype == torch.float64 and data.input_shape == (3,)
    reg = from_tensors(x, x[:, 0], x[:2], x[:2, 0], name="reg")
    assert reg.num_classes == 0 and reg.train_y.is_floating_point()
    moved = data.to("cpu")
    assert moved is not data and torch.equal(moved.test_x, data.test_x)
    with pytest.raises(GossipflError, match="one label per sample"):
        from_tensors(x, np.arange(9), x, np.arange(10))
    with pytest.raises(GossipflError, match=r"data.num_classes: .* labels must lie in 0\.\.2"):
        from_tensors(x, np.arange(10) % 3, x, np.arange(10) % 4, num_classes=3)


def test_a_compressed_file_read_again_unchanged_is_not_decompressed_again(tmp_path,
                                                                           monkeypatch):
    """A study's runs load the same files: the second read of an unchanged gzip file takes
    the bytes kept from the first (no decompression); a file rewritten since (another size
    or time) is read afresh, and a file larger than what is kept is never kept."""
    from gossipfl.data import formats

    monkeypatch.setattr(formats, "_KEPT", type(formats._KEPT)())
    calls = []
    real = gzip.decompress
    monkeypatch.setattr(formats.gzip, "decompress", lambda raw: calls.append(1) or real(raw))
    path = tmp_path / "x.idx.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.arange(6, dtype=np.uint8).reshape(2, 3))))
    first = read_idx(path)
    second = read_idx(path)
    assert np.array_equal(first, second) and len(calls) == 1
    second[0, 0] = 9  # each caller's array is its own
    assert read_idx(path)[0, 0] == 0 and len(calls) == 1
    path.write_bytes(gzip.compress(idx_bytes(np.arange(8, dtype=np.uint8).reshape(2, 4))))
    assert read_idx(path).shape == (2, 4) and len(calls) == 2
    # another content of the same size, its modification time put back (as `cp -p` does):
    # its change time tells it apart
    before = path.stat()
    path.write_bytes(gzip.compress(idx_bytes(np.arange(1, 9, dtype=np.uint8).reshape(2, 4))))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert read_idx(path)[0, 0] == 1 and len(calls) == 3
    monkeypatch.setattr(formats, "KEPT_BYTES", 4)
    formats._KEPT.clear()
    read_idx(path)
    read_idx(path)
    assert len(calls) == 5 and not formats._KEPT
