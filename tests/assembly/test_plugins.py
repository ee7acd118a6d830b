"""A researcher's own algorithm, model and dataset (examples/plugins/my_plugin.py) used from
the API, the CLI and sweeps without editing gossipfl; bad plugins give one sentence."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.cli import main
from gossipfl.errors import GossipflError
from gossipfl.plugins import load, resolve
from tests.lsq import Problem, assert_close, random_doubly_stochastic

EXAMPLE = Path(__file__).parents[2] / "examples" / "plugins" / "my_plugin.py"


def lr_at(lr, decay, t):
    return lr * decay ** t


def test_plugin_algorithm_matches_its_equations():
    """CTA: z = W x, then K full-batch SGD steps from z (float64 re-derivation)."""
    p = Problem(clients=5)
    W = random_doubly_stochastic(5)
    config = p.config({"name": "dfedavg_cta"}, W=W, rounds=3, steps=2, wd=1e-2)
    config["plugins"] = [str(EXAMPLE)]
    result = gossipfl.run(config)
    X = p.x0.copy()
    for t in range(3):
        X = W @ X
        for _ in range(2):
            X = X - lr_at(0.05, 0.9, t) * (p.grads(X) + 1e-2 * X)
    assert_close(result.params, X)
    assert np.abs(X - p.x0).max() > 0.1


@pytest.fixture
def plugin_dir(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "my_plugin.py")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    np.savez(tmp_path / "my_data.npz", train_x=x[:160], train_y=y[:160], test_x=x[160:],
             test_y=y[160:])
    config = {"plugins": ["my_plugin.py"],
              "data": {"dataset": "npz_folder", "root": str(tmp_path), "clients": 4,
                       "partition": "iid"},
              "model": {"name": "mlp_tanh", "options": {"hidden": 8}},
              "topology": {"name": "ring"},
              "algorithm": {"name": "dfedavg_cta"},
              "train": {"rounds": 3, "local_steps": 2, "batch_size": 16, "lr": 0.1},
              "output": {"dir": str(tmp_path / "runs")}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


@pytest.mark.slow
def test_cli_run_with_plugin_in_config_records_absolute_path(plugin_dir, monkeypatch):
    monkeypatch.chdir(plugin_dir.parent)  # relative paths resolve against the config file
    assert main(["run", str(plugin_dir / "exp.yaml"), "--quiet", "--name", "cta"]) == 0
    run_dir, = (plugin_dir / "runs").iterdir()
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["plugins"] == [str((plugin_dir / "my_plugin.py").resolve())]
    assert saved["algorithm"]["name"] == "dfedavg_cta"
    assert saved["model"]["name"] == "mlp_tanh" and saved["data"]["dataset"] == "npz_folder"


@pytest.mark.slow
def test_cli_plugin_flag_and_sweep(plugin_dir, monkeypatch):
    monkeypatch.chdir(plugin_dir)
    config = yaml.safe_load((plugin_dir / "exp.yaml").read_text())
    del config["plugins"]
    study = {"name": "cta_study", "base": config, "seeds": [0],
             "grid": {"algorithm": [{"name": "dfedavg"}, {"name": "dfedavg_cta"}]}}
    (plugin_dir / "study.yaml").write_text(yaml.safe_dump(study))
    assert main(["sweep", "study.yaml", "--plugin", "my_plugin.py", "--quiet",
                 "--out", str(plugin_dir / "out")]) == 0
    table = (plugin_dir / "out" / "cta_study" / "table.md").read_text()
    assert "dfedavg_cta" in table


@pytest.mark.slow
def test_run_directory_config_reloads_plugin_in_a_fresh_process(plugin_dir):
    """The recorded config is self-contained: a new interpreter runs it again."""
    assert main(["run", str(plugin_dir / "exp.yaml"), "--quiet", "--name", "a"]) == 0
    run_dir, = (plugin_dir / "runs").iterdir()
    code = ("import gossipfl, sys; r = gossipfl.run(sys.argv[1], "
            "overrides=['output.dir=' + sys.argv[2]]); print(r.metrics[-1]['test_acc'])")
    out = subprocess.run([sys.executable, "-c", code, str(run_dir / "config.yaml"),
                          str(plugin_dir / "again")], capture_output=True, text=True,
                         check=True)
    first = yaml.safe_load((run_dir / "summary.json").read_text())
    assert float(out.stdout.strip()) == pytest.approx(first["final"])


def test_bad_plugins_are_one_sentence(tmp_path, capsys):
    assert main(["list", "--plugin", str(tmp_path / "missing.py")]) == 2
    assert "plugin file" in capsys.readouterr().err
    broken = tmp_path / "broken.py"
    broken.write_text("x = 1\nraise RuntimeError('oops')\n")
    with pytest.raises(GossipflError, match=r"line 2 of .*broken.py.*RuntimeError: oops"):
        load_config({"plugins": [str(broken)]})
    clash = tmp_path / "clash.py"
    clash.write_text("from gossipfl.algorithms import register\n"
                     "from gossipfl.algorithms.decentralized.dfedavg import DFedAvg\n"
                     "@register\nclass Mine(DFedAvg):\n    name = 'dfedavg'\n")
    with pytest.raises(GossipflError, match="'dfedavg' is gossipfl's own"):
        load_config({"plugins": [str(clash)]})
    with pytest.raises(GossipflError, match="plugins: must be a list"):
        resolve({"a": 1})
    with pytest.raises(GossipflError, match="no Python file or module named 'no_such_mod'"):
        load_config({"plugins": ["no_such_mod"]})


DESIGN = EXAMPLE.with_name("design_examples.py")


def test_design_example_centralized_nesterov_server():
    """FedAvg clients (full participation), server x⁺ = x + η(β v⁺ + Δ), v⁺ = β v + Δ."""
    p = Problem(clients=4)
    config = p.config({"name": "fedavg_nesterov", "participation": 1.0, "global_lr": 0.8,
                       "server_momentum": 0.5}, rounds=3, steps=2, x0=p.x0[0])
    config["plugins"] = [str(DESIGN)]
    config["topology"] = {"name": "ring"}
    result = gossipfl.run(config)
    x, v = p.x0[0].copy(), np.zeros_like(p.x0[0])
    weights = p.n / p.n.sum()
    for t in range(3):
        Y = np.tile(x, (4, 1))
        for _ in range(2):
            Y = Y - lr_at(0.05, 0.9, t) * p.grads(Y)
        delta = weights @ (Y - x)
        v = 0.5 * v + delta
        x = x + 0.8 * (0.5 * v + delta)
    assert_close(result.server_params, x)


@pytest.mark.slow
def test_design_example_personalized_keeps_the_head_home(tmp_path):
    config = {"plugins": [str(DESIGN)],
              "data": {"dataset": "synthetic", "clients": 6, "partition": "dirichlet",
                       "alpha": 0.3, "options": {"num_classes": 4, "dim": 10,
                                                 "train_size": 300}},
              "model": {"name": "mlp", "options": {"hidden": [8]}},
              "topology": {"name": "full"},
              "algorithm": {"name": "dfedrep_example", "head_lr": 0.05},
              "train": {"rounds": 4, "local_epochs": 1, "batch_size": 16, "lr": 0.1},
              "eval": {"personalized": True}}
    result = gossipfl.run(config)
    layout = result.layout
    X = result.params.numpy()
    shared_cols = np.ones(X.shape[1], dtype=bool)
    for name, offset, numel in zip(layout.names, layout.offsets, layout.numels, strict=True):
        if name.startswith("head."):
            shared_cols[offset:offset + numel] = False
    assert 0 < shared_cols.sum() < X.shape[1]
    # full graph, uniform weights: the gossiped body is identical on every client,
    # the heads (never sent) differ
    assert np.allclose(X[:, shared_cols], X[0, shared_cols], atol=1e-6)
    assert not np.allclose(X[:, ~shared_cols], X[0, ~shared_cols])
    bytes_round = result.metrics[-1]["bytes_round"]
    assert bytes_round == 6 * 5 * 4 * int(shared_cols.sum())


# -- one plugin file per kind of piece (docs/design.md, "Adding a piece") ----------------------
PLUGINS = EXAMPLE.parent


def test_plugin_local_term_matches_its_equation():
    """y ← y − η (∇F_i(y) + wd·y + μ sign(y)), K steps; then X ← W Y (my_term.py)."""
    p = Problem(clients=5)
    W = random_doubly_stochastic(5)
    config = p.config({"name": "dfedavg_l1", "l1": 0.02}, W=W, rounds=3, steps=2, wd=1e-2)
    config["plugins"] = [str(PLUGINS / "my_term.py")]
    result = gossipfl.run(config)
    X = p.x0.copy()
    for t in range(3):
        for _ in range(2):
            X = X - lr_at(0.05, 0.9, t) * (p.grads(X) + 1e-2 * X + 0.02 * np.sign(X))
        X = W @ X
    assert_close(result.params, X)


def test_plugin_server_optimizer_is_named_like_gossipfls_own():
    from gossipfl.algorithms.server import SERVER_OPTIMIZERS, server_optimizer

    load_config({"plugins": [str(DESIGN)]})
    assert "nesterov" in SERVER_OPTIMIZERS
    opt = server_optimizer("nesterov", 0.5, momentum=0.25, beta1=0.1)
    assert (opt.lr, opt.momentum) == (0.5, 0.25)
    with pytest.raises(ValueError, match="gossipfl's own"):
        from gossipfl.algorithms.server import ServerOptimizer, register_server_optimizer
        register_server_optimizer("adam")(ServerOptimizer)


def test_plugin_mixing_rule_is_one_file(capsys):
    """my_mixing.py: one function of the edges registers ``lazy_metropolis``, W = (I + W_MH)/2
    by hand: the same W dense and as edges, refused on a directed graph, shown by `gossipfl
    list`, validated through the registry, and mixed with in a run (X ← W Y)."""
    from gossipfl.topology import (
        MIXING_RULE_KINDS,
        build_topology,
        mixing_matrix,
        register_mixing_rule,
    )
    from gossipfl.topology.mixing import mixing_edges
    from gossipfl.topology.sparse import Edges
    from tests.helpers import gossipfl as cli
    from tests.lsq import ring_mh

    plugin = str(PLUGINS / "my_mixing.py")
    load([plugin])
    lazy = (np.eye(8) + ring_mh(8)) / 2
    ring = build_topology("ring", 8, mixing="lazy_metropolis")
    np.testing.assert_allclose(ring.matrix(0), lazy, rtol=0, atol=1e-15)
    assert ring.stochastic == "doubly"
    A = (ring_mh(8) > 0).astype(float) - np.eye(8)
    np.testing.assert_allclose(mixing_edges(Edges.from_dense(A), "lazy_metropolis").to_dense(),
                               mixing_matrix(A, "lazy_metropolis"), rtol=0, atol=1e-15)
    directed = np.roll(np.eye(8), 1, axis=1)
    with pytest.raises(GossipflError, match="lazy_metropolis needs an undirected graph"):
        mixing_matrix(directed, "lazy_metropolis")

    code, out, _ = cli(capsys, "list", "--plugin", plugin)
    assert code == 0 and "lazy_metropolis" in next(
        line for line in out.splitlines() if line.startswith("mixing rules"))
    with pytest.raises(GossipflError, match="choose one of: .*lazy_metropolis"):
        load_config({"plugins": [plugin], "topology": {"mixing": "lazy_metropols"}})

    p = Problem(clients=8)
    config = p.config({"name": "dfedavg"}, rounds=3, steps=2,
                      topology={"name": "ring", "mixing": "lazy_metropolis"})
    config["plugins"] = [plugin]
    result = gossipfl.run(config)
    X = p.x0.copy()
    for t in range(3):
        for _ in range(2):
            X = X - lr_at(0.05, 0.9, t) * p.grads(X)
        X = lazy @ X
    assert_close(result.params, X)

    with pytest.raises(GossipflError, match="mixing rule name 'uniform' is gossipfl's own"):
        register_mixing_rule("uniform")(lambda rows, cols, degree: 1.0 / (1.0 + degree)[rows])
    with pytest.raises(GossipflError, match=r"must take \(rows, cols, degree\)"):
        register_mixing_rule("two_args")(lambda rows, cols: rows)
    register_mixing_rule("one_weight")(lambda rows, cols, degree: np.ones(1))
    try:
        with pytest.raises(GossipflError, match="'one_weight' returned weights of shape"):
            build_topology("ring", 8, mixing="one_weight")
    finally:
        MIXING_RULE_KINDS.pop("one_weight")


def one_peer_mh(m, t, period=None):
    """The one-peer exponential graph of round t with Metropolis–Hastings weights, by hand
    (hops 2^(t mod period); period None: ⌈log₂ M⌉)."""
    hop = 2 ** (t % (period or int(np.ceil(np.log2(m)))))
    A = np.zeros((m, m))
    for i in range(m):
        A[i, (i + hop) % m] = A[(i + hop) % m, i] = 1
    d = A.sum(1)
    W = np.where(A > 0, 1 / (1 + np.maximum(d[:, None], d[None, :])), 0.0)
    return W + np.diag(1 - W.sum(1))


def test_plugin_topology_mixes_with_its_round_matrices():
    """DFedAvg on the time-varying one-peer exponential graph (my_topology.py): X ← W_t Y."""
    p = Problem(clients=8)
    config = p.config({"name": "dfedavg"}, rounds=4, steps=2,
                      topology={"name": "one_peer_exp"})
    config["plugins"] = [str(PLUGINS / "my_topology.py")]
    result = gossipfl.run(config)
    X = p.x0.copy()
    for t in range(4):
        for _ in range(2):
            X = X - lr_at(0.05, 0.9, t) * p.grads(X)
        X = one_peer_mh(8, t) @ X
    assert_close(result.params, X)
    # degree 2 (hops 1, 2), then 1 (hop 4 = −4): 4 bytes · P per message
    sent = [row["bytes_round"] for row in result.metrics]
    assert sent == [8 * 2 * 4 * 4, 8 * 2 * 4 * 4, 8 * 1 * 4 * 4, 8 * 2 * 4 * 4]


def test_plugin_topology_with_its_own_parameter(capsys):
    """my_topology.py: one file registers a topology whose parameter (``period``) a config
    sets beside the section's keys: validated through the registry (good and bad values, a
    parameter the topology does not take), built with it (hops 2^(t mod period)), set by
    --set and a study's grid, shown by `gossipfl list`, and mixed with in a run."""
    from gossipfl.studies.sweep import expand, load_study
    from gossipfl.topology import build_topology, topology_kind
    from tests.helpers import TINY

    plugin = str(PLUGINS / "my_topology.py")
    base = {**TINY, "plugins": [plugin], "data": {**TINY["data"], "clients": 8}}
    config = load_config({**base, "topology": {"name": "one_peer_exp", "period": 2}})
    assert config.topology.options == {"period": 2}
    assert config.to_dict()["topology"]["period"] == 2  # beside the keys, as given
    assert load_config(yaml.safe_load(config.to_yaml())).topology.options == {"period": 2}
    assert topology_kind("one_peer_exp").defaults == {"period": None}
    topology = build_topology("one_peer_exp", 8, seed=config.seed,
                              **config.topology.parameters())
    assert topology.period == 2 and topology.params == {"period": 2}
    for t in range(4):
        assert np.allclose(topology.matrix(t), one_peer_mh(8, t, period=2))
    default = build_topology("one_peer_exp", 8)  # period null: ⌈log₂ 8⌉ = 3
    assert default.period == 3 and np.allclose(default.matrix(2), one_peer_mh(8, 2))

    for topo, words in [
        ({"name": "one_peer_exp", "period": 0},
         "topology.period: must be an integer >= 1 or null, got 0."),
        ({"name": "one_peer_exp", "period": "two"},
         "topology.period: must be an integer >= 1 or null, got two."),
        ({"name": "one_peer_exp", "perod": 2},
         ("topology.perod: unknown parameter of topology 'one_peer_exp' (value 2) (did you "
          "mean 'period'?); allowed: period.")),
        ({"name": "ring", "period": 2},
         "topology.period: unknown parameter of topology 'ring' (value 2); allowed: none."),
        ({"name": "random_k", "mixng": "uniform"},
         ("topology.mixng: unknown parameter of topology 'random_k' (value 'uniform') (did you "
          "mean 'mixing'?); allowed: k.")),
    ]:
        with pytest.raises(GossipflError) as info:
            load_config({**base, "topology": topo})
        assert str(info.value) == words
    with pytest.raises(GossipflError, match=r"^topology\.period: must be an integer >= 1"):
        build_topology("one_peer_exp", 8, period=-1)
    with pytest.warns(UserWarning, match=r"^topology\.name, topology\.period: ignored, "
                                         r"because fedavg is a centralized algorithm"):
        load_config({**base, "algorithm": {"name": "fedavg"},
                     "topology": {"name": "one_peer_exp", "period": 2}})

    # --set, a study's grid and the CLI's topology command set it as any key
    overrides = ["topology.name=one_peer_exp", "topology.period=1"]
    assert load_config(base, overrides).topology.options == {"period": 1}
    with pytest.raises(GossipflError, match=r"^topology\.period: must be an integer"):
        load_config(base, ["topology.name=one_peer_exp", "topology.period=0.5"])
    variants = expand(load_study({"name": "s", "base": {**base, "topology": {
        "name": "one_peer_exp"}}, "grid": {"topology.period": [1, 2]}}))
    assert [v.config.topology.options for v in variants] == [{"period": 1}, {"period": 2}]
    assert [v.label for v in variants] == ["period=1", "period=2"]
    with pytest.raises(GossipflError, match=r"topology\.period: must be .*grid point"):
        expand(load_study({"name": "s", "base": {**base, "topology": {"name": "one_peer_exp"}},
                           "grid": {"topology.period": [0]}}))
    assert main(["list", "--plugin", plugin]) == 0
    assert "  one_peer_exp          period = null (an integer >= 1 or null)" in \
        capsys.readouterr().out.splitlines()
    assert main(["topology", "one_peer_exp", "--clients", "8", "--option", "period=2",
                 "--plugin", plugin]) == 0
    assert "period                  2 rounds" in capsys.readouterr().out

    # a run mixes with W_t of the period's hops
    p = Problem(clients=8)
    run = p.config({"name": "dfedavg"}, rounds=3, steps=1,
                   topology={"name": "one_peer_exp", "period": 1})  # hop 1 every round: a ring
    run["plugins"] = [plugin]
    X = p.x0.copy()
    for t in range(3):
        X = one_peer_mh(8, t, period=1) @ (X - lr_at(0.05, 0.9, t) * p.grads(X))
    assert_close(gossipfl.run(run).params, X)


