"""GTS-RG and the spectral attack (Gaucher, Dieuleveut & Hendrikx, ICML 2025; issue 40)
against float64 NumPy re-derivations on least squares (DFedAvg, full-batch gradients, several
rounds, receivers of several degrees, with and without attackers), their exact reductions
and their refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipfl.assembly.loading import load_config
from gossipfl.common.rng import torch_generator
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from tests.lsq import Problem, assert_close, ring_mh
from tests.trust_cases import (
    BYZANTINE,
    DECAY,
    LR,
    ROUNDS,
    STEPS,
    W7,
    M,
    attack_reference,
    neighbourhood,
    run,
)

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")


# -- float64 re-derivations ------------------------------------------------------------------------
def gts_reference(msgs, w, b=None, gamma=1.0, delta=None, byz_weight=0.0):
    """One receiver, msgs [d + 1, P] (row 0 its own), w [d + 1]: x_i = z_i + γ Σ_j ω_ij
    (m_j − z_i), ω = w with the farthest neighbours trimmed: b of them, or a weight budget δ
    spent from the farthest down (the last one cut in part)."""
    diffs = msgs - msgs[0]
    norms = np.linalg.norm(diffs, axis=1)
    farthest = 1 + np.argsort(-norms[1:], kind="stable")  # ties: the lower position first
    kept = np.array(w, dtype=float)
    if delta is None:
        kept[farthest[:b]] = 0.0
    else:
        budget = byz_weight if delta == "byzantine" else delta
        for j in farthest:
            cut = min(kept[j], budget)
            kept[j] -= cut
            budget -= cut
    return msgs[0] + gamma * kept @ diffs


def gossip_reference(Z, W, combine, attack=None, byz=()):
    """One robust gossip step: every honest receiver's Byzantine neighbours send the attack's
    message (:func:`attack_reference`, or ``attack`` itself when it is a function)."""
    X = np.empty_like(Z)
    for i in range(len(Z)):
        hood = neighbourhood(W, i)
        msgs = Z[hood].copy()
        if attack is not None and i not in byz:
            crafted = attack(Z, W, i, hood) if callable(attack) else \
                attack_reference(attack, Z, W, i, hood, list(byz), 0, None)
            for k, j in enumerate(hood):
                if j in crafted:
                    msgs[k] = crafted[j]
        byz_weight = sum(W[i, j] for j in hood[1:] if j in byz)
        X[i] = combine(msgs, W[i, hood], byz_weight)
    return X


def dfedavg(p, W, combine, attack=None, byz=()):
    """DFedAvg's rounds; ``attack`` as :func:`gossip_reference`'s, or a list: round t's."""
    X = p.x0.copy()
    for t in range(ROUNDS):
        Y = X.copy()
        for _ in range(STEPS):
            Y = Y - LR * DECAY ** t * p.grads(Y)
        X = gossip_reference(Y, W, combine, attack[t] if isinstance(attack, list) else attack,
                             byz)
    return X


def gts(b=None, gamma=1.0, delta=None):
    return lambda msgs, w, byz_weight: gts_reference(msgs, w, b, gamma, delta, byz_weight)


def mean(msgs, w, byz_weight):
    return w @ msgs


# -- gts ---------------------------------------------------------------------------------------------
GTS_CASES = [{"b": 1}, {"b": 2, "gamma": 0.5}, {"b": 1, "gamma": 1.3}, {"delta": 0.3},
             {"delta": 0.45, "gamma": 0.8}]


@pytest.mark.parametrize("params", GTS_CASES, ids=str)
def test_gts_matches_its_equations(params):
    p = Problem(clients=M)
    result = run(p, W7, {"rule": "gts", **params})
    assert_close(result.params, dfedavg(p, W7, gts(**params)), rtol=1e-4, atol=2e-5)


def assert_rederived_and_moved(p, result, expected):
    """The run equals its float64 re-derivation, and the attack moved the honest models
    away from plain gossip's (so the comparison tests the rule under attack)."""
    assert_close(result.params, expected, rtol=1e-4, atol=2e-5)
    honest = [i for i in range(M) if i not in BYZANTINE]
    assert np.abs(expected[honest] - dfedavg(p, W7, mean)[honest]).max() > 1e-3


@pytest.mark.parametrize("params", [{"b": 1}, {"b": 2}, {"delta": "byzantine"}], ids=str)
@pytest.mark.parametrize("attack", [{"attack": "alie"}, {"attack": "sign_flip", "scale": 2.0},
                                    {"attack": "dissensus"}], ids=lambda a: a["attack"])
