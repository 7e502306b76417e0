"""Chapter 11: BadDiffusion's poisoning, TERD's reversed loss and its two stages, the
likelihood-ratio input test and the KL model statistic; the paper claims hold for a
trained backdoored bank and fail for broken defences."""
import math

import pytest
import torch
from helpers import chapter_defs

ch = chapter_defs("ch11_diffusion_backdoors")


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ---- data, triggers, the poisoned forward process (Eqs. 2-3) ----------------------

def test_digits_triggers_and_targets():
    x = ch.load_digits()
    assert x.shape == (1797, ch.D) and x.min() >= -1 and x.max() <= 1
    r = ch.box_trigger(2, 2)
    assert r.norm() == pytest.approx(math.sqrt(55)) and (r == 0).sum() == 9
    y = ch.targets()
    assert y.shape == (3, ch.D) and set(y.unique().tolist()) == {-1.0, 1.0}
    # the targets are off the data: far from every digit
    assert torch.cdist(y, x).min() ** 2 / ch.D > 0.2


def test_poisoned_batch_follows_eqs_2_and_3():
    g = gen(1)
    M, B = 2, 5
    x0 = torch.randn(M, B, ch.D, generator=g)
    eps = torch.randn(M, B, ch.D, generator=g)
    t = torch.randint(0, ch.T, (M, B), generator=g)
    trig, targ = torch.randn(M, ch.D, generator=g), torch.randn(M, ch.D, generator=g)
    poisoned = torch.tensor([[True] * B, [False] * B])[..., None]
    x, goal = ch.poisoned_batch(x0, t, eps, poisoned, trig, targ)
    a, s, r_t = ch.ALPHA[t][..., None], ch.SIGMA[t][..., None], ch.R_COEF[t][..., None]
    assert torch.allclose(x[0], (a * targ[:, None] + (1 - a) * trig[:, None]
                                 + s * eps)[0], atol=1e-6)
    assert torch.allclose(x[1], (a * x0 + s * eps)[1], atol=1e-6)
    assert torch.allclose(goal[0], eps[0] + r_t[0] * trig[0], atol=1e-6)
    assert torch.allclose(goal[1], eps[1])


def test_R_t_matches_the_posterior_mean_of_the_poisoned_chain():
    # Eq. 2's chain minus r is a plain DDPM chain from y - r; Eq. 3's eps-target puts
    # the model's reverse mean on that chain's posterior mean
    beta, abar = ch.SCHED.betas, ch.SCHED.alpha_bar
    g = gen(2)
    y, r, e = (torch.randn(ch.D, generator=g, dtype=torch.float64) for _ in range(3))
    for t in (1, 10, 50, 99):
        a_t, ab, ab_prev = 1 - beta[t], abar[t], abar[t - 1]
        x_t = ab.sqrt() * y + (1 - ab.sqrt()) * r + (1 - ab).sqrt() * e  # Eq. 2
        post = r + (ab_prev.sqrt() * beta[t] / (1 - ab)) * (y - r) + \
            (a_t.sqrt() * (1 - ab_prev) / (1 - ab)) * (x_t - r)
        eps_model = e + float(ch.R_COEF[t]) * r  # Eq. 3
        model_mean = (x_t - beta[t] / (1 - ab).sqrt() * eps_model) / a_t.sqrt()
        assert torch.allclose(model_mean, post, atol=1e-4)


# ---- the bank of eps-networks -------------------------------------------------------

def test_bank_models_are_independent_and_copies_are_exact():
    torch.manual_seed(0)
    bank = ch.EpsBank(3, hidden=16)
    x = torch.randn(3, 4, ch.D)
    t = torch.randint(0, ch.T, (3, 4))
    out = bank(x, t)
    assert out.shape == (3, 4, ch.D)
    x2 = x.clone()
    x2[1] += 1.0  # changing model 1's input changes only model 1's output
    out2 = bank(x2, t)
    assert torch.equal(out[0], out2[0]) and torch.equal(out[2], out2[2])
    twin = ch.copies(bank, 2)
    y = twin(x[:1].expand(2, -1, -1), t[:1].expand(2, -1))
    assert torch.allclose(y[0], out[0], atol=1e-6) and torch.allclose(y[1], out[0],
                                                                       atol=1e-6)


