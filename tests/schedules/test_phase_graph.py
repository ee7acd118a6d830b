"""A local phase replayed from one graph (gossipfl.schedules.phase_graph, issue 48).

No GPU here: the phases are recorded by :class:`TracedGraph`, a CUDA graph's contract on the
CPU (the Python of the phase runs once, every value it reads on the host is baked into the
recording, a read of a tensor's value fails it), and replayed. A phase that read anything of
the round on the host (the learning rate, the clients, the minibatches) would replay stale
values and part from the eager numbers; these tests hold the replayed phases to the eager
bits, round after round.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from gossipfl.algorithms import ALGORITHMS, get_algorithm
from gossipfl.algorithms.base import Phase
from gossipfl.algorithms.terms import pure, sgd
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.data import from_tensors
from gossipfl.engine.compiled import TracedGraph
from gossipfl.schedules.phase_graph import PhaseGraphs
from gossipfl.testing import least_squares, run_round
from tests.lsq import assert_close
from tests.schedules.phase_cases import ragged_config, tiny_config


def run(config: dict, traced: bool) -> tuple[Runner, dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = Runner(load_config(config))
        if traced:
            runner.trainer.phase_graphs = PhaseGraphs(runner.trainer, capture=TracedGraph)
        with torch.no_grad():
            for t in range(config["train"]["rounds"]):
                runner.run_round(t)
    return runner, {k: v.clone() for k, v in runner.state.items()}


def assert_same_bits(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert torch.equal(got[key], value), key


def graphs_of(runner: Runner) -> PhaseGraphs:
    return runner.trainer.phase_graphs


@pytest.mark.parametrize("algorithm", ALGORITHMS.names())
def test_every_algorithms_phases_replay_the_eager_bits(algorithm):
    """Each algorithm's phases, replayed where they are taken (a step of the built-in terms),
    give its eager numbers bit for bit over rounds of a decaying learning rate; a phase that
    is taken records without a failure, so a CUDA graph can capture it, and once."""
    config = tiny_config(algorithm, momentum=0.5, weight_decay=5e-4)
    _, want = run(config, traced=False)
    runner, got = run(config, traced=True)
    assert_same_bits(got, want)
    graphs = graphs_of(runner)
    assert all(not g.failures for g in graphs._graphs.values()), algorithm
    # each phase recorded once, though the algorithm builds its phases afresh every round
    recorded = sum(g.captured for g in graphs._graphs.values())
    assert recorded <= len(runner.schedule.algorithm.phases()), algorithm


@pytest.mark.parametrize("algorithm", ["dfedavg", "dfedavgm", "dfedsam", "fedavg", "fedprox",
                                       "scaffold", "dfedcata"])
def test_the_steps_of_these_algorithms_are_replayed(algorithm):
    """The plain decentralized rounds, SAM's, a server's sampled clients, and directions of
    the built-in terms (FedProx's and DFedCata's proximal pulls, SCAFFOLD's correction: the
    anchors and corrections are inputs): one recording of the phase, replayed every round
    after (the clients at work change: they are an input)."""
    config = tiny_config(algorithm, momentum=0.5)
    if algorithm == "fedavg":
        config["algorithm"]["participation"] = 0.5
    runner, _ = run(config, traced=True)
    graphs = graphs_of(runner)
    assert graphs.replays == config["train"]["rounds"]
    assert sum(g.captured for g in graphs._graphs.values()) == 1


def test_augmented_cnn_phases_replay_the_eager_bits():
    """The cnn, with the minibatches cropped and flipped from each client's hashed stream:
    the keys and the samples drawn so far are inputs of the recording."""
    config = tiny_config("dfedavgm", model="cnn", momentum=0.9, weight_decay=5e-4)
    config["data"]["augment"] = True
    _, want = run(config, traced=False)
    runner, got = run(config, traced=True)
    assert graphs_of(runner).replays == 3
    assert_same_bits(got, want)


def built_in_model_config(model: str) -> dict:
    """The tiny run of a built-in model (token ids for the LSTM, images of its size else);
    the large ones (VGG-11, ResNet-18) take phases of 2 steps, whose trace costs two thirds
    of 3 steps'."""
    from gossipfl.data import Dataset

    gen = torch.Generator().manual_seed(0)
    steps = 2 if model in ("vgg11", "resnet18") else 3
    config = tiny_config("dfedavgm", momentum=0.5, weight_decay=5e-4, local_steps=steps)
    shape = {"cnn": (1, 16, 16), "femnist_cnn": (1, 28, 28), "vgg11": (3, 32, 32),
             "resnet18": (3, 16, 16)}
    if model == "lstm":
        config["data"]["tensors"] = Dataset(
            "tokens", torch.randint(0, 20, (64, 10), generator=gen),
            torch.randint(0, 3, (64,), generator=gen), torch.randint(0, 20, (16, 10), generator=gen),
            torch.randint(0, 3, (16,), generator=gen), 3)
        config["model"] = {"name": "lstm", "options": {"vocab": 20, "hidden": 8, "embed": 4}}
    else:
        if model in shape:
            config["data"]["tensors"] = from_tensors(
                torch.randn(64, *shape[model], generator=gen),
                torch.randint(0, 3, (64,), generator=gen),
                torch.randn(16, *shape[model], generator=gen),
                torch.randint(0, 3, (16,), generator=gen))
        config["model"] = {"name": model, "options": {}}
    config["train"]["rounds"] = 2
    return config


