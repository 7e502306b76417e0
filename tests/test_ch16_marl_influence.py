"""Chapter 16: exact TIM/SIM by linear algebra, the estimator, and claims that fail when broken."""
import numpy as np
import pytest
from helpers import chapter_defs

ch = chapter_defs("ch16_marl_influence")
HIDDEN = [(0, 1), (1, 2)]


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


def trajectory_estimate(T, seed, critic="decaying", warmup=5000, snapshots=(), **env):
    P, R, pi = default_setup(**env)
    states, actions = ch.sample_trajectory(P, pi, T, np.random.default_rng(seed))
    return ch.estimate_impacts(states, actions, R, ch.DEV, warmup=warmup, critic=critic,
                               snapshots=snapshots), (P, R, pi, states, actions)


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
    # hidden checks 1 and 2: d P = d, and Eq. 6 = the truncated sum of Eq. 2 (centred)
    P, R, pi, dev = random_mdp(seed)
    P_pi = ch.state_action_chain(P, pi)
    assert np.allclose(P_pi.sum(1), 1)
    d = ch.stationary(P_pi)
    assert np.abs(d @ P_pi - d).max() < 1e-10 and d.min() > 0
    r = R.reshape(len(R), -1).T
    Q = ch.differential_q(P_pi, d, r)
    assert np.abs(d @ Q).max() < 1e-10  # centred
    assert np.abs(Q - ch.brute_force_q(P_pi, d, r)).max() < 1e-8
    # the Poisson equation behind Eq. 2: Q = r - J + P_pi Q
    assert np.allclose(Q, r - d @ r + P_pi @ Q, atol=1e-10)


def test_tim_invariant_to_constants_and_linear_in_scale():
    # hidden check 3
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
    # hidden check 4: entries with D = 0 are exactly zero; entries with D = 1 are not
    P, R, pi = default_setup(reward_edges=edges, driver=driver)
    tim, _, _, _ = ch.exact_impacts(P, pi, R, ch.DEV)
    D = ch.true_influence_graph(edges, driver)
    assert np.abs(tim[~D]).max() < 1e-12
    assert tim[D].min() > 0.05


def test_exact_tim_of_the_chapter_mdp():
    P, R, pi = default_setup()
    tim, sim, _, d = ch.exact_impacts(P, pi, R, ch.DEV)
    # immediate-reward edges have closed forms: the range of the reward term
    assert tim[0, 0] == pytest.approx(0.5) and tim[3, 3] == pytest.approx(0.5)
    assert tim[2, 2] == pytest.approx(0.3)
    assert tim[0, 1] == pytest.approx(1.0) and tim[1, 1] == pytest.approx(1.0)
    assert 0.7 < tim[1, 2] < 0.9  # transition-mediated
    # TIM is the state-average of SIM (the policy does not depend on the state here)
    assert np.allclose(np.einsum("s,sji->ji", d.sum(1), sim), tim)
    # SIM of the transition edge: zero where both moves land on odd states (s = 0, 2)
    assert sim[0, 1, 2] < 1e-9 and sim[2, 1, 2] < 1e-9 and sim[1, 1, 2] > 1.0


def test_trajectory_frequencies_match_stationary_distribution():
    P, R, pi = default_setup()
    _, _, _, d = ch.exact_impacts(P, pi, R, ch.DEV)
    states, actions = ch.sample_trajectory(P, pi, 40000, np.random.default_rng(0))
    freq = np.bincount(states * pi.shape[1] + actions, minlength=d.size) / len(states)
    assert np.abs(freq - d.ravel()).max() < 0.004


def test_estimator_is_decentralised():
    # agent i's estimate uses only its own reward: changing r_2 moves only column 2
    P, R, pi = default_setup()
    states, actions = ch.sample_trajectory(P, pi, 4000, np.random.default_rng(1))
    R2 = R.copy()
    R2[2] = np.random.default_rng(2).uniform(0, 5, size=R[2].shape)
    t1, s1, _ = ch.estimate_impacts(states, actions, R, ch.DEV, warmup=500)
    t2, s2, _ = ch.estimate_impacts(states, actions, R2, ch.DEV, warmup=500)
    assert np.array_equal(np.delete(t1, 2, axis=1), np.delete(t2, 2, axis=1))
    assert np.array_equal(np.delete(s1, 2, axis=2), np.delete(s2, 2, axis=2))
    assert not np.allclose(t1[:, 2], t2[:, 2])


@pytest.mark.parametrize("seed", range(5))
def test_graph_recovery_and_accuracy_hold(seed):
    (tim_hat, sim_hat, _), (P, R, pi, _, _) = trajectory_estimate(30000, seed)
    tim, sim, _, _ = ch.exact_impacts(P, pi, R, ch.DEV)
    D = ch.true_influence_graph()
    assert np.array_equal(ch.recovered_graph(tim_hat, 0.15), D)
    assert ch.relative_error(tim_hat, tim) <= 0.10
    assert ch.relative_error(sim_hat, sim) <= 0.10
    assert min(tim_hat[j, i] for j, i in HIDDEN) / tim_hat.max() >= 0.5