def test_a_topology_registration_is_checked():
    """register_topology refuses what a config could not use, in one sentence each."""
    from gossipfl.topology import register_topology
    from gossipfl.validation import COUNT

    def builder(m, mixing, seed, params):
        return None

    cases = [
        ({"rules": {"hops": 3}}, "the rule of 'hops' must be a gossipfl.validation.Rule"),
        ({"rules": {"mixing": COUNT}}, "'mixing' is a key of every topology section"),
        ({"rules": {"hops": COUNT}, "defaults": {"hop": 1}},
         "a default for 'hop', which is not among its parameters (hops)"),
        ({"rules": {"hops": COUNT}, "defaults": {"hops": 0}},
         "the default of topology.hops: must be an integer >= 1, got 0."),
        ({"rules": {"k": COUNT}, "defaults": {"k": 3}},
         "'k' is a shared key whose default is 10 for every topology"),
    ]
    for options, words in cases:
        with pytest.raises(GossipflError) as info:
            register_topology("test_checked", **options)(builder)
        assert words in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(GossipflError, match=r"must take \(num_clients, mixing, seed, params\) "):
        register_topology("test_checked")(lambda m: None)


def test_a_plugin_topology_reads_only_what_it_declares():
    """A shared key (k) a plugin's topology does not declare is warned about, as for
    gossipfl's own; one it declares reaches its builder with the config's default; a
    parameter without a default must be given."""
    from gossipfl.assembly.loading import ignored_settings
    from gossipfl.topology import build_topology, register_topology, topology_kind
    from gossipfl.topology.graphs import TOPOLOGY_KINDS
    from gossipfl.validation import COUNT

    seen = []

    def ring_of(m, mixing, seed, params):
        seen.append(params)
        A = np.roll(np.eye(m), 1, axis=1)
        return gossipfl.topology.Topology("test_reads", m, mixing, lambda t: A + A.T)

    try:
        register_topology("test_reads", rules={"k": COUNT, "hops": COUNT})(ring_of)
        assert topology_kind("test_reads").defaults == {"k": 10}
        with pytest.raises(GossipflError, match=r"^topology\.hops: topology 'test_reads' "
                                                r"needs this parameter \(an integer >= 1\)"):
            load_config({"topology": {"name": "test_reads"}})
        with pytest.warns(UserWarning, match=r"^topology\.p: ignored"):
            config = load_config({"topology": {"name": "test_reads", "hops": 2, "p": 0.5}})
        assert ignored_settings(config) == [
            (["topology.p"], "topology.name is test_reads, which does not read it")]
        build_topology("test_reads", 6, **config.topology.parameters())
        assert seen == [{"k": 10, "hops": 2}]
    finally:
        TOPOLOGY_KINDS.pop("test_reads", None)


