# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Detecting influence structures in multi-agent RL
#
# **Paper.** Fabian Raoul Pieroth, Katherine Fitch, Lenz Belzner. *Detecting Influence
# Structures in Multi-Agent Reinforcement Learning.* ICML 2024, PMLR 235:40740–40761.
# [PMLR](https://proceedings.mlr.press/v235/pieroth24a.html) ·
# [OpenReview (earlier ICLR 2024 submission)](https://openreview.net/forum?id=DQTxr8JtPX) ·
# [authors' code](https://github.com/FabianPieroth/detecting-influence-structures-in-marl).
# Everything below is written from the paper's definitions; the authors' code was read
# for the index conventions and the step-size schedules of their experiments, never copied.
#
# **The problem.** In a multi-agent system, which agent's actions actually matter for
# which other agent's return? The answer (an *influence graph*) tells a designer whom
# to let communicate, which agents to train jointly, and where coordination is needed.
# Looking at immediate rewards or at correlations misses two kinds of influence: an
# agent can act on another only *through the state* (it changes where everybody goes
# next), and an interaction can be *non-linear* (an XOR-style "match me" reward), which
# has zero correlation with either action alone.
#
# **The idea.** Measure influence on the *long-run* value. Agent $i$'s differential
# action value $Q_i$ (average-reward setting) already includes every future consequence
# of an action. The *impact sample* of agent $j$ on agent $i$ is the spread of $Q_i$ when
# only $a_j$ is changed; averaging it over the stationary distribution gives the
# **total impact measurement** (TIM), averaging over the policy in one state gives the
# **state impact measurement** (SIM). Each agent can estimate both on the fly from its own
# reward, the state and the other agents' *actions*, with a SARSA critic and running
# averages with decaying step sizes.
#
# **The claim.** The paper's headlines, in its abstract: approximation algorithms for TIM
# and SIM "with simultaneously learning approximations of agents' expected returns, error
# bounds, stability analyses under changes of the policies, and convergence guarantees",
# which rely "only on observing other agents' actions" and are otherwise "fully
# decentralized"; and "through empirical studies, we validate our approach's
# effectiveness in identifying intricate influence structures in complex interactions".
# We build a small average-reward MDP whose influence graph we know, with one influence
# that travels only through the transitions and one XOR coupling, compute the exact TIM
# and SIM by linear algebra, and test the estimator in two ways. Against its own
# ablations: the same estimator with the critic replaced by the immediate reward (the
# long run removed), and with the critic's step held constant at the value of the
# authors' experiments. Against the strongest fair baseline we found: lagged
# action-reward correlation on the same rollout, computed within each state, with its
# best lag and its best threshold chosen in hindsight. The paper's verdict, headline by
# headline, is printed with the claims below. What this book adds or changes:
# one hand-built MDP instead of the paper's randomly generated ones; exact values from
# the fundamental matrix of the Markov chain; a decaying critic step (the authors'
# experiments use a constant one; we keep their averaging schedules); and a
# threshold-free *separation* score (Eq. 10) to compare detectors. Stability under
# policy changes is not tested: every policy here is fixed.

# %% tags=["parameters"]
tier = "default"  # smoke | default | full: size of the experiment
seed = 0  # drives every random number in the chapter
mix = 0.8  # weight of agent 1's action in the state transition (the rest is random)
threshold = 0.15  # an edge j -> i is declared when TIM^ > threshold * max(TIM^)
critic_decay = 0.8  # the critic's step is n(s, a)**-critic_decay (Eq. 7)

# %% tags=["validate"]
from icmlbook import check_range, check_seed, check_tier

check_tier(tier)
check_seed(seed)
check_range("mix", mix, 0.0, 0.95)
check_range("threshold", threshold, 0.0, 1.0, lo_open=True, hi_open=True)
check_range("critic_decay", critic_decay, 0.5, 1.0, lo_open=True)

# %% [markdown]
# ## Setup
#
# The MDP is tabular: 4 states, 4 agents with two actions each (16 joint actions), so
# the whole chapter is small-matrix linear algebra and a sequential SARSA loop, written
# in NumPy. The tier sets the length of the trajectory, the checkpoints at which the
# error is measured, the constant critic steps tried against the decaying one, and the
# widget's trajectories.

# %%
import bisect
import itertools

import numpy as np
import matplotlib.pyplot as plt
import icmlbook

run = icmlbook.start(
    "16_marl_influence",
    tier=tier,
    seed=seed,
    torch=False,
    params=dict(mix=mix, threshold=threshold, critic_decay=critic_decay),
)
icmlbook.use_style()
cfg = run.pick(
    smoke=dict(
        T=4000,
        checks=(1000, 2000, 4000),
        lrs=(0.036, 0.009),
        widget_T=1000,
        widget_T_max=2000,
        mc_draws=20000,
    ),
    default=dict(
        T=60000,
        checks=(10000, 30000, 60000),
        lrs=(0.036, 0.018, 0.009, 0.0045),
        widget_T=10000,
        widget_T_max=20000,
        mc_draws=200000,
    ),
    full=dict(
        T=300000,
        checks=(30000, 100000, 300000),
        lrs=(0.036, 0.018, 0.009, 0.0045, 0.00225),
        widget_T=20000,
        widget_T_max=60000,
        mc_draws=1000000,
    ),
)
N_AGENTS = 4  # agents, each with N_ACTIONS = 2 actions
N_STATES = 4  # states of the MDP
N_ACTIONS = 2  # actions per agent (binary)
OWN = (0.5, 0.0, 0.3, 0.5)  # weight of each agent's own action in its own reward
STATE_BONUS = 2.0  # reward of the state-reward agent in state 0
EPS_MIX = 1e-3  # uniform mixing added to every transition row: keeps the chain ergodic
# beta_t = 0.471 / t**0.726: the authors' TIM schedule (their runner.py)
TIM_STEP = (0.471, 0.726)
# beta'_t = 0.740 / t**0.539: their SIM schedule, global step t
SIM_STEP = (0.740, 0.539)
AUTHORS_LR = 0.036  # the authors' constant SARSA step for Q^ and J^
GAIN_DECAY = 0.7  # our decaying gain step alpha^J_t = t**-0.7
LAGS = (0, 1, 2)  # lags k of the correlation baseline
# one colour and line style per method, for every figure of the chapter
STYLE = icmlbook.method_styles("decaying", "correlation", "myopic", "authors", "tuned")
COLORS = {name: style["color"] for name, style in STYLE.items()}
print(
    f"tier {tier}: T = {cfg.T} steps, error measured at t = {cfg.checks}, constant "
    f"critic steps tried: {cfg.lrs}"
)

# %% [markdown]
# Each method keeps one colour in every figure: the estimator with decaying critic steps
# in blue, the authors' constant step in amber, the best constant step in hindsight in
# purple, the myopic ablation in teal and the correlation baseline in red.
#
# ## The idea in math
#
# **Setting.** $N$ agents, a finite state set $\mathcal S$, action sets $\mathcal A_i$,
# joint action $a = (a_1, \dots, a_N)$, transitions $P(s' \mid s, a)$, individual rewards
# $r_i(s, a)$ and a factored policy $\pi(a \mid s) = \prod_i \pi_i(a_i \mid s)$, kept
# fixed here. In the **average-reward** setting agent $i$'s objective is its gain
#
# $$J_i(\pi) = \lim_{T\to\infty} \frac1T\, \mathbb E\Big[\sum_{t<T} r_i(s_t, a_t)\Big],
#   \tag{1}$$
#
# and its **differential action value** counts how much better than average the future
# is after $(s, a)$:
#
# $$Q_i(s, a) = \sum_{t\ge 0} \mathbb E\big[r_i(s_t, a_t) - J_i \,\big|\, s_0 = s, a_0 = a\big].
#   \tag{2}$$

# %% [markdown]
# **Impact sample.** Fix everything but agent $j$'s action and look at how much agent
# $i$'s value can change:
#
# $$\mathrm{IS}_{j\to i}(s, a) = \max_{b\in\mathcal A_j} Q_i\big(s, (a_{-j}, b)\big)
#   - \min_{b\in\mathcal A_j} Q_i\big(s, (a_{-j}, b)\big). \tag{3}$$
#
# **TIM and SIM.** With $d_\pi$ the stationary distribution of $(s, a)$ under $\pi$,
#
# $$\mathrm{TIM}_{j\to i}(\pi) = \mathbb E_{(s,a)\sim d_\pi}\big[\mathrm{IS}_{j\to i}(s,a)\big],
#   \qquad
#   \mathrm{SIM}_{j\to i}(s) = \mathbb E_{a\sim \pi(\cdot\mid s)}\big[\mathrm{IS}_{j\to i}(s,a)\big].
#   \tag{4}$$
#
# Entry $[j, i]$ is $j$'s influence on $i$ (rows act, columns receive); the diagonal is
# self-impact. Because (2) is defined only up to a constant per agent, and (3) is a
# range, TIM and SIM are invariant to that constant.

