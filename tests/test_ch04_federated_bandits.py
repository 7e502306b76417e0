"""Chapter 04: submodular objective, offline algorithms, C-MA-MAB and elimination bookkeeping,
and paper claims and checks that fail when the algorithm is broken.

Thresholds come from the chapter (``ch.C_...``); the sizes below are the default tier's."""
import itertools
from math import e

import numpy as np
import pytest
from helpers import chapter_defs

ch = chapter_defs("ch04_federated_bandits")

HORIZONS = (1e4, 3e4, 1e5, 3e5, 1e6)  # the default tier's grid
AGENTS = (1, 2, 4, 8)
T_U, T_VS = 10**6, 3 * 10**5  # the default tier's horizons of paper claims 1 and 2
VS_HORIZONS = (1e5, 3e5, 1e6)  # the default tier's horizons of the baseline comparison


def problem(seed=0, n=40, pool=500):
    G, images, labels = ch.digits_problem(n, pool, np.random.default_rng(seed))
    return G


def exact_greedy(G, k):
    """Greedy with the exact oracle, recording the sets it queries."""
    queried = []

    def value(S):
        queried.append(list(S))
        return ch.f_value(G, S)
    return ch.greedy(G.shape[1], k, value), queried


@pytest.fixture(scope="module")
def default_problem():
    G = problem(0)
    _, values, stds = ch.subset_moments(G, 4)
    S_greedy, _ = exact_greedy(G, 4)
    return G, float(values.max()), values, stds, ch.f_value(G, S_greedy)


# -- the objective -----------------------------------------------------------------
@pytest.mark.slow
def test_rewards_lie_in_unit_interval_and_mean_is_f():
    G = problem(1, n=20, pool=200)
    assert G.min() >= 0 and G.max() <= 1
    S = [2, 7, 11]
    rng = np.random.default_rng(0)
    draws = np.array([ch.mean_of_plays(G, S, 1, 20, rng) for _ in range(4000)])
    assert draws.min() >= 0 and draws.max() <= 1
    g = G[:, S].max(axis=1)
    assert draws.mean() == pytest.approx(ch.f_value(G, S), abs=4 * g.std() / np.sqrt(20 * 4000))
    # the mean of p plays has the variance of p*B independent draws
    many = np.array([ch.mean_of_plays(G, S, 50, 20, rng) for _ in range(2000)])
    assert many.var() == pytest.approx(g.var() / 1000, rel=0.15)


@pytest.mark.slow
def test_gaussian_limit_has_the_exact_mean_and_variance():
    G = problem(1, n=20, pool=200)
    combos, mean, std = ch.subset_moments(G, 3)
    pick = [0, 500, 1139]
    rng = np.random.default_rng(3)
    gauss = np.array([ch.mean_of_plays_gaussian(mean[pick], std[pick], 5, 20, rng)
                      for _ in range(4000)])
    for col, i in enumerate(pick):
        exact = np.array([ch.mean_of_plays(G, combos[i], 5, 20, rng) for _ in range(4000)])
        assert gauss[:, col].mean() == pytest.approx(exact.mean(), abs=std[i] / 50)
        assert gauss[:, col].var() == pytest.approx(exact.var(), rel=0.12)
        assert exact.var() == pytest.approx(std[i] ** 2 / 100, rel=0.12)


def test_monotone_and_diminishing_returns():
    G = problem(2, n=20, pool=200)
    rng = np.random.default_rng(1)
    for _ in range(300):
        perm = rng.permutation(20)
        a, b = rng.integers(0, 6), rng.integers(6, 12)
        A, B, j = list(perm[:a]), list(perm[:b]), int(perm[b])
        gain_A = ch.f_value(G, A + [j]) - ch.f_value(G, A)
        gain_B = ch.f_value(G, B + [j]) - ch.f_value(G, B)
        assert gain_A >= gain_B - 1e-12 and gain_B >= -1e-12


def test_subset_moments_match_enumeration_and_greedy_guarantee():
    for seed in range(4):
        G = problem(seed, n=12, pool=100)
        combos, values, stds = ch.subset_moments(G, 3, chunk=50)
        subsets = list(itertools.combinations(range(12), 3))
        assert [tuple(c) for c in combos] == subsets
        assert np.allclose(values, [ch.f_value(G, S) for S in subsets])
        assert np.allclose(stds, [G[:, list(S)].max(axis=1).std() for S in subsets])
        S_greedy, _ = exact_greedy(G, 3)
        assert ch.f_value(G, S_greedy) >= ch.C_GREEDY_RATIO * values.max()
        assert ch.C_GREEDY_RATIO <= 1 - 1 / e


