"""Issue 24: user data files and plugins. Every mistake in a data file, a plugin or the
model/data/algorithm combination is one sentence naming the file, plugin or key (the CLI exits
with status 2) before anything is trained or written. One section per class of mistake; the
data files are written in their real formats by the helpers of the loader tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.data import Dataset, from_tensors, load_dataset
from gossipfl.data.datasets import USER_DATASETS
from gossipfl.errors import GossipflError
from gossipfl.models import MODELS, build_model
from tests.dataset_files import (
    WNIDS,
    femnist_user,
    write_emnist,
    write_leaf,
    write_shakespeare,
    write_tree,
)
from tests.helpers import SMALL, one_sentence


def config(**sections) -> dict:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in SMALL.items()}
    for key, value in sections.items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


def refused(tmp_path: Path, capsys, cfg: dict, *extra: str) -> str:
    """The CLI refuses ``cfg`` with one sentence and exit status 2, writing nothing."""
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "runs"
    err = one_sentence(capsys, "run", str(tmp_path / "exp.yaml"), "--quiet", "--out",
                       str(out), "--name", "x", *extra)
    assert not out.exists()
    return err


def plugin(tmp_path: Path, source: str, name: str = "plug.py") -> Path:
    path = tmp_path / name
    path.write_text("import torch\nfrom torch import nn\n"
                    "from gossipfl.models import register_model\n"
                    "from gossipfl.data import register_dataset, from_tensors, Dataset\n"
                    "from gossipfl.algorithms import register, Algorithm\n" + source)
    return path


@pytest.fixture(autouse=True)
def _forget_plugins():
    """Each test's plugins are its own: the registries are restored afterwards."""
    from gossipfl import plugins
    from gossipfl.algorithms import ALGORITHMS, available_algorithms

    available_algorithms()
    saved = dict(MODELS), dict(USER_DATASETS), dict(ALGORITHMS), dict(plugins._LOADED)
    yield
    for registry, before in zip((MODELS, USER_DATASETS, ALGORITHMS, plugins._LOADED), saved,
                                strict=True):
        registry.clear()
        registry.update(before)


# --------------------------------------------------------------------------------------------
# A split that ends up empty
# --------------------------------------------------------------------------------------------


def test_emnist_test_file_without_letters_a_to_j(tmp_path, capsys):
    write_emnist(tmp_path / "emnist_l", [1, 2, 3, 10] * 3, [11, 12, 26])
    with pytest.raises(GossipflError, match=r"emnist-letters-test-labels-idx1-ubyte.gz has no "
                       r"letters a–j .*only 11..26.*emnist_l's test split would be empty"):
        load_dataset("emnist_l", root=tmp_path, download=False)
    cfg = config(data={"dataset": "emnist_l", "root": str(tmp_path), "options": {}})
    assert "test split would be empty" in refused(tmp_path, capsys, cfg)


def test_leaf_test_users_who_are_not_training_users(tmp_path, capsys):
    base = tmp_path / "femnist"
    write_leaf(base / "train", [{"u1": femnist_user(4, 1), "u2": femnist_user(4, 2)}])
    write_leaf(base / "test", [{"v1": femnist_user(2, 3)}])
    with pytest.raises(GossipflError, match=r"test/all_data_0.*\.json has test user 'v1', who "
                       r"is not a user of .*femnist/train.*-t sample"):
        load_dataset("femnist", root=tmp_path, download=False)
    cfg = config(data={"dataset": "femnist", "root": str(tmp_path), "clients": 2,
                       "partition": "natural", "options": {}})
    assert "test user 'v1'" in refused(tmp_path, capsys, cfg)


def test_leaf_kept_users_without_test_samples(tmp_path):
    base = tmp_path / "femnist"
    write_leaf(base / "train", [{"u1": femnist_user(4, 1), "u2": femnist_user(4, 2)}])
    write_leaf(base / "test", [{"u1": femnist_user(0, 3), "u2": femnist_user(2, 4)}])
    assert len(load_dataset("femnist", root=tmp_path, download=False).test_y) == 2
    with pytest.raises(GossipflError, match=r"femnist/test has no samples of the 1 training "
                       r"users kept, so femnist's test split would be empty"):
        load_dataset("femnist", root=tmp_path, download=False, users=1)


