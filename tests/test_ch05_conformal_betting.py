"""Chapter 05: the bettor's closed forms and invariants, and claims that fail when broken."""
from math import comb

import numpy as np
import pytest
from helpers import chapter_defs

ch = chapter_defs("ch05_conformal_betting")


def stream(T=6000, seed=0, scale=1.0):
    scores, segments = ch.ar1_changepoint_scores(T, np.random.default_rng(seed))
    return scores * scale, segments


def test_constant_coin_wealth_closed_form():
    # alpha = 0 and every score a miss: every coin is 1, W_T = eps * C(2T, T) / 2^T
    for T, eps in [(1, 1.0), (2, 1.0), (30, 1.0), (30, 2.5)]:
        wealth = ch.kt_aci(np.full(T, np.inf), alpha=0.0, eps=eps)[1][-1]
        assert wealth == pytest.approx(eps * comb(2 * T, T) / 2**T, rel=1e-12)


def test_exponential_search_after_misses():
    # alpha = 0.1, eps = 1: the radius played at the k-th consecutive miss
    radius = ch.kt_aci(np.full(30, np.inf), alpha=0.1, eps=1.0)[0]
    assert radius[9] == pytest.approx(38.7256, rel=1e-4)
    assert radius[19] == pytest.approx(1.11217e4, rel=1e-4)
    assert radius[29] == pytest.approx(3.54241e6, rel=1e-4)


@pytest.mark.parametrize("bettor", ["kt_aci", "ons_aci"])
def test_wealth_identity_and_positivity(bettor):
    scores, _ = stream(3000, seed=1)
    alpha = 0.1
    radius, wealth = getattr(ch, bettor)(scores, alpha, 1.0)
    coins = (scores > radius) - alpha
    assert np.allclose(wealth[-1], 1.0 + np.sum(coins * radius), rtol=1e-9)
    assert np.all(wealth > 0)


def test_scale_equivariance():
    scores, _ = stream(3000, seed=2)
    r1, _ = ch.kt_aci(scores, 0.1, 1.0)
    r2, _ = ch.kt_aci(scores * 1000, 0.1, 1000.0)
    assert np.allclose(r2, 1000 * r1, rtol=1e-9, atol=1e-9)
    assert np.array_equal(scores > r1, scores * 1000 > r2)


def test_batched_equals_single_streams():
    scores, _ = stream(2000, seed=3)
    batch = np.stack([scores, 10 * scores], axis=1)
    rb, _ = ch.kt_aci(batch, np.array([0.1, 0.2]), 1.0)
    assert np.allclose(rb[:, 0], ch.kt_aci(scores, 0.1, 1.0)[0])
    assert np.allclose(rb[:, 1], ch.kt_aci(10 * scores, 0.2, 1.0)[0])


def test_radius_uses_only_the_past():
    scores, _ = stream(500, seed=4)
    changed = scores.copy()
    changed[300:] *= 50  # the future changes: the radii up to step 300 must not
    assert np.array_equal(ch.kt_aci(scores, 0.1)[0][:301], ch.kt_aci(changed, 0.1)[0][:301])


def test_ogd_deterministic_bound():
    # |mean err - alpha| <= (max |s| + eta) / (eta T) for OGD started at 0
    scores, _ = stream(4000, seed=0, scale=100.0)
    for eta in (0.1, 1.0, 10.0):
        r = ch.ogd_aci(scores, 0.1, eta)
        bound = (np.abs(r).max() + eta) / (eta * len(scores))
        assert ch.miscoverage_gap(scores, r, 0.1) <= bound + 1e-12


@pytest.mark.parametrize("seed", range(5))
def test_validity_claim_holds_across_scales(seed):
    scores, _ = stream(6000, seed=seed)
    for scale in (0.01, 1.0, 100.0):
        for alpha in (0.05, 0.1, 0.2):
            r, _ = ch.kt_aci(scores * scale, alpha, 1.0)
            assert ch.miscoverage_gap(scores * scale, r, alpha) <= 0.015


def test_broken_bettors_fail_the_validity_claim():
    scores, _ = stream(6000, seed=0)
    # wrong coin sign: the bettor shrinks the interval after misses (its wealth overflows)
    with np.errstate(over="ignore"):
        broken = ch.kt_aci_wrong_sign(scores, 0.1)
    assert ch.miscoverage_gap(scores, broken, 0.1) > 0.015

    # betting a fraction of the initial wealth instead of the current one: no compounding,
    # so the radius can never grow past eps and coverage collapses at scale 100
    def kt_no_compounding(s, alpha, eps=1.0):
        radius, csum = np.empty_like(s), 0.0
        for t in range(len(s)):
            radius[t] = csum / (t + 1) * eps
            csum += (s[t] > radius[t]) - alpha
        return radius
    assert ch.miscoverage_gap(100 * scores, kt_no_compounding(100 * scores, 0.1), 0.1) > 0.015


def test_efficiency_claims_fail_for_a_learner_that_needs_tuning():
    # put OGD with eta = 1 in KT's place: at scale 0.01 its width is far beyond both bars
    scores, segments = stream(6000, seed=0, scale=0.01)
    r = ch.ogd_aci(scores, 0.1, 1.0)
    assert ch.mean_width(r) / ch.oracle_width(scores, segments, 0.1) > 1.15
    best = min(ch.mean_width(ch.ogd_aci(scores, 0.1, 0.01 * eta))
               for eta in np.logspace(-3, 1, 17)
               if ch.miscoverage_gap(scores, ch.ogd_aci(scores, 0.1, 0.01 * eta), 0.1) <= 0.015)
    assert ch.mean_width(r) / best > 1.10


def test_fragility_claims_fail_for_a_baseline_that_knows_the_scale():
    # an OGD whose step is secretly multiplied by the scale passes both fragility tests
    for scale, eta in [(100.0, 0.1), (0.01, 1.0)]:
        scores, _ = stream(6000, seed=0, scale=scale)
        r = ch.ogd_aci(scores, 0.1, eta * scale)
        kt, _ = ch.kt_aci(scores, 0.1, 1.0)
        if scale == 100.0:
            assert ch.miscoverage_gap(scores, r, 0.1) < 0.2
        else:
            assert np.median(np.maximum(r, 0)) / np.median(np.maximum(kt, 0)) < 10


def test_oracle_width_batches_per_column():
    scores, segments = stream(3000, seed=0)
    batch = np.stack([scores, scores], axis=1)
    w = ch.oracle_width(batch, segments, np.array([0.1, 0.2]))
    assert w[0] == pytest.approx(ch.oracle_width(scores, segments, 0.1))
    assert w[1] == pytest.approx(ch.oracle_width(scores, segments, 0.2))
    assert w[0] > w[1]
