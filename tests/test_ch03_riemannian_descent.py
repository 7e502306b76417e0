"""Chapter 03: the geometry's identities, both objectives, the prox, and claims that fail when
broken. Thresholds come from the chapter (``ch.C_...``); none is retyped here."""
import numpy as np
import pytest
from helpers import chapter_defs

ch = chapter_defs("ch03_riemannian_descent")
H, S, F = ch.Hyperbolic, ch.Sphere, ch.Flat
K, LC = ch.Karcher, ch.LogCosh


def random_pair(M, rng, r=1.5):
    x = M.polar(r * rng.random(), 2 * np.pi * rng.random())
    y = M.polar(r * rng.random(), 2 * np.pi * rng.random())
    return x, y


# -- the geometry (Eqs. 2, 4, 5) ----------------------------------------------------------
@pytest.mark.parametrize("M", [H, S, F], ids=["H2", "S2", "R2"])
@pytest.mark.slow
def test_exp_log_round_trip_and_norm(M):
    rng = np.random.default_rng(0)
    for k in range(300):
        x, y = random_pair(M, rng)
        if k % 3 == 0:  # nearby points, where naive formulas lose digits
            y = M.exp(x, 1e-7 * ch.tangent_direction(M, x, rng.uniform(0, 6.3)))
        v = M.log(x, y)
        assert M.dist(M.exp(x, v), y) < 1e-12
        assert abs(ch.norm(M, x, v) - M.dist(x, y)) < 1e-12
        assert np.allclose(M.project(x, v), v, atol=1e-12)  # v is tangent at x


def test_points_stay_on_their_manifold():
    rng = np.random.default_rng(1)
    for _ in range(100):
        x, y = random_pair(H, rng, r=4.0)
        z = H.exp(x, 3.0 * H.log(x, y))
        # x0 = sqrt(1 + x1^2 + x2^2) after every step: <z, z>_L = -1 up to cancellation
        assert abs(ch.minkowski(z, z) + 1.0) <= 1e-14 * z[0] ** 2 and z[0] > 0
        x, y = random_pair(S, rng, r=1.0)
        assert np.linalg.norm(S.exp(x, 2.0 * S.log(x, y))) == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("M", [H, S], ids=["H2", "S2"])
def test_unit_speed_geodesics(M):
    x = M.polar(0.7, 1.0)
    u = ch.tangent_direction(M, x, 0.3)
    assert ch.norm(M, x, u) == pytest.approx(1.0, abs=1e-12)
    for s in (1e-6, 0.1, 1.0, 2.5):
        assert M.dist(x, M.exp(x, s * u)) == pytest.approx(s, rel=1e-10)
    # the two model spaces against closed forms: distance from the pole to polar(r, .)
    assert H.dist(H.polar(0, 0), H.polar(3.0, 2.0)) == pytest.approx(3.0, rel=1e-12)
    assert S.dist(S.polar(0, 0), S.polar(1.2, 2.0)) == pytest.approx(1.2, rel=1e-12)


def test_curvature_constants():
    assert ch.zeta(0.0, -1.0) == 1.0 and ch.delta(0.0, 1.0) == 1.0
    assert ch.zeta(2.0, 0.0) == 1.0 and ch.zeta(2.0, 1.0) == 1.0 and ch.delta(2.0, -1.0) == 1.0
    assert ch.zeta(1.0, -1.0) == pytest.approx(1.0 / np.tanh(1.0))
    assert ch.zeta(2.0, -4.0) == pytest.approx(4.0 / np.tanh(4.0))  # r sqrt|k| = 4
    assert ch.delta(np.pi / 4, 1.0) == pytest.approx(np.pi / 4)
    assert ch.delta(np.pi / 2, 1.0) == pytest.approx(0.0, abs=1e-12)
    rs = np.linspace(0.01, 8, 50)
    assert np.all(np.diff([ch.zeta(r, -1.0) for r in rs]) > 0)