# %% [markdown]
# ## From scratch
#
# ### The multi-agent MDP
#
# Joint actions are indexed $0..|\mathcal A|^N - 1$ (agent 0 is the most significant
# digit). The counterfactuals of Eq. 3 need, for every joint action $a$, agent $j$ and
# action $b$, the index of $(a_{-j}, b)$: a precomputed table `dev[a, j, b]`.

# %%
def joint_actions(n_agents, n_actions=2):
    """All joint actions, one row each: shape (n_actions**n_agents, n_agents)."""
    return np.array(list(itertools.product(range(n_actions), repeat=n_agents)))


def deviation_table(n_agents, n_actions=2):
    """dev[a, j, b] = index of the joint action a with agent j's action replaced by b.
    """
    acts = joint_actions(n_agents, n_actions)
    place = n_actions ** np.arange(n_agents - 1, -1, -1)  # digit weights of the index
    dev = np.empty((len(acts), n_agents, n_actions), dtype=int)
    for j in range(n_agents):
        for b in range(n_actions):
            changed = acts.copy()
            changed[:, j] = b
            dev[:, j, b] = changed @ place
    return dev


# %% [markdown]
# The environment has a known influence structure, built from three ingredients:
#
# * **own terms:** $r_i \mathrel{+}= w_i\, a_i$ with $w = (0.5, 0, 0.3, 0.5)$;
# * **reward couplings** $j \to i$: $r_i \mathrel{+}= c\,\mathbf 1[a_j = a_i]$, an
#   XOR-type "match me" term. Under a uniform policy $\mathbb E[r_i \mid a_j]$ does not
#   depend on $a_j$, so the coupling is invisible to any correlation with $a_j$;
# * **a state driver** $k$: with probability `mix` the state moves to $s+1$ (if
#   $a_k = 1$) or $s-1$ (mod 4), otherwise it is redrawn uniformly. The **state-reward
#   agent** (agent 2) earns $r_2 \mathrel{+}= 2\cdot\mathbf 1[s = 0]$: it is affected by
#   agent $k$ only through the transitions, one step later.
#
# The chapter's default: coupling $0 \to 1$ (so $r_1 = \mathbf 1[a_0 = a_1]$) and
# driver $k = 1$. The true influence graph is then
# $0{\to}0,\ 0{\to}1,\ 1{\to}1,\ 1{\to}2,\ 2{\to}2,\ 3{\to}3$; agent 3 is isolated.

# %%
def make_env(reward_edges=((0, 1),), driver=1, mix=0.8, coupling=1.0, own=OWN,
             state_agents=(2,), n_states=N_STATES, eps=EPS_MIX):
    """Transitions P[s, a, s'] and rewards R[i, s, a] of the influence MDP (binary
    actions)."""
    n = len(own)
    acts = joint_actions(n, 2)
    R = np.zeros((n, n_states, len(acts)))
    for i in range(n):
        R[i] += own[i] * acts[:, i]  # own term
    for j, i in reward_edges:
        R[i] += coupling * (acts[:, j] == acts[:, i])  # XOR-type coupling j -> i
    for i in state_agents:
        R[i, 0, :] += STATE_BONUS  # reward for being in state 0
    P = np.full((n_states, len(acts), n_states), 1.0 / n_states)
    if driver is not None:
        up = acts[:, driver] == 1
        move = np.zeros_like(P)
        for s in range(n_states):
            move[s, up, (s + 1) % n_states] = 1.0
            move[s, ~up, (s - 1) % n_states] = 1.0
        P = mix * move + (1 - mix) * P
    return (1 - eps) * P + eps / n_states, R


def true_influence_graph(reward_edges=((0, 1),), driver=1, own=OWN, state_agents=(2,),
                         coupling=1.0):
    """D[j, i] = True where the construction lets a_j change agent i's value."""
    n = len(own)
    D = np.zeros((n, n), dtype=bool)
    for i in range(n):
        D[i, i] = own[i] != 0
    if coupling != 0:
        for j, i in reward_edges:
            D[j, i] = D[i, i] = True  # a match term depends on both actions
    if driver is not None:
        for i in state_agents:
            D[driver, i] = True
    return D


def product_policy(p_one, n_states, n_agents):
    """pi[s, a] of independent agents, agent i plays action 1 with probability p_one[i].
    """
    acts = joint_actions(n_agents, 2)
    p = np.broadcast_to(np.asarray(p_one, dtype=float), (n_agents,))
    return np.tile(np.prod(np.where(acts == 1, p, 1 - p), axis=1), (n_states, 1))


# %% [markdown]
# ### Exact TIM and SIM
#
# The ground truth comes from linear algebra (our construction, the standard
# Markov-chain fundamental matrix; the authors' analytical critic instead sums (2) until
# the distribution is stationary, which we keep as a check). The chain on state-action
# pairs, its stationary distribution and the gains are
#
# $$P_\pi\big[(s,a),(s',a')\big] = P(s'\mid s,a)\,\pi(a'\mid s'), \qquad
#   d_\pi P_\pi = d_\pi, \qquad J_i = d_\pi \cdot r_i. \tag{5}$$

# %%
def state_action_chain(P, pi):
    """Eq. 5: P_pi[(s,a), (s',a')] = P(s'|s,a) pi(a'|s'), flattened to (S*A, S*A)."""
    S, J, _ = P.shape
    return (P[:, :, :, None] * pi[None, None, :, :]).reshape(S * J, S * J)


def stationary(P_pi):
    """Eq. 5: the left eigenvector of P_pi for eigenvalue 1, normalised to a
    distribution."""
    w, v = np.linalg.eig(P_pi.T)
    d = np.real(v[:, np.argmin(np.abs(w - 1))])
    return d / d.sum()


# %% [markdown]
# The centred solution ($d_\pi \cdot Q_i = 0$) of the Poisson equation behind (2),
# $Q_i = r_i - J_i \mathbf 1 + P_\pi Q_i$, is
#
# $$Q_i = \big(I - P_\pi + \mathbf 1 d_\pi^\top\big)^{-1}\big(r_i - J_i \mathbf 1\big), \tag{6}$$
#
# and Eqs. 3–4 turn it into TIM and SIM.

# %%
def differential_q(P_pi, d, r):
    """Eq. 6: centred differential Q of every agent; r has shape (S*A, N)."""
    n = len(d)
    gain = d @ r  # Eq. 5: J_i = d . r_i
    return np.linalg.solve(np.eye(n) - P_pi + np.outer(np.ones(n), d), r - gain)


def brute_force_q(P_pi, d, r, n_steps=2000):
    """Eq. 2 summed directly: sum_t P_pi^t (r - J), the authors' 'analytical critic'."""
    term, total = r - d @ r, np.zeros_like(r)
    for _ in range(n_steps):
        total += term
        term = P_pi @ term
    return total - d @ total  # centre it so that d . Q = 0, like Eq. 6


def impact_samples(Q, dev):
    """Eq. 3 for every (s, a): Q has shape (S, A, N); returns IS[s, a, j, i]."""
    q = Q[:, dev]  # (S, A, N_j, |A_j|, N_i): q[s, a, j, b, i] = Q_i(s, (a_-j, b))
    return q.max(axis=3) - q.min(axis=3)


def exact_impacts(P, pi, R, dev):
    """Eq. 4 from Eq. 6: exact TIM[j, i], SIM[s, j, i], the Q table and d[s, a]."""
    S, J, _ = P.shape
    P_pi = state_action_chain(P, pi)
    d = stationary(P_pi)
    Q = differential_q(P_pi, d, R.reshape(len(R), S * J).T).reshape(S, J, -1)
    IS = impact_samples(Q, dev)
    tim = np.einsum("sa,saji->ji", d.reshape(S, J), IS)
    sim = np.einsum("sa,saji->sji", pi, IS)
    return tim, sim, Q, d.reshape(S, J)


# %%
DEV = deviation_table(N_AGENTS, N_ACTIONS)
ACTS = joint_actions(N_AGENTS, N_ACTIONS)
P, R = make_env(mix=mix)
pi = product_policy(0.5, N_STATES, N_AGENTS)
tim_exact, sim_exact, Q_exact, d_exact = exact_impacts(P, pi, R, DEV)
D_true = true_influence_graph(driver=1 if mix > 0 else None)  # mix = 0: no state driver

# Eqs. 5-6 against their definitions: stationarity, and Eq. 6 against the direct sum of
# Eq. 2
P_pi = state_action_chain(P, pi)
r_flat = R.reshape(N_AGENTS, -1).T
stat_err = np.abs(d_exact.ravel() @ P_pi - d_exact.ravel()).max()
q_err = np.abs(differential_q(P_pi, d_exact.ravel(), r_flat)
               - brute_force_q(P_pi, d_exact.ravel(), r_flat)).max()
