"""Chapter 17: the exact PPD, the network's cached and windowed forward, the references,
and paper claims that hold for the chapter's agent and fail for broken ones."""
import numpy as np
import pytest
import torch
from helpers import chapter_defs

ch = chapter_defs("ch17_in_context_posterior_sampling")
TRAIN = ch.posterior_tables(ch.TRAIN_PRIOR)
TEST_PRIOR = (0.5, 1.0)  # the chapter's default shift
L_DEFAULT, N_TEST, WINDOW = 300, 200, 4  # the default tier's horizon and window


def gen(seed):
    return torch.Generator().manual_seed(seed)


def small_net(seed=0, d=16):
    torch.manual_seed(seed)
    return ch.PSBLNet(d, 2 * d).eval()


# ---- the exact PPD (Eq. 3) -------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_ppd_matches_monte_carlo(seed):
    g = gen(seed)
    wins = torch.randint(0, 4, (ch.K,), generator=g).float()
    losses = torch.randint(0, 4, (ch.K,), generator=g).float()
    exact = ch.exact_ppd(wins, losses, TRAIN)
    mc = ch.monte_carlo_ppd(wins, losses, ch.TRAIN_PRIOR, 200_000, g)
    assert torch.allclose(exact.sum(), torch.tensor(1.0), atol=1e-5)
    assert (exact - mc).abs().max() <= ch.C_PPD_MC


def test_exact_ppd_is_uniform_without_data_and_equivariant_to_arm_order():
    zero = torch.zeros(ch.K)
    assert torch.allclose(ch.exact_ppd(zero, zero, TRAIN), torch.full((ch.K,), 1 / ch.K),
                          atol=1e-6)
    wins, losses = torch.tensor([3.0, 0, 1, 2, 5]), torch.tensor([1.0, 2, 2, 0, 4])
    perm = torch.tensor([4, 2, 0, 1, 3])
    p = ch.exact_ppd(wins, losses, TRAIN)
    assert torch.allclose(ch.exact_ppd(wins[perm], losses[perm], TRAIN), p[perm], atol=1e-6)


def test_exact_ppd_rises_with_an_arms_successes():
    losses = torch.zeros(ch.K)
    probs = [ch.exact_ppd(torch.tensor([w, 1.0, 1, 1, 1]), losses, TRAIN)[0]
             for w in range(6)]
    assert all(b > a for a, b in zip(probs, probs[1:]))


def test_posterior_mean_is_the_prior_mean_then_the_laplace_rule_on_the_unit_interval():
    zero = torch.zeros(ch.K)
    assert torch.allclose(ch.posterior_mean(zero, zero, TRAIN, ch.TRAIN_PRIOR),
                          torch.full((ch.K,), 0.25), atol=1e-6)
    flat = ch.posterior_tables((0.0, 1.0))
    wins, losses = torch.tensor([3.0, 0, 7, 1, 2]), torch.tensor([1.0, 4, 2, 1, 9])
    laplace = (wins + 1) / (wins + losses + 2)  # the Beta(1, 1) posterior mean
    got = ch.posterior_mean(wins, losses, flat, (0.0, 1.0))
    assert torch.allclose(got, laplace, atol=2e-3)


def test_prefix_counts_match_a_loop():
    g = gen(3)
    means = ch.sample_tasks(4, ch.TRAIN_PRIOR, g)
    arms, rewards = ch.behaviour_histories(means, 30, g)
    wins, losses = ch.prefix_counts(arms, rewards)
    for i in range(4):
        w, f = torch.zeros(ch.K), torch.zeros(ch.K)
        for t in range(30):
            assert torch.equal(wins[i, t], w) and torch.equal(losses[i, t], f)
            w[arms[i, t]] += rewards[i, t]
            f[arms[i, t]] += 1 - rewards[i, t]
        assert torch.equal(wins[i, 30], w) and torch.equal(losses[i, 30], f)


