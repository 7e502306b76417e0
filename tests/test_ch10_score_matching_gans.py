"""Chapter 10 (SMaRt): the exact score, the regularizer's invariants, and claims that fail
when the method is broken."""
import pytest
import torch
from helpers import chapter_defs

from icmlbook.diffusion import Schedule

ch = chapter_defs("ch10_score_matching_gans")
SCHED = Schedule.linear()
MEANS = ch.spiral_means()
S = ch.DATA_STD


def band(n, g, lo=25, hi=60):
    t = torch.randint(lo, hi + 1, (n,), generator=g)
    return t, SCHED.alpha[t].unsqueeze(-1), SCHED.sigma[t].unsqueeze(-1)


def autograd_error(eps_star, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (1.5 * torch.randn(400, 2, generator=g, dtype=torch.float64)).requires_grad_(True)
    t = torch.randint(0, 300, (400,), generator=g)
    a, s = SCHED.alpha[t].double().unsqueeze(-1), SCHED.sigma[t].double().unsqueeze(-1)
    grad = torch.autograd.grad(ch.gmm_log_pt(x, a, s, MEANS.double(), S).sum(), x)[0]
    return float((eps_star(x, a, s, MEANS.double(), S) + s * grad).abs().max().detach())


def test_exact_eps_is_minus_sigma_times_the_score():
    assert autograd_error(ch.gmm_eps_star) <= ch.C_SCORE_ERR


def test_expanded_eps_star_is_eq_3():
    # the form used in training: Eq. 3 with the square expanded into matrix products
    assert autograd_error(ch.gmm_eps_star_fast) <= ch.C_SCORE_ERR
    g = torch.Generator().manual_seed(5)
    t, a, s = band(2000, g)
    x = 4.4 * torch.rand(2000, 2, generator=g) - 2.2
    err = (ch.gmm_eps_star_fast(x, a, s, MEANS, S) - ch.gmm_eps_star(x, a, s, MEANS, S))
    assert float(err.abs().max()) <= ch.C_FAST_ERR


def test_broken_eps_fails_the_score_claim():
    # forgetting to scale the centres by a_t (noising the data without shrinking it)
    def no_shrink(x, a, sigma, means, s):
        return ch.gmm_eps_star(x, torch.ones_like(a), sigma, means, s)
    assert autograd_error(no_shrink) > ch.C_SCORE_ERR


@pytest.mark.slow
def test_log_pt_is_a_normalized_density():
    a, s = SCHED.alpha[40].view(1, 1), SCHED.sigma[40].view(1, 1)
    xs = torch.linspace(-3, 3, 301)
    grid = torch.stack(torch.meshgrid(xs, xs, indexing="xy"), -1).reshape(-1, 2)
    mass = ch.gmm_log_pt(grid, a, s, MEANS, S).exp().sum() * (6 / 300) ** 2
    assert float(mass) == pytest.approx(1.0, abs=0.01)


def test_real_data_denoise_better_than_off_manifold_points():
    g = torch.Generator().manual_seed(1)
    fn = ch.exact_eps_fn(MEANS, S, SCHED)
    real = ch.sample_gmm(MEANS, S, 4000, g).view(1, -1, 2)
    off = real + 0.3 * torch.nn.functional.normalize(torch.randn(real.shape, generator=g), dim=-1)
    loss_real = float(ch.smart_loss(real, fn, SCHED, 25, 60, g))
    loss_off = float(ch.smart_loss(off, fn, SCHED, 25, 60, g))
    assert loss_real < 1.0  # the same eps in input and target: below the zero predictor's 1
    assert loss_off > 2 * loss_real


def test_regularizer_force_points_at_the_manifold():
    g = torch.Generator().manual_seed(2)
    on = ch.sample_gmm(MEANS, 0.0, 300, g)
    off = on + 0.25 * torch.nn.functional.normalize(torch.randn(300, 2, generator=g), dim=-1)
    keep = ch.manifold_distance(off, MEANS) > 0.15  # really off (not onto another arm)
    x = off[keep].expand(16, -1, -1).clone().requires_grad_(True)
    loss = ch.smart_loss(x, ch.exact_eps_fn(MEANS, S, SCHED), SCHED, 25, 60, g).sum()
    force = -torch.autograd.grad(loss, x)[0].mean(0)
    nearest = MEANS[torch.cdist(off[keep], MEANS).argmin(1)]
    cos = torch.nn.functional.cosine_similarity(force, nearest - off[keep], dim=-1)
    assert float(cos.mean()) > 0.9


def test_ensemble_members_are_independent_and_select_copies():
    torch.manual_seed(0)
    E = ch.EnsembleMLP(3, [2, 8, 8, 1])
    x = torch.randn(3, 5, 2)
    out = E(x)
    out[0].sum().backward()
    assert float(E.weights[0].grad[1:].abs().sum()) == 0.0
    single = E.select([1, 1])
    assert torch.allclose(single(x[[1, 1]]), out[[1, 1]].detach())
    single.weights[0].data += 1  # a copy, not a view
    assert not torch.allclose(single.weights[0][0], E.weights[0][1])


@pytest.mark.slow
def test_metrics_on_real_and_wrong_samples():
    g = torch.Generator().manual_seed(3)
    real = ch.sample_gmm(MEANS, S, 4000, g)
    assert float(ch.off_manifold_fraction(real, MEANS)) < 0.001
    assert int(ch.coverage(real, MEANS)) == 16
    half = MEANS[: len(MEANS) // 2]
    assert int(ch.coverage(ch.sample_gmm(half, S, 4000, g), MEANS)) == 8
    other = ch.sample_gmm(MEANS, S, 1000, g)
    assert float(ch.mmd(real[:1000], other)) < 0.003
    assert float(ch.mmd(ch.sample_gmm(half, S, 1000, g), other)) > 0.01


# ---- the claims fail for broken variants -----------------------------------------------
# One reduced paired experiment (2 replicas instead of 8, the default tier's step counts)
# with the good arms and the broken ones side by side, trained once for all the tests below.

@pytest.fixture(scope="module")
def arms():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)

    def sample(n):
        return ch.sample_gmm(MEANS, S, n, g)

    G0 = ch.EnsembleMLP(2, [2, ch.HIDDEN, ch.HIDDEN, ch.HIDDEN, 2])
    D0 = ch.EnsembleMLP(2, [2, ch.HIDDEN, ch.HIDDEN, ch.HIDDEN, 1])
    ch.train_gan(G0, D0, sample, 600, generator=g)
    exact = ch.exact_eps_fn(MEANS, S, SCHED)
    # a "score model" that knows only the inner half of the spiral
    half = ch.exact_eps_fn(MEANS[: len(MEANS) // 2], S, SCHED)
    untrained = ch.EpsMLP(dim=2, hidden=(128, 128)).requires_grad_(False)
    names = ["GAN", "good", "sign flipped", "untrained score model",
             "score of half the data"]
    lams = [0.0, 0.3, -0.3, 0.3, 0.3]
    fns = [None, exact, exact, lambda x, t: untrained(x, t), half]
    final, _, _, _ = ch.compare_arms(G0, D0, lams, fns, sample, MEANS, 800, SCHED,
                                     (25, 60), 1, 2000, sample(1000), g)
    # the matched-compute baseline: the same warmed-up GANs, plain, COMPUTE_FACTOR x 800
    longer, _, _, _ = ch.compare_arms(G0, D0, [0.0], [None], sample, MEANS,
                                      int(ch.COMPUTE_FACTOR * 800), SCHED, (25, 60), 1,
                                      2000, sample(1000), g)
    out = {name: {k: float(v[i].mean()) for k, v in final.items()}
           for i, name in enumerate(names)}
    out["GAN, longer"] = {k: float(v[0].mean()) for k, v in longer.items()}
    return out


def test_good_arm_passes_the_off_manifold_claims(arms):
    assert arms["good"]["off"] / arms["GAN"]["off"] <= ch.C_OFF_EXACT


def test_sign_flipped_regularizer_fails_the_off_manifold_claims(arms):
    assert arms["sign flipped"]["off"] / arms["GAN"]["off"] > ch.C_OFF_EXACT
    assert arms["sign flipped"]["off"] / arms["GAN"]["off"] > ch.C_OFF_LEARNED


def test_sign_flipped_regularizer_fails_the_matched_compute_finding(arms):
    ratio = arms["sign flipped"]["off"] / arms["GAN, longer"]["off"]
    assert ratio > ch.C_VS_MATCHED


def test_good_arm_goes_the_papers_way_in_the_matched_compute_finding(arms):
    assert arms["good"]["off"] / arms["GAN, longer"]["off"] <= ch.C_VS_MATCHED


def test_untrained_score_model_fails_the_learned_score_claim(arms):
    assert arms["untrained score model"]["off"] / arms["GAN"]["off"] > ch.C_OFF_LEARNED


def test_score_of_half_the_data_fails_the_diversity_claims(arms):
    a, gan = arms["score of half the data"], arms["GAN"]
    assert a["cov"] - gan["cov"] < ch.C_COV_LEARNED
    assert a["mmd"] / gan["mmd"] > ch.C_MMD_LEARNED


def test_matched_compute_baseline_is_a_trained_gan(arms):
    # the baseline is not set up to lose: given more steps, it is no worse than the GAN
    assert arms["GAN, longer"]["off"] <= 1.1 * arms["GAN"]["off"]


def step_flops(lam, draws):
    """Operations of one training step of a 5-member ensemble, counted by the chapter's
    flops(), with an (untrained) learned-score network at weight lam."""
    g = torch.Generator().manual_seed(0)
    G = ch.EnsembleMLP(5, [2, ch.HIDDEN, ch.HIDDEN, ch.HIDDEN, 2])
    D = ch.EnsembleMLP(5, [2, ch.HIDDEN, ch.HIDDEN, ch.HIDDEN, 1])
    model = ch.EpsMLP(dim=2, hidden=(128, 128)).requires_grad_(False)
    return ch.flops(lambda: ch.train_gan(
        G, D, lambda n: ch.sample_gmm(MEANS, S, n, g), 1, lam=[lam] * 5,
        eps_fns=[lambda x, t: model(x, t)] * 5, sched=SCHED, generator=g, draws=draws))


def test_matched_compute_budget_covers_one_draw_but_not_four():
    plain = step_flops(0.0, 1)
    assert step_flops(0.3, ch.LEARNED_DRAWS) / plain <= ch.C_FLOP_RATIO
    # the four-draw estimator costs more than the baseline's extra steps pay for
    assert step_flops(0.3, 4) / plain > ch.C_FLOP_RATIO


@pytest.mark.slow
def test_regularizer_from_scratch_collapses_a_ring_gan():
    """The widget's ring preset: trained from scratch, lambda = 0.3 keeps one or two of 8
    isolated modes, the plain GAN all 8 (the brief's mode-dropping pitfall)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ring = 2.0 * torch.stack([torch.cos(torch.arange(8) * torch.pi / 4),
                              torch.sin(torch.arange(8) * torch.pi / 4)], dim=1)
    G = ch.EnsembleMLP(2, [2, ch.HIDDEN, ch.HIDDEN, ch.HIDDEN, 2])
    D = ch.EnsembleMLP(2, [2, ch.HIDDEN, ch.HIDDEN, ch.HIDDEN, 1])
    fn = ch.exact_eps_fn(ring, 0.05, SCHED)
    ch.train_gan(G, D, lambda n: ch.sample_gmm(ring, 0.05, n, g), 1500, lam=[0.0, 0.3],
                 eps_fns=[fn, fn], sched=SCHED, t_band=(25, 60), generator=g)
    with torch.no_grad():
        pts = G(torch.randn(2, 1500, 2, generator=g))
    plain, regularized = (int(ch.coverage(p, ring, 8)) for p in pts)
    assert plain == 8 and regularized <= 2


# ---- the diffusion model: noising, the noise predictor, its training ---------------
# Gaussian data N(m, c^2 I) has an exact noise predictor,
# eps*(x_t, t) = s_t (x_t - a_t m) / (a_t^2 c^2 + s_t^2), the oracle of these tests.
M, C = torch.tensor([1.0, -0.5]), 0.3


def gaussian_eps(x, t):
    a, s = SCHED.alpha[t].unsqueeze(-1), SCHED.sigma[t].unsqueeze(-1)
    return s * (x - a * M) / (a**2 * C**2 + s**2)


def test_q_sample_formula():
    x0, eps = torch.randn(7, 3), torch.randn(7, 3)
    t = torch.arange(7) * 7
    xt = ch.q_sample(x0, t, eps, SCHED)
    assert torch.allclose(xt, SCHED.alpha[t, None] * x0 + SCHED.sigma[t, None] * eps)


def test_eps_mlp_shapes_and_step_dependence():
    model = ch.EpsMLP(dim=3, hidden=(16, 16))
    x = torch.randn(4, 5, 3)
    out = model(x, torch.full((4, 5), 10))
    assert out.shape == (4, 5, 3)
    assert not torch.allclose(out, model(x, torch.full((4, 5), 500)))


@pytest.mark.slow
def test_training_learns_the_gaussian_predictor():
    torch.manual_seed(0)
    model = ch.EpsMLP(dim=2, hidden=(64, 64))
    g = torch.Generator().manual_seed(1)
    losses = ch.train_eps_model(model, lambda n: M + C * torch.randn(n, 2, generator=g),
                                SCHED, steps=400, batch=256, lr=2e-3, t_max=100,
                                generator=g)
    assert len(losses) == 400 and sum(losses[-50:]) < sum(losses[:50])
    t = torch.randint(10, 100, (2000,), generator=g)
    x = ch.q_sample(M + C * torch.randn(2000, 2, generator=g), t,
                    torch.randn(2000, 2, generator=g), SCHED)
    with torch.no_grad():
        cos = torch.nn.functional.cosine_similarity(model(x, t), gaussian_eps(x, t), dim=-1)
    assert float(cos.mean()) > 0.9