def test_plugin_dataset_with_an_empty_test_split(tmp_path, capsys):
    path = plugin(tmp_path, (
        "@register_dataset('no_test')\n"
        "def no_test(root, download):\n"
        "    x = torch.randn(40, 6); y = torch.arange(40) % 3\n"
        "    return from_tensors(x, y, x[:0], y[:0])\n"))
    cfg = config(data={"dataset": "no_test", "options": {}}, plugins=[str(path)])
    err = refused(tmp_path, capsys, cfg)
    assert "no_test (the plugin loader no_test in " in err
    assert "the test split is empty" in err


# --------------------------------------------------------------------------------------------
# User data files: users, classes, vocabulary
# --------------------------------------------------------------------------------------------


def test_leaf_json_with_no_users(tmp_path, capsys):
    base = tmp_path / "femnist"
    write_leaf(base / "train", [{}])
    write_leaf(base / "test", [{}])
    with pytest.raises(GossipflError, match=r"LEAF files in .*femnist/train list no users"):
        load_dataset("femnist", root=tmp_path, download=False)
    cfg = config(data={"dataset": "femnist", "root": str(tmp_path), "clients": 1,
                       "partition": "natural", "options": {}})
    assert "list no users" in refused(tmp_path, capsys, cfg)


def test_leaf_user_without_training_samples(tmp_path):
    base = tmp_path / "femnist"
    write_leaf(base / "train", [{"u1": femnist_user(4, 1), "u2": femnist_user(0, 2)}])
    write_leaf(base / "test", [{"u1": femnist_user(2, 3)}])
    with pytest.raises(GossipflError, match=r"\.json gives user 'u2' no training samples"):
        load_dataset("femnist", root=tmp_path, download=False)


def test_tiny_imagenet_empty_class_folder(tmp_path, capsys):
    folder = write_tree(tmp_path)
    for image in (folder / "train" / WNIDS[1] / "images").glob("*.JPEG"):
        image.unlink()
    with pytest.raises(GossipflError, match=rf"train/{WNIDS[1]}/images holds no .JPEG images, "
                       rf"so class {WNIDS[1]} of .*wnids.txt would have no training samples"):
        load_dataset("tiny_imagenet", root=tmp_path, download=False)
    cfg = config(data={"dataset": "tiny_imagenet", "root": str(tmp_path), "options": {}},
                 model={"name": "cnn", "options": {}})
    assert "holds no .JPEG images" in refused(tmp_path, capsys, cfg)


def test_tiny_imagenet_wnids_of_classes_without_folders(tmp_path):
    folder = write_tree(tmp_path)
    (folder / "wnids.txt").write_text("\n".join([*WNIDS, "n09999999"]) + "\n")
    with pytest.raises(GossipflError, match=r"train/n09999999/images is missing \(class "
                       r"n09999999 of .*wnids.txt\)"):
        load_dataset("tiny_imagenet", root=tmp_path, download=False)
    (folder / "wnids.txt").write_text("\n".join(f"n{i:08d}" for i in range(201)) + "\n")
    with pytest.raises(GossipflError, match=r"wnids.txt lists 201 classes; Tiny-ImageNet has "
                       r"200"):
        load_dataset("tiny_imagenet", root=tmp_path, download=False)


def test_shakespeare_with_a_model_that_does_not_take_token_ids(tmp_path, capsys):
    write_shakespeare(tmp_path)
    cfg = config(data={"dataset": "shakespeare", "root": str(tmp_path), "clients": 3,
                       "partition": "natural", "options": {}})
    err = refused(tmp_path, capsys, cfg)
    assert ("model.name: shakespeare's samples are token ids (integers, shape (80,)), which "
            "model 'mlp' does not take (it has no nn.Embedding); use a model for token "
            "sequences, such as 'lstm'.") in err


def test_shakespeare_vocabulary_smaller_than_the_data(tmp_path, capsys):
    from gossipfl.models import check_model_fits

    write_shakespeare(tmp_path)
    data = load_dataset("shakespeare", root=tmp_path, download=False)
    top = int(max(data.train_x.max(), data.test_x.max()))
    ok = build_model("lstm", data.input_shape, data.num_classes, vocab=top + 1, hidden=4,
                     layers=1)
    check_model_fits(ok, data)
    small = build_model("lstm", data.input_shape, data.num_classes, vocab=top, hidden=4,
                        layers=1)
    with pytest.raises(GossipflError, match=rf"model.options.vocab: model 'lstm' embeds {top} "
                       rf"tokens, but shakespeare's samples hold token ids up to {top}"):
        check_model_fits(small, data)
    cfg = config(data={"dataset": "shakespeare", "root": str(tmp_path), "clients": 3,
                       "partition": "natural", "options": {}},
                 model={"name": "lstm", "options": {"vocab": 10, "hidden": 4, "layers": 1}})
    assert "model.options.vocab: model 'lstm' embeds 10 tokens" in refused(tmp_path, capsys,
                                                                            cfg)


