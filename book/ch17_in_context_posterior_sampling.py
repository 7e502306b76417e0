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
# # In-context posterior sampling under task shift
#
# **Paper.** Tengye Xu, Zihao Li, Qinyuan Ren. *Meta-Reinforcement Learning Robust to
# Distributional Shift Via Performing Lifelong In-Context Learning.* ICML 2024, PMLR
# 235:55112–55125. [PMLR](https://proceedings.mlr.press/v235/xu24o.html) ·
# [OpenReview](https://openreview.net/forum?id=laIOUtstMs). We found no official code.
# Everything below is written from the paper's abstract and from published descriptions
# of its method, PSBL (Posterior Sampling Bayesian Lifelong In-Context Reinforcement
# Learning); where we could not check a detail against the paper's text, we say that it
# is our reconstruction.
#
# **The problem.** A meta-trained agent learns, from many tasks drawn from a training
# distribution, to adapt to a new task from its own history alone, with frozen weights
# ("in-context learning"). Most such agents only adapt well to tasks that look like the
# training tasks. When the test tasks come from a *strictly shifted* distribution, an
# agent that acts greedily on what it believes stops exploring too early and settles
# on a wrong action.
#
# **The idea.** Train a transformer to output the *predictive posterior distribution*
# (PPD) of the optimal action given the history, and at test time *sample* the action
# from it: amortised posterior (Thompson) sampling. Exploration then falls as the
# posterior concentrates, whatever the task. To act for much longer than the training
# trials, feed the network a *window* of the most recent episodes, so it never sees a
# context longer than in training, and let the window slide.
#
# **The claims.** The abstract makes two, in these words: the agent "samples actions
# from the approximate PPD to perform online exploration, which progressively reduces
# uncertainty and enhances performance in the interaction with the environment", and
# "PSBL significantly outperforms standard Meta RL methods both in tasks with sparse
# rewards and dense rewards when the test task distribution is strictly shifted from
# the training distribution". The verdict on each, by a rule fixed before the final
# runs, is printed with the claims below.
#
# **What stands in for the paper, and what is ours.** This chapter is a *reduction* of
# the paper's setting: the tasks are 5-armed Bernoulli bandits instead of gridworlds
# and MuJoCo (so there is no observation to predict), a pull is a step and an episode
# is a block of ten pulls; the shift moves every arm's mean from $[0, \frac12]$ in
# training to $[\frac12, 1]$ at test. The network is trained on offline histories of
# simple behaviour policies rather than by PSBL's own on-policy meta-training, and its
# action target is the *exact* PPD of the training prior (a known product of uniforms)
# rather than the paper's annealed Boltzmann target of a learned critic; there is no
# critic. The paper's meta-RL baselines (RL², VariBAD, AMAGO, trained with RL) are
# stood in for by the *same* network used greedily, which isolates the sampling
# ingredient. We add the bandit references a reader should ask for, recorded as
# findings rather than claims, since the paper makes no such comparison: Thompson
# sampling with the true test prior and with a flat prior, and UCB1. Reconstructed, not
# taken from the paper's text: the exact form of its loss (Eq. 4), the window's
# bookkeeping (Eq. 6) and the measure $\rho$ of improvement past the training horizon
# (Eq. 7).

# %% tags=["parameters"]
tier = "default"  # smoke | default | full: size of the experiment
seed = 0  # drives every random number in the chapter
shift = 0.5  # test arm means are uniform on [shift, shift + 0.5]; training: [0, 0.5]
window = 4  # test-time context: the current episode and the window - 1 before it
horizon = 300  # test pulls per task (the training trials have 50)
temperature = 1.0  # PSBL samples from q^(1 / temperature)

# %% tags=["validate"]
from icmlbook import check_int, check_range, check_seed, check_tier

check_tier(tier)
check_seed(seed)
check_range("shift", shift, 0.0, 0.5)
check_int("window", window, 1, 5)
check_int("horizon", horizon, 250, 1000)
check_range("temperature", temperature, 0.05, 5.0)

# %% [markdown]
# ## Setup
#
# A small causal transformer, the book's `icmlbook.tinygpt.TinyGPT`, fed with real-valued
# tokens (its `embeds=` input) and read through two heads of our own (its
# `return_hidden=True` output). The tier sets the network's size, the number of
# pretraining updates and the number of test tasks. The full tier (1500 updates of 64
# histories, $d = 48$, 400 test tasks) runs on the CPU in about twelve minutes on a
# busy 2-core machine; nothing in it needs a GPU.

# %%
import math

import numpy as np
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import icmlbook
from icmlbook.tinygpt import GPTConfig, TinyGPT

run = icmlbook.start("17_in_context_posterior_sampling", tier=tier, seed=seed,
                     params=dict(shift=shift, window=window, horizon=horizon,
                                 temperature=temperature))
icmlbook.use_style()
cfg = run.pick(
    smoke=dict(steps=20, batch=16, d=16, d_ff=32, n_test=16, n_indist=16,
               max_pulls=100, widget_tasks=4, widget_pulls=100),
    default=dict(steps=300, batch=32, d=32, d_ff=64, n_test=400, n_indist=100,
                 max_pulls=1000, widget_tasks=12, widget_pulls=300),
    full=dict(steps=1500, batch=64, d=48, d_ff=192, n_test=400, n_indist=400,
              max_pulls=1000, widget_tasks=24, widget_pulls=300),
)
L = min(horizon, cfg.max_pulls)  # the smoke tier shortens the test
K = 5  # arms
EPISODE = 10  # pulls per episode
H = 50  # pulls per training trial (5 episodes): the training horizon
TRAIN_PRIOR = (0.0, 0.5)  # arm means of the training tasks are uniform on this range
REWARD_WEIGHT = 0.5  # lambda_s / lambda_a in Eq. 5
LR = 3e-3  # Adam, cosine-decayed
GRID = 100  # grid points for the exact posteriors (Eq. 3)
STYLE = icmlbook.method_styles(
    "PSBL (sample, window)", "greedy (argmax, window)", "sample, growing context",
    "Thompson, true prior", "Thompson, flat prior", "UCB1", "random")
test_prior = (shift, shift + 0.5)
print(f"tier {tier}: {cfg.steps} updates of {cfg.batch} histories, d = {cfg.d}; "
      f"{cfg.n_test} test tasks of {L} pulls, arm means in "
      f"[{test_prior[0]:.2f}, {test_prior[1]:.2f}]")

# %% [markdown]
# One colour per method in every figure: PSBL in blue, the greedy ablation in red, the
# growing-context ablation in teal, Thompson sampling with the true prior in amber and
# with a flat prior in purple, UCB1 in grey, random pulls in green.
#
# ## The idea in math
#
# **Tasks.** A task is a bandit with arm means $\mu \in [0,1]^K$; pulling arm $a$ pays
# $r \sim \mathrm{Bernoulli}(\mu_a)$. Training tasks and test tasks come from
#
# $$\mu \sim P_{\text{train}} = \mathcal U[0, \tfrac12]^K, \qquad
#   \mu \sim P_{\text{test}} = \mathcal U[s, s + \tfrac12]^K, \tag{1}$$
#
# strictly shifted at the default $s = \frac12$: no test arm looks like any training
# arm. The history after $t$ pulls is $\tau_t = (a_1, r_1, \dots, a_t, r_t)$, and the
# optimal action of the task is $a^\star = \arg\max_a \mu_a$.
#
# **The predictive posterior of the optimal action.** Under the training prior,
#
# $$P(a^\star = a \mid \tau_t) = \int \mathbf 1\big[a = \arg\max_b \mu_b\big]\,
#   p(\mu \mid \tau_t)\, d\mu . \tag{2}$$
#
# Sampling an action from (2) is Thompson sampling, without ever sampling a $\mu$.

# %% [markdown]
# **The PPD in closed form for our prior.** The prior is a product of uniforms on
# $[l, h]$, so the posterior is a product too: with $s_a$ successes and $f_a$ failures
# of arm $a$ in $\tau_t$, its density is $p_a(x) \propto x^{s_a}(1-x)^{f_a}$ on $[l, h]$,
# with distribution function $F_a$. Arm $a$ is optimal when every other arm is below it:
#
# $$P(a^\star = a \mid \tau_t) = \int_l^h p_a(x) \prod_{b \ne a} F_b(x)\, dx . \tag{3}$$
#
# We evaluate (3) on a grid of `GRID` points. This is our tool for targets and checks;
# the paper, in MDPs, has no such formula and learns from returns.

