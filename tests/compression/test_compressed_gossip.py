"""Compressed gossip (issue 26): CHOCO-SGD, DeepSqueeze and BEER against float64 NumPy
re-derivations of their papers' equations on heterogeneous least squares with a deterministic
compressor (top-k), their exact reductions (identity compressor, unit consensus step), the
``topology.compression`` setting on every decentralized algorithm, bytes as encoded, refusals
and exact resumption."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.algorithms import available_algorithms
from gossipfl.algorithms.decentralized.beer import BEER
from gossipfl.algorithms.decentralized.choco import CHOCO
from gossipfl.algorithms.decentralized.compressed import CompressedParams
from gossipfl.algorithms.decentralized.deepsqueeze import DeepSqueeze
from gossipfl.algorithms.decentralized.dsgt import DSGT, DSGTParams
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError, IgnoredSetting
from tests.distributed_cases import config as case_config
from tests.helpers import stopped_and_resumed, without_timing
from tests.lsq import Problem, assert_close, random_doubly_stochastic, ring_mh
from tests.tracking_cases import DECAY, LR, WD, eta, run_direct

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = [pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting"),
              # every algorithm's default: OledFL's β = 0.99 is warned unstable on a ring
              pytest.mark.filterwarnings("ignore::gossipfl.assembly.experiment.StabilityWarning")]

K = 3  # top-k of d = 8 coordinates


def top_k(V: np.ndarray, k: int = K) -> np.ndarray:
    """C(v): the k largest |v_j| of each row kept, the rest 0."""
    out = np.zeros_like(V)
    keep = np.argsort(-np.abs(V), axis=1)[:, :k]
    np.put_along_axis(out, keep, np.take_along_axis(V, keep, axis=1), axis=1)
    return out


def identity(V: np.ndarray) -> np.ndarray:
    return V.copy()


# -- float64 re-derivations, in the papers' notation --------------------------------------------
def choco_reference(p: Problem, W, rounds, gamma, C=top_k):
    """Koloskova et al. 2019, Algorithm 2: x^{t+½} = x − η g; q = C(x^{t+½} − x̂);
    x̂ ← x̂ + q; x = x^{t+½} + γ Σ_j w_ij (x̂_j − x̂_i)."""
    X, hat = p.x0.copy(), np.zeros_like(p.x0)
    for t in range(rounds):
        half = X - eta(t) * (p.grads(X) + WD * X)
        hat = hat + C(half - hat)
        X = half + gamma * (W @ hat - hat)
    return X, hat


def deepsqueeze_reference(p: Problem, W, rounds, gamma, C=top_k):
    """Tang et al. 2019, Algorithm 1: v = x − γ_t g + δ; δ = v − C(v);
    X ← X − γ_t G + η (W − I) C(V)."""
    X, delta = p.x0.copy(), np.zeros_like(p.x0)
    for t in range(rounds):
        stepped = X - eta(t) * (p.grads(X) + WD * X)
        V = stepped + delta
        CV = C(V)
        delta = V - CV
        X = stepped + gamma * (W @ CV - CV)
    return X, delta


def beer_reference(p: Problem, W, rounds, gamma, C=top_k, x0=None):
    """Zhao et al. 2022, Algorithm 1 (rows are clients here): H⁰ = G⁰ = 0, V⁰ = ∇F(X⁰);
    X' = X + γ (W − I) H − η V; H' = H + C(X' − H); V' = V + γ (W − I) G + ∇F(X') − ∇F(X);
    G' = G + C(V' − G)."""
    grad = lambda X: p.grads(X) + WD * X
    X = (p.x0 if x0 is None else x0).copy()
    H, G = np.zeros_like(X), np.zeros_like(X)
    V = grad(X)
    for t in range(rounds):
        X_new = X + gamma * (W @ H - H) - eta(t) * V
        H = H + C(X_new - H)
        if t == rounds - 1:
            return X_new, H, G
        V = V + gamma * (W @ G - G) + grad(X_new) - grad(X)
        G = G + C(V - G)
        X = X_new


def top_k_params(gamma):
    return CompressedParams(compressor="top_k", k=K, gamma=gamma)


def identity_params():
    return CompressedParams(compressor="identity", gamma=1.0)


# -- the equations --------------------------------------------------------------------------
def test_choco_matches_koloskova_et_al():
    p = Problem(clients=6, dim=8)
    W = random_doubly_stochastic(6)
    state = run_direct(p, W, CHOCO, top_k_params(0.4), rounds=6)
    X, hat = choco_reference(p, W, 6, 0.4)
    assert_close(state["x"], X)
    assert_close(state["hat"], hat)
    assert_close(state["mixed"], W @ hat)  # s = W x̂, kept from the messages alone
    assert np.abs(X - choco_reference(p, W, 6, 0.4, identity)[0]).max() > 1e-3


def test_deepsqueeze_matches_tang_et_al():
    p = Problem(clients=6, dim=8)
    W = random_doubly_stochastic(6)
    state = run_direct(p, W, DeepSqueeze, top_k_params(0.3), rounds=6)
    X, delta = deepsqueeze_reference(p, W, 6, 0.3)
    assert_close(state["x"], X)
    assert_close(state["error"], delta)


def test_beer_matches_zhao_et_al():
    p = Problem(clients=6, dim=8)
    W = random_doubly_stochastic(6)
    state = run_direct(p, W, BEER, top_k_params(0.5), rounds=6)
    X, H, G = beer_reference(p, W, 6, 0.5)
    assert_close(state["x"], X, atol=5e-6)
    assert_close(state["h"], H, atol=5e-6)
    assert_close(state["g"], G, atol=5e-6)


# -- reductions -------------------------------------------------------------------------------
def test_choco_and_deepsqueeze_with_the_identity_and_unit_step_are_dfedavg_with_one_step():
    p = Problem(clients=5, dim=4)
    W = random_doubly_stochastic(5)
    X = p.x0.copy()
    for t in range(5):
        X = W @ (X - eta(t) * (p.grads(X) + WD * X))
    for cls in (CHOCO, DeepSqueeze):
        assert_close(run_direct(p, W, cls, identity_params(), rounds=5)["x"], X)
    dfedavg = p.run({"name": "dfedavg"}, W=W, rounds=5, steps=1, lr=LR, decay=DECAY, wd=WD)
    assert_close(dfedavg.params, X)


def test_beer_with_the_identity_and_unit_step_is_gradient_tracking_cta():
    """Identity C, γ = 1: H^{t+1} = X^{t+1}, G^t = V^t (t ≥ 1), so from round 1 on BEER is
    gradient tracking's combine-then-adapt form X^{t+1} = W X^t − η V^t,
    V^{t+1} = W V^t + g^{t+1} − g^t; round 0 starts from H⁰ = G⁰ = 0 (the paper's and its
    code's initialization): X¹ = X⁰ − η V⁰ and V¹ = g¹."""
    p = Problem(clients=6, dim=4)
    W = random_doubly_stochastic(6)
    grad = lambda X: p.grads(X) + WD * X
    X, V = p.x0.copy(), grad(p.x0)
    X_prev, X = X, X - eta(0) * V
    V = grad(X)
    for t in range(1, 6):
        X_prev, X = X, W @ X - eta(t) * V
        V = W @ V + grad(X) - grad(X_prev)
    beer = run_direct(p, W, BEER, identity_params(), rounds=6)
    assert_close(beer["x"], X, atol=5e-6)
    assert_close(beer["x"], beer_reference(p, W, 6, 1.0, identity)[0], atol=5e-6)
    dsgt = run_direct(p, W, DSGT, DSGTParams(form="cta"), rounds=6)  # y¹ = W g⁰ + g¹ − g⁰
    assert np.abs(beer["x"].numpy() - dsgt["x"].numpy()).max() > 1e-4


# -- topology.compression: CHOCO-Gossip for every decentralized algorithm ------------------------
def _compressible() -> list[str]:
    return sorted(name for name, cls in available_algorithms().items()
                  if cls.__module__.startswith("gossipfl.algorithms.") and not cls.centralized
                  and cls.compressible and not cls.own_compression
                  and "synchronous" in cls.orders)


def _run(config):
    return gossipfl.run(config)


@pytest.mark.represented
@pytest.mark.parametrize("name", _compressible())
def test_identity_compression_with_unit_step_changes_no_algorithm(name):
    """topology.compression with the identity compressor and γ = 1 is plain gossip (x̂ = z,
    s = W z): every decentralized algorithm gives its uncompressed numbers, bytes included
    (a small MLP on synthetic data, a ring of 7, unequal clients)."""
    plain = case_config(name, "ring", rounds=3)
    compressed = case_config(name, "ring", rounds=3)
    compressed["topology"]["compression"] = {"compressor": "identity"}
    a, b = _run(plain), _run(compressed)
    torch.testing.assert_close(b.params, a.params, rtol=1e-5, atol=1e-6)
    assert [r["bytes_total"] for r in a.metrics] == [r["bytes_total"] for r in b.metrics]


# -- channels: the variables an algorithm gossips ------------------------------------------------
def test_each_variable_an_algorithm_gossips_is_its_own_channel():
    """DSGT gossips x and its tracker: two channels (its gossip_channels), each with its own
    public copies, the tracker's the second (the k-th declared channel is key k)."""
    p = Problem(clients=5, dim=4)
    config = p.config({"name": "dsgt"}, W=ring_mh(5), rounds=2)
    config["topology"]["compression"] = {"compressor": "top_k", "k": 2, "gamma": 0.5}
    runner = Runner(load_config(config))
    runner.run()
    assert DSGT.gossip_channels == ("x", "tracker")
    copies = runner.run_state.gossip
    assert set(copies) == {"0.hat", "0.mixed", "1.hat", "1.mixed"}
    assert not torch.equal(copies["0.hat"], copies["1.hat"])


def _pipeline(channels=("x",)):
    from gossipfl.compression.gossip import Channels, build_choco
    from gossipfl.engine import ParamLayout
    from gossipfl.engine.groups import ParamGroups
    from gossipfl.network.federation import Federation
    from gossipfl.topology import Mixer, build_topology

    topology = build_topology("ring", 5, mixing="metropolis_hastings", seed=0)
    groups = ParamGroups.build(ParamLayout.from_module(torch.nn.Linear(3, 1, bias=False)), [])
    stage = Channels(build_choco({"compressor": "sign", "gamma": 0.5}))
    return Federation(5, groups, torch.ones(5), seed=0, mixer=Mixer(topology),
                      stages=[stage], channels=channels)


def test_a_channel_gossiped_twice_in_a_round_is_refused_in_one_sentence():
    fed = _pipeline()
    z = torch.randn(5, 3)
    fed.gossip(z, 0)
    with pytest.raises(GossipflError, match=r"^topology.compression: channel 'x' was gossiped "
                                            r"twice in round 0; .*gossip_channels\)\.$"):
        fed.gossip(z, 0)
    fed.gossip(z, 1)  # the next round: the channel's next step


def test_a_channel_the_algorithm_did_not_declare_is_refused():
    with pytest.raises(GossipflError, match="gossip channel 'tracker': not among the "
                                            "algorithm's gossip_channels"):
        _pipeline().gossip(torch.randn(5, 3), 0, channel="tracker")
    _pipeline(("x", "tracker")).gossip(torch.randn(5, 3), 0, channel="tracker")


def test_operations_that_bypass_the_pipeline_are_refused_by_a_stage_that_changes_messages():
    fed = _pipeline()
    with pytest.raises(GossipflError, match="^topology.compression: push-sum gossip has no "
                                            "compressed form; remove topology.compression.$"):
        fed.push_sum(torch.randn(5, 3), torch.ones(5, 1), 0)


def test_dfedavg_with_top_k_compression_is_local_steps_then_choco_gossip():
    p = Problem(clients=5, dim=8)
    W = ring_mh(5)
    gamma, steps, rounds = 0.3, 2, 4
    X, hat = p.x0.copy(), np.zeros_like(p.x0)
    for t in range(rounds):
        Z = X.copy()
        for _ in range(steps):
            Z = Z - eta(t) * (p.grads(Z) + WD * Z)
        hat = hat + top_k(Z - hat)
        X = Z + gamma * (W @ hat - hat)
    config = p.config({"name": "dfedavg"}, W=W, rounds=rounds, steps=steps, lr=LR, decay=DECAY,
                      wd=WD)
    config["topology"]["compression"] = {"compressor": "top_k", "k": K, "gamma": gamma}
    result = _run(config)
    assert_close(result.params, X)
    # ring of 5: 10 messages a round, top-3 of 8: 3 float32 values + a 1-byte bitmap
    assert result.metrics[0]["bytes_round"] == 10 * (4 * K + 1)


def test_without_error_feedback_the_compressed_models_are_mixed_directly():
    p = Problem(clients=5, dim=8)
    W = ring_mh(5)
    gamma, rounds = 0.5, 3
    X = p.x0.copy()
    for t in range(rounds):
        Z = X - eta(t) * (p.grads(X) + WD * X)
        CZ = top_k(Z)
        X = Z + gamma * (W @ CZ - CZ)
    config = p.config({"name": "dfedavg"}, W=W, rounds=rounds, steps=1, lr=LR, decay=DECAY,
                      wd=WD)
    config["topology"]["compression"] = {"compressor": "top_k", "k": K, "gamma": gamma,
                                         "error_feedback": False}
    assert_close(_run(config).params, X)


def test_dsgt_with_compression_keeps_one_channel_per_gossip():
    """DSGT gossips x and y every round: two channels with their own public copies."""
    p = Problem(clients=5, dim=8)
    W = ring_mh(5)
    gamma, rounds = 0.5, 4
    grad = lambda X: p.grads(X) + WD * X
    X = p.x0.copy()
    hats = [np.zeros_like(X), np.zeros_like(X)]

    def choco(z, c):
        hats[c] = hats[c] + top_k(z - hats[c])
        return z + gamma * (W @ hats[c] - hats[c])

    tracker = np.zeros_like(X)
    for t in range(rounds):
        g = grad(X)
        y = tracker + g
        X = choco(X - eta(t) * y, 0)
        tracker = choco(y, 1) - g
    config = p.config({"name": "dsgt"}, W=W, rounds=rounds, lr=LR, decay=DECAY, wd=WD)
    config["topology"]["compression"] = {"compressor": "top_k", "k": K, "gamma": gamma}
    assert_close(_run(config).params, X, atol=5e-6)


# -- bytes ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "messages"), [("choco", 1), ("deepsqueeze", 1), ("beer", 2)])
def test_bytes_are_the_encoded_messages(name, messages):
    p = Problem(clients=5, dim=8)
    result = p.run({"name": name, "compressor": "sign"}, W=ring_mh(5), rounds=2)
    # ring of 5: 10 messages per exchange; sign of 8 values: 4-byte scale + 1 byte of signs;
    # round 2 (BEER sends nothing for G⁰ = 0 in round 1)
    assert result.metrics[1]["bytes_round"] == messages * 10 * (4 + 1)


# -- refusals -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("algorithm", "topology", "match"), [
    ({"name": "sgp"}, {}, "sgp gossips in a form CHOCO-Gossip does not cover"),
    ({"name": "dispfl"}, {}, "dispfl gossips in a form"),
    ({"name": "fedavg"}, {}, "fedavg is centralized"),
    ({"name": "choco"}, {}, "choco compresses its own messages"),
    ({"name": "dfedavg"}, {"name": "random_k", "k": 2}, "random_k topology changes every round"),
    ({"name": "dfedavg"}, {"order": "sequential"}, "needs topology.order: synchronous"),
])
def test_compression_is_refused_where_it_is_not_defined(algorithm, topology, match):
    p = Problem(clients=5, dim=4)
    config = p.config(algorithm, W=ring_mh(5), rounds=1)
    config["topology"].update(topology, compression={"compressor": "sign", "gamma": 0.5})
    if "name" in topology:
        config["topology"].pop("matrix")
        config["topology"]["mixing"] = "uniform"
    told = pytest.warns(IgnoredSetting, match="fedavg is a centralized algorithm") \
        if algorithm["name"] == "fedavg" else contextlib.nullcontext()  # its graph: not read
    with told, pytest.raises(GossipflError, match=match):
        _run(config)


