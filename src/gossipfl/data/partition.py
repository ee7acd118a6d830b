"""Partitioners: which training samples each client owns, plus label-matched local test sets.

Interface in the style of flwr-datasets: a :class:`Partitioner` object built from its
parameters, whose :meth:`~Partitioner.split` maps the training labels to one index array per
client. All randomness comes from the ``numpy.random.Generator`` passed in, so the same
generator seed gives the same partition. No index is ever given to two clients.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from gossipfl.errors import GossipflError
from gossipfl.plugins import Registry
from gossipfl.validation import Rule, check_all, choose

# --------------------------------------------------------------------------------------------
# Base class and helpers
# --------------------------------------------------------------------------------------------


class Partitioner(ABC):
    """Splits training sample indices among clients."""

    name: str = ""

    def split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
              ) -> list[np.ndarray]:
        """Sorted int64 train indices for each of ``num_clients`` clients."""
        labels = _check_labels(labels)
        _check_clients(num_clients, len(labels))
        return [np.sort(part).astype(np.int64) for part in self._split(labels, num_clients, rng)]

    @abstractmethod
    def _split(self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
               ) -> list[np.ndarray]: ...

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


def _check_labels(labels: np.ndarray) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise GossipflError(
            f"data.partition: needs 1-D integer class labels, got {labels.dtype} "
            f"{list(labels.shape)}."
        )
    if labels.size and labels.min() < 0:
        raise GossipflError(f"data.partition: labels must be >= 0, found {labels.min()}.")
    return labels


def _check_clients(num_clients: int, num_samples: int) -> None:
    if not isinstance(num_clients, int | np.integer) or not 1 <= num_clients <= num_samples:
        raise GossipflError(
            f"data.clients: must be an integer between 1 and the number of training samples "
            f"({num_samples}), got {num_clients}."
        )


def _class_pools(labels: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """For each class 0..max(label), its sample indices in random order."""
    order = rng.permutation(len(labels))
    num_classes = int(labels.max()) + 1
    sorted_order = order[np.argsort(labels[order], kind="stable")]
    counts = np.bincount(labels, minlength=num_classes)
    return np.split(sorted_order, np.cumsum(counts)[:-1])


def _assign(pools: list[np.ndarray], taken: np.ndarray) -> list[np.ndarray]:
    """Client i gets ``taken[i, c]`` consecutive indices of ``pools[c]`` (clients in order)."""
    num_clients = taken.shape[0]
    chunks, owners = [], []
    for c, pool in enumerate(pools):
        count = taken[:, c]
        chunks.append(pool[: count.sum()])
        owners.append(np.repeat(np.arange(num_clients), count))
    indices, owner = np.concatenate(chunks), np.concatenate(owners)
    order = np.argsort(owner, kind="stable")
    return np.split(indices[order], np.cumsum(taken.sum(axis=1))[:-1])


# --------------------------------------------------------------------------------------------
# Partitioners
# --------------------------------------------------------------------------------------------


class IidPartitioner(Partitioner):
    """Shuffle, then cut into ``num_clients`` parts whose sizes differ by at most one."""

    name = "iid"

    def _split(self, labels, num_clients, rng):
        return np.array_split(rng.permutation(len(labels)), num_clients)


class DirichletPartitioner(Partitioner):
    """Label skew from Dirichlet(alpha) draws; smaller ``alpha`` means fewer classes per client.

    ``balanced=True`` (the papers' code, DisPFL/FL-Simulator lineage): every client gets
    ``n = N // M`` samples. Client i draws a label prior ``p_i ~ Dir(alpha * 1_C)`` and each of
    its labels from ``p_i``; samples are taken without replacement, and once a class is
    exhausted ``p_i`` is renormalized over the classes that remain (no duplicates). Drawn in
    rounds: every client draws its missing labels ~ Multinomial(need_i, p_i restricted); a class
    asked for more than it has is granted by a multivariate hypergeometric lottery among the
    requests, then is exhausted; at most C + 1 rounds.

    ``balanced=False`` (classic per-class split): for each class c, proportions
    ``q_c ~ Dir(alpha * 1_M)`` over clients cut its samples; natural sizes. Redrawn until every
    client has at least ``min_size`` samples (error after ``max_tries`` draws).
    """

    name = "dirichlet"

    def __init__(self, alpha: float, balanced: bool = True, min_size: int = 10,
                 max_tries: int = 1000):
        check_all("data", {"alpha": alpha, "min_size": min_size, "max_tries": max_tries},
                  {"alpha": _POSITIVE_NUMBER, "min_size": _integer(0), "max_tries": _integer(1)})
        self.alpha = float(alpha)
        self.balanced = bool(balanced)
        self.min_size = int(min_size)
        self.max_tries = int(max_tries)

    def _split(self, labels, num_clients, rng):
        pools = _class_pools(labels, rng)
        counts = np.array([len(p) for p in pools])
        if self.balanced:
            taken = self._balanced_counts(counts, num_clients, rng)
        else:
            taken = self._per_class_counts(counts, num_clients, rng)
        return _assign(pools, taken)

    def _balanced_counts(self, supply: np.ndarray, num_clients: int,
                         rng: np.random.Generator) -> np.ndarray:
        """[M, C] sample counts: N // M per client, labels from renormalized priors."""
        num_classes = len(supply)
        priors = rng.dirichlet(np.full(num_classes, self.alpha), size=num_clients)
        supply = supply.copy()
        need = np.full(num_clients, supply.sum() // num_clients)
        taken = np.zeros((num_clients, num_classes), dtype=np.int64)
        while need.sum() > 0:
            weights = _renormalize(priors, supply > 0)
            demand = rng.multinomial(need, weights)
            grant = demand.copy()
            for c in np.flatnonzero(demand.sum(axis=0) > supply):
                grant[:, c] = rng.multivariate_hypergeometric(demand[:, c], int(supply[c]))
            taken += grant
            need -= grant.sum(axis=1)
            supply -= grant.sum(axis=0)
        return taken

    def _per_class_counts(self, counts: np.ndarray, num_clients: int,
                          rng: np.random.Generator) -> np.ndarray:
        """[M, C] counts from per-class Dirichlet proportions with a minimum client size."""
        if self.min_size * num_clients > counts.sum():
            raise GossipflError(
                f"data.min_size: {self.min_size} samples for each of {num_clients} clients "
                f"needs more than the {counts.sum()} training samples."
            )
        for _ in range(self.max_tries):
            shares = rng.dirichlet(np.full(num_clients, self.alpha), size=len(counts))  # [C, M]
            cuts = np.floor(np.cumsum(shares, axis=1) * counts[:, None]).astype(np.int64)
            cuts[:, -1] = counts
            per_class = np.diff(cuts, axis=1, prepend=0)  # [C, M]
            if per_class.sum(axis=0).min() >= self.min_size:
                return per_class.T
        raise GossipflError(
            f"data.min_size: no Dirichlet split with alpha={self.alpha} gave each of "
            f"{num_clients} clients at least {self.min_size} samples in {self.max_tries} "
            "tries; raise data.alpha, lower data.min_size or use balanced=True."
        )


def _renormalize(priors: np.ndarray, available: np.ndarray) -> np.ndarray:
    """Rows of ``priors`` restricted to available classes and renormalized (uniform over the
    available classes for a row whose mass there underflowed to zero)."""
    weights = priors * available
    total = weights.sum(axis=1, keepdims=True)
    fallback = np.broadcast_to(available / available.sum(), weights.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        weights = np.where(total > 0, weights / total, fallback)
    return weights


class PathologicalPartitioner(Partitioner):
    """Each client holds ``classes_per_client`` distinct classes (McMahan et al.'s shards).

    Clients in turn take the k classes held by the fewest clients so far (ties broken at
    random), so each class is held by floor or ceil of ``M k / C`` clients and class sets vary
    between clients; each class's samples are then cut into equal shards, one per holder.
    Every sample is used at most once (exactly once when ``M k >= C``).
    """

    name = "pathological"

    def __init__(self, classes_per_client: int):
        _integer(1).check("data.classes_per_client", classes_per_client)
        self.classes_per_client = int(classes_per_client)

    def _split(self, labels, num_clients, rng):
        k = self.classes_per_client
        present = np.flatnonzero(np.bincount(labels))
        if k > len(present):
            raise GossipflError(
                f"data.classes_per_client: must be at most the number of classes "
                f"({len(present)}), got {k}."
            )
        pools = _class_pools(labels, rng)
        held = _least_used_classes(present, num_clients, k, rng)
        taken = np.zeros((num_clients, len(pools)), dtype=np.int64)
        for c in present:
            holders = np.flatnonzero((held == c).any(axis=1))
            if not len(holders):
                continue
            if len(holders) > len(pools[c]):
                raise GossipflError(
                    f"data.classes_per_client: {k} classes per client gives class {c} "
                    f"{len(holders)} holders but it has only {len(pools[c])} samples; "
                    "use fewer clients or classes per client."
                )
            taken[holders, c] = [len(s) for s in np.array_split(pools[c], len(holders))]
        return _assign(pools, taken)


def _least_used_classes(classes: np.ndarray, num_clients: int, k: int,
                        rng: np.random.Generator) -> np.ndarray:
    """[M, k] distinct classes per client, each time the k least used (random tie-break)."""
    usage = np.zeros(len(classes))
    held = np.empty((num_clients, k), dtype=np.int64)
    for i in range(num_clients):
        pick = np.argsort(usage + rng.random(len(classes)) * 0.5, kind="stable")[:k]
        usage[pick] += 1
        held[i] = classes[pick]
    return held


def natural_split(train_users: np.ndarray | None, num_users: int, num_clients: int,
                  dataset: str = "the dataset") -> list[np.ndarray]:
    """The ``natural`` partition: client i owns the training samples of user i (a dataset
    whose samples come with their writers, e.g. LEAF's FEMNIST and Shakespeare)."""
    if train_users is None:
        raise GossipflError(f"data.partition: 'natural' needs a dataset whose samples come "
                            f"with their users (femnist, shakespeare), and {dataset} has none.")
    if num_clients != num_users:
        raise GossipflError(
            f"data.clients: the natural partition makes each of the {num_users} users of "
            f"{dataset} a client, so data.clients must be {num_users}, got {num_clients} "
            "(data.options.users keeps the first N users).")
    users = np.asarray(train_users, dtype=np.int64)
    order = np.argsort(users, kind="stable")
    counts = np.bincount(users, minlength=num_users)[:num_users]
    return [np.sort(part) for part in np.split(order, np.cumsum(counts)[:-1])]


def _integer(low: int) -> Rule:
    return Rule(lambda v: isinstance(v, int | np.integer) and not isinstance(v, bool)
                and v >= low, f"an integer >= {low}")


_POSITIVE_NUMBER = Rule(lambda v: isinstance(v, int | float) and v > 0, "> 0")

PARTITIONERS: Registry = Registry("partition", "data.partition", {
    "iid": IidPartitioner,
    "dirichlet": DirichletPartitioner,
    "pathological": PathologicalPartitioner,
}, reserved=("natural",))


def register_partitioner(name: str):
    """Class decorator: make a :class:`Partitioner` subclass available as ``data.partition:
    name``. Its constructor's parameters are read from the ``data`` section by name
    (``alpha``, ``balanced``, ``min_size``, ``classes_per_client``; see
    :func:`partitioner_params`)."""
    def decorate(cls: type[Partitioner]) -> type[Partitioner]:
        PARTITIONERS.add(name, cls)
        cls.name = name
        return cls
    return decorate


def partitioner_params(name: str, section: dict) -> dict:
    """The values of ``section`` (the ``data`` config section as a dict) that partitioner
    ``name``'s constructor takes, by parameter name."""
    cls = PARTITIONERS.lookup(name)
    return {key: section[key] for key in _init_parameters(cls) if key in section}


def build_partitioner(name: str, **params) -> Partitioner:
    """Build a partitioner by name; parameters given as ``None`` are ignored (defaults)."""
    choose("data.partition", name, PARTITIONERS)
    cls = PARTITIONERS[name]
    params = {k: v for k, v in params.items() if v is not None}
    signature = _init_parameters(cls)
    for key in params:
        if key not in signature:
            listed = ", ".join(signature) or "no parameters"
            raise GossipflError(
                f"data.{key}: not a parameter of partition '{name}' (it takes {listed})."
            )
    for key, param in signature.items():
        if param.default is inspect.Parameter.empty and key not in params:
            raise GossipflError(f"data.{key}: required by partition '{name}', not given.")
    return cls(**params)


def _init_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """Named constructor parameters of a partitioner class (none for ``object.__init__``)."""
    if cls.__init__ is object.__init__:
        return {}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {
        name: p for name, p in inspect.signature(cls.__init__).parameters.items()
        if name != "self" and p.kind in kinds
    }


# --------------------------------------------------------------------------------------------
# Local test splits
# --------------------------------------------------------------------------------------------


def local_test_split(client_train_indices: list[np.ndarray], train_labels: np.ndarray,
                     test_labels: np.ndarray, num_classes: int, rng: np.random.Generator,
                     size: int | None = None) -> list[np.ndarray]:
    """Per-client test indices whose label distribution matches the client's train labels.

    Client i gets ``s_i = size`` (default ``round(n_i N_test / N_train)``, at least 1) test
    samples; class c gets ``s_i n_ic / n_i`` of them, rounded by largest remainder, drawn
    from the global test set without replacement within a client (with replacement only for
    a class that has fewer test samples than needed). Different clients' sets may overlap
    (DisPFL protocol: independent draws).
    """
    train_labels, test_labels = np.asarray(train_labels), np.asarray(test_labels)
    if size is not None:
        _integer(1).check("data.local_test_size", size)
    test_pools = [np.flatnonzero(test_labels == c) for c in range(num_classes)]
    ratio = len(test_labels) / max(len(train_labels), 1)
    result = []
    for indices in client_train_indices:
        counts = np.bincount(train_labels[indices], minlength=num_classes)[:num_classes]
        total = size if size is not None else max(1, round(len(indices) * ratio))
        quota = _largest_remainder(counts, total if counts.sum() else 0)
        result.append(_draw_quota(quota, test_pools, rng))
    return result


def _draw_quota(quota: np.ndarray, pools: list[np.ndarray], rng: np.random.Generator
                ) -> np.ndarray:
    """Sorted indices with ``quota[c]`` drawn from ``pools[c]`` for every class c."""
    parts = [np.zeros(0, dtype=np.int64)]
    for c in np.flatnonzero(quota):
        if not len(pools[c]):
            raise GossipflError(
                f"data.local_test_size: the test set has no sample of class {c}, "
                "which a client trains on."
            )
        parts.append(rng.choice(pools[c], size=quota[c], replace=quota[c] > len(pools[c])))
    return np.sort(np.concatenate(parts)).astype(np.int64)


def _largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to ``weights`` summing to ``total`` (Hamilton apportionment)."""
    if total == 0 or weights.sum() == 0:
        return np.zeros(len(weights), dtype=np.int64)
    exact = weights * (total / weights.sum())
    quota = np.floor(exact).astype(np.int64)
    extra = total - quota.sum()
    order = np.argsort(-(exact - quota), kind="stable")
    quota[order[:extra]] += 1
    return quota


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


@dataclass
class PartitionSummary:
    """Sizes and label counts of a partition."""

    samples: np.ndarray             # [M]
    class_counts: np.ndarray        # [M, C]
    classes_per_client: np.ndarray  # [M]: classes with at least one sample

    def table(self, max_rows: int | None = None) -> str:
        """A human-readable table: one row per client (per-class counts when C <= 20)."""
        num_clients, num_classes = self.class_counts.shape
        show_classes = num_classes <= 20
        head = f"{'client':>6} {'samples':>8} {'classes':>7}"
        if show_classes:
            head += " |" + "".join(f"{c:>6}" for c in range(num_classes))
        rows = [head, "-" * len(head)]
        shown = range(num_clients) if max_rows is None else range(min(max_rows, num_clients))
        for i in shown:
            row = f"{i:>6} {self.samples[i]:>8} {self.classes_per_client[i]:>7}"
            if show_classes:
                row += " |" + "".join(f"{n:>6}" for n in self.class_counts[i])
            rows.append(row)
        if len(shown) < num_clients:
            rows.append(f"... ({num_clients - len(shown)} more clients)")
        rows.append("-" * len(head))
        rows.append(
            f"{num_clients} clients, {self.samples.sum()} samples; per client: samples "
            f"mean {self.samples.mean():.1f} min {self.samples.min()} max {self.samples.max()}, "
            f"classes mean {self.classes_per_client.mean():.2f}"
        )
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.table(max_rows=20)


def summarize_partition(parts: list[np.ndarray], labels: np.ndarray,
                        num_classes: int) -> PartitionSummary:
    """Counts per client and class for a partition of ``labels``."""
    labels = np.asarray(labels)
    counts = np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])
    return PartitionSummary(counts.sum(axis=1), counts, (counts > 0).sum(axis=1))