# %% [markdown]
# **Training the network (PSBL's loss, as we reconstruct it).** The network $q_\phi$
# maps a history to a distribution over actions, and also predicts the next reward.
# PSBL minimises
#
# $$\mathcal L = \lambda_s \ell_s + \lambda_a \ell_a + \lambda_c \ell_c, \qquad
#   \ell_a = \mathrm{KL}\big(\pi^\star_\alpha(\cdot \mid \tau_t)\,\big\|\,
#   q_\phi(\cdot \mid \tau_t)\big), \quad
#   \pi^\star_\alpha(a \mid \tau_t) \propto e^{Q(a, \tau_t)/\alpha}, \tag{4}$$
#
# with $\ell_s$ the log-loss of the predicted next observation and reward, $\ell_c$ a
# temporal-difference loss for the critic $Q$, and $\alpha$ annealed towards 0. As
# $\alpha \to 0$ the target is the optimal action itself, and the expected cross-entropy
# $\mathbb E\,[-\log q_\phi(a^\star \mid \tau_t)]$ over tasks and histories is minimised
# exactly by $q_\phi = P(a^\star \mid \tau_t)$, the PPD (2). In a bandit we know $a^\star$
# of every training task, so there is no critic to learn ($\ell_c$ is dropped); and we
# can replace the one-hot target by its expectation given the history, which is the
# PPD (3) itself (Rao–Blackwell: the same minimiser, with much less noise per update):
#
# $$\mathcal L = \mathbb E_{\mu \sim P_{\text{train}}}\, \frac1{H+1}\sum_{t=0}^{H}
#   \Big[\mathrm{KL}\big(P(a^\star \mid \tau_t) \,\big\|\, q_\phi(\cdot \mid \tau_t)\big)
#   + \lambda_s\, \mathrm{BCE}\big(\hat r_\phi(a_{t+1} \mid \tau_t),\, r_{t+1}\big)\Big].
#   \tag{5}$$

# %% [markdown]
# **Acting with frozen weights, in a window.** At test time the weights never change.
# Episode $e$ covers pulls $eE+1, \dots, (e+1)E$ ($E$ = `EPISODE`). The context fed to
# the network is a window $W_t$ of the current episode and the $b-1$ episodes before it
# ($b$ = `window`), with positions re-based to start at 0, so that its length never
# exceeds the training trial $H$; the window slides by one episode at each episode
# boundary. PSBL's action is a sample, the greedy ablation's the mode:
#
# $$a_{t+1} \sim q_\phi(\cdot \mid W_t)^{1/T} \quad \text{(PSBL)}, \qquad
#   a_{t+1} = \arg\max_a q_\phi(a \mid W_t) \quad \text{(greedy)}. \tag{6}$$
#
# A policy is scored by its regret after $L$ pulls, and by how its per-pull regret
# falls *after* the training horizon $H$, over blocks of $m = 100$ pulls:
#
# $$R_L = \sum_{t=1}^{L} \big(\max_a \mu_a - \mu_{a_t}\big), \qquad
#   \rho = \frac{\text{mean regret per pull over the last } m \text{ pulls}}
#   {\text{mean regret per pull over pulls } H+1, \dots, H+m} . \tag{7}$$

# %% [markdown]
# ## From scratch
#
# ### Tasks and offline histories
#
# Eq. 1, and a pull. Every random number goes through a `torch.Generator` passed in
# as an argument; each comes from a named stream of the run (`run.generator(name)`), so
# the pretraining data, the test tasks and each policy's draws are independent streams
# of one seed.

# %%
def sample_tasks(n, prior, gen):
    """Eq. 1: n tasks, arm means uniform on prior = (lo, hi): shape (n, K)."""
    lo, hi = prior
    return lo + (hi - lo) * torch.rand(n, K, generator=gen)


def pull(means, arms, gen):
    """Bernoulli rewards of pulling arms (n,) in tasks means (n, K)."""
    mu = means.gather(1, arms[:, None])[:, 0]
    return (torch.rand(len(arms), generator=gen) < mu).float()


# %% [markdown]
# The pretraining data are histories of three cheap behaviour policies, a third of the
# tasks each: uniformly random pulls, Thompson sampling with a flat Beta(1, 1) prior,
# and $\varepsilon$-greedy with $\varepsilon \sim \mathcal U[0.05, 0.5]$. The mix covers
# both exploring and exploiting histories.

# %%
def behaviour_histories(means, T, gen):
    """Arms (n, T) and rewards (n, T) of random / flat Thompson / eps-greedy pulls."""
    n, rows = len(means), torch.arange(len(means))
    kind = torch.randint(0, 3, (n,), generator=gen)
    eps = 0.05 + 0.45 * torch.rand(n, generator=gen)
    wins, losses = torch.zeros(n, K), torch.zeros(n, K)
    arms, rewards = torch.zeros(n, T, dtype=torch.long), torch.zeros(n, T)
    for t in range(T):
        rand = torch.randint(0, K, (n,), generator=gen)
        thompson = torch.distributions.Beta(wins + 1, losses + 1).sample().argmax(1)
        best = ((wins + 0.5) / (wins + losses + 1)).argmax(1)
        greedy = torch.where(torch.rand(n, generator=gen) < eps, rand, best)
        a = torch.where(kind == 0, rand, torch.where(kind == 1, thompson, greedy))
        r = pull(means, a, gen)
        wins[rows, a] += r
        losses[rows, a] += 1 - r
        arms[:, t], rewards[:, t] = a, r
    return arms, rewards


# %% [markdown]
# ### The exact PPD (Eq. 3)
#
# The posterior of one arm depends on its counts only, so we tabulate its density and
# distribution function on the grid for every $(s, f)$ with $s, f \le H$ once. The
# distribution function at a grid point is taken at the cell's midpoint.

# %%
def prior_grid(prior, n=GRID):
    """Midpoints of n equal cells of [lo, hi]."""
    lo, hi = prior
    return lo + (hi - lo) * (torch.arange(n) + 0.5) / n


def posterior_tables(prior, n_max=H):
    """Eq. 3's p_a(x) and F_a(x) on the grid, for s, f = 0..n_max: (n+1, n+1, GRID)."""
    x, c = prior_grid(prior), torch.arange(n_max + 1, dtype=torch.float32)
    logp = c[:, None, None] * x.log() + c[None, :, None] * (1 - x).log()
    p = (logp - logp.amax(-1, keepdim=True)).exp()
    p = p / p.sum(-1, keepdim=True)
    return p, p.cumsum(-1) - 0.5 * p


def exact_ppd(wins, losses, tables):
    """Eq. 3: P(a* = a | counts) for counts (..., K) -> (..., K)."""
    p_tab, F_tab = tables
    p, Fx = p_tab[wins.long(), losses.long()], F_tab[wins.long(), losses.long()]
    all_below = Fx.prod(-2, keepdim=True)  # prod_b F_b(x)
    mass = (p * all_below / Fx.clamp_min(1e-30)).sum(-1)  # int p_a prod_{b != a} F_b
    return mass / mass.sum(-1, keepdim=True)


def posterior_mean(wins, losses, tables, prior):
    """E[mu_a | counts] under the prior: the ideal reward head, (..., K)."""
    return (tables[0][wins.long(), losses.long()] * prior_grid(prior)).sum(-1)


def prefix_counts(arms, rewards):
    """Successes and failures per arm before each pull: two (n, T + 1, K) tensors."""
    onehot = F.one_hot(arms, K).float()
    zero = torch.zeros_like(onehot[:, :1])
    wins = torch.cat([zero, (onehot * rewards[..., None]).cumsum(1)], 1)
    pulls = torch.cat([zero, onehot.cumsum(1)], 1)
    return wins, pulls - wins


