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


class Adam:
    """Adam (Kingma & Ba), and AdamW with ``decoupled=True``: ``torch.optim``'s arithmetic
    on CPU, operation for operation (a model trains to the same bits), without its first
    step's import of ``torch._dynamo`` (2-3 s of CPU, a large part of a smoke run).
    ``lr`` may be changed between steps; each parameter counts its own steps."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False):
        self.params = list(params)
        self.lr, self.betas, self.eps = lr, betas, eps
        self.weight_decay, self.decoupled = weight_decay, decoupled
        self.state: dict[int, list] = {}  # index -> [steps, exp_avg, exp_avg_sq]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        import torch

        beta1, beta2 = self.betas
        lr, wd = self.lr, self.weight_decay
        with torch.no_grad():
            for i, p in enumerate(self.params):
                if p.grad is None:
                    continue
                grad = p.grad
                st = self.state.setdefault(
                    i, [0, torch.zeros_like(p), torch.zeros_like(p)])
                st[0] += 1
                t, exp_avg, exp_avg_sq = st
                if wd != 0:
                    if self.decoupled:
                        p.mul_(1 - lr * wd)
                    else:
                        grad = grad.add(p, alpha=wd)
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step_size = lr / (1 - beta1 ** float(t))
                denom = (exp_avg_sq.sqrt() / (1 - beta2 ** float(t)) ** 0.5).add_(self.eps)
                p.addcdiv_(exp_avg, denom, value=-step_size)
