"""Chapter 08: the skew divergences' identities, the bounded gradient, the adaptive
schedule, and claims that fail when the implementation is broken."""
import copy
import random

import pytest
import torch
from helpers import chapter_defs

ch = chapter_defs("ch08_skew_kl_distillation")
torch.set_num_threads(1)


def logits_pair(seed=0, shape=(3, 5, 12), scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale, torch.randn(*shape, generator=g) * scale


# -- the divergences (Eqs. 1-4) ----------------------------------------------------------
def test_alpha_zero_recovers_kl_and_rkl():
    p, q = logits_pair()
    fkl = (p.softmax(-1) * (p.log_softmax(-1) - q.log_softmax(-1))).sum(-1)
    rkl = (q.softmax(-1) * (q.log_softmax(-1) - p.log_softmax(-1))).sum(-1)
    assert torch.allclose(ch.divergence("SKL", p, q, 0.0), fkl, atol=1e-5)
    assert torch.allclose(ch.divergence("FKL", p, q, 0.1), fkl, atol=1e-5)
    assert torch.allclose(ch.divergence("SRKL", p, q, 0.0), rkl, atol=1e-5)
    assert torch.allclose(ch.divergence("RKL", p, q, 0.1), rkl, atol=1e-5)


def test_skl_at_small_alpha_tends_to_kl_and_gradients_match_the_cross_entropy_form():
    # the authors' loss is the cross-entropy -sum p log q (no teacher entropy): same gradient
    p, q = logits_pair(1)
    q1, q2 = q.clone().requires_grad_(True), q.clone().requires_grad_(True)
    ch.divergence("SKL", p, q1, 0.0).sum().backward()
    (-(p.softmax(-1) * q2.log_softmax(-1)).sum(-1)).sum().backward()
    assert torch.allclose(q1.grad, q2.grad, atol=1e-5)
    assert torch.allclose(ch.divergence("SKL", p, q, 1e-6), ch.divergence("FKL", p, q, 0.0),
                          rtol=1e-2)


def test_alpha_one_vanishes():
    p, q = logits_pair(2)
    for kind in ("SKL", "SRKL"):
        assert ch.divergence(kind, p, q, 1.0).abs().max() < 1e-6


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 0.9])
def test_nonnegative_and_zero_iff_equal(alpha):
    p, q = logits_pair(3)
    for kind in ch.LOSSES:
        assert ch.divergence(kind, p, q, alpha).min() > 0
        assert ch.divergence(kind, p, p, alpha).abs().max() < 1e-6


def test_mixture_is_formed_in_probability_space():
    p, q = logits_pair(4)
    a = 0.3
    pp, qq = p.softmax(-1), q.softmax(-1)
    expected = (pp * (pp.log() - (a * pp + (1 - a) * qq).log())).sum(-1)
    assert torch.allclose(ch.skew_kl_logits(p, q, a), expected, atol=1e-5)
    geometric = (pp * (pp.log() - (a * pp.log() + (1 - a) * qq.log()))).sum(-1)
    assert not torch.allclose(ch.skew_kl_logits(p, q, a), geometric, atol=1e-2)


def test_skew_is_finite_when_the_student_underflows():
    p = torch.tensor([[0.0, 0.0, 0.0]])
    q = torch.tensor([[0.0, -200.0, -200.0]])  # the student's q on tokens 1, 2 underflows
    for kind in ch.LOSSES:
        assert torch.isfinite(ch.divergence(kind, p, q, 0.1)).all()


def test_masked_mean_ignores_masked_positions():
    x = torch.tensor([[1.0, 2.0, 100.0]])
    assert ch.masked_mean(x, torch.tensor([[1.0, 1.0, 0.0]])) == pytest.approx(1.5)


# -- the gradient (Eqs. 5-6) and its checks -----------------------------------------------
def random_probs(seed, n=64, V=20, temp=4.0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, V, generator=g, dtype=torch.float64) * temp).softmax(-1)
            for _ in range(2)]


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.5])
def test_analytic_gradient_matches_autograd_and_is_bounded(alpha):
    p, q = random_probs(5)
    g = ch.prob_gradient(ch.skl_probs, p, q, alpha)
    assert torch.allclose(g, ch.skl_grad_formula(p, q, alpha), rtol=1e-9, atol=1e-12)
    assert g.abs().max() <= (1 - alpha) / alpha * (1 + 1e-9)


def test_logit_gradient_eq6():
    p, q = logits_pair(6)
    a = 0.1
    z = q.clone().requires_grad_(True)
    ch.divergence("SKL", p, z, a).sum().backward()
    pp, qq = p.softmax(-1), q.softmax(-1)
    r = pp / (a * pp + (1 - a) * qq)
    eq6 = -(1 - a) * qq * (r - (qq * r).sum(-1, keepdim=True))
    assert torch.allclose(z.grad, eq6, atol=1e-5)