def test_identity_check_holds_and_fails_for_an_unprojected_log_map():
    class ChordLogHyperbolic(H):
        """H2 with a deliberately broken log map: the chord y - x, not projected on T_x."""

        @staticmethod
        def log(x, y):
            u = y - x  # BUG: should be y + <x, y>_L x, the component tangent at x
            n = np.sqrt(np.maximum(ch.minkowski(u, u), 0.0))[..., None]
            return H.dist(x, y)[..., None] * ch._unit(u, n)

    rng = np.random.default_rng(0)
    assert ch.map_identity_error(H, rng) <= ch.C_IDENTITY
    assert ch.map_identity_error(S, rng, r=1.2) <= ch.C_IDENTITY
    assert not ch.map_identity_error(ChordLogHyperbolic, rng) <= ch.C_IDENTITY


# -- the objectives (Eqs. 6-7) ----------------------------------------------------------------
@pytest.mark.parametrize("obj", [K, LC], ids=["Karcher", "log-cosh"])
@pytest.mark.parametrize("M, r", [(H, 2.0), (S, 0.5)], ids=["H2", "S2"])
def test_gradient_matches_finite_differences(M, r, obj):
    rng = np.random.default_rng(2)
    P = M.polar(M.disc_radius(r, rng.random(12)), rng.uniform(0, 2 * np.pi, 12))
    for _ in range(5):
        x = M.polar(r * rng.random(), 2 * np.pi * rng.random())
        v = ch.tangent_direction(M, x, rng.uniform(0, 2 * np.pi))
        h = 1e-5
        fd = (obj.f(M, M.exp(x, h * v), P) - obj.f(M, M.exp(x, -h * v), P)) / (2 * h)
        assert fd == pytest.approx(M.inner(x, obj.grad(M, x, P), v), abs=1e-8)


def test_log_cosh_is_one_smooth_and_convex_along_geodesics():
    # Eq. 7: 0 <= d^2/dt^2 f(Exp_x(t v)) <= L = 1 on H2, also far from the data
    rng = np.random.default_rng(3)
    P = H.polar(H.disc_radius(3.0, rng.random(15)), rng.uniform(0, 2 * np.pi, 15))
    h = 1e-4
    for _ in range(40):
        x = H.polar(6.0 * rng.random(), 2 * np.pi * rng.random())
        v = ch.tangent_direction(H, x, rng.uniform(0, 2 * np.pi))
        f = [LC.f(H, H.exp(x, t * v), P) for t in (-h, 0.0, h)]
        second = (f[0] - 2 * f[1] + f[2]) / h**2
        assert -1e-5 <= second <= LC.smoothness(H, 10.0) + 1e-5


@pytest.mark.parametrize("obj", [K, LC], ids=["Karcher", "log-cosh"])
@pytest.mark.parametrize("M, r", [(H, 2.0), (S, 0.5)], ids=["H2", "S2"])
def test_minimiser_of_a_regular_hexagon_is_its_centre(M, r, obj):
    P = M.polar(np.full(6, r), np.arange(6) * np.pi / 3)
    x = ch.minimiser(M, obj, P)
    assert M.dist(x, M.polar(0.0, 0.0)) < 1e-12


@pytest.mark.parametrize("M", [H, S], ids=["H2", "S2"])
def test_two_point_karcher_mean_is_the_geodesic_midpoint(M):
    p, q = M.polar(1.3, 0.4), M.polar(0.6, 2.9)
    mid = M.exp(p, 0.5 * M.log(p, q))
    x = ch.minimiser(M, K, np.stack([p, q]))
    assert M.dist(x, mid) < 1e-12
    assert M.dist(x, p) == pytest.approx(M.dist(x, q), abs=1e-12)


def test_flat_karcher_mean_is_the_centroid():
    rng = np.random.default_rng(3)
    P = F.polar(F.disc_radius(2.0, rng.random(20)), rng.uniform(0, 2 * np.pi, 20))
    assert np.allclose(ch.minimiser(F, K, P), P.mean(axis=0), atol=1e-12)