def _toy(n: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 4), torch.arange(n) % 3


@pytest.mark.parametrize("make, match", [
    (lambda x, y: Dataset("d", x, y[:-1], x, y, 3), "the train split needs one label per sample"),
    (lambda x, y: Dataset("d", x[:0], y[:0], x, y, 3), "the train split is empty"),
    (lambda x, y: Dataset("d", x, y, x[:, :2], y, 3), r"train and test samples differ"),
    (lambda x, y: Dataset("d", x, y, x, y, 2), (r"train labels must lie in 0..1 \(2 classes\), "
                                               r"found 0..2")),
    (lambda x, y: Dataset("d", x, y, x, y.float(), 3), "test labels must be integer classes"),
    (lambda x, y: Dataset("d", x.to(torch.int32), y, x.to(torch.int32), y, 3),
     "train inputs must be floats or int64 token ids, got torch.int32"),
    (lambda x, y: Dataset("d", x, y, x, y, 3, users=("a", "b"),
                          train_users=np.zeros(len(y), dtype=np.int64)),
     "user 'b' has no training samples"),
    (lambda x, y: Dataset("d", x, y, x, y, 3, users=("a",),
                          train_users=np.zeros(3, dtype=np.int64)),
     "train_users must give each of the 12 training samples one of the 1 users"),
])
def test_one_check_of_a_loaded_datasets_consistency(make, match):
    from gossipfl.data import check_dataset

    x, y = _toy()
    check_dataset(Dataset("d", x, y, x, y, 3))
    with pytest.raises(GossipflError, match=rf"data.dataset: d \(from here\): {match}"):
        check_dataset(make(x, y), origin="from here")


# --------------------------------------------------------------------------------------------
# Plugins
# --------------------------------------------------------------------------------------------