@pytest.mark.parametrize("model", ["mlp", "cnn", "logistic", "linear", "lstm",
                                   *(pytest.param(m, marks=pytest.mark.slow)
                                     for m in ("femnist_cnn", "vgg11", "resnet18"))])
def test_every_built_in_models_phases_replay_or_say_why_not(model):
    """Every built-in model: its phases replayed from their recording give the eager bits;
    the LSTM's recording cannot run on the CPU's stand-in (its CPU kernel keeps a workspace
    that a trace does not), so its phases run step by step, the reason logged once, the
    same bits."""
    config = built_in_model_config(model)
    _, want = run(config, traced=False)
    runner, got = run(config, traced=True)
    assert_same_bits(got, want)
    graphs = graphs_of(runner)
    failures = [reason for g in graphs._graphs.values() for reason in g.failures]
    if model == "lstm":
        assert graphs.replays == 0 and len(failures) == 1, failures
    else:
        assert graphs.replays == 2 and not failures, failures


@pytest.mark.parametrize(("change", "reason"), [
    ({"algorithm": {"name": "muffliato"}}, "reads more than tensors"),
    ({"train": {"clip_norm": 1.0}}, None),
])
@pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")
def test_which_phases_run_step_by_step_and_why(change, reason):
    """A direction that reads the round (Muffliato's noise, drawn from the round's stream)
    runs step by step, with the reason; clipping is part of the fused step."""
    config = tiny_config("dfedavg")
    for section, values in change.items():
        config[section].update(values)
    if "local_epochs" in change.get("train", {}):
        config["train"].pop("local_steps")
    said = []
    _, want = run(config, traced=False)
    runner = Runner(load_config(config))
    graphs = runner.trainer.phase_graphs = PhaseGraphs(runner.trainer, capture=TracedGraph)
    real = graphs.refusal
    graphs.refusal = lambda *args: said.append(real(*args)) or said[-1]
    with torch.no_grad():
        for t in range(3):
            runner.run_round(t)
    assert_same_bits(dict(runner.state.items()), want)
    if reason is None:
        assert set(said) == {None} and graphs.replays == 3
    else:
        assert any(reason in (s or "") for s in said) and graphs.replays == 0


def phase_prefixes(runner: Runner) -> list[list[int]]:
    """The rows with a sample at each step of round 0's phase, as the local loop counts
    them."""
    trainer = runner.trainer
    ids = torch.arange(runner.exp.fed.num_clients)
    rows = ids[torch.argsort(trainer.env.sample_sizes, descending=True, stable=True)]
    phase = runner.schedule.algorithm.phases()[0]
    _, mask = trainer.phase_batches(0, 0, phase, rows)
    return mask.any(dim=2).sum(dim=1).tolist()


@pytest.mark.parametrize("algorithm", ["dfedavgm", "dfedcata", "dpsgd",
                                       *(pytest.param(a, marks=pytest.mark.slow)
                                         for a in ("dfedsam", "fedprox", "scaffold"))])
@pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")
def test_ragged_phases_of_unequal_clients_replay_the_eager_bits(algorithm):
    """Unequal clients, whole epochs: at step k only the first a_k rows (ordered by data
    size) have a minibatch. The recording moves those prefixes only, as the step-by-step
    loop does: the eager bits, round after round. With every client at work the prefixes
    repeat each round, so the phase runs eagerly once, is recorded the next round and
    replayed from then on."""
    own = {"dpsgd": {"variant": "local_epoch"}, "fedprox": {"participation": 1.0},
           "scaffold": {"participation": 1.0}}
    config = ragged_config(algorithm, algorithm=own.get(algorithm, {}))
    config["train"]["rounds"] = 4
    want_runner, want = run(config, traced=False)
    prefixes = phase_prefixes(want_runner)
    assert len(set(prefixes)) > 1, prefixes  # the phase is ragged
    runner, got = run(config, traced=True)
    assert_same_bits(got, want)
    graphs = graphs_of(runner)
    assert sum(g.captured for g in graphs._graphs.values()) == 1
    assert graphs.replays == config["train"]["rounds"] - 1
    assert all(not g.failures for g in graphs._graphs.values())


@pytest.mark.slow
def test_ragged_phases_of_sampled_clients_replay_when_their_prefixes_come_again():
    """A server's sampled clients of unequal data: each round's rows may run out of
    minibatches in another order; a phase is recorded only when its prefixes come again
    (here: the same clients drawn in two rounds), and every round keeps the eager bits,
    the rounds that replay included."""
    config = ragged_config("fedavg", algorithm={"participation": 0.75})
    config["train"]["rounds"] = 8
    _, want = run(config, traced=False)
    runner, got = run(config, traced=True)
    assert_same_bits(got, want)
    graphs = graphs_of(runner)
    assert graphs.replays >= 1
    assert all(not g.failures for g in graphs._graphs.values())


@pytest.mark.slow
def test_clients_offline_sit_out_of_a_replayed_phase():
    """Clients offline in a round (systems.availability) are the last rows and have no
    minibatch: the phase's prefixes leave them out, the eager bits."""
    config = ragged_config("dfedavgm", systems={"availability": {"offline": 0.3}})
    config["train"]["rounds"] = 8
    _, want = run(config, traced=False)
    runner, got = run(config, traced=True)
    assert_same_bits(got, want)
    assert all(not g.failures for g in graphs_of(runner)._graphs.values())


@pytest.mark.parametrize("own", ["term", "update"])
@pytest.mark.parametrize("declared", [False, True])
def test_a_step_of_its_own_is_replayed_once_it_is_declared_pure(declared, own):
    """A term or an update an algorithm writes may read anything (a Python value of the
    round would be baked into a recording): its phase runs step by step unless it is
    declared :func:`pure`; declared, it is replayed, the same bits. The update keeps its
    direction in the Work's scratch and steps from it (it writes an input of the recording,
    which the graph copies back)."""

    def halve(ctx, work, d):
        return 0.5 * d

    def update(ctx, work, batch):
        loss, d = ctx.env.gradient(work.y, batch)
        work["kept"].copy_(0.5 * d)
        work.y.sub_(ctx.lr * work["kept"])
        return loss

    function = halve if own == "term" else update
    if declared:
        pure(function)
    phase = Phase(direction=sgd(halve)) if own == "term" else Phase(update=update)
    config = tiny_config("dfedavg")
    runs = []
    for traced in (False, True):
        runner = Runner(load_config(config))
        algorithm = runner.schedule.algorithm
        algorithm.phases = lambda: [phase]
        if own == "update":
            algorithm.begin_round = lambda ctx, state, begin=algorithm.begin_round: begin(
                ctx, state).with_scratch(kept=torch.zeros_like(state["x"]))
        if traced:
            runner.trainer.phase_graphs = PhaseGraphs(runner.trainer, capture=TracedGraph)
        with torch.no_grad():
            for t in range(3):
                runner.run_round(t)
        runs.append(runner)
    assert_same_bits(dict(runs[1].state.items()), dict(runs[0].state.items()))
    assert graphs_of(runs[1]).replays == (3 if declared else 0)


