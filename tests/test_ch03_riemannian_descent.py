"""Chapter 03: the geometry's identities, the Karcher mean, the prox, and claims that fail when broken."""
import numpy as np
import pytest
from helpers import chapter_defs

ch = chapter_defs("ch03_riemannian_descent")
H, S, F = ch.Hyperbolic, ch.Sphere, ch.Flat
RADII = (0.5, 1.0, 2.0, 3.0, 4.0)  # the default tier's sweep


def random_pair(M, rng, r=1.5):
    x = M.polar(r * rng.random(), 2 * np.pi * rng.random())
    y = M.polar(r * rng.random(), 2 * np.pi * rng.random())
    return x, y


# -- the geometry (Eqs. 2-3) ---------------------------------------------------------------
@pytest.mark.parametrize("M", [H, S, F], ids=["H2", "S2", "R2"])
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


# -- the Karcher mean (Eq. 4) ----------------------------------------------------------------
@pytest.mark.parametrize("M, r", [(H, 2.0), (S, 0.5)], ids=["H2", "S2"])
def test_gradient_matches_finite_differences(M, r):
    rng = np.random.default_rng(2)
    P = M.polar(M.disc_radius(r, rng.random(12)), rng.uniform(0, 2 * np.pi, 12))
    for _ in range(5):
        x = M.polar(r * rng.random(), 2 * np.pi * rng.random())
        v = ch.tangent_direction(M, x, rng.uniform(0, 2 * np.pi))
        h = 1e-5
        fd = (ch.karcher_f(M, M.exp(x, h * v), P) - ch.karcher_f(M, M.exp(x, -h * v), P)) / (2 * h)
        assert fd == pytest.approx(M.inner(x, ch.karcher_grad(M, x, P), v), abs=1e-8)


@pytest.mark.parametrize("M, r", [(H, 2.0), (S, 0.5)], ids=["H2", "S2"])
def test_karcher_mean_of_a_regular_hexagon_is_its_centre(M, r):
    P = M.polar(np.full(6, r), np.arange(6) * np.pi / 3)
    x = ch.karcher_mean(M, P)
    assert M.dist(x, M.polar(0.0, 0.0)) < 1e-12


@pytest.mark.parametrize("M", [H, S], ids=["H2", "S2"])
def test_two_point_karcher_mean_is_the_geodesic_midpoint(M):
    p, q = M.polar(1.3, 0.4), M.polar(0.6, 2.9)
    mid = M.exp(p, 0.5 * M.log(p, q))
    x = ch.karcher_mean(M, np.stack([p, q]))
    assert M.dist(x, mid) < 1e-12
    assert M.dist(x, p) == pytest.approx(M.dist(x, q), abs=1e-12)


def test_flat_karcher_mean_is_the_centroid():
    rng = np.random.default_rng(3)
    P = F.polar(F.disc_radius(2.0, rng.random(20)), rng.uniform(0, 2 * np.pi, 20))
    assert np.allclose(ch.karcher_mean(F, P), P.mean(axis=0), atol=1e-12)


# -- the prox (Eqs. 8-10) --------------------------------------------------------------------
@pytest.mark.parametrize("M, D, R", [(H, 3.0, 4.0), (S, 0.5, 0.7)], ids=["H2", "S2"])
def test_exact_prox_satisfies_its_optimality_condition(M, D, R):
    prob = ch.make_problem(M, D, R, 20, np.random.default_rng(4))
    P, x = prob["P"], prob["x0"]
    for lam in (0.1, 1.0, 10.0):
        y, steps = ch.prox(M, P, x, lam, prob["L"], prob["zeta_R"], sigma=0.0)
        # grad f(y) = Log_y(x) / lambda at the minimiser of h (Eq. 8)
        residual = ch.karcher_grad(M, y, P) - M.log(y, x) / lam
        assert ch.norm(M, y, residual) <= 1e-12 and steps < 100000
        # h(y) <= h(x) = f(x): the prox decreases f, and the prox of x* is x*
        assert ch.karcher_f(M, y, P) + M.dist(x, y) ** 2 / (2 * lam) <= ch.karcher_f(M, x, P)
        y_star, _ = ch.prox(M, P, prob["x_star"], lam, prob["L"], prob["zeta_R"], sigma=0.0)
        assert M.dist(y_star, prob["x_star"]) < 1e-10


def test_inexact_prox_meets_the_stopping_rule():
    prob = ch.make_problem(H, 2.0, 3.0, 20, np.random.default_rng(5))
    x, lam, sigma = prob["x0"], 10.0, 0.5
    y, _ = ch.prox(H, prob["P"], x, lam, prob["L"], prob["zeta_R"], sigma=sigma)
    g = ch.karcher_grad(H, y, prob["P"]) - H.log(y, x) / lam
    assert ch.norm(H, y, g) <= sigma * H.dist(x, y) / lam  # Eq. 9


