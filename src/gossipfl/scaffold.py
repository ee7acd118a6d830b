"""``gossipfl new``: a plugin file and its test, ready to run, for a new piece.

    gossipfl new algorithm NAME [--kind decentralized|centralized|personalized] [--out DIR]
    gossipfl new model NAME [--out DIR]
    gossipfl new dataset NAME [--out DIR]

Each writes ``DIR/NAME.py`` (the piece, registered as docs/design.md "Adding a piece" says)
and ``DIR/test_NAME.py`` (its test: for an algorithm, the equation check against a float64
NumPy re-derivation on least squares, through :mod:`gossipfl.testing`; for a model or a
dataset, what it promises and a tiny run). Both run as written: ``python -m pytest
DIR/test_NAME.py`` passes and ``gossipfl run --plugin DIR/NAME.py`` uses the piece. Nothing
is overwritten; NAME must be a Python identifier that is not one of gossipfl's own names and
not the name of an importable module (the file would shadow it).
"""

from __future__ import annotations

import importlib.util
import keyword
from pathlib import Path
from string import Template

from gossipfl.errors import GossipflError
from gossipfl.io import atomic_write_text, check_writable

KINDS = ("decentralized", "centralized", "personalized")
PIECES = ("algorithm", "model", "dataset")


def class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Piece"


def taken_names(piece: str) -> tuple[str, ...]:
    """gossipfl's own names of that kind of piece."""
    if piece == "algorithm":
        from gossipfl.algorithms import available_algorithms

        return tuple(available_algorithms())
    if piece == "model":
        from gossipfl.models import MODELS

        return tuple(MODELS)
    from gossipfl.data.datasets import DATASETS

    return tuple(DATASETS)