# -- the offline algorithms --------------------------------------------------------
def test_query_counts():
    G = problem(0, n=40, pool=100)
    _, queried = exact_greedy(G, 4)
    assert len(queried) == ch.n_queries(40, 4) == 40 + 39 + 38 + 37
    for eps in (0.5, 0.1, 0.01):
        calls = []
        ch.stochastic_greedy(40, 4, eps, lambda S: calls.append(1) or ch.f_value(G, S),
                             np.random.default_rng(0))
        assert len(calls) == ch.n_queries(40, 4, eps)
    assert ch.n_queries(40, 4, 1e-3) == ch.n_queries(40, 4)  # sample covers everything


def test_noiseless_limit_returns_the_exact_offline_output():
    # with r* -> infinity the averaged estimates are exact: C-MA-MAB's Omega = greedy's
    for seed in range(3):
        G = problem(seed)
        S_greedy, _ = exact_greedy(G, 4)
        res = ch.cmamab(G, 4, 10**12, 2, 20, np.random.default_rng(seed), plays=10**9)
        assert res["omega"] == sorted(S_greedy)
        assert abs(res["f_omega"] - ch.f_value(G, S_greedy)) <= ch.C_NOISELESS


# -- C-MA-MAB bookkeeping ----------------------------------------------------------
def test_plays_never_exceed_the_horizon():
    for T in (200, 1000, 10**4, 10**5, 10**7):
        for m in (1, 3, 8, 32):
            for N in (29, 154, 190):
                if T < N:
                    continue
                p = ch.plays_per_query(T, m, N, 4)
                assert p >= 1 and N * p <= T
    # the unclipped formula would run out of budget at T = 1e4, m = 1 (Eq. 6)
    assert ch.plays_per_query(10**4, 1, 154, 4) == 10**4 // 154


def test_plays_follow_eq6_when_not_clipped():
    T, m, N, k = 10**6, 4, 154, 4
    r_star = (T * 2 * k * np.sqrt(np.log(T) / 2) * m / (2 * N)) ** (2 / 3)
    assert ch.plays_per_query(T, m, N, k) == int(np.ceil(r_star / m))


def test_regret_bookkeeping(default_problem):
    G, f_opt = default_problem[:2]
    T, m = 300_000, 4
    res = ch.cmamab(G, 4, T, m, 20, np.random.default_rng(0))
    p = res["plays"]
    assert res["explore"] == res["queries"] * p == ch.n_queries(40, 4) * p
    assert res["comm"] - (res["queries"] + 1) <= ch.C_COUNT
    # round by round: p plays of each queried set, then Omega until T
    rounds = np.concatenate([np.repeat(res["query_values"], p),
                             np.full(T - res["explore"], res["f_omega"])])
    assert len(rounds) == T
    assert ch.pseudo_regret(res, f_opt) == pytest.approx(np.sum(f_opt - rounds), rel=1e-9)
    # exploration regret alone equals sum_q p (f* - f(S_q)) exactly
    explore_part = ch.pseudo_regret(res, f_opt) - (T - res["explore"]) * (f_opt - res["f_omega"])
    assert explore_part == pytest.approx(p * np.sum(f_opt - res["query_values"]), rel=1e-12)
    # the first greedy step queries every singleton, in order
    singles = [ch.f_value(G, [j]) for j in range(40)]
    assert np.allclose(res["query_values"][:40], singles)


def test_choose_eps_shrinks_with_the_horizon():
    eps = [ch.choose_eps(T, 1, 40, 4) for T in (1e4, 1e5, 1e6, 1e7)]
    assert all(a >= b for a, b in zip(eps, eps[1:])) and eps[-1] < eps[0]


def test_horizon_shorter_than_the_queries_is_refused():
    G = problem(0, n=20, pool=50)
    with pytest.raises(ValueError, match="shorter"):
        ch.cmamab(G, 4, 50, 1, 20, np.random.default_rng(0))


# -- successive elimination over all subsets -----------------------------------------
def test_elimination_with_zero_radius_commits_after_one_sweep():
    G = problem(3, n=12, pool=100)
    _, mean, std = ch.subset_moments(G, 3)
    T, seed = 5000, 7
    res = ch.elimination(mean, std, T, 20, np.random.default_rng(seed), c=0.0)
    first = ch.mean_of_plays_gaussian(mean, std, 1, 20, np.random.default_rng(seed))
    best = int(np.argmax(first))
    assert res["arm"] == best and res["phases"] == 1
    expected = np.sum(mean.max() - mean) + (T - len(mean)) * (mean.max() - mean[best])
    assert res["regret"] == pytest.approx(expected, rel=1e-12)


def test_elimination_without_eliminating_spreads_the_budget():
    G = problem(3, n=12, pool=100)
    _, mean, std = ch.subset_moments(G, 3)
    T = 20 * len(mean) + 7
    res = ch.elimination(mean, std, T, 20, np.random.default_rng(0), c=1e9)
    # phases of 1, 1, 2, 4, 8 plays per subset (doubling), then the 4 the budget allows,
    # and the 7 rounds left over on the empirical best
    assert res["phases"] == 6
    gap = mean.max() - mean
    assert res["regret"] == pytest.approx(20 * gap.sum() + 7 * gap[res["arm"]], rel=1e-12)


