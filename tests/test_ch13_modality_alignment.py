"""Chapter 13: the modality gap, the knowledge discrepancy, MoNA's second-order stage 1
and its baselines; paper claims that hold for the chapter's MoNA and fail for broken
variants (one test per paper claim)."""
import math

import pytest
import torch
from helpers import chapter_defs

import icmlbook

ch = chapter_defs("ch13_modality_alignment")
ALPHA, LAM, LR = 10.0, 1.0, 0.01  # the chapter's defaults (inner_lr, meta_weight, ...)


def gen(seed):
    return torch.Generator().manual_seed(seed)


_g = gen(0)
TASK = (ch.make_teacher(_g), ch.random_skew(_g), _g)  # cheap: no training


@pytest.fixture
def task():
    return TASK


@pytest.fixture(scope="module")
def small_model():
    teacher, _, _ = TASK
    g = gen(1)
    x, y = ch.sample_source(2000, teacher, g)
    return ch.pretrain(x, y, 150, g)


def as64(params):
    return {k: v.double() for k, v in params.items()}


# ---- the two modalities (Eq. 2) -------------------------------------------------------

def test_sensor_is_a_rotation_and_the_identity_at_zero_gap(task):
    _, skew, _ = task
    assert torch.allclose(skew, -skew.T)
    assert math.isclose(float(torch.linalg.norm(skew)), ch.ANGLE, rel_tol=1e-5)
    assert torch.allclose(ch.sensor(0.0, skew), torch.eye(ch.D))
    for g in (0.3, 1.0):
        r = ch.sensor(g, skew)
        assert torch.allclose(r @ r.T, torch.eye(ch.D), atol=1e-5)
        assert torch.det(r) == pytest.approx(1.0, abs=1e-4)


def test_the_teacher_gives_balanced_classes_and_shots_are_k_per_class(task):
    teacher, skew, _ = task
    _, y = ch.sample_source(20000, teacher, gen(2))
    freq = torch.bincount(y, minlength=ch.K).float() / len(y)
    assert freq.min() > 0.5 / ch.K and freq.max() < 2.0 / ch.K
    x_t, y_t = ch.sample_shots(5, teacher, ch.sensor(1.0, skew), gen(3))
    assert torch.equal(torch.bincount(y_t, minlength=ch.K), torch.full((ch.K,), 5))
    # the shots are rotated source inputs with the source labels
    back = x_t @ ch.sensor(1.0, skew)
    assert torch.equal(ch.teacher_label(back, teacher), y_t)


def test_a_rotation_moves_the_conditional_but_not_the_marginal(task):
    teacher, skew, _ = task
    x, y = ch.sample_source(1500, teacher, gen(4))
    x_t = x @ ch.sensor(1.0, skew).T
    zeros = torch.zeros(len(x), dtype=torch.long)
    other = ch.sample_source(1500, teacher, gen(5))[0]
    assert float(ch.classwise_mmd(x_t, zeros, other, zeros)) < ch.C_MARGINAL
    # the labels of the rotated inputs read as source inputs are mostly wrong
    assert (ch.teacher_label(x_t, teacher) == y).float().mean() < 0.5


# ---- the knowledge discrepancy (Eq. 1) ------------------------------------------------

def test_discrepancy_is_one_minus_the_probability_of_the_label(small_model, task):
    teacher, skew, _ = task
    x, y = ch.sample_source(500, teacher, gen(6))
    body, head = small_model
    p = ch.predict(torch.eye(ch.D), body, head, x).softmax(1)
    tv = 0.5 * (p - torch.nn.functional.one_hot(y, ch.K)).abs().sum(1).mean()
    assert ch.discrepancy(torch.eye(ch.D), body, head, x, y) == pytest.approx(
        float(tv), abs=1e-5)


