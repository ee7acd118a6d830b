"""Seconds per round of the gradient-tracking family (issue 25) against DFedAvg on the
headline case (Fashion-MNIST, 100 clients, Dirichlet 0.3, the 784-200-200-10 MLP, 1 local
epoch of batch 32, ring, stacked oracle), interleaved round by round so that load on a
shared machine hits every algorithm alike:

    PYTHONPATH=src python -m benchmarks.tracking_round --rounds 3

The claim checked: one round of each costs no more than one DFedAvg round plus the extra
vectors it keeps and gossips. ``dpsgd`` (one gradient per round, Lian et al.) is the
baseline of the one-gradient methods (dsgt, d2, qgm, sgp). dsgt, d2 and qgm take one minibatch gradient per round (their
papers'), so their rounds are far cheaper than an epoch; kgt runs the same epoch as DFedAvg
plus two [M, P] gossips and a correction term. D² is refused on the headline ring (100
clients, weights 1/3: λ_min(W) = −1/3), so it runs on the lazy ring (I + W)/2, whose
sparsity is the ring's. Prints the median (min–max) seconds after one warm-up round, and
each median's ratio to DFedAvg's.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np

from benchmarks.common import interleaved_round_seconds
from benchmarks.round_seconds import HEADLINE
from gossipfl.assembly.loading import load_config
from gossipfl.core.runner import Runner
from gossipfl.topology import build_topology

ALGORITHMS = ("dfedavg", "dpsgd", "dsgt", "kgt", "d2", "qgm", "sgp")
#: [M, P] kept besides x (sgp: the push-sum weights, [M, 1])
EXTRA_VECTORS = {"dfedavg": 0, "dpsgd": 0, "dsgt": 1, "kgt": 1, "d2": 1, "qgm": 1, "sgp": 0}


def lazy_ring(m: int) -> np.ndarray:
    W = build_topology("ring", m, mixing="metropolis_hastings").matrix(0)
    return (np.eye(m) + W) / 2


def config_of(name: str) -> dict:
    config = {**HEADLINE, "algorithm": {"name": name}}
    if name == "d2":
        m = HEADLINE["data"]["clients"]
        config["topology"] = {"name": "custom", "mixing": "custom", "matrix": lazy_ring(m)}
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--algorithms", nargs="*", default=list(ALGORITHMS))
    args = parser.parse_args()
    runners = {name: Runner(load_config(config_of(name))) for name in args.algorithms}
    seconds = interleaved_round_seconds(runners, args.rounds)
    base = statistics.median(seconds["dfedavg"][1:]) if "dfedavg" in seconds else None
    print(f"{'algorithm':10s} {'s/round':>8s} {'min–max':>15s} {'× dfedavg':>10s} extra [M,P]")
    for name, values in seconds.items():
        timed = values[1:]
        med = statistics.median(timed)
        ratio = f"{med / base:.2f}" if base else "-"
        print(f"{name:10s} {med:8.3f} {min(timed):7.3f}–{max(timed):.3f} {ratio:>10s} "
              f"{EXTRA_VECTORS.get(name, '?')}", flush=True)


if __name__ == "__main__":
    main()
