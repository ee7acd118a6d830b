"""The tiny runs that the phase-graph tests and the local loop's tests share: four clients
of a few 4×4 (or 16×16) images, equal or of unequal data."""

from __future__ import annotations

import torch

from gossipfl.data import from_tensors

#: algorithms that need another topology than the ring's defaults to run at all
SETTINGS = {"d2": {"topology": {"name": "full"}},
            "adpsgd": {"topology": {"name": "ring", "order": "asynchronous"}}}


def tiny_config(algorithm: str = "dfedavgm", model: str = "mlp", **train) -> dict:
    gen = torch.Generator().manual_seed(0)
    shape = (1, 16, 16) if model == "cnn" else (1, 4, 4)
    data = from_tensors(torch.randn(64, *shape, generator=gen),
                        torch.randint(0, 3, (64,), generator=gen),
                        torch.randn(16, *shape, generator=gen),
                        torch.randint(0, 3, (16,), generator=gen))
    options = {"hidden": [8]} if model == "mlp" else {}
    return {"data": {"tensors": data, "clients": 4, "partition": "iid"},
            "model": {"name": model, "options": options},
            "topology": {"name": "ring"}, "algorithm": {"name": algorithm},
            "train": {"rounds": 3, "batch_size": 4, "lr": 0.05, "lr_decay": 0.9,
                      "local_steps": 3, **train},
            "eval": {"local_models": False, "every": 1000}, "device": "cpu", "seed": 0,
            **SETTINGS.get(algorithm, {})}


def ragged_config(name: str, **changes) -> dict:
    """Clients of unequal data (the classic Dirichlet split of 64 samples over 4 clients,
    natural sizes; batches of 4), two local epochs: rows run out of minibatches at different
    steps of an epoch, as with LEAF's natural partitions."""
    config = tiny_config(name, momentum=0.5, weight_decay=5e-4)
    config["data"].update(partition="dirichlet", alpha=0.5, balanced=False, min_size=2)
    config["train"].pop("local_steps")
    config["train"]["local_epochs"] = 2
    for section, values in changes.items():
        config.setdefault(section, {}).update(values)
    return config