def test_tasks_and_histories_respect_their_priors():
    g = gen(4)
    train = ch.sample_tasks(2000, ch.TRAIN_PRIOR, g)
    test = ch.sample_tasks(2000, TEST_PRIOR, g)
    assert train.max() < 0.5 <= test.min()  # strictly shifted
    arms, rewards = ch.behaviour_histories(train[:50], 40, g)
    assert arms.min() >= 0 and arms.max() < ch.K
    assert set(rewards.unique().tolist()) <= {0.0, 1.0}


# ---- the network, the cache and the window -------------------------------------------

def test_cached_forward_equals_the_plain_forward_in_chunks():
    net = small_net()
    g = gen(5)
    arms, rewards = ch.behaviour_histories(ch.sample_tasks(3, TEST_PRIOR, g), 80, g)
    x = net.with_bos(arms, rewards)
    with torch.no_grad():
        full = net.gpt(embeds=x, return_hidden=True)
        cache = [None] * len(net.gpt.blocks)
        parts = [ch.forward_cached(net, x[:, :20], 0, cache),
                 ch.forward_cached(net, x[:, 20:21], 20, cache),
                 ch.forward_cached(net, x[:, 21:81], 21, cache)]
    assert (torch.cat(parts, 1) - full).abs().max() < ch.C_CACHE


def test_window_never_exceeds_the_training_trial_and_slides_by_episodes():
    for window in range(1, 6):
        starts = [ch.window_start(t, window) for t in range(400)]
        assert all(t - s <= ch.H - 1 for t, s in enumerate(starts))  # with BOS <= H + 1
        assert all(s % ch.EPISODE == 0 for s in starts)
        changes = [t for t in range(1, 400) if starts[t] != starts[t - 1]]
        assert all(t % ch.EPISODE == 0 for t in changes)
    assert {ch.window_start(t, None) for t in range(400)} == {0}


@pytest.mark.parametrize("window", [1, 3, 5, None])
def test_acted_on_q_equals_the_window_reread_from_scratch(window):
    net = small_net(1)
    means = ch.sample_tasks(3, TEST_PRIOR, gen(6))
    arms, rewards, q = ch.act_in_context(net, means, 90, gen(7), window=window, temp=0.7)
    with torch.no_grad():
        for t in (0, 9, 10, 39, 40, 55, 73, 89):
            lo = ch.window_start(t, window)
            fresh = net(arms[:, lo:t], rewards[:, lo:t])[0][:, -1]
            assert ((fresh / 0.7).softmax(-1) - q[:, t]).abs().max() < ch.C_WINDOW


def test_greedy_plays_the_mode_and_a_cold_sampler_agrees():
    net = small_net(2)
    means = ch.sample_tasks(4, TEST_PRIOR, gen(8))
    arms, _, q = ch.act_in_context(net, means, 60, gen(9), sample=False)
    assert torch.equal(arms, q.argmax(-1))
    cold, _, _ = ch.act_in_context(net, means, 60, gen(9), sample=True, temp=1e-4)
    assert torch.equal(cold, arms)


def test_psbl_loss_is_nonnegative_and_trains_the_empty_context_to_uniform():
    net = ch.PSBLNet(16, 32)
    g = gen(10)
    means = ch.sample_tasks(20 * 16, ch.TRAIN_PRIOR, g)
    arms, rewards = ch.behaviour_histories(means, ch.H, g)
    loss, kl, bce = ch.psbl_loss(net, arms[:16], rewards[:16], TRAIN)
    assert kl >= 0 and bce > 0 and torch.isfinite(loss)
    history = ch.pretrain(net, arms, rewards, TRAIN, 20, 16)
    assert history.shape == (20, 2) and history[-5:, 0].mean() < history[:5, 0].mean()


# ---- the references ------------------------------------------------------------------

def test_ucb1_pulls_every_arm_once_first():
    arms = ch.ucb1(ch.sample_tasks(6, TEST_PRIOR, gen(11)), 20, gen(12))
    for row in arms:
        assert sorted(row[:ch.K].tolist()) == list(range(ch.K))