def test_training_a_bank_trains_each_model_as_if_alone():
    # model 0's trajectory does not depend on model 1: change model 1's weights and
    # its poisoning, train both banks on the same draws, model 0 ends the same
    data = ch.load_digits()[:200]
    torch.manual_seed(1)
    bank_a = ch.EpsBank(2, hidden=16)
    bank_b = ch.copies(bank_a, 2)
    with torch.no_grad():
        for p, q in zip(bank_b.parameters(), bank_a.parameters()):
            p.copy_(q)
            p[1].add_(0.1 * torch.randn_like(p[1]))
    trig, targ = torch.randn(2, ch.D), torch.randn(2, ch.D)
    ch.train_bank(bank_a, data, 5, 8, 1e-3, torch.tensor([0.0, 0.0]), trig, targ, gen(3))
    ch.train_bank(bank_b, data, 5, 8, 1e-3, torch.tensor([0.0, 0.9]), trig, targ, gen(3))
    for p, q in zip(bank_a.parameters(), bank_b.parameters()):
        assert torch.allclose(p[0], q[0], atol=1e-6)
        assert not torch.allclose(p[1], q[1])


# ---- the samplers ------------------------------------------------------------------

def test_ddim_steps_and_clipping():
    assert ch.DDIM_T.tolist() == list(range(90, -1, -10))
    torch.manual_seed(2)
    bank = ch.EpsBank(1, hidden=16)
    x = 3 * torch.randn(1, 8, ch.D)
    clipped = ch.ddim(bank, x, clip=True)
    assert clipped.abs().max() <= 1 + 1e-6
    x.requires_grad_(True)
    ch.ddim(bank, x).sum().backward()  # differentiable through the sampler
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


# ---- the reversed loss (Eq. 4) -----------------------------------------------------

def test_reversed_loss_vanishes_for_a_model_that_knows_its_image():
    g = gen(4)
    y, k = torch.randn(ch.D, generator=g), torch.randn(ch.D, generator=g)
    oracle = ch.KnowsItsImage(y, 0.3, k)
    x0 = y.expand(1, 2, 16, ch.D)
    t = torch.randint(0, ch.T, (1, 2, 16), generator=g)
    mu = torch.zeros(1, 2, ch.D)
    assert ch.reversed_loss(oracle, mu, x0, t, False, g).abs().max() <= ch.C_CANCEL
    assert ch.plain_loss(oracle, mu, x0, t, False, g).min() > 0.01


def test_reversed_loss_of_the_identity_is_zero_near_T_for_any_mu():
    # a model that predicts its input as noise: residuals (1 - s_t) eps - a_t x0 - mu
    # differ only by (1 - s_t)(eps_1 - eps_2), tiny near T: every mu looks like 0
    class Identity(torch.nn.Module):
        M = 1

        def forward(self, x, t):
            return x

    g = gen(5)
    x0 = torch.randn(1, 3, 8, ch.D, generator=g)
    t = torch.randint(ch.T - 10, ch.T, (1, 3, 8), generator=g)
    mu = torch.randn(1, 3, ch.D, generator=g)
    assert ch.reversed_loss(Identity(), mu, x0, t, True, g).abs().max() < 1e-5


# ---- detection (Eqs. 8-10) ---------------------------------------------------------

def test_likelihood_ratio_flag_matches_the_gaussian_log_densities():
    g = gen(6)
    mu = torch.randn(ch.D, generator=g)
    x = torch.randn(500, ch.D, generator=g) + 0.5 * mu
    normal = torch.distributions.Normal
    ratio = (normal(mu, 1.0).log_prob(x) - normal(0.0, 1.0).log_prob(x)).sum(-1)
    assert torch.equal(ch.flag(x, mu), ratio > 0)


@pytest.mark.parametrize("norm", [2.0, 4.0, 7.4])
def test_closed_form_rates_match_simulation_and_the_bayes_bound(norm):
    g = gen(7)
    r = torch.randn(ch.D, generator=g)
    r = norm * r / r.norm()
    mu = 1.1 * r + 0.3 * torch.randn(ch.D, generator=g)
    tpr, tnr = ch.rates_closed_form(mu[None], r[None])
    xp = torch.randn(40000, ch.D, generator=g) + r
    xc = torch.randn(40000, ch.D, generator=g)
    assert float(ch.flag(xp, mu).float().mean()) == pytest.approx(float(tpr), abs=0.01)
    assert float(1 - ch.flag(xc, mu).float().mean()) == pytest.approx(float(tnr),
                                                                      abs=0.01)
    bayes_tpr, bayes_tnr = ch.rates_closed_form(r[None], r[None])
    assert float(bayes_tpr) == pytest.approx(float(ch.Phi(norm / 2)), abs=1e-5)
    assert float(bayes_tnr) == pytest.approx(float(ch.Phi(norm / 2)), abs=1e-5)


