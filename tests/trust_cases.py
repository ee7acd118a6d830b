"""What the robust-gossip tests share (tests/trust/test_trust.py, tests/trust/test_cs_plus.py,
tests/trust/test_trust_gts.py): the 7-client least-squares setting with its Byzantine clients, the
float64 re-derivations of a neighbourhood and of the attacks' messages, and a run."""

from __future__ import annotations

import gossipfl
from gossipfl.trust.attacks import alie_z
from tests.lsq import random_doubly_stochastic

M, ROUNDS, STEPS, LR, DECAY = 7, 3, 2, 0.05, 0.9
BYZANTINE = [1, 4]
W7 = random_doubly_stochastic(M, seed=5)  # in-degrees 4, 5 and 6: three buckets


def neighbourhood(W, i):
    """[i] + N_i, N_i = {j ≠ i : w_ij ≠ 0} ascending."""
    return [i] + [j for j in range(len(W)) if j != i and W[i, j] != 0]


def attack_reference(attack, Z, W, i, hood, byz, t, noise):
    """The message every Byzantine neighbour of honest i sends (per sender: a dict)."""
    name = attack["attack"]
    honest = [j for j in hood if j not in byz]
    if name == "none":
        return {}
    if name == "sign_flip":
        return {j: -attack.get("scale", 1.0) * Z[j] for j in hood if j in byz}
    if name == "gaussian":
        return {j: noise[t][j] for j in hood if j in byz}
    if attack.get("view") == "own":  # each sender j's own z_j and in-neighbours', per sender
        own = {j: Z[neighbourhood(W, j)] for j in hood if j in byz}
        return {j: _crafted(attack, Z[j], held.mean(0), held.std(0), byz, len(Z))
                for j, held in own.items()}
    view = Z[[j for j in range(len(Z)) if j not in byz]] if attack.get("view") == "all" \
        else Z[honest]
    mu, sd = view.mean(0), view.std(0)
    if name in ("alie", "ipm"):
        message = _crafted(attack, None, mu, sd, byz, len(Z))
    elif name == "dissensus":
        pull = sum(W[i, j] * (Z[j] - Z[i]) for j in honest)
        message = Z[i] - attack.get("epsilon", 1.5) * pull / sum(W[i, j] for j in hood
                                                                  if j in byz)
    return {j: message for j in hood if j in byz}


def _crafted(attack, own, mu, sd, byz, m):
    """ALIE's μ − z σ or IPM's −ε μ from the moments the attacker sees."""
    if attack["attack"] == "alie":
        return mu - attack.get("z", alie_z(m, len(byz))) * sd
    return -attack.get("epsilon", 0.1) * mu


def run(p, W, rule=None, attack=None, algorithm="dfedavg"):
    config = p.config({"name": algorithm}, W=W, rounds=ROUNDS, steps=STEPS, lr=LR, decay=DECAY)
    if rule is not None:
        config["topology"]["robust"] = rule
    if attack is not None:
        config["byzantine"] = attack
    return gossipfl.run(config)