def test_elimination_finds_the_best_subset_given_time():
    G = problem(4, n=12, pool=100)
    _, mean, std = ch.subset_moments(G, 3)
    res = ch.elimination(mean, std, 10**9, 20, np.random.default_rng(0), c=0.05)
    assert res["arm"] == int(np.argmax(mean))


def test_elimination_refuses_a_horizon_shorter_than_one_sweep():
    G = problem(0, n=12, pool=50)
    _, mean, std = ch.subset_moments(G, 3)
    with pytest.raises(ValueError, match="once"):
        ch.elimination(mean, std, len(mean) - 1, 20, np.random.default_rng(0), c=0.1)


# -- paper claim 1: the r* trade-off (Eq. 10) -----------------------------------------
def test_u_saving():
    assert ch.u_saving(np.array([3.0, 1.0, 3.0])) == pytest.approx(2 / 3)
    assert ch.u_saving(np.array([2.0, 1.0, 4.0])) == pytest.approx(0.5)
    assert ch.u_saving(np.array([1.0, 2.0, 3.0])) == 0.0  # monotone: the left end is best
    assert ch.u_saving(np.array([2.0, -1.0, 3.0])) > 1  # an interior point beats exact greedy
    assert np.isnan(ch.u_saving(np.array([0.0, 1.0, 2.0])))


def u_statistic(G, f_ref, seed, reps, **kw):
    """Eq. 10 on MU_GRID at T_U, m = 1 (the chapter's claim 1)."""
    rng = np.random.default_rng(seed)
    regret = [np.mean([ch.pseudo_regret(ch.cmamab(G, 4, T_U, 1, 20, rng, mult=mu, **kw), f_ref)
                       for _ in range(reps)]) for mu in ch.MU_GRID]
    return ch.u_saving(np.array(regret))


@pytest.mark.parametrize("seed", [0, 19])
@pytest.mark.slow
def test_claim1_holds(seed):
    G = problem(seed)
    S_greedy, _ = exact_greedy(G, 4)
    assert u_statistic(G, ch.f_value(G, S_greedy), seed, reps=6) >= ch.C_U_SAVING


def test_claim1_fails_when_the_agents_stop_averaging(default_problem):
    # every query is played p times, but estimated from a single play: more exploration
    # no longer buys better estimates, and the regret only rises with the multiplier
    G, f_greedy = default_problem[0], default_problem[4]

    def one_play(G, S, plays, batch, rng):
        return ch.mean_of_plays(G, S, 1, batch, rng)
    assert u_statistic(G, f_greedy, 0, reps=8, sampler=one_play) < ch.C_U_SAVING


def test_claim1_fails_with_noise_free_estimates(default_problem):
    # estimates that leak the exact value: no wrong commits, the least exploration wins
    G, f_greedy = default_problem[0], default_problem[4]

    def leak(G, S, plays, batch, rng):
        return ch.f_value(G, S)
    assert u_statistic(G, f_greedy, 0, reps=1, sampler=leak) < ch.C_U_SAVING


# -- paper claim 2: against successive elimination over all subsets ------------------
def held_out_tuning(seed, horizons=VS_HORIZONS, reps=3):
    """The chapter's protocol: tune C-MA-MAB's multiplier and elimination's radius constant
    on the held-out split of `seed`, one knob each for all horizons."""
    vrng = np.random.default_rng([seed, 1])
    G_val = ch.digits_problem(40, 500, vrng)[0]
    _, vmean, vstd = ch.subset_moments(G_val, 4)
    mu = ch.tuned(ch.MU_GRID, lambda mu, T: ch.pseudo_regret(
        ch.cmamab(G_val, 4, int(T), 1, 20, vrng, mult=mu), vmean.max()), horizons, reps)
    c = ch.tuned(ch.RADIUS_GRID, lambda c, T: ch.elimination(
        vmean, vstd, int(T), 20, vrng, c)["regret"], horizons, reps)
    return mu, c


def test_tuning_picks_the_lowest_geometric_mean():
    table = {1: (1.0, 100.0), 2: (2.0, 20.0), 3: (50.0, 1.0)}  # knob -> regret at T = 0, 1
    assert ch.tuned((1, 2, 3), lambda x, T: table[x][T], (0, 1), reps=1) == 2
    assert ch.tuned((1, 2, 3), lambda x, T: table[x][T], (0,), reps=1) == 1


