"""Who is Byzantine (``byzantine.clients``), whether the honest clients still form a
connected graph without them, and label flipping's poisoned training labels."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from gossipfl.common.rng import numpy_generator
from gossipfl.errors import GossipflError
from gossipfl.topology.sparse import components

WINDOW = 10  # rounds of a time-varying topology whose union must keep the honest connected


def check_clients(value: Any, num_clients: int) -> None:
    """``byzantine.clients``: a fraction in [0, 1) of the M clients, or a list of distinct
    client ids in [0, M) that leaves an honest client; one sentence else. A fraction f > 0
    with round(f·M) = 0 is refused (it would silently run an honest federation); f = 0 and
    the empty list say so explicitly and are kept."""
    if isinstance(value, (list, tuple)):
        for i in value:
            if isinstance(i, bool) or not isinstance(i, int):
                raise GossipflError(f"byzantine.clients: client ids must be integers, got "
                                    f"{i!r}.")
            if not 0 <= i < num_clients:
                raise GossipflError(f"byzantine.clients: client id {i} is out of range for "
                                    f"data.clients: {num_clients} (ids 0..{num_clients - 1}).")
        if len(set(value)) != len(value):
            raise GossipflError(f"byzantine.clients: the ids {list(value)} name a client "
                                f"twice.")
        count = len(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not 0 <= value < 1:
            raise GossipflError(f"byzantine.clients: a fraction must be in [0, 1), got "
                                f"{value}.")
        count = round(value * num_clients)
        if value > 0 and count == 0:
            raise GossipflError(f"byzantine.clients: a fraction of {value} of data.clients: "
                                f"{num_clients} rounds to no Byzantine client, which would "
                                f"run an honest federation; use at least "
                                f"{1 / num_clients:g} (one client) or list the ids.")
    else:
        raise GossipflError(f"byzantine.clients: must be a fraction in [0, 1) or a list of "
                            f"client ids, got {value!r}.")
    if count >= num_clients:
        raise GossipflError(f"byzantine.clients: {value} makes all {num_clients} clients "
                            f"Byzantine; leave at least one honest client.")


def byzantine_ids(value: Any, num_clients: int, seed: int) -> np.ndarray:
    """The Byzantine ids (sorted): the given list, or round(f·M) drawn uniformly without
    replacement from the stream (seed, "byzantine")."""
    if isinstance(value, (list, tuple)):
        return np.sort(np.asarray(value, dtype=np.int64))
    count = round(value * num_clients)
    rng = numpy_generator(seed, "byzantine")
    return np.sort(rng.choice(num_clients, size=count, replace=False)).astype(np.int64)


def check_honest_connected(topology, ids: np.ndarray) -> None:
    """One sentence when removing the Byzantine clients disconnects the honest ones (over
    the union of the first rounds of a time-varying topology)."""
    m = topology.num_clients
    honest = np.setdiff1d(np.arange(m), ids)
    rounds = max(WINDOW, topology.period or 0) if topology.time_varying else 1
    union = topology.union_edges(rounds)  # as edges: any number of clients
    among = np.isin(union.rows, honest) & np.isin(union.cols, honest)
    label = components(m, union.rows[among], union.cols[among])[honest]  # undirected
    if len(honest) > 1 and not (label == label[0]).all():
        # the component of the lowest honest id first; then the one of the lowest other id
        other = label[np.flatnonzero(label != label[0])[0]]
        apart = sorted(int(i) for i in honest[label == other])
        raise GossipflError(f"byzantine.clients: without the Byzantine clients "
                            f"{ids.tolist()} the honest clients of topology {topology.name} "
                            f"are not connected (e.g. {apart} are cut off); choose other "
                            f"clients or a denser topology.")


def flip_labels(dataset, parts: list[np.ndarray], ids: np.ndarray):
    """The dataset with the Byzantine clients' training labels c ↦ C − 1 − c (a copy)."""
    classes = dataset.num_classes
    if not classes or dataset.train_y.is_floating_point():
        raise GossipflError("byzantine.attack: label_flip needs class labels, but the "
                            "dataset has regression targets.")
    owned = np.concatenate([parts[i] for i in ids]) if len(ids) else np.zeros(0, np.int64)
    others = np.concatenate([parts[i] for i in np.setdiff1d(np.arange(len(parts)), ids)])
    if np.intersect1d(owned, others).size:
        raise GossipflError("byzantine.attack: label_flip needs the Byzantine clients' "
                            "samples to be their own, but the partition shares some with "
                            "honest clients.")
    labels = dataset.train_y.clone()
    index = torch.as_tensor(owned, dtype=torch.long, device=labels.device)
    labels[index] = classes - 1 - labels[index]
    return replace(dataset, train_y=labels)


__all__ = ["byzantine_ids", "check_clients", "check_honest_connected", "flip_labels"]