@pytest.mark.parametrize("name", ["choco", "deepsqueeze", "beer"])
def test_named_compressed_algorithms_refuse_a_graph_that_changes(name):
    p = Problem(clients=6, dim=4)
    config = p.config({"name": name}, rounds=1,
                      topology={"name": "one_peer_exponential"})
    with pytest.raises(GossipflError, match="needs a fixed graph"):
        _run(config)


@pytest.mark.parametrize(("compression", "match"), [
    ({"compressor": "top_k", "fraction": 1.5}, r"topology\.compression\.fraction"),
    ({"compressor": "top_k", "fraction": 0.1, "gamma": 0}, r"topology\.compression\.gamma"),
    ({"compressor": "topk"}, r"topology\.compression"),
    ({"compressor": "sign", "error_feedback": "no"}, r"topology\.compression\.error_feedback"),
    ("top_k", r"topology\.compression: must be a mapping"),
])
def test_a_bad_compression_setting_is_one_sentence(compression, match):
    p = Problem(clients=5, dim=4)
    config = p.config({"name": "dfedavg"}, W=ring_mh(5), rounds=1)
    config["topology"]["compression"] = compression
    with pytest.raises(GossipflError, match=match):
        load_config(config)


def test_a_bad_algorithm_compressor_is_one_sentence():
    p = Problem(clients=5, dim=4)
    with pytest.raises(GossipflError, match=r"algorithm\.k"):
        p.run({"name": "choco", "compressor": "top_k", "k": 0}, W=ring_mh(5), rounds=1)