# %% [markdown]
# Eq. 3 against a brute-force Monte Carlo estimate of Eq. 2: draw $2\cdot 10^5$ tasks
# from the training prior, weight each by the likelihood of a short history, and count
# how often each arm is the best.

# %%
def monte_carlo_ppd(wins, losses, prior, n, gen):
    """Eq. 2 by importance sampling from the prior: counts (K,) -> (K,)."""
    mu = sample_tasks(n, prior, gen)
    logw = (wins * mu.log() + losses * (1 - mu).log()).sum(1)
    w = (logw - logw.max()).exp()
    return torch.zeros(K).index_add_(0, mu.argmax(1), w) / w.sum()


train_tables = posterior_tables(TRAIN_PRIOR)
mc_gen = run.generator("monte carlo check")
mc_wins, mc_losses = torch.tensor([2.0, 0, 1, 0, 3]), torch.tensor([1.0, 2, 0, 0, 1])
ppd_grid = exact_ppd(mc_wins, mc_losses, train_tables)
ppd_mc = monte_carlo_ppd(mc_wins, mc_losses, TRAIN_PRIOR, 200_000, mc_gen)
ppd_err = float((ppd_grid - ppd_mc).abs().max())
print("Eq. 3 on the grid:", ppd_grid.numpy().round(3))
print("Monte Carlo (Eq. 2):", ppd_mc.numpy().round(3), f" max difference {ppd_err:.4f}")

# %% [markdown]
# ### The network
#
# Our stand-in for the paper's "LILTrans": a causal transformer over interaction tokens
# with two heads. A token is a linear map of [one-hot arm, reward]; a learned
# beginning-of-history vector comes first, so the output at position $t$ has seen $t$
# pulls. Positions are learned absolute embeddings, one per step of a training trial
# (the table has $H+1$ rows and clamps beyond). The action head gives $q_\phi$, the
# reward head one logit of $P(r = 1 \mid a)$ per arm.

# %%
class PSBLNet(nn.Module):
    """History tokens -> action logits (PPD of a*) and reward logits, per position."""

    def __init__(self, d, d_ff, n_layers=2, n_heads=4):
        super().__init__()
        self.gpt = TinyGPT(GPTConfig(vocab_size=1, d_model=d, n_layers=n_layers,
                                     n_heads=n_heads, d_ff=d_ff, max_len=H + 1,
                                     abs_pe="learned"))
        self.token = nn.Linear(K + 1, d)
        self.bos = nn.Parameter(0.02 * torch.randn(d))
        self.action_head, self.reward_head = nn.Linear(d, K), nn.Linear(d, K)

    def embed(self, arms, rewards):
        onehot = F.one_hot(arms, K).float()
        return self.token(torch.cat([onehot, rewards[..., None]], -1))

    def with_bos(self, arms, rewards):
        bos = self.bos.expand(len(arms), 1, -1)
        return torch.cat([bos, self.embed(arms, rewards)], 1)

    def forward(self, arms, rewards):
        hidden = self.gpt(embeds=self.with_bos(arms, rewards), return_hidden=True)
        return self.action_head(hidden), self.reward_head(hidden)


# %% [markdown]
# ### The loss (Eq. 5) and pretraining
#
# Every prefix of a history is a training example: the action head is scored against
# the exact PPD (3) at all $H+1$ prefixes, the reward head on the arm actually pulled
# next.

# %%
def psbl_loss(net, arms, rewards, tables, reward_weight=REWARD_WEIGHT):
    """Eq. 5: KL(PPD || q) over all prefixes + lambda_s * BCE of the next reward."""
    action_logits, reward_logits = net(arms, rewards)
    with torch.no_grad():
        target = exact_ppd(*prefix_counts(arms, rewards), tables)
    log_q = action_logits.log_softmax(-1)
    kl = (target * (target.clamp_min(1e-12).log() - log_q)).sum(-1).mean()
    next_logit = reward_logits[:, :-1].gather(2, arms[..., None])[..., 0]
    bce = F.binary_cross_entropy_with_logits(next_logit, rewards)
    return kl + reward_weight * bce, kl.item(), bce.item()


def pretrain(net, arms, rewards, tables, steps, batch, lr=LR):
    """Adam on Eq. 5 over fixed offline histories, cosine-decayed; returns losses."""
    params = list(net.parameters())
    # torch.optim.Adam's arithmetic without its seconds of first-use imports; TinyGPT's
    # token table and output layer get no gradient here and are skipped
    opt = icmlbook.Adam(params, lr=lr)
    history = []
    net.train()
    for step in icmlbook.progress(range(steps), desc="pretraining"):
        rows = slice(step * batch, (step + 1) * batch)
        loss, kl, bce = psbl_loss(net, arms[rows], rewards[rows], tables)
        net.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.lr = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        opt.step()
        history.append((kl, bce))
    net.eval()
    return np.array(history)


# %% [markdown]
# ### Acting in context with frozen weights (Eq. 6)
#
# Re-reading the whole window at every pull would cost a full forward pass per pull.
# Within an episode the window only grows, so we keep each layer's keys and values (a
# KV cache) and push one token per pull; at an episode boundary the window slides, the
# positions are re-based, and the window is read afresh. The cached pass below is the
# TinyGPT forward written out for new tokens appended to a cache.

# %%
def forward_cached(net, x, start, cache):
    """Hidden states of new tokens x (n, T, d) at positions start.. after cache."""
    gpt = net.gpt
    pos = torch.arange(start, start + x.shape[1]).clamp(max=gpt.cfg.max_len - 1)
    x = x + gpt.pos(pos)
    n, T, d = x.shape
    for i, block in enumerate(gpt.blocks):
        att, hd = block.attn, d // block.attn.h
        q, k, v = att.qkv(block.ln1(x)).view(n, T, 3, att.h, hd).permute(2, 0, 3, 1, 4)
        if cache[i] is not None:
            k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
        cache[i] = (k, v)
        w = q @ k.transpose(-1, -2) / math.sqrt(hd)
        if T > 1:  # new token i sees the cache and new tokens up to i
            seen = torch.ones(T, k.shape[2], dtype=torch.bool).tril(k.shape[2] - T)
            w = w.masked_fill(~seen, -math.inf)
        x = x + att.proj((w.softmax(-1) @ v).transpose(1, 2).reshape(n, T, d))
        x = x + block.mlp(block.ln2(x))
    return gpt.ln_f(x)


# %% [markdown]
# The acting loop. `window=None` is the growing-context ablation: the context is never
# cut, its length soon exceeds anything seen in training, and positions past $H$ share
# the last row of the table. `sample=False` is the greedy ablation.

