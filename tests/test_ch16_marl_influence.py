"""Chapter 16: exact TIM/SIM by linear algebra, the estimator, and claims that fail when broken."""
import functools

import numpy as np
import pytest
from helpers import chapter_defs

ch = chapter_defs("ch16_marl_influence")
HIDDEN = [(0, 1), (1, 2)]
T_DEFAULT = 60000  # the default tier's trajectory; the claims read the estimates at its end
CHAPTER_CRITICS = (("decaying", 0.8), ("myopic", 0.8), ("constant", ch.AUTHORS_LR))


def default_setup(p_one=0.5, **env):
    P, R = ch.make_env(**env)
    pi = ch.product_policy(p_one, ch.N_STATES, ch.N_AGENTS)
    return P, R, pi


def random_mdp(seed, S=3, n=3):
    """A random MDP with binary actions and a random state-dependent policy."""
    rng = np.random.default_rng(seed)
    J = 2**n
    P = rng.dirichlet(np.ones(S), size=(S, J))
    R = rng.uniform(0, 2, size=(n, S, J))
    pi = rng.dirichlet(np.ones(J), size=S)
    return P, R, pi, ch.deviation_table(n, 2)


@functools.lru_cache(maxsize=None)
def rollout(seed, T=T_DEFAULT):
    P, R, pi = default_setup()
    return ch.sample_trajectory(P, pi, T, np.random.default_rng(seed))


@functools.lru_cache(maxsize=None)
def estimates(seed, critics=CHAPTER_CRITICS, tim_step=ch.TIM_STEP, sim_step=ch.SIM_STEP):
    """The chapter's estimators on the default tier's trajectory of `seed`, one per critic."""
    states, actions = rollout(seed)
    _, R, _ = default_setup()
    return ch.estimate_impacts(states, actions, R, ch.DEV, critics=critics, tim_step=tim_step,
                               sim_step=sim_step)


def exact():
    P, R, pi = default_setup()
    return ch.exact_impacts(P, pi, R, ch.DEV)


def corr_separation(seed):
    """The baseline as the chapter runs it: the better of plain and within-state."""
    states, actions = rollout(seed)
    _, R, _ = default_setup()
    rewards = R[:, states[:-1], actions[:-1]].T
    D = ch.true_influence_graph()
    return max(ch.separation(ch.lagged_correlation(states[:-1], actions[:-1], rewards,
                                                   ch.joint_actions(4, 2), by_state=b), D)
               for b in (False, True))


def paper_claims(tim_hat, sim_hat, seed):
    """The chapter's four paper claims for an estimate: {claim: holds}."""
    tim, sim, _, _ = exact()
    D = ch.true_influence_graph()
    sep = ch.separation(tim_hat, D)
    sep_myopic = ch.separation(estimates(seed)[1][0], D)
    return dict(vs_myopic=sep - sep_myopic >= ch.C_SEP_VS_MYOPIC,
                vs_corr=sep - corr_separation(seed) >= ch.C_SEP_VS_CORR,
                tim=ch.relative_error(tim_hat, tim) <= ch.C_TIM_ERR,
                sim=sim_hat is not None and ch.relative_error(sim_hat, sim) <= ch.C_SIM_ERR)


# ---- the MDP and the exact values ------------------------------------------------------

def test_deviation_table():
    acts = ch.joint_actions(3, 3)
    dev = ch.deviation_table(3, 3)
    for a in range(len(acts)):
        for j in range(3):
            for b in range(3):
                changed = acts[dev[a, j, b]]
                assert changed[j] == b
                assert np.array_equal(np.delete(changed, j), np.delete(acts[a], j))
        assert all(dev[a, j, acts[a, j]] == a for j in range(3))


@pytest.mark.parametrize("seed", range(3))
def test_stationarity_and_exact_q_match_brute_force(seed):
    P, R, pi, dev = random_mdp(seed)
    P_pi = ch.state_action_chain(P, pi)
    assert np.allclose(P_pi.sum(1), 1)
    d = ch.stationary(P_pi)
    assert np.abs(d @ P_pi - d).max() < ch.C_EXACT and d.min() > 0
    r = R.reshape(len(R), -1).T
    Q = ch.differential_q(P_pi, d, r)
    assert np.abs(d @ Q).max() < ch.C_EXACT  # centred
    assert np.abs(Q - ch.brute_force_q(P_pi, d, r)).max() < ch.C_EXACT
    # the Poisson equation behind Eq. 2: Q = r - J + P_pi Q
    assert np.allclose(Q, r - d @ r + P_pi @ Q, atol=ch.C_EXACT)