def test_the_oracle_embedder_undoes_the_gap(small_model, task):
    teacher, skew, _ = task
    x, y = ch.sample_source(1000, teacher, gen(7))
    body, head = small_model
    d0 = ch.discrepancy(torch.eye(ch.D), body, head, x, y)
    for g in (0.5, 1.0):
        r = ch.sensor(g, skew)
        d_oracle = ch.discrepancy(r.T, body, head, x @ r.T, y)
        d_identity = ch.discrepancy(torch.eye(ch.D), body, head, x @ r.T, y)
        assert abs(d_oracle - d0) < ch.C_ORACLE_FLAT
        assert d_identity > d0 + 0.1


# ---- MoNA's stage 1 (Eqs. 3-5) --------------------------------------------------------

def test_inner_step_is_one_sgd_step_of_the_body(small_model, task):
    teacher, skew, _ = task
    body, head = small_model
    shots = ch.sample_shots(3, teacher, ch.sensor(1.0, skew), gen(8))
    stepped = ch.inner_step(torch.eye(ch.D), body, head, *shots, 0.5)
    b = ch.fresh(body)
    grads = torch.autograd.grad(ch.inner_loss(torch.eye(ch.D), b, head, *shots),
                                list(b.values()))
    for (k, v), g in zip(body.items(), grads):
        assert torch.allclose(stepped[k], v - 0.5 * g, atol=1e-6)


def test_the_first_order_term_matches_at_a_small_step(small_model, task):
    teacher, skew, _ = task
    shots = ch.sample_shots(5, teacher, ch.sensor(1.0, skew), gen(9))
    source = ch.sample_source(256, teacher, gen(10))
    err = ch.first_order_error(torch.eye(ch.D), *small_model, shots, source)
    assert err <= ch.C_TAYLOR
    # the error is measured against the gradients' norms, so it shrinks with alpha
    assert ch.first_order_error(torch.eye(ch.D), *small_model, shots, source,
                                alpha=1e-1) > err


def test_a_wrong_inner_step_fails_the_first_order_check(small_model, task, monkeypatch):
    # a step of the wrong size (2 alpha) leaves a first-order remainder as large as
    # the Taylor term itself, far above the bar
    teacher, skew, _ = task
    shots = ch.sample_shots(5, teacher, ch.sensor(1.0, skew), gen(9))
    source = ch.sample_source(256, teacher, gen(10))
    right = ch.inner_step
    monkeypatch.setattr(ch, "inner_step", lambda e, b, h, x, y, a: right(e, b, h, x, y, 2 * a))
    err = ch.first_order_error(torch.eye(ch.D), *small_model, shots, source)
    assert err > ch.C_TAYLOR


def test_the_second_order_meta_gradient_matches_finite_differences(small_model, task):
    # d L_out(theta'(phi)) / d phi along a random direction, autograd vs central
    # differences, in float64: the gradient really runs through the inner step
    teacher, skew, _ = task
    body, head = as64(small_model[0]), as64(small_model[1])
    x_t, y_t = ch.sample_shots(4, teacher, ch.sensor(1.0, skew), gen(11))
    x_s, y_s = ch.sample_source(128, teacher, gen(12))
    shots, source = (x_t.double(), y_t), (x_s.double(), y_s)
    phi = (torch.eye(ch.D, dtype=torch.float64) + 0.1 * torch.randn(
        ch.D, ch.D, generator=gen(13), dtype=torch.float64))

    def f(e):
        return ch.outer_loss(ch.inner_step(e, body, head, *shots, 2.0), *source)

    e = phi.clone().requires_grad_(True)
    grad = torch.autograd.grad(f(e), [e])[0]
    direction = torch.randn(ch.D, ch.D, generator=gen(14), dtype=torch.float64)
    h = 1e-6
    fd = (f(phi + h * direction) - f(phi - h * direction)).detach() / (2 * h)
    assert float((grad * direction).sum()) == pytest.approx(float(fd), rel=2e-3)
    assert grad.abs().max() > 0