# %%
def window_start(t, window):
    """First pull in W_t, the context before pull t + 1 (0-based; Eq. 6)."""
    if window is None or t < window * EPISODE:
        return 0
    return (t // EPISODE - (window - 1)) * EPISODE


@torch.no_grad()
def act_in_context(net, means, L, gen, *, sample=True, window=4, temp=1.0):
    """Eq. 6 for L pulls on tasks means (n, K): arms, rewards (n, L), q (n, L, K)."""
    n = len(means)
    arms, rewards = torch.zeros(n, L, dtype=torch.long), torch.zeros(n, L)
    qs = torch.zeros(n, L, K)
    lo = None
    for t in range(L):
        if window_start(t, window) != lo:  # t = 0, or the window has slid
            lo, cache = window_start(t, window), [None] * len(net.gpt.blocks)
            x = net.with_bos(arms[:, lo:t], rewards[:, lo:t])
            h, length = forward_cached(net, x, 0, cache)[:, -1], x.shape[1]
        q = (net.action_head(h) / temp).softmax(-1)
        a = torch.multinomial(q, 1, generator=gen)[:, 0] if sample else q.argmax(-1)
        r = pull(means, a, gen)
        arms[:, t], rewards[:, t], qs[:, t] = a, r, q
        token = net.embed(a[:, None], r[:, None])
        h, length = forward_cached(net, token, length, cache)[:, -1], length + 1
    return arms, rewards, qs


# %% [markdown]
# ### The references
#
# **Thompson sampling** with a uniform prior on $[l, h]$ draws each arm's mean from its
# grid posterior (the density of Eq. 3) by inverse transform and pulls the largest. With
# the true test prior it is the near-Bayes-optimal reference; with $[0, 1]$ it is the
# textbook flat-prior version. **UCB1** pulls every arm once, then
# $\arg\max_a \hat\mu_a + \sqrt{2 \ln t / n_a}$. Neither has a window: they keep counts.

# %%
def thompson(means, L, gen, prior):
    """Thompson sampling with a uniform prior on prior = (lo, hi): arms (n, L)."""
    n, rows, x = len(means), torch.arange(len(means)), prior_grid(prior, 4 * GRID)
    wins, losses = torch.zeros(n, K), torch.zeros(n, K)
    arms = torch.zeros(n, L, dtype=torch.long)
    for t in range(L):
        logp = wins[..., None] * x.log() + losses[..., None] * (1 - x).log()
        cdf = (logp - logp.amax(-1, keepdim=True)).exp().cumsum(-1)
        u = torch.rand(n, K, 1, generator=gen) * cdf[..., -1:]
        draw = x[torch.searchsorted(cdf, u)[..., 0].clamp(max=len(x) - 1)]
        a = draw.argmax(1)
        r = pull(means, a, gen)
        wins[rows, a] += r
        losses[rows, a] += 1 - r
        arms[:, t] = a
    return arms


def ucb1(means, L, gen):
    """UCB1 (Auer et al. 2002): arms (n, L)."""
    n, rows = len(means), torch.arange(len(means))
    total, count = torch.zeros(n, K), torch.zeros(n, K)
    arms = torch.zeros(n, L, dtype=torch.long)
    for t in range(L):
        bonus = (2 * math.log(t + 1) / count.clamp(min=1)).sqrt()
        index = torch.where(count > 0, total / count.clamp(min=1) + bonus, math.inf)
        a = index.argmax(1)
        total[rows, a] += pull(means, a, gen)
        count[rows, a] += 1
        arms[:, t] = a
    return arms


def regret_curve(means, arms):
    """Eq. 7: mean cumulative regret over tasks after each pull, shape (L,)."""
    gap = means.max(1).values[:, None] - means.gather(1, arms)
    return gap.cumsum(1).mean(0).numpy()


def lifelong_ratio(curve, m=100):
    """Eq. 7's rho: per-pull regret over the last m pulls / over pulls H+1..H+m."""
    m = min(m, (len(curve) - H) // 2)  # only shorter at the smoke tier
    per_pull = np.diff(curve, prepend=0.0)
    return float(per_pull[-m:].mean() / per_pull[H:H + m].mean())


# %% [markdown]
# ## The experiment
#
# ### Pretraining on the training prior
#
# All pretraining histories are drawn once, `steps` × `batch` tasks of $H$ pulls each;
# every update sees a fresh batch of tasks.

# %%
data_gen = run.generator("pretraining data")
train_means = sample_tasks(cfg.steps * cfg.batch, TRAIN_PRIOR, data_gen)
train_arms, train_rewards = behaviour_histories(train_means, H, data_gen)
run.reseed("network init")  # the weights are drawn from torch's global generator
net = PSBLNet(cfg.d, cfg.d_ff)
losses = pretrain(net, train_arms, train_rewards, train_tables, cfg.steps, cfg.batch)
tail = max(1, cfg.steps // 10)
print(f"{sum(p.numel() for p in net.parameters()):,} parameters; last tenth of "
      f"pretraining: KL {losses[-tail:, 0].mean():.3f}, "
      f"reward BCE {losses[-tail:, 1].mean():.3f}")

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(7, 2.4))
for ax, col, name in zip(axes, (0, 1), ("KL(PPD || q), Eq. 5", "reward BCE, Eq. 5")):
    ax.plot(losses[:, col], color="0.6", lw=0.6)
    smooth = np.convolve(losses[:, col], np.ones(tail) / tail, mode="valid")
    ax.plot(np.arange(tail - 1, len(losses)), smooth,
            color=STYLE["PSBL (sample, window)"]["color"])
    ax.set(xlabel="update", ylabel="loss", title=name)
plt.show()

# %% [markdown]
# ### What the network learned, in distribution
#
# On fresh training-prior histories, how close is $q_\phi$ to the exact PPD, is it
# uniform before the first pull (the prior is symmetric in the arms), and does the
# reward head predict $P(r = 1 \mid a, \tau_t) = \mathbb E[\mu_a \mid \tau_t]$, the
# posterior mean of each arm?

# %%
check_gen = run.generator("in-distribution tasks")
in_means = sample_tasks(cfg.n_indist, TRAIN_PRIOR, check_gen)
in_arms, in_rewards = behaviour_histories(in_means, H, check_gen)
with torch.no_grad():
    in_logits, in_reward_logits = net(in_arms, in_rewards)
q_in = in_logits.softmax(-1)
in_counts = prefix_counts(in_arms, in_rewards)
ppd_in = exact_ppd(*in_counts, train_tables)
tv_in = float(0.5 * (q_in - ppd_in).abs().sum(-1).mean())
empty_dev = float((q_in[:, 0] - 1 / K).abs().max())
ideal_reward = posterior_mean(*in_counts, train_tables, TRAIN_PRIOR)
calib_err = float((in_reward_logits.sigmoid() - ideal_reward).abs().mean())
print(f"mean total variation between q and the exact PPD: {tv_in:.3f}")
print(f"empty context: q = {q_in[0, 0].numpy().round(3)}, "
      f"max |q - 1/K| = {empty_dev:.3f}")
print(f"reward head: mean |P(r = 1 | a) - posterior mean of arm a| = {calib_err:.3f}")

# %% [markdown]
# And as an agent, in distribution: regret after one training trial of $H$ pulls,
# against Thompson sampling with the training prior, which is exactly what a network
# with $q_\phi$ equal to the PPD would play.

# %%
in_gen = run.generator("in-distribution play")
in_psbl = regret_curve(in_means, act_in_context(net, in_means, H, in_gen)[0])[-1]
in_ts = regret_curve(in_means, thompson(in_means, H, in_gen, TRAIN_PRIOR))[-1]
print(f"in distribution, regret after {H} pulls: PSBL {in_psbl:.2f}, "
      f"Thompson with the training prior {in_ts:.2f}")

# %% [markdown]
# ### The shifted test: seven policies on the same tasks
#
# Each policy plays `horizon` pulls on the same `n_test` test tasks drawn from the
# shifted prior. The three network policies share the frozen weights.

# %%
test_means = sample_tasks(cfg.n_test, test_prior, run.generator("test tasks"))
gens = {name: run.generator(f"test play: {name}") for name in STYLE}  # one stream each
play = dict(sample=True, window=window, temp=temperature)
psbl_arms, psbl_rewards, psbl_q = act_in_context(
    net, test_means, L, gens["PSBL (sample, window)"], **play)
policies = {
    "PSBL (sample, window)": psbl_arms,
    "greedy (argmax, window)": act_in_context(
        net, test_means, L, gens["greedy (argmax, window)"], sample=False,
        window=window)[0],
    "sample, growing context": act_in_context(
        net, test_means, L, gens["sample, growing context"], window=None,
        temp=temperature)[0],
    "Thompson, true prior": thompson(test_means, L, gens["Thompson, true prior"],
                                     test_prior),
    "Thompson, flat prior": thompson(test_means, L, gens["Thompson, flat prior"],
                                     (0.0, 1.0)),
    "UCB1": ucb1(test_means, L, gens["UCB1"]),
    "random": torch.randint(0, K, (cfg.n_test, L), generator=gens["random"]),
}
curves = {name: regret_curve(test_means, a) for name, a in policies.items()}
rho = {name: lifelong_ratio(c) for name, c in curves.items()}
print(f"{'policy':<26} {'regret@' + str(L):>11} {'regret@' + str(H):>9} "
      f"{'rho (Eq. 7)':>11}")
for name, c in curves.items():
    print(f"{name:<26} {c[-1]:>11.2f} {c[H - 1]:>9.2f} {rho[name]:>11.3f}")

# %% tags=["hide-input"]
def plot_curves(ax_regret, ax_reward, curves, means, policies, h_mark=H):
    """Cumulative regret and per-pull mean reward (episode means) of each policy."""
    for name, c in curves.items():
        ax_regret.plot(np.arange(1, len(c) + 1), c, **STYLE[name])
        if ax_reward is not None:
            got = means.gather(1, policies[name]).mean(0).numpy()
            ep = got[: len(got) // EPISODE * EPISODE].reshape(-1, EPISODE).mean(1)
            ax_reward.plot((np.arange(len(ep)) + 0.5) * EPISODE, ep, **STYLE[name])
    for ax in (ax_regret, ax_reward):
        if ax is not None:
            ax.axvline(h_mark, color="k", ls=":", lw=0.8)
            ax.set(xlabel="pull t")
    ax_regret.set(ylabel="cumulative regret", title="regret (dotted: training horizon)")
    if ax_reward is not None:
        ax_reward.set(ylabel="mean of the arm pulled", title="reward per pull "
                      "(episode means)")


fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
plot_curves(axes[0], axes[1], curves, test_means, policies)
axes[0].legend(fontsize=7)
plt.show()

# %% [markdown]
# Read the right panel first. After the training horizon (dotted), the greedy use of
# the network has stopped learning: its reward per pull is flat, because it has settled
# on an arm and a window full of that arm's pulls only confirms it. PSBL's reward keeps
# rising long after pull $H$, in a context that is never longer than $H$: sampling keeps
# a little exploration alive, and what it finds stays in the window. The left panel
# puts this against the references. Thompson sampling and UCB1 keep counts over all
# pulls, which no fixed window can match; the window's price shows as PSBL's regret
# slope, which keeps a floor where Thompson's flattens.
#
# ### The action posterior over time
#
# $q_\phi(\cdot \mid W_t)$ along one test task, for PSBL and for the greedy ablation
# (stacked: each band is one arm; the best arm is at the bottom, dark).

# %% tags=["hide-input"]
def stacked_posterior(ax, q, means_row, title):
    """Stacked area of q (L, K) with arms ordered from best (bottom) to worst."""
    order = means_row.argsort(descending=True)
    shades = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, K))
    ax.stackplot(np.arange(1, len(q) + 1), q[:, order].T.numpy(), colors=shades,
                 labels=[f"mu = {means_row[i]:.2f}" for i in order])
    ax.axvline(H, color="k", ls=":", lw=0.8)
    ax.set(xlabel="pull t", ylabel="q(a | window)", ylim=(0, 1), xlim=(1, len(q)),
           title=title)


show = int(torch.argmax(test_means.max(1).values - test_means.sort(1).values[:, -2]))
greedy_q = act_in_context(net, test_means[show:show + 1], L,
                          run.generator("greedy on one task"), sample=False,
                          window=window)[2][0]
fig, axes = plt.subplots(1, 2, figsize=(8, 2.8), sharey=True)
stacked_posterior(axes[0], psbl_q[show], test_means[show], "PSBL (sample, window)")
stacked_posterior(axes[1], greedy_q, test_means[show], "greedy (argmax, window)")
axes[1].legend(fontsize=6, loc="lower right")
plt.show()

# %% [markdown]
# ### Two consistency checks of the acting loop
#
# The cached forward must equal the plain forward on the same tokens, and the output
# PSBL acted on at a pull after the window has slid must equal the network re-read from
# scratch on exactly that window's tokens (this catches re-basing and bookkeeping
# errors, the usual bugs of a rolling context).

# %%
with torch.no_grad():
    x = net.with_bos(psbl_arms[:4, :100], psbl_rewards[:4, :100])  # 101 tokens
    cache = [None] * len(net.gpt.blocks)
    parts = [forward_cached(net, x[:, :H], 0, cache)]
    parts += [forward_cached(net, x[:, i:i + 1], i, cache) for i in range(H, 101)]
    full = net.gpt(embeds=x, return_hidden=True)
    cache_err = float((torch.cat(parts, 1) - full).abs().max())
    t_check = 7 * EPISODE + 3  # a pull inside a window that has slid
    lo = window_start(t_check, window)
    fresh = net(psbl_arms[:, lo:t_check], psbl_rewards[:, lo:t_check])[0][:, -1]
    acted_on = psbl_q[:, t_check]
    window_err = float(((fresh / temperature).softmax(-1) - acted_on).abs().max())
print(f"cached vs plain forward: {cache_err:.1e}; acted-on q vs the window re-read at "
      f"pull {t_check + 1}: {window_err:.1e}")

# %% [markdown]
# ## Claims
#
# Paper claims first, each against an ablation or a baseline, then checks that must
# hold if the code is right, then *findings*: what the paper states, or what a reader
# would ask of it, measured here but not claimed. Each threshold's line says where it
# comes from. Calibration seeds 0-9 set the bars, which were then frozen before the
# confirmation seeds 10-19 were run. One claim was changed after a failure: improvement
# past the training horizon was first a bar of 0.85 on PSBL's own $\rho$ over blocks of
# 50 pulls, which two seeds of a first run missed; $\rho$ now compares blocks of 100
# pulls, and the claim divides PSBL's $\rho$ by that of the greedy agent on the same
# tasks, so that it measures what sampling adds, not a fall any agent might show. Its
# worst calibration seed stays only a few per cent inside the bar. That spread is the
# network's, trained afresh on each seed: doubling the test tasks from 200 to 400 did
# not narrow it, and the bar is not moved in either direction.

# %% tags=["thresholds"]
# the paper's verdict follows icmlbook.verdicts' rule, fixed before the final sweep
C_VS_GREEDY = 0.85  # regret PSBL / greedy; first run, seeds 0-3; seeds 0-9: 0.66-0.76
C_LIFELONG = 0.93  # rho PSBL / greedy's; changed after a failure; seeds 0-9: 0.81-0.89
C_PPD_MC = 0.01  # |Eq. 3 on the grid - Monte Carlo Eq. 2|, 2e5 draws (MC error ~ 0.002)
C_TV_PPD = 0.2  # mean TV(q, exact PPD), in distribution; first run: 0.11-0.12
C_EMPTY = 0.05  # max |q(a | empty) - 1/K|: the prior is symmetric in the arms
C_CALIB = 0.1  # mean |reward head - exact posterior mean|; set before any measurement
C_CACHE = 1e-4  # cached vs plain forward, float32 rounding
C_WINDOW = 1e-4  # acted-on q vs the window re-read from scratch, float32 rounding

# %%
regret = {name: float(c[-1]) for name, c in curves.items()}
psbl = regret["PSBL (sample, window)"]
rho_vs_greedy = rho["PSBL (sample, window)"] / rho["greedy (argmax, window)"]
run.claim("PSBL vs greedy stand-in: regret ratio",
          psbl / regret["greedy (argmax, window)"], "<=", C_VS_GREEDY,
          "On strictly shifted tasks PSBL has clearly less regret than an agent that "
          "exploits its in-context belief greedily", versus="baseline",
          against="argmax of the same frozen network, same window and tasks: a "
          "stand-in for the paper's meta-RL baselines (RL2, VariBAD, AMAGO)",
          strength="against a stand-in", provenance="calibrated", strict=1.0)
run.claim("lifelong improvement past H: rho, PSBL / greedy", rho_vs_greedy, "<=",
          C_LIFELONG, "PSBL's regret per pull keeps falling after the training "
          "horizon, with a context never longer than H, clearly more than without "
          "sampling", versus="ablation", against="the same network acting greedily "
          "(no posterior sampling), same window and tasks", strength="superiority",
          provenance="changed after failure")
run.check("exact PPD: grid (Eq. 3) = Monte Carlo (Eq. 2)", ppd_err, "<=", C_PPD_MC,
          "the closed form matches importance sampling from the prior")
run.check("q vs exact PPD in distribution: mean TV", tv_in, "<=", C_TV_PPD,
          "pretraining has brought q close to the posterior it is trained on")
run.check("empty context: max |q - 1/K|", empty_dev, "<=", C_EMPTY,
          "with no history the PPD of a symmetric prior is uniform")
run.check("reward head vs exact posterior mean", calib_err, "<=", C_CALIB,
          "P(r = 1 | a, history) matches E[mu_a | history] under the training prior")
run.check("KV-cached forward = plain forward", cache_err, "<=", C_CACHE,
          "appending tokens to a cache changes nothing", digits=2)
run.check("acted-on q = window re-read from scratch", window_err, "<=", C_WINDOW,
          "the sliding window's bookkeeping is right", digits=2)

# %% [markdown]
# The findings. The paper compares PSBL with meta-RL agents only; the three bandit
# references are the questions a reader of a bandit reduction asks, recorded with the
# direction "PSBL does at least as well" (a ratio of regrets at most 1).

# %%
run.finding("window vs growing context: regret ratio",
            psbl / regret["sample, growing context"], "<=", 1.0,
            paper="PSBL conditions on a sliding window of recent episodes, so that its "
            "network never sees a context longer than in meta-training, to keep "
            "learning in context over a lifelong horizon",
            shows="PSBL's regret over that of the same sampler fed the whole growing "
            "context; below 1, the window helps")
run.finding("PSBL vs UCB1: regret ratio", psbl / regret["UCB1"], "<=", 1.0,
            paper="not compared in the paper, whose baselines are meta-RL agents; "
            "robustness to a shifted task distribution invites the comparison with a "
            "classical count-based bandit algorithm",
            shows="PSBL's regret over UCB1's on the same shifted tasks; above 1, UCB1 "
            "does better")
run.finding("PSBL vs Thompson (flat prior): regret ratio",
            psbl / regret["Thompson, flat prior"], "<=", 1.0,
            paper="not compared in the paper; PSBL amortises posterior sampling, and "
            "textbook Thompson sampling with a flat prior needs no knowledge of the "
            "test tasks either",
            shows="PSBL's regret over that of Beta(1, 1) Thompson sampling with "
            "all-pull counts; above 1, Thompson sampling does better")
run.finding("PSBL vs Thompson (true prior): regret ratio",
            psbl / regret["Thompson, true prior"], "<=", 1.0,
            paper="not compared in the paper; Thompson sampling that knows the test "
            "prior is the near-Bayes-optimal reference for a posterior sampler",
            shows="PSBL's regret over that of exact posterior sampling with the test "
            "prior; above 1, by how much amortised sampling under shift falls short")
run.metric("regret", regret)
run.metric("rho", rho)
run.metric("psbl_vs_random", psbl / regret["random"])
run.metric("in_distribution_regret_H", dict(psbl=in_psbl, thompson_train=in_ts))
run.metric("final_kl", float(losses[-tail:, 0].mean()))

# %% [markdown]
# The paper's headline claims, in its words, and what tests each here. The abstract
# gives no number; the comparisons with meta-RL agents are in its experiments.

# %%
run.headline("outperforms meta-RL under strict shift",
              "PSBL significantly outperforms standard Meta RL methods both in tasks "
              "with sparse rewards and dense rewards when the test task distribution "
              "is strictly shifted from the training distribution", source="Abstract",
              claims=["PSBL vs greedy stand-in: regret ratio"])
run.headline("sampling keeps improving in context",
              "The agent then samples actions from the approximate PPD to perform "
              "online exploration, which progressively reduces uncertainty and "
              "enhances performance in the interaction with the environment",
              source="Abstract",
              claims=["lifelong improvement past H: rho, PSBL / greedy"],
              findings=["window vs growing context: regret ratio"])

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed: a fresh pretraining set, a fresh network and fresh test tasks.
# The table and strip plot below read this chapter's results file, made by
# `icmlbook sweep 17 --seeds 0-19 --update-results`: every claim, check and finding
# over the calibration seeds 0-9 and the confirmation seeds 10-19 at the default tier,
# with the number of seeds on which each holds and its worst margin (how far inside
# the threshold the worst seed stayed).

# %%
across = icmlbook.across_seeds(run)

# %% [markdown]
# ### The window against the growing context
#
# The paper's window keeps the context inside the lengths seen in training. On this
# run, the same network sampling with the whole, growing context:

# %%
print(f"regret PSBL (window) / sampling with the growing context: "
      f"{psbl / regret['sample, growing context']:.3f}; rho of the growing context "
      f"{rho['sample, growing context']:.3f}")

# %% [markdown]
# The window helps when the ratio is below 1. Across the seeds (the finding's row
# above) the effect is small next to that of sampling, and no threshold was registered
# for it before the runs, so it is a finding, not a claim. One reason it is small: a
# bandit history is exchangeable (the posterior depends on the counts only), so the
# positions past $H$, clamped to the table's last row, lose little that the network
# needs; what the long context does change is the balance of the counts it summarises,
# which the network never saw beyond $H$ pulls.
#
# Each paper claim should fail for a wrong agent. The tests
# (`tests/test_ch17_in_context_posterior_sampling.py`) hold the broken agents: one that
# ignores its history (it acts on $q_\phi(\cdot \mid \varnothing)$ at every pull, the
# bug of feeding an empty or stale context), one whose context stops sliding at the
# first $H$ pulls, and the greedy agent itself; each fails the claims it should.

# %% [markdown]
# ## Explore
#
# Move the severity of the shift (the lower end $s$ of the test prior; $s = 0$ is the
# training prior itself), the window $b$ (in episodes of ten pulls), the horizon $L$ and
# the sampling temperature, or switch PSBL to greedy. Left: reward per pull (episode
# means); middle: the action posterior $q_\phi(\cdot \mid W_t)$ of one task over time;
# right: cumulative regret against Thompson sampling with the true prior and UCB1,
# on `widget_tasks` tasks. Things to try: a window of one episode (the agent forgets
# almost everything), a temperature near 0 (sampling becomes greedy), no shift at all.

# %% tags=["hide-input"]
import functools

import ipywidgets as W


@functools.lru_cache(maxsize=32)
def widget_references(shift_w):
    """Test tasks of one severity and the two references on them (cached)."""
    gen = run.generator("widget tasks")  # the same draws at every severity
    prior = (shift_w, shift_w + 0.5)
    means = sample_tasks(cfg.widget_tasks, prior, gen)
    n = cfg.widget_pulls
    return means, {"Thompson, true prior": thompson(means, n, gen, prior),
                   "UCB1": ucb1(means, n, gen)}


@functools.lru_cache(maxsize=64)
def widget_agent(shift_w, window_w, temp_w, act):
    """The network's pulls and q on those tasks, for the longest horizon (cached)."""
    means, _ = widget_references(shift_w)
    gen = run.generator("widget agent")
    arms, _, q = act_in_context(net, means, cfg.widget_pulls, gen,
                                sample=act == "sample", window=window_w, temp=temp_w)
    return arms, q


def update(shift_w, window_w, horizon_w, temp_w, act):
    shift_w, temp_w = round(shift_w, 2), round(temp_w, 3)
    means, refs = widget_references(shift_w)
    arms, q = widget_agent(shift_w, window_w, temp_w, act)
    name = "PSBL (sample, window)" if act == "sample" else "greedy (argmax, window)"
    runs = {k: a[:, :horizon_w] for k, a in {name: arms, **refs}.items()}
    fig, axes = plt.subplots(1, 3, figsize=(10, 2.8), layout="none")
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.17, top=0.88, wspace=0.32)
    plot_curves(axes[2], axes[0], {k: regret_curve(means, a) for k, a in runs.items()},
                means, runs)
    axes[2].legend(fontsize=7)
    best = int(torch.argmax(means.max(1).values - means.sort(1).values[:, -2]))
    stacked_posterior(axes[1], q[best, :horizon_w], means[best], f"q over time ({act})")
    plt.show()


