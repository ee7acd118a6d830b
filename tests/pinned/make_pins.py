"""Regenerate ``tests/pinned/values.json``: a few rounds of five algorithms on an unbalanced
synthetic federation with minibatches, as pinned by ``tests/engine/test_pinned.py``.

Run ``python -m tests.pinned.make_pins`` only when a change is meant to alter the numbers
(e.g. a new random stream), and say so in the commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import gossipfl

CASES = {
    "dfedavg": {"name": "dfedavg"},
    "dfedavgm": {"name": "dfedavgm", "momentum": 0.8},
    "oledfl": {"name": "oledfl", "beta": 0.3, "lam": 0.05},
    "dfedcata": {"name": "dfedcata", "beta": 0.3, "lam": 0.05},
    "scaffold": {"name": "scaffold", "participation": 0.5},
    "fedavg": {"name": "fedavg", "participation": 0.5},
    "dpsgd": {"name": "dpsgd"},
}
KEYS = ("train_loss", "test_acc", "test_loss", "consensus", "local_acc_mean", "bytes_total")
PATH = Path(__file__).with_name("values.json")


def config(algorithm: dict, oracle: str = "auto") -> dict:
    return {
        "data": {"dataset": "synthetic", "clients": 8, "partition": "dirichlet", "alpha": 0.4,
                 "balanced": False, "min_size": 5,
                 "options": {"num_classes": 4, "dim": 12, "train_size": 480, "test_size": 200,
                             "seed": 2}},
        "model": {"name": "mlp", "options": {"hidden": [16]}},
        "topology": {"name": "ring"},
        "algorithm": algorithm,
        "train": {"rounds": 3, "local_epochs": 1, "batch_size": 16, "lr": 0.1,
                  "weight_decay": 1e-3},
        "engine": {"oracle": oracle},
        "seed": 11,
    }


def measure(algorithm: dict, oracle: str = "auto") -> list[dict]:
    result = gossipfl.run(config(algorithm, oracle))
    return [{k: row[k] for k in KEYS if k in row} for row in result.metrics]


if __name__ == "__main__":
    values = {name: measure(algo) for name, algo in CASES.items()}
    PATH.write_text(json.dumps(values, indent=1) + "\n")
    print(f"wrote {PATH}")
