"""Muffliato (issue 40; Cyffers, Even, Bellet & Massoulié, NeurIPS 2022): the round against a
float64 NumPy re-derivation on least squares (several clients and rounds, K ≥ 2 gossip steps,
plain and Chebyshev-accelerated, the noise drawn from gossipfl's streams), the noise by its
statistics, the exact reduction to DFedAvg (bit for bit), the pairwise network DP guarantee
against a direct evaluation of the paper's sum, exact resumption, and every refusal."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import gossipfl
from gossipfl.assembly.loading import load_config
from gossipfl.common.rng import client_keys, counter_bits, counter_normal
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.topology import build_topology
from tests.helpers import TINY, stopped_and_resumed, without_timing
from tests.lsq import Problem, assert_close, random_doubly_stochastic, ring_mh

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")

M, ROUNDS, LR, DECAY, SEED = 5, 3, 0.05, 0.9, 3
W = ring_mh(M)


def noise(i: int, t: int, P: int) -> np.ndarray:
    """gossipfl's N(0, I) of client i in round t (its documented stream), drawn in float32."""
    key = counter_bits(client_keys(SEED, [i], "muffliato"), torch.tensor([t]), 63)
    return counter_normal(key, P)[0].double().numpy()


def omega_of(W: np.ndarray) -> float:
    """The paper's ω from λ_W = 1 − (second largest eigenvalue of W)."""
    gap = 1.0 - np.sort(np.linalg.eigvalsh(W))[-2]
    return 2 * (1 - math.sqrt(gap * (1 - gap / 4))) / (1 - gap / 2) ** 2


def gossip_reference(W, Y, K, chebyshev):
    previous, current = Y, W @ Y
    omega = omega_of(W) if chebyshev else 1.0
    for _ in range(K - 1):
        previous, current = current, omega * (W @ current) + (1 - omega) * previous
    return current


def muffliato_reference(p: Problem, W, K, sigma, clip, chebyshev, rounds=ROUNDS):
    X = p.x0.copy()
    for t in range(rounds):
        Y = X.copy()
        for i in range(p.M):
            g = p.grad(i, X[i])
            if clip is not None:
                g = g * min(1.0, clip / np.linalg.norm(g))
            if sigma:
                g = g + sigma * clip * noise(i, t, p.d)
            Y[i] = X[i] - LR * DECAY ** t * g
        X = gossip_reference(W, Y, K, chebyshev)
    return X


def algorithm(**params):
    return {"name": "muffliato", **params}


# -- the round against its re-derivation ------------------------------------------------------
@pytest.mark.parametrize("chebyshev", [False, True])
@pytest.mark.parametrize("sigma,clip", [(0.0, 0.5), (0.3, 0.5), (0.7, 100.0)])
def test_round_matches_float64_rederivation(chebyshev, sigma, clip):
    p = Problem(clients=M, dim=4)
    r = p.run(algorithm(gossip_steps=3, sigma=sigma, clip=clip, chebyshev=chebyshev), W=W,
              rounds=ROUNDS, steps=1, lr=LR, decay=DECAY)
    expected = muffliato_reference(p, W, 3, sigma, clip, chebyshev)
    assert_close(r.params, expected, rtol=3e-5, atol=3e-6)


def test_clipping_is_active_in_the_rederivation():
    p = Problem(clients=M, dim=4)
    norms = [np.linalg.norm(p.grad(i, p.x0[i])) for i in range(M)]
    assert min(norms) > 0.5  # so clip = 0.5 above clips every client


def test_chebyshev_on_a_dense_graph_matches_rederivation():
    p = Problem(clients=6, dim=3)
    W6 = random_doubly_stochastic(6, seed=2)
    r = p.run(algorithm(gossip_steps=4, sigma=0.2, clip=1.0, chebyshev=True), W=W6,
              rounds=2, steps=1, lr=LR, decay=DECAY)
    assert_close(r.params, muffliato_reference(p, W6, 4, 0.2, 1.0, True, rounds=2),
                 rtol=3e-5, atol=3e-6)


