"""The noise schedule of a discrete-time, variance-preserving diffusion (DDPM).

Shared by chapter 10 (SMaRt), which noises generated samples with it, and chapter 11
(diffusion backdoors), which samples with it; each chapter writes its own model,
loss and sampler. With a_t = sqrt(alpha_bar_t) and s_t = sqrt(1 - alpha_bar_t),

    x_t = a_t x_0 + s_t eps,   alpha_bar_t = prod_{s <= t} (1 - beta_s).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Schedule"]


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
