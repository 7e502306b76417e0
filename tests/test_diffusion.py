"""icmlbook.diffusion: DDPM's noise schedule, variance-preserving and rising."""
import math

import pytest
import torch

from icmlbook.diffusion import Schedule


def test_schedule_is_variance_preserving_and_monotone():
    sched = Schedule.linear()
    assert len(sched.betas) == 1000
    assert torch.allclose(sched.alpha**2 + sched.sigma**2, torch.ones(1000), atol=1e-6)
    assert bool((sched.sigma[1:] > sched.sigma[:-1]).all())
    assert sched.sigma[0] == pytest.approx(math.sqrt(1e-4), rel=1e-4)
    assert sched.sigma[-1] > 0.99
    assert torch.allclose(sched.alpha_bar, torch.cumprod(1 - sched.betas, 0))
    with pytest.raises(ValueError):
        Schedule.linear(T=10, beta_min=0.2, beta_max=0.1)
