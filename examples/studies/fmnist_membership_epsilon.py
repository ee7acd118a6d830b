"""Membership leakage against ε (issue 51): DP-DFedAvg on a ring and the complete graph, each
client's own held-out samples as non-members, the loss-threshold attack and offline LiRA.

A small study meant to run in minutes on a CPU: 10 clients of 200 Fashion-MNIST training
samples each (an IID draw of 2 000 from the seed), half of each held out
(``eval.membership: {holdout: 0.5, samples: 100, shadows: 4}``), the 784-128-10 MLP trained
for ``--rounds`` rounds of 2 local epochs (batch 20, lr 0.1), without DP and with DP-SGD at
noise multipliers 0.5, 1 and 2 (clip 1, δ = 10⁻³). Prints one Markdown table row per run.

    python examples/studies/fmnist_membership_epsilon.py --rounds 30
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gossipfl
from gossipfl.data.datasets import load_dataset

CLIENTS, PER_CLIENT, TEST = 10, 200, 1000


def tensors(seed: int) -> dict:
    data = load_dataset("fashion_mnist")
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(data.train_y), CLIENTS * PER_CLIENT, replace=False)
    test = rng.choice(len(data.test_y), TEST, replace=False)
    x, y = data.train_x[pick], data.train_y[pick]
    return {"train": [(x[i::CLIENTS], y[i::CLIENTS]) for i in range(CLIENTS)],
            "test": (data.test_x[test], data.test_y[test]), "num_classes": 10}


def config(data: dict, topology: str, sigma: float | None, rounds: int, seed: int) -> dict:
    out = {"data": {"clients": CLIENTS, "tensors": data},
           "model": {"name": "mlp", "options": {"hidden": [128]}},
           "topology": {"name": topology}, "algorithm": {"name": "dfedavg"},
           "train": {"rounds": rounds, "local_epochs": 2, "batch_size": 20, "lr": 0.1},
           "eval": {"every": rounds, "local_models": True,
                    "membership": {"holdout": 0.5, "samples": 100, "shadows": 4}},
           "seed": seed}
    if sigma is not None:
        out["privacy"] = {"clip": 1.0, "noise_multiplier": sigma, "delta": 1e-3}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--topologies", nargs="+", default=["ring", "full"])
    parser.add_argument("--sigmas", nargs="+", default=["none", "0.5", "1", "2"])
    args = parser.parse_args()
    data = tensors(args.seed)
    print("| graph | σ | ε | test acc | local acc | loss AUC | loss TPR@1% | loss TPR@0.1% "
          "| LiRA AUC | LiRA TPR@1% | LiRA TPR@0.1% | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for topology in args.topologies:
        for sigma in args.sigmas:
            noise = None if sigma == "none" else float(sigma)
            start = time.perf_counter()
            row = gossipfl.run(config(data, topology, noise, args.rounds, args.seed)).metrics[-1]
            eps = "∞ (no DP)" if noise is None else f"{row['epsilon']:.2f}"
            print(f"| {topology} | {sigma} | {eps} | {100 * row['test_acc']:.1f} | "
                  f"{100 * row['local_acc_mean']:.1f} | {row['mia_auc']:.3f} | "
                  f"{100 * row['mia_tpr_1pct']:.1f} | {100 * row['mia_tpr_01pct']:.1f} | "
                  f"{row['mia_lira_auc']:.3f} | {100 * row['mia_lira_tpr_1pct']:.1f} | "
                  f"{100 * row['mia_lira_tpr_01pct']:.1f} | {time.perf_counter() - start:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
