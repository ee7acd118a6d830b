"""Trust: Byzantine clients and their attacks (``byzantine:``), robust aggregation rules for
gossip (``topology.robust``), one registry per kind (:data:`ATTACKS`, :data:`RULES`); and
differential privacy (``privacy:``, ``eval.membership``).

- :mod:`gossipfl.trust.rules` — the rules (mean, trimmed_mean, median, krum, clipped_gossip,
  cs_plus, gts);
- :mod:`gossipfl.trust.attacks` — the attacks (none, sign_flip, gaussian, alie, ipm,
  dissensus, spectral, label_flip);
- :mod:`gossipfl.trust.neighbourhoods` — each receiver's neighbourhood, bucketed by degree;
- :mod:`gossipfl.trust.byzantine` — who is Byzantine, the honest graph, flipped labels;
- :mod:`gossipfl.trust.gossip` — the robust gossip step the Federation runs, and its refusals;
- :mod:`gossipfl.trust.breakdown` — μ_min and b, the quantities the breakdown results are
  stated in, for a Byzantine run's summary;
- :mod:`gossipfl.trust.dpsgd` — DP-SGD's gradient (per-sample clipping and noise), with
  :mod:`gossipfl.trust.ghost` its per-sample norms for Linear models;
- :mod:`gossipfl.trust.accountant` — ε(δ) per client by dp-accounting's RDP accountant;
- :mod:`gossipfl.trust.privacy` — the ``privacy`` section's checks and refusals;
- :mod:`gossipfl.trust.membership` — membership inference: the loss-threshold attack (AUC,
  TPR at low FPR) on each client's held-out samples, and offline LiRA's statistics;
- :mod:`gossipfl.trust.muffliato` — Muffliato's gossip polynomials and its pairwise network DP
  guarantee (the algorithm is ``gossipfl.algorithms.decentralized.muffliato``).
"""

from gossipfl.trust.attacks import ATTACKS, Attack, check_attack, register_attack
from gossipfl.trust.rules import RULES, RobustRule, build_rule, register_rule

__all__ = ["ATTACKS", "RULES", "Attack", "RobustRule", "build_rule", "check_attack",
           "register_attack", "register_rule"]