def test_thompson_draws_inside_its_prior_and_finds_an_obvious_arm():
    means = torch.tensor([[0.95, 0.55, 0.55, 0.55, 0.55]]).repeat(50, 1)
    arms = ch.thompson(means, 100, gen(13), TEST_PRIOR)
    assert (arms[:, -20:] == 0).float().mean() > 0.9


def test_regret_curve_and_lifelong_ratio():
    means = torch.tensor([[0.9, 0.5, 0.6, 0.7, 0.8]])
    always_second = torch.full((1, 300), 4)
    curve = ch.regret_curve(means, always_second)
    assert np.allclose(curve, 0.1 * np.arange(1, 301))
    assert ch.lifelong_ratio(curve) == pytest.approx(1.0)


def test_thresholds_are_the_chapters():
    # the bars come from the chapter's thresholds cell, never retyped here
    assert 0 < ch.C_VS_GREEDY < 1 and 0 < ch.C_LIFELONG < 1


# ---- paper claims: they hold for the chapter's agent, and fail for broken ones -------

@pytest.fixture(scope="module")
def trained():
    """The default tier's pretraining at seed 0 and its shifted test tasks."""
    torch.manual_seed(0)
    g = gen(0)
    means = ch.sample_tasks(300 * 32, ch.TRAIN_PRIOR, g)
    arms, rewards = ch.behaviour_histories(means, ch.H, g)
    net = ch.PSBLNet(32, 64)
    ch.pretrain(net, arms, rewards, TRAIN, 300, 32)
    test = ch.sample_tasks(N_TEST, TEST_PRIOR, gen(1000))
    greedy = ch.act_in_context(net, test, L_DEFAULT, gen(1001), sample=False,
                               window=WINDOW)[0]
    return net, test, {"greedy": ch.regret_curve(test, greedy)}


def paper_claims(curve, curves):
    """The chapter's two paper claims for an agent with regret curve `curve`: regret
    against the greedy stand-in, and rho (Eq. 7) against the greedy agent's rho."""
    greedy = curves["greedy"]
    return dict(vs_greedy=curve[-1] / greedy[-1] <= ch.C_VS_GREEDY,
                lifelong=ch.lifelong_ratio(curve) / ch.lifelong_ratio(greedy)
                <= ch.C_LIFELONG)


def test_paper_claims_hold_for_the_chapter_agent(trained):
    net, test, curves = trained
    arms = ch.act_in_context(net, test, L_DEFAULT, gen(1), window=WINDOW)[0]
    assert all(paper_claims(ch.regret_curve(test, arms), curves).values())


def test_an_agent_that_ignores_its_history_fails_every_paper_claim(trained):
    net, test, curves = trained
    with torch.no_grad():
        q0 = net(torch.zeros(1, 0, dtype=torch.long), torch.zeros(1, 0))[0][0, -1]
    arms = torch.multinomial(q0.softmax(-1).expand(N_TEST, ch.K), L_DEFAULT,
                             replacement=True, generator=gen(2))
    assert not any(paper_claims(ch.regret_curve(test, arms), curves).values())


def test_a_context_frozen_at_the_training_horizon_fails_the_lifelong_claim(trained):
    # the window stops sliding: after H pulls the agent keeps sampling from q(. | tau_H)
    net, test, curves = trained
    arms, _, q = ch.act_in_context(net, test, ch.H + 1, gen(3), window=WINDOW)
    stale = torch.multinomial(q[:, -1], L_DEFAULT - ch.H, replacement=True,
                              generator=gen(4))
    curve = ch.regret_curve(test, torch.cat([arms[:, :ch.H], stale], 1))
    assert not paper_claims(curve, curves)["lifelong"]


def test_greedy_use_of_the_network_fails_the_sampling_claims(trained):
    _, _, curves = trained
    holds = paper_claims(curves["greedy"], curves)
    assert not holds["vs_greedy"] and not holds["lifelong"]