def test_plugin_that_is_not_a_python_file(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("x = 1\n")
    assert "is not a Python file" in one_sentence(capsys, "list", "--plugin",
                                                  str(tmp_path / "notes.txt"))
    (tmp_path / "pkg").mkdir()
    assert "is a folder" in one_sentence(capsys, "list", "--plugin", str(tmp_path / "pkg"))


@pytest.mark.parametrize("spec", ["no_such_pkg.sub", "no_such_pkg.sub.mod", "json.no_such",
                                  "my_plugin.txt"])
def test_dotted_module_that_does_not_exist(spec, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    err = one_sentence(capsys, "list", "--plugin", spec)
    assert f"--plugin: no Python file or module named '{spec}'." in err


def test_model_builder_with_the_wrong_signature(tmp_path, capsys):
    path = plugin(tmp_path, "@register_model('one_arg')\ndef one_arg(input_shape):\n"
                            "    return nn.Linear(6, 3)\n")
    err = one_sentence(capsys, "list", "--plugin", str(path))
    assert "line 6 of" in err and "plug.py" in err
    assert ("model 'one_arg' (one_arg in " in err and "must take (input_shape, num_classes, "
            "**options) as its arguments; its signature is (input_shape)." in err)


@pytest.mark.parametrize("body, match", [
    ("    return None\n", (r"model 'bad' \(bad in .*plug.py\) must return a torch.nn.Module, "
                          r"got None")),
    ("    return 'a model'\n", "must return a torch.nn.Module, got str"),
    ("    return nn.ReLU()\n", "returned a module without trainable parameters"),
    ("    raise RuntimeError('boom')\n", (r"model 'bad' \(bad in .*plug.py\) failed to build for "
                                       r"input shape \(6,\) and 3 classes \(line 8 of "
                                       r".*plug.py\): RuntimeError: boom")),
    ("    return nn.Linear(6, 7)\n", (r"model.name: model 'bad' outputs \(7,\) values per "
                                     r"sample, but synthetic has 3 classes")),
    ("    return nn.Linear(5, num_classes)\n", (r"model.name: model 'bad' cannot take "
                                               r"synthetic's samples \(float32 values of shape "
                                               r"\(6,\)\): RuntimeError: mat1 and mat2")),
])
def test_model_builder_that_returns_something_unusable(tmp_path, capsys, body, match):
    path = plugin(tmp_path, "@register_model('bad')\ndef bad(input_shape, num_classes):\n" + body)
    cfg = config(model={"name": "bad", "options": {}}, plugins=[str(path)])
    with pytest.raises(GossipflError, match=match):
        gossipfl.run(cfg)
    assert "error: " in refused(tmp_path, capsys, cfg)


def test_plugin_options_of_the_wrong_type(tmp_path, capsys):
    path = plugin(tmp_path, (
        "@register_dataset('toy')\n"
        "def toy(root, download, n: int = 40, scale=1.0, tag='x'):\n"
        "    x = scale * torch.randn(n, 6); y = torch.arange(n) % 3\n"
        "    return from_tensors(x, y, x[:8], y[:8])\n"
        "@register_model('wide')\n"
        "def wide(input_shape, num_classes, width=8):\n"
        "    return nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, num_classes))\n"))
    base = config(data={"dataset": "toy", "options": {}}, model={"name": "wide", "options": {}},
                  plugins=[str(path)])
    assert gossipfl.run(base, quiet=True).metrics  # no bar in the next call's stderr
    for section, key, value, message in [
            ("data", "n", "many", "data.options.n: must be an integer, got 'many'."),
            ("data", "scale", "big", "data.options.scale: must be a number, got 'big'."),
            ("data", "tag", 3, "data.options.tag: must be a string, got 3."),
            ("model", "width", 2.5, "model.options.width: must be an integer, got 2.5.")]:
        cfg = config(**{k: v for k, v in base.items() if k != section},
                     **{section: {**base[section], "options": {key: value}}})
        assert message in refused(tmp_path, capsys, cfg)


def test_plugin_dataset_loader_that_fails(tmp_path, capsys):
    path = plugin(tmp_path, "@register_dataset('from_file')\ndef from_file(root, download):\n"
                            "    return open(root / 'missing.npz')\n")
    cfg = config(data={"dataset": "from_file", "root": str(tmp_path), "options": {}},
                 plugins=[str(path)])
    err = refused(tmp_path, capsys, cfg)
    assert "data.dataset: dataset 'from_file' (from_file in " in err
    assert "failed to load (line 8 of " in err and "FileNotFoundError" in err


@pytest.mark.parametrize("source, match", [
    ("@register\nclass Nameless(Algorithm):\n    paper = 'mine'\n",
     (r"algorithm class Nameless in .*plug.py has no name: give it one, e.g. name = "
     r"\"my_algorithm\"")),
    ("@register\nclass Blank(Algorithm):\n    name = ' '\n", "algorithm class Blank in .* has no name"),
    (("from gossipfl.algorithms.decentralized.dfedavg import DFedAvg\n"
     "@register\nclass Copy(DFedAvg):\n    pass\n"),
     r"algorithm class Copy in .*plug.py inherits the name 'dfedavg' of DFedAvg"),
    ("@register\nclass NotOne:\n    name = 'not_one'\n",
     "@register takes a subclass of gossipfl.algorithms.Algorithm, got NotOne"),
    ("@register_model\ndef net(input_shape, num_classes):\n    return nn.Linear(6, 3)\n",
     r"register_model needs the model's name, as in @register_model\(\"my_model\"\)"),
    ("@register_dataset\ndef data(root, download):\n    pass\n",
     "register_dataset needs the dataset's name"),
    ("@register_dataset('loader')\ndef loader(root):\n    pass\n",
     r"dataset 'loader' \(loader in .*\) must take \(root, download, \*\*options\)"),
])
def test_registrations_without_a_name_or_of_the_wrong_kind(tmp_path, capsys, source, match):
    path = plugin(tmp_path, source)
    with pytest.raises(GossipflError, match=rf"plugins: plugin '.*plug.py' failed to load "
                       rf"\(line \d+ of .*plug.py\): {match}"):
        load_config({"plugins": [str(path)]})
    err = one_sentence(capsys, "list", "--plugin", str(path))
    assert "failed to load" in err


def test_list_has_no_blank_rows_after_a_refused_plugin(tmp_path, capsys):
    path = plugin(tmp_path, "@register\nclass Nameless(Algorithm):\n    paper = 'mine'\n")
    one_sentence(capsys, "list", "--plugin", str(path))
    from gossipfl.algorithms import available_algorithms

    assert "" not in available_algorithms()


# --------------------------------------------------------------------------------------------
# Personalized algorithms need a shared body and a personal head
# --------------------------------------------------------------------------------------------

PERSONAL_SPLIT = ["dfedmdc", "dfedsmdc", "fedper", "fedrep", "fedbabu", "fedrod"]


@pytest.mark.parametrize("algorithm", PERSONAL_SPLIT)
def test_personalized_split_with_no_personal_parameters(tmp_path, capsys, algorithm):
    cfg = config(model={"name": "mlp", "options": {"hidden": [8]}, "personal": []},
                 algorithm={"name": algorithm})
    err = refused(tmp_path, capsys, cfg)
    assert (f"model.personal: no parameter of the model is personal (model.personal is empty, "
            f"or unset and the model has no head: no nn.Linear layer), but algorithm "
            f"'{algorithm}' keeps a personal part") in err
    assert "the model's are body.1.weight" in err


@pytest.mark.parametrize("algorithm", ["dfedmdc", "dfedsmdc", "fedper", "fedrep", "fedbabu"])
def test_personalized_split_with_everything_personal(tmp_path, capsys, algorithm):
    cfg = config(model={"name": "mlp", "options": {"hidden": [8]}, "personal": ["*"]},
                 algorithm={"name": algorithm})
    err = refused(tmp_path, capsys, cfg)
    assert (f"model.personal: every parameter of the model is personal, so algorithm "
            f"'{algorithm}' would share nothing (0 bytes sent)") in err


@pytest.mark.slow
def test_plugin_model_without_a_head(tmp_path, capsys):
    path = plugin(tmp_path, (
        "@register_model('convs')\n"
        "def convs(input_shape, num_classes):\n"
        "    return nn.Sequential(nn.Unflatten(1, (1, 6)), nn.Conv1d(1, 4, 3), nn.ReLU(),\n"
        "                         nn.Conv1d(4, num_classes, 4), nn.Flatten())\n"))
    cfg = config(model={"name": "convs", "options": {}}, plugins=[str(path)])
    assert gossipfl.run(cfg).metrics  # whole-model algorithms need no head
    cfg["algorithm"] = {"name": "fedrep"}
    err = refused(tmp_path, capsys, cfg)
    assert "algorithm 'fedrep' keeps a personal part" in err
    assert "the model's are 1.weight, 1.bias, 3.weight, 3.bias" in err
    cfg["model"]["personal"] = ["3.*"]
    assert gossipfl.run(cfg).metrics  # naming the personal layer makes it work


def test_whole_model_algorithms_accept_any_split():
    for algorithm, personal in [("dfedavg", ["*"]), ("ditto", ["*"]), ("local", [])]:
        cfg = config(model={"name": "mlp", "options": {"hidden": [8]}, "personal": personal},
                     algorithm={"name": algorithm})
        assert gossipfl.run(cfg).metrics


def test_from_tensors_without_a_test_split_still_runs():
    """The API's own tensors may come without a test set (nothing to measure, by choice)."""
    x, y = torch.randn(40, 6), torch.arange(40) % 3
    data = from_tensors(x, y, x[:0], y[:0])
    cfg = config(data={"dataset": "synthetic", "tensors": data, "options": {}})
    assert gossipfl.run(cfg).params.shape[0] == 4


_X, _Y = torch.randn(12, 3), torch.arange(12) % 2
_NAN = torch.randn(12, 3).index_fill_(0, torch.tensor([5]), float("nan"))


@pytest.mark.parametrize(("args", "kwargs", "match"), [
    ((_X, _Y, _X, _Y), {"num_classes": "3"}, (r"^data.num_classes: custom classes must be "
                                             r"counted by an integer >= 1 .*got '3'\.$")),
    ((_X, _Y, _X, _Y), {"num_classes": 2.5}, r"^data.num_classes: .*got 2.5\.$"),
    ((_X, _Y, _X, _Y), {"num_classes": True}, r"^data.num_classes: .*got True\.$"),
    ((_X, _Y, _X, _Y), {"name": 5}, r"^data.dataset: from_tensors needs a name"),
    ((np.float32(1), _Y, _X, _Y), {}, r"^data.dataset: custom train data needs one label"),
    (("abc", _Y, _X, _Y), {}, (r"^data.dataset: custom train inputs must be numbers "
                              r"\(booleans, integers or floats\), got an array of <U3\.$")),
    ((_X, ["a"] * 12, _X, _Y), {}, r"^data.dataset: custom train labels must be numbers"),
    (([[1.0], [1.0, 2.0]], [0, 1], _X, _Y), {}, r"rows of different lengths"),
    ((_X.to(torch.complex64), _Y, _X, _Y), {}, r"train inputs must be real numbers"),
    ((_NAN, _Y, _X, _Y), {}, (r"^data.dataset: custom \(from_tensors\): train inputs hold NaN "
                             r"or infinite values \(the first in sample 5\)")),
    ((_X, _Y.double().index_fill_(0, torch.tensor([7]), float("inf")), _X, _Y.double()), {},
     r"train labels hold NaN or infinite values \(the first in sample 7\)"),
    ((torch.arange(12.0), _Y, torch.arange(12.0), _Y), {},
     (r"train inputs need a sample axis and the sample's own \(shape \[N, features...\]\), "
     r"got \[12\]\.$")),
    ((_X[:0], _Y[:0], _X, _Y), {}, r"the train split is empty"),
])
def test_from_tensors_refuses_what_cannot_be_trained_on(args, kwargs, match):
    """Each was accepted (NaN inputs stopped the run later as diverged; a float num_classes
    was truncated) or a TypeError from torch."""
    with pytest.raises(GossipflError, match=match):
        from_tensors(*args, **kwargs)


@pytest.mark.parametrize(("dtype", "large"), [(torch.float32, 3e38), (torch.float16, 6e4),
                                              (torch.bfloat16, 3e38)])
def test_a_sum_that_overflows_still_finds_every_value_finite(dtype, large):
    from gossipfl.data.datasets import _first_not_finite

    big = torch.full((9000, 2), large, dtype=dtype)
    assert not torch.isfinite(big.sum()) and _first_not_finite(big) is None
    big[8500, 1] = float("-inf")
    assert _first_not_finite(big) == 8500
    big[8500, 1], big[12, 0] = large, float("nan")
    assert _first_not_finite(big) == 12


def test_mse_on_class_labels_is_refused(tmp_path, capsys):
    """mse against the class indices of a 3-class dataset (a model of 3 outputs) is refused
    before anything trains or is written."""
    err = refused(tmp_path, capsys, config(train={**SMALL["train"], "loss": "mse"}))
    assert "train.loss: 'mse' needs real-valued targets" in err and "3 classes" in err


@pytest.mark.parametrize(("environ", "match"), [
    ({"RANK": "0", "WORLD_SIZE": "abc"}, ("WORLD_SIZE: the launcher's environment variable "
                                         "must be an integer >= 1, got 'abc'.")),
    ({"RANK": "abc", "WORLD_SIZE": "2"}, ("RANK: the launcher's environment variable must be "
                                         "an integer >= 0, got 'abc'.")),
    ({"RANK": "3", "WORLD_SIZE": "2"}, ("RANK: the launcher's rank must be below WORLD_SIZE 2, "
                                       "got 3.")),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "x"},
     "MASTER_PORT: the launcher's environment variable must be an integer >= 1, got 'x'."),
    ({"RANK": "0", "WORLD_SIZE": "2"}, ("engine.backend: the ranks cannot meet (Error "
                                       "initializing torch.distributed")),
])
def test_a_launchers_malformed_environment(tmp_path, capsys, monkeypatch, environ, match):
    """RANK, WORLD_SIZE and the rendezvous's variables as a launcher sets them, malformed or
    missing (MASTER_ADDR): one sentence naming the variable, before anything is written."""
    for name in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert match in refused(tmp_path, capsys, config())