# -- the prox (Eqs. 9-11) ---------------------------------------------------------------------
@pytest.mark.parametrize("obj", [K, LC], ids=["Karcher", "log-cosh"])
@pytest.mark.parametrize("M, D, R", [(H, 3.0, 4.0), (S, 0.5, 0.7)], ids=["H2", "S2"])
def test_exact_prox_satisfies_its_optimality_condition(M, D, R, obj):
    prob = ch.make_problem(M, obj, D, R, 20, np.random.default_rng(4))
    P, x = prob["P"], prob["x0"]
    for lam in (0.1, 1.0, 10.0):
        y, steps = ch.prox(M, obj, P, x, lam, prob["L"], prob["zeta_R"], sigma=0.0)
        # grad f(y) = Log_y(x) / lambda at the minimiser of h (Eq. 9)
        residual = obj.grad(M, y, P) - M.log(y, x) / lam
        assert ch.norm(M, y, residual) <= 1e-12 and steps < 100000
        # h(y) <= h(x) = f(x): the prox decreases f, and the prox of x* is x*
        assert obj.f(M, y, P) + M.dist(x, y) ** 2 / (2 * lam) <= obj.f(M, x, P)
        y_star, _ = ch.prox(M, obj, P, prob["x_star"], lam, prob["L"], prob["zeta_R"], sigma=0.0)
        assert M.dist(y_star, prob["x_star"]) < 1e-10


def test_inexact_prox_meets_the_stopping_rule():
    prob = ch.make_problem(H, K, 2.0, 3.0, 20, np.random.default_rng(5))
    x, lam, sigma = prob["x0"], 10.0, 0.5
    y, _ = ch.prox(H, K, prob["P"], x, lam, prob["L"], prob["zeta_R"], sigma=sigma)
    g = K.grad(H, y, prob["P"]) - H.log(y, x) / lam
    assert ch.norm(H, y, g) <= sigma * H.dist(x, y) / lam  # Eq. 10


@pytest.mark.parametrize("obj", [K, LC], ids=["Karcher", "log-cosh"])
@pytest.mark.slow
def test_safe_step_keeps_the_ball_and_a_long_step_leaves_it(obj):
    # Eq. 3: with eta <= 1/(zeta L) the distance to x* never increases (the ball check);
    # a step of 12/L is a deliberately broken step rule that leaves the ball
    for seed in range(3):
        prob = ch.make_problem(H, obj, 3.0, 4.0, 20, np.random.default_rng(seed))
        args = (H, obj, prob["P"], prob["x0"])
        xs = ch.rgd(*args, 1 / (prob["zeta_R"] * prob["L"]), prob["f_star"], max_steps=20000)
        d = H.dist(xs, prob["x_star"])
        assert np.all(np.diff(d) <= 1e-12) and ch.iterations(xs, prob) < np.inf
        assert ch.ball_ratio(xs, prob) - 1 <= ch.C_BALL_TOL
    with np.errstate(all="ignore"):
        xs = ch.rgd(*args, 12 / prob["L"], prob["f_star"], max_steps=500)
    assert not ch.ball_ratio(xs, prob) - 1 <= ch.C_BALL_TOL


@pytest.mark.parametrize("obj", [K, LC], ids=["Karcher", "log-cosh"])
@pytest.mark.parametrize("M, D, R", [(H, 3.0, 4.0), (S, 0.5, 0.7)], ids=["H2", "S2"])
@pytest.mark.slow
def test_prox_check_holds_and_fails_when_over_relaxed(M, D, R, obj):
    # Eq. 11: the exact prox never moves away from x*; a prox step taken 2.5 times too far does
    before, after, lams = ch.prox_displacements(M, obj, D, R, 6, np.random.default_rng(0))
    assert len(before) == 6 * len(ch.PROX_LAMBDAS) and set(lams) == set(ch.PROX_LAMBDAS)
    assert np.max(after - before) <= ch.C_PROX_TOL
    before, after, _ = ch.prox_displacements(M, obj, D, R, 6, np.random.default_rng(0),
                                             relax=2.5)
    assert not np.max(after - before) <= ch.C_PROX_TOL


# -- the paper claims, and broken variants that fail them -------------------------------------
RADII = (0.5, 4.0)  # the smallest and largest radius of the default tier


def tables(M=H, seed=0, trials=1, sigma=0.5, objectives=("Karcher", "log-cosh"), **kw):
    """Per-radius tables of a small sweep, one per objective (the chapter's own functions)."""
    rng = np.random.default_rng(seed)
    return {name: ch.tabulate(ch.sweep(M, ch.OBJECTIVES[name], RADII, trials,
                                       lambda D: D + 1.0, rng, sigma=sigma, **kw))
            for name in objectives}