def test_tim_invariant_to_constants_and_linear_in_scale():
    P, R, pi = default_setup()
    tim, sim, _, _ = ch.exact_impacts(P, pi, R, ch.DEV)
    R2 = R.copy()
    R2[1] = 3 * R2[1] + 7
    tim2, sim2, _, _ = ch.exact_impacts(P, pi, R2, ch.DEV)
    assert np.allclose(tim2[:, 1], 3 * tim[:, 1], atol=1e-12)
    assert np.allclose(np.delete(tim2, 1, axis=1), np.delete(tim, 1, axis=1), atol=1e-12)
    assert np.allclose(sim2[:, :, 1], 3 * sim[:, :, 1], atol=1e-12)


@pytest.mark.parametrize("edges,driver", [(((0, 1),), 1), ((), None), (((2, 0), (3, 1)), 3),
                                          (((0, 1), (1, 0), (0, 2)), 0)])
def test_true_zeros_are_exact_and_true_edges_positive(edges, driver):
    P, R, pi = default_setup(reward_edges=edges, driver=driver)
    tim, _, _, _ = ch.exact_impacts(P, pi, R, ch.DEV)
    D = ch.true_influence_graph(edges, driver)
    assert np.abs(tim[~D]).max() <= ch.C_ZERO
    assert tim[D].min() > 0.05


def test_exact_tim_of_the_chapter_mdp():
    tim, sim, _, d = exact()
    # immediate-reward edges have closed forms: the range of the reward term
    assert tim[0, 0] == pytest.approx(0.5) and tim[3, 3] == pytest.approx(0.5)
    assert tim[2, 2] == pytest.approx(0.3)
    assert tim[0, 1] == pytest.approx(1.0) and tim[1, 1] == pytest.approx(1.0)
    assert 0.7 < tim[1, 2] < 0.9  # transition-mediated
    # TIM is the state-average of SIM (the policy does not depend on the state here)
    assert np.allclose(np.einsum("s,sji->ji", d.sum(1), sim), tim)
    # SIM of the transition edge: zero where both moves land on odd states (s = 0, 2)
    assert sim[0, 1, 2] < 1e-9 and sim[2, 1, 2] < 1e-9 and sim[1, 1, 2] > 1.0


@pytest.mark.slow
def test_trajectory_frequencies_match_stationary_distribution():
    P, R, pi = default_setup()
    _, _, _, d = ch.exact_impacts(P, pi, R, ch.DEV)
    states, actions = ch.sample_trajectory(P, pi, 40000, np.random.default_rng(0))
    freq = np.bincount(states * pi.shape[1] + actions, minlength=d.size) / len(states)
    assert np.abs(freq - d.ravel()).max() < 0.004


# ---- the estimator -----------------------------------------------------------------------

def test_step_size_schedule():
    assert ch.step_size(1, ch.TIM_STEP) == pytest.approx(ch.TIM_STEP[0])
    assert ch.step_size(1, (2.0, 0.5)) == 1.0  # capped
    assert ch.step_size(100, (0.5, 0.5)) == pytest.approx(0.05)


@pytest.mark.slow
def test_estimator_is_decentralised():
    # agent i's estimate uses only its own reward: changing r_2 moves only agent 2's columns
    P, R, pi = default_setup()
    states, actions = ch.sample_trajectory(P, pi, 4000, np.random.default_rng(1))
    R2 = R.copy()
    R2[2] = np.random.default_rng(2).uniform(0, 5, size=R[2].shape)
    for critic in CHAPTER_CRITICS:
        (t1, s1, _), = ch.estimate_impacts(states, actions, R, ch.DEV, critics=[critic])
        (t2, s2, _), = ch.estimate_impacts(states, actions, R2, ch.DEV, critics=[critic])
        assert np.array_equal(np.delete(t1, 2, axis=1), np.delete(t2, 2, axis=1))
        assert np.array_equal(np.delete(s1, 2, axis=2), np.delete(s2, 2, axis=2))
        assert not np.allclose(t1[:, 2], t2[:, 2])