def test_a_config_that_never_ends_is_read_no_further_than_any_config_could_be(capsys):
    """/dev/zero as the config: read up to the largest text a config could be, then one
    sentence (it was read until the memory ran out)."""
    err = one_sentence(capsys, "run", "/dev/zero", "--quiet")
    assert "config: '/dev/zero' holds more than 64 MiB" in err


@pytest.mark.parametrize(("argv", "match"), [
    (["run", "--quiet", "--set", "train..lr=0.7"],
     "--set: the key 'train..lr' has an empty part"),  # was train.lr, silently
    (["run", "--quiet", "--set", ".train=1"], "--set: the key '.train' has an empty part"),
    (["data", "synthetic", "--clients", "4", "--option", "dim"],
     "--option: expected KEY=VALUE (an option of the dataset), got 'dim'."),  # named --set
])
def test_an_override_whose_key_is_malformed_names_its_flag(capsys, argv, match):
    assert match in one_sentence(capsys, *argv)


def test_a_studys_set_comes_after_its_grid_or_is_refused(tmp_path, capsys):
    """--set comes last (the configuration guide), after a grid point: over a key the grid
    gives one value it wins (it was overridden by that value, silently: the README's quick
    study ran 10 rounds under --set train.rounds=1); a --set of a key the grid gives
    several values (or a section value that sets it) could not come last at every point
    without making them the same, so it is one sentence; a --set of another key of a
    section the grid sets stays (mappings merge). An empty study file is refused (it ran
    the quickstart's study)."""
    from gossipfl.studies.sweep import expand, load_study

    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"base": SMALL, "grid": {"train.lr": [0.1, 0.05],
                                                             "train.rounds": [3]}}))
    runs = expand(load_study(study, ["train.rounds=1"]))
    assert sorted((v.config.train.lr, v.config.train.rounds) for v in runs) == \
        [(0.05, 1), (0.1, 1)]
    assert {v.config.train.rounds for v in expand(load_study(study))} == {3}
    for item in ("train.lr=-1", "train={lr: 1}", "train=!replace {rounds: 1}"):
        err = one_sentence(capsys, "sweep", str(study), "--out", str(tmp_path / "o"),
                           "--set", item)
        assert "the study's grid gives train.lr several values" in err, item
    assert not (tmp_path / "o").exists()
    base = load_study(study, ["train={batch_size: 2}", "train.momentum=0.5"]).base
    assert base["train"]["batch_size"] == 2 and base["train"]["momentum"] == 0.5
    study.write_text(yaml.safe_dump({"base": SMALL, "grid": {"data": [
        {"partition": "iid"}, {"partition": "dirichlet", "alpha": 0.5}]}}))
    assert load_study(study, ["data.clients=6"]).base["data"]["clients"] == 6
    err = one_sentence(capsys, "sweep", str(study), "--set", "data.alpha=0.1")
    assert "--set data.alpha: the study's grid gives data several values" in err
    study.write_text("")
    err = one_sentence(capsys, "sweep", str(study))
    assert err.startswith("error: study: ") and "is empty" in err