def test_gts_under_attack_matches_its_equations(params, attack):
    p = Problem(clients=M)
    result = run(p, W7, {"rule": "gts", **params}, {"clients": BYZANTINE, **attack})
    assert_rederived_and_moved(p, result, dfedavg(p, W7, gts(**params), attack, BYZANTINE))


def test_gts_trims_somebody():
    """The re-derivations above exercise the trimming: b = 1 and a weight δ move some x."""
    p = Problem(clients=M)
    plain = dfedavg(p, W7, gts(b=0))
    assert np.abs(dfedavg(p, W7, gts(b=1)) - plain).max() > 1e-3
    assert np.abs(dfedavg(p, W7, gts(delta=0.3)) - plain).max() > 1e-3


def test_gts_with_b_zero_is_the_plain_gossip_step():
    p = Problem(clients=M)
    plain = run(p, W7).params
    assert_close(run(p, W7, {"rule": "gts", "b": 0}).params, plain.double().numpy(),
                 rtol=1e-5, atol=1e-6)


def test_gts_with_b_zero_is_cs_plus_with_b_zero_bit_for_bit():
    """Neither trims nor clips: both are z_i + γ Σ_j w_ij (m_{j→i} − z_i), the same bits."""
    p = Problem(clients=M)
    attack = {"clients": BYZANTINE, "attack": "alie"}
    for gamma in (0.5, 1.0):
        assert torch.equal(run(p, W7, {"rule": "gts", "b": 0, "gamma": gamma}, attack).params,
                           run(p, W7, {"rule": "cs_plus", "b": 0, "gamma": gamma},
                               attack).params)


def nna_reference(msgs, w, byz_weight, f):
    """NNA (Farhadkhani et al. 2023): the average of the n − f received vectors nearest to
    the receiver's own (its own included)."""
    distance = np.linalg.norm(msgs - msgs[0], axis=1)
    return msgs[np.argsort(distance, kind="stable")[:len(msgs) - f]].mean(axis=0)


def test_gts_on_the_complete_graph_is_nna():
    """Uniform weights 1/M, b = f and γ = M/(M − f): x_i = (z_i + Σ_{M−1−f nearest} m)/(M − f)."""
    p, f = Problem(clients=M), 2
    uniform = np.full((M, M), 1.0 / M)
    attack = {"attack": "sign_flip", "scale": 3.0}
    result = run(p, uniform, {"rule": "gts", "b": f, "gamma": M / (M - f)},
                 {"clients": BYZANTINE, **attack})
    expected = dfedavg(p, uniform, lambda m, w, bw: nna_reference(m, w, bw, f), attack,
                       BYZANTINE)
    assert_close(result.params, expected, rtol=1e-4, atol=2e-5)


def test_gts_trimming_weight_b_w_is_trimming_b_neighbours():
    p = Problem(clients=M)
    uniform = np.full((M, M), 1.0 / M)
    by_count = run(p, uniform, {"rule": "gts", "b": 2}).params
    by_weight = run(p, uniform, {"rule": "gts", "delta": 2 / M}).params
    assert_close(by_weight, by_count.double().numpy(), rtol=1e-5, atol=1e-6)


def test_gts_at_degree_b_does_not_communicate():
    """A ring with b = 2: both neighbours trimmed, x_i = z_i."""
    p = Problem(clients=M)
    trimmed = run(p, ring_mh(M), {"rule": "gts", "b": 2})
    assert_close(trimmed.params, dfedavg(p, np.eye(M), mean))


@pytest.mark.parametrize("spec,words", [
    ({"rule": "gts", "b": 7}, ("topology.robust.b: rule gts with b = 7 needs at least b = 7 "
                               "neighbours per client, but client")),
    ({"rule": "gts", "b": -1}, "topology.robust.b: must be an integer >= 0, got -1."),
    ({"rule": "gts", "b": 1.5}, "topology.robust.b: must be an integer >= 0, got 1.5."),
    ({"rule": "gts", "gamma": 0}, "topology.robust.gamma: must be a number > 0, got 0."),
    ({"rule": "gts", "gamma": "big"}, "topology.robust.gamma: must be a number > 0"),
    ({"rule": "gts", "delta": 1.0}, "topology.robust.delta: must be in (0, 1), 'byzantine'"),
    ({"rule": "gts", "delta": "known"}, "got 'known'."),
    ({"rule": "gts", "b": 1, "delta": 0.2}, ("topology.robust.delta: rule gts trims either b "
                                             "neighbours or the weight delta, got both b = 1 "
                                             "and delta = 0.2; remove one.")),
    ({"rule": "gts", "tau": 1.0}, "topology.robust.tau: unknown parameter of rule 'gts'"),
])
def test_gts_refusals(spec, words):
    p = Problem(clients=M)
    config = p.config({"name": "dfedavg"}, W=W7)
    config["topology"]["robust"] = spec
    with pytest.raises(GossipflError) as info:
        Runner(load_config(config))
    assert words in str(info.value) and str(info.value).count(". ") == 0