# ---- each claim fails for a broken variant -------------------------------------------

def test_exact_claim_fails_for_broken_solvers():
    P, R, pi, _ = random_mdp(0)  # a non-uniform stationary distribution
    P_pi = ch.state_action_chain(P, pi)
    d = ch.stationary(P_pi)
    r = R.reshape(len(R), -1).T
    n = len(d)
    brute = ch.brute_force_q(P_pi, d, r)
    # I - P + d 1^T instead of I - P + 1 d^T: still invertible, wrong Q
    wrong = np.linalg.solve(np.eye(n) - P_pi + np.outer(d, np.ones(n)), r - d @ r)
    assert np.abs(wrong - brute).max() > 1e-8
    # the chain transposed (P_pi^T in Eq. 6)
    wrong = np.linalg.solve(np.eye(n) - P_pi.T + np.outer(np.ones(n), d), r - d @ r)
    assert np.abs(wrong - brute).max() > 1e-8


def test_graph_and_hidden_edge_claims_fail_for_broken_estimators():
    P, R, pi = default_setup()
    tim, _, _, d = ch.exact_impacts(P, pi, R, ch.DEV)
    D = ch.true_influence_graph()
    # a critic that ignores the future (myopic): the transition edge disappears
    myopic = ch.myopic_impact(R, d, ch.DEV)
    assert (ch.recovered_graph(myopic, 0.15) != D).sum() > 0
    assert min(myopic[j, i] for j, i in HIDDEN) / myopic.max() < 0.5
    assert ch.relative_error(myopic, tim) > 0.10  # and the accuracy claim fails too
    # the [j, i] convention transposed
    (tim_hat, _, _), _ = trajectory_estimate(30000, 0)
    assert (ch.recovered_graph(tim_hat.T, 0.15) != D).sum() > 0


def test_accuracy_claims_fail_for_broken_averaging_and_a_myopic_critic():
    P, R, pi = default_setup()
    tim, sim, _, d = ch.exact_impacts(P, pi, R, ch.DEV)
    # no averaging (beta_t = 1): TIM^ is the last impact sample only
    states, actions = ch.sample_trajectory(P, pi, 30000, np.random.default_rng(0))
    tim_last, _, _ = ch.estimate_impacts(states, actions, R, ch.DEV, warmup=5000, kappa=0.0)
    assert ch.relative_error(tim_last, tim) > 0.10
    # a critic that ignores the future: SIM from immediate rewards
    sim_myopic = np.einsum("sa,saji->sji", pi, ch.impact_samples(np.moveaxis(R, 0, -1), ch.DEV))
    assert ch.relative_error(sim_myopic, sim) > 0.10


def test_convergence_claim_fails_for_the_constant_step_critic():
    checks = (10000, 60000)
    (_, _, snaps), (P, R, pi, _, _) = trajectory_estimate(60000, 0, critic="constant",
                                                          snapshots=checks)
    tim, _, _, _ = ch.exact_impacts(P, pi, R, ch.DEV)
    err = [ch.relative_error(snaps[t][0], tim) for t in checks]
    assert err[1] / err[0] > 0.8


def test_baseline_claims_fail_when_the_influence_is_not_hidden():
    # the myopic baseline sees 1 -> 2 once a_1 enters r_2 directly
    P, R, pi = default_setup(reward_edges=((0, 1), (1, 2)))
    _, _, _, d = ch.exact_impacts(P, pi, R, ch.DEV)
    assert ch.myopic_impact(R, d, ch.DEV)[1, 2] > 0.05
    # the correlation sees the XOR coupling once agent 1's policy is biased
    P, R, pi = default_setup(p_one=(0.5, 0.8, 0.5, 0.5))
    states, actions = ch.sample_trajectory(P, pi, 20000, np.random.default_rng(0))
    corr = ch.action_reward_corr(actions[:-1], R[:, states[:-1], actions[:-1]].T,
                                 ch.joint_actions(4, 2))
    assert corr[0, 1] > 0.05


def test_baselines_miss_the_hidden_edges():
    P, R, pi = default_setup()
    tim, _, _, d = ch.exact_impacts(P, pi, R, ch.DEV)
    assert ch.myopic_impact(R, d, ch.DEV)[1, 2] / tim.max() <= 0.05
    states, actions = ch.sample_trajectory(P, pi, 60000, np.random.default_rng(3))
    corr = ch.action_reward_corr(actions[:-1], R[:, states[:-1], actions[:-1]].T,
                                 ch.joint_actions(4, 2))
    assert max(corr[j, i] for j, i in HIDDEN) <= 0.05
    assert corr[0, 0] > 0.99  # it does see direct, linear influence