def test_rgd_distance_to_minimiser_is_monotone_with_safe_step():
    # Eq. 7: with eta <= 1/(zeta L) the distance to x* never increases
    for seed in range(3):
        prob = ch.make_problem(H, 3.0, 4.0, 20, np.random.default_rng(seed))
        xs = ch.rgd(H, prob["P"], prob["x0"], 1 / (prob["zeta_R"] * prob["L"]), prob["f_star"],
                    max_steps=20000)
        d = H.dist(xs, prob["x_star"])
        assert np.all(np.diff(d) <= 1e-12) and ch.iterations(xs, prob) < np.inf


# -- the claims, and broken variants that fail them -----------------------------------------
def claim_table(M, seed, trials=2, radii=RADII):
    rows = ch.sweep(M, radii, trials, lambda D: D + 1.0, np.random.default_rng(seed))
    return rows, {k: ch.by_radius(rows, k)
                  for k in ["rgd", "outer_1", "outer_10", "outer_100", "inner_10"]}


@pytest.mark.parametrize("seed", range(5))
def test_curvature_claims_hold(seed):
    rows, t = claim_table(H, seed)
    assert max(r["ball"] for r in rows) <= 1 + 1e-9  # claim 1
    assert t["rgd"][-1] / t["rgd"][0] >= 2.5  # claim 2
    assert max(np.max(t[k] - t[k][0]) for k in ["outer_1", "outer_10", "outer_100"]) <= 1.5
    assert t["inner_10"][-1] / t["inner_10"][0] >= 2.0  # claim 4


def test_sphere_runs_stay_in_their_ball_and_converge():
    rows = ch.sweep(S, (0.3, 0.5), 3, lambda D: 0.5, np.random.default_rng(0))
    assert max(r["ball"] for r in rows) <= 1 + 1e-9
    assert all(r["rgd"] < np.inf and r["outer_10"] < np.inf for r in rows)


def test_broken_log_map_and_huge_step_leave_the_ball():
    # claim 1: a chord "log map" (not projected on the tangent space), and eta = 10/L
    prob = ch.make_problem(H, 2.0, 3.0, 20, np.random.default_rng(0))
    with np.errstate(all="ignore"):
        xs = ch.rgd(ch.ChordLogHyperbolic, prob["P"], prob["x0"], 1 / prob["L"], prob["f_star"],
                    max_steps=500)
        assert not ch.ball_ratio(xs, prob) <= 1 + 1e-9
        xs = ch.rgd(H, prob["P"], prob["x0"], 10 / prob["L"], prob["f_star"], max_steps=500)
        assert not ch.ball_ratio(xs, prob) <= 1 + 1e-9


def test_flat_geometry_fails_the_growth_claims():
    # claims 2 and 4: with the exp/log maps of the plane, curvature cannot slow anything
    _, t = claim_table(F, 0)
    assert t["rgd"][-1] / t["rgd"][0] < 2.5
    assert t["inner_10"][-1] / t["inner_10"][0] < 2.0


def test_single_step_prox_fails_the_outer_loop_claim():
    # claim 3: an "inexact prox" of one inner gradient step is just RGD with a smaller
    # step, and its outer count grows with the curvature
    outer = []
    for D in (0.5, 4.0):
        counts = []
        for seed in range(2):
            prob = ch.make_problem(H, D, D + 1.0, 20, np.random.default_rng(seed))
            xs, _ = ch.rppa(H, prob["P"], prob["x0"], 10.0, prob["L"], prob["zeta_R"],
                            prob["f_star"], max_inner=1)
            counts.append(ch.iterations(xs, prob))
        outer.append(np.mean(counts))
    assert outer[1] - outer[0] > 1.5


@pytest.mark.parametrize("M, D, R", [(H, 3.0, 4.0), (S, 0.5, 0.7)], ids=["H2", "S2"])
def test_prox_claims_hold_and_fail_when_over_relaxed(M, D, R):
    # claims 5 and 6: the exact prox never moves away from x*; a prox step taken 2.5 times
    # too far does
    before, after, lams = ch.prox_displacements(M, D, R, 8, np.random.default_rng(0))
    assert len(before) == 8 * 3 and set(lams) == {0.1, 1.0, 10.0}
    assert np.max(after - before) <= 1e-9
    before, after, _ = ch.prox_displacements(M, D, R, 8, np.random.default_rng(0), relax=2.5)
    assert np.max(after - before) > 1e-9