def test_gts_with_delta_has_no_degree_requirement():
    p = Problem(clients=M)
    result = run(p, ring_mh(M), {"rule": "gts", "delta": 0.5})
    assert_close(result.params, dfedavg(p, ring_mh(M), gts(delta=0.5)), rtol=1e-4, atol=2e-5)


def test_list_names_gts(capsys):
    from gossipfl import cli

    assert cli.main(["list"]) == 0
    assert "  gts " in capsys.readouterr().out


# -- the spectral attack -----------------------------------------------------------------------------
def fiedler_reference(W, byz):
    """u [M]: the eigenvector of λ_2 of the honest graph's Laplacian (0 on the Byzantine)."""
    honest = [k for k in range(len(W)) if k not in byz]
    A = W[np.ix_(honest, honest)].copy()
    np.fill_diagonal(A, 0.0)
    laplacian = np.diag(A.sum(axis=1)) - A
    u = np.zeros(len(W))
    u[honest] = np.linalg.eigh(laplacian)[1][:, 1]
    return u


def search_reference(f, evals=16, delta=1.0, ratio=0.8):
    """The authors' line search, one receiver at a time: grow from 0 while improving, then
    contract around the best point."""
    best_x, best_y = 0.0, f(0.0)
    prop_x, evals = best_x, evals - 1
    while evals > 0:
        prop_x = best_x + delta
        prop_y = f(prop_x)
        evals -= 1
        if prop_y > best_y:
            best_x, best_y, delta = prop_x, prop_y, delta * 2
        else:
            delta *= ratio
            break
    while evals > 0:
        if prop_x < best_x:
            prop_x += delta
        else:
            x = prop_x - delta
            while x < 0:
                x = (x + prop_x) / 2
            prop_x = x
        prop_y = f(prop_x)
        evals -= 1
        if prop_y > best_y:
            best_x, best_y = prop_x, prop_y
        delta *= ratio
    return best_x


def spectral_attack(combine, epsilon, gamma=1.0, unit=None):
    """The message of every Byzantine neighbour of i: z_i + ε u_i Σ_{k∈H} u_k z_k, ε given or
    searched to maximize ‖x_i(ε) − (z_i + γ Σ_{j∈H_i} w_ij (z_j − z_i))‖²; with ``unit``
    (``[M, P]`` unit rows, ``direction: random``) the push is ‖u_i Σ_k u_k z_k‖ unit_i."""
    def attack(Z, W, i, hood):
        u = fiedler_reference(W, BYZANTINE)
        direction = u[i] * (u @ Z)
        if unit is not None:
            direction = np.linalg.norm(direction) * unit[i]
        byz = [k for k, j in enumerate(hood) if j in BYZANTINE]
        w = W[i, hood]
        byz_weight = sum(W[i, j] for j in hood[1:] if j in BYZANTINE)
        ideal = Z[i] + gamma * sum(W[i, j] * (Z[j] - Z[i]) for j in hood[1:]
                                   if j not in BYZANTINE)

        def damage(e):
            msgs = Z[hood].copy()
            msgs[byz] = Z[i] + e * direction
            return float(((combine(msgs, w, byz_weight) - ideal) ** 2).sum())

        e = search_reference(damage) if epsilon == "search" else epsilon
        return {j: Z[i] + e * direction for j in hood if j in BYZANTINE}
    return attack


def trimmed_mean(msgs, w, byz_weight, b=1):
    d = len(msgs) - 1
    return (msgs[0] + np.sort(msgs[1:], axis=0)[b:d - b].sum(axis=0)) / (d - 2 * b + 1)