def test_with_no_inner_step_the_meta_gradient_is_exactly_zero(small_model, task):
    teacher, skew, _ = task
    shots = ch.sample_shots(3, teacher, ch.sensor(1.0, skew), gen(15))
    source = ch.sample_source(128, teacher, gen(16))
    assert ch.meta_gradient_at_zero_step(torch.eye(ch.D), *small_model, shots,
                                         source) == ch.C_ZERO_STEP


def test_mona_with_lambda_or_alpha_zero_is_the_warm_up(small_model, task):
    teacher, skew, _ = task
    shots = ch.sample_shots(3, teacher, ch.sensor(1.0, skew), gen(17))
    source = ch.sample_source(128, teacher, gen(18))
    body, head = small_model
    eye = torch.eye(ch.D)
    warm = ch.learn_embedder(eye, body, head, shots, source, 5, 0.0, 0.0)[0]
    no_step = ch.learn_embedder(eye, body, head, shots, source, 5, 0.0, 3.0)[0]
    mona = ch.learn_embedder(eye, body, head, shots, source, 5, ALPHA, 3.0)[0]
    assert torch.equal(warm, no_step)
    assert not torch.allclose(warm, mona)


def test_outer_loss_rewards_class_clusters(task):
    teacher, _, _ = task
    y = torch.arange(ch.K).repeat(8)
    spread = dict(w1=torch.eye(ch.D, ch.WIDTH), b1=torch.zeros(ch.WIDTH),
                  w2=torch.eye(ch.WIDTH), b2=torch.zeros(ch.WIDTH))
    x_random = torch.randn(len(y), ch.D, generator=gen(19))
    x_clustered = 3 * torch.nn.functional.one_hot(y, ch.D).float() + 0.05 * x_random
    assert ch.outer_loss(spread, x_clustered, y) < ch.outer_loss(spread, x_random, y)


# ---- the baseline and fine-tuning -----------------------------------------------------

def test_classwise_mmd_is_zero_on_identical_sets_and_grows_when_classes_swap(task):
    teacher, _, _ = task
    x, y = ch.sample_source(400, teacher, gen(20))
    assert float(ch.classwise_mmd(x, y, x, y)) == pytest.approx(0.0, abs=1e-5)
    assert float(ch.classwise_mmd(x, (y + 1) % ch.K, x, y)) > 0.01


def test_orca_alignment_lowers_its_loss(small_model, task):
    teacher, skew, _ = task
    r = ch.sensor(1.0, skew)
    shots = ch.sample_shots(5, teacher, r, gen(21))
    source = ch.sample_source(256, teacher, gen(22))
    body, head = small_model
    e, h = ch.orca_embedder(torch.eye(ch.D), body, head, shots, source, 40)
    before = ch.classwise_mmd(shots[0], shots[1], *source)
    after = ch.classwise_mmd(shots[0] @ e.T, shots[1], *source)
    assert after < before
    # the head warms up on the target loss, as in MoNA and warm-up; the embedder
    # learns from Eq. 6 alone (the head's loss sees it detached)
    assert ch.inner_loss(e, body, h, *shots) < ch.inner_loss(e, body, head, *shots)
    e_mmd = ch.orca_embedder(torch.eye(ch.D), body, head, shots, source, 40)[0]
    assert torch.equal(e, e_mmd)


def test_finetuning_fits_the_shots_and_reuse_uses_the_source_head(small_model, task):
    teacher, skew, _ = task
    shots = ch.sample_shots(3, teacher, ch.sensor(1.0, skew), gen(23))
    body, head = small_model
    e, b, h = ch.finetune(torch.eye(ch.D), body, head, shots, 100, 0.05)
    assert ch.inner_loss(e, b, h, *shots) < ch.inner_loss(torch.eye(ch.D), body, head,
                                                          *shots)
    x, y = ch.sample_source(500, teacher, gen(24))
    assert ch.reuse(body, head, x, y) == ch.accuracy(torch.eye(ch.D), body, head, x, y)