def test_forward_kl_gradient_is_unbounded_but_skl_is_not():
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    for tiny in (1e-4, 1e-6, 1e-8):
        q = torch.tensor([[tiny, 0.5, 0.25, 0.25 - tiny]], dtype=torch.float64)
        assert ch.prob_gradient(ch.fkl_probs, p, q, 0.0).abs().max() == pytest.approx(0.5 / tiny)
        assert ch.prob_gradient(ch.skl_probs, p, q, 0.1).abs().max() <= 9.0


def test_broken_log_space_mixture_fails_the_bound_claim():
    p, q = random_probs(7, temp=6.0)
    g = ch.prob_gradient(ch.skl_geometric_probs, p, q, 0.1)
    assert g.abs().max() / 9.0 > ch.C_GRAD_BOUND  # the bound check fails


def test_measuring_in_logit_space_fails_the_unbounded_claim():
    # a common confusion: the forward KL gradient w.r.t. logits (q - p) is bounded by 1
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    z = torch.log(torch.tensor([[1e-6, 0.5, 0.25, 0.25 - 1e-6]])).requires_grad_(True)
    ch.divergence("FKL", torch.log(p.clamp_min(1e-30)), z, 0.0).sum().backward()
    assert z.grad.abs().max() < ch.C_FKL_UNBOUNDED  # the unbounded check fails


# -- the adaptive schedule (Eqs. 7-8) ----------------------------------------------------
def test_phi_schedule_on_scripted_losses():
    phi, prev, out = 0.0, None, []
    for loss in [1.0, 1.05, 1.2, 1.1, 1.35]:
        phi, prev = ch.update_phi(phi, prev, loss, 0.1)
        out.append(round(phi, 10))
    assert out == [0.0, 0.0, 0.1, 0.1, 0.2]


def test_phi_is_capped_at_one():
    phi, prev = 0.95, 1.0
    phi, prev = ch.update_phi(phi, prev, 2.0, 0.1)
    assert phi == 1.0


def test_choose_source():
    assert ch.choose_source(0.3, 0.5, 0, 100, 0, 10) == "generate"  # r < phi_gen
    assert ch.choose_source(0.3, 0.5, 50, 100, 0, 10) == "generate"  # buffer not full
    assert ch.choose_source(0.3, 0.5, 50, 100, 10, 10) == "replay"  # r >= phi_gen = 0.25
    assert ch.choose_source(0.6, 0.5, 0, 100, 10, 10) == "data"
    assert ch.choose_source(0.0, 0.0, 0, 100, 0, 10) == "data"  # phi = 0: offline


def test_data_and_masks():
    x = ch.make_pool(8, random.Random(0))
    assert x.shape == (8, 1 + ch.PROMPT_LEN + ch.RESP_LEN)
    assert (x[:, 0] == ch.BOS).all() and (x[:, 1:] != ch.BOS).all()
    for row in x:
        assert ch.REVIEWS.accepts(ch.words_of(row[1:]), prefix=True)
    m = ch.response_mask(8)
    assert m.shape == (8, ch.PROMPT_LEN + ch.RESP_LEN)
    assert m[:, : ch.PROMPT_LEN].sum() == 0 and m[:, ch.PROMPT_LEN:].min() == 1


# -- the paper claims on a real (default-sized) run, and their broken variants --------
@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    rng = random.Random(0)
    pool = ch.make_pool(4096, rng)
    teacher = ch.make_model(48, 2, 4)
    ch.fit_lm(teacher, lambda s: ch.sample_batch(pool, ch.BATCH, rng), 400, lr=3e-3,
              progress=False)
    student = ch.make_model(8, 1, 2)
    ch.fit_lm(student, lambda s: ch.sample_batch(pool, ch.BATCH, rng), 100, lr=3e-3,
              progress=False)
    wide = ch.make_model(ch.B_WIDTH, 1, 2)
    ch.fit_lm(wide, lambda s: ch.sample_batch(pool, ch.BATCH, rng), 100, lr=3e-3,
              progress=False)
    val = ch.make_pool(256, random.Random(10_000))
    with torch.no_grad():
        vt = teacher(val[:, :-1])
    return dict(teacher=teacher, sft=copy.deepcopy(student.state_dict()),
                wide=copy.deepcopy(wide.state_dict()), pool=pool, val=val, vt=vt)


