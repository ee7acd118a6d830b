"""Algorithms on their own (FedJAX style, gossipfl.testing): each algorithm is built from its
Params dataclass on a least-squares ClientEnv and Federation, its rounds are called directly
(begin_round → local phases → end_round, full batch), and its whole state is compared after
every round with the float64 NumPy re-derivations of the end-to-end tests. The schedules
(Synchronous, Sequential) run directly on the same pieces."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipfl.algorithms import get_algorithm
from gossipfl.algorithms.centralized.fedavg import FedAvg, ServerParams
from gossipfl.algorithms.centralized.fedsagd import FedSAGD, FedSAGDParams
from gossipfl.algorithms.centralized.scaffold import Scaffold
from gossipfl.algorithms.decentralized.dfedavg import DFedAvg, GossipParams
from gossipfl.algorithms.decentralized.dfedavgm import DFedAvgM, MomentumParams
from gossipfl.algorithms.decentralized.dfedcata import CataParams, DFedCata
from gossipfl.algorithms.decentralized.dfedsam import DFedSAM, DFedSAMMGS, MGSParams, SAMParams
from gossipfl.algorithms.decentralized.dpsgd import DPSGD, DPSGDParams
from gossipfl.algorithms.decentralized.oledfl import OledFL, OledParams
from gossipfl.algorithms.personalized.dfedmdc import (
    DFedMDC,
    DFedMDCParams,
    DFedSMDC,
    DFedSMDCParams,
)
from gossipfl.schedules.sequential import Sequential, one_by_one
from gossipfl.schedules.synchronous import Synchronous
from gossipfl.testing import least_squares, run_round
from gossipfl.topology import build_topology
from gossipfl.topology.waves import sweep_waves
from tests import algorithms_fedsagd_cases as sagd
from tests.algorithms_core_cases import dfedavg_reference, dpsgd_reference
from tests.algorithms_papers_cases import decentralized_states, server_states
from tests.lsq import Problem, assert_close, random_doubly_stochastic
from tests.personalized_cases import dfedmdc_reference
from tests.sequential_cases import CASES as SEQUENTIAL_CASES
from tests.sequential_cases import literal_loop, round_matrix, row_stochastic
from tests.two_layer import TwoLayer

LR, DECAY, SEED = 0.05, 0.9, 3  # the references' learning rate, decay and participation seed
ROUNDS, STEPS, WD = 3, 3, 1e-2


def stack(x: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.float32)


def assert_state(state: dict, expected: dict, **tolerance) -> None:
    for key, value in expected.items():
        assert_close(state[key], value, **tolerance)


# -- the DFedAvg family ------------------------------------------------------------------------
def family(p: Problem, W, rounds: int) -> dict[str, tuple]:
    """name: (the algorithm, the re-derived state after ``rounds`` rounds)."""

    def papers(**kwargs):
        return decentralized_states(p, W, rounds, STEPS, wd=WD, **kwargs)

    ole = papers(rho=0.2, ole_beta=0.6)
    cata = papers(cata_beta=0.5, lam_prox=0.4)
    cata_own = papers(cata_beta=0.5, lam_prox=0.4, own_local=True)
    return {
        "dfedavg": ((DFedAvg, GossipParams(gossip_steps=2)),
                    {"x": dfedavg_reference(p, W, rounds, STEPS, LR, DECAY, WD, gossip_steps=2)}),
        "dfedavgm": ((DFedAvgM, MomentumParams(momentum=0.7)),
                     {"x": dfedavg_reference(p, W, rounds, STEPS, LR, DECAY, WD, momentum=0.7)}),
        "dfedsam": ((DFedSAM, SAMParams(rho=0.2)), {"x": papers(rho=0.2)["x"]}),
        "dfedsam_mgs": ((DFedSAMMGS, MGSParams(rho=0.1, gossip_steps=3)),
                        {"x": papers(rho=0.1, q=3)["x"]}),
        "oledfl": ((OledFL, OledParams(beta=0.6, lam=0.2)),
                   {"x": ole["x"], "last_local": ole["last_local"]}),
        "dfedcata": ((DFedCata, CataParams(beta=0.5, lam=0.4)),
                     {"x": cata["x"], "reference": cata["prev_mixed"]}),
        "dfedcata_own_local": ((DFedCata, CataParams(beta=0.5, lam=0.4,
                                                     extrapolation_ref="own_local")),
                               {"x": cata_own["x"], "reference": cata_own["last_local"]}),
        "dpsgd": ((DPSGD, DPSGDParams()), {"x": dpsgd_reference(p, W, rounds, LR, DECAY, WD)}),
    }


@pytest.mark.parametrize("name", sorted(family(Problem(clients=2), np.eye(2), 0)))
def test_decentralized_round_by_round(name):
    p = Problem(clients=5, dim=4, seed=2)
    W = random_doubly_stochastic(5)
    bed = least_squares(p.A, p.b, W, steps=STEPS, lr=LR, lr_decay=DECAY, weight_decay=WD)
    (cls, params), _ = family(p, W, 0)[name]
    algo = cls(params, bed.env, bed.fed)
    state = algo.init(stack(p.x0))
    for t in range(ROUNDS):
        work = run_round(bed, algo, state, t)
        expected = family(p, W, t + 1)[name][1]
        assert_state(state, expected)
    assert np.abs(expected["x"] - p.x0).max() > 0.1  # the models moved
    steps = 1 if name == "dpsgd" else STEPS
    assert work.steps.flatten().tolist() == [steps] * p.M


# -- server algorithms -------------------------------------------------------------------------
SERVER = {  # name: (class, params, server_states keywords)
    "fedavg": (FedAvg, ServerParams(participation=0.6, global_lr=0.8), {"global_lr": 0.8}),
    "fedsam": (get_algorithm("fedsam"), get_algorithm("fedsam").Params(participation=0.6,
                                                                      rho=0.2), {"rho": 0.2}),
    "fedprox": (get_algorithm("fedprox"), get_algorithm("fedprox").Params(participation=0.6,
                                                                         mu=0.5), {"mu": 0.5}),
    "scaffold": (Scaffold, ServerParams(participation=0.6), {"scaffold": True}),
}


@pytest.mark.parametrize("name", sorted(SERVER))
def test_server_round_by_round(name):
    cls, params, kwargs = SERVER[name]
    p = Problem(clients=5, dim=3, seed=4)
    bed = least_squares(p.A, p.b, steps=STEPS, lr=LR, lr_decay=DECAY, weight_decay=1e-3,
                        seed=SEED)
    algo = cls(params, bed.env, bed.fed)
    state = algo.init(stack(np.repeat(p.x0[:1], p.M, axis=0)))
    for t in range(ROUNDS):
        work = run_round(bed, algo, state, t)
        expected = server_states(p, t + 1, STEPS, 0.6, wd=1e-3, **kwargs)
        if name != "scaffold":  # the others have no control variates
            expected = {"server": expected["server"]}
        assert_state(state, expected)
        assert len(work) == 3  # 60 % of 5 clients sampled
    assert np.abs(expected["server"] - p.x0[0]).max() > 0.1
    if name == "scaffold":  # the control variates are not trivially zero
        assert np.abs(expected["c_clients"]).max() > 1e-2


@pytest.mark.parametrize("participation", [0.6, 1.0])
@pytest.mark.parametrize("params", [{}, {"beta": 0.5, "lam": 0.3, "mu": 0.2, "global_lr": 0.8}])
def test_fedsagd_server_and_momentum(participation, params):
    p = Problem(clients=sagd.M, dim=sagd.D, seed=4)
    bed = least_squares(p.A, p.b, steps=sagd.STEPS, lr=LR, lr_decay=DECAY, seed=SEED)
    algo = FedSAGD(FedSAGDParams(participation=participation, **params), bed.env, bed.fed)
    state = algo.init(stack(np.repeat(p.x0[:1], p.M, axis=0)))
    for t in range(sagd.ROUNDS):
        run_round(bed, algo, state, t)
    expected = sagd.fedsagd_states(p, participation, **params)
    assert_state(state, expected)
    assert np.abs(expected["momentum"]).max() > 1e-2


@pytest.mark.parametrize("name, params", sagd.CASES)
def test_fedsagd_baselines(name, params):
    p = Problem(clients=sagd.M, dim=sagd.D, seed=4)
    bed = least_squares(p.A, p.b, steps=sagd.STEPS, lr=LR, lr_decay=DECAY,
                        weight_decay=sagd.WD, seed=SEED)
    cls = get_algorithm(name)
    algo = cls(cls.Params(participation=0.6, **params), bed.env, bed.fed)
    state = algo.init(stack(np.repeat(p.x0[:1], p.M, axis=0)))
    for t in range(sagd.ROUNDS):
        run_round(bed, algo, state, t)
    expected = sagd.BASELINES[name][0](p, 0.6, **params)
    assert_close(algo.server_model(state), expected, rtol=1e-4, atol=1e-5)


# -- personalized: DFedMDC / DFedSMDC on a body and a personal head ----------------------------
@pytest.mark.parametrize("sam", [None, "body", "head", "both"])
def test_dfedmdc_round_by_round(sam):
    p = TwoLayer(clients=4, dim=3, hidden=2)
    W = random_doubly_stochastic(4, seed=2)
    bed = least_squares(p.A, p.b, W, steps=3, lr=LR, lr_decay=DECAY, weight_decay=0.01,
                        model=p.factory(None, 1))
    assert bed.env.groups.parameter_names("personal") == ("head.weight",)
    if sam is None:
        algo = DFedMDC(DFedMDCParams(head_lr=0.03, head_epochs=2, momentum=0.5), bed.env,
                       bed.fed)
    else:
        algo = DFedSMDC(DFedSMDCParams(head_lr=0.03, head_epochs=2, momentum=0.5, sam=sam,
                                       rho=0.2), bed.env, bed.fed)
    rho_head = 0.2 if sam in ("head", "both") else 0.0
    rho_body = 0.2 if sam in ("body", "both") else 0.0
    state = algo.init(stack(p.x0))
    for t in range(ROUNDS):
        work = run_round(bed, algo, state, t)
        expected = dfedmdc_reference(p, W, t + 1, head_steps=2, head_lr=0.03, steps=3, lr=LR,
                                     momentum=0.5, wd=0.01, rho_head=rho_head,
                                     rho_body=rho_body)
        assert_close(state["x"], expected)
    assert np.abs(expected[:, p.personal] - expected[0, p.personal]).max() > 1e-3  # heads differ
    assert work.steps.flatten().tolist() == [2 + 3] * p.M  # head, then body steps


# -- schedules on their own --------------------------------------------------------------------
def test_synchronous_schedule_is_the_direct_round():
    p = Problem(clients=5, dim=4, seed=2)
    W = random_doubly_stochastic(5)
    bed = least_squares(p.A, p.b, W, steps=STEPS, lr=LR, lr_decay=DECAY, weight_decay=WD)
    algo = OledFL(OledParams(beta=0.6, lam=0.2), bed.env, bed.fed)
    order = Synchronous(algo, bed.trainer, bed.fed)
    state = algo.init(stack(p.x0))
    for t in range(ROUNDS):
        outcome = order.run_round(bed.context(t), state)
        assert outcome.loss_count == STEPS * p.M
    expected = decentralized_states(p, W, ROUNDS, STEPS, wd=WD, rho=0.2, ole_beta=0.6)
    assert_state(state, {"x": expected["x"], "last_local": expected["last_local"]})


def one_client_per_wave(W):
    return one_by_one(len(W))


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("graph, waves", [("row_stochastic", None),
                                          ("authors_random", None),
                                          ("authors_random", one_client_per_wave)])
@pytest.mark.parametrize("case", sorted(SEQUENTIAL_CASES))
def test_sequential_schedule_is_the_literal_client_loop(case, graph, waves):
    p = Problem(clients=7, dim=3, seed=5)
    W = row_stochastic(p.M) if graph == "row_stochastic" else build_topology(
        "authors_random", p.M, "uniform", seed=SEED, k=4)  # time-varying
    config, kwargs = SEQUENTIAL_CASES[case]
    steps = 1 if case.startswith("dpsgd") else 3
    bed = least_squares(p.A, p.b, W, steps=steps, lr=LR, lr_decay=DECAY, weight_decay=WD)
    cls = get_algorithm(config["name"])
    algo = cls(cls.Params(**{k: v for k, v in config.items() if k != "name"}), bed.env,
               bed.fed)
    order = Sequential(algo, bed.trainer, bed.fed, waves=waves)
    state = algo.init(stack(p.x0))
    for t in range(ROUNDS):
        outcome = order.run_round(bed.context(t), state)
        assert outcome.extra["waves"] == len((waves or sweep_waves)(round_matrix(p, graph, t)))
    if graph == "authors_random" and waves is None:
        assert outcome.extra["waves"] < p.M  # waves of several clients
    expected = literal_loop(p, graph, ROUNDS, steps, wd=WD, **kwargs)
    assert_close(state["x"], expected)