@pytest.mark.slow
def test_critics_side_by_side_equal_critics_alone():
    P, R, pi = default_setup()
    states, actions = ch.sample_trajectory(P, pi, 3000, np.random.default_rng(4))
    together = ch.estimate_impacts(states, actions, R, ch.DEV, critics=CHAPTER_CRITICS,
                                   snapshots=(1500,))
    for critic, (tim, sim, snaps) in zip(CHAPTER_CRITICS, together):
        (tim1, sim1, snaps1), = ch.estimate_impacts(states, actions, R, ch.DEV,
                                                    critics=[critic], snapshots=(1500,))
        assert np.allclose(tim, tim1, atol=1e-12) and np.allclose(sim, sim1, atol=1e-12)
        assert np.allclose(snaps[1500][0], snaps1[1500][0], atol=1e-12)


@pytest.mark.slow
def test_myopic_ablation_estimates_the_exact_myopic_impact():
    _, _, _, d = exact()
    _, R, _ = default_setup()
    tim_myopic = estimates(0)[1][0]
    myopic = ch.myopic_impact(R, d, ch.DEV)
    assert ch.relative_error(tim_myopic, myopic) < 1e-3
    assert myopic[1, 2] <= ch.C_ZERO  # the chapter's check


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.slow
def test_paper_claims_hold_for_the_chapter_estimator(seed):
    tim_hat, sim_hat, _ = estimates(seed)[0]
    assert all(paper_claims(tim_hat, sim_hat, seed).values())
    D = ch.true_influence_graph()
    assert np.array_equal(ch.recovered_graph(tim_hat, 0.15), D)
    assert min(tim_hat[j, i] for j, i in HIDDEN) / tim_hat.max() >= 0.5


# ---- each paper claim fails for a broken variant -----------------------------------------

@pytest.mark.slow
def test_transposed_convention_fails_both_separation_claims():
    tim_hat, _, _ = estimates(0)[0]
    holds = paper_claims(tim_hat.T, None, 0)
    assert not holds["vs_myopic"] and not holds["vs_corr"]


def test_critic_without_the_future_fails_every_paper_claim():
    tim_hat, sim_hat, _ = estimates(0)[1]  # the myopic ablation as the estimator
    assert not any(paper_claims(tim_hat, sim_hat, 0).values())


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.slow
def test_authors_constant_step_fails_the_accuracy_claims(seed):
    tim_hat, sim_hat, _ = estimates(seed)[2]
    holds = paper_claims(tim_hat, sim_hat, seed)
    assert not holds["tim"] and not holds["sim"]
    assert holds["vs_myopic"] and holds["vs_corr"]  # it still separates the graph


@pytest.mark.slow
def test_no_averaging_fails_the_accuracy_claims():
    # beta_t = 1: TIM^ and SIM^ are the last impact samples only
    tim_hat, sim_hat, _ = estimates(0, critics=CHAPTER_CRITICS[:1], tim_step=(1.0, 0.0),
                                    sim_step=(1.0, 0.0))[0]
    holds = paper_claims(tim_hat, sim_hat, 0)
    assert not holds["tim"] and not holds["sim"]


def test_exact_check_fails_for_broken_solvers():
    P, R, pi, _ = random_mdp(0)  # a non-uniform stationary distribution
    P_pi = ch.state_action_chain(P, pi)
    d = ch.stationary(P_pi)
    r = R.reshape(len(R), -1).T
    n = len(d)
    brute = ch.brute_force_q(P_pi, d, r)
    # I - P + d 1^T instead of I - P + 1 d^T: still invertible, wrong Q
    wrong = np.linalg.solve(np.eye(n) - P_pi + np.outer(d, np.ones(n)), r - d @ r)
    assert np.abs(wrong - brute).max() > ch.C_EXACT
    # the chain transposed (P_pi^T in Eq. 6)
    wrong = np.linalg.solve(np.eye(n) - P_pi.T + np.outer(np.ones(n), d), r - d @ r)
    assert np.abs(wrong - brute).max() > ch.C_EXACT


# ---- the baselines and the checks on the construction ------------------------------------

