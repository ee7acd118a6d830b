"""EMNIST-L (gzip IDX), FEMNIST and Shakespeare (LEAF JSON), the natural partition, and the
FedSAGD models ``lstm`` and ``femnist_cnn``. Files are written in the real formats from the
format descriptions, independently of the readers under test."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import build_data
from gossipfl.data import emnist, formats, load_dataset, natural_split
from gossipfl.data.leaf import ALL_LETTERS
from gossipfl.engine import VmapOracle, auto_oracle, make_oracle
from gossipfl.engine.params import ParamLayout
from gossipfl.errors import GossipflError
from gossipfl.models import build_model
from tests.dataset_files import (
    EMNIST_STEMS,
    SPEECH,
    femnist_user,
    idx_gz,
    text_samples,
    write_emnist,
    write_leaf,
    write_shakespeare,
)

# --------------------------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------------------------


def write_femnist(root: Path, sizes=(4, 6, 3)) -> Path:
    base = root / "femnist"
    users = {f"f{k:04d}_{k}": femnist_user(n, k) for k, n in enumerate(sizes)}
    write_leaf(base / "train", [users])
    write_leaf(base / "test", [{u: femnist_user(2, 10 + k) for k, u in enumerate(users)}])
    return base


# --------------------------------------------------------------------------------------------
# EMNIST-L
# --------------------------------------------------------------------------------------------


def test_emnist_l_keeps_a_to_j_maps_labels_and_transposes(tmp_path):
    train_labels = [1, 26, 10, 11, 5, 20, 3]
    arrays = write_emnist(tmp_path / "emnist", train_labels, [2, 15, 10])
    d = load_dataset("emnist_l", root=tmp_path, download=False, normalize=False)
    keep = [i for i, v in enumerate(train_labels) if v <= 10]
    assert d.num_classes == 10 and d.input_shape == (1, 28, 28)
    assert d.train_y.tolist() == [train_labels[i] - 1 for i in keep]
    assert d.test_y.tolist() == [1, 9]
    stored = arrays["train"][0][keep[1]]
    loaded = d.train_x[1, 0].numpy()
    assert not np.array_equal(stored, stored.T)  # an asymmetric image
    np.testing.assert_array_equal(loaded, stored.T.astype(np.float32))
    assert len(d.files) == 4 and all(len(f["sha256"]) == 64 for f in d.files)


def test_emnist_l_orientation_of_a_drawn_stroke(tmp_path):
    """A horizontal bar stored the EMNIST way (as a column) comes out as a row."""
    write_emnist(tmp_path / "emnist_l", [1], [1])
    folder = tmp_path / "emnist_l"
    image = np.zeros((1, 28, 28), dtype=np.uint8)
    image[0, 3:20, 5] = 255  # stored: column 5, rows 3..19
    (folder / f"{EMNIST_STEMS['train', 'x']}.gz").write_bytes(idx_gz(image))
    d = load_dataset("emnist_l", root=tmp_path, download=False, normalize=False)
    upright = d.train_x[0, 0]
    assert upright[5, 3:20].eq(255).all() and upright.sum() == 255 * 17


def test_emnist_l_normalized_with_training_statistics(tmp_path):
    write_emnist(tmp_path / "emnist", [1, 2, 3, 4, 12], [1, 2])
    d = load_dataset("emnist_l", root=tmp_path, download=False)
    assert abs(float(d.train_x.mean())) < 1e-4
    assert float(d.train_x.std()) == pytest.approx(1.0, abs=1e-3)


def test_emnist_l_from_the_official_archive_layout(tmp_path):
    staging = tmp_path / "staging"
    write_emnist(staging, [1, 2, 14], [3])
    with zipfile.ZipFile(tmp_path / "gzip.zip", "w") as bundle:
        for path in staging.iterdir():
            bundle.write(path, f"gzip/{path.name}")
        bundle.writestr("gzip/emnist-digits-train-labels-idx1-ubyte.gz", b"other split")
    root = tmp_path / "root"
    (root / "emnist").mkdir(parents=True)
    (tmp_path / "gzip.zip").rename(root / "emnist" / "gzip.zip")
    d = load_dataset("emnist_l", root=root, download=False)
    assert d.train_y.tolist() == [0, 1] and (root / "emnist_l").is_dir()


def official_like_zip(tmp_path: Path, train_labels: list[int]) -> Path:
    staging = tmp_path / "staging"
    write_emnist(staging, train_labels, [3])
    archive = tmp_path / "server" / "gzip.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as bundle:
        for path in sorted(staging.iterdir()):
            bundle.write(path, f"gzip/{path.name}")
    return archive


def test_emnist_l_download_checks_the_md5(tmp_path, monkeypatch):
    archive = official_like_zip(tmp_path, [4, 19, 7])
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    remote = formats.RemoteFile("gzip.zip", (archive.as_uri(),), md5, "md5")
    monkeypatch.setattr(emnist, "REMOTE", remote)
    d = load_dataset("emnist_l", root=tmp_path / "data")
    assert d.train_y.tolist() == [3, 6]
    assert (tmp_path / "data" / "emnist_l" / "gzip.zip").is_file()
    monkeypatch.setattr(emnist, "REMOTE", formats.RemoteFile(
        "gzip.zip", (archive.as_uri(),), "0" * 32, "md5"))
    with pytest.raises(GossipflError, match=f"expected md5 {'0' * 32}, got {md5}"):
        load_dataset("emnist_l", root=tmp_path / "other")
    monkeypatch.undo()
    assert emnist.REMOTE.algorithm == "md5" and len(emnist.REMOTE.checksum) == 32
    assert emnist.REMOTE.urls == ("https://biometrics.nist.gov/cs_links/EMNIST/gzip.zip",)


def test_emnist_l_errors_name_the_file(tmp_path):
    with pytest.raises(GossipflError, match="emnist_l not found in .*downloads are off"):
        load_dataset("emnist_l", root=tmp_path, download=False)
    write_emnist(tmp_path / "emnist", [1, 27], [1])
    with pytest.raises(GossipflError, match=r"train-labels.*outside the letters' 1\.\.26"):
        load_dataset("emnist_l", root=tmp_path, download=False)
    write_emnist(tmp_path / "emnist", [1], [1])
    bad = tmp_path / "emnist" / f"{EMNIST_STEMS['test', 'x']}.gz"
    bad.write_bytes(gzip.compress(b"\x01\x00\x08\x03"))
    with pytest.raises(GossipflError, match="test-images.*not a valid IDX file"):
        load_dataset("emnist_l", root=tmp_path, download=False)
    with pytest.raises(GossipflError, match="data.options.augment: not an option"):
        load_dataset("emnist_l", root=tmp_path, download=False, augment=True)


# --------------------------------------------------------------------------------------------
# FEMNIST
# --------------------------------------------------------------------------------------------


def test_femnist_users_shapes_and_natural_partition(tmp_path):
    write_femnist(tmp_path, sizes=(4, 6, 3))
    d = load_dataset("femnist", root=tmp_path, download=False)
    assert d.input_shape == (1, 28, 28) and d.num_classes == 62
    assert len(d.train_y) == 13 and len(d.test_y) == 6
    assert d.users == ("f0000_0", "f0001_1", "f0002_2")
    parts = natural_split(d.train_users, len(d.users), 3, d.name)
    assert [len(p) for p in parts] == [4, 6, 3]
    x1, y1 = femnist_user(6, 1)
    np.testing.assert_allclose(d.train_x[parts[1]].reshape(6, -1).numpy(), np.array(x1),
                               rtol=0, atol=1e-6)
    assert d.train_y[parts[1]].tolist() == y1
    two = load_dataset("femnist", root=tmp_path, download=False, users=2)
    assert two.users == d.users[:2] and len(two.train_y) == 10 and len(two.test_y) == 4


def test_femnist_natural_partition_through_a_config(tmp_path):
    write_femnist(tmp_path, sizes=(4, 6, 3))
    config = load_config({"data": {"dataset": "femnist", "root": str(tmp_path),
                                   "partition": "natural", "clients": 2,
                                   "options": {"users": 2}}, "model": {"name": "femnist_cnn"}})
    dataset, parts = build_data(config)
    assert [len(p) for p in parts] == [4, 6]
    assert dataset.train_users[parts[1]].tolist() == [1] * 6
    config.data.clients = 3
    with pytest.raises(GossipflError, match="data.clients: .* 2 users .* must be 2, got 3"):
        build_data(config)
    config.data.options = {}
    config.data.dataset, config.data.options = "synthetic", {}
    with pytest.raises(GossipflError, match="data.partition: 'natural' needs"):
        build_data(config)


def test_femnist_bad_inputs(tmp_path):
    with pytest.raises(GossipflError, match="femnist .*not found in.*preprocess.sh"):
        load_dataset("femnist", root=tmp_path, download=False)
    base = write_femnist(tmp_path)
    with pytest.raises(GossipflError, match="data.options.users: 4 users asked for"):
        load_dataset("femnist", root=tmp_path, download=False, users=4)
    broken = base / "train" / "all_data_0_niid_0_keep_0_train_9.json"
    text = broken.read_text()
    broken.write_text(text[:-5])
    with pytest.raises(GossipflError, match=f"{broken.name} is not valid LEAF JSON"):
        load_dataset("femnist", root=tmp_path, download=False)
    content = json.loads(text)
    content["user_data"]["f0001_1"]["x"][2] = [0.5] * 783
    broken.write_text(json.dumps(content))
    with pytest.raises(GossipflError, match=r"f0001_1.*not numbers of equal length"):
        load_dataset("femnist", root=tmp_path, download=False)
    content = json.loads(text)
    content["user_data"]["f0002_2"]["y"][0] = 62
    broken.write_text(json.dumps(content))
    with pytest.raises(GossipflError, match=r"f0002_2.*not integers in 0\.\.61"):
        load_dataset("femnist", root=tmp_path, download=False)
    del content["user_data"]
    broken.write_text(json.dumps(content))
    with pytest.raises(GossipflError, match="'user_data' mapping"):
        load_dataset("femnist", root=tmp_path, download=False)


def test_femnist_json_nested_too_deep_is_not_valid_leaf_json(tmp_path):
    deep = write_femnist(tmp_path) / "train" / "all_data_0_niid_0_keep_0_train_9.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(GossipflError, match=f"{deep} is not valid LEAF JSON "
                                            r"\(maximum recursion depth exceeded"):
        load_dataset("femnist", root=tmp_path, download=False)


# --------------------------------------------------------------------------------------------
# Shakespeare
# --------------------------------------------------------------------------------------------


def test_leaf_vocabulary():
    assert len(ALL_LETTERS) == 80 == len(set(ALL_LETTERS))
    assert ALL_LETTERS[0] == "\n" and ALL_LETTERS[-1] == "}" and ALL_LETTERS[25] == "A"


def test_shakespeare_encoding_cap_and_users(tmp_path):
    write_shakespeare(tmp_path, sizes=(5, 12, 7))
    d = load_dataset("shakespeare", root=tmp_path, download=False, max_samples=6)
    assert d.num_classes == 80 and d.input_shape == (80,)
    assert d.train_x.dtype == torch.int64 and d.train_y.dtype == torch.int64
    parts = natural_split(d.train_users, len(d.users), 3, d.name)
    assert [len(p) for p in parts] == [5, 6, 6]
    xs, ys = text_samples(SPEECH, 12, 3)
    first = d.train_x[parts[1][0]].tolist()
    assert "".join(ALL_LETTERS[i] for i in first) == xs[0]
    assert [ALL_LETTERS.index(c) for c in "To be,"] == [44, 67, 1, 54, 57, 8]
    assert d.train_x[parts[0][0], :6].tolist() == [44, 67, 1, 54, 57, 8]
    assert d.train_y[parts[1]].tolist() == [ALL_LETTERS.index(c) for c in ys[:6]]
    assert len(d.test_y) == 9
    full = load_dataset("shakespeare", root=tmp_path, download=False, max_samples=None)
    assert len(full.train_y) == 24
    default = load_dataset("shakespeare", root=tmp_path, download=False)
    assert len(default.train_y) == 24  # all users below the 2000 default cap


def test_shakespeare_bad_inputs(tmp_path):
    with pytest.raises(GossipflError, match="shakespeare .*not found in.*-tf 0.8"):
        load_dataset("shakespeare", root=tmp_path, download=False)
    base = write_shakespeare(tmp_path)
    path = base / "test" / "all_data_0_niid_0_keep_0_train_9.json"
    content = json.loads(path.read_text())
    user = content["users"][1]
    content["user_data"][user]["x"][1] = "€" + content["user_data"][user]["x"][1][1:]
    path.write_text(json.dumps(content))
    with pytest.raises(GossipflError, match=f"{path.name} .*{user}.*'€', which is not in"):
        load_dataset("shakespeare", root=tmp_path, download=False)
    content["user_data"][user]["x"][1] = "short"
    path.write_text(json.dumps(content))
    with pytest.raises(GossipflError, match="not a string of 80 characters"):
        load_dataset("shakespeare", root=tmp_path, download=False)
    with pytest.raises(GossipflError, match="data.options.max_samples: must be >= 1"):
        load_dataset("shakespeare", root=tmp_path, download=False, max_samples=0)
    with pytest.raises(GossipflError, match="data.options.users: must be an integer or null"):
        load_dataset("shakespeare", root=tmp_path, download=False, users="all")
    with pytest.raises(GossipflError, match="data.options.cap: not an option"):
        load_dataset("shakespeare", root=tmp_path, download=False, cap=3)


# --------------------------------------------------------------------------------------------
# Models and oracles
# --------------------------------------------------------------------------------------------


def test_lstm_shape_parameters_and_auto_oracle():
    model = build_model("lstm", (80,), 80, seed=0)
    out = model(torch.randint(0, 80, (3, 80)))
    assert out.shape == (3, 80)
    lstm_params = sum(4 * 100 * (n_in + 100) + 2 * 4 * 100 for n_in in (8, 100))
    assert sum(p.numel() for p in model.parameters()) == 80 * 8 + lstm_params + 100 * 80 + 80
    assert auto_oracle(model) == "loop"
    assert model.head_names == ("head.weight", "head.bias")


@pytest.mark.slow
def test_lstm_loop_and_vmap_gradients_agree_but_config_vmap_is_refused():
    model = build_model("lstm", (80,), 80, seed=1, hidden=12)
    layout = ParamLayout.from_module(model)
    X = layout.flatten(model).detach().expand(3, -1).clone()
    X += 0.05 * torch.randn(X.shape, generator=torch.Generator().manual_seed(0))
    x = torch.randint(0, 80, (3, 4, 12), generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 80, (3, 4), generator=torch.Generator().manual_seed(2))
    loss_l, grad_l = make_oracle("loop", model).loss_and_grad(X, x, y)
    with pytest.warns(UserWarning):  # vmap's per-client fallback for the LSTM kernel
        loss_v, grad_v = VmapOracle(model).loss_and_grad(X, x, y)
    with pytest.raises(GossipflError, match="engine.oracle: 'vmap' cannot run .* recurrent"):
        make_oracle("vmap", model)
    torch.testing.assert_close(loss_l, loss_v)
    torch.testing.assert_close(grad_l, grad_v, atol=1e-6, rtol=1e-4)
    assert not torch.allclose(grad_l[0], grad_l[1])


def test_femnist_cnn_layers():
    model = build_model("femnist_cnn", (1, 28, 28), 62, seed=0)
    assert model(torch.zeros(2, 1, 28, 28)).shape == (2, 62)
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert shapes == [(32, 1, 5, 5), (32,), (64, 32, 5, 5), (64,), (2048, 3136), (2048,),
                      (62, 2048), (62,)]
    assert auto_oracle(model) == "stacked"


@pytest.mark.slow
def test_lstm_two_rounds_on_shakespeare_through_the_api(tmp_path):
    write_shakespeare(tmp_path, sizes=(9, 12, 10))
    result = gossipfl.run({
        "data": {"dataset": "shakespeare", "root": str(tmp_path), "partition": "natural",
                 "clients": 3, "options": {"max_samples": 10}},
        "model": {"name": "lstm"},
        "topology": {"name": "ring"},
        "algorithm": {"name": "dfedavg"},
        "train": {"rounds": 2, "local_steps": 2, "batch_size": 4, "lr": 0.5},
        "eval": {"every": 1},
        "seed": 3,
    })
    assert [row["round"] for row in result.metrics] == [1, 2]
    for row in result.metrics:
        assert math.isfinite(row["train_loss"]) and math.isfinite(row["test_acc"])
    assert result.info["partition"].samples.tolist() == [9, 10, 10]


def test_cli_data_and_list_know_the_natural_partition(tmp_path, capsys):
    from gossipfl import cli

    write_shakespeare(tmp_path, sizes=(5, 12, 7))
    assert cli.main(["data", "shakespeare", "--partition", "natural", "--clients", "3",
                     "--root", str(tmp_path), "--option", "max_samples=6"]) == 0
    out = capsys.readouterr().out
    assert "shakespeare: 17 train / 9 test samples, input [80], 80 classes" in out
    assert "3 clients, 17 samples" in out
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "natural" in out.split("partitions:")[1].splitlines()[0]
    for name in ("emnist_l", "femnist", "shakespeare", "femnist_cnn", "lstm"):
        assert name in out