def cs_plus(msgs, w, byz_weight, b=1):
    diffs = msgs - msgs[0]
    norms = np.linalg.norm(diffs, axis=1)
    tau = np.sort(norms)[::-1][2 * b]
    return msgs[0] + (w * np.where(norms > tau, tau / np.maximum(norms, 1e-300), 1.0)) @ diffs


# Not searched against cs_plus: once the Byzantine messages are clipped, the damage is flat in
# ε up to rounding, so which ε the search keeps there is decided by float32 vs float64 noise.
SPECTRAL_CASES = [
    ({"rule": "mean"}, mean, 2.0), ({"rule": "gts", "b": 1}, gts(b=1), 2.0),
    ({"rule": "cs_plus", "b": 1}, cs_plus, 5.0), ({"rule": "mean"}, mean, -0.5),
    ({"rule": "gts", "delta": "byzantine"}, gts(delta="byzantine"), "search"),
    ({"rule": "gts", "b": 1}, gts(b=1), "search"),
    ({"rule": "gts", "b": 2, "gamma": 0.5}, gts(b=2, gamma=0.5), "search"),
    ({"rule": "trimmed_mean", "b": 1}, trimmed_mean, "search"),
]


@pytest.mark.parametrize("rule,combine,epsilon", SPECTRAL_CASES,
                         ids=[f"{r['rule']}-{r.get('b', '')}-{e}" for r, _, e in SPECTRAL_CASES])
def test_spectral_attack_matches_its_equations(rule, combine, epsilon):
    p = Problem(clients=M)
    result = run(p, W7, rule, {"clients": BYZANTINE, "attack": "spectral", "epsilon": epsilon})
    attack = spectral_attack(combine, epsilon, rule.get("gamma", 1.0))
    assert_rederived_and_moved(p, result, dfedavg(p, W7, combine, attack, BYZANTINE))


def test_spectral_attack_searches_by_default():
    p = Problem(clients=M)
    default = run(p, W7, {"rule": "gts", "b": 1}, {"clients": BYZANTINE, "attack": "spectral"})
    searched = run(p, W7, {"rule": "gts", "b": 1}, {"clients": BYZANTINE, "attack": "spectral",
                                                    "epsilon": "search"})
    assert torch.equal(default.params, searched.params)


def test_spectral_attack_with_epsilon_zero_is_a_silent_neighbour():
    """ε = 0: every Byzantine neighbour sends z_i, so under the mean an honest receiver takes
    its honest gossip step, W with the Byzantine weights moved onto the diagonal."""
    p = Problem(clients=M)
    result = run(p, W7, None, {"clients": BYZANTINE, "attack": "spectral", "epsilon": 0})
    silent = W7.copy()
    for i in range(M):
        if i not in BYZANTINE:
            silent[i, i] += silent[i, BYZANTINE].sum()
            silent[i, BYZANTINE] = 0.0
    honest = [i for i in range(M) if i not in BYZANTINE]
    expected = dfedavg(p, W7, mean, spectral_attack(mean, 0.0), BYZANTINE)
    assert_close(result.params, expected, rtol=1e-4, atol=2e-5)
    X = p.x0.copy()
    for t in range(ROUNDS):  # the honest rows: plain gossip on the silent matrix
        Y = X.copy()
        for _ in range(STEPS):
            Y = Y - LR * DECAY ** t * p.grads(Y)
        X = np.where(np.isin(np.arange(M), honest)[:, None], silent @ Y, W7 @ Y)
    assert_close(result.params[honest], X[honest], rtol=1e-4, atol=2e-5)


def test_fiedler_vector_is_networkx_s():
    import networkx as nx

    from gossipfl.trust.attacks import fiedler_vector

    honest = ~np.isin(np.arange(M), BYZANTINE)
    u = fiedler_vector(W7, honest)
    ids = np.flatnonzero(honest)
    graph = nx.from_numpy_array(W7[np.ix_(ids, ids)] * (1 - np.eye(len(ids))))
    v = nx.fiedler_vector(graph, weight="weight", tol=1e-12, seed=0)
    assert np.allclose(np.abs(u[ids] @ v), 1.0, atol=1e-8)  # the same unit vector, up to sign
    assert np.all(u[BYZANTINE] == 0) and abs(u.sum()) < 1e-10