def test_claim2_holds_and_fails_when_exploring_half_the_horizon(default_problem):
    G, f_opt, values, stds, _ = default_problem
    mu, c = held_out_tuning(0)
    rng = np.random.default_rng(0)
    elim = np.mean([ch.elimination(values, stds, T_VS, 20, rng, c)["regret"] for _ in range(10)])
    good = np.mean([ch.pseudo_regret(ch.cmamab(G, 4, T_VS, 1, 20, rng, mult=mu), f_opt)
                    for _ in range(10)])
    assert elim / good >= ch.C_VS_ELIM
    half = np.mean([ch.pseudo_regret(ch.cmamab(G, 4, T_VS, 1, 20, rng,
                                               plays=T_VS // (2 * ch.n_queries(40, 4))), f_opt)
                    for _ in range(3)])
    assert elim / half < ch.C_VS_ELIM


# -- checks at the default tier's sizes and their broken variants --------------------
def measure(G, f_ref, seed, reps=3, **kw):
    """Mean per-agent regret R_A over the T grid at m = 1, and over m at the largest T."""
    rng = np.random.default_rng(seed)

    def mean_regret(T, m, **extra):
        return np.mean([ch.pseudo_regret(ch.cmamab(G, 4, int(T), m, 20, rng, **extra), f_ref)
                        for _ in range(reps)])
    over_T = [mean_regret(T, 1, **kw) for T in HORIZONS]
    over_m = [mean_regret(HORIZONS[-1], m, **kw) for m in AGENTS]
    return (ch.loglog_slope(HORIZONS, over_T), ch.loglog_slope(AGENTS, over_m))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.slow
def test_slope_checks_hold(seed):
    G = problem(seed)
    S_greedy, _ = exact_greedy(G, 4)
    slope_T, slope_m = measure(G, ch.f_value(G, S_greedy), seed)
    assert abs(slope_T - 2 / 3) <= ch.C_SLOPE_TOL
    assert abs(slope_m + 1 / 3) <= ch.C_SLOPE_TOL


def test_slope_check_fails_when_exploring_a_fixed_fraction(default_problem):
    G, f_greedy = default_problem[0], default_problem[4]
    rng = np.random.default_rng(0)
    N = ch.n_queries(40, 4)
    regret = [np.mean([ch.pseudo_regret(ch.cmamab(G, 4, int(T), 1, 20, rng,
                                                  plays=int(0.25 * T / N)), f_greedy)
                       for _ in range(3)]) for T in HORIZONS]
    assert abs(ch.loglog_slope(HORIZONS, regret) - 2 / 3) > ch.C_SLOPE_TOL


def test_slope_check_fails_without_cooperation(default_problem):
    G, f_greedy = default_problem[0], default_problem[4]
    rng = np.random.default_rng(0)
    T = int(HORIZONS[-1])
    # each agent runs alone: its exploration is the single agent's, whatever m is
    solo = [np.mean([ch.pseudo_regret(ch.cmamab(G, 4, T, 1, 20, rng), f_greedy)
                     for _ in range(m)]) for m in AGENTS]
    assert abs(ch.loglog_slope(AGENTS, solo) + 1 / 3) > ch.C_SLOPE_TOL
    # sharing rewards but sizing the exploration as if alone (r* of m = 1 per agent)
    p1 = ch.plays_per_query(T, 1, ch.n_queries(40, 4), 4)
    alone = [ch.pseudo_regret(ch.cmamab(G, 4, T, m, 20, rng, plays=p1), f_greedy) for m in AGENTS]
    assert abs(ch.loglog_slope(AGENTS, alone) + 1 / 3) > ch.C_SLOPE_TOL


def test_count_check_holds_and_fails_with_periodic_sync(default_problem):
    G = default_problem[0]
    rng = np.random.default_rng(0)
    N = ch.n_queries(40, 4)
    comm = [ch.cmamab(G, 4, int(T), m, 20, rng)["comm"] for T in HORIZONS for m in AGENTS]
    assert max(abs(c - (N + 1)) for c in comm) <= ch.C_COUNT
    periodic = [ch.cmamab(G, 4, int(T), 1, 20, rng, sync_every=100)["comm"] for T in HORIZONS]
    assert max(abs(c - (N + 1)) for c in periodic) > ch.C_COUNT


def test_commit_check_holds_and_fails_with_one_play_per_query(default_problem):
    G, f_greedy = default_problem[0], default_problem[4]
    rng = np.random.default_rng(0)
    good = [ch.cmamab(G, 4, int(T), m, 20, rng)["f_omega"] / f_greedy
            for T in HORIZONS[2:] for m in AGENTS for _ in range(2)]
    assert np.mean(good) >= ch.C_COMMIT
    broken = [ch.cmamab(G, 4, int(T), 1, 20, rng, plays=1)["f_omega"] / f_greedy
              for T in HORIZONS[2:] for _ in range(10)]
    assert np.mean(broken) < ch.C_COMMIT
