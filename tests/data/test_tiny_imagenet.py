"""Tiny-ImageNet from its standard folder layout: real JPEGs written by the test, decoded,
cached, partitioned; bad trees are one sentence naming the file."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from gossipfl.data import load_dataset
from gossipfl.data import tiny_imagenet as tiny
from gossipfl.data.partition import PathologicalPartitioner, local_test_split
from gossipfl.errors import GossipflError
from tests.dataset_files import COLOURS, TRAIN_PER_CLASS, VAL, WNIDS, jpeg, write_tree


@pytest.fixture
def tree(tmp_path):
    write_tree(tmp_path / "data")
    return tmp_path / "data"


def load(root: Path, **options):
    return load_dataset("tiny_imagenet", root=root, download=False, **options)


def test_layout_is_decoded_with_wnids_order_and_val_annotations(tree):
    data = load(tree, normalize=False)
    assert data.num_classes == 200 and data.input_shape == (3, 64, 64)
    assert data.train_y.tolist() == [0] * 4 + [1] * 4 + [2] * 4
    assert data.test_y.tolist() == [c for _, c in VAL]
    for x, y in [(data.train_x, data.train_y), (data.test_x, data.test_y)]:
        mean_colour = x.mean(dim=(2, 3))  # solid JPEGs decode to their colour within a few units
        want = torch.tensor([COLOURS[c] for c in y.tolist()], dtype=torch.float32)
        assert (mean_colour - want).abs().max() < 4
    assert data.augment  # random crop + flip by default, like CIFAR
    recorded = {Path(f["path"]).name for f in data.files}
    assert recorded == {"wnids.txt", "val_annotations.txt", tiny.CACHE}
    assert not any(f["verified"] for f in data.files)  # no official digests of these files


def test_normalized_with_the_channel_constants(tree):
    raw, normal = load(tree, normalize=False), load(tree)
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in tiny_constants())
    assert torch.allclose(normal.train_x, (raw.train_x / 255 - mean) / std, atol=1e-5)


def tiny_constants():
    from gossipfl.data.datasets import NORMALIZATION

    return NORMALIZATION["tiny_imagenet"]


def test_the_cache_is_written_once_and_reused_until_the_files_change(tree, monkeypatch):
    first = load(tree, normalize=False)
    cache = tree / "tiny-imagenet-200" / tiny.CACHE
    assert cache.is_file()

    def no_decoding(paths):
        raise AssertionError("decoded again although the cache matches")

    monkeypatch.setattr(tiny, "decode", no_decoding)
    again = load(tree, normalize=False)
    assert torch.equal(first.train_x, again.train_x) and torch.equal(first.test_y, again.test_y)
    monkeypatch.undo()
    jpeg(tree / "tiny-imagenet-200" / "train" / WNIDS[0] / "images" / f"{WNIDS[0]}_0.JPEG",
         (255, 255, 255))  # a changed file invalidates the cache
    changed = load(tree, normalize=False)
    assert changed.train_x[0].float().mean() > 250


def test_grayscale_images_become_rgb(tree):
    jpeg(tree / "tiny-imagenet-200" / "val" / "images" / "val_1.JPEG", (128, 128, 128), mode="L")
    data = load(tree, normalize=False)
    assert data.test_x.shape == (len(VAL), 3, 64, 64)
    assert (data.test_x[1].float() - 128).abs().max() < 4


def test_the_zip_is_extracted_when_only_it_is_there(tmp_path):
    source = write_tree(tmp_path / "build")
    root = tmp_path / "data"
    root.mkdir()
    with zipfile.ZipFile(root / tiny.ARCHIVE, "w") as archive:
        for path in sorted(source.rglob("*")):
            archive.write(path, path.relative_to(source.parent))
    with pytest.raises(GossipflError, match="MD5|md5|checksum"):
        load(root)  # not the official archive
    data = load_dataset("tiny_imagenet", root=root, download=False, verify=False,
                        normalize=False)
    assert len(data.train_y) == 3 * TRAIN_PER_CLASS
    assert (root / "tiny_imagenet" / "tiny-imagenet-200" / "wnids.txt").is_file()


def test_pathological_partition_and_label_matched_local_tests(tree):
    data = load(tree, normalize=False)
    parts = PathologicalPartitioner(classes_per_client=2).split(data.train_y.numpy(), 3,
                                                               np.random.default_rng(0))
    train, test = data.train_y.numpy(), data.test_y.numpy()
    local = local_test_split(parts, train, test, data.num_classes, np.random.default_rng(1),
                             size=2)
    for part, tests in zip(parts, local, strict=True):
        classes = set(np.unique(train[part]).tolist())
        assert len(classes) <= 2 and len(tests) == 2
        assert set(test[tests].tolist()) <= classes  # the client's own label proportions


@pytest.mark.parametrize("damage, match", [
    (lambda f: (f / "wnids.txt").unlink(), "not found"),
    (lambda f: shutil.rmtree(f / "train" / WNIDS[1]), f"train/{WNIDS[1]}/images is missing"),
    (lambda f: (f / "val" / "images" / "val_3.JPEG").write_bytes(b"not a jpeg"),
     "cannot decode .*val_3.JPEG"),
    (lambda f: (f / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn99999999\t0\t0\n"),
     "line 1 names class 'n99999999'"),
    (lambda f: (f / "val" / "val_annotations.txt").write_text("val_0.JPEG n01443537\n"),
     "line 1 must hold a file name and a class id"),
    (lambda f: jpeg(f / "val" / "images" / "val_0.JPEG", (0, 0, 0), side=32),
     "val_0.JPEG is 32x32 pixels"),
])
def test_damaged_trees_are_one_sentence_naming_the_file(tree, damage, match):
    damage(tree / "tiny-imagenet-200")
    with pytest.raises(GossipflError, match=match) as caught:
        load(tree)
    assert "\n" not in str(caught.value)