def test_plugin_schedule_trains_half_the_clients():
    """Round t: clients i ≡ t (mod 2) take K steps, the others keep x_i; X ← W Y
    (my_schedule.py)."""
    p = Problem(clients=5)
    W = random_doubly_stochastic(5)
    config = p.config({"name": "dfedavg"}, rounds=3, steps=2,
                      topology={"name": "custom", "mixing": "custom", "matrix": W,
                                "order": "alternating"})
    config["plugins"] = [str(PLUGINS / "my_schedule.py")]
    result = gossipfl.run(config)
    X = p.x0.copy()
    for t in range(3):
        Y = X.copy()
        train = np.arange(5) % 2 == t % 2
        for _ in range(2):
            Y[train] = Y[train] - lr_at(0.05, 0.9, t) * p.grads(Y)[train]
        X = W @ Y
    assert_close(result.params, X)
    assert [row["trained_rows"] for row in result.metrics] == [3, 2, 3]


def test_plugin_partitioner_skews_sizes_not_labels():
    """quantity_skew (my_partitioner.py): disjoint parts, every client >= min_size, sizes
    from Dir(α), through a run of the synthetic dataset."""
    config = {"plugins": [str(PLUGINS / "my_partitioner.py")],
              "data": {"dataset": "synthetic", "clients": 6, "partition": "quantity_skew",
                       "alpha": 0.5, "min_size": 20,
                       "options": {"num_classes": 3, "dim": 5, "train_size": 600}},
              "model": {"name": "logistic"}, "topology": {"name": "ring"},
              "algorithm": {"name": "dfedavg"},
              "train": {"rounds": 1, "local_steps": 1, "batch_size": 16, "lr": 0.1}}
    result = gossipfl.run(config)
    sizes = result.info["partition"].samples
    assert sizes.sum() == 600 and sizes.min() >= 20 and sizes.max() > 2 * sizes.min()
    from gossipfl.assembly.experiment import build_data

    _, parts = build_data(load_config(config))
    assert [len(part) for part in parts] == list(sizes)
    joined = np.concatenate(parts)
    assert len(np.unique(joined)) == len(joined)


