"""icmlbook.diffusion: the schedule, the forward process, the score, training and sampling.

Gaussian data N(m, c^2 I) has an exact noise predictor,
eps*(x_t, t) = s_t (x_t - a_t m) / (a_t^2 c^2 + s_t^2), which the tests use as an oracle.
"""
import math

import pytest
import torch

from icmlbook.diffusion import (EpsMLP, Schedule, ddpm_sample, diffusion_loss, q_sample,
                                score_from_eps, train_eps_model)

M, C = torch.tensor([1.0, -0.5]), 0.3  # the Gaussian oracle's mean and std


def gaussian_eps(sched):
    def eps(x, t):
        a, s = sched.alpha[t].unsqueeze(-1), sched.sigma[t].unsqueeze(-1)
        return s * (x - a * M) / (a**2 * C**2 + s**2)
    return eps


def test_schedule_is_variance_preserving_and_monotone():
    sched = Schedule.linear()
    assert sched.T == 1000
    assert torch.allclose(sched.alpha**2 + sched.sigma**2, torch.ones(1000), atol=1e-6)
    assert bool((sched.sigma[1:] > sched.sigma[:-1]).all())
    assert sched.sigma[0] == pytest.approx(math.sqrt(1e-4), rel=1e-4)
    assert sched.sigma[-1] > 0.99
    t = sched.index_of_sigma(0.1)
    assert sched.sigma[t] >= 0.1 > sched.sigma[t - 1]
    with pytest.raises(ValueError):
        Schedule.linear(T=10, beta_min=0.2, beta_max=0.1)


def test_q_sample_formula():
    sched = Schedule.linear(T=50, beta_min=1e-3, beta_max=0.2)
    x0, eps = torch.randn(7, 3), torch.randn(7, 3)
    t = torch.arange(7) * 7
    xt = q_sample(x0, t, eps, sched)
    assert torch.allclose(xt, sched.alpha[t, None] * x0 + sched.sigma[t, None] * eps)


def test_eps_mlp_shapes_and_step_dependence():
    model = EpsMLP(dim=3, hidden=(16, 16))
    x = torch.randn(4, 5, 3)
    out = model(x, torch.full((4, 5), 10))
    assert out.shape == (4, 5, 3)
    assert not torch.allclose(out, model(x, torch.full((4, 5), 500)))


def test_score_from_eps_matches_gaussian_score():
    sched = Schedule.linear()
    t = torch.tensor([5, 50, 300])
    x = torch.randn(3, 2)
    a, s = sched.alpha[t].unsqueeze(-1), sched.sigma[t].unsqueeze(-1)
    exact_score = -(x - a * M) / (a**2 * C**2 + s**2)
    assert torch.allclose(score_from_eps(gaussian_eps(sched)(x, t), sched.sigma[t]), exact_score,
                          atol=1e-5)


def test_exact_predictor_beats_zero_in_the_loss():
    sched = Schedule.linear()
    g = torch.Generator().manual_seed(0)
    x0 = M + C * torch.randn(20000, 2, generator=g)
    exact = diffusion_loss(gaussian_eps(sched), x0, sched, generator=g)
    zero = diffusion_loss(lambda x, t: torch.zeros_like(x), x0, sched, generator=g)
    assert float(zero) == pytest.approx(1.0, abs=0.03)
    assert float(exact) < 0.8 * float(zero)


def test_ddpm_sampler_with_the_exact_predictor_recovers_the_data():
    sched = Schedule.linear(T=200, beta_min=1e-3, beta_max=0.1)
    x = ddpm_sample(gaussian_eps(sched), sched, n=6000, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(x.mean(0), M, atol=0.05)
    assert torch.allclose(x.std(0), torch.full((2,), C), atol=0.05)


@pytest.mark.slow
def test_training_learns_the_gaussian_predictor():
    torch.manual_seed(0)
    sched = Schedule.linear()
    model = EpsMLP(dim=2, hidden=(64, 64))
    losses = train_eps_model(model, lambda n: M + C * torch.randn(n, 2), sched, steps=400,
                             t_max=100)
    assert len(losses) == 400 and sum(losses[-50:]) < sum(losses[:50])
    t = torch.randint(10, 100, (2000,))
    x = q_sample(M + C * torch.randn(2000, 2), t, torch.randn(2000, 2), sched)
    with torch.no_grad():
        cos = torch.nn.functional.cosine_similarity(model(x, t), gaussian_eps(sched)(x, t), dim=-1)
    assert float(cos.mean()) > 0.9


def test_training_matches_torch_adam_with_cosine_annealing_bit_for_bit():
    """train_eps_model trains to the bits of torch.optim.Adam + CosineAnnealingLR (the
    optimiser it replaced), from a data tensor and from a sampler alike."""
    sched = Schedule.linear()
    data = M + C * torch.randn(64, 2, generator=torch.Generator().manual_seed(1))
    for source in (data, lambda n: M + C * torch.randn(n, 2)):
        torch.manual_seed(0)
        ours = EpsMLP(dim=2, hidden=(16, 16))
        theirs = EpsMLP(dim=2, hidden=(16, 16))
        theirs.load_state_dict(ours.state_dict())
        torch.manual_seed(3)
        train_eps_model(ours, source, sched, steps=25, batch=32, lr=5e-3,
                        generator=torch.Generator().manual_seed(2))
        torch.manual_seed(3)
        gen = torch.Generator().manual_seed(2)
        opt = torch.optim.Adam(theirs.parameters(), lr=5e-3)
        decay = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 25, eta_min=0.05 * 5e-3)
        for _ in range(25):
            x0 = (source(32) if callable(source)
                  else source[torch.randint(0, len(source), (32,), generator=gen)])
            t = torch.randint(0, sched.T, (32,), generator=gen)
            loss = diffusion_loss(theirs, x0, sched, t, gen)
            opt.zero_grad()
            loss.backward()
            opt.step()
            decay.step()
        for p, q in zip(ours.parameters(), theirs.parameters()):
            assert torch.equal(p, q)