def test_line_search_is_the_sequential_one_on_every_row():
    from gossipfl.trust.attacks import line_search

    centres = torch.tensor([0.0, 0.3, 2.5, 7.0, 100.0, 1e4], dtype=torch.float64)
    plateau = torch.tensor(4.2, dtype=torch.float64)

    def score(e):  # a peak at each centre; the last row flat beyond 4.2
        values = -(e - centres) ** 2
        values[-1] = torch.minimum(e[-1], plateau)
        return values

    found = line_search(score, torch.zeros(len(centres), dtype=torch.float64))
    for r, centre in enumerate(centres.tolist()):
        f = (lambda e: min(e, 4.2)) if r == len(centres) - 1 else (lambda e, c=centre: -(e - c) ** 2)
        assert found[r].item() == search_reference(f)


def test_spectral_attack_follows_the_round_s_matrix():
    """A new W (a time-varying graph's next round) gives a new Fiedler vector."""
    from gossipfl.trust.attacks import Scene, Spectral, Step

    attack = Spectral(M, len(BYZANTINE), epsilon=1.0)
    z = torch.as_tensor(Problem(clients=M).x0)
    honest = torch.as_tensor(~np.isin(np.arange(M), BYZANTINE))
    senders = torch.arange(M)[:, None]

    def direction(W):
        step = Step(z, torch.tensor(BYZANTINE), honest, 0, (0, 0, 0), W)
        scene = Scene(step, z[:, None], torch.ones(M, 1, dtype=z.dtype), honest[:, None],
                      senders)
        return attack.fiedler_push(scene)[:, 0].numpy()

    other = 0.5 * W7 + 0.5 * ring_mh(M)
    for W in (W7, other, W7):
        u = fiedler_reference(W, BYZANTINE)
        assert np.allclose(direction(W), u[:, None] * (u @ z.numpy())[None], atol=1e-12)


# -- the spectral attack's control: a random direction of the same norm ------------------------------
def random_units(seed, key, shape, dtype=torch.float32):
    """``[M, P]`` float64: ξ_i / ‖ξ_i‖, ξ the step's N(0, I) draw from (seed, "spectral", *key)
    in the run's dtype (the stream is the specification; the normalization is re-derived)."""
    xi = torch.randn(shape, generator=torch_generator(seed, "spectral", *key), dtype=dtype)
    xi = xi.double().numpy()
    return xi / np.linalg.norm(xi, axis=1, keepdims=True)


def spectral_scene(z, seed=0, key=(0, 0, 0), W=W7, receivers=None):
    """A scene of the receivers (default: every client) holding only their own rows."""
    from gossipfl.trust.attacks import Scene, Step

    honest = torch.as_tensor(~np.isin(np.arange(M), BYZANTINE))
    ids = torch.arange(M) if receivers is None else torch.as_tensor(np.array(receivers))
    step = Step(z, torch.tensor(BYZANTINE), honest, seed, key, W)
    return Scene(step, z[ids][:, None], torch.ones(len(ids), 1, dtype=z.dtype),
                 honest[ids][:, None], ids[:, None])


def random_z(width=50, seed=7):
    return torch.as_tensor(np.random.default_rng(seed).normal(size=(M, width)))


def test_random_direction_has_the_fiedler_norm_per_receiver():
    from gossipfl.trust.attacks import Spectral

    z = random_z()
    attack = Spectral(M, len(BYZANTINE), epsilon=1.0, direction="random")
    scene = spectral_scene(z)
    fiedler = attack.fiedler_push(scene)[:, 0].numpy()
    pushed = attack.random_push(scene, attack.fiedler_push(scene))[:, 0].numpy()
    u = fiedler_reference(W7, BYZANTINE)
    expected = np.abs(u) * np.linalg.norm(u @ z.numpy())  # ‖u_i Σ_k u_k z_k‖, float64
    assert np.allclose(np.linalg.norm(fiedler, axis=1), expected, rtol=1e-12, atol=0)
    assert np.allclose(np.linalg.norm(pushed, axis=1), expected, rtol=1e-12, atol=0)
    assert np.all(pushed[BYZANTINE] == 0) and np.all(expected[np.setdiff1d(range(M), BYZANTINE)] > 0)
    cosine = (pushed * fiedler).sum(1) / np.maximum(expected ** 2, 1e-300)
    assert np.abs(cosine).max() < 0.9  # not the Fiedler direction (50 dimensions)