def test_a_packed_studys_loss_tally_keeps_its_phases_step_by_step():
    """A step wrapped by something that keeps state on the host (a packed study's loss tally
    per run) is not recorded: its host state would be updated once, at the recording."""
    from gossipfl.studies.packing.joint import LossTally

    runner = Runner(load_config(tiny_config("dfedavg")))
    trainer = runner.trainer
    trainer.local_step = LossTally(trainer.local_step, 4, 1, torch.device("cpu"))
    graphs = PhaseGraphs(trainer, capture=TracedGraph)
    inner = runner.schedule.algorithm.begin_round(None, runner.state)
    phase = runner.schedule.algorithm.phases()[0]
    rows = torch.arange(4)
    assert graphs.refusal(phase, inner, rows, [4, 4, 4]) == \
        "the local step keeps state on the host"


def test_on_the_cpu_without_a_stand_in_the_phases_run_step_by_step():
    """``engine.cuda_graphs: true`` on the CPU: the phases are asked for, refused (no CUDA
    device), and run eagerly; ``auto`` makes no phase graphs at all on the CPU, ``blocks``
    none anywhere (the oracle's blocks alone)."""
    config = tiny_config("dfedavgm", momentum=0.5)
    _, want = run(config, traced=False)
    config["engine"] = {"cuda_graphs": True}
    runner, got = run(config, traced=False)
    assert runner.trainer.phase_graphs is not None and runner.trainer.phase_graphs.replays == 0
    assert_same_bits(got, want)
    config["engine"] = {"cuda_graphs": "auto"}
    assert Runner(load_config(config)).trainer.phase_graphs is None
    config["engine"] = {"cuda_graphs": "blocks"}  # the oracle's blocks alone, anywhere
    blocks = Runner(load_config(config))
    assert blocks.trainer.phase_graphs is None and blocks.exp.oracle.cuda_graphs is True


def test_a_phase_that_reads_the_host_runs_eagerly_and_says_why(monkeypatch):
    """A step declared graphable that reads a tensor's value on the host (a divergence check):
    the recording fails, the reason is logged once, the phase runs eagerly, the same numbers."""
    said = []
    monkeypatch.setattr("gossipfl.engine.compiled.log.warning",
                        lambda message, *args: said.append(message % args))
    config = tiny_config("dfedavg")
    _, want = run(config, traced=False)
    runner = Runner(load_config(config))
    real = runner.trainer.local_step

    def checking(ctx, work, batch):
        loss = real(ctx, work, batch)
        if not bool(loss.isfinite().all()):
            raise FloatingPointError("diverged")
        return loss

    checking.graphable = True
    runner.trainer.local_step = checking
    graphs = runner.trainer.phase_graphs = PhaseGraphs(runner.trainer, capture=TracedGraph)
    with torch.no_grad():
        for t in range(3):
            runner.run_round(t)
    assert_same_bits(dict(runner.state.items()), want)
    assert graphs.replays == 0 and len(said) == 1 and "without a CUDA graph" in said[0]


def test_heavy_ball_replayed_on_least_squares_is_its_equations():
    """DFedAvgM on least squares, full batch, the phases replayed from their recording,
    against a float64 NumPy re-derivation: for every client, K steps of
    d = ∇F_i(y) + wd·y, v ← μ v − η_t d, y ← y + v from y = x_i, v = 0 (η_t = η γ^t), then
    x ← W Y."""
    rng = np.random.default_rng(4)
    m, d, K, T = 5, 3, 3, 4
    eta, gamma, mu, wd = 0.05, 0.9, 0.5, 0.01
    A = [rng.standard_normal((4 + i % 3, d)) for i in range(m)]
    b = [rng.standard_normal(len(a)) for a in A]
    W = np.full((m, m), 0.1) + np.eye(m) * 0.5
    bed = least_squares(A, b, W, steps=K, lr=eta, lr_decay=gamma, weight_decay=wd,
                        momentum=mu)
    graphs = bed.trainer.phase_graphs = PhaseGraphs(bed.trainer, capture=TracedGraph)
    algorithm = get_algorithm("dfedavgm")
    algo = algorithm(algorithm.Params(momentum=mu), bed.env, bed.fed)
    x0 = rng.standard_normal((m, d))
    state = algo.init(torch.as_tensor(x0, dtype=torch.float32))
    X = x0.copy()
    for t in range(T):
        run_round(bed, algo, state, t)
        Y = X.copy()
        for i in range(m):
            v = np.zeros(d)
            for _ in range(K):
                g = 2.0 / len(b[i]) * A[i].T @ (A[i] @ Y[i] - b[i]) + wd * Y[i]
                v = mu * v - eta * gamma**t * g
                Y[i] = Y[i] + v
        X = W @ Y
    assert graphs.replays == T
    assert_close(state["x"].numpy(), X)