def run_distill(s, kind, regime="offline", steps=150, teacher=None, lr=3e-3):
    student = ch.make_model(8, 1, 2)
    student.load_state_dict(s["sft"])
    h = ch.distill(student, teacher or s["teacher"], kind=kind, alpha=0.1, steps=steps,
                   regime=regime, pool=s["pool"], val=s["val"], val_teacher_logits=s["vt"],
                   rng=random.Random(1), gen=torch.Generator().manual_seed(1), lr=lr,
                   eval_every=25)
    return h, student


def run_small(s, regime, steps=200, choose=ch.choose_source):
    """Part B: SKL on the small set from the wide SFT student, the chapter's settings."""
    student = ch.make_model(ch.B_WIDTH, 1, 2)
    student.load_state_dict(s["wide"])
    return ch.distill(student, s["teacher"], kind="SKL", alpha=0.1, steps=steps,
                      regime=regime, pool=s["pool"][: ch.N_SMALL], val=s["val"],
                      val_teacher_logits=s["vt"], rng=random.Random(1),
                      gen=torch.Generator().manual_seed(1), lr=1e-2, phi0=0.0,
                      eps=ch.C_VAL_RISE,
                      capacity=64, eval_every=25, batch=ch.N_SMALL, choose=choose)


def test_fixed_regime_never_moves_phi_and_adaptive_starts_from_the_initial_loss(setup):
    fixed = run_small(setup, "fixed", steps=100)
    assert set(fixed["phi"]) == {0.0} and fixed["gen_calls"] == 0
    assert max(fixed["val_nll"]) - fixed["val_nll"][0] >= ch.C_VAL_RISE  # the premise
    adaptive = run_small(setup, "adaptive", steps=100)
    assert adaptive["val_nll"][0] == fixed["val_nll"][0]
    assert adaptive["phi"][-1] >= 0.1 and adaptive["gen_calls"] > 0  # Eq. 8 fired


def test_adaptive_claims_hold_and_fail_when_eq8_is_broken(setup, monkeypatch):
    fixed = run_small(setup, "fixed")["kl"][-1]
    adaptive = run_small(setup, "adaptive")
    on = run_small(setup, "on-policy")
    assert adaptive["kl"][-1] / fixed <= ch.C_ADAPTIVE_VS_FIXED  # claim 2 holds
    assert on["seconds"] / adaptive["seconds"] >= ch.C_SPEEDUP  # claim 3 holds

    # broken: Eq. 8 the wrong way round, phi rises when the loss *falls* by eps
    def inverted(phi, prev, val_loss, eps, step=0.1):
        if val_loss <= prev - eps:
            return min(phi + step, 1.0), val_loss
        return phi, prev
    monkeypatch.setattr(ch, "update_phi", inverted)
    broken = run_small(setup, "adaptive")["kl"][-1]
    assert broken / fixed > ch.C_ADAPTIVE_VS_FIXED  # claim 2 fails
    monkeypatch.undo()

    def always(r, phi, step, total, n_buffer, capacity):  # bug: the schedule's answer lost
        return "generate"
    broken = run_small(setup, "adaptive", choose=always)
    assert on["seconds"] / broken["seconds"] < ch.C_SPEEDUP  # claim 3 fails


def test_noisy_teacher_wrapper():
    teacher = ch.make_model(16, 1, 2)
    x = ch.make_pool(4, random.Random(0))[:, :-1]
    out = ch.NoisyTeacher(teacher, 0.3, torch.Generator().manual_seed(0))(x)
    assert torch.allclose(out.exp().sum(-1), torch.ones(out.shape[:-1]), atol=1e-5)
    clean = ch.NoisyTeacher(teacher, 0.0, torch.Generator().manual_seed(0))(x)
    assert torch.allclose(clean.exp(), teacher(x).softmax(-1), atol=1e-6)
    noisy = ch.NoisyTeacher(teacher, 0.3, torch.Generator().manual_seed(0))
    assert not torch.allclose(noisy(x), noisy(x))  # fresh noise at every query


def test_noisy_teacher_claim_holds_and_fails_when_alpha_is_dropped(setup, monkeypatch):
    def kl(kind):
        noisy = ch.NoisyTeacher(setup["teacher"], 0.3,
                                 torch.Generator().manual_seed(6))
        return run_distill(setup, kind, teacher=noisy, lr=1e-2)[0]["kl"][-1]
    fkl = kl("FKL")
    assert kl("SKL") / fkl <= ch.C_NOISY_SKL_VS_FKL  # claim 1 holds

    real = ch.divergence

    def dropped(kind, t, s, alpha):  # bug: alpha is not passed on, SKL becomes forward KL
        return real(kind, t, s, 0.0)
    monkeypatch.setattr(ch, "divergence", dropped)
    assert kl("SKL") / fkl > ch.C_NOISY_SKL_VS_FKL  # claim 1 fails