controls = dict(
    shift_w=W.FloatSlider(value=shift, min=0.0, max=0.5, step=0.05,
                          description="shift s"),
    window_w=W.IntSlider(value=window, min=1, max=5, description="window b"),
    horizon_w=W.IntSlider(value=min(L, cfg.widget_pulls), min=50, max=cfg.widget_pulls,
                          step=50, description="horizon L"),
    temp_w=W.FloatLogSlider(value=temperature, base=10, min=-1.3, max=0.5, step=0.1,
                            description="temperature"),
    act=W.ToggleButtons(options=["sample", "argmax"], value="sample",
                        description="act"),
)
icmlbook.explore(update, controls, run=run)

# %% [markdown]
# ## Paper vs. this book
#
# | | paper | this book |
# |---|---|---|
# | tasks | gridworlds, Dark-Key-to-Door, HalfCheetah-Vel, Walker-2D-Param; test sizes or parameters outside the training range | 5-armed Bernoulli bandits, arm means $[0, \frac12]$ in training and $[s, s+\frac12]$ at test (Eq. 1) |
# | network | LILTrans: causal transformer with a time embedding, heads for next observation, reward and action | TinyGPT, 2 layers, learned positions, an action head and a reward head (no observation to predict) |
# | training | on-policy meta-training with $\lambda_s\ell_s + \lambda_a\ell_a + \lambda_c\ell_c$, annealed Boltzmann action target from a critic (Eq. 4) | offline histories of three behaviour policies; exact PPD of the training prior as the action target (Eq. 5); no critic |
# | test time | frozen weights, sample from the PPD, window of the last episodes | the same (Eq. 6), with a KV cache inside each episode |
# | the key ingredient | posterior sampling | against greedy use of the same network (claim "lifelong improvement past H") |
# | baselines | RL², VariBAD, AMAGO, PEARL | the greedy network as a stand-in for them (claim "PSBL vs greedy stand-in"); UCB1 and Thompson sampling as bandit references (findings) |
#
# **Paper coverage.** The paper's results as far as we could read them (its abstract,
# and published descriptions of its experiments: we could not check figure numbers
# against its text), and what tests each here.
#
# | the paper's result | here |
# |---|---|
# | PSBL beats standard meta-RL agents on strictly shifted tasks, sparse and dense rewards (abstract; its experiments on gridworlds, Dark-Key-to-Door, HalfCheetah-Vel, Walker-2D-Param) | tested in a bandit reduction, against a stand-in: claim "PSBL vs greedy stand-in" |
# | sampling from the PPD progressively reduces uncertainty and improves performance (abstract) | tested: claim "lifelong improvement past H" (against the greedy ablation) |
# | a sliding window of recent episodes keeps the context within training lengths over a lifelong horizon (method; its ablation on window length) | finding "window vs growing context"; other window lengths only in the widget |
# | the margin over the baselines grows with the severity of the shift | not swept: one severity is tested, the widget's slider shows others |
# | sparse-reward tasks improve across episodes, dense-reward tasks adapt within one or two | out of scope: a bandit has no states, and our episodes only group pulls |
# | on-policy meta-training with a critic and an annealed Boltzmann target | out of scope: offline pretraining on the exact PPD instead (see above) |
#
# **What reproduces.** On strictly shifted tasks, sampling from the learned PPD beats
# exploiting it greedily, on every seed, and PSBL's regret per pull keeps falling long
# after the training horizon while the greedy agent's is flat. Both hold only in a
# weaker form than the paper's: the meta-RL agents are stood in for by the greedy use of
# the same network, and the bar of the second claim was changed after a failure; the
# verdict above says *partly* for both reasons.
#
# **What does not, and why.** The paper's margin over meta-RL agents does not become a
# margin over classical bandit algorithms, which the paper never claims but a reader
# will ask about: UCB1 is about as good as PSBL and a little better on most seeds, and
# Thompson sampling has several times less regret, with the true prior and just as much
# with a flat one, which needs no knowledge of the test tasks (the findings' rows in
# the table across seeds give the factors). Thompson sampling and UCB1 keep counts over
# every pull, while PSBL's evidence is capped by its window of at most $H$ pulls
# (exercise 1 measures that floor), and its inference is that of the training prior
# applied to rewards it never saw (exercise 2). The window's advantage over the growing
# context is a finding, not a claim. And we did not reproduce PSBL's on-policy
# meta-training, its critic or its annealing: the action target is the exact posterior
# that the paper's loss converges to as $\alpha \to 0$.

