"""Which features combine (gossipfl.assembly.compat): every pair of features walked through the one
module, the refusals it derives from the declarations, and ``gossipfl run --dry-run`` giving
the sentence the run gives."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch
import yaml

from gossipfl.algorithms import get_algorithm
from gossipfl.assembly.compat import features, refusals
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.errors import GossipflError
from gossipfl.systems import systems_model
from gossipfl.topology import build_topology
from tests.helpers import gossipfl

#: the settings a cross-product's shared config gives every algorithm (train.local_steps, the
#: graph) are warned as ignored by those that do not read them (gossipfl.assembly.loading.
#: ignored_settings, whose warnings are tested in test_reliability_*); pytest.warns still sees them
pytestmark = pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")

M = 8
BASE = {"data": {"dataset": "synthetic", "clients": M,
                 "options": {"dim": 4, "train_size": 80, "test_size": 16, "num_classes": 2}},
        "model": {"name": "logistic"}, "topology": {"name": "k_regular", "k": 4},
        "algorithm": {"name": "dfedavg"}, "train": {"rounds": 1, "local_steps": 1}}

#: name -> (the slots of the config it sets: two features of one slot do not combine into one
#: config, the fragment). Each runs alone (checked below).
FEATURES = {
    "centralized": ({"algorithm"}, {"algorithm": {"name": "fedavg"}}),
    "push_sum": ({"algorithm"}, {"algorithm": {"name": "sgp"}}),
    "own_compression": ({"algorithm"}, {"algorithm": {"name": "choco"}}),
    "label_counts": ({"algorithm"}, {"algorithm": {"name": "fedrod"}}),
    "sequential": ({"order"}, {"topology": {"order": "sequential"}}),
    "asynchronous": ({"order", "algorithm"}, {"topology": {"order": "asynchronous"},
                                              "algorithm": {"name": "adpsgd"}}),
    "compression": ({"compression"}, {"topology": {"compression": {"compressor": "top_k",
                                                                   "k": 2}}}),
    "robust": ({"robust"}, {"topology": {"robust": {"rule": "median"}}}),
    "byzantine": ({"byzantine"}, {"byzantine": {"clients": [1], "attack": "sign_flip"}}),
    "time_varying": ({"graph"}, {"topology": {"name": "one_peer_exponential", "k": None}}),
    "systems": ({"systems"}, {"systems": {"compute": {"seconds_per_step": 0.1}}}),
    "failures": ({"systems"}, {"systems": {"availability": {"offline": 0.1}}}),
    "privacy": ({"privacy"}, {"privacy": {"clip": 1.0, "noise_multiplier": 1.0}}),
    "distributed": ({"backend"}, {}),  # two processes
}

#: every refused pair and the start of its sentence (the key it names and its words); every
#: other pair runs
REFUSED = {
    ("centralized", "sequential"): "topology.order: sequential is not defined for algorithm fedavg",
    ("centralized", "compression"): "topology.compression: algorithm fedavg is centralized",
    ("centralized", "robust"): "topology.robust: algorithm fedavg is centralized",
    ("centralized", "byzantine"): "byzantine: algorithm fedavg is centralized",
    ("push_sum", "sequential"): "topology.order: sequential is not defined for algorithm sgp",
    ("push_sum", "compression"): "topology.compression: algorithm sgp gossips in a form CHOCO",
    ("push_sum", "robust"): "topology.robust: algorithm sgp gossips with push-sum weights",
    ("push_sum", "byzantine"): "byzantine: algorithm sgp gossips with push-sum weights",
    ("own_compression", "sequential"): "topology.order: sequential is not defined for "
                                       "algorithm choco",
    ("own_compression", "compression"): "topology.compression: algorithm choco compresses its "
                                        "own messages",
    ("own_compression", "robust"): "topology.robust: robust gossip is not defined for "
                                   "compressed gossip (choco",
    ("own_compression", "byzantine"): "byzantine: robust gossip is not defined for compressed "
                                      "gossip (choco",
    ("own_compression", "time_varying"): "topology.name: algorithm choco keeps each client's "
                                         "public copy at its neighbours, which needs a fixed",
    ("own_compression", "failures"): "systems.availability: not implemented with compressed",
    ("label_counts", "sequential"): "topology.order: sequential is not defined for algorithm "
                                    "fedrod",
    ("label_counts", "compression"): "topology.compression: algorithm fedrod is centralized",
    ("label_counts", "robust"): "topology.robust: algorithm fedrod is centralized",
    ("label_counts", "byzantine"): "byzantine: algorithm fedrod is centralized",
    ("label_counts", "privacy"): "privacy: algorithm fedrod reads each client's label counts",
    ("sequential", "compression"): "topology.compression: needs topology.order: synchronous",
    ("sequential", "robust"): "topology.robust: needs topology.order: synchronous",
    ("sequential", "byzantine"): "byzantine: needs topology.order: synchronous",
    ("sequential", "distributed"): "topology.order: sequential sweeps the clients",
    ("asynchronous", "compression"): "topology.compression: algorithm adpsgd gossips in a form",
    ("asynchronous", "robust"): "topology.robust: algorithm adpsgd gossips with push-sum",
    ("asynchronous", "byzantine"): "byzantine: algorithm adpsgd gossips with push-sum",
    ("asynchronous", "time_varying"): "topology.name: algorithm adpsgd averages pairs",
    ("asynchronous", "failures"): "systems.availability: not implemented for topology.order: "
                                  "asynchronous",
    ("asynchronous", "distributed"): "topology.order: asynchronous runs one global sequence",
    ("compression", "robust"): "topology.robust: robust gossip is not defined for compressed "
                               "gossip (dfedavg",
    ("compression", "byzantine"): "byzantine: robust gossip is not defined for compressed",
    ("compression", "time_varying"): "topology.compression: CHOCO-Gossip keeps each client's "
                                     "public copy",
    ("compression", "failures"): "systems.availability: not implemented with compressed gossip",
    ("robust", "distributed"): "topology.robust: not implemented under engine.backend: "
                               "distributed",
    ("byzantine", "distributed"): "byzantine: not implemented under engine.backend: distributed",
    ("systems", "distributed"): "systems: not implemented under engine.backend: distributed",
    ("failures", "distributed"): "systems: not implemented under engine.backend: distributed",
    ("privacy", "distributed"): "privacy: not implemented under engine.backend: distributed",
}


def merged(a: dict, b: dict) -> dict:
    out = dict(a)
    for key, value in b.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both else value
    return out


def config_of(*fragments: dict) -> dict:
    """BASE with ``fragments`` merged in (a topology parameter set to None: left out)."""
    raw = BASE
    for fragment in fragments:
        raw = merged(raw, fragment)
    raw = merged(raw, {})
    raw["topology"] = {k: v for k, v in raw["topology"].items() if v is not None}
    return raw


def verdict(names) -> list[str]:
    """Every refusal gossipfl.assembly.compat derives for the features ``names`` together."""
    config = load_config(config_of(*(FEATURES[name][1] for name in names)))
    algorithm = get_algorithm(config.algorithm.name)(config.algorithm.params, None, None)
    topo = config.topology
    topology = None if algorithm.centralized else build_topology(
        topo.name, M, mixing=topo.mixing, seed=0, **topo.parameters())
    world = 2 if "distributed" in names else None
    return list(refusals(features(config, algorithm, topology, world, systems_model(config, M))))


PAIRS = [(a, b) for a, b in itertools.combinations(FEATURES, 2)
         if not FEATURES[a][1] or not FEATURES[b][1] or not FEATURES[a][0] & FEATURES[b][0]]


@pytest.mark.parametrize("name", FEATURES)
def test_every_feature_runs_alone(name):
    assert verdict([name]) == []


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_every_pair_of_features_walks_through_the_one_module():
    got = {}
    for pair in PAIRS:
        reasons = verdict(pair)
        for reason in reasons:  # each one sentence naming a key
            assert reason.count(". ") == 0 and reason.endswith("."), reason
            assert reason.split(":")[0] in ("topology.order", "topology.compression",
                                            "topology.robust", "byzantine", "topology.name",
                                            "systems", "systems.availability",
                                            "systems.compute", "privacy")
        if reasons:
            got[pair] = reasons[0]
    assert set(got) == set(REFUSED), (sorted(set(got) - set(REFUSED)),
                                      sorted(set(REFUSED) - set(got)))
    for pair, start in REFUSED.items():
        assert got[pair].startswith(start), (pair, got[pair])


# -- the dry run checks what the run checks ---------------------------------------------------
DRY = [
    ({"algorithm": {"name": "choco"}, "topology": {"robust": {"rule": "median"}}},
     "topology.robust: robust gossip is not defined for compressed gossip (choco"),
    ({"topology": {"name": "ring", "k": None}, "byzantine": {"clients": [1, 4], "attack": "sign_flip"}},
     "the honest clients of topology ring are not connected"),
    ({"topology": {"name": "ring", "k": None, "robust": {"rule": "trimmed_mean", "b": 2}}},
     "topology.robust.b: rule trimmed_mean with b = 2 needs at least 2b = 4 neighbours"),
    ({"topology": {"compression": {"compressor": "sign"}, "order": "sequential"}},
     "topology.compression: needs topology.order: synchronous"),
]


@pytest.mark.parametrize(("sections", "sentence"), DRY, ids=[s[:40] for _, s in DRY])
def test_the_dry_run_refuses_what_the_run_refuses_in_the_same_sentence(tmp_path, capsys,
                                                                       sections, sentence):
    config = config_of(sections)
    with pytest.raises(GossipflError) as info:
        Runner(load_config(config))
    assert sentence in str(info.value)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    code, _, err = gossipfl(capsys, "run", str(path), "--dry-run")
    errors = [line for line in err.splitlines() if not line.startswith("warning: ")]
    assert code == 2 and errors == [f"error: {info.value}"], err  # warnings may precede it


def test_the_dry_run_of_a_config_that_runs_prints_its_plan(tmp_path, capsys):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config_of({"byzantine": {"clients": [1], "attack": "sign_flip"},
                                              "topology": {"robust": {"rule": "median"}}})))
    from gossipfl import cli

    assert cli.main(["run", str(path), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("memory plan: dfedavg")


# -- the refusals worded here from the declarations of one piece against another -------------
def column_stochastic():
    """A column-stochastic-only W on M clients (a push-sum matrix)."""
    W = np.zeros((M, M))
    for i in range(M):
        W[i, i] = W[(i + 1) % M, i] = 0.5
    W[:, 0] = 0.0
    W[[0, 1, 2], 0] = 0.3, 0.3, 0.4
    return W


def batchnorm_model(shape, out):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(shape[0], 4),
                               torch.nn.BatchNorm1d(4), torch.nn.Linear(4, out))


#: an algorithm's orders (order_conflict) against the order, its mixing and static_graph
#: against the topology, a schedule's by_completion_time against the speeds, the privacy
#: section against the model: each the sentence the run gave before the wording moved here
MOVED = [
    pytest.param(lambda: {"algorithm": {"name": "dfedavg", "gossip_steps": 2}, "topology": {"order": "sequential"}},
                 "topology.order: sequential mixes each client's neighbours once, in place, so it needs algorithm.gossip_steps: 1, got 2.",
                 id="gossip_steps_sequential"),
    pytest.param(lambda: {"algorithm": {"name": "dpsgd", "variant": "lian"}, "topology": {"order": "sequential"}},
                 "topology.order: sequential needs a round that mixes and then trains, but dpsgd's variant lian takes its gradient at the pre-gossip point, in parallel with the gossip (variant: local_epoch is defined).",
                 id="lian_sequential"),
    pytest.param(lambda: {"algorithm": {"name": "adpsgd"}},
                 'topology.order: synchronous is not defined for adpsgd, whose workers compute and average asynchronously; set topology.order: asynchronous.',
                 id="adpsgd_synchronous"),
    pytest.param(lambda: {"algorithm": {"name": "adpsgd"}, "topology": {"order": "asynchronous", "name": "random_k", "k": 2, "mixing": "uniform"}},
                 "topology.name: algorithm adpsgd averages pairs of neighbours, which needs an undirected graph, but the random_k topology's uniform matrix has a directed pattern.",
                 id="adpsgd_directed"),
    pytest.param(lambda: {"algorithm": {"name": "sgp"}, "topology": {"name": "epidemic", "s": 2, "k": None}},
                 "topology.name: algorithm sgp is push-sum and needs every column of W to sum to 1, but the epidemic topology's uniform matrix is row-stochastic only; use a doubly or column-stochastic one (e.g. one_peer_exponential, base_k, or custom with topology.mixing: custom).",
                 id="sgp_row"),
    pytest.param(lambda: {"topology": {"name": "custom", "mixing": "custom", "k": None, "matrix": column_stochastic()}},
                 "topology.name: algorithm dfedavg mixes x_i ← Σ_j w_ij x_j, which needs every row of W to sum to 1, but the custom topology's custom matrix is column-stochastic only (a push-sum matrix, for algorithm sgp).",
                 id="dfedavg_column"),
    pytest.param(lambda: {"algorithm": {"name": "choco"}, "topology": {"name": "one_peer_exponential", "k": None}},
                 "topology.name: algorithm choco keeps each client's public copy at its neighbours, which needs a fixed graph, but the one_peer_exponential topology changes every round; use a static one (ring, k_regular, exponential, ...).",
                 id="choco_time_varying"),
    pytest.param(lambda: {"algorithm": {"name": "adpsgd"}, "topology": {"order": "asynchronous"}, "systems": {"compute": {"seconds_per_step": 0.0}}},
                 "systems.compute: topology.order: asynchronous orders its events by completion time, which needs every client's seconds_per_step > 0.",
                 id="asynchronous_zero_speed"),
    pytest.param(lambda: {"model": {"name": "bn", "factory": batchnorm_model}, "privacy": {"clip": 1.0, "noise_multiplier": 1.0, "delta": 1e-3}},
                 'privacy: model bn has BatchNorm, which mixes the samples of a batch, so per-sample gradients are undefined; use a model without BatchNorm (GroupNorm or none).',
                 id="privacy_batchnorm"),
]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("fragment", "sentence"), MOVED)
def test_the_refusals_of_one_declaration_against_another_are_worded_here(fragment, sentence):
    from gossipfl.assembly import compat

    with pytest.raises(GossipflError) as info:
        Runner(load_config(config_of(fragment())))
    assert str(info.value) == sentence
    templates = (*compat.ORDER_SENTENCES.values(), *compat.MIXING_SENTENCES.values(),
                 compat.SPEED, compat.BATCHNORM)
    patterns = [re.escape(t).replace(r"\{", "{").replace(r"\}", "}") for t in templates]
    patterns = [re.sub(r"\{\w+\}", "(.+?)", p) for p in patterns]
    assert sum(bool(re.fullmatch(p, sentence)) for p in patterns) == 1  # worded in compat


@pytest.mark.parametrize(("key", "fragment"), [
    ("topology.compression", {"topology": {"compression": {"compressor": "sign"}}}),
    ("topology.robust", {"topology": {"robust": {"rule": "median"}}}),
    ("byzantine", FEATURES["byzantine"][1])])
def test_an_algorithm_whose_messages_must_stay_whole_refuses_the_stages(key, fragment):
    """Muffliato's guarantee is for W y with y sent whole: its compressible = False is the
    declaration, and the stages' plain_gossip need words the refusal."""
    with pytest.raises(GossipflError) as info:
        Runner(load_config(config_of({"algorithm": {"name": "muffliato"}}, fragment)))
    assert str(info.value).startswith(f"{key}: algorithm muffliato gossips ")