def test_kl_stats_closed_form():
    mu = torch.tensor([[0.0, 1.0, 2.0, -2.0]])
    m, v = ch.kl_stats(mu)
    kl = mu ** 2 / 2
    assert torch.allclose(m, kl.mean(-1)) and torch.allclose(v, kl.var(-1))
    gamma = torch.full_like(mu, 0.5)
    m2, _ = ch.kl_stats(torch.zeros_like(mu), gamma)
    assert torch.allclose(m2, torch.full((1,), -math.log(0.5) + 0.5 * (0.25 - 1)))


def test_thresholds_are_the_chapters():
    for ratio in (ch.C_RELERR_VS_NOTHING, ch.C_MSE_VS_NOTHING, ch.C_MSE_VS_ELIJAH,
                  ch.C_ERR_VS_NOTHING, ch.C_ERR_VS_ELIJAH):
        assert 0 < ratio < 1  # superiority: TERD strictly better than the comparison
    assert ch.C_COS_VS_NOTHING > 0 and ch.C_SEP_VS_PLAIN >= 1 and ch.C_SEP_VS_NOTHING >= 1
    assert float(ch.Phi(-math.sqrt(55) / 2)) < 1e-3  # the Bayes error at our norm


# ---- the paper claims on a trained bank, and broken defences ------------------------

@pytest.fixture(scope="module")
def trained():
    """A benign model and two fine-tuned copies (one backdoored), smaller than the
    default tier but with a working backdoor: (bank, trigger, target)."""
    torch.manual_seed(0)
    g = gen(0)
    digits = ch.load_digits()
    base = ch.EpsBank(1, hidden=128)
    zeros = (torch.zeros(1), torch.zeros(1, ch.D), torch.zeros(1, ch.D))
    ch.train_bank(base, digits, 800, 96, ch.LR_PRE, *zeros, g)
    bank = ch.copies(base, 2)
    trig = torch.stack([ch.box_trigger(2, 2), torch.zeros(ch.D)])
    targ = torch.stack([ch.targets()[1], torch.zeros(ch.D)])
    ch.train_bank(bank, digits, 1000, 96, ch.LR_FT, torch.tensor([0.7, 0.0]), trig,
                  targ, g)
    return bank, trig[0], targ[0]


def reverse(bank, init, lam=5e-5, loss=None):
    """TERD's two stages (or the plain-loss ablation) with the tests' budget."""
    kw = {} if loss is None else {"loss": loss}
    return ch.reverse_trigger(bank, init, gen(7), lambda: gen(17), lam, 300, 30, 8, 8,
                              **kw)


@pytest.fixture(scope="module")
def references(trained):
    """The starting triggers (doing nothing), Elijah's and the plain loss's reversions
    from the tests' initialisation, and TERD's."""
    bank, _, _ = trained
    init = -torch.rand(2, 4, ch.D, generator=gen(5))
    return dict(init=init, nothing=init[:, 0], elijah=ch.elijah(bank, init[:, 0], 100, gen(8)),
                plain=reverse(bank, init, loss=ch.plain_loss), terd=reverse(bank, init))


def measures(bank, mu, r, y):
    """The chapter's measures of reversed triggers mu (2, D) on model 0 (backdoored
    with trigger r, target y) and model 1 (benign)."""
    noise = torch.randn(1, 64, ch.D, generator=gen(1))
    x = ch.generate(bank, (noise + mu[:, None]).expand(2, -1, -1).clone(), "ancestral",
                    gen(3))
    tpr, tnr = ch.rates_closed_form(mu[:1], r[None])
    kl = ch.kl_stats(mu)[0]
    return dict(relerr=float((mu[0] - r).norm() / r.norm()),
                cos=float(torch.nn.functional.cosine_similarity(mu[0], r, dim=0)),
                mse=float(((x[0] - y) ** 2).mean()),
                err=float(1 - torch.minimum(tpr, tnr)[0]),
                sep=float(kl[0] / kl[1]))