true_zero = float(np.abs(tim_exact[~D_true]).max()) if (~D_true).any() else 0.0
print(
    f"stationarity |d P - d| = {stat_err:.1e};  |Eq. 6 - brute-force Eq. 2| = "
    f"{q_err:.1e}"
)
print(f"true zeros of TIM (D = 0): max |TIM| = {true_zero:.1e}")
print("exact TIM [j -> i] (rows act, columns receive):")
print(np.array2string(tim_exact, precision=3, suppress_small=True))

# %% [markdown]
# The exact matrix is the ground truth: 1 on $0 \to 1$ although $r_1$ is a pure XOR,
# and a large entry on $1 \to 2$ although $r_2$ never contains $a_1$. Every entry the
# construction rules out is zero to machine precision.


# %% [markdown]
# ### The decentralised estimator
#
# Agent $i$ observes $s_t$, the joint action $a_t$ (other agents' actions only, no
# rewards) and its own reward. It keeps a tabular critic $\hat Q_i$ and a gain estimate
# $\hat J_i$, learned by differential SARSA,
#
# $$\delta_{i,t} = r_{i,t+1} - \hat J_i + \hat Q_i(s_{t+1}, a_{t+1}) - \hat Q_i(s_t, a_t), \quad
#   \hat Q_i(s_t,a_t) \mathrel{+}= \alpha_t\,\delta_{i,t}, \quad
#   \hat J_i \mathrel{+}= \alpha^J_t\,\delta_{i,t}, \tag{7}$$
#
# and, *before* each critic step, it plugs its current critic into (3) to get
# $\widehat{\mathrm{IS}}_t$ and updates running averages with decaying steps
#
# $$\widehat{\mathrm{TIM}} \leftarrow (1-\beta_t)\,\widehat{\mathrm{TIM}} + \beta_t\,\widehat{\mathrm{IS}}_t,
#   \qquad
#   \widehat{\mathrm{SIM}}(s_t) \leftarrow (1-\beta'_t)\,\widehat{\mathrm{SIM}}(s_t)
#   + \beta'_t\,\widehat{\mathrm{IS}}_t, \qquad
#   \beta_t = \beta_0\, t^{-\kappa},\ \ \beta'_t = \beta'_0\, t^{-\kappa'}. \tag{8}$$
#
# **Step sizes.** The averaging schedules are the authors' (`TIM_STEP`, `SIM_STEP`, from
# the code of their fixed-policy experiments, with the global step count $t$ in both).
# Their critic uses a constant step $\alpha = \alpha^J = 0.036$ (`AUTHORS_LR`). A critic
# with a constant step never settles: $\hat Q$ keeps fluctuating with a variance of the
# order of $\alpha$, and a range of noisy values (Eq. 3) is biased upwards, so the
# estimate cannot converge to the exact TIM. Our critic's steps decay instead,
# $\alpha = n(s,a)^{-\nu}$ with the visit count $n(s,a)$ and $\nu$ = `critic_decay`,
# and $\alpha^J_t = t^{-0.7}$ (`GAIN_DECAY`); everything else follows the authors' code.
#
# With a fixed policy the trajectory does not depend on the critic, so it is sampled
# first (a plain Markov-chain simulation) and every estimator walks along the same one.
# The agents, and several critics per agent (the decaying one, the ablations), are
# updated side by side for speed: one column of `Q` per critic and agent. A column only
# ever reads $s_t$, the joint action and its own agent's reward $r_i$: the estimator is
# decentralised (a unit test changes one agent's reward and checks that no other
# agent's column moves).

# %%
def sample_trajectory(P, pi, T, rng, s0=0):
    """States s_0..s_T and joint-action indices a_0..a_T under policy pi."""
    cum_p, cum_pi = np.cumsum(P, -1).tolist(), np.cumsum(pi, -1).tolist()
    u = rng.random((T + 1, 2)).tolist()
    S, J = pi.shape
    states, actions, s = [0] * (T + 1), [0] * (T + 1), s0
    for t in range(T + 1):
        a = min(bisect.bisect_right(cum_pi[s], u[t][0]), J - 1)
        states[t], actions[t] = s, a
        s = min(bisect.bisect_right(cum_p[s][a], u[t][1]), S - 1)
    return np.array(states), np.array(actions)


def step_size(t, schedule):
    """Eq. 8: beta_t = beta_0 / t**kappa for schedule = (beta_0, kappa), capped at 1."""
    beta0, kappa = schedule
    return min(1.0, beta0 * t**-kappa)


def estimate_impacts(
    states,
    actions,
    R,
    dev,
    critics=(("decaying", 0.8),),
    tim_step=TIM_STEP,
    sim_step=SIM_STEP,
    snapshots=(),
    progress=None,
):
    """Eqs. 7-8 along one trajectory, for several critics side by side.

    A critic is (kind, p): ("decaying", nu): alpha = n(s,a)**-nu, alpha_J =
    t**-GAIN_DECAY; ("constant", lr): alpha = alpha_J = lr; ("myopic", nu), the
    ablation: Q^(s, a) tracks the immediate reward with step n(s,a)**-nu, no gain, no
    future. Returns, per critic, (TIM^[j, i], SIM^[s, j, i], {t: (TIM^, SIM^)} at the
    snapshot steps)."""
    n, S, J = R.shape
    kind = np.repeat([k for k, _ in critics], n)  # one column per (critic, agent)
    p = np.repeat([float(v) for _, v in critics], n)
    lr = np.where(kind == "constant", p, 0.0)  # constant steps (0 for the others)
    nu = np.where(kind == "constant", 0.0, p)  # exponents of the decaying steps
    decays = (kind != "constant").astype(float)
    gain_decays = (kind == "decaying").astype(float)
    # the ablation drops the gain and the bootstrap
    future = (kind != "myopic").astype(float)
    # r_{i,t+1}: row t
    rewards = np.tile(R[:, states[:-1], actions[:-1]].T, len(critics))
    # start at 1, like the authors'
    Q, gain = np.ones((S, J, len(kind))), np.zeros(len(kind))
    visits = np.zeros((S, J))
    tim, sim = np.full((n, len(kind)), 1.0 / n), np.full((S, n, len(kind)), 1.0 / n)
    keep, snaps = set(snapshots), {}
    st, ac = states.tolist(), actions.tolist()
    steps = range(len(st) - 1) if progress is None else progress(range(len(st) - 1))
    for t in steps:
        s, a, s2, a2 = st[t], ac[t], st[t + 1], ac[t + 1]
        q = Q[s, dev[a]]  # (N_j, |A_j|, columns): each critic's counterfactual values
        is_t = q.max(axis=1) - q.min(axis=1)  # Eq. 3 with the current critics
        tim += (is_t - tim) * step_size(t + 1, tim_step)  # Eq. 8
        sim[s] += (is_t - sim[s]) * step_size(t + 1, sim_step)
        visits[s, a] += 1
        delta = rewards[t] + future * (Q[s2, a2] - gain) - Q[s, a]  # Eq. 7, per column
        Q[s, a] += (lr + decays * visits[s, a] ** -nu) * delta
        gain += (lr + gain_decays * (t + 1) ** -GAIN_DECAY) * delta
        if t + 1 in keep:
            snaps[t + 1] = (tim.copy(), sim.copy())

    def cut(M, c):  # critic c's columns
        return M[..., c * n : (c + 1) * n]

    return [
        (
            cut(tim, c),
            cut(sim, c),
            {t: (cut(m, c), cut(x, c)) for t, (m, x) in snaps.items()},
        )
        for c in range(len(critics))
    ]


def relative_error(estimate, exact):
    """max |estimate - exact| / max exact: the error measure of the accuracy claims."""
    return float(np.abs(estimate - exact).max() / np.abs(exact).max())


def recovered_graph(tim_hat, threshold):
    """Edges j -> i with TIM^ above a fraction of its largest entry."""
    return tim_hat > threshold * tim_hat.max()


# %% [markdown]
# ### The ablation and the baseline
#
# **Without the long run (the ablation).** Replace $Q_i$ by the immediate reward $r_i$
# in Eqs. 3–4: the *myopic* impact
# $\mathbb E_{d_\pi}\big[\max_b r_i(s, (a_{-j}, b)) - \min_b r_i(s, (a_{-j}, b))\big]$.
# Its exact value is computed below; its estimate is the estimator above with the
# critic `("myopic", ν)`, which tracks $r_i(s, a)$ and drops the gain and the bootstrap
# term of Eq. 7, on the same trajectory. It sees the XOR coupling but not
# influence through the state.
#
# **Lagged correlation (the baseline).** The detector a practitioner reaches for first:
# how strongly does agent $j$'s action now go with agent $i$'s reward $k$ steps later,
#
# $$C_{j\to i} = \max_{k \in \{0, 1, 2\}} \big|\mathrm{corr}(a_{j,t},\, r_{i,t+k})\big|
#   \quad\text{or, within each state,}\quad
#   \max_{k} \sum_s \hat p(s)\,\big|\mathrm{corr}(a_{j,t},\, r_{i,t+k} \mid s_t = s)\big|. \tag{9}$$
#
# Both versions run on the same rollout as TIM, and a careful user gets the better of
# the two, with its best threshold in hindsight (Eq. 10 below). The lag lets it see an
# influence that arrives one step later; conditioning on the state matters here because
# agent 1's push raises agent 2's next reward from state 3 and lowers it from state 1,
# which cancels on average. No statistic of $a_0$ alone can see the XOR coupling: under
# the uniform policy $r_1 = \mathbf 1[a_0 = a_1]$ is independent of $a_0$.