def test_random_direction_is_reproducible_and_new_every_step():
    from gossipfl.trust.attacks import Spectral

    z = random_z()

    def push(seed, key, receivers=None):
        attack = Spectral(M, len(BYZANTINE), epsilon=1.0, direction="random")
        scene = spectral_scene(z, seed, key, receivers=receivers)
        return attack.random_push(scene, attack.fiedler_push(scene))[:, 0].numpy()

    first = push(0, (2, 0, 1))
    assert np.array_equal(first, push(0, (2, 0, 1)))
    honest = np.setdiff1d(range(M), BYZANTINE)
    assert np.array_equal(push(0, (2, 0, 1), receivers=honest[::-1]), first[honest[::-1]])
    for seed, key in [(0, (2, 0, 0)), (0, (3, 0, 1)), (0, (2, 1, 1)), (1, (2, 0, 1))]:
        other = push(seed, key)
        assert np.abs(other[honest] - first[honest]).min() > 0
    units = random_units(0, (2, 0, 1), z.shape, torch.float64)
    u = fiedler_reference(W7, BYZANTINE)
    expected = np.abs(u)[:, None] * np.linalg.norm(u @ z.numpy()) * units
    assert np.allclose(first, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("rule,combine,epsilon", [
    ({"rule": "mean"}, mean, 2.0), ({"rule": "trimmed_mean", "b": 1}, trimmed_mean, 3.0),
    ({"rule": "gts", "b": 1}, gts(b=1), "search"),
    ({"rule": "trimmed_mean", "b": 1}, trimmed_mean, "search"),
], ids=["mean-2", "trimmed_mean-3", "gts-search", "trimmed_mean-search"])
def test_spectral_attack_in_a_random_direction_matches_its_equations(rule, combine, epsilon):
    """m_{→i} = z_i + ε d_i, d_i = ‖u_i Σ_k u_k z_k‖ ξ_i / ‖ξ_i‖ with round t's draw (one
    gossip call and step a round), ε fixed or searched along d_i."""
    p = Problem(clients=M)
    result = run(p, W7, rule, {"clients": BYZANTINE, "attack": "spectral", "epsilon": epsilon,
                               "direction": "random"})
    attacks = [spectral_attack(combine, epsilon, unit=random_units(3, (t, 0, 0), (M, p.d)))
               for t in range(ROUNDS)]
    expected = dfedavg(p, W7, combine, attacks, BYZANTINE)
    assert_rederived_and_moved(p, result, expected)
    fiedler = dfedavg(p, W7, combine, spectral_attack(combine, epsilon), BYZANTINE)
    assert np.abs(expected - fiedler).max() > 1e-3  # the direction changed the run


def test_spectral_direction_fiedler_is_the_default():
    p = Problem(clients=M)
    for epsilon in (2.0, "search"):
        attack = {"clients": BYZANTINE, "attack": "spectral", "epsilon": epsilon}
        default = run(p, W7, {"rule": "gts", "b": 1}, attack)
        named = run(p, W7, {"rule": "gts", "b": 1}, {**attack, "direction": "fiedler"})
        assert torch.equal(default.params, named.params)


def test_resume_is_exact_under_the_spectral_attack():
    from tests.helpers import stopped_and_resumed

    p = Problem(clients=M)
    config = p.config({"name": "dsgt"}, W=W7, rounds=5)
    config["topology"]["robust"] = {"rule": "gts", "b": 1}
    config["byzantine"] = {"clients": BYZANTINE, "attack": "spectral"}
    whole = Runner(load_config(config))
    whole.run()
    _, resumed = stopped_and_resumed(config)
    assert torch.equal(whole.client_models(), resumed.client_models())


@pytest.mark.parametrize("params,words", [
    ({"epsilon": "big"}, "byzantine.epsilon: must be a number or 'search', got 'big'."),
    ({"epsilon": True}, "byzantine.epsilon: must be a number or 'search', got True."),
    ({"epsilon": float("nan")}, "byzantine.epsilon: must be a finite number, got nan."),
    ({"view": "all"}, "byzantine.view: unknown parameter of attack 'spectral'"),
    ({"direction": "gaussian"},
     "byzantine.direction: unknown value 'gaussian'; choose one of: fiedler, random."),
])
def test_spectral_attack_refusals(params, words):
    p = Problem(clients=M)
    config = p.config({"name": "dfedavg"}, W=W7)
    config["byzantine"] = {"clients": BYZANTINE, "attack": "spectral", **params}
    with pytest.raises(GossipflError) as info:
        load_config(config)
    assert words in str(info.value) and str(info.value).count(". ") == 0


def test_list_names_the_spectral_attack(capsys):
    from gossipfl import cli

    assert cli.main(["list"]) == 0
    assert "  spectral " in capsys.readouterr().out