def test_a_plugin_that_exits_while_it_is_imported(tmp_path, capsys):
    """sys.exit() in a plugin's import ended the run with its status and nothing said."""
    path = plugin(tmp_path, "import sys\nsys.exit(3)\n")
    err = refused(tmp_path, capsys, config(), "--plugin", str(path))
    assert f"--plugin: plugin '{path}' failed to load (line 7 of {path}): it called " \
           f"sys.exit(3)" in err


@pytest.mark.parametrize(("argv", "match"), [
    (["topology", "ring", "--clients", "abc"],
     ("error: --clients: invalid int value: 'abc' (`gossipfl topology --help` lists the "
     "options).")),
    (["sweep", "x.yaml", "--jobs", "abc"], "error: --jobs: invalid int value: 'abc'"),
    (["bogus"], "error: COMMAND: invalid choice: 'bogus'"),
])
def test_a_flag_argparse_refuses_is_one_sentence(capsys, argv, match):
    """argparse's own refusals: the flag and its value, without the usage block first."""
    assert one_sentence(capsys, *argv).startswith(match)


def test_report_of_a_file_names_the_file_not_out(tmp_path, capsys):
    path = tmp_path / "afile"
    path.write_text("x")
    err = one_sentence(capsys, "report", str(path))
    assert str(path) in err and "--out" not in err