def test_plugin_names_are_checked_and_listed(capsys):
    """Plugin partitions, topologies and schedules pass config validation, show in `gossipfl
    list`, and cannot take gossipfl's own names."""
    specs = ["--plugin", str(PLUGINS / "my_partitioner.py"),
             "--plugin", str(PLUGINS / "my_topology.py")]
    assert main(["list", *specs]) == 0
    out = capsys.readouterr().out
    assert "quantity_skew" in out and "one_peer_exp" in out
    with pytest.raises(GossipflError, match="topology.order"):
        load_config({"topology": {"order": "no_such_order"}})
    from gossipfl.data import Partitioner, register_partitioner
    from gossipfl.schedules import Schedule, register_schedule
    from gossipfl.topology import register_topology

    with pytest.raises(ValueError, match="gossipfl's own"):
        register_partitioner("dirichlet")(type("P", (Partitioner,), {}))
    with pytest.raises(ValueError, match="gossipfl's own"):
        register_topology("ring")(lambda m, mixing, seed, params: None)
    with pytest.raises(ValueError, match="gossipfl's own"):
        register_schedule(type("S", (Schedule,), {"name": "synchronous"}))


@pytest.mark.filterwarnings("error")  # NumPy 2's __array_wrap__ deprecation (np.abs(tensor))
def test_plugin_compressor_with_its_own_parameter(capsys):
    """my_compressor.py: one file registers a compressor whose parameter (``format``) is
    validated like gossipfl's own and shown by `gossipfl list`; CHOCO with it at γ = 1 is
    DFedAvg's gossip of the rounded models, sending 2 bytes a value instead of 4."""
    from gossipfl.compression import COMPRESSORS, build_compressor

    plugin = str(Path(__file__).parents[2] / "examples" / "plugins" / "my_compressor.py")
    load([plugin])
    assert "half" in COMPRESSORS
    assert main(["list", "--plugin", plugin]) == 0
    assert "  half      format = bfloat16 (one of float16, bfloat16)" in \
        capsys.readouterr().out.splitlines()
    q = build_compressor({"compressor": "half", "format": "float16"})
    x = torch.randn(3, 10, dtype=torch.float32) * 100
    assert torch.equal(q.compress(x), x.half().float())
    assert torch.equal(q.decode(q.encode(x), None, 10), q.compress(x))
    assert q.encode(x).shape == (3, q.width(10)) == (3, 20)
    with pytest.raises(GossipflError, match=r"topology\.compression\.format.*float16"):
        build_compressor({"compressor": "half", "format": "fp8"})
    p = Problem(clients=6, dim=8)
    W = random_doubly_stochastic(6)

    def run(compression):
        config = p.config({"name": "dfedavg"}, W=W, rounds=3, steps=2,
                          topology={"compression": compression})
        config["plugins"] = [plugin]
        return gossipfl.run(config)

    half = run({"compressor": "half", "format": "float16", "gamma": 1.0})
    exact = run({"compressor": "identity", "gamma": 1.0})
    assert 0 < (half.params - exact.params).abs().max() < 1e-2 * exact.params.abs().max()
    assert [r["bytes_round"] * 2 for r in half.metrics] == [r["bytes_round"]
                                                            for r in exact.metrics]


def test_the_topology_section_keys_are_the_config_s():
    """gossipfl.common.sections (what the topology registry checks against) and TopologyConfig (what
    a config holds) name the same keys and the same shared defaults."""
    import dataclasses

    from gossipfl.common.sections import (
        SHARED_TOPOLOGY_DEFAULTS,
        SHARED_TOPOLOGY_PARAMS,
        TOPOLOGY_SECTION_KEYS,
    )
    from gossipfl.config import TopologyConfig

    fields = [f.name for f in dataclasses.fields(TopologyConfig) if f.name != "options"]
    assert tuple(fields) == TOPOLOGY_SECTION_KEYS
    assert set(SHARED_TOPOLOGY_PARAMS) == set(SHARED_TOPOLOGY_DEFAULTS)
    default = TopologyConfig()
    assert {key: getattr(default, key) for key in SHARED_TOPOLOGY_DEFAULTS} == \
        SHARED_TOPOLOGY_DEFAULTS