# -- resumption ------------------------------------------------------------------------------------
#: compressed gossip beside the other owners of state: the clients' clocks and DP-SGD's counts
SYSTEMS_AND_PRIVACY = {
    "systems": {"compute": {"distribution": "lognormal", "mean": 0.1, "sigma": 0.5,
                            "vary": True},
                "network": {"latency": {"distribution": "lognormal", "mean": 0.01,
                                        "sigma": 0.3}, "bandwidth": 1e4}},
    "privacy": {"clip": 0.5, "noise_multiplier": 1.0, "delta": 1e-3},
}


@pytest.mark.parametrize("setting", ["topology", "choco", "beer", "topology+systems+privacy"])
def test_resuming_repeats_the_run_exactly(setting):
    """A checkpoint after round 2 (public copies, error memories, trackers; the clocks and the
    private-gradient counts beside them) resumes to the straight run's numbers bit for bit —
    models, metrics and every namespace of the run's state — with a randomized compressor
    whose keys must agree."""
    p = Problem(clients=5, dim=8)
    spec = {"compressor": "rand_k", "k": 3}
    if setting.startswith("topology"):
        config = p.config({"name": "dfedavg"}, W=ring_mh(5), rounds=5, steps=2)
        config["topology"]["compression"] = {**spec, "gamma": 0.5}
    else:
        config = p.config({"name": setting, **spec, "gamma": 0.5}, W=ring_mh(5), rounds=5)
    if setting.endswith("privacy"):
        config.update(SYSTEMS_AND_PRIVACY)
        config["eval"] = {"every": 1}  # the average model's metrics, sim_time and ε each round
    whole = Runner(load_config(config))
    whole.run()
    saved, resumed = stopped_and_resumed(config)
    assert torch.equal(whole.client_models(), resumed.client_models())
    assert whole.bytes_total == resumed.bytes_total
    np.testing.assert_equal(without_timing(resumed.rows), without_timing(whole.rows)[2:])
    names = ("algorithm", "gossip", "systems", "privacy")
    if setting.endswith("privacy"):
        assert set(names) <= set(saved) and resumed.rows[-1]["sim_time"] > 0
    for part in names:
        for key, value in whole.state_dict().get(part, {}).items():
            assert torch.equal(value, resumed.state_dict()[part][key]), (part, key)


def test_checkpoint_holds_the_public_copies():
    p = Problem(clients=5, dim=8)
    config = p.config({"name": "dfedavg"}, W=ring_mh(5), rounds=2)
    config["topology"]["compression"] = {"compressor": "top_k", "k": 2, "gamma": 0.5}
    runner = Runner(load_config(config))
    runner.run()
    saved = runner.state_dict()["gossip"]
    assert set(saved) == {"0.hat", "0.mixed"} and saved["0.hat"].shape == (5, 8)
    assert torch.count_nonzero(saved["0.hat"]) > 0
