"""A tiny denoising diffusion model (DDPM) for low-dimensional toy data.

Shared by the chapters that need a learned score (ch10 SMaRt, ch11 diffusion
backdoors). Everything is variance-preserving and discrete-time:

    x_t = a_t x_0 + s_t eps,   a_t = sqrt(alpha_bar_t),  s_t = sqrt(1 - alpha_bar_t),

an MLP ``eps_model(x_t, t)`` is trained to predict ``eps`` (Ho et al., 2020),
and the score of the noised data is ``grad log p_t(x_t) = -eps(x_t, t) / s_t``.

    sched = Schedule.linear()          # DDPM: T = 1000, betas 1e-4 .. 0.02
    model = EpsMLP(dim=2)
    losses = train_eps_model(model, data, sched, steps=2000)
    score = score_from_eps(model(x, t), sched.sigma[t])
    samples = ddpm_sample(model, sched, n=500)
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

from .nn import Adam

__all__ = ["Schedule", "EpsMLP", "q_sample", "diffusion_loss", "train_eps_model",
           "score_from_eps", "ddpm_sample"]


@dataclass(frozen=True)
class Schedule:
    """A discrete VP noise schedule with ``T`` steps; index ``t`` runs from 0 to T-1.

    ``alpha[t] = sqrt(alpha_bar_t)`` scales the data and ``sigma[t] =
    sqrt(1 - alpha_bar_t)`` the noise, so ``alpha**2 + sigma**2 == 1``.
    """

    betas: torch.Tensor

    @classmethod
    def linear(cls, T: int = 1000, beta_min: float = 1e-4, beta_max: float = 0.02) -> "Schedule":
        """Betas rising linearly from ``beta_min`` to ``beta_max`` (float64); the defaults are DDPM's."""
        if T < 1 or not 0 < beta_min <= beta_max < 1:
            raise ValueError(f"need T >= 1 and 0 < beta_min <= beta_max < 1; "
                             f"got T={T}, beta_min={beta_min}, beta_max={beta_max}")
        return cls(torch.linspace(beta_min, beta_max, T, dtype=torch.float64))

    @property
    def T(self) -> int:
        return len(self.betas)

    @property
    def alpha_bar(self) -> torch.Tensor:
        return torch.cumprod(1 - self.betas, dim=0)

    @property
    def alpha(self) -> torch.Tensor:
        """Signal scale a_t = sqrt(alpha_bar_t), float32."""
        return self.alpha_bar.sqrt().float()

    @property
    def sigma(self) -> torch.Tensor:
        """Noise scale s_t = sqrt(1 - alpha_bar_t), float32."""
        return (1 - self.alpha_bar).sqrt().float()

    def index_of_sigma(self, sigma: float) -> int:
        """The first index whose noise scale reaches ``sigma`` (clamped to [0, T-1])."""
        return int(torch.searchsorted(self.sigma, torch.tensor([float(sigma)])).clamp(0, self.T - 1))


def q_sample(x0: torch.Tensor, t: torch.Tensor, eps: torch.Tensor, sched: Schedule) -> torch.Tensor:
    """The forward (noising) process: x_t = a_t x_0 + s_t eps, for a batch of indices ``t``."""
    shape = (-1,) + (1,) * (x0.dim() - 1)
    return sched.alpha[t].view(shape) * x0 + sched.sigma[t].view(shape) * eps