def test_thresholds_are_the_chapters():
    assert ch.C_GAP_LOSS > 0 and ch.C_ALIGN_KEEPS > 0
    assert ch.C_ZERO_STEP == 0 and 0 < ch.C_TAYLOR < 1


# ---- paper claims: they hold for the chapter's MoNA, and fail for broken variants ----

DEFAULT = dict(n_source=8000, pretrain_steps=600, n_test=4000, stage1=100, stage2=150,
               repeats=6)  # the default tier's sizes


@pytest.fixture(scope="module")
def trained():
    """The default tier at seed 0, with the chapter's named random streams."""
    run = icmlbook.start("13_modality_alignment", tier="default", seed=0)
    ch.run = run
    ch.teacher = ch.make_teacher(run.generator("teacher"))
    ch.skew = ch.random_skew(run.generator("modality gap"))
    x, y = ch.sample_source(DEFAULT["n_source"], ch.teacher, run.generator("source data"))
    ch.model = ch.pretrain(x, y, DEFAULT["pretrain_steps"], run.generator("pretraining"))
    ch.x_test, ch.y_test = ch.sample_source(DEFAULT["n_test"], ch.teacher,
                                            run.generator("test data"))
    ch.source_xy = ch.sample_source(ch.OUTER_BATCH, ch.teacher,
                                    run.generator("labelled source batch"))
    ch.source_acc = ch.accuracy(torch.eye(ch.D), *ch.model, ch.x_test, ch.y_test)
    ch.inner_lr, ch.meta_weight, ch.finetune_lr = ALPHA, LAM, LR
    return arms(ch.ARMS, 1.0)


def arms(names, gap_value, stage1=DEFAULT["stage1"], **kw):
    return ch.run_arms(names, gap_value, 10, DEFAULT["repeats"], stage1,
                       DEFAULT["stage2"], ch.run.generator("target shots"), **kw)[0]


def knowledge_lost_gap():
    reuse = {g: arms(["naive fine-tuning"], g)["naive fine-tuning"]["reuse"]
             for g in (0.0, 1.0)}
    return reuse[0.0] - reuse[1.0]  # (acc - reuse(1)) - (acc - reuse(0))


def paper_claims(results):
    mona, warm = results["MoNA"], results["warm-up only"]
    naive, orca = results["naive fine-tuning"], results["ORCA-like"]
    return dict(keeps=mona["reuse"] - naive["reuse"] >= ch.C_ALIGN_KEEPS,
                orca=mona["reuse"] - orca["reuse"] > ch.C_VS_ORCA,
                meta=mona["target"] - warm["target"] > ch.C_META_TARGET)


def test_paper_claims_hold_for_the_chapters_mona(trained):
    assert paper_claims(trained) == dict(keeps=True, orca=True, meta=True)


def test_the_gap_premise_holds_and_fails_for_a_sensor_that_ignores_the_gap(
        trained, monkeypatch):
    assert knowledge_lost_gap() >= ch.C_GAP_LOSS
    monkeypatch.setattr(ch, "sensor", lambda gap_value, skew: torch.eye(ch.D))
    assert knowledge_lost_gap() < ch.C_GAP_LOSS


def test_mona_without_its_stage_1_fails_the_reuse_claims(trained):
    results = dict(trained)
    results["MoNA"] = arms(["MoNA"], 1.0, stage1=0)["MoNA"]
    holds = paper_claims(results)
    assert not holds["keeps"] and not holds["orca"]


def test_mona_without_its_meta_term_fails_the_meta_claim(trained):
    # without the term (lambda = 0), MoNA is warm-up to the last digit, and the
    # claim that the term improves the target task fails
    results = dict(trained)
    results["MoNA"] = arms(["MoNA"], 1.0, lam=0.0)["MoNA"]
    assert results["MoNA"]["target"] == results["warm-up only"]["target"]
    assert not paper_claims(results)["meta"]