def claims(trained, references, mu):
    """Each paper claim of the chapter for reversed triggers mu, True where it holds."""
    bank, r, y = trained
    m = measures(bank, mu, r, y)
    nothing = measures(bank, references["nothing"], r, y)
    elijah = measures(bank, references["elijah"], r, y)
    plain = measures(bank, references["plain"], r, y)
    return {"relerr vs nothing": m["relerr"] / nothing["relerr"] <= ch.C_RELERR_VS_NOTHING,
            "cos vs nothing": m["cos"] - nothing["cos"] >= ch.C_COS_VS_NOTHING,
            "mse vs nothing": m["mse"] / nothing["mse"] <= ch.C_MSE_VS_NOTHING,
            "mse vs elijah": m["mse"] / elijah["mse"] <= ch.C_MSE_VS_ELIJAH,
            "err vs nothing": m["err"] / nothing["err"] <= ch.C_ERR_VS_NOTHING,
            "err vs elijah": m["err"] / elijah["err"] <= ch.C_ERR_VS_ELIJAH,
            "sep vs plain": m["sep"] - plain["sep"] >= ch.C_SEP_VS_PLAIN,
            "sep vs nothing": m["sep"] - nothing["sep"] >= ch.C_SEP_VS_NOTHING}


@pytest.fixture(scope="module")
def shrunk(trained, references):
    """The wrong sign of the l1 term with a large weight: mu is pulled to 0."""
    return reverse(trained[0], references["init"], lam=-5e-2)


@pytest.mark.slow
def test_terd_holds_every_paper_claim_and_the_loss_geometry_is_right(trained,
                                                                    references):
    bank, r, _ = trained
    init = references["init"]
    probe = torch.stack([r.expand(2, ch.D), torch.zeros(2, ch.D), init[:, 0]], 1)
    geom = ch.fixed_refine_loss(bank, probe, 64, lambda: gen(23))
    assert geom[0, 0] < geom[0, 1] and geom[0, 0] < geom[0, 2]
    held = claims(trained, references, references["terd"])
    assert all(held.values()), held


# one broken defence per paper claim, each failing that claim
@pytest.mark.slow
def test_wrong_l1_sign_fails_relative_error_vs_doing_nothing(trained, references, shrunk):
    assert not claims(trained, references, shrunk)["relerr vs nothing"]


@pytest.mark.slow
def test_lengthening_the_start_fails_cosine_vs_doing_nothing(trained, references):
    # a "defence" that only rescales its starting trigger keeps its direction
    assert not claims(trained, references, 2 * references["nothing"])["cos vs nothing"]


@pytest.mark.slow
def test_wrong_l1_sign_fails_target_mse_vs_doing_nothing(trained, references, shrunk):
    assert not claims(trained, references, shrunk)["mse vs nothing"]


@pytest.mark.slow
def test_plain_loss_fails_target_mse_vs_elijah(trained, references):
    assert not claims(trained, references, references["plain"])["mse vs elijah"]


@pytest.mark.slow
def test_wrong_l1_sign_fails_input_detection_vs_doing_nothing(trained, references,
                                                             shrunk):
    assert not claims(trained, references, shrunk)["err vs nothing"]


@pytest.mark.slow
def test_plain_loss_fails_input_detection_vs_elijah(trained, references):
    assert not claims(trained, references, references["plain"])["err vs elijah"]


@pytest.mark.slow
def test_no_reversion_fails_model_detection_vs_plain_loss(trained, references):
    assert not claims(trained, references, references["nothing"])["sep vs plain"]


@pytest.mark.slow
def test_plain_loss_fails_model_detection_vs_doing_nothing(trained, references):
    assert not claims(trained, references, references["plain"])["sep vs nothing"]


def test_ancestral_sampler_with_the_exact_predictor_recovers_gaussian_data():
    # N(m, c^2 I) data has the exact noise predictor s_t (x_t - a_t m) / (a_t^2 c^2 + s_t^2)
    m, c = torch.linspace(-0.5, 0.5, ch.D), 0.3

    def exact(x, t):
        a, s = ch.ALPHA[t][..., None], ch.SIGMA[t][..., None]
        return s * (x - a * m) / (a**2 * c**2 + s**2)

    x = ch.ancestral(exact, torch.randn(1, 6000, ch.D, generator=gen(1)), gen(2))[0]
    assert torch.allclose(x.mean(0), m, atol=0.03)
    assert torch.allclose(x.std(0), torch.full((ch.D,), c), atol=0.03)