def check_name(piece: str, name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise GossipflError(f"NAME: '{name}' is not a Python identifier (letters, digits and "
                            f"underscores, not starting with a digit); the {piece} is the "
                            f"module {name}.py.")
    if name.startswith("__") and name.endswith("__"):
        raise GossipflError(f"NAME: '{name}' is a name Python reserves ({name}.py would be "
                            f"taken for a package's own file); choose another name.")
    if name.startswith("test_"):
        raise GossipflError(f"NAME: '{name}' starts with 'test_', which pytest would collect "
                            f"as a test file; choose another name.")
    if name in taken_names(piece):
        raise GossipflError(f"NAME: '{name}' is already one of gossipfl's own {piece}s; "
                            f"choose another name.")
    try:
        importable = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        importable = True
    if importable:
        raise GossipflError(f"NAME: '{name}' is the name of an importable module, which "
                            f"{name}.py would shadow; choose another name.")


def new(piece: str, name: str, out: str | Path = ".", kind: str | None = None) -> list[Path]:
    """Write the plugin file and its test into ``out``; returns their paths."""
    if piece not in PIECES:
        raise GossipflError(f"new: unknown piece '{piece}'; choose one of: {', '.join(PIECES)}.")
    if kind is not None and piece != "algorithm":
        raise GossipflError(f"--kind: only an algorithm has a kind, not a {piece}.")
    kind = kind or "decentralized"
    if kind not in KINDS:
        raise GossipflError(f"--kind: unknown kind '{kind}'; choose one of: {', '.join(KINDS)}.")
    check_name(piece, name)
    folder = Path(out)
    files = {folder / f"{name}.py": SOURCES[(piece, kind if piece == "algorithm" else None)],
             folder / f"test_{name}.py": TESTS[(piece, kind if piece == "algorithm" else None)]}
    for path in files:
        if path.exists():
            raise GossipflError(f"--out: '{path}' already exists; nothing was written (choose "
                                f"another NAME or folder).")
    check_writable(folder, "--out")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # what the permission check cannot see (e.g. /proc, as root)
        raise GossipflError(f"--out: cannot create the folder '{folder}' "
                            f"({exc.strerror or exc}); nothing was written.") from None
    values = {"name": name, "Class": class_name(name), "kind": kind}
    for path, template in files.items():
        atomic_write_text(path, Template(template).substitute(values))
    return list(files)


# --------------------------------------------------------------------------------------------
# Templates ($name, $Class; `$$` is a dollar sign)
# --------------------------------------------------------------------------------------------
_RUN_TEST = '''

def test_${name}_runs_in_gossipfl(tmp_path):
    """A tiny run through gossipfl.run with this file as a plugin."""
    result = gossipfl.run({
        "plugins": [str(PLUGIN)],
        "data": {"dataset": $dataset, "clients": 4, "partition": "iid",
                 "options": $options},
        "model": {"name": $model},
        "topology": {"name": "ring"},
        "algorithm": {"name": $algorithm},
        "train": {"rounds": 2, "local_steps": 2, "batch_size": 8, "lr": 0.1},
        "eval": {"every": 1},
    })
    assert [row["round"] for row in result.metrics] == [1, 2]
    assert 0.0 <= result.metrics[-1]["test_acc"] <= 1.0
    assert np.isfinite(result.metrics[-1]["train_loss"])
'''

_SYNTHETIC = '{"dim": 6, "train_size": 120, "test_size": 40, "num_classes": 3}'


def _run_test(dataset: str = '"synthetic"', options: str = _SYNTHETIC,
              model: str = '"logistic"', algorithm: str = '"dfedavg"') -> str:
    return Template(_RUN_TEST).safe_substitute(dataset=dataset, options=options, model=model,
                                               algorithm=algorithm)


_ALGORITHM_TEST_HEAD = '''"""The tests of $name ($name.py): the equation check, least squares with full-batch
gradients on several clients and rounds against a float64 NumPy re-derivation of the module
docstring's equations (gossipfl.testing), and a tiny run through gossipfl.run.

Change the reference below whenever you change the update rule.
"""

from pathlib import Path

import gossipfl
import numpy as np
import torch
from gossipfl.algorithms import get_algorithm
from gossipfl.plugins import load, resolve
from gossipfl.testing import least_squares, run_round

PLUGIN = Path(__file__).with_name("$name.py")
load(resolve([str(PLUGIN)]))  # registers the algorithm, as --plugin does
$Class = get_algorithm("$name")

M, D, ROUNDS, K, LR, DECAY = 4, 3, 3, 2, 0.05, 0.9  # clients, dimension, rounds, local steps


def problem(seed=0):
    """Client i's least squares (A_i, b_i), of n_i = 5 + 2i samples, and X^0 [M, P]."""
    rng = np.random.default_rng(seed)
    A = [rng.normal(size=(5 + 2 * i, D)) for i in range(M)]
    b = [a @ rng.normal(size=D) + 0.1 * rng.normal(size=len(a)) for a in A]
    return A, b


def ring(m):
    """The ring with weights 1/3 (symmetric, doubly stochastic)."""
    W = np.zeros((m, m))
    for i in range(m):
        for j in (i - 1, i, i + 1):
            W[i, j % m] += 1 / 3
    return W


def grad(A, b, x):
    """∇F_i(x) of F_i(x) = (1/n_i) ‖A_i x − b_i‖²."""
    return 2 / len(b) * A.T @ (A @ x - b)


def local(A, b, y, t, grad=grad):
    """K full-batch gradient steps at η_t = η γ^t."""
    y = y.copy()
    for _ in range(K):
        y -= LR * DECAY ** t * grad(A, b, y)
    return y


def assert_close(actual, expected):
    actual = actual.detach().double().cpu().numpy() if torch.is_tensor(actual) else actual
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)
'''

_DECENTRALIZED = '''"""$name: a decentralized algorithm (a gossipfl plugin; `gossipfl new algorithm`).

Round t, every client i in parallel, from y_i^{t,0} = x_i^t (DFedAvg: train, then gossip):

    y_i^{t,k+1} = y_i^{t,k} − η_t (∇F_i(y_i^{t,k}; ξ_i^{t,k}) + wd·y_i^{t,k}),  k = 0..K−1
    x_i^{t+1} = Σ_j (W_t^Q)_ij y_j^{t,K}

Write your paper's equations here, change the hooks below to compute them (docs/design.md,
"The algorithm interface"), and the NumPy reference in test_$name.py to re-derive them.

    gossipfl run --plugin $name.py --set algorithm.name=$name
    python -m pytest test_$name.py
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import Algorithm, Phase, register
from gossipfl.algorithms.base import AT_LEAST_ONE, Hyperparams


@dataclass
class ${Class}Params(Hyperparams):
    """algorithm.<field> in a config; `rules` check the values (gossipfl.validation)."""

    gossip_steps: int = 1  # Q: multiplications by W_t after local training
    rules: ClassVar = {"gossip_steps": AT_LEAST_ONE}


@register
class $Class(Algorithm):
    name = "$name"
    paper = "$name (your paper: authors year, title)"
    Params = ${Class}Params

    def phases(self):
        # K local SGD steps on every parameter (train.local_steps / local_epochs, train.lr);
        # a Phase can set its own steps, lr, group, momentum, rho (SAM) or direction.
        return [Phase("local")]

    def end_round(self, ctx, state, work):
        # work.y [M, P]: the rows as they left local training
        state["x"] = self.fed.gossip(work.y, ctx.round, steps=self.params.gossip_steps)
'''

_DECENTRALIZED_TEST = _ALGORITHM_TEST_HEAD + '''

def reference(A, b, W, X0, Q):
    """The module docstring's equations in float64 NumPy."""
    X = X0.copy()
    for t in range(ROUNDS):
        Y = np.stack([local(A[i], b[i], X[i], t) for i in range(M)])
        X = np.linalg.matrix_power(W, Q) @ Y
    return X


def test_${name}_matches_its_equations():
    A, b = problem()
    W, Q = ring(M), 2
    X0 = np.random.default_rng(1).normal(size=(M, D))
    bed = least_squares(A, b, W, steps=K, lr=LR, lr_decay=DECAY)
    algo = $Class($Class.Params(gossip_steps=Q), bed.env, bed.fed)
    state = algo.init(torch.tensor(X0, dtype=torch.float32))
    for t in range(ROUNDS):
        run_round(bed, algo, state, t)
    assert_close(algo.client_models(state), reference(A, b, W, X0, Q))
''' + _run_test(algorithm='"$name"')

_CENTRALIZED = '''"""$name: a centralized algorithm (a gossipfl plugin; `gossipfl new algorithm`).

Round t (FedAvg): the server samples S_t (round(participation·M) clients) and sends x^t;
each i ∈ S_t runs K local SGD steps from y_i^{t,0} = x^t:

    y_i^{t,k+1} = y_i^{t,k} − η_t (∇F_i(y_i^{t,k}; ξ) + wd·y_i^{t,k}),  k = 0..K−1
    x^{t+1} = x^t + η_g Σ_{i∈S_t} p_i (y_i^{t,K} − x^t),   p_i = n_i / Σ_{j∈S_t} n_j

Write your paper's equations here, change the hooks below to compute them (docs/design.md,
"The algorithm interface"; a server optimizer of your own: `server_optimizer()`), and the
NumPy reference in test_$name.py to re-derive them.

    gossipfl run --plugin $name.py --set algorithm.name=$name
    python -m pytest test_$name.py
"""

from __future__ import annotations

from dataclasses import dataclass

from gossipfl.algorithms import Phase, Work, register
from gossipfl.algorithms.centralized.fedavg import ServerAlgorithm, ServerParams


@dataclass
class ${Class}Params(ServerParams):
    """participation, global_lr (η_g); add your hyperparameters and their `rules`."""


@register
class $Class(ServerAlgorithm):
    name = "$name"
    paper = "$name (your paper: authors year, title)"
    Params = ${Class}Params

    def phases(self):
        return [Phase("local")]  # K local SGD steps (train.local_steps, train.lr)

    def begin_round(self, ctx, state):
        clients = self.fed.sample(ctx.round, self.params.participation)
        return Work(self.fed.broadcast(state["server"], clients), clients)

    def end_round(self, ctx, state, work):
        delta = self.fed.aggregate(work.y - state["server"], work.clients, self.weighting)
        self.server_step(state, delta)  # x⁺ = x + η_g Δ (the server optimizer)
'''

_CENTRALIZED_TEST = _ALGORITHM_TEST_HEAD + '''

def reference(A, b, x0, sampled, participation, global_lr):
    """The module docstring's equations in float64 NumPy (S_t: ``sampled(t)``)."""
    x = x0.copy()
    n = np.array([len(bi) for bi in b], dtype=float)
    for t in range(ROUNDS):
        S = sampled(t, participation)
        p = n[S] / n[S].sum()
        delta = sum(p_i * (local(A[i], b[i], x, t) - x) for p_i, i in zip(p, S))
        x = x + global_lr * delta
    return x


def test_${name}_matches_its_equations():
    A, b = problem()
    x0 = np.random.default_rng(1).normal(size=D)
    bed = least_squares(A, b, None, steps=K, lr=LR, lr_decay=DECAY)
    algo = $Class($Class.Params(participation=0.5, global_lr=0.8), bed.env, bed.fed)
    state = algo.init(torch.tensor(np.tile(x0, (M, 1)), dtype=torch.float32))
    for t in range(ROUNDS):
        run_round(bed, algo, state, t)

    def sampled(t, fraction):  # the clients the federation samples (an input, not the rule)
        return bed.fed.sample(t, fraction).cpu().numpy()

    assert_close(algo.global_model(state), reference(A, b, x0, sampled, 0.5, 0.8))
''' + _run_test(algorithm='"$name"')

_PERSONALIZED = '''"""$name: a personalized decentralized algorithm (a gossipfl plugin; `gossipfl new
algorithm`).

Each model is a shared body u and a personal head v (the model's last Linear, `head`, or
`model.personal: [pattern, ...]`). Round t, every client i, from y_i^{t,0} = x_i^t:

    y_i^{t,k+1} = y_i^{t,k} − η_t (∇F_i(y_i^{t,k}; ξ_i^{t,k}) + wd·y_i^{t,k}),  k = 0..K−1
    u_i^{t+1} = Σ_j (W_t^Q)_ij u_j^{t,K}          (only the body is gossiped)
    v_i^{t+1} = v_i^{t,K}                          (the head stays home)

Measured with the personalized protocol (`personalized_acc`: each client's own model on its
local test split). Write your paper's equations here, change the hooks below (docs/design.md:
phases on groups, e.g. a head phase then a body phase), and the NumPy reference in
test_$name.py to re-derive them.

    gossipfl run --plugin $name.py --set algorithm.name=$name
    python -m pytest test_$name.py
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gossipfl.algorithms import Algorithm, Phase, register
from gossipfl.algorithms.base import AT_LEAST_ONE, Hyperparams


@dataclass
class ${Class}Params(Hyperparams):
    gossip_steps: int = 1  # Q
    rules: ClassVar = {"gossip_steps": AT_LEAST_ONE}


@register
class $Class(Algorithm):
    name = "$name"
    paper = "$name (your paper: authors year, title)"
    Params = ${Class}Params
    evaluations = ("average", "local", "personalized")

    def phases(self):
        # one phase on the whole model; Phase("head", group="personal", ...), then
        # Phase("body", group="shared") trains them one after the other
        return [Phase("local", group="all")]

    def end_round(self, ctx, state, work):
        state["x"] = self.fed.gossip(work.y, ctx.round, steps=self.params.gossip_steps,
                                     group="shared")
'''

_PERSONALIZED_TEST = _ALGORITHM_TEST_HEAD.replace("run_round\n", """run_round
from torch import nn
""", 1) + '''
H = 2  # hidden width: body U [H, D], head v [1, H]; x = [vec U, v] (gossipfl's layout)


def two_layer_grad(A, b, x):
    """∇ of F_i(U, v) = (1/n_i) ‖A_i Uᵀ vᵀ − b_i‖² with respect to x = [vec U, v]."""
    U, v = x[:H * D].reshape(H, D), x[H * D:]
    r = A @ U.T @ v - b
    return np.concatenate([(2 / len(b) * np.outer(v, A.T @ r)).ravel(),
                           2 / len(b) * U @ (A.T @ r)])


def reference(A, b, W, X0, Q):
    """The module docstring's equations in float64 NumPy."""
    X, body = X0.copy(), slice(0, H * D)
    for t in range(ROUNDS):
        Y = np.stack([local(A[i], b[i], X[i], t, grad=two_layer_grad) for i in range(M)])
        X = Y.copy()
        X[:, body] = np.linalg.matrix_power(W, Q) @ Y[:, body]
    return X


def test_${name}_matches_its_equations():
    A, b = problem()
    W, Q = ring(M), 2
    X0 = np.random.default_rng(1).normal(size=(M, H * D + H))
    model = nn.Sequential()
    model.add_module("body", nn.Linear(D, H, bias=False))
    model.add_module("head", nn.Linear(H, 1, bias=False))  # the personal group
    bed = least_squares(A, b, W, steps=K, lr=LR, lr_decay=DECAY, model=model)
    algo = $Class($Class.Params(gossip_steps=Q), bed.env, bed.fed)
    state = algo.init(torch.tensor(X0, dtype=torch.float32))
    for t in range(ROUNDS):
        run_round(bed, algo, state, t)
    expected = reference(A, b, W, X0, Q)
    assert_close(algo.personalized_models(state), expected)
    assert np.abs(expected[:, H * D:] - expected[0, H * D:]).max() > 1e-3  # heads differ
''' + _run_test(model='"mlp"', algorithm='"$name"')

_MODEL = '''"""$name: a model (a gossipfl plugin; `gossipfl new model`).

A builder f(input_shape, num_classes, **options) -> nn.Module with num_classes outputs; its
keyword options are `model.options` in a config, checked against their annotations. Name
the classifier `head`: it is the personal part of personalized algorithms.

    gossipfl run --plugin $name.py --set model.name=$name --set model.options.hidden=[128]
    python -m pytest test_$name.py
"""

from __future__ import annotations

import math
from itertools import pairwise

from gossipfl.models import register_model
from torch import nn


@register_model("$name")
def $name(input_shape, num_classes, hidden: list[int] | None = None):
    """A ReLU MLP on the flattened input; `hidden`: the widths of its hidden layers."""
    widths = [math.prod(input_shape), *(hidden if hidden is not None else [64])]
    model = nn.Sequential(nn.Flatten())
    for i, (a, b) in enumerate(pairwise(widths)):
        model.add_module(f"body{i}", nn.Linear(a, b))
        model.add_module(f"act{i}", nn.ReLU())
    model.add_module("head", nn.Linear(widths[-1], num_classes))
    return model
'''

_MODEL_TEST = '''"""The tests of the model $name ($name.py): what a builder promises, and a tiny run."""

from pathlib import Path

import gossipfl
import numpy as np
import torch
from gossipfl.models import build_model, head_names
from gossipfl.plugins import load, resolve

PLUGIN = Path(__file__).with_name("$name.py")
load(resolve([str(PLUGIN)]))  # registers the model, as --plugin does


def test_${name}_has_num_classes_outputs_and_a_head():
    model = build_model("$name", (1, 28, 28), 10, seed=0, hidden=[16, 8])
    assert model(torch.zeros(5, 1, 28, 28)).shape == (5, 10)
    assert head_names(model) == ("head.weight", "head.bias")
    again = build_model("$name", (1, 28, 28), 10, seed=0, hidden=[16, 8])
    for a, b in zip(model.parameters(), again.parameters()):
        assert torch.equal(a, b)  # the same seed, the same initial weights
''' + _run_test(model='"$name"')

_DATASET = '''"""$name: a dataset (a gossipfl plugin; `gossipfl new dataset`).

A loader f(root, download, **options) -> gossipfl.data.Dataset with non-empty train and test
splits; `root` is the data folder (data.root, $$GOSSIPFL_DATA or ~/.cache/gossipfl/data) and
the keyword options are `data.options` in a config, checked against their annotations.

As written it makes Gaussian blobs, so that it runs anywhere; replace the body with reading
your files from `root` (e.g. np.load(Path(root) / "$name" / "train.npz")).

    gossipfl run --plugin $name.py --set data.dataset=$name --set model.name=mlp
    python -m pytest test_$name.py
"""

from __future__ import annotations

import torch
from gossipfl.data import from_tensors, register_dataset


@register_dataset("$name")
def $name(root, download, train_size: int = 600, test_size: int = 200, num_classes: int = 4,
          dim: int = 8, seed: int = 0):
    """`num_classes` Gaussian blobs in `dim` dimensions, labels 0..num_classes−1."""
    generator = torch.Generator().manual_seed(seed)
    centers = 3 * torch.randn(num_classes, dim, generator=generator)

    def split(n):
        y = torch.arange(n) % num_classes
        return centers[y] + torch.randn(n, dim, generator=generator), y

    return from_tensors(*split(train_size), *split(test_size), num_classes=num_classes,
                        name="$name")
'''

_DATASET_TEST = '''"""The tests of the dataset $name ($name.py): what a loader promises, and a tiny run."""

from pathlib import Path

import gossipfl
import numpy as np
from gossipfl.data import load_dataset
from gossipfl.plugins import load, resolve

PLUGIN = Path(__file__).with_name("$name.py")
load(resolve([str(PLUGIN)]))  # registers the dataset, as --plugin does


def test_${name}_has_both_splits_and_its_labels(tmp_path):
    data = load_dataset("$name", root=tmp_path, download=False)
    assert len(data.train_y) > 0 and len(data.test_y) > 0
    assert data.num_classes >= 2
    for labels in (data.train_y, data.test_y):
        assert 0 <= int(labels.min()) and int(labels.max()) < data.num_classes
    assert data.train_x.shape[1:] == data.test_x.shape[1:]
''' + _run_test(dataset='"$name"', options="{}", model='"mlp"')

SOURCES = {("algorithm", "decentralized"): _DECENTRALIZED,
           ("algorithm", "centralized"): _CENTRALIZED,
           ("algorithm", "personalized"): _PERSONALIZED,
           ("model", None): _MODEL, ("dataset", None): _DATASET}
TESTS = {("algorithm", "decentralized"): _DECENTRALIZED_TEST,
         ("algorithm", "centralized"): _CENTRALIZED_TEST,
         ("algorithm", "personalized"): _PERSONALIZED_TEST,
         ("model", None): _MODEL_TEST, ("dataset", None): _DATASET_TEST}