def test_dpsgd_replayed_on_least_squares_is_its_equations():
    """D-PSGD (Lian et al.) on least squares, full batch, its own update replayed from the
    phase's recording (it writes the step into the Work's scratch, which the graph copies
    back), against a float64 NumPy re-derivation:
    X^{t+1} = W X^t − η_t (∇F(X^t) + wd·X^t), η_t = η γ^t."""
    rng = np.random.default_rng(5)
    m, d, T = 5, 3, 4
    eta, gamma, wd = 0.05, 0.9, 0.01
    A = [rng.standard_normal((4 + i % 3, d)) for i in range(m)]
    b = [rng.standard_normal(len(a)) for a in A]
    W = np.full((m, m), 0.1) + np.eye(m) * 0.5
    bed = least_squares(A, b, W, steps=1, lr=eta, lr_decay=gamma, weight_decay=wd)
    graphs = bed.trainer.phase_graphs = PhaseGraphs(bed.trainer, capture=TracedGraph)
    algorithm = get_algorithm("dpsgd")
    algo = algorithm(algorithm.Params(), bed.env, bed.fed)
    x0 = rng.standard_normal((m, d))
    state = algo.init(torch.as_tensor(x0, dtype=torch.float32))
    X = x0.copy()
    for t in range(T):
        run_round(bed, algo, state, t)
        G = np.stack([2.0 / len(b[i]) * A[i].T @ (A[i] @ X[i] - b[i]) + wd * X[i]
                      for i in range(m)])
        X = W @ X - eta * gamma**t * G
    assert graphs.replays == T
    assert_close(state["x"].numpy(), X)


@pytest.mark.parametrize(("algorithm", "params"), [
    ("dpsgd", {}), ("dsgt", {"form": "cta"}), ("sgp", {}), ("fedsagd", {}), ("fedcm", {}),
    ("fedanag", {}), ("mimelite", {}), ("fedlnag", {"form": "nesterov"}), ("fedrod", {})])
@pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")
def test_own_updates_and_terms_declared_pure_are_replayed(algorithm, params):
    """The seed papers' baselines with an update or terms of their own (D-PSGD, gradient
    tracking, push-sum, FedSAGD and its global-momentum baselines, FedLNAG's Nesterov form,
    FedRoD's two heads): every phase recorded once and replayed every round after, the
    eager bits (what they write into the Work's scratch is copied back)."""
    config = tiny_config(algorithm, momentum=0.5, weight_decay=5e-4)
    config["algorithm"].update(params)
    _, want = run(config, traced=False)
    runner, got = run(config, traced=True)
    assert_same_bits(got, want)
    graphs = graphs_of(runner)
    phases = len(runner.schedule.algorithm.phases())
    assert sum(g.captured for g in graphs._graphs.values()) == phases
    assert graphs.replays == phases * config["train"]["rounds"]


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def on_cuda(config: dict, graphs: bool, precision: str = "fp32") -> dict:
    return {**config, "device": "cuda", "engine": {"cuda_graphs": graphs,
                                                   "precision": precision}}


@cuda
@pytest.mark.parametrize("algorithm", ["dfedavgm", "dfedsam"])
def test_a_phase_replayed_from_a_cuda_graph_gives_the_eager_bits(algorithm):
    """The mlp on a GPU, equal clients, η decayed every round: each phase captured once and
    replayed every round after; y − η d with η a tensor is the eager step's fused
    multiply-add, so the replayed phases give the eager bits."""
    config = tiny_config(algorithm, momentum=0.5, weight_decay=5e-4)
    _, want = run(on_cuda(config, False), traced=False)
    runner, got = run(on_cuda(config, True), traced=False)
    assert graphs_of(runner).replays == 3
    assert_same_bits(got, want)