def test_noise_has_its_statistics():
    """One round, K = 1: X¹(σ) − X¹(0) = −η W (σ C Z), so Z is recovered and is N(0, 1)."""
    m, d, sigma, clip = 7, 400, 0.8, 2.0
    p = Problem(clients=m, dim=d)
    W7 = ring_mh(m)  # invertible for m = 7
    runs = [p.run(algorithm(gossip_steps=1, sigma=s, clip=clip), W=W7, rounds=1, steps=1,
                  lr=LR, decay=DECAY).params.double().numpy() for s in (sigma, 0.0)]
    Z = -np.linalg.solve(W7, runs[0] - runs[1]) / (LR * sigma * clip)
    assert abs(Z.mean()) < 4 / math.sqrt(Z.size)
    assert abs(Z.std() - 1) < 0.05
    corr = np.corrcoef(Z)  # clients draw independent streams
    assert np.abs(corr[~np.eye(m, dtype=bool)]).max() < 0.2
    assert_close(Z, np.stack([noise(i, 0, d) for i in range(m)]), rtol=1e-3, atol=1e-3)


# -- exact reduction --------------------------------------------------------------------------
@pytest.mark.parametrize("steps,chebyshev", [(3, False), (1, True)])
def test_no_noise_no_clip_is_dfedavg_bit_for_bit(steps, chebyshev):
    p = Problem(clients=M, dim=4)
    kwargs = {"W": W, "rounds": ROUNDS, "steps": 1, "lr": LR, "decay": DECAY}
    mine = p.run(algorithm(gossip_steps=steps, sigma=0.0, clip=None, chebyshev=chebyshev),
                 **kwargs)
    theirs = p.run({"name": "dfedavg", "gossip_steps": steps}, **kwargs)
    assert torch.equal(mine.params, theirs.params)
    for a, b in zip(without_timing(mine.metrics), without_timing(theirs.metrics)):
        assert {k: v for k, v in a.items() if not k.startswith("pndp")} == b


# -- the guarantee ------------------------------------------------------------------------------
def direct_sums(W, K, chebyshev):
    """S[u, v] = Σ_k Σ_{w ∈ N_v} (P_k)_wu² / ‖(P_k)_w‖², by loops (the paper's sum)."""
    m = len(W)
    omega = omega_of(W) if chebyshev else 1.0
    Ps = [np.eye(m), W]
    while len(Ps) < K:
        Ps.append(omega * W @ Ps[-1] + (1 - omega) * Ps[-2])
    S = np.zeros((m, m))
    for u in range(m):
        for v in range(m):
            if u == v:
                continue
            for P in Ps[:K]:
                for w in range(m):
                    if w != v and W[v, w] != 0:
                        S[u, v] += P[w, u] ** 2 / (P[w] ** 2).sum()
    return S


@pytest.mark.parametrize("chebyshev", [False, True])
def test_guarantee_matches_the_papers_sum(chebyshev):
    p = Problem(clients=6, dim=3)
    W6 = random_doubly_stochastic(6, seed=4)
    sigma, clip, alpha, K, rounds = 0.9, 1.0, 3.0, 3, 4
    cfg = p.config(algorithm(gossip_steps=K, sigma=sigma, clip=clip, chebyshev=chebyshev,
                             alpha=alpha), W=W6, rounds=rounds, steps=1)
    cfg["eval"]["every"] = 1
    rows = gossipfl.run(cfg).metrics
    S = direct_sums(W6, K, chebyshev)
    off = ~np.eye(6, dtype=bool)
    for t, row in enumerate(rows, start=1):
        eps = alpha * (2 * clip) ** 2 / (2 * (sigma * clip) ** 2) * t * S
        assert row["pndp_max"] == pytest.approx(eps[off].max(), rel=1e-12)
        assert row["pndp_mean"] == pytest.approx(eps[off].mean(), rel=1e-12)
    # a neighbour sees u's own noisy value at step 0: at least the local (LDP) loss per round
    ldp = alpha * 4 / (2 * sigma ** 2) * rounds
    for u in range(6):
        for v in range(6):
            if u != v and W6[v, u] != 0:
                assert alpha * 4 / (2 * sigma ** 2) * rounds * S[u, v] >= ldp - 1e-9


