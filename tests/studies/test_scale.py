"""Set-up at scale (issue 42): sampled local evaluation, label counts without per-client
tensors, the memory plan of --dry-run, switching models on the command line."""

import warnings

import numpy as np
import pytest
import torch
import yaml

from gossipfl import cli
from gossipfl.assembly.experiment import LOCAL_CLIENTS_AUTO, evaluated_clients, label_counts
from gossipfl.assembly.loading import load_config
from gossipfl.assembly.plan import estimate_bytes, format_plan, memory_plan
from gossipfl.core.runner import Runner
from gossipfl.data import Dataset
from tests.helpers import TINY

SYNTHETIC = {"dataset": "synthetic",
             "options": {"dim": 6, "train_size": 120, "test_size": 40, "num_classes": 3}}


def _config(clients: int = 8, **sections) -> dict:
    base = dict(TINY, data={**SYNTHETIC, "clients": clients},
                train={**TINY["train"], "rounds": 2}, output={"checkpoint_every": 0})
    base.update(sections)
    return base


def test_label_counts_are_the_per_client_bincounts():
    rng = np.random.default_rng(0)
    labels = torch.as_tensor(rng.integers(0, 5, size=300))
    parts = [np.sort(rng.choice(300, size=n, replace=False)) for n in (0, 1, 7, 40, 3)]
    dataset = Dataset(train_x=torch.zeros(300, 2), train_y=labels, test_x=torch.zeros(0, 2),
                      test_y=torch.zeros(0, dtype=torch.int64), num_classes=4, name="t")
    expected = torch.stack([torch.bincount(labels[torch.as_tensor(p)], minlength=4)[:4]
                            for p in parts]).float()
    assert torch.equal(label_counts(dataset, parts), expected)


def test_local_models_are_evaluated_on_a_sample_of_clients():
    config = load_config(_config(clients=12, eval={"every": 1, "local_clients": 5,
                                                   "local_clients_seed": 3}))
    picked = evaluated_clients(config, 12, False, "cpu")
    assert len(picked) == 5 and torch.equal(picked, picked.sort().values)
    again = evaluated_clients(config, 12, False, "cpu")
    assert torch.equal(picked, again)  # seeded
    runner = Runner(config)
    assert runner.exp.info["eval_clients"] == 5
    result = runner.run()
    assert "local_acc_mean" in result.metrics[-1]
    # every client (the default) below LOCAL_CLIENTS_AUTO; a sample of it above
    default = load_config(_config(clients=12))
    assert evaluated_clients(default, 12, False, "cpu") is None
    assert len(evaluated_clients(default, 5 * LOCAL_CLIENTS_AUTO, False, "cpu")) \
        == LOCAL_CLIENTS_AUTO
    assert evaluated_clients(default, 5 * LOCAL_CLIENTS_AUTO, True, "cpu") is None


def test_the_summary_says_the_local_models_were_sampled(tmp_path):
    summary = {"clients": 60000, "eval_clients": 1000, "final_local_acc_mean": 0.3,
               "final_local_acc_std": 0.05, "final": 0.6, "best": 0.6, "best_round": 3}
    text = cli.format_summary(summary, tmp_path)
    assert "over a sample of 1000 of the 60000 clients, eval.local_clients" in text


def test_switching_models_on_the_command_line_drops_the_other_models_options():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_config(cli.QUICKSTART, ["model.name=logistic"])
    assert config.model.name == "logistic" and config.model.options == {}
    assert any("model.options.hidden: dropped" in str(w.message) for w in caught)
    kept = load_config(cli.QUICKSTART, ["model.name=mlp", "model.options.hidden=[32]"])
    assert kept.model.options == {"hidden": [32]}


def test_the_memory_plan_lists_every_state(tmp_path, capsys):
    config = load_config(_config(clients=8))
    lines, facts = memory_plan(config)
    names = [line.what for line in lines]
    assert names[0] == "client_state x [M, P]"
    assert any("working copies" in n for n in names)
    assert any("topology ring dense" in n for n in names)
    P = facts["P"]
    assert lines[0].per_client == 4 * P and lines[0].total == 4 * P * 8
    assert estimate_bytes(config) == sum(line.total for line in lines)
    text = format_plan(lines, facts)
    assert "total (expected peak)" in text
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(_config(clients=8)))
    assert cli.main(["run", str(tmp_path / "tiny.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("memory plan: dfedavg, 8 clients") and "per client" in out


@pytest.mark.parametrize("topology", ["epidemic", "ring"])
def test_the_memory_plan_of_many_clients_counts_edges_not_a_matrix(topology):
    config = load_config(_config(clients=100),
                         [f"topology.name={topology}", "data.clients=100"])
    config.data.clients = 50_000  # the plan reads the config only: nothing is built
    config.data.options["train_size"] = 50_000
    lines, facts = memory_plan(config)
    edges = next(line for line in lines if line.what.startswith("topology"))
    assert "as edges" in edges.what and edges.per_client < 10_000
    assert facts["eval_clients"] == LOCAL_CLIENTS_AUTO


@pytest.mark.parametrize("shape", [(1, 5), (7, 3), (300, 4001), (5, 2, 3)])
def test_squared_distances_are_the_rows_float64_norms_however_chunked(shape):
    from gossipfl.core.evaluation import squared_distances

    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    center = x.mean(dim=0)
    want = ((x.double() - center.double()) ** 2).flatten(1).sum(dim=1)
    got = squared_distances(x, center)
    assert got.shape == (shape[0],)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    # the chunking is by rows only: each row's float32 sum is the unchunked one's
    assert torch.equal(got, (x - center).pow(2).flatten(1).sum(dim=1))