def test_an_output_folder_where_no_folder_can_be_made_is_named_by_its_key(tmp_path, capsys):
    """/proc looks writable to root (access()), yet nothing can be made in it: the run is
    refused naming output.dir before anything runs (it was a write error of the run's
    directory, naming no key)."""
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config()))
    err = one_sentence(capsys, "run", str(tmp_path / "exp.yaml"), "--quiet", "--set",
                       "output.dir=/proc/gossipfl_test")
    assert err.startswith("error: output.dir: cannot write to '/proc/gossipfl_test")
    assert "no folder can be made in '/proc'" in err


def test_an_empty_matrix_file_is_one_sentence(tmp_path, capsys):
    """numpy's warning about an empty file came first (two lines)."""
    (tmp_path / "empty.csv").write_text("")
    err = refused(tmp_path, capsys, config(topology={"name": "custom",
                                                     "path": str(tmp_path / "empty.csv")}))
    assert "topology.path: the matrix must be square, got shape (0, 1)." in err


def test_sweep_checks_its_device_even_when_every_run_is_done(tmp_path, capsys):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"base": SMALL, "grid": {"train.lr": [0.1]}}))
    out = str(tmp_path / "o")
    from gossipfl import cli

    assert cli.main(["sweep", str(study), "--out", out, "--quiet"]) == 0
    capsys.readouterr()
    err = one_sentence(capsys, "sweep", str(study), "--out", out, "--device", "tpu")
    assert "--device: must be cpu, cuda, cuda:N or auto, got 'tpu'." in err


