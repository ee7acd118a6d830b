"""The FL-lineage LeNet-style CNN, plus helpers shared by the convolutional models.

``cnn`` (FedAvg/FedDyn/FL-Simulator/DFedCata "LeNet", DisPFL ``cnn_cifar10``)::

    conv5×5(C→64) → ReLU → maxpool2 → conv5×5(64→64) → ReLU → maxpool2
    → FC(64·h·w → 384) → ReLU → FC(384 → 192) → ReLU → FC(192 → classes)

with no padding, so h = ((H − 4) // 2 − 4) // 2: 5 for 32×32 (FC 1600→384) and 4 for 28×28
(FC 1024→384). There is no normalization layer.

``femnist_cnn`` (the LEAF FEMNIST CNN, Caldas et al. 2018; FedSAGD's Table 6)::

    conv5×5(C→32, same) → ReLU → maxpool2 → conv5×5(32→64, same) → ReLU → maxpool2
    → FC(64·7·7 → 2048) → ReLU → FC(2048 → classes)
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from gossipfl.errors import GossipflError


def image_dims(input_shape: Sequence[int], model: str, min_side: int = 1) -> tuple[int, int, int]:
    """``(C, H, W)`` from ``input_shape``; a clear error when the shape is not an image."""
    dims = tuple(int(d) for d in input_shape)
    if len(dims) != 3 or min(dims[1:]) < min_side or dims[0] < 1:
        raise GossipflError(
            f"model.name: '{model}' needs image inputs (C, H, W) with H, W >= {min_side}, "
            f"got input shape {dims}."
        )
    return dims  # type: ignore[return-value]


def check_groups(groups: int, channels: Sequence[int]) -> int:
    """Validate a GroupNorm group count against every channel count it will normalize."""
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise GossipflError(f"model.options.groups: must be a positive integer, got {groups!r}.")
    bad = [c for c in channels if c % groups]
    if bad:
        raise GossipflError(
            f"model.options.groups: must divide every channel count {sorted(set(channels))}, "
            f"got {groups}."
        )
    return groups


class CNN(nn.Module):
    """Two 5×5 conv layers with 64 channels, then FC 384 → 192 → classes."""

    def __init__(self, input_shape: Sequence[int], num_classes: int):
        super().__init__()
        channels, height, width = image_dims(input_shape, "cnn", min_side=16)
        self.features = nn.Sequential(
            nn.Conv2d(channels, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        h, w = (((height - 4) // 2 - 4) // 2, ((width - 4) // 2 - 4) // 2)
        self.fc = nn.Sequential(
            nn.Linear(64 * h * w, 384), nn.ReLU(), nn.Linear(384, 192), nn.ReLU()
        )
        self.head = nn.Linear(192, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.fc(self.features(x)))


def cnn(input_shape: Sequence[int], num_classes: int) -> nn.Module:
    """The FL-lineage LeNet (works for 1×28×28 and 3×32×32 inputs)."""
    return CNN(input_shape, num_classes)


class FemnistCNN(nn.Module):
    """LEAF's FEMNIST CNN: two 'same' 5×5 convs (32, 64) with 2×2 max-pools, FC 2048."""

    def __init__(self, input_shape: Sequence[int], num_classes: int):
        super().__init__()
        channels, height, width = image_dims(input_shape, "femnist_cnn", min_side=4)
        self.features = nn.Sequential(
            nn.Conv2d(channels, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        self.fc = nn.Sequential(nn.Linear(64 * (height // 4) * (width // 4), 2048), nn.ReLU())
        self.head = nn.Linear(2048, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.fc(self.features(x)))


def femnist_cnn(input_shape: Sequence[int], num_classes: int) -> nn.Module:
    """The LEAF FEMNIST CNN (1×28×28 inputs: FC 3136 → 2048)."""
    return FemnistCNN(input_shape, num_classes)