class EpsMLP(nn.Module):
    """An epsilon-prediction MLP for ``dim``-dimensional data, conditioned on the step.

    The step enters as sinusoidal features of t / T (``n_freq`` frequencies),
    concatenated with x_t; SiLU activations keep the network (and so the score)
    smooth, which matters when gradients are taken through it.
    """

    def __init__(self, dim: int = 2, hidden: Iterable[int] = (128, 128, 128), n_freq: int = 8,
                 T: int = 1000):
        super().__init__()
        self.dim, self.T = dim, T
        self.register_buffer("freqs", math.pi * 2.0 ** torch.arange(n_freq, dtype=torch.float32))
        widths = [dim + 2 * n_freq, *hidden]
        layers: list[nn.Module] = []
        for a, b in zip(widths[:-1], widths[1:]):
            layers += [nn.Linear(a, b), nn.SiLU()]
        layers.append(nn.Linear(widths[-1], dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Predicted noise for inputs ``x`` (..., dim) at integer steps ``t`` (...)."""
        tt = (t.float() / self.T).unsqueeze(-1) * self.freqs
        emb = torch.cat([torch.sin(tt), torch.cos(tt)], dim=-1).expand(*x.shape[:-1], -1)
        return self.net(torch.cat([x, emb], dim=-1))


def diffusion_loss(model: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x0: torch.Tensor,
                   sched: Schedule, t: torch.Tensor | None = None,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """The simple DDPM loss E ||eps_model(x_t, t) - eps||^2 (mean over batch and dims)."""
    if t is None:
        t = torch.randint(0, sched.T, (len(x0),), generator=generator)
    eps = torch.randn(x0.shape, generator=generator)
    return ((model(q_sample(x0, t, eps, sched), t) - eps) ** 2).mean()


def train_eps_model(model: nn.Module, data: torch.Tensor | Callable[[int], torch.Tensor],
                    sched: Schedule, steps: int = 2000, batch: int = 256, lr: float = 2e-3,
                    t_max: int | None = None, generator: torch.Generator | None = None,
                    progress: Callable[[Iterable[int]], Iterable[int]] | None = None) -> list[float]:
    """Train ``model`` with Adam on the DDPM loss; return the loss of every step.

    ``data`` is a tensor of samples (minibatches are drawn from it) or a function
    ``n -> n fresh samples``. Steps are drawn uniformly from [0, t_max) (default
    all T). The learning rate decays by cosine to 5% over the run. ``progress``
    may wrap the step range, e.g. ``icmlbook.progress``.

    The optimiser is :class:`icmlbook.nn.Adam` and the decay is computed as torch's
    ``CosineAnnealingLR`` computes it (each rate from the previous one), so the model
    trains to the bits of ``torch.optim.Adam`` with that scheduler.
    """
    opt = Adam(model.parameters(), lr=lr)
    eta_min = 0.05 * lr
    t_max = sched.T if t_max is None else t_max
    losses: list[float] = []
    steps_iter: Iterable[int] = range(steps)
    if progress is not None:
        steps_iter = progress(steps_iter)
    for k, _ in enumerate(steps_iter, 1):
        if callable(data):
            x0 = data(batch)
        else:
            x0 = data[torch.randint(0, len(data), (batch,), generator=generator)]
        t = torch.randint(0, t_max, (batch,), generator=generator)
        loss = diffusion_loss(model, x0, sched, t, generator)
        opt.zero_grad()
        loss.backward()
        opt.step()
        # CosineAnnealingLR's recursive form, after step k of T = steps
        opt.lr = ((1 + math.cos(math.pi * k / steps))
                  / (1 + math.cos(math.pi * (k - 1) / steps))
                  * (opt.lr - eta_min) + eta_min)
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def score_from_eps(eps: torch.Tensor, sigma: torch.Tensor | float) -> torch.Tensor:
    """The score of the noised data from predicted noise: grad log p_t = -eps / s_t."""
    if isinstance(sigma, torch.Tensor):
        sigma = sigma.view((-1,) + (1,) * (eps.dim() - 1)) if sigma.dim() else sigma
    return -eps / sigma


@torch.no_grad()
def ddpm_sample(model: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], sched: Schedule,
                n: int, dim: int = 2, generator: torch.Generator | None = None,
                x_T: torch.Tensor | None = None) -> torch.Tensor:
    """Ancestral DDPM sampling (Ho et al., 2020, Alg. 2) from x_T ~ N(0, I) to x_0."""
    x = torch.randn(n, dim, generator=generator) if x_T is None else x_T.clone()
    betas = sched.betas.float()
    abar = sched.alpha_bar.float()
    for t in reversed(range(sched.T)):
        tt = torch.full((len(x),), t, dtype=torch.long)
        eps = model(x, tt)
        x = (x - betas[t] / (1 - abar[t]).sqrt() * eps) / (1 - betas[t]).sqrt()
        if t > 0:
            x = x + betas[t].sqrt() * torch.randn(x.shape, generator=generator)
    return x
