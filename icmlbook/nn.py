"""Small shared PyTorch modules."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn


class MLP(nn.Sequential):
    """A plain multilayer perceptron: Linear, activation, ..., Linear.

    ``hidden`` lists the hidden widths; ``act`` builds one activation module
    per hidden layer (e.g. ``nn.ReLU``, ``nn.Tanh``, ``lambda: nn.GELU()``).
    """

    def __init__(self, d_in: int, hidden: Sequence[int], d_out: int,
                 act: Callable[[], nn.Module] = nn.ReLU):
        layers: list[nn.Module] = []
        widths = [d_in, *hidden]
        for a, b in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(a, b), act()]
        layers.append(nn.Linear(widths[-1], d_out))
        super().__init__(*layers)
