"""Character models: ``lstm``, the next-character LSTM of FedSAGD's Table 6 (the LEAF
Shakespeare model, Caldas et al. 2018)::

    Embedding(vocab → 8) → LSTM(8 → 100, 2 layers) → FC(100 → classes) on the last time step

Inputs are int64 character indices ``[B, T]``; ``vocab`` defaults to the number of classes
(80 for LEAF's Shakespeare, where the classes are the characters). No oracle batches
``nn.LSTM`` over clients: the stacked oracle cannot trace it, and vmap has no rule for the
LSTM kernel (training falls back to a per-client loop several times slower than the loop
oracle; evaluation fails), so ``engine.oracle: auto`` runs this model with ``loop``.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from gossipfl.errors import GossipflError


class CharLSTM(nn.Module):
    """Embedding → stacked LSTM → linear ``head`` on the last step's hidden state."""

    def __init__(self, vocab: int, num_classes: int, embed: int = 8, hidden: int = 100,
                 layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.lstm(self.embed(x))
        return self.head(out[:, -1])


def lstm(input_shape: Sequence[int], num_classes: int, vocab: int | None = None,
         embed: int = 8, hidden: int = 100, layers: int = 2) -> nn.Module:
    """FedSAGD / LEAF Shakespeare LSTM for token sequences of shape ``(T,)``."""
    if len(tuple(input_shape)) != 1:
        raise GossipflError(f"model.name: 'lstm' needs token sequences of shape (T,), got "
                            f"input shape {tuple(input_shape)}.")
    for key, value in (("vocab", vocab if vocab is not None else num_classes),
                       ("embed", embed), ("hidden", hidden), ("layers", layers)):
        if value < 1:
            raise GossipflError(f"model.options.{key}: must be a positive integer, got {value}.")
    return CharLSTM(vocab or num_classes, num_classes, embed, hidden, layers)