def test_population_correlation_of_the_xor_edge_is_zero_only_under_a_uniform_policy():
    acts = ch.joint_actions(4, 2)
    for p_one, zero in [(0.5, True), ((0.8, 0.5, 0.5, 0.5), True), ((0.5, 0.8, 0.5, 0.5), False)]:
        P, R, pi = default_setup(p_one=p_one)
        P_pi = ch.state_action_chain(P, pi)
        d = ch.stationary(P_pi)
        c = ch.population_corr(P_pi, d, R.reshape(4, -1).T, acts, 0)
        assert (c[0, 1] <= ch.C_ZERO) == zero  # agent 0 biased alone: still independent
        assert c[0, 0] > 0.99  # it does see direct, linear influence


@pytest.mark.slow
def test_population_correlation_matches_a_long_rollout():
    P, R, pi = default_setup()
    P_pi = ch.state_action_chain(P, pi)
    d = ch.stationary(P_pi)
    states, actions = rollout(3)
    rewards = R[:, states[:-1], actions[:-1]].T
    for lag in ch.LAGS:
        exact_c = ch.population_corr(P_pi, d, R.reshape(4, -1).T, ch.joint_actions(4, 2), lag)
        sample_c = ch.lagged_correlation(states[:-1], actions[:-1], rewards,
                                         ch.joint_actions(4, 2), lags=(lag,))
        assert np.abs(exact_c - sample_c).max() < 0.03


@pytest.mark.slow
def test_lagged_correlation_finds_the_transition_edge_only_within_states():
    states, actions = rollout(3)
    _, R, _ = default_setup()
    rewards = R[:, states[:-1], actions[:-1]].T
    acts = ch.joint_actions(4, 2)
    plain = ch.lagged_correlation(states[:-1], actions[:-1], rewards, acts)
    within = ch.lagged_correlation(states[:-1], actions[:-1], rewards, acts, by_state=True)
    assert plain[1, 2] < 0.05 < 0.2 < within[1, 2]
    assert max(plain[0, 1], within[0, 1]) < 0.05  # the XOR edge stays hidden
    assert corr_separation(3) < 0  # so no threshold recovers the graph


def test_baselines_see_the_influence_when_it_is_not_hidden():
    # the myopic range sees 1 -> 2 once a_1 enters r_2 directly
    P, R, pi = default_setup(reward_edges=((0, 1), (1, 2)))
    _, _, _, d = ch.exact_impacts(P, pi, R, ch.DEV)
    assert ch.myopic_impact(R, d, ch.DEV)[1, 2] > ch.C_ZERO
    # the correlation sees the XOR coupling once agent 1's policy is biased
    P, R, pi = default_setup(p_one=(0.5, 0.8, 0.5, 0.5))
    states, actions = ch.sample_trajectory(P, pi, 20000, np.random.default_rng(0))
    corr = ch.lagged_correlation(states[:-1], actions[:-1], R[:, states[:-1], actions[:-1]].T,
                                 ch.joint_actions(4, 2))
    assert corr[0, 1] > 0.05


def test_separation_score():
    D = np.array([[True, False], [True, True]])
    assert ch.separation(np.array([[1.0, 0.1], [0.5, 0.8]]), D) == pytest.approx(0.4)
    assert ch.separation(np.array([[1.0, 0.6], [0.5, 0.8]]), D) < 0


def test_conditional_correlation_of_exercise_3_sees_xor_but_not_parity():
    P, R, pi = default_setup()
    tim, _, _, d = ch.exact_impacts(P, pi, R, ch.DEV)
    acts = ch.joint_actions(4, 2)
    s_all = np.repeat(np.arange(ch.N_STATES), len(acts))
    a_all = np.tile(acts, (ch.N_STATES, 1))
    xor = ch.conditional_corr(d.ravel(), R[1].ravel(), a_all[:, 0], a_all[:, 1], s_all)
    assert xor == pytest.approx(1.0)
    R3 = R.copy()
    R3[2] += (acts[:, 0] ^ acts[:, 1] ^ acts[:, 2]) == 0
    tim3, _, _, d3 = ch.exact_impacts(P, pi, R3, ch.DEV)
    parity = ch.conditional_corr(d3.ravel(), R3[2].ravel(), a_all[:, 0], a_all[:, 2], s_all)
    assert parity <= ch.C_ZERO and tim3[0, 2] == pytest.approx(1.0)