def wrapped_prox(monkeypatch, **change):
    """Replace the inexact prox (sigma > 0) by a broken variant; the exact one is untouched."""
    real = ch.prox

    def broken(M, obj, P, x, lam, L, zeta_prox, sigma=0.5, abs_tol=1e-12, max_inner=100000):
        if sigma > 0:
            L = L * change.get("slow", 1.0)
            max_inner = min(max_inner, change.get("max_inner", max_inner))
        return real(M, obj, P, x, lam, L, zeta_prox, sigma, abs_tol, max_inner)

    monkeypatch.setattr(ch, "prox", broken)


@pytest.mark.slow
def test_paper_claims_hold_on_a_small_sweep():
    t = tables(trials=2)
    assert ch.inexact_outer_ratio(t) <= ch.C_INEXACT_OUTER
    assert ch.inexact_work_ratio(t) <= ch.C_INEXACT_WORK
    assert ch.outer_excess(t["Karcher"]) <= ch.C_OUTER_FLAT
    assert ch.tuned_growth(t["Karcher"]) >= ch.C_RGD_GROWTH
    assert ch.fixed_budget_ratio(t) <= ch.C_VS_FIXED


@pytest.mark.slow
def test_criterion_without_one_over_lambda_fails_the_outer_step_claim(monkeypatch):
    # claim 1: ||grad h|| <= sigma d(x_t, y) (the 1/lambda lost) is far too loose at
    # lambda = 100, so the "prox" stops early and the outer loop takes many more steps
    monkeypatch.setattr(ch, "prox", ch.prox_no_lambda)
    t = tables(objectives=("Karcher",), grid=(1.0,), budgets=())
    assert not ch.inexact_outer_ratio(t) <= ch.C_INEXACT_OUTER


@pytest.mark.slow
def test_a_criterion_that_is_the_exact_prox_fails_the_work_claim():
    # claim 2: sigma = 1e-6 solves every prox almost exactly: no inner work is saved
    t = tables(objectives=("Karcher",), sigma=1e-6, grid=(1.0,), budgets=())
    assert not ch.inexact_work_ratio(t) <= ch.C_INEXACT_WORK


@pytest.mark.slow
def test_single_step_prox_fails_the_flat_outer_loop_claim(monkeypatch):
    # claim 3: a "prox" of one inner gradient step is RGD with a smaller step, and its outer
    # count grows with the curvature
    wrapped_prox(monkeypatch, max_inner=1)
    t = tables(objectives=("Karcher",), grid=(1.0,), budgets=())
    assert not ch.outer_excess(t["Karcher"]) <= ch.C_OUTER_FLAT


def test_flat_geometry_fails_the_tuned_rgd_growth_claim():
    # claim 4: with the exp/log maps of the plane, curvature cannot slow anything
    t = tables(M=F, objectives=("Karcher",), lambdas=(), budgets=())
    assert not ch.tuned_growth(t["Karcher"]) >= ch.C_RGD_GROWTH


@pytest.mark.slow
def test_slow_inner_solver_fails_the_baseline_claim(monkeypatch):
    # claim 5: an inner RGD at a tenth of its step spends far more than the best fixed budget
    wrapped_prox(monkeypatch, slow=10.0)
    t = tables(objectives=("Karcher",), grid=(1.0,))
    assert not ch.fixed_budget_ratio(t) <= ch.C_VS_FIXED


def test_rppa_over_tuned_rgd_takes_the_cheapest_variant_and_radius():
    # the finding's statistic: the smallest ratio of any RPPA column to tuned RGD's steps
    t = {"Karcher": {"tuned": np.array([2.0, 4.0]), "inner_1": np.array([4.0, 6.0]),
                     "fixed_1": np.array([3.0, 8.0])},
         "log-cosh": {"tuned": np.array([1.0, 1.0]), "inner_1": np.array([5.0, 2.0]),
                      "fixed_1": np.array([9.0, 9.0])}}
    assert ch.rppa_over_tuned_rgd(t, ["inner_1", "fixed_1"]) == pytest.approx(1.5)
    assert ch.rppa_over_tuned_rgd(t, ["fixed_1"]) == pytest.approx(1.5)
    assert ch.rppa_over_tuned_rgd(t, ["inner_1"]) == pytest.approx(1.5)