# %% [markdown]
# ## Exercises

# %% [markdown] tags=["exercise"]
# **1. The window's floor.** A window of $b$ episodes holds at most $bE$ pulls, so a
# sampler that sees only the window can never be more certain than that many pulls
# allow. Run exact Thompson sampling with the true test prior that keeps only the
# counts inside PSBL's window $W_t$, and compare its regret per pull late in the
# horizon with that of the same sampler keeping every pull, and with PSBL's.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 1
# **Reasoning.** Five arm means drawn uniformly on an interval of width $\frac12$ are
# spaced by about $\frac{1}{2 \cdot 6} \approx 0.08$ on average, so the best and the
# second arm are often closer than that. An arm pulled $n$ times has a posterior
# standard deviation of about $\sqrt{\mu(1-\mu)/n}$, which for $n \approx 30$ pulls and
# $\mu \approx 0.75$ is also about $0.08$. A sampler whose evidence never exceeds the
# window therefore keeps drawing the runner-up with a probability that stops falling:
# its regret per pull has a floor. The sampler that keeps every count sees its
# posteriors narrow like $1/\sqrt{n}$ and its regret per pull keeps falling.
#
# **What the run shows.** The windowed sampler's regret per pull over the last 100
# pulls sits well above the full-count sampler's (the ratio is asserted below). At the
# default tier PSBL's late regret per pull, printed beside them, is of the order of the
# windowed sampler's floor, not of the full-count sampler's: late in the horizon, most
# of PSBL's gap to Thompson sampling is the price of its window, not of its network. The solution runs on its
# own tasks from the test prior, 100 at the smoke tier and 300 at the default tier,
# for 300 pulls.
# :::