@pytest.mark.parametrize(("argv", "match"), [
    (["data", "synthetic", "--rows", "-5"], "error: --rows: must be an integer >= 1, got '-5'"),
    (["new", "algorithm", "__init__"], "error: NAME: '__init__' is a name Python reserves"),
    (["run", "--quiet", "--name", ""], "error: --name: the name of the run's own folder"),
    (["run", "--quiet", "--set", "device=cuda:x"],
     "error: device: must be cpu, cuda, cuda:N or auto, got 'cuda:x'."),
])
def test_values_that_were_taken_silently(tmp_path, monkeypatch, capsys, argv, match):
    """Each of these was accepted: no rows, a plugin named __init__.py, the default name
    for an empty one, and 'cuda:x' reported as no CUDA device."""
    monkeypatch.chdir(tmp_path)
    assert one_sentence(capsys, *argv).startswith(match)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("argv", "match"), [
    (["topology", "ring", "--clients", "4", "--draw", "ring.txt"],
     "error: --draw: the figure is written as PNG, so its name ends in .png, got 'ring.txt'."),
    (["data", "synthetic", "--clients", "4", "--plot", "p.jpg"], "error: --plot: the figure"),
    (["run", "", "--quiet"], "error: CONFIG: an empty path"),  # it ran the quickstart
])
def test_a_figure_not_named_png_and_an_empty_config_path(tmp_path, monkeypatch, capsys,
                                                         argv, match):
    monkeypatch.chdir(tmp_path)
    assert one_sentence(capsys, *argv).startswith(match)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("call", "match"), [
    (lambda d: gossipfl.run(SMALL, overrides=5), r"--set: expected key\.path=value, got 5\."),
    (lambda d: gossipfl.run(SMALL, callbacks=5), r"callbacks: must be a list of functions"),
    (lambda d: gossipfl.run(SMALL, callbacks=["x"]), r"callbacks: each must be a function"),
    (lambda d: gossipfl.sweep({"base": SMALL}, out=5), r"out: must be a path"),
    (lambda d: gossipfl.sweep({"base": SMALL}, out=d, progress="x"),
     r"progress: must be a function"),
    (lambda d: gossipfl.sweep({"base": SMALL}, out=d, log="x"), r"log: must be a function"),
    (lambda d: gossipfl.sweep({"base": SMALL, "metric": "nosuch"}, out=d),
     r"study\.metric: unknown value 'nosuch'"),
    (lambda d: gossipfl.stability(None), r"source: must be a config"),
    (lambda d: gossipfl.stability(SMALL, out=d, log="x"), r"log: must be a function"),
    (lambda d: gossipfl.report(5), r"paths: must be a path"),
    (lambda d: gossipfl.analyze(5), r"run_dir: must be a path"),
    (lambda d: gossipfl.fetch(["mnist"]), r"dataset: must be a dataset's name"),
    (lambda d: gossipfl.load_run(5), r"path: must be a path"),
    (lambda d: gossipfl.fetch("fashion_mnist", download="no"),
     r"^download: must be true or false, got 'no'\.$"),
    (lambda d: gossipfl.fetch("fashion_mnist", verify=0), r"^verify: must be true or false"),
    (lambda d: gossipfl.run(SMALL, quiet="yes"), r"^quiet: must be true or false"),
    (lambda d: gossipfl.sweep({"base": SMALL}, out=d, pack="no"),
     r"^pack: must be true or false"),
    (lambda d: gossipfl.sweep({"base": SMALL}, out=d, allow_changed_inputs=1),
     r"^allow_changed_inputs: must be true or false"),
    (lambda d: gossipfl.stability(SMALL, out=d, quiet=None), r"^quiet: must be true or false"),
    (lambda d: gossipfl.analyze(d, quiet="no"), r"^quiet: must be true or false"),
])
def test_the_python_verbs_arguments_are_checked_before_any_work(tmp_path, call, match):
    """Each was a TypeError (or AttributeError) from deep inside, some after a round had
    trained or a study's runs had run, or (stability(None)) the default experiment run."""
    out = tmp_path / "out"
    with pytest.raises(GossipflError, match=match):
        call(out)
    assert not out.exists()