# %%
def myopic_impact(R, d, dev):
    """The ablation, exact: Eq. 4 with immediate rewards instead of Q (no future)."""
    IS = impact_samples(np.moveaxis(R, 0, -1), dev)  # R as an (S, A, N) 'Q' table
    return np.einsum("sa,saji->ji", d, IS)


def abs_corr(x, y):
    """|corr| of every column of x with every column of y; 0 where one is constant."""
    x, y = x - x.mean(0), y - y.mean(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = (x.T @ y) / np.sqrt(np.outer((x**2).sum(0), (y**2).sum(0)))
    return np.nan_to_num(np.abs(c))


def lagged_correlation(states, actions, rewards, acts, lags=LAGS, by_state=False):
    """Eq. 9 over a rollout: [j, i], max over lags; rewards[t] = r_{t+1}, row t."""
    a = acts[actions].astype(float)  # (T, N) individual actions
    T, out = len(rewards), np.zeros((a.shape[1], rewards.shape[1]))
    for k in lags:
        x, y, s = a[:T - k], rewards[k:], states[:T - k]
        groups = [s == v for v in np.unique(s)] if by_state else [np.ones(len(s), bool)]
        out = np.maximum(out, sum(g.mean() * abs_corr(x[g], y[g]) for g in groups))
    return out


def population_corr(P_pi, d, r, acts, lag):
    """Eq. 9's |corr(a_{j,t}, r_{i,t+lag})| in the stationary chain itself (no
    sampling)."""
    a = np.tile(acts, (len(d) // len(acts), 1)).astype(float)  # a_j of every (s, a)
    ahead = np.linalg.matrix_power(P_pi, lag) @ r  # E[r_{t+lag} | (s_t, a_t)]
    cov = (d[:, None] * (a - d @ a)).T @ (ahead - d @ r)
    sd = np.sqrt(np.outer(d @ (a - d @ a) ** 2, d @ (r - d @ r) ** 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(np.abs(cov / sd))


# %% [markdown]
# ### Scoring a detector
#
# A detector's matrix $M$ recovers the graph $D$ exactly with *some* threshold if and
# only if its weakest true edge lies above its strongest false one. The **separation**
#
# $$\mathrm{sep}(M) = \frac{\min_{D_{ji} = 1} M_{ji} - \max_{D_{ji} = 0} M_{ji}}{\max_{ji} M_{ji}}
#   \tag{10}$$
#
# says by how much, as a share of the largest entry: positive means a threshold exists,
# and the larger it is, the less the choice of threshold matters. It gives every
# detector its best threshold in hindsight, which is generous to the baselines.

# %%
def separation(M, D):
    """Eq. 10: (weakest true edge - strongest false edge) / largest entry."""
    return float((M[D].min() - M[~D].max()) / max(float(M.max()), 1e-12))


# %% [markdown]
# ## The experiment
#
# One trajectory of $T$ steps under the uniform policy. Along it walk the estimator with
# decaying critic steps, the same estimator with each constant critic step of the tier's
# grid (the authors' `AUTHORS_LR` first), and the myopic ablation; each is snapshotted at
# the checkpoints and on a log grid of steps. The correlation baseline reads the same
# rollout.

# %%
states, actions = sample_trajectory(P, pi, cfg.T, run.rng("trajectory"))
rewards = R[:, states[:-1], actions[:-1]].T  # what each agent was paid, row t
grid = np.unique(np.r_[np.geomspace(200, cfg.T, 16).astype(int), cfg.checks])
critics = [("decaying", critic_decay), ("myopic", critic_decay)]
critics += [("constant", lr) for lr in cfg.lrs]
(tim_hat, sim_hat, snaps), (_, _, snaps_myopic), *const_runs = estimate_impacts(
    states,
    actions,
    R,
    DEV,
    critics=critics,
    snapshots=grid,
    progress=lambda it: icmlbook.progress(
        it, desc=f"{len(critics)} critics side by side"
    ),
)
snaps_lr = {lr: sn for lr, (_, _, sn) in zip(cfg.lrs, const_runs)}
t_early, t_late = cfg.checks[0], cfg.checks[-1]
err_tim = {t: relative_error(snaps[t][0], tim_exact) for t in grid}
err_sim = {t: relative_error(snaps[t][1], sim_exact) for t in grid}
err_lr = {
    lr: {t: relative_error(s[t][0], tim_exact) for t in grid}
    for lr, s in snaps_lr.items()
}
err_lr_sim = {lr: relative_error(s[t_late][1], sim_exact) for lr, s in snaps_lr.items()}
tim_late, tim_myopic = snaps[t_late][0], snaps_myopic[t_late][0]
graph_late = recovered_graph(tim_late, threshold)

corr_variants = {name: lagged_correlation(states[:-1], actions[:-1], rewards, ACTS,
                                          by_state=by_state)
                 for name, by_state in [("plain", False), ("within each state", True)]}
corr_name = max(corr_variants, key=lambda k: separation(corr_variants[k], D_true))
corr = corr_variants[corr_name]  # the careful user's choice, in hindsight
myopic = myopic_impact(R, d_exact, DEV)


# %% tags=["hide-input"]
def heat(ax, M, title, vmax=None, exact=None):
    """A [j, i] heatmap with its values written in (and the exact values below them)."""
    vmax = vmax if vmax is not None else max(float(np.abs(M).max()), 1e-12)
    im = ax.imshow(M, cmap="Blues", vmin=0, vmax=vmax)
    for (j, i), v in np.ndenumerate(M):
        label = f"{v:.2f}" if exact is None else f"{v:.2f}\n({exact[j, i]:.2f})"
        ax.text(
            i,
            j,
            label,
            ha="center",
            va="center",
            fontsize=7 if exact is None else 6,
            color="white" if v > 0.6 * vmax else "black",
        )
    n = len(M)
    ax.set(title=title, xticks=range(n), yticks=range(n), xlabel="receiver i",
           ylabel="actor j")
    ax.grid(False)
    return im


fig, axes = plt.subplots(1, 4, figsize=(11, 3.0))
scale = tim_exact.max()
heat(axes[0], tim_exact, "exact TIM (Eq. 6)", vmax=scale)
heat(axes[1], tim_late, f"estimated TIM, t = {t_late}", vmax=scale)
heat(axes[2], tim_myopic, "myopic ablation (estimated)", vmax=scale)
im = heat(axes[3], corr, f"lagged |corr|, {corr_name}", vmax=1.0)
for ax in axes:
    for j, i in [(0, 1), (1, 2)]:  # the hidden edges
        ax.add_patch(
            plt.Rectangle((i - 0.5, j - 0.5), 1, 1, fill=False, ec="black", lw=2)
        )
fig.colorbar(
    im, ax=axes, shrink=0.8, label="entry (value units; |corr| in the last panel)"
)
plt.show()

# %% [markdown]
# The black boxes mark the two hidden edges. The estimate reproduces the exact matrix;
# the myopic ablation has a hole at $1 \to 2$, and the correlation, even at its best,
# has holes at the XOR edges $0 \to 1$ and $1 \to 1$. The zeros of the estimate are
# small but positive: a range of noisy values is never exactly zero (the estimator's
# positive bias), which is why a graph needs a threshold.

# %%
edges = [(0, 0), (0, 1), (1, 1), (1, 2), (2, 2), (3, 3), (2, 1), (3, 0)]
print(f"{'edge':>6} {'true':>5} {'exact':>7} {'TIM^':>7} {'myopic^':>8} {'|corr|':>7}")
for j, i in edges:
    print(
        f"{j:>2} -> {i} {str(D_true[j, i]):>5} {tim_exact[j, i]:>7.3f} "
        f"{tim_late[j, i]:>7.3f} {tim_myopic[j, i]:>8.3f} {corr[j, i]:>7.3f}"
    )
print(
    f"graph of TIM^ at t = {t_late}, threshold {threshold}: "
    f"{int((graph_late != D_true).sum())} wrong entries of {D_true.size}"
)
sep_tim, sep_myopic = separation(tim_late, D_true), separation(tim_myopic, D_true)
sep_corr = separation(corr, D_true)
print(
    f"separation (Eq. 10): TIM^ {sep_tim:.3f}, myopic ablation {sep_myopic:.3f}, "
    + ", ".join(
        f"correlation {k} {separation(v, D_true):.3f}" for k, v in corr_variants.items()
    )
)
print(
    f"lagged |corr| on 1 -> 2: plain {corr_variants['plain'][1, 2]:.3f}, within each "
    f"state {corr_variants['within each state'][1, 2]:.3f}"
)

# %% [markdown]
# ### Convergence and the critic's step
#
# The maximum relative error of TIM and SIM against the number of steps: for the
# decaying critic, for the authors' constant step, and for the constant step of the
# tier's grid that is best at the last checkpoint, chosen in hindsight.

# %% tags=["hide-input"]
best_lr = min(cfg.lrs, key=lambda lr: err_lr[lr][t_late])
fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
ax = axes[0]
ax.semilogx(grid, [err_tim[t] for t in grid], "o-", ms=3, color=COLORS["decaying"],
            label="TIM, decaying critic steps")
ax.semilogx(grid, [err_sim[t] for t in grid], "s--", ms=3, color=COLORS["decaying"],
            label="SIM, decaying critic steps")
ax.semilogx(
    grid,
    [err_lr[AUTHORS_LR][t] for t in grid],
    "^-",
    ms=3,
    color=COLORS["authors"],
    label=f"TIM, authors' constant step {AUTHORS_LR}",
)
if best_lr != AUTHORS_LR:
    ax.semilogx(
        grid,
        [err_lr[best_lr][t] for t in grid],
        "v-",
        ms=3,
        color=COLORS["tuned"],
        label=f"TIM, constant step {best_lr} (best at t = {t_late})",
    )
ax.set(xlabel="steps t", ylabel="max relative error", title="error of the estimates",
       ylim=(0, 0.5))
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, fontsize=7)
ax.set_xticks(cfg.checks, [f"{t / 1000:g}k" for t in cfg.checks], minor=False)
ax.xaxis.set_minor_formatter(plt.NullFormatter())
ax = axes[1]
states_x = np.arange(N_STATES)
for (j, i), mark in zip([(0, 1), (1, 2), (2, 2)], "os^"):
    ax.plot(states_x, sim_exact[:, j, i], mark + "-", color="black", ms=5, mfc="none",
            label=f"{j}→{i} exact")
    ax.plot(
        states_x,
        snaps[t_late][1][:, j, i],
        mark + "--",
        color=COLORS["decaying"],
        ms=3,
        label=f"{j}→{i} estimate",
    )
ax.set(xlabel="state s", ylabel="SIM(s) (value units)", xticks=states_x,
       title=f"SIM per state (estimate at t = {t_late})",
       ylim=(-0.05, 1.15 * max(sim_exact.max(), snaps[t_late][1].max())))
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, fontsize=7)
plt.show()
print(
    f"{'t':>7} {'decaying':>9} "
    + " ".join(f"{'const ' + str(lr):>13}" for lr in cfg.lrs)
)
for t in cfg.checks:
    print(
        f"{t:>7} {err_tim[t]:>9.3f} "
        + " ".join(f"{err_lr[lr][t]:>13.3f}" for lr in cfg.lrs)
    )
print(
    f"SIM error at t = {t_late}: decaying {err_sim[t_late]:.3f}, authors' constant "
    f"step {err_lr_sim[AUTHORS_LR]:.3f}"
)


# %%
print(
    f"best constant step at t = {t_late}, in hindsight: {best_lr}, error "
    f"{err_lr[best_lr][t_late]:.3f} (decaying {err_tim[t_late]:.3f}); the same step at "
    f"t = {t_early}: {err_lr[best_lr][t_early]:.3f} (decaying {err_tim[t_early]:.3f})"
)

# %% [markdown]
# A constant critic step keeps $\hat Q$ noisy forever, and every range in Eq. 3 carries
# a bias of the order of that noise: the error stalls at a floor set by the step. The
# authors' step stalls early; a smaller step lowers the floor but takes longer to get
# there. Tuned in hindsight for the last checkpoint, a constant step closes much of the
# gap to the decaying schedule there (the line above), but not all of it, and only
# there: it has to know the budget, and it is far off at the earlier checkpoint.
# Decaying steps need neither.
#
# SIM is state-dependent where the influence is: agent 1 matters most for agent 2 in the
# states next to state 0, from where its push decides whether the chain lands on the
# bonus.
#
# ## Claims
#
# The thresholds below were calibrated on seeds 0-9 and frozen before seeds 10-19 were
# run; each line says where its number comes from. Paper claims first (what the paper
# says the method does, each against its ablation or the strongest fair baseline), then
# checks (what must hold if the code is right, but is no evidence for the paper), then
# findings (what the paper states and we measure without claiming it), and the paper's
# headlines, each graded from the claims and findings that test it by one fixed rule:
# *reproduced* when every claim holds at full strength and every finding goes the
# paper's way, *partly* when a claim holds only in a weaker form or a finding goes
# against the paper, *not reproduced* when nothing holds. All estimates are read at the
# last checkpoint, $t$ = `t_late`.

# %% tags=["thresholds"]
# sep(TIM^) - sep(myopic^), Eq. 10: 0.247-0.269 on seeds 0-9; about half the worst
C_SEP_VS_MYOPIC = 0.12
# sep(TIM^) - sep(best lagged corr): 0.251-0.275 on seeds 0-9; about half the worst
C_SEP_VS_CORR = 0.12
# TIM^ error at t_late: 0.035-0.049 on seeds 0-9; authors' constant step 0.103-0.116
C_TIM_ERR = 0.075
# SIM^ error at t_late: 0.028-0.044 on seeds 0-9; authors' constant step 0.076-0.109
C_SIM_ERR = 0.065
# |d P - d| and |Eq. 6 - brute-force Eq. 2|: rounding and truncation only
C_EXACT = 1e-8
C_ZERO = 1e-12  # quantities zero by construction: rounding only
# the paper's verdict follows icmlbook.verdicts' rule, fixed before the final sweep

# %%
run.claim(
    "separation: TIM^ minus its myopic ablation",
    sep_tim - sep_myopic,
    ">=",
    C_SEP_VS_MYOPIC,
    "Measured on the long-run value, the estimate separates every true edge from every "
    "false one; measured on immediate rewards it cannot",
    versus="ablation",
    against="the same estimator, critic tracking the immediate reward (no gain, no "
            "bootstrap term), same trajectory",
    strength="superiority",
    provenance="calibrated",
)
run.claim(
    "separation: TIM^ minus lagged correlation",
    sep_tim - sep_corr,
    ">=",
    C_SEP_VS_CORR,
    "TIM^ separates the true graph by a wide margin where the best lagged correlation "
    "cannot separate it at all",
    versus="baseline",
    against="|corr(a_j,t, r_i,t+k)|, plain or within each state, best lag k <= 2 and "
            "best threshold in hindsight, same rollout",
    strength="superiority",
    provenance="calibrated",
)
run.claim(
    "TIM^ max relative error",
    err_tim[t_late],
    "<=",
    C_TIM_ERR,
    "With decaying critic steps the decentralised TIM estimate gets close to the exact "
    "TIM",
    versus="ablation",
    against=f"the critic's step held constant at the authors' {AUTHORS_LR}, same "
            f"averaging schedules",
    strength="superiority",
    provenance="calibrated",
)
run.claim(
    "SIM^ max relative error",
    err_sim[t_late],
    "<=",
    C_SIM_ERR,
    "With decaying critic steps the SIM estimate gets close to the exact SIM in every "
    "state",
    versus="ablation",
    against=f"the critic's step held constant at the authors' {AUTHORS_LR}, same "
            f"averaging schedules",
    strength="superiority",
    provenance="calibrated",
);

# %%
xor_corr = max(population_corr(P_pi, d_exact.ravel(), r_flat, ACTS, k)[j, 1]
               for k in LAGS for j in (0, 1))
run.check(
    "exact TIM: Eq. 6 = brute-force Eq. 2",
    max(stat_err, q_err),
    "<=",
    C_EXACT,
    "the exact differential Q (fundamental matrix) matches the direct sum of Eq. 2",
    digits=2,
)
run.check("exact TIM on edges the construction rules out", true_zero, "<=", C_ZERO,
          "entries with D = 0 are zero", digits=2)
run.check(
    "myopic range on 1->2",
    myopic[1, 2],
    "<=",
    C_ZERO,
    "r_2 has no a_1 term, so immediate rewards cannot see the transition edge",
    digits=2,
)
run.check(
    "population |corr| on the XOR edges",
    xor_corr,
    "<=",
    C_ZERO,
    "under the uniform policy r_1 = 1[a_0 = a_1] is independent of a_0 alone and of "
    "a_1 alone, at every lag",
    digits=2,
);

# %%
run.finding(
    "authors' constant critic step: TIM^ max relative error",
    err_lr[AUTHORS_LR][t_late],
    "<=",
    C_TIM_ERR,
    paper="the approximation algorithm, with simultaneously learned critics, converges "
          "to TIM; the authors' fixed-policy runs use a constant critic "
          f"step {AUTHORS_LR}",
    shows="with that step the critic never settles and the TIM error stalls at a floor "
          "above the bar the decaying critic meets",
)
run.finding(
    "authors' constant critic step: SIM^ max relative error",
    err_lr_sim[AUTHORS_LR],
    "<=",
    C_SIM_ERR,
    paper="the approximation algorithm converges to SIM; the authors' fixed-policy "
          f"runs use a constant critic step {AUTHORS_LR}",
    shows="with that step the SIM error stalls at a floor above the decaying "
          "critic's bar",
)
run.finding(
    "decaying critic / best constant step in hindsight: TIM^ error ratio",
    err_tim[t_late] / err_lr[best_lr][t_late],
    "<",
    1.0,
    paper="the approximation algorithm comes with convergence guarantees",
    shows="a constant critic step tuned in hindsight for the budget closes much of the "
          "gap to the decaying one at that budget, but not all of it, and it has to "
          "know the budget",
);

# %%
run.headline(
    "identifies influence structures",
    "Through empirical studies, we validate our approach's effectiveness in "
    "identifying intricate influence structures in complex interactions.",
    source="Abstract; empirical studies",
    claims=["separation: TIM^ minus its myopic ablation",
            "separation: TIM^ minus lagged correlation"],
)
run.headline(
    "convergent decentralised estimates",
    "we provide approximation algorithms for TIM and SIM with simultaneously learning "
    "approximations of agents' expected returns, error bounds, [...] and convergence "
    "guarantees. The approximation algorithm "
    "relies only on observing other agents' actions and is, other than that, fully "
    "decentralized.",
    source="Abstract; theory",
    claims=["TIM^ max relative error", "SIM^ max relative error"],
    findings=["authors' constant critic step: TIM^ max relative error",
              "authors' constant critic step: SIM^ max relative error"],
)
run.headline(
    "stable under policy changes",
    "stability analyses under changes of the policies",
    source="Abstract; learning-policy experiments",
    testable=False,
    why="the chapter keeps every policy fixed; the learning-policy scenario (an actor "
        "changing the policy while TIM is estimated) is not run",
)
run.metric("tim_error", {str(t): err_tim[t] for t in cfg.checks})
run.metric("sim_error", {str(t): err_sim[t] for t in cfg.checks})
run.metric("constant_step_tim_error", {str(lr): {str(t): e[t] for t in cfg.checks}
                                       for lr, e in err_lr.items()})
run.metric("authors_step_sim_error", err_lr_sim[AUTHORS_LR])
run.metric("best_constant_step", best_lr)
run.metric("separation", dict(tim=sep_tim, myopic=sep_myopic, **{
    f"corr_{k}": separation(v, D_true) for k, v in corr_variants.items()}))
run.metric("wrong_edges_at_threshold", int((graph_late != D_true).sum()))
run.metric("tim_exact", tim_exact.round(4))
run.metric("tim_hat_late", tim_late.round(4))
run.metric("max_estimated_true_zero", float(tim_late[~D_true].max() / tim_late.max()));

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed. The table and strip plot below read this chapter's results file,
# made by `icmlbook sweep 16 --seeds 0-19 --update-results`: every claim, check and
# finding at the default tier, on the calibration seeds 0-9 (on which the thresholds
# were set) and, apart, on the confirmation seeds 10-19 (run once, after the thresholds
# were frozen), with the number of seeds on which each holds and its worst margin (how
# far inside the threshold the worst seed stayed).

# %%
across = icmlbook.across_seeds(run)


# %% [markdown]
# ## What a broken estimator does
#
# A claim is only worth something if a wrong implementation fails it. Three breaks cost
# nothing to show, because their estimates are already computed above: the $[j, i]$
# convention transposed (reading the matrix as "$i$ influences $j$"), a critic that
# forgets the future (the myopic ablation, the usual bug of dropping the bootstrap
# term), and the authors' constant critic step. The unit tests
# (`tests/test_ch16_marl_influence.py`) hold these and a few more.

# %%
broken = {
    "[j, i] transposed": dict(
        sep=separation(tim_late.T, D_true),
        tim=relative_error(tim_late.T, tim_exact),
        sim=np.nan,
    ),
    "critic without the future": dict(
        sep=sep_myopic,
        tim=relative_error(tim_myopic, tim_exact),
        sim=relative_error(snaps_myopic[t_late][1], sim_exact),
    ),
    f"constant critic step {AUTHORS_LR}": dict(
        sep=separation(snaps_lr[AUTHORS_LR][t_late][0], D_true),
        tim=err_lr[AUTHORS_LR][t_late],
        sim=err_lr_sim[AUTHORS_LR],
    ),
}
print(
    f"{'variant':<28} {'sep - sep(myopic)':>17} {'sep - sep(corr)':>15} "
    f"{'TIM error':>10} {'SIM error':>10}"
)
print(
    f"{'needs':<28} {'>= ' + str(C_SEP_VS_MYOPIC):>17} "
    f"{'>= ' + str(C_SEP_VS_CORR):>15} {'<= ' + str(C_TIM_ERR):>10} "
    f"{'<= ' + str(C_SIM_ERR):>10}"
)
for name, b in broken.items():
    print(
        f"{name:<28} {b['sep'] - sep_myopic:>17.3f} {b['sep'] - sep_corr:>15.3f} "
        f"{b['tim']:>10.3f} {b['sim']:>10.3f}"
    )

# %% [markdown]
# The transposed matrix fails both separation claims; the critic without the future
# fails them and the accuracy claims; the authors' constant step still recovers the
# graph (its separation stays positive) but fails both accuracy claims, because its
# error stalls.


# %% [markdown]
# ## Explore
#
# Build your own influence structure: which agents' actions enter whose reward (XOR-type
# couplings "j→i"), which agent drives the state (agent 2 is rewarded in state 0), how
# strongly, how random the policy is, and how many steps the estimator gets. Left to
# right: exact and estimated TIM, the recovered graph (green: correct edge, red: false
# edge, dashed grey: missed edge), then the estimated SIM in the chosen state (exact
# values in brackets) and the error curve. Things to try: push $\pi(a=1)$ towards its
# ends (the slider stops at 0.1 and 0.9: beyond that, the counterfactual actions of
# Eq. 3 are almost never visited, their critic entries stay at the initial value and the
# estimate is meaningless; near the ends you can already watch it degrade), drop `mix`
# to 0 (the transition edge vanishes), switch the critic to the authors' constant step
# or to the myopic ablation, or lower the threshold until the positive bias creates
# false edges.

# %% tags=["hide-input"]
import ipywidgets as W

PAIRS = [f"{j}→{i}" for j in range(N_AGENTS) for i in range(N_AGENTS) if j != i]


def draw_graph(ax, est, true):
    """Agents on a square, arrows j -> i coloured by correct / false / missed."""
    xy = np.array([[0, 1], [1, 1], [1, 0], [0, 0]], dtype=float)
    for j, i in itertools.product(range(N_AGENTS), repeat=2):
        if not (est[j, i] or true[j, i]):
            continue
        color, ls = (icmlbook.plot.PALETTE[6], "-") if est[j, i] and true[j, i] else \
            ((icmlbook.plot.PALETTE[1], "-") if est[j, i] else ("0.6", "--"))
        if i == j:
            ax.add_patch(
                plt.Circle(
                    xy[i] + 0.12 * (xy[i] - 0.5) / 0.5,
                    0.08,
                    fill=False,
                    ec=color,
                    ls=ls,
                    lw=1.5,
                )
            )
        else:
            ax.annotate("", xy=xy[i], xytext=xy[j], arrowprops=dict(
                arrowstyle="-|>", color=color, ls=ls, lw=1.5, shrinkA=11, shrinkB=11,
                connectionstyle="arc3,rad=0.15"))
    for k, (x, y) in enumerate(xy):
        ax.add_patch(plt.Circle((x, y), 0.11, color="0.35", zorder=3))
        ax.text(x, y, str(k), color="white", ha="center", va="center", zorder=4)
    ax.set(
        xlim=(-0.35, 1.35), ylim=(-0.35, 1.35), aspect="equal", title="recovered graph"
    )
    ax.set_axis_off()

# %% tags=["hide-input"]
def update(couplings, driver, coupling, mix_w, p_one, steps, critic, state, thr):
    pairs = [tuple(int(c) for c in e.split("→")) for e in couplings]
    drv = None if driver == "none" else int(driver)
    Pw, Rw = make_env(pairs, drv, mix_w, coupling)
    piw = product_policy(p_one, N_STATES, N_AGENTS)
    tim_w, sim_w, _, _ = exact_impacts(Pw, piw, Rw, DEV)
    st_w, ac_w = sample_trajectory(Pw, piw, steps, run.rng("widget trajectory"))
    g = np.unique(np.geomspace(100, steps, 10).astype(int))
    param = AUTHORS_LR if critic == "constant" else critic_decay
    th, sh, sn = estimate_impacts(
        st_w, ac_w, Rw, DEV, critics=[(critic, param)], snapshots=g
    )[0]
    truth = tim_w > 1e-9 * max(tim_w.max(), 1e-12)
    fig, axes = plt.subplots(1, 5, figsize=(12, 2.8), layout="none")  # fast to redraw
    fig.subplots_adjust(left=0.04, right=0.99, bottom=0.18, top=0.88, wspace=0.5)
    vmax = max(tim_w.max(), th.max(), 1e-12)
    heat(axes[0], tim_w, "exact TIM", vmax)
    im = heat(axes[1], th, f"estimated TIM (t = {steps})", vmax)
    fig.colorbar(im, ax=axes[:2], shrink=0.8)
    draw_graph(axes[2], recovered_graph(th, thr), truth)
    im = heat(axes[3], sh[state], f"SIM, s = {state}: est. (exact)",
              max(sim_w[state].max(), sh[state].max(), 1e-12), exact=sim_w[state])
    fig.colorbar(im, ax=axes[3], shrink=0.8)
    if tim_w.max() > 1e-9:
        axes[4].plot(g, [relative_error(sn[t][0], tim_w) for t in g], "o-", ms=3,
                     color=COLORS[CRITIC_COLOR[critic]])
        axes[4].set(xlabel="steps", ylabel="max relative error", title="TIM error",
                    ylim=(0, None))
    else:
        axes[4].text(
            0.5, 0.5, "no influence at all:\nTIM = 0", ha="center", va="center"
        )
        axes[4].set_axis_off()
    plt.show()


CRITIC_COLOR = dict(decaying="decaying", constant="authors", myopic="myopic")
controls = dict(
    couplings=W.SelectMultiple(
        options=PAIRS, value=("0→1",), rows=4, description="couplings"
    ),
    driver=W.Dropdown(
        options=["none", "0", "1", "2", "3"], value="1", description="driver"
    ),
    coupling=W.FloatSlider(
        value=1.0, min=0.0, max=2.0, step=0.1, description="strength"
    ),
    mix_w=W.FloatSlider(value=mix, min=0.0, max=0.95, step=0.05, description="mix"),
    p_one=W.FloatSlider(value=0.5, min=0.1, max=0.9, step=0.05, description="π(a=1)"),
    steps=W.IntSlider(
        value=cfg.widget_T,
        min=1000,
        max=cfg.widget_T_max,
        step=1000,
        description="steps",
    ),
    critic=W.ToggleButtons(
        options=["decaying", "constant", "myopic"],
        value="decaying",
        description="critic",
    ),
    state=W.IntSlider(value=1, min=0, max=N_STATES - 1, description="SIM state"),
    thr=W.FloatSlider(
        value=threshold, min=0.05, max=0.5, step=0.05, description="threshold"
    ),
)
icmlbook.explore(update, controls, run=run);

# %% [markdown]
# ## Paper vs. this book
#
# | | paper | this book |
# |---|---|---|
# | measures | TIM and SIM in the average-reward setting (Eqs. 3–4), general influence measurement functions | TIM and SIM, exact (Eqs. 5–6) and estimated (Eqs. 7–8) |
# | estimator | decentralised: own reward + others' actions, SARSA critics, running averages; proofs of error bounds and convergence | the same structure and the authors' averaging schedules (`TIM_STEP`, `SIM_STEP`); a decaying critic step of our own where their experiments use a constant one (`AUTHORS_LR`) |
# | environments | randomly generated MDPs (5 agents, 5 states) with random dependency graphs; a learning-policy scenario | one hand-built MDP (4 agents, 4 states) with a known graph, an XOR coupling and a transition-mediated edge; fixed policies |
# | the key ingredient | impact measured on the long-run value | against the myopic ablation, by the separation of Eq. 10 (claim "separation: TIM^ minus its myopic ablation", `C_SEP_VS_MYOPIC`) |
# | baseline | none of this kind in the paper | lagged action-reward correlation, plain or within each state, best lag and threshold in hindsight (claim "separation: TIM^ minus lagged correlation", `C_SEP_VS_CORR`) |
# | convergence | error bounds and convergence guarantees (theory); experiments with a constant critic step | TIM and SIM errors at the last checkpoint within `C_TIM_ERR` and `C_SIM_ERR`, against the authors' constant critic step (claims "TIM^ max relative error", "SIM^ max relative error") |
# | checks | — | exact solver against the direct sum of Eq. 2 (`C_EXACT`); the zeros of the construction: ruled-out edges, the myopic $1 \to 2$ entry, the XOR correlations (`C_ZERO`) |
#
# Where the comparison is generous to TIM, and where it is not. The correlation baseline
# fails here for a reason the construction plants: an XOR coupling is independent of
# either action alone (a check above). Conditioning on the receiver's own action as well
# would reveal it (Exercise 3), and conditioning on all actions and the state turns the
# correlation into a model of $\mathbb E[r \mid s, a]$, which is the myopic ablation;
# adding lags turns it, in the end, into a model of the future value, which is TIM. On
# the step sizes: a constant critic step tuned in hindsight for the budget comes closer
# to our decaying one at that budget (printed above) than the authors' step does; the
# decaying step stays ahead, needs no budget and keeps converging.
#
# **What did not reproduce, and what was not tested.** With the critic step of the
# authors' own fixed-policy runs (`AUTHORS_LR`), the estimate does not converge to the
# exact TIM and SIM here: the critic never settles and the error stalls at a floor above
# the bars the decaying critic meets (the convergence table above; recorded as two
# findings, so the convergence headline is reproduced only *partly*: with a decaying
# critic step of our own). A constant step tuned in hindsight for the budget closes much
# of that gap at that budget, though not all of it (a third finding, whose ratio is
# printed with the claims). Not tested: the learning-policy scenario (the actor of Zhang et al.'s
# networked actor–critic, with the analytical TIM recomputed as the policy changes) and
# stability under policy changes; the randomly generated environments; any of the
# paper's figures or numbers (the comparison is with the claims of its abstract). The
# exact-value construction (Eq. 6), the decaying critic step, the separation score, the
# correlation baseline and the default threshold are ours.
#
# **Paper coverage.**
#
# | the paper's result | here |
# |---|---|
# | TIM and SIM in the average-reward setting (definitions) | implemented exactly (Eqs. 3–6); checks "exact TIM: Eq. 6 = brute-force Eq. 2", "exact TIM on edges the construction rules out" |
# | total and state influence measurement functions (general, e.g. discounted) | out of scope: the chapter works with their average-reward instances only |
# | the decentralised approximation algorithm | implemented (Eqs. 7–8); decentralisation held by a unit test |
# | error bounds and convergence guarantees (theory) | tested empirically, not re-proved: claims "TIM^ max relative error", "SIM^ max relative error"; findings on the authors' constant critic step |
# | stability under changes of the policies (theory) and the learning-policy experiments | out of scope: every policy is fixed (headline marked not testable) |
# | fixed-policy experiments on randomly generated environments | replaced by one hand-built MDP with a known graph: claims "separation: TIM^ minus its myopic ablation", "separation: TIM^ minus lagged correlation" |

# %% [markdown]
# ## Exercises

# %% [markdown] tags=["exercise"]
# **Exercise 1. The bias of a range.** If $\hat Q_i(s,(a_{-j},b)) = Q_i + \sigma\xi_b$
# with independent standard normal $\xi_b$ and two actions, show that the expected impact
# sample of a null edge is $2\sigma/\sqrt\pi$, and check it by simulation. If a critic
# with a constant step $\alpha$ fluctuates with a variance proportional to $\alpha$, how
# should the floor of the null entries move as $\alpha$ shrinks?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 1
# On a null edge both counterfactual values have the same true $Q_i$, so the impact
# sample (Eq. 3) is the range of two noisy copies,
#
# $$\max_b \hat Q - \min_b \hat Q = \sigma\,|\xi_0 - \xi_1|, \qquad
#   \xi_0 - \xi_1 \sim \mathcal N(0, 2).$$
#
# For $Z \sim \mathcal N(0, v)$, $\mathbb E|Z| = \sqrt{2v/\pi}$; with $v = 2$,
#
# $$\mathbb E\big[\widehat{\mathrm{IS}}_{j\to i}\big] = \sigma\sqrt{4/\pi} =
#   \frac{2\sigma}{\sqrt\pi} > 0 .$$
#
# The bias is linear in the noise level $\sigma$. If $\sigma^2 \propto \alpha$, the floor
# scales like $\sqrt\alpha$: quartering the step halves it, once the critic has had time
# to forget its start (a small step takes longer to get there, which is why the best
# constant step depends on the budget). A decaying step sends $\sigma$, and with it the
# bias, to zero. The cell below draws the noisy ranges and compares their mean with the
# formula (the number of draws is set by the tier), then prints the mean of the null
# entries of $\widehat{\mathrm{TIM}}$, relative to its largest entry, for each constant
# step of the experiment and for the decaying critic.
# :::

# %% tags=["solution", "hide-cell"]
sigma = 0.1  # any noise level: the ratio below does not depend on it
xi = run.rng("exercise 1").standard_normal((cfg.mc_draws, 2))
range_mean = (sigma * np.abs(xi[:, 0] - xi[:, 1])).mean()
ratio = range_mean / (2 * sigma / np.sqrt(np.pi))
print(f"mean range of two noisy copies / (2 sigma / sqrt(pi)) = {ratio:.4f} "
      f"({cfg.mc_draws} draws)")
for lr in cfg.lrs:
    null = snaps_lr[lr][t_late][0]
    print(f"constant step {lr:<7}: mean null entry of TIM^ / max TIM^ = "
          f"{null[~D_true].mean() / null.max():.3f}")
print(f"decaying critic      : mean null entry of TIM^ / max TIM^ = "
      f"{tim_late[~D_true].mean() / tim_late.max():.3f}")
# 5.6 standard errors of the mean at the smoke tier's draws (relative sd of |Z| is
# sqrt(pi/2 - 1) = 0.76)
S_MC_TOL = 0.03
icmlbook.solution_check("|simulated mean range / (2 sigma / sqrt(pi)) - 1|",
                        abs(ratio - 1), "<=", S_MC_TOL)

# %% [markdown] tags=["exercise"]
# **Exercise 2. Policy matters.** Bias agent 1's policy to $\pi_1(a=1) = 0.8$. Compute
# $|\mathrm{corr}(a_0, r_1)|$ in closed form: the XOR edge becomes visible to the
# correlation baseline, while $\mathrm{TIM}_{0\to 1}$ stays exactly 1. Why does biasing
# agent 0 alone leave the correlation at zero? Check both with `population_corr` and
# `exact_impacts`.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 2
# Here $r_1 = \mathbf 1[a_0 = a_1]$, and under a product policy that does not depend on
# the state, $a_0 \sim \mathrm{Bern}(p_0)$ and $a_1 \sim \mathrm{Bern}(p_1)$ are
# independent of each other and of $s$. Then
# $\mathbb E[r_1 \mid a_0 = 1] = p_1$ and $\mathbb E[r_1 \mid a_0 = 0] = 1 - p_1$, so
#
# $$\mathrm{Cov}(a_0, r_1) = p_0(1-p_0)\,(2p_1 - 1).$$
#
# With $p_0 = 1/2$, $r_1 \sim \mathrm{Bern}(1/2)$ and both variances are $1/4$:
#
# $$|\mathrm{corr}(a_0, r_1)| = |2p_1 - 1|,$$
#
# which is $0.6$ at $p_1 = 0.8$. Biasing agent 0 alone ($p_1 = 1/2$) leaves the
# covariance at zero whatever $p_0$ is: $\mathbb E[r_1 \mid a_0]$ is $1/2$ either way,
# because agent 1 matches or mismatches with equal chance. TIM does not care about the
# policy here: switching $a_0$ always switches the match, so $r_1$ changes by exactly 1,
# and $a_0$ does not enter the transitions (agent 1 drives the state), so the future part
# of $Q_1$ is the same for both values of $a_0$. Every impact sample of $0 \to 1$ is 1,
# and so is its average. The cell computes the three quantities exactly and asserts the
# largest deviation from these closed forms.
# :::

# %% tags=["solution", "hide-cell"]
def policy_case(p_one):
    """Exact |corr(a_0, r_1)| at lag 0 and exact TIM_{0->1} under a biased policy."""
    Pb, Rb = make_env(mix=mix)
    pib = product_policy(p_one, N_STATES, N_AGENTS)
    P_pib = state_action_chain(Pb, pib)
    db = stationary(P_pib)
    c = population_corr(P_pib, db, Rb.reshape(N_AGENTS, -1).T, ACTS, 0)
    return c[0, 1], exact_impacts(Pb, pib, Rb, DEV)[0][0, 1]


corr_1, tim_1 = policy_case((0.5, 0.8, 0.5, 0.5))  # agent 1 biased
corr_0, tim_0 = policy_case((0.8, 0.5, 0.5, 0.5))  # agent 0 biased
print(f"agent 1 biased: |corr(a_0, r_1)| = {corr_1:.6f} (closed form 2 * 0.8 - 1), "
      f"TIM 0->1 = {tim_1:.6f}")
print(f"agent 0 biased: |corr(a_0, r_1)| = {corr_0:.1e}, TIM 0->1 = {tim_0:.6f}")
deviation = max(abs(corr_1 - (2 * 0.8 - 1)), abs(tim_1 - 1), corr_0, abs(tim_0 - 1))
S_CLOSED_FORM = 1e-9  # closed forms: rounding of the linear algebra only
icmlbook.solution_check("largest deviation from the closed forms", deviation, "<=",
                        S_CLOSED_FORM, digits=2)

# %% [markdown] tags=["exercise"]
# **Exercise 3. A smarter correlation.** Compute
# $|\mathrm{corr}(a_{j,t}, r_{i,t} \mid s_t, a_{i,t})|$, the correlation within each state
# *and* each own action of the receiver, averaged over the groups. Show that it finds the
# XOR edge $0 \to 1$ here. Then build an MDP where it fails and TIM does not, for
# example with a three-way parity reward.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 3
# Given $a_1$, the XOR reward $r_1 = \mathbf 1[a_0 = a_1]$ is $a_0$ itself (if $a_1 = 1$)
# or $1 - a_0$ (if $a_1 = 0$): within each group the correlation is $\pm 1$, and the
# conditional detector sees the edge perfectly. Conditioning on one more action defeats
# one level of interaction, not all of them. Give agent 2 the parity reward
# $r_2 \mathrel{+}= \mathbf 1[a_0 \oplus a_1 \oplus a_2 = 0]$. Within a group
# $(s, a_2)$, the reward is $\mathbf 1[a_0 = a_1 \oplus a_2]$, and with $a_1$ uniform and
# independent of $a_0$ this is again a fair coin independent of $a_0$: the conditional
# correlation of $a_0$ with $r_2$ is exactly zero. TIM still sees the edge: switching
# $a_0$ always flips the parity, so the immediate reward changes by exactly 1, while the
# future is untouched ($a_0$ does not drive the state), so $\mathrm{TIM}_{0\to 2} = 1$.
# The cell computes the conditional correlation exactly from the stationary distribution
# (lag 0) and asserts the gap between what TIM and the detector see.
# :::

# %% tags=["solution", "hide-cell"]
def conditional_corr(d, r, a_j, a_i, s):
    """sum_g p(g) |corr(a_j, r | g)| over the groups g = (s, a_i), exactly under d."""
    total = 0.0
    for g in {(u, v) for u, v in zip(s, a_i)}:
        w = d * ((s == g[0]) & (a_i == g[1]))
        if w.sum() == 0:
            continue
        w = w / w.sum()
        x, y = a_j - w @ a_j, r - w @ r
        sd = np.sqrt((w @ x**2) * (w @ y**2))
        total += d[(s == g[0]) & (a_i == g[1])].sum() * (abs(w @ (x * y)) / sd
                                                          if sd > 0 else 0.0)
    return total


s_all = np.repeat(np.arange(N_STATES), len(ACTS))  # the state of every (s, a) pair
a_all = np.tile(ACTS, (N_STATES, 1))  # the individual actions of every (s, a) pair
cc_xor = conditional_corr(d_exact.ravel(), r_flat[:, 1], a_all[:, 0], a_all[:, 1],
                          s_all)
P3, R3 = make_env(mix=mix)
R3[2] += (ACTS[:, 0] ^ ACTS[:, 1] ^ ACTS[:, 2]) == 0  # agent 2's three-way parity
tim_par, _, _, d_par = exact_impacts(P3, pi, R3, DEV)
cc_par = conditional_corr(d_par.ravel(), R3[2].ravel(), a_all[:, 0], a_all[:, 2], s_all)
print(f"chapter MDP, XOR edge 0->1: conditional |corr| = {cc_xor:.3f}")
print(f"parity MDP, edge 0->2: conditional |corr| = {cc_par:.1e}, exact TIM = "
      f"{tim_par[0, 2]:.3f}")
gap = min(cc_xor, tim_par[0, 2]) - cc_par
S_GAP = 0.99  # the derivation gives exactly 1; the margin covers rounding only
icmlbook.solution_check("min(conditional |corr| on XOR, TIM 0->2 on parity) - "
                        "conditional |corr| on parity", gap, ">=", S_GAP)

# %% [markdown]
# ## References
#
# - F. R. Pieroth, K. Fitch, L. Belzner. Detecting Influence Structures in Multi-Agent
#   Reinforcement Learning. ICML 2024.
# - K. Zhang, Z. Yang, H. Liu, T. Zhang, T. Başar. Fully Decentralized Multi-Agent
#   Reinforcement Learning with Networked Agents. ICML 2018.
# - R. S. Sutton, A. G. Barto. Reinforcement Learning: An Introduction, 2nd ed., §10.3
#   (differential semi-gradient SARSA). MIT Press, 2018.
# - M. L. Puterman. Markov Decision Processes, Appendix A (the fundamental matrix and
#   the Poisson equation). Wiley, 1994.

# %% tags=["remove-cell"]
run.finish();