@cuda
@pytest.mark.parametrize("algorithm", ["dpsgd", "fedsagd", "ragged"])
@pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")
def test_own_steps_and_ragged_phases_replayed_on_cuda_give_the_eager_bits(algorithm):
    """On a GPU, the mlp: an own update (D-PSGD's step kept in the Work's scratch, copied
    back from the graph), a global-momentum term (FedSAGD), and a ragged phase (clients of
    unequal data, whole epochs: the prefixes recorded): the eager bits."""
    config = ragged_config("dfedavgm") if algorithm == "ragged" else \
        tiny_config(algorithm, momentum=0.5, weight_decay=5e-4)
    if algorithm == "fedsagd":
        config["algorithm"]["participation"] = 1.0
    _, want = run(on_cuda(config, False), traced=False)
    runner, got = run(on_cuda(config, True), traced=False)
    assert graphs_of(runner).replays >= 2
    assert_same_bits(got, want)


@cuda
def test_an_lstm_phase_on_cuda_replays_or_runs_step_by_step():
    """The LSTM on a GPU (cuDNN's recurrent kernels): its phase is captured and replayed, or
    its capture fails and it runs step by step with the reason logged; either way the
    numbers are the eager ones to float32 rounding (cuDNN may choose another algorithm under
    capture)."""
    config = built_in_model_config("lstm")
    _, want = run(on_cuda(config, False), traced=False)
    runner, got = run(on_cuda(config, True), traced=False)
    graphs = graphs_of(runner)
    failures = [reason for g in graphs._graphs.values() for reason in g.failures]
    assert graphs.replays == 2 or failures
    for key, value in want.items():
        torch.testing.assert_close(got[key], value, rtol=1e-4, atol=1e-5)


@cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_an_augmented_cnn_phase_replayed_on_cuda_stays_with_the_eager_one(precision):
    """The cnn: under capture cuDNN may choose other convolution algorithms than eagerly
    (another summation order), so the replayed phases equal the eager ones to rounding, which
    two rounds of a small learning rate keep small; bf16 autocast is captured with the phase."""
    config = tiny_config("dfedavgm", model="cnn", momentum=0.5, lr=0.005)
    config["data"]["augment"] = True
    _, want = run(on_cuda(config, False, precision), traced=False)
    runner, got = run(on_cuda(config, True, precision), traced=False)
    assert graphs_of(runner).replays == 3
    tolerance = 1e-3 if precision == "fp32" else 5e-2
    for key, value in want.items():
        difference = (got[key] - value).abs().max() / value.abs().max()
        assert difference < tolerance, key


def test_a_phase_rebuilt_with_the_same_terms_shares_its_recording():
    """An algorithm builds its phases afresh every round: the same code and coefficients
    give the same fingerprint (one recording), another coefficient another one; a closure
    over a tensor is told apart by identity."""
    from gossipfl.algorithms.terms import prox
    from gossipfl.schedules.phase_graph import fingerprint

    def phase(coef):
        return Phase(direction=sgd(prox(coef)), momentum=0.5)

    assert fingerprint(phase(0.1)) == fingerprint(phase(0.1))
    assert fingerprint(phase(0.1)) != fingerprint(phase(0.2))
    a, b = torch.zeros(2), torch.zeros(2)

    def over(t):
        return lambda ctx, work, d: d + t

    assert fingerprint(over(a)) == fingerprint(over(a))
    assert fingerprint(over(a)) != fingerprint(over(b))


@pytest.mark.parametrize("setting", [{"engine": {"block_clients": 2}},
                                     {"topology": {"name": "ring", "order": "sequential"}}],
                         ids=["block-major", "sequential"])
def test_block_major_and_sequential_rounds_replay_the_eager_bits(setting):
    """Blocks of clients (each block's phase a replay of one recording) and the sequential
    order (each wave's clients at work: their ids, anchors and minibatches are inputs)."""
    config = tiny_config("dfedavgm", momentum=0.5, weight_decay=5e-4)
    config.update(setting)
    _, want = run(config, traced=False)
    runner, got = run(config, traced=True)
    assert graphs_of(runner).replays > 0
    assert_same_bits(got, want)
