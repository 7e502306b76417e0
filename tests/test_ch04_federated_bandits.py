"""Chapter 04: submodular objective, offline algorithms, C-MA-MAB bookkeeping, claims that fail when broken."""
import itertools
from math import e

import numpy as np
import pytest
from helpers import chapter_defs

ch = chapter_defs("ch04_federated_bandits")

HORIZONS = (1e4, 3e4, 1e5, 3e5, 1e6)
AGENTS = (1, 2, 4, 8)


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
    f_opt, S_opt, values = ch.brute_force_opt(G, 4)
    S_greedy, _ = exact_greedy(G, 4)
    return G, f_opt, S_opt, ch.f_value(G, S_greedy)


# -- the objective -----------------------------------------------------------------
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


def test_brute_force_matches_enumeration_and_greedy_guarantee():
    for seed in range(4):
        G = problem(seed, n=12, pool=100)
        f_opt, S_opt, values = ch.brute_force_opt(G, 3, chunk=50)
        direct = [ch.f_value(G, S) for S in itertools.combinations(range(12), 3)]
        assert np.allclose(values, direct)
        assert f_opt == pytest.approx(max(direct)) and ch.f_value(G, S_opt) == pytest.approx(f_opt)
        S_greedy, _ = exact_greedy(G, 3)
        assert ch.f_value(G, S_greedy) >= (1 - 1 / e) * f_opt


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
    G, f_opt, _, _ = default_problem
    S_greedy, queried = exact_greedy(G, 4)
    T, m = 300_000, 4
    res = ch.cmamab(G, 4, T, m, 20, np.random.default_rng(0))
    p = res["plays"]
    assert res["explore"] == res["queries"] * p == ch.n_queries(40, 4) * p
    assert res["comm"] == res["queries"] + 1
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


# -- the claims at the default tier's sizes and their broken variants -------------
def measure(G, f_ref, seed, reps=3, **kw):
    """Mean per-agent regret R_A over the T grid at m = 1, and over m at the largest T."""
    rng = np.random.default_rng(seed)

    def mean_regret(T, m, **extra):
        return np.mean([ch.pseudo_regret(ch.cmamab(G, 4, int(T), m, 20, rng, **extra), f_ref)
                        for _ in range(reps)])
    over_T = [mean_regret(T, 1, **kw) for T in HORIZONS]
    over_m = [mean_regret(HORIZONS[-1], m, **kw) for m in AGENTS]
    return (ch.loglog_slope(HORIZONS, over_T), ch.loglog_slope(AGENTS, over_m))


@pytest.mark.parametrize("seed", range(5))
def test_slope_claims_hold(seed):
    G = problem(seed)
    S_greedy, _ = exact_greedy(G, 4)
    slope_T, slope_m = measure(G, ch.f_value(G, S_greedy), seed)
    assert 0.58 <= slope_T <= 0.78
    assert -0.42 <= slope_m <= -0.25


def test_claim1_fails_when_exploring_a_fixed_fraction(default_problem):
    G, _, _, f_greedy = default_problem
    rng = np.random.default_rng(0)
    N = ch.n_queries(40, 4)
    regret = [np.mean([ch.pseudo_regret(ch.cmamab(G, 4, int(T), 1, 20, rng,
                                                  plays=int(0.25 * T / N)), f_greedy)
                       for _ in range(3)]) for T in HORIZONS]
    assert ch.loglog_slope(HORIZONS, regret) > 0.78


def test_claim2_fails_without_cooperation(default_problem):
    G, _, _, f_greedy = default_problem
    rng = np.random.default_rng(0)
    T = int(HORIZONS[-1])
    # each agent runs alone: its exploration is the single agent's, whatever m is
    solo = [np.mean([ch.pseudo_regret(ch.cmamab(G, 4, T, 1, 20, rng), f_greedy)
                     for _ in range(m)]) for m in AGENTS]
    assert ch.loglog_slope(AGENTS, solo) > -0.25
    # sharing rewards but sizing the exploration as if alone (r* of m = 1 per agent)
    p1 = ch.plays_per_query(T, 1, ch.n_queries(40, 4), 4)
    alone = [ch.pseudo_regret(ch.cmamab(G, 4, T, m, 20, rng, plays=p1), f_greedy) for m in AGENTS]
    assert ch.loglog_slope(AGENTS, alone) > -0.25


def test_claim3_holds_and_fails_with_periodic_sync(default_problem):
    G = default_problem[0]
    rng = np.random.default_rng(0)
    comm = [ch.cmamab(G, 4, int(T), m, 20, rng)["comm"] for T in HORIZONS for m in AGENTS]
    assert max(comm) / min(comm) <= 1.0 and comm[0] == ch.n_queries(40, 4) + 1
    periodic = [ch.cmamab(G, 4, int(T), 1, 20, rng, sync_every=100)["comm"] for T in HORIZONS]
    assert max(periodic) / min(periodic) > 1.0


def test_claim4_holds_and_fails_with_one_play_per_query(default_problem):
    G, f_opt, _, _ = default_problem
    rng = np.random.default_rng(0)
    good = [ch.cmamab(G, 4, int(T), m, 20, rng)["f_omega"] / f_opt
            for T in HORIZONS[2:] for m in AGENTS for _ in range(2)]
    assert min(good) >= 0.96
    broken = [ch.cmamab(G, 4, int(T), m, 20, rng, plays=1)["f_omega"] / f_opt
              for T in HORIZONS[2:] for m in (1,) for _ in range(10)]
    assert min(broken) < 0.96


def test_bundled_digits_are_sklearns():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    X2, y2 = ch.load_digits_csv()
    assert np.array_equal(X, X2) and np.array_equal(y, y2)
