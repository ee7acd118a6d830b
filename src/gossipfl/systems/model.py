"""The systems model: what each client's hardware and network do in each round.

Every draw is counter-based (:mod:`gossipfl.common.rng`): a per-round quantity of round t is element
i (client i) of the vector drawn from the stream (seed, "systems", what, t); a quantity drawn
once per client comes from (seed, "systems", what). So the draws of a round never depend on
the rounds before it (except the Markov chain, recomputed from its start when asked out of
order) and a resumed run sees the same numbers.

``compute`` — c_i^t, seconds per local step (default 0):

- ``{seconds_per_step: c}``: c for every client;
- ``{distribution: lognormal, mean: c, sigma: s}``: c_i = exp(μ + s Z_i), μ = ln c − s²/2 (so
  E[c_i] = c), drawn once per client; ``vary: true`` redraws it every round;
- ``{stragglers: f, slowdown: s, seconds_per_step: c}``: round(f·M) clients, chosen once from
  the seed, take s·c, the others c;
- ``{path: file.csv}``: one value per client (M numbers, any separators).

``network`` — per client, its uplink (the sender's): ``latency`` ℓ_i seconds (default 0) and
``bandwidth`` β_i bytes/s (default unlimited), each a number or the lognormal mapping above.
A message of b bytes from client j takes ℓ_j + b / β_j. ``uplink``: ``parallel`` (default:
the transfers to different neighbours go side by side, each at β_j) or ``shared`` (one uplink
carries them one after another: a round's messages take ℓ_j + Σ b / β_j, so a client with
more neighbours waits longer, as a device with one network link does).

``availability`` — who is offline in round t:

- ``{offline: p}``: each client independently with probability p, every round;
- ``{markov: {p_off: a, p_on: b}}``: a two-state chain per client (on → off with probability
  a, off → on with probability b per round), started from its stationary law
  (offline with probability a / (a + b));
- ``links: {fail: q}`` (beside either, or alone): each undirected edge {i, j} fails in round t
  with probability q, both directions at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gossipfl.common.rng import counter_bits, derive_seed, numpy_generator
from gossipfl.errors import GossipflError, did_you_mean
from gossipfl.validation import (
    BOOLEAN,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    UNIT_INTERVAL,
    Rule,
    one_of,
)

#: What the draws read: the ``systems`` section (:class:`gossipfl.config.SystemsConfig`, which
#: validates itself through :func:`check_systems`; not imported here, so that config stays
#: above this module).
SystemsSection = Any

AT_LEAST_ONE_TIMES = Rule(lambda v: v >= 1, ">= 1")
COMPUTE_FORMS = {  # the keys that pick a form, and the keys each form takes
    "path": ("path",),
    "distribution": ("distribution", "mean", "sigma", "vary"),
    "stragglers": ("stragglers", "slowdown", "seconds_per_step"),
    "seconds_per_step": ("seconds_per_step",),
}
LOGNORMAL_KEYS = ("distribution", "mean", "sigma", "vary")


# --------------------------------------------------------------------------------------------
# Specs: the parsed, checked settings
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Quantity:
    """A positive per-client number: ``constant``, or lognormal with mean ``mean`` and log
    standard deviation ``sigma``, drawn once per client or (``vary``) every round."""

    constant: float | None = None
    mean: float = 0.0
    sigma: float = 0.0
    vary: bool = False

    def draw(self, seed: int, what: str, t: int, m: int) -> np.ndarray:
        if self.constant is not None:
            return np.full(m, self.constant, dtype=np.float64)
        keys = (what, t) if self.vary else (what,)
        mu = math.log(self.mean) - self.sigma ** 2 / 2
        return numpy_generator(seed, "systems", *keys).lognormal(mu, self.sigma, m)


@dataclass(frozen=True)
class Compute:
    """c_i^t (seconds per local step): a :class:`Quantity`, stragglers, or a file's values."""

    speed: Quantity = Quantity(constant=0.0)
    stragglers: float = 0.0
    slowdown: float = 1.0
    path: str | None = None


@dataclass(frozen=True)
class Availability:
    offline: float = 0.0
    p_off: float | None = None  # Markov chain: on → off
    p_on: float | None = None  # Markov chain: off → on
    link_fail: float = 0.0

    @property
    def markov(self) -> bool:
        return self.p_off is not None