# %% tags=["solution", "hide-cell"]
def grid_draw(wins, losses, x, gen):
    """One posterior draw per arm on the grid x (as in `thompson`): (n, K)."""
    logp = wins[..., None] * x.log() + losses[..., None] * (1 - x).log()
    cdf = (logp - logp.amax(-1, keepdim=True)).exp().cumsum(-1)
    u = torch.rand(*wins.shape, 1, generator=gen) * cdf[..., -1:]
    return x[torch.searchsorted(cdf, u)[..., 0].clamp(max=len(x) - 1)]


def windowed_thompson(means, L, gen, prior, window):
    """Thompson sampling that keeps only the counts inside W_t (Eq. 6): arms (n, L)."""
    n, x = len(means), prior_grid(prior, 4 * GRID)
    arms, rewards = torch.zeros(n, L, dtype=torch.long), torch.zeros(n, L)
    for t in range(L):
        lo = window_start(t, window)
        seen = F.one_hot(arms[:, lo:t], K).float()
        wins = (seen * rewards[:, lo:t, None]).sum(1)
        a = grid_draw(wins, seen.sum(1) - wins, x, gen).argmax(1)
        arms[:, t], rewards[:, t] = a, pull(means, a, gen)
    return arms


# %% tags=["solution", "hide-cell"]
S_FLOOR = 2.0  # a floor: windowed late regret per pull >= twice the full-count one's
n_ex = run.pick(smoke=dict(n=100), default=dict(n=300)).n  # tasks
L_ex, m = 300, 100
ex_gen = run.generator("exercise 1")
ex_means = sample_tasks(n_ex, test_prior, ex_gen)
late = {"Thompson, window": regret_curve(ex_means, windowed_thompson(
            ex_means, L_ex, ex_gen, test_prior, window)),
        "Thompson, all pulls": regret_curve(ex_means, thompson(
            ex_means, L_ex, ex_gen, test_prior))}
late = {k: (c[-1] - c[-m - 1]) / m for k, c in late.items()}
psbl_curve, m_run = curves["PSBL (sample, window)"], min(m, L - H)  # L: the main run's
late["PSBL (main run)"] = (psbl_curve[-1] - psbl_curve[-m_run - 1]) / m_run
for k, v in late.items():
    print(f"{k:<20} regret per pull over the last {m} pulls: {v:.4f}")
icmlbook.solution_check("windowed / full-count Thompson, late regret per pull",
                        late["Thompson, window"] / late["Thompson, all pulls"], ">=",
                        S_FLOOR)