def test_guarantee_sums_the_rounds_of_a_time_varying_graph():
    cfg = copy.deepcopy(TINY)
    cfg["data"]["clients"] = 6
    cfg["topology"] = {"name": "random_matching"}
    cfg["algorithm"] = algorithm(gossip_steps=2, sigma=1.5, clip=1.0)
    cfg["train"]["local_steps"] = 1
    rows = gossipfl.run(cfg).metrics
    topology = build_topology("random_matching", 6, seed=load_config(cfg).seed)
    S = sum(direct_sums(np.asarray(topology.matrix(t)), 2, False) for t in range(6))
    eps = 2.0 * 4 / (2 * 1.5 ** 2) * S
    off = ~np.eye(6, dtype=bool)
    assert rows[-1]["pndp_max"] == pytest.approx(eps[off].max(), rel=1e-12)
    assert rows[-1]["pndp_mean"] == pytest.approx(eps[off].mean(), rel=1e-12)


def test_no_noise_reports_an_infinite_guarantee():
    p = Problem(clients=M, dim=4)
    rows = p.run(algorithm(sigma=0.0, clip=1.0), W=W, rounds=2, steps=1).metrics
    assert math.isinf(rows[-1]["pndp_max"]) and math.isinf(rows[-1]["pndp_mean"])


# -- resumption ---------------------------------------------------------------------------------
def test_resume_is_exact():
    cfg = copy.deepcopy(TINY)
    cfg["algorithm"] = algorithm(gossip_steps=3, sigma=0.5, clip=1.0, chebyshev=True)
    cfg["train"]["local_steps"] = 1
    whole = Runner(load_config(cfg))
    whole.run()
    _, resumed = stopped_and_resumed(cfg, k=3)
    assert torch.equal(whole.client_models(), resumed.client_models())
    assert without_timing(whole.rows)[3:] == without_timing(resumed.rows)


# -- refusals -----------------------------------------------------------------------------------
def one_sentence(message: str) -> bool:
    return message.count(". ") == 0 and message.endswith(".")


def _tiny(algo=None, **topology):
    cfg = copy.deepcopy(TINY)
    cfg["algorithm"] = algorithm(**(algo or {}))
    cfg["topology"].update(topology)
    return cfg


@pytest.mark.parametrize("cfg,words", [
    (_tiny({"sigma": -1.0}), "algorithm.sigma: must be >= 0"),
    (_tiny({"sigma": float("nan")}), "algorithm.sigma: must be a finite number"),
    (_tiny({"clip": 0.0}), "algorithm.clip: must be > 0 or null"),
    (_tiny({"clip": None}), "algorithm.clip: null leaves"),
    (_tiny({"chebyshev": "yes"}), "algorithm.chebyshev: must be true or false"),
    (_tiny({"alpha": 1.0}), "algorithm.alpha: must be > 1"),
    (_tiny({"gossip_steps": 0}), "algorithm.gossip_steps: must be an integer >= 1"),
    (_tiny(compression={"compressor": "sign"}), "topology.compression: algorithm muffliato"),
    (_tiny(robust={"rule": "trimmed_mean", "b": 1}), "topology.robust: algorithm muffliato"),
    (_tiny(order="sequential"), "topology.order: sequential is not defined"),
    (_tiny({"chebyshev": True}, name="custom", mixing="custom",
           matrix=[[0.5, 0.5, 0.0], [0.25, 0.5, 0.25], [0.25, 0.0, 0.75]]),
     "algorithm.chebyshev: the paper's acceleration needs a symmetric W"),
])
def test_refusals_are_one_sentence(cfg, words):
    if cfg["topology"].get("name") == "custom":
        cfg["data"]["clients"] = 3
    with pytest.raises(GossipflError) as info:
        Runner(load_config(cfg))
    assert words in str(info.value) and one_sentence(str(info.value))


def test_byzantine_is_refused():
    cfg = _tiny()
    cfg["byzantine"] = {"clients": [1], "attack": "sign_flip"}
    with pytest.raises(GossipflError, match="byzantine: algorithm muffliato"):
        Runner(load_config(cfg))


def test_list_names_muffliato(capsys):
    from gossipfl import cli

    assert cli.main(["list"]) == 0
    assert "muffliato" in capsys.readouterr().out


def test_guarantee_is_left_out_above_the_size_limit(monkeypatch):
    from gossipfl.trust import muffliato as pndp

    monkeypatch.setattr(pndp, "MAX_CLIENTS", 3)
    cfg = _tiny({"gossip_steps": 2})
    with pytest.warns(Warning, match="computed for at most 3 clients; with 4 its columns"):
        rows = gossipfl.run(cfg).metrics
    assert not any(key.startswith("pndp") for key in rows[-1])