def _mapping(key: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise GossipflError(f"{key}: must be a mapping, got {value!r}.")
    return value


def _known(key: str, spec: dict, names: tuple[str, ...]) -> None:
    for name in spec:
        if name not in names:
            raise GossipflError(f"{key}.{name}: unknown key{did_you_mean(str(name), names)}; "
                                f"the keys of {key} are {', '.join(names)}.")


def _lognormal(key: str, spec: dict) -> Quantity:
    one_of("lognormal").check(f"{key}.distribution", spec.get("distribution"))
    if "mean" not in spec:
        raise GossipflError(f"{key}.mean: missing; a lognormal needs its mean (and sigma).")
    POSITIVE.check(f"{key}.mean", spec["mean"])
    NON_NEGATIVE.check(f"{key}.sigma", spec.get("sigma", 0.0))
    BOOLEAN.check(f"{key}.vary", spec.get("vary", False))
    return Quantity(mean=float(spec["mean"]), sigma=float(spec.get("sigma", 0.0)),
                    vary=bool(spec.get("vary", False)))


def _quantity(key: str, value: Any, rule: Rule) -> Quantity:
    """A number (checked by ``rule``) or a lognormal mapping."""
    if isinstance(value, dict):
        _known(key, value, LOGNORMAL_KEYS)
        return _lognormal(key, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GossipflError(f"{key}: must be a number or a lognormal mapping "
                            f"{{distribution: lognormal, mean: ..., sigma: ...}}, got {value!r}.")
    rule.check(key, value)
    return Quantity(constant=float(value))


def parse_compute(value: Any) -> Compute:
    if value is None:
        return Compute()
    key = "systems.compute"
    spec = _mapping(key, value)
    _known(key, spec, tuple(dict.fromkeys(k for keys in COMPUTE_FORMS.values() for k in keys)))
    form = next((name for name in COMPUTE_FORMS if name in spec), None)
    if form is None:
        raise GossipflError(f"{key}: must set seconds_per_step, distribution, stragglers or "
                            f"path, got {spec!r}.")
    others = [k for k in spec if k not in COMPUTE_FORMS[form]]
    if others:
        raise GossipflError(f"{key}.{others[0]}: does not go with {key}.{form} (one form: "
                            f"seconds_per_step, distribution, stragglers or path).")
    if form == "path":
        path = spec["path"]
        if not isinstance(path, str):
            raise GossipflError(f"{key}.path: must be a string, got {path!r}.")
        return Compute(path=path)
    if form == "distribution":
        return Compute(speed=_lognormal(key, spec))
    seconds = spec.get("seconds_per_step")
    if seconds is None:
        raise GossipflError(f"{key}.seconds_per_step: missing; stragglers are slower than it.")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise GossipflError(f"{key}.seconds_per_step: must be a number, got {seconds!r} "
                            f"(a lognormal is {key}: {{distribution: lognormal, ...}}).")
    NON_NEGATIVE.check(f"{key}.seconds_per_step", seconds)
    if form == "seconds_per_step":
        return Compute(speed=Quantity(constant=float(seconds)))
    UNIT_INTERVAL.check(f"{key}.stragglers", spec["stragglers"])
    AT_LEAST_ONE_TIMES.check(f"{key}.slowdown", spec.get("slowdown", 1.0))
    return Compute(speed=Quantity(constant=float(seconds)), stragglers=float(spec["stragglers"]),
                   slowdown=float(spec.get("slowdown", 1.0)))


UPLINKS = ("parallel", "shared")


def parse_network(value: Any) -> tuple[Quantity, Quantity | None, str]:
    """(latency, bandwidth, uplink); bandwidth None: unlimited."""
    if value is None:
        return Quantity(constant=0.0), None, "parallel"
    key = "systems.network"
    spec = _mapping(key, value)
    _known(key, spec, ("latency", "bandwidth", "uplink"))
    latency = _quantity(f"{key}.latency", spec.get("latency", 0.0), NON_NEGATIVE)
    bandwidth = spec.get("bandwidth")
    uplink = spec.get("uplink", "parallel")
    one_of(*UPLINKS).check(f"{key}.uplink", uplink)
    return latency, (None if bandwidth is None
                     else _quantity(f"{key}.bandwidth", bandwidth, POSITIVE)), uplink


def parse_availability(value: Any) -> Availability | None:
    if value is None:
        return None
    key = "systems.availability"
    spec = _mapping(key, value)
    _known(key, spec, ("offline", "markov", "links"))
    if "offline" in spec and "markov" in spec:
        raise GossipflError(f"{key}.markov: does not go with {key}.offline (one model of "
                            f"who is offline); set one.")
    offline = spec.get("offline", 0.0)
    UNIT_INTERVAL.check(f"{key}.offline", offline)
    p_off = p_on = None
    if "markov" in spec:
        chain = _mapping(f"{key}.markov", spec["markov"])
        _known(f"{key}.markov", chain, ("p_off", "p_on"))
        for name in ("p_off", "p_on"):
            if name not in chain:
                raise GossipflError(f"{key}.markov.{name}: missing; the chain needs p_off "
                                    f"(on → off) and p_on (off → on).")
        UNIT_INTERVAL.check(f"{key}.markov.p_off", chain["p_off"])
        FRACTION.check(f"{key}.markov.p_on", chain["p_on"])
        p_off, p_on = float(chain["p_off"]), float(chain["p_on"])
    fail = 0.0
    if "links" in spec:
        links = _mapping(f"{key}.links", spec["links"])
        _known(f"{key}.links", links, ("fail",))
        fail = links.get("fail", 0.0)
        UNIT_INTERVAL.check(f"{key}.links.fail", fail)
    return Availability(offline=float(offline), p_off=p_off, p_on=p_on, link_fail=float(fail))


def check_systems(config: SystemsSection) -> None:
    """One sentence naming the key and value of the first bad setting (config validation)."""
    parse_compute(config.compute)
    parse_network(config.network)
    parse_availability(config.availability)


def read_values(path: str, m: int) -> np.ndarray:
    """The M positive numbers of ``path`` (one per client; commas, spaces or newlines)."""
    from gossipfl.io import read_text

    key = "systems.compute.path"
    text = read_text(Path(path), key, "text with one number per client").replace(",", " ")
    text = text.split()
    try:
        values = np.array([float(v) for v in text], dtype=np.float64)
    except ValueError:
        raise GossipflError(f"{key}: '{path}' must hold numbers only.") from None
    if len(values) != m:
        raise GossipflError(f"{key}: '{path}' holds {len(values)} values, but there are {m} "
                            f"clients (one value each).")
    if not np.isfinite(values).all() or (values < 0).any():
        raise GossipflError(f"{key}: '{path}' must hold finite seconds >= 0 per step.")
    return values


# --------------------------------------------------------------------------------------------
# The model: per-round, per-client draws
# --------------------------------------------------------------------------------------------
class SystemsModel:
    """The draws of a run (M clients, ``seed``) from a :class:`SystemsConfig`."""

    def __init__(self, config: SystemsSection, num_clients: int, seed: int):
        self.num_clients = m = num_clients
        self.seed = seed
        self.deadline = config.deadline
        self._compute = parse_compute(config.compute)
        self._latency, self._bandwidth, self.uplink = parse_network(config.network)
        self.availability = parse_availability(config.availability)
        self._file = None if self._compute.path is None else read_values(self._compute.path, m)
        self._slow = np.zeros(m, dtype=bool)
        if self._compute.stragglers > 0:
            count = round(self._compute.stragglers * m)
            chosen = numpy_generator(seed, "systems", "stragglers").choice(m, count,
                                                                           replace=False)
            self._slow[chosen] = True
        self._chain: tuple[int, np.ndarray] | None = None  # (round, offline) of the chain

    @property
    def has_failures(self) -> bool:
        """Whether some client or link can be missing from a round."""
        a = self.availability
        return a is not None and (a.markov or a.offline > 0 or a.link_fail > 0)

    @property
    def stragglers(self) -> np.ndarray:
        """``[M]`` bool: the clients the ``stragglers`` form slows down."""
        return self._slow.copy()

    def compute(self, t: int) -> np.ndarray:
        """``[M]`` c_i^t, seconds per local step in round t."""
        if self._file is not None:
            return self._file.copy()
        c = self._compute.speed.draw(self.seed, "compute", t, self.num_clients)
        return np.where(self._slow, c * self._compute.slowdown, c)

    def latency(self, t: int) -> np.ndarray:
        """``[M]`` ℓ_i^t, seconds every message of client i's uplink waits."""
        return self._latency.draw(self.seed, "latency", t, self.num_clients)

    def bandwidth(self, t: int) -> np.ndarray:
        """``[M]`` β_i^t, bytes per second of client i's uplink (inf: unlimited)."""
        if self._bandwidth is None:
            return np.full(self.num_clients, np.inf)
        return self._bandwidth.draw(self.seed, "bandwidth", t, self.num_clients)

    def offline(self, t: int) -> np.ndarray:
        """``[M]`` bool: the clients offline in round t."""
        a, m = self.availability, self.num_clients
        if a is None:
            return np.zeros(m, dtype=bool)
        if not a.markov:
            if a.offline == 0:
                return np.zeros(m, dtype=bool)
            return numpy_generator(self.seed, "systems", "offline", t).random(m) < a.offline
        if self._chain is None or self._chain[0] > t:
            u = numpy_generator(self.seed, "systems", "markov", 0).random(m)
            self._chain = 0, u < a.p_off / (a.p_off + a.p_on)
        start, off = self._chain
        for s in range(start + 1, t + 1):
            u = numpy_generator(self.seed, "systems", "markov", s).random(m)
            off = np.where(off, u >= a.p_on, u < a.p_off)
        self._chain = t, off
        return off.copy()

    def failed_edges(self, t: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray | None:
        """``[E]`` bool: whether the link of each entry (rows[e], cols[e]) fails in round t
        (None: none can), for a topology built as edges. Link {i, j}'s draw is a hash of
        (seed, t, min(i, j), max(i, j)) alone: both directions fail together, whatever the
        other edges, in O(edges) (the dense :meth:`failed_links` draws one ``[M, M]`` array)."""
        a = self.availability
        if a is None or a.link_fail == 0:
            return None
        rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        link = np.minimum(rows, cols) * self.num_clients + np.maximum(rows, cols)
        key = torch.tensor(derive_seed(self.seed, "systems", "links", t), dtype=torch.int64)
        bits = counter_bits(key, torch.from_numpy(link), 53).numpy()
        return bits * 2.0 ** -53 < a.link_fail

    def failed_links(self, t: int) -> np.ndarray | None:
        """``[M, M]`` bool, symmetric: the links that fail in round t (None: none can)."""
        a, m = self.availability, self.num_clients
        if a is None or a.link_fail == 0:
            return None
        u = numpy_generator(self.seed, "systems", "links", t).random((m, m))
        failed = np.triu(u < a.link_fail, 1)
        return failed | failed.T