# %% [markdown] tags=["exercise"]
# **2. Prior mismatch.** Thompson sampling with the *training* prior is what a
# perfectly trained network would do in distribution. Run it on the shifted tasks (its
# grid is $[0, \frac12]$, where no test arm lives). Why does it still learn, and how
# does it compare with PSBL?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 2
# **Derivation.** With the prior uniform on $[0, h]$, $h = \frac12$, arm $a$'s posterior
# density is $p_a(x) \propto x^{s_a}(1-x)^{f_a}$ on $[0, h]$. Its log-derivative at the
# upper end is
#
# $$\frac{d}{dx} \log p_a(x)\Big|_{x = h} = \frac{s_a}{h} - \frac{f_a}{1 - h}
#   = 2\,(s_a - f_a),$$
#
# so when an arm has more successes than failures (as every test arm does on average,
# its mean being above $\frac12$), its posterior piles up against the boundary in a
# layer of width about $1/(2(s_a - f_a))$. A draw is then $h$ minus something of that
# size, and the arm with the largest $s_a - f_a$ tends to win the argmax. Since
# $\mathbb E[s_a - f_a] = n_a(2\mu_a - 1)$, this ranks arms by how good they are times
# how often they were pulled.
#
# **What it shows.** The mismatched sampler learns (its regret is far below random
# pulling, asserted below), because the sign and size of $s_a - f_a$ still carry the
# evidence. But its ranking mixes quality with pull counts, so an arm that got lucky
# early is pulled more and pulls ahead. PSBL was trained to imitate exactly this
# sampler on training histories; on shifted histories it is on its own, and the printed
# regrets compare the two on the solution's tasks (the same as exercise 1's).
# :::

# %% tags=["solution", "hide-cell"]
S_LEARNS = 0.75  # regret / random pulling's: well below 1 means it learns
ts_train = regret_curve(ex_means, thompson(ex_means, L_ex, run.generator("exercise 2"),
                                           TRAIN_PRIOR))[-1]
random_regret = float((ex_means.max(1).values - ex_means.mean(1)).mean()) * L_ex
psbl_ex = regret_curve(ex_means, act_in_context(
    net, ex_means, L_ex, run.generator("exercise 2, PSBL"), window=window,
    temp=temperature)[0])[-1]
print(f"regret after {L_ex} pulls: Thompson with the training prior {ts_train:.1f}, "
      f"PSBL {psbl_ex:.1f}, random pulls {random_regret:.1f}")
icmlbook.solution_check("Thompson with the training prior / random, regret",
                        ts_train / random_regret, "<=", S_LEARNS)

# %% [markdown] tags=["exercise"]
# **3. Temperature.** PSBL samples from $q_\phi^{1/T}$: $T \to 0$ is the greedy agent
# and $T \to \infty$ pulls at random. Sweep $T$ over $\{\frac14, \frac12, 1, 2, 4\}$ on
# shifted tasks of two severities, $s = \frac14$ and $s = \frac12$, for a perfectly
# trained network (the exact PPD of the training prior, Eq. 3, on the window's counts)
# and for ours (or move the widget's temperature slider). Which temperature minimises
# regret, and does it move with the severity?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 3
# **Reasoning.** The network is trained so that $q_\phi$ is the PPD of the training
# prior, so $T = 1$ is Thompson sampling under that prior. $T < 1$ sharpens the PPD
# towards its mode, so the agent commits sooner and explores less; $T > 1$ flattens it
# towards uniform pulls. Committing sooner pays where the PPD can be trusted. Under a
# shift it is the PPD of the wrong prior, and by exercise 2 it ranks arms by
# $s_a - f_a$, which rewards the arms pulled most: an agent that commits early on it
# settles on the wrong arm, as the greedy agent does. The stronger the shift, the less
# the PPD can be trusted, so the best temperature should not be the coldest, and
# the cold end should cost more as the shift grows.
#
# **What the run shows.** The tables give each setting's regret as a fraction of random
# pulling's on the same tasks, and the best temperature for each severity. For the exact
# PPD under the strict shift ($s = \frac12$), a middle temperature beats both extremes
# (asserted below). What moves with the severity is the price of the cold end: under
# the milder shift the coldest temperature comes close to the best, under the strict
# shift it loses clearly, so the stronger the shift, the more exploration pays. At the
# default tier our network's table shows the same pattern, and shows that the network
# falls short of the PPD it was trained to imitate once the histories are shifted:
# compare the two tables row by row. (At the smoke tier the network is barely trained
# and its table is close to random pulling.) The solution plays 300 pulls on its own
# tasks, per setting 40 at the smoke tier and 100 at the default tier, all ten settings
# in one batch.
# :::

# %% tags=["solution", "hide-cell"]
def exact_psbl(means, L, gen, window, temp):
    """A perfect network: sample from the exact PPD (Eq. 3) of the training prior on
    W_t's counts, raised to 1 / temp (Eq. 6): arms (n, L)."""
    n = len(means)
    arms, rewards = torch.zeros(n, L, dtype=torch.long), torch.zeros(n, L)
    for t in range(L):
        lo = window_start(t, window)
        seen = F.one_hot(arms[:, lo:t], K).float()
        wins = (seen * rewards[:, lo:t, None]).sum(1)
        q = exact_ppd(wins, seen.sum(1) - wins, train_tables).clamp_min(1e-30)
        a = torch.multinomial(q ** (1 / temp), 1, generator=gen)[:, 0]
        arms[:, t], rewards[:, t] = a, pull(means, a, gen)
    return arms


# %% tags=["solution", "hide-cell"]
S_INTERIOR = 0.9  # exact PPD, strict shift: a middle T a tenth below both extremes
temps, severities = (0.25, 0.5, 1.0, 2.0, 4.0), (0.25, 0.5)
n_t = run.pick(smoke=dict(n=40), default=dict(n=100)).n  # tasks per setting
ex3_gen = run.generator("exercise 3")
tasks = {s: sample_tasks(n_t, (s, s + 0.5), ex3_gen) for s in severities}
means = torch.cat([tasks[s] for s in severities for _ in temps])
temp = torch.tensor([T for _ in severities for T in temps]).repeat_interleave(n_t)
temp = temp[:, None]
random_by_s = torch.stack([(tasks[s].max(1).values - tasks[s].mean(1)).mean() * L_ex
                           for s in severities])
tables = {}
players = {"exact PPD": lambda: exact_psbl(means, L_ex, ex3_gen, window, temp),
           "our network": lambda: act_in_context(net, means, L_ex, ex3_gen,
                                                 window=window, temp=temp)[0]}
for who, play_ex3 in players.items():
    gap = means.max(1).values[:, None] - means.gather(1, play_ex3())
    tables[who] = gap.sum(1).view(len(severities), len(temps), n_t).mean(-1)
    print(f"{who}: regret after {L_ex} pulls, as a fraction of random pulling's")
    print("  T:      " + "".join(f"{T:>7g}" for T in temps))
    for s, row, rnd in zip(severities, tables[who], random_by_s):
        print(f"  s = {s:<4g}" + "".join(f"{v / rnd:>7.3f}" for v in row)
              + f"   best T = {temps[int(row.argmin())]:g}")
strict = tables["exact PPD"][-1]  # s = 1/2
middle_vs_extremes = strict[1:-1].min() / torch.minimum(strict[0], strict[-1])
icmlbook.solution_check("exact PPD, strict shift: best middle T / better extreme T",
                        float(middle_vs_extremes), "<=", S_INTERIOR)

# %% [markdown]
# ## References
#
# - T. Xu, Z. Li, Q. Ren. Meta-Reinforcement Learning Robust to Distributional Shift Via
#   Performing Lifelong In-Context Learning. ICML 2024.
# - D. Russo, B. Van Roy, A. Kazerouni, I. Osband, Z. Wen. A Tutorial on Thompson
#   Sampling. Foundations and Trends in Machine Learning, 2018.
# - J. N. Lee, A. Xie, A. Pacchiano, Y. Chandak, C. Finn, O. Nachum, E. Brunskill.
#   Supervised Pretraining Can Learn In-Context Reinforcement Learning (DPT). NeurIPS
#   2023.
# - P. Auer, N. Cesa-Bianchi, P. Fischer. Finite-time Analysis of the Multiarmed Bandit
#   Problem. Machine Learning, 2002.

# %% tags=["remove-cell"]
run.finish();
