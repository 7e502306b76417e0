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
# # Adaptive conformal inference by betting
#
# **Paper.** Aleksandr Podkopaev, Dong Xu, Kuang-chih Lee. *Adaptive Conformal Inference
# by Betting.* ICML 2024, PMLR 235:40886–40907.
# [OpenReview](https://openreview.net/forum?id=lwWV4Zl3h1) ·
# [arXiv:2412.19318](https://arxiv.org/abs/2412.19318). No official code was released;
# everything below is written from the paper's description and the coin-betting
# literature it builds on.
#
# **The problem.** A forecaster runs online on a stream whose distribution shifts. At
# every step we want a prediction *interval* that, in the long run, misses the truth
# a fraction $\alpha$ of the time, whatever the stream does. Adaptive conformal
# inference (ACI) does this by online gradient descent on the interval's radius, but
# its learning rate must match the scale of the scores: too small and the radius cannot
# keep up, too large and the intervals jump around.
#
# **The idea.** Treat the radius as a *bet*. A parameter-free online learner from the
# coin-betting literature (Krichevsky–Trofimov, KT) picks the radius as a fraction of
# its current "wealth"; misses pay, covers cost. There is no learning rate and the
# scale of the scores need not be known.
#
# **The claim.** In the paper's words: "We prove that our method controls long-term
# miscoverage frequency at a nominal level and demonstrate its convincing empirical
# performance without any need of performing cumbersome parameter tuning" (abstract).
# Two headlines, then: long-run miscoverage converges to $\alpha$ with no learning
# rate, and the intervals are about as narrow as those of tuned methods, with no
# tuning. We test both on a shifting AR(1) stream at three score scales spanning four
# decades. Against the method's own ablation: the same pinball-loss gradients with a
# learning rate in place of the bet (ACI), given the *one* rate that does best over all
# scales, chosen in hindsight. Against the strongest fair baselines: scale-free OGD
# (SF-OGD), which is told the score bound from a calibration set, and ACI with its
# rate tuned per stream on the test data. Widths are compared at matched coverage, so
# a method cannot look narrow by missing more often. The paper's verdict, graded from
# these claims by a fixed rule, is printed with the claims below. What this book adds
# or changes: one synthetic stream family instead of the paper's stock prices, the
# coverage-matched width, and the one-rate-for-all-scales ablation.

# %% tags=["parameters"]
tier = "default"  # smoke | default | full: size of the experiment
seed = 0  # drives every random number in the chapter
# target miscoverage of the showcase stream (the claims sweep 0.05, 0.1, 0.2)
alpha = 0.1
initial_wealth = 1.0  # KT's starting wealth epsilon, in units of the scores
window = 500  # length of the window for local (rolling) coverage

# %% tags=["validate"]
from icmlbook import check_int, check_range, check_seed, check_tier

check_tier(tier)
check_seed(seed)
check_range("alpha", alpha, 0.0, 0.5, lo_open=True)
check_range("initial_wealth", initial_wealth, 0.0, 1e6, lo_open=True)
check_int("window", window, 20, 2000)

# %% [markdown]
# ## Setup
#
# The whole chapter is sequential scalar arithmetic (one radius per step, no gradients
# through networks), so it is written in NumPy; nothing here needs PyTorch. The tier
# sets the length of the streams and the baseline's tuning grid.

# %%
import numpy as np
import matplotlib.pyplot as plt
import icmlbook

run = icmlbook.start(
    "05_conformal_betting",
    tier=tier,
    seed=seed,
    torch=False,
    params=dict(alpha=alpha, initial_wealth=initial_wealth, window=window),
)
icmlbook.use_style()
cfg = run.pick(
    smoke=dict(T=3000, sweep_reps=2, rate_T=5000, rate_reps=2, widget_T=800,
               eta_grid=9),
    default=dict(T=6000, sweep_reps=8, rate_T=50000, rate_reps=8, widget_T=2000,
                 eta_grid=17),
    full=dict(T=20000, sweep_reps=16, rate_T=200000, rate_reps=20, widget_T=4000,
              eta_grid=33),
)
ALPHAS = (0.05, 0.1, 0.2)  # miscoverage levels of the claim sweep
SCALES = (0.01, 1.0, 100.0)  # score-scale multipliers of the claim sweep
SIGMAS = (1.0, 5.0, 0.5)  # noise level of the three segments (two changepoints)
# a learning rate counts as valid when its long-run gap is at most this
TUNE_TOL = 0.015
# one colour and line style per method, for every figure of the chapter
STYLE = icmlbook.method_styles("KT", "ONS", "OGD", "SF-OGD")
COLOURS = {name: style["color"] for name, style in STYLE.items()}
print(
    f"tier {tier}: T = {cfg.T} steps per stream, {len(ALPHAS) * len(SCALES)} "
    f"configurations x {cfg.sweep_reps} streams in the sweep, OGD grid of "
    f"{cfg.eta_grid} learning rates"
)

# %% [markdown]
# ## The idea in math
#
# At time $t$ the forecaster has a conformity score $S(X_t, y)$, for regression
# $S = |y - \hat f_t(X_t)|$, and outputs the set of all $y$ whose score is at most a
# radius $s_t$:
#
# $$\hat C_t(s_t) = \{\, y : S(X_t, y) \le s_t \,\}, \qquad
#   \mathrm{err}_t = \mathbf 1\{S_t > s_t\}. \tag{1}$$
#
# The radius must be fixed **before** $S_t = S(X_t, Y_t)$ is revealed. Choosing $s_t$
# is online quantile estimation: the $(1-\alpha)$-quantile minimises the pinball loss
#
# $$\ell_t(s) = (1-\alpha)\,(S_t - s)_+ + \alpha\,(s - S_t)_+, \qquad
#   g_t = \partial_s \ell_t(s_t) = \alpha - \mathrm{err}_t. \tag{2}$$
#
# **ACI as online gradient descent.** The classical learner steps against the gradient,
#
# $$s_{t+1} = s_t - \eta\, g_t = s_t + \eta\,(\mathrm{err}_t - \alpha). \tag{3}$$
#
# Summing (3) over $t$ gives a deterministic guarantee: $\sum_t(\mathrm{err}_t - \alpha) =
# (s_{T+1} - s_1)/\eta$, so $|\overline{\mathrm{err}}_T - \alpha| \le (\max_t |s_t| +
# \eta)/(\eta T)$. The bound is only useful when $\eta$ is of the order of the scores:
# at score scale 100 and $\eta = 0.1$ it needs $T$ in the hundreds of thousands.
#
# **Betting instead.** Coin betting turns the same gradients into a parameter-free
# learner. The "coin" is the negative gradient,
#
# $$c_t = -g_t = \mathrm{err}_t - \alpha \in [-\alpha,\, 1-\alpha] \subset [-1, 1], \tag{4}$$
#
# and the radius is a signed bet: a fraction $\beta_t$ of the current wealth $W_{t-1}$,
#
# $$s_t = \beta_t\, W_{t-1}, \qquad W_t = W_{t-1} + c_t\, s_t
#   = \varepsilon + \sum_{i \le t} c_i\, s_i, \qquad W_0 = \varepsilon. \tag{5}$$
#
# The Krichevsky–Trofimov bettor uses the running mean of past coins,
#
# $$\beta_t = \frac{1}{t}\sum_{i<t} c_i . \tag{6}$$
#
# Dividing by $t$ (not $t-1$) keeps $|\beta_t| < 1$, so $W_t = W_{t-1}(1 + c_t\beta_t) > 0$:
# the bettor never goes bankrupt. A negative radius is allowed: it is the empty set,
# a deliberate miss that "sells" coverage when the bettor has covered too often.
#
# **Why coverage follows** (our derivation from the KT regret bound; the paper proves
# the statement, we reconstruct the argument). The KT bettor guarantees a wealth
# exponential in the squared sum of coins, $\ln W_T \ge \ln\varepsilon + \frac{(\sum_t
# c_t)^2}{2T} - \tfrac12\ln T - O(1)$. On the other hand, if scores lie in $[0, D]$, a
# bet only gains when $0 \le s_t \le D$ and a miss happens, so $W_T \le \varepsilon +
# (1-\alpha) D\, T$. Together these force $|\sum_t c_t| = O(\sqrt{T \log T})$, and since
# $\frac1T\sum_t c_t = \overline{\mathrm{err}}_T - \alpha$:
#
# $$\Big|\frac1T\sum_{t\le T}\mathrm{err}_t - \alpha\Big| = O\Big(\sqrt{\tfrac{\log T}{T}}\Big)
#   \xrightarrow[T\to\infty]{} 0, \tag{7}$$
#
# with no learning rate and no knowledge of $D$. The scale of the scores enters only
# through $\ln(D T/\varepsilon)$: a wrong guess of $\varepsilon$ costs a logarithm.
#
# The paper also uses a second bettor, Cutkosky and Orabona's reduction with an Online
# Newton Step (ONS) on the betting fraction. With $z_t = -c_t/(1 + c_t v_t)$, the
# derivative of $-\ln(1 + c_t v)$ at the current fraction $v_t$:
#
# $$s_t = v_t W_{t-1}, \quad A_t = 1 + \sum_{i\le t} z_i^2, \quad
#   v_{t+1} = \Pi_{[-\frac12, \frac12]}\Big(v_t - \frac{2}{2-\ln 3}\,\frac{z_t}{A_t}\Big). \tag{8}$$

# %% [markdown]
# ## From scratch
#
# Every learner takes the whole score stream `scores` (shape `(T,)`, or `(T, B)` to run
# `B` independent streams at once) and returns the radius it *would have* played at
# each step. Each step computes $s_t$ from the past only, then looks at `scores[t]`.
#
# ### The KT bettor (Eqs. 4–6)

# %%
def kt_aci(scores, alpha, eps=1.0):
    """KT-ACI: radii s_t and wealth W_t (W_0 = eps) of the Krichevsky-Trofimov bettor.
    """
    scores = np.asarray(scores, dtype=float)
    T = len(scores)
    radius = np.empty_like(scores)
    wealth = np.empty((T + 1, *scores.shape[1:]))
    wealth[0] = eps
    coin_sum = np.zeros(scores.shape[1:])
    for t in range(T):  # t is 0-based: the step number of the paper is t + 1
        # Eq. 6: mean of the past coins, divided by the step number
        beta = coin_sum / (t + 1)
        radius[t] = beta * wealth[t]  # Eq. 5: the bet, fixed before scores[t] is seen
        coin = (scores[t] > radius[t]) - alpha  # Eqs. 1 and 4: c_t = err_t - alpha
        wealth[t + 1] = wealth[t] + coin * radius[t]  # Eq. 5: wealth update
        coin_sum = coin_sum + coin
    return radius, wealth


# %% [markdown]
# Two closed forms pin the implementation down. With every coin equal to 1, Eq. 6 gives
# $\beta_t = (t-1)/t$ and the wealth multiplies by $(2t-1)/t$ at each step, so
# $W_T = \varepsilon \binom{2T}{T}/2^T$. And the wealth identity of Eq. 5 must hold
# to rounding. (Both, and more, are unit tests in `tests/test_ch05_conformal_betting.py`.)

# %%
from math import comb

T_check = 30
# every step a miss; with alpha = 0 every coin is 1
always_miss = np.full(T_check, np.inf)
print("KT wealth after 30 coins of 1:", kt_aci(always_miss, alpha=0.0, eps=1.0)[1][-1],
      " closed form C(60,30)/2^30:", comb(2 * T_check, T_check) / 2**T_check)

# %% [markdown]
# ### The ONS bettor (Eq. 8)

# %%
ONS_STEP = 2.0 / (2.0 - np.log(3.0))  # the ONS constant of Cutkosky & Orabona (2018)


def ons_aci(scores, alpha, eps=1.0):
    """ONS-ACI: the betting fraction v_t follows an Online Newton Step on -ln(1 + c v).
    """
    scores = np.asarray(scores, dtype=float)
    T = len(scores)
    radius = np.empty_like(scores)
    wealth = np.empty((T + 1, *scores.shape[1:]))
    wealth[0] = eps
    v = np.zeros(scores.shape[1:])
    A = np.ones(scores.shape[1:])
    for t in range(T):
        radius[t] = v * wealth[t]  # Eq. 8: s_t = v_t W_{t-1}
        coin = (scores[t] > radius[t]) - alpha  # Eq. 4
        wealth[t + 1] = wealth[t] + coin * radius[t]  # Eq. 5
        z = -coin / (1.0 + coin * v)  # gradient of -ln(1 + c v) at v_t
        A = A + z * z
        v = np.clip(v - ONS_STEP * z / A, -0.5, 0.5)  # Eq. 8: projected Newton step
    return radius, wealth


# %% [markdown]
# ### Baselines
#
# **ACI / OGD** (Eq. 3) with a fixed learning rate $\eta$, started at $s_1 = 0$. We run
# it at hand-picked rates and over a grid of rates tuned *on the test stream itself*,
# an oracle no forecaster has; the best valid rate of that grid is the bar the
# parameter-free bettor has to meet.
#
# **Scale-free OGD** (SF-OGD, Bhatnagar et al. 2023) rescales the step by the observed
# gradients: $s_{t+1} = \max\big(0,\ s_t - \frac{D}{\sqrt{\sum_{i\le t} g_i^2}}\,g_t\big)$.
# It still needs the score bound $D$; we give it the largest score of the first 100 steps,
# which a practitioner could have from a calibration set.

# %%
def ogd_aci(scores, alpha, eta, s0=0.0):
    """ACI as online gradient descent on the pinball loss (Eq. 3); eta broadcasts."""
    scores = np.asarray(scores, dtype=float)
    radius = np.empty(np.broadcast_shapes(scores.shape, np.shape(eta)))
    s = np.zeros(radius.shape[1:]) + s0
    for t in range(len(scores)):
        radius[t] = s
        s = s + eta * ((scores[t] > s) - alpha)  # Eq. 3
    return radius


def sf_ogd_aci(scores, alpha, D):
    """Scale-free OGD: step D / sqrt(sum of squared gradients), radius kept >= 0."""
    scores = np.asarray(scores, dtype=float)
    radius = np.empty_like(scores)
    s = np.zeros(scores.shape[1:])
    grad_sq = np.zeros(scores.shape[1:])
    for t in range(len(scores)):
        radius[t] = s
        g = alpha - (scores[t] > s)  # Eq. 2
        grad_sq = grad_sq + g * g
        s = np.maximum(0.0, s - D / np.sqrt(grad_sq) * g)
    return radius


# %% [markdown]
# ### Measuring a learner
#
# Long-run miscoverage $|\overline{\mathrm{err}}_T - \alpha|$ is the paper's guarantee.
# The *width* is the mean radius, with an empty set counted as width 0. We compare it
# with an oracle that knows where the changepoints are and plays, in each segment, the
# empirical $(1-\alpha)$-quantile of that segment's scores. Local coverage over a
# rolling window shows how fast a learner re-adapts after a changepoint.
#
# Widths are only comparable at equal coverage: a learner that misses a little more
# often than $\alpha$ is a little narrower for free. So we compare *excess widths*:
# each learner's mean width divided by the oracle's width at the miscoverage that
# learner actually reached,
#
# $$\mathrm{excess} = \frac{\overline{s^+}}{\overline{q}_{1-\widehat{\mathrm{err}}}},
#   \qquad \widehat{\mathrm{err}} = \frac1T\sum_t \mathrm{err}_t . \tag{9}$$

# %%
def miscoverage_gap(scores, radius, alpha):
    """|mean err - alpha| per stream (Eq. 7's left-hand side)."""
    return np.abs(np.mean(scores > radius, axis=0) - alpha)


def mean_width(radius):
    """Mean radius, an empty set (negative radius) counting as 0."""
    return np.mean(np.maximum(radius, 0.0), axis=0)


def oracle_width(scores, segments, alpha):
    """Mean of the per-segment empirical (1 - alpha)-quantiles (knows the changepoints).

    ``scores`` is one stream (T,) with a scalar alpha, or (T, B) with B alphas."""
    if np.ndim(scores) == 2:
        return np.array(
            [
                oracle_width(scores[:, b], segments, a)
                for b, a in enumerate(np.broadcast_to(alpha, scores.shape[1:]))
            ]
        )
    q = np.empty_like(scores)
    for k in np.unique(segments):
        q[segments == k] = np.quantile(scores[segments == k], 1 - alpha)
    return q.mean()


def excess_width(scores, segments, radius):
    """Eq. 9: mean width over the oracle's width at the learner's own miscoverage."""
    reached = np.mean(scores > radius, axis=0)
    return mean_width(radius) / oracle_width(scores, segments, reached)


def rolling_coverage(scores, radius, w):
    """Coverage 1 - err averaged over a sliding window of w steps (1-D stream)."""
    covered = (scores <= radius).astype(float)
    return np.convolve(covered, np.ones(w) / w, mode="valid")


# %% [markdown]
# ## The experiment
#
# **Data.** An AR(1) process $y_{t+1} = 0.8\,y_t + \sigma_t\varepsilon_t$ with two
# changepoints in the noise level, $\sigma = 1 \to 5 \to 0.5$ in three equal segments.
# The forecaster is deliberately naive, $\hat y_{t+1} = y_t$, and the score is its
# absolute error. The same stream is multiplied by 0.01, 1 and 100 to test the
# methods' dependence on the scale of the scores (units of the target, in practice).

# %%
def ar1_changepoint_scores(T, rng, sigmas=SIGMAS, phi=0.8):
    """Scores |y_{t+1} - y_t| of the naive forecaster and the segment index of each
    step."""
    segments = np.minimum(np.arange(T) * len(sigmas) // T, len(sigmas) - 1)
    noise = np.asarray(sigmas, dtype=float)[segments] * rng.standard_normal(T)
    y = np.zeros(T + 1)
    for t in range(T):
        y[t + 1] = phi * y[t] + noise[t]
    return np.abs(y[1:] - y[:-1]), segments


# the showcase stream, drawn from the run's named stream "showcase"
base_scores, segments = ar1_changepoint_scores(cfg.T, run.rng("showcase"))

fig, ax = plt.subplots(figsize=(7, 2.4))
ax.plot(base_scores, lw=0.5, color="0.5")
for k in range(1, len(SIGMAS)):
    ax.axvline(k * cfg.T / len(SIGMAS), color="k", ls=":", lw=1)
ax.set(xlabel="t", ylabel="score $S_t$", title="Scores of the naive forecaster "
       r"(scale 1; $\sigma$ = 1, 5, 0.5)")
plt.show()

# %% [markdown]
# ### One stream, four learners
#
# First the showcase stream at scale 1 with the chapter's `alpha`. KT and ONS are the
# paper's two bettors; OGD gets $\eta = 1$, a sensible rate *at this scale*; SF-OGD
# gets the score bound of the first 100 steps; the bettors get nothing but
# $\varepsilon$. Colours are fixed for the chapter: KT blue, ONS red, OGD teal,
# SF-OGD amber.

# %%
D_calib = base_scores[:100].max()
showcase = {
    "KT": kt_aci(base_scores, alpha, initial_wealth)[0],
    "ONS": ons_aci(base_scores, alpha, initial_wealth)[0],
    "OGD": ogd_aci(base_scores, alpha, 1.0),
    "SF-OGD": sf_ogd_aci(base_scores, alpha, D_calib),
}
kt_wealth = kt_aci(base_scores, alpha, initial_wealth)[1]
oracle = oracle_width(base_scores, segments, alpha)
print(f"alpha = {alpha}, oracle mean width {oracle:.3f}")
for name, r in showcase.items():
    print(
        f"{name:<14} miscoverage {np.mean(base_scores > r):.4f}  width / oracle "
        f"{mean_width(r) / oracle:.3f}"
    )

# %% tags=["hide-input"]
fig, axes = plt.subplots(3, 1, figsize=(7, 6.4), sharex=True)
axes[0].plot(base_scores, lw=0.4, color="0.7", label="score $S_t$")
for name, r in reversed(list(showcase.items())):
    axes[0].plot(r, lw=1, label=name, color=COLOURS[name], zorder=3 + (name == "KT"))
axes[0].set(ylabel="radius $s_t$", ylim=(0, np.quantile(base_scores, 0.995) * 1.3))
axes[0].legend(ncol=5, loc="upper left")
t_roll = np.arange(window - 1, cfg.T)
for name, r in reversed(list(showcase.items())):
    axes[1].plot(
        t_roll, rolling_coverage(base_scores, r, window), lw=1, color=COLOURS[name]
    )
axes[1].axhline(1 - alpha, color="k", ls="--", lw=1)
axes[1].set(ylabel=f"coverage\n(window {window})")
axes[2].semilogy(kt_wealth, color=COLOURS["KT"])
axes[2].set(xlabel="t", ylabel="KT wealth $W_t$")
for ax in axes:
    for k in range(1, len(SIGMAS)):
        ax.axvline(k * cfg.T / len(SIGMAS), color="k", ls=":", lw=0.8)
plt.show()

# %% [markdown]
# The bettors find the right radius within a few dozen steps and re-adapt at each
# changepoint; the wealth grows while the bettor "wins" (its coins have a consistent
# sign) and stalls once the radius is right. One honest caveat, visible in the middle
# panel: the KT fraction is a mean over **all** past coins, so late in a long stream it
# reacts slowly and local coverage drifts for a while after a changepoint. ONS adapts
# faster. The paper's guarantee, and our claims, are about long-run coverage.

# %%
local_dev = {
    name: float(np.max(np.abs(rolling_coverage(base_scores, r, window) - (1 - alpha))))
    for name, r in showcase.items()
}
for name, d in local_dev.items():
    print(f"{name:<14} worst local coverage deviation (window {window}): {d:.3f}")
run.metric("local_coverage_deviation", local_dev);

# %% [markdown]
# ### The rate of Eq. 7
#
# Eq. 7 promises that the long-run gap shrinks like $\sqrt{\log T / T}$. We run KT on
# several independent streams of length `rate_T` (same changepoint pattern, stretched)
# and follow the running gap $|\frac1t\sum_{i\le t}\mathrm{err}_i - \alpha|$ over time.
# Eq. 7 is an upper bound: a log-log slope of $-\tfrac12$ or steeper is consistent
# with it. Each changepoint leaves a visible kink (a burst of misses when the noise
# jumps up, of over-coverage when it drops), which the running mean then dilutes.

# %%
rate_rng = run.rng("rate streams")  # independent of the showcase stream
rate_scores = np.stack([ar1_changepoint_scores(cfg.rate_T, rate_rng)[0]
                        for _ in range(cfg.rate_reps)], axis=1)  # (rate_T, reps)
rate_r = kt_aci(rate_scores, alpha, initial_wealth)[0]
t_axis = np.arange(1, cfg.rate_T + 1)
running_gap = np.abs(np.cumsum(rate_scores > rate_r, axis=0) / t_axis[:, None] - alpha)
mean_gap = running_gap.mean(axis=1)
late = t_axis >= cfg.rate_T // 100  # fit the slope past the first percent of the stream
slope = np.polyfit(np.log(t_axis[late]), np.log(mean_gap[late]), 1)[0]

fig, ax = plt.subplots(figsize=(5, 3))
ax.loglog(t_axis, running_gap, lw=0.3, color="0.75")
ax.loglog(
    t_axis, mean_gap, color=COLOURS["KT"], label=f"KT, mean of {cfg.rate_reps} streams"
)
ref = np.sqrt(np.log(t_axis + 1) / t_axis)
anchor = cfg.rate_T // 100
ax.loglog(t_axis, ref * mean_gap[anchor] / ref[anchor], "k--", lw=1,
          label=r"$\propto\sqrt{\log T / T}$")
ax.set(xlabel="T", ylabel=r"$|\overline{\mathrm{err}}_T - \alpha|$", ylim=(1e-4, 1))
ax.legend()
plt.show()
print(
    f"fitted log-log slope of the mean gap over t >= {cfg.rate_T // 100}: {slope:.2f} "
    f"(Eq. 7: about -0.5)"
)
run.metric("rate_slope", float(slope));

# %% [markdown]
# ### The sweep: three scales and three miscoverage levels
#
# Now every combination of score scale $\{0.01, 1, 100\}$ and $\alpha \in \{0.05, 0.1,
# 0.2\}$: nine configurations, each run on `sweep_reps` independent streams (the
# showcase stream and fresh ones), all side by side (the learners broadcast over the
# last axis). The bettors keep $\varepsilon = 1$ at every scale: no tuning. SF-OGD
# gets each stream's score bound from its first 100 steps. OGD is run over a grid of
# learning rates spanning four decades around each scale, and on each stream the
# valid rate (gap at most `TUNE_TOL`) with the smallest excess width is kept: tuned on
# the test stream itself, a bar no forecaster could set in advance. Widths are
# compared per configuration, averaged over its streams, so that one lucky or unlucky
# stream does not decide a comparison.

# %%
N_CONF = len(SCALES) * len(ALPHAS)  # nine configurations
extra_rng = run.rng("sweep streams")  # the streams beyond the showcase one
streams = np.stack([base_scores] + [ar1_changepoint_scores(cfg.T, extra_rng)[0]
                                    for _ in range(cfg.sweep_reps - 1)], axis=1)
# column b = rep * 9 + configuration: scale scale_col[b], level alpha_col[b]
scale_col = np.tile(np.repeat(SCALES, len(ALPHAS)), cfg.sweep_reps)
alpha_col = np.tile(ALPHAS, len(SCALES) * cfg.sweep_reps)
sweep_scores = np.repeat(streams, N_CONF, axis=1) * scale_col  # (T, 9 reps)

sweep_r = {
    "KT": kt_aci(sweep_scores, alpha_col, initial_wealth)[0],
    "ONS": ons_aci(sweep_scores, alpha_col, initial_wealth)[0],
    "SF-OGD": sf_ogd_aci(sweep_scores, alpha_col, sweep_scores[:100].max(axis=0)),
}
gap = {k: miscoverage_gap(sweep_scores, r, alpha_col) for k, r in sweep_r.items()}
excess = {k: excess_width(sweep_scores, segments, r) for k, r in sweep_r.items()}

eta_rel = np.logspace(-3, 1, cfg.eta_grid)  # learning rates, relative to the scale
grid_gap, grid_excess = [], []
for e in eta_rel:  # one rate (relative to each stream's scale) at a time
    r = ogd_aci(sweep_scores, alpha_col, e * scale_col)
    grid_gap.append(miscoverage_gap(sweep_scores, r, alpha_col))
    grid_excess.append(excess_width(sweep_scores, segments, r))
grid_gap, grid_excess = np.array(grid_gap), np.array(grid_excess)  # (grid, 9 reps)
excess["OGD, tuned per stream"] = np.where(
    grid_gap <= TUNE_TOL, grid_excess, np.inf
).min(axis=0)


def per_conf(x):
    """Mean over the streams of each of the nine configurations."""
    return x.reshape(cfg.sweep_reps, N_CONF).mean(axis=0)


print(
    f"mean over {cfg.sweep_reps} streams per row\n{'scale':>6} {'alpha':>5} | "
    f"{'gap KT':>7} {'gap ONS':>7} {'gap SF':>7} | excess width: {'KT':>6} {'ONS':>6} "
    f"{'SF-OGD':>6} {'OGD tuned':>9}"
)
conf_gap = {k: per_conf(v) for k, v in gap.items()}
conf_excess = {k: per_conf(v) for k, v in excess.items()}
for b in range(N_CONF):
    print(
        f"{scale_col[b]:>6g} {alpha_col[b]:>5g} | {conf_gap['KT'][b]:>7.4f} "
        f"{conf_gap['ONS'][b]:>7.4f} {conf_gap['SF-OGD'][b]:>7.4f} | {'':>13} "
        f"{conf_excess['KT'][b]:>6.3f} {conf_excess['ONS'][b]:>6.3f} "
        f"{conf_excess['SF-OGD'][b]:>6.3f} "
        f"{conf_excess['OGD, tuned per stream'][b]:>9.3f}"
    )
kt_vs_sf = float(np.max(conf_excess["KT"] / conf_excess["SF-OGD"]))
kt_vs_tuned = float(np.max(conf_excess["KT"] / conf_excess["OGD, tuned per stream"]))
print(
    f"worst configuration: KT's excess width is {kt_vs_sf:.3f} x SF-OGD's and "
    f"{kt_vs_tuned:.3f} x tuned OGD's; worst gap over all {len(scale_col)} streams: "
    f"KT {gap['KT'].max():.4f}, SF-OGD {gap['SF-OGD'].max():.4f}"
)

# %% [markdown]
# Two things to read off the table. KT's excess width matches SF-OGD's, which was told
# the scores' range, and is a few per cent above OGD tuned on the test stream. And
# SF-OGD lands closer to $\alpha$ than KT: KT's long-run gap is the price of knowing
# nothing about the scale, and it shrinks as $O(\sqrt{\log T / T})$ (Eq. 7, measured
# above). Both are recorded below, the second as a finding.
#
# ### The ablation: a learning rate instead of a bet
#
# The bet is the paper's key ingredient: KT and OGD see exactly the same gradients
# $g_t = \alpha - \mathrm{err}_t$, and KT replaces OGD's learning rate by a fraction of
# its wealth. Remove the bet and a learning rate must be chosen. To be fair to OGD, we
# choose for it, in hindsight, the *one* absolute rate that does best on all the
# sweep's streams at once: among the rates that keep every stream valid, the one
# whose worst width, relative to KT's, is smallest. A practitioner who does not know
# the units of their scores can do no better than this rate, and usually worse.

# %%
def best_single_rate(scores, alphas, etas, reference_width, tol):
    """The one rate valid on every stream with the smallest worst width / reference."""
    best_eta, best_ratio = None, np.inf
    for eta in etas:
        r = ogd_aci(scores, alphas, eta)
        if np.all(miscoverage_gap(scores, r, alphas) <= tol):
            ratio = np.max(mean_width(r) / reference_width)
            if ratio < best_ratio:
                best_eta, best_ratio = float(eta), float(ratio)
    return best_eta, best_ratio


eta_abs = np.logspace(-3, 3, 4 * 6 + 1)  # absolute rates, 1e-3 .. 1e3
one_eta, one_rate_ratio = best_single_rate(sweep_scores, alpha_col, eta_abs,
                                           mean_width(sweep_r["KT"]), TUNE_TOL)
print(
    f"best single learning rate for all {len(scale_col)} streams: eta = {one_eta:.3g}; "
    f"its widest stream is {one_rate_ratio:.1f} x KT's width"
)

# %% [markdown]
# ### What one learning rate does at three scales
#
# The same stream at the three scales (at $\alpha = 0.1$), OGD with $\eta \in \{0.1, 1\}$
# and with the best single rate found above, next to KT. At scale 100 a step of 0.1
# barely moves a radius that must reach hundreds: the deterministic bound under Eq. 3
# is vacuous and coverage collapses for a long time. At scale 0.01 a step of 1 is a
# hundred times the scores: coverage holds, because the radius jumps far above every
# score, but the interval is uselessly wide. The best single rate must keep scale 100
# valid, so it is large, and it pays at scale 0.01.

# %%
def moving_mean(x, w=100):
    """Mean over a sliding window of w steps (for display: OGD's radius oscillates)."""
    return np.convolve(x, np.ones(w) / w, mode="valid")


fragility = {}
ogd_styles = {0.1: ":", 1.0: "-", one_eta: "--"}
fig, axes = plt.subplots(1, 3, figsize=(7.5, 2.6), sharey=True)
for ax, scale in zip(axes, SCALES):
    sc = base_scores * scale
    kt_s = kt_aci(sc, 0.1, initial_wealth)[0]
    ax.plot(moving_mean(sc) / scale, lw=0.8, color="0.6", label="score")
    for eta, ls in ogd_styles.items():
        r = ogd_aci(sc, 0.1, eta)
        fragility[(scale, eta)] = (float(miscoverage_gap(sc, r, 0.1)),
                                   float(mean_width(r) / mean_width(kt_s)))
        ax.plot(
            moving_mean(np.maximum(r, 0)) / scale,
            lw=1,
            color=COLOURS["OGD"],
            ls=ls,
            label=f"OGD $\\eta$={eta:.3g}",
        )
    ax.plot(
        moving_mean(np.maximum(kt_s, 0)) / scale,
        lw=1.2,
        color=COLOURS["KT"],
        label="KT",
        zorder=4,
    )
    ax.set(title=f"scale {scale:g}", xlabel="t", yscale="log", ylim=(0.05, 3000))
axes[0].set_ylabel("radius / scale\n(100-step mean)")
axes[0].legend(loc="upper left", ncol=2, fontsize=7)
plt.show()
for (scale, eta), (g, ratio) in fragility.items():
    print(
        f"scale {scale:>6g}, OGD eta {eta:>6.3g}: miscoverage gap {g:.3f}, mean width "
        f"{ratio:8.2f} x KT's"
    )

# %% [markdown]
# ## Claims
#
# The thresholds below were fixed before the final runs; each line says where its
# number comes from. Paper claims first (what the paper says the method does, each
# against its ablation or the strongest fair baseline), then checks (what must hold
# if the code is right, but is no evidence for the paper). Each paper claim also says
# how strong it is: the two width claims are *non-inferiority* claims (KT no more than
# a few per cent wider), and whether KT is also strictly narrower is recorded beside
# them. Changed after a failure: an earlier version tested OGD at two fixed rates, one
# of which stopped failing at the full tier, so OGD now gets its best single rate in
# hindsight; the same revision replaced raw widths (which flattered KT, as it misses
# slightly more often than $\alpha$) by widths at matched coverage (Eq. 9).
#
# The two width ratios sit close to 1 by nature: KT against SF-OGD is a tie, KT against
# per-stream tuned OGD a few per cent wider. Their worst configuration is averaged over
# `sweep_reps` streams, which leaves their spread over seeds far below the tolerance;
# what stays close to the bar is a property of the methods, not seed noise (averaging
# more streams does not move it).
#
# Findings are measured and recorded like the claims but never enforced: what the
# paper states and this book does not claim. The paper's verdict is graded from the
# claims and findings by one fixed rule: a headline is *reproduced* only when every
# claim testing it holds at full strength and every finding goes the paper's way.

# %% tags=["thresholds"]
# the paper's verdict follows icmlbook.verdicts' rule, fixed before the final sweep
# |mean err - alpha| on every stream; from a first 5-seed trial (max 0.0103), kept on
# calibration seeds 0-9 (0.0102-0.0107 over 72 streams)
C_GAP = TUNE_TOL
# widest stream of the best single OGD rate / KT; measured 75x (T=6000), 24x (T=20000),
# 77-80x on seeds 0-9; the design (best single rate, not two fixed rates) changed after
# a full-tier failure
C_ONE_RATE = 5.0
# KT's excess width / SF-OGD's, worst configuration (mean of its streams); measured
# 0.99-1.01 on seeds 0-5, 0.988-0.998 on seeds 0-9; non-inferiority, 5 % tolerance
C_VS_SFOGD = 1.05
# KT's excess width / per-stream tuned OGD's, worst configuration (mean of its streams);
# 1.03-1.06 on seeds 0-5, 1.039-1.045 on seeds 0-9; non-inferiority, 10 % tolerance
C_VS_TUNED = 1.10
C_IDENTITY = 1e-9  # relative error of the wealth identity of Eq. 5 (rounding only)
# relative error of W_T = eps C(2T, T) / 2^T for constant coins (rounding only)
C_CLOSED_FORM = 1e-12
# relative change of radius / scale when scores and eps are scaled by 1000
C_EQUIVARIANCE = 1e-9

# %%
run.claim(
    "KT: validity at every scale with one setting",
    gap["KT"].max(),
    "<=",
    C_GAP,
    "With eps = 1 on scores spanning four decades, KT's long-run miscoverage is within "
    "C_GAP of alpha on every stream",
    versus="ablation",
    against="OGD, the same gradients with a learning rate (next claim)",
    strength="superiority",
    provenance="calibrated",
)
run.claim(
    "one OGD rate for all scales: width / KT",
    one_rate_ratio,
    ">=",
    C_ONE_RATE,
    "Without the bet, even the best single learning rate in hindsight that keeps all "
    "scales valid is several times wider than KT somewhere",
    versus="ablation",
    against="OGD with the best single learning rate for all the sweep's streams",
    strength="superiority",
    provenance="changed after failure",
)
run.claim(
    "KT vs SF-OGD: excess width",
    kt_vs_sf,
    "<=",
    C_VS_SFOGD,
    "At matched coverage KT is as narrow as SF-OGD, which is told the score bound",
    versus="baseline",
    against="SF-OGD with D from 100 calibration scores",
    strength="non-inferiority",
    provenance="calibrated",
    strict=1.0,
)
run.claim(
    "KT vs OGD tuned per stream: excess width",
    kt_vs_tuned,
    "<=",
    C_VS_TUNED,
    "At matched coverage KT is nearly as narrow as OGD with its rate tuned on each "
    "test stream",
    versus="baseline",
    against="OGD, rate tuned per stream in hindsight",
    strength="non-inferiority",
    provenance="calibrated",
    strict=1.0,
)

kt_r, kt_w = kt_aci(sweep_scores, alpha_col, initial_wealth)
coins = (sweep_scores > kt_r) - alpha_col
identity_err = np.max(
    np.abs(kt_w[-1] - (initial_wealth + (coins * kt_r).sum(axis=0))) / kt_w[-1]
)
closed = comb(2 * T_check, T_check) / 2**T_check
closed_err = abs(kt_aci(always_miss, alpha=0.0, eps=1.0)[1][-1] - closed) / closed
r_big = kt_aci(1000 * sweep_scores, alpha_col, 1000 * initial_wealth)[0]
equi_err = np.max(np.abs(r_big / 1000 - kt_r)) / np.max(np.abs(kt_r))
run.check("wealth identity (Eq. 5)", identity_err, "<=", C_IDENTITY,
          "W_T = eps + sum_t c_t s_t on every stream of the sweep")
run.check("constant-coin closed form", closed_err, "<=", C_CLOSED_FORM,
          "30 coins of 1 give W = C(60, 30) / 2^30")
run.check("scale equivariance", equi_err, "<=", C_EQUIVARIANCE,
          "scores and eps times 1000 give radii times 1000")

gap_vs_sf = float(gap["KT"].mean() - gap["SF-OGD"].mean())
run.finding(
    "KT vs SF-OGD: long-run gap",
    gap_vs_sf,
    "<=",
    0.0,
    paper="the bettor controls long-term miscoverage with no tuning, read here as: at "
    "least as close to alpha, on average over the sweep's streams, as SF-OGD",
    shows="mean gap of KT minus that of SF-OGD, which is told the score bound",
)
run.headline(
    "long-run validity with no tuning",
    "We prove that our method controls long-term miscoverage frequency at a nominal "
    "level",
    source="Abstract; the paper's coverage theorem",
    claims=["KT: validity at every scale with one setting"],
)
run.headline(
    "as good as tuned OGD, without tuning",
    "[We] demonstrate its convincing empirical performance without any need of "
    "performing cumbersome parameter tuning",
    source="Abstract; experiments",
    claims=["one OGD rate for all scales: width / KT", "KT vs SF-OGD: excess width",
            "KT vs OGD tuned per stream: excess width"],
    findings=["KT vs SF-OGD: long-run gap"],
)
run.metric("kt_gap_per_stream", gap["KT"].round(5))
run.metric("ons_gap_max", float(gap["ONS"].max()))
run.metric("sf_ogd_gap_max", float(gap["SF-OGD"].max()))
run.metric("excess_width", {k: v.round(4) for k, v in excess.items()})
run.metric("best_single_eta", one_eta);

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed. The table and strip plot below read this chapter's results
# file, made by `icmlbook sweep 5 --seeds 0-19 --update-results`: every claim, check
# and finding at the default tier over the calibration seeds 0-9 (on which the
# thresholds were set) and, shown apart, the confirmation seeds 10-19 (run once, after
# the thresholds were frozen), with the number of seeds on which each holds and its
# worst margin (how far inside the threshold the worst seed stayed). The paper's
# verdict over all of them follows.

# %%
across = icmlbook.across_seeds(run)

# %% [markdown]
# ## What a broken bettor does
#
# A claim check is only worth something if a wrong implementation fails it. The most
# common bug is the coin's sign: with $c_t = \alpha - \mathrm{err}_t$ the bettor bets
# *against* coverage, shrinking the interval after every miss. The tests break the
# bettor in other ways too (betting from the initial wealth instead of the current one
# fails claim 1 at scale 100; putting a fixed-rate learner in KT's place fails claims
# 2 and 3) and check that each broken variant fails its claim.

# %%
def kt_aci_wrong_sign(scores, alpha, eps=1.0):
    """KT with the coin's sign flipped: a deliberately broken bettor."""
    radius, wealth, coin_sum = np.empty_like(scores), eps, 0.0
    for t in range(len(scores)):
        radius[t] = coin_sum / (t + 1) * wealth
        coin = alpha - (scores[t] > radius[t])  # wrong sign
        wealth, coin_sum = wealth + coin * radius[t], coin_sum + coin
    return radius


# it bets ever more against itself: the wealth overflows
with np.errstate(over="ignore"):
    broken = kt_aci_wrong_sign(base_scores, 0.1)
print(
    f"sign-flipped KT: miscoverage {np.mean(base_scores > broken):.3f} (target 0.1), "
    f"gap {float(miscoverage_gap(base_scores, broken, 0.1)):.3f}"
)

# %% [markdown]
# ## Explore
#
# Move the target level, the scale of the scores, the severity of the changepoints
# ($\sigma = 1 \to s \to 1/s$), KT's initial wealth and OGD's learning rate. Watch
# three things: OGD's coverage breaking when $\eta$ and the scale disagree, KT
# shrugging off the scale (it only costs a short warm-up, logarithmic in the mismatch
# with $\varepsilon$), and KT's wealth growing while it is still learning the radius.

# %% tags=["hide-input"]
import ipywidgets as W

widget_noise = run.rng("widget").standard_normal(cfg.widget_T)


def widget_scores(severity, scale):
    """Scores of a fixed-noise AR(1) stream with sigma = 1, severity, 1/severity."""
    sig = np.array([1.0, severity, 1.0 / severity])
    seg = np.minimum(np.arange(cfg.widget_T) * 3 // cfg.widget_T, 2)
    y = np.zeros(cfg.widget_T + 1)
    for t in range(cfg.widget_T):
        y[t + 1] = 0.8 * y[t] + sig[seg[t]] * widget_noise[t]
    return scale * np.abs(np.diff(y))


def update(alpha, scale, severity, eps, eta, methods):
    sc = widget_scores(severity, scale)
    learners = {
        "KT": lambda: kt_aci(sc, alpha, eps)[0],
        "ONS": lambda: ons_aci(sc, alpha, eps)[0],
        "OGD": lambda: ogd_aci(sc, alpha, eta),
        "SF-OGD": lambda: sf_ogd_aci(sc, alpha, sc[:100].max()),
    }
    w = min(200, cfg.widget_T // 4)
    fig, axes = plt.subplots(1, 3, figsize=(9, 2.8))
    axes[0].plot(sc, lw=0.3, color="0.7")
    for name in methods:
        r = learners[name]()
        gap = float(miscoverage_gap(sc, r, alpha))
        axes[0].plot(np.clip(r, 0, None), lw=1, label=f"{name} (gap {gap:.3f})")
        axes[1].plot(rolling_coverage(sc, r, w), lw=1)
    axes[0].set_yscale("symlog", linthresh=max(float(np.median(sc)), 1e-12))
    axes[0].set(
        title="radius over scores", xlabel="t", ylim=(0, 3 * max(sc.max(), 1e-12))
    )
    if methods:
        axes[0].legend(loc="upper left")
    axes[1].axhline(1 - alpha, color="k", ls="--", lw=1)
    axes[1].set(title=f"rolling coverage (window {w})", xlabel="t", ylim=(-0.02, 1.02))
    axes[2].semilogy(kt_aci(sc, alpha, eps)[1], color=COLOURS["KT"])
    axes[2].set(title="KT wealth", xlabel="t")
    plt.show()


controls = dict(
    alpha=W.FloatSlider(value=alpha, min=0.01, max=0.5, step=0.01, description="alpha"),
    scale=W.FloatLogSlider(
        value=1.0, base=10, min=-2, max=2, step=0.25, description="scale"
    ),
    severity=W.FloatSlider(
        value=5.0, min=1.0, max=10.0, step=0.5, description="severity"
    ),
    eps=W.FloatLogSlider(
        value=initial_wealth, base=10, min=-3, max=3, step=0.5, description="KT eps"
    ),
    eta=W.FloatLogSlider(
        value=1.0, base=10, min=-3, max=2, step=0.5, description="OGD eta"
    ),
    methods=W.SelectMultiple(
        options=["KT", "ONS", "OGD", "SF-OGD"],
        value=("KT", "OGD"),
        description="methods",
        rows=4,
    ),
)
icmlbook.explore(update, controls, run=run)

# %% [markdown]
# ## Paper vs. this book
#
# | | paper | this book |
# |---|---|---|
# | method | KT and ONS bettors on the pinball loss | both, from scratch (Eqs. 4–8) |
# | guarantee | long-run miscoverage $\to \alpha$ for bounded scores, no learning rate | the long-run gap on every stream of the sweep, four decades of scale, one $\varepsilon$ (first paper claim); its rate, Eq. 7 |
# | the key ingredient | betting instead of a learning rate | against OGD with the best single rate in hindsight (second paper claim) |
# | data | synthetic changepoints, stock prices, multi-step forecasting | synthetic AR(1) streams with two changepoints at three scales |
# | baselines | ACI/OGD, SF-OGD, and other adaptive methods | SF-OGD told the score bound, OGD tuned per stream on the test data |
# | efficiency | widths comparable to those of tuned methods | excess width at matched coverage (Eq. 9) against both baselines (third and fourth paper claims) |
#
# **Paper coverage.** The paper's main results, and where this chapter meets them:
#
# | paper | here |
# |---|---|
# | coverage theorem: long-run miscoverage $\to \alpha$ for bounded scores | tested: "KT: validity at every scale with one setting"; rate, Eq. 7 (reported) |
# | sensitivity of OGD-type methods to the learning rate | tested: "one OGD rate for all scales: width / KT" |
# | synthetic changepoint experiments against tuned baselines | tested: the two excess-width claims and the finding "KT vs SF-OGD: long-run gap" |
# | ONS bettor | reported: showcase, sweep table and widget; no claim |
# | real time series (stock prices) | out of scope: no data download at run time |
# | multi-step-ahead forecasting | exercise 3 only (a learner per horizon), no claim |
# | SAOCP, DtACI baselines | out of scope: not implemented |
#
# **What did not reproduce, or only in a weaker form.** KT's width matches SF-OGD's
# and comes within the tolerance of OGD tuned on each test stream, but it is not
# narrower than the tuned OGD: the two width claims are non-inferiority claims, and
# the strict version against tuned OGD is recorded beside it. SF-OGD, told the range of
# the scores, lands closer to $\alpha$ than KT (the finding "KT vs SF-OGD: long-run
# gap"): KT's advantage is that it needs no such information, not that it is more
# exact. The ablation's design was changed after a failure (see Claims). Hence the
# verdict *partly* for the second headline, while the coverage guarantee reproduces.
#
# Left out: the real stock-price series, the multi-step-ahead experiments (see the
# exercises) and the strongest adaptive baselines (SAOCP, DtACI). We did not retrieve
# the paper's tables, so the comparison is with its claims, not its numbers. The KT
# bettor's slow local adaptation late in a stream is our observation, consistent with
# its running-mean fraction; it does not contradict the paper's long-run guarantee.

# %% [markdown]
# ## Exercises
#
# Each exercise is followed by a worked solution (folded in the HTML book). The
# solutions run on the chapter's showcase stream at the tier's length `cfg.T`, or on
# a fresh stream of that length; they touch none of the results above.

# %% [markdown] tags=["exercise"]
# **1. The off-by-one.** The KT fraction divides by $t$, not $t-1$. For general coins
# in $[-1, 1]$, dividing by $t-1$ lets a run of equal coins reach $|\beta_t| = 1$;
# construct a coin sequence that then bankrupts the bettor. Show that with ACI's coins,
# $c_t \in [-\alpha, 1-\alpha]$, the same bug cannot: each step multiplies the wealth
# by at least $1 - \alpha(1-\alpha) \ge \tfrac34$. Check the bound on the showcase
# stream, and measure how much the bug changes the long-run gap.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 1
# **General coins.** With the divisor $t-1$, $\beta_t = \frac{1}{t-1}\sum_{i<t} c_i$
# is the plain mean of the past coins. After $n$ coins of $+1$ it is exactly 1, the
# bettor stakes its whole wealth, and a coin of $-1$ leaves
# $W = W_{n}(1 + c\,\beta) = W_n(1 - 1) = 0$: bankrupt, forever. Dividing by $t$ gives
# $\beta = n/(n+1) < 1$ instead, and the wealth survives.
#
# **ACI's coins.** Now every coin lies in $[-\alpha, 1-\alpha]$, and so does their
# mean: $-\alpha \le \beta_t \le 1-\alpha$ with either divisor. The wealth factor
# $1 + c_t\beta_t$ is smallest when coin and fraction have opposite signs and the
# largest magnitudes, $c_t\beta_t \ge -\alpha(1-\alpha)$, so
# $$W_t \ge W_{t-1}\,\big(1 - \alpha(1-\alpha)\big) \ge \tfrac34\, W_{t-1},$$
# since $\alpha(1-\alpha) \le \tfrac14$. The bound holds for every $\alpha$, also
# $\alpha \to 0$, where the coins can no longer be negative at all. The bug is harmless
# here because ACI's coins are lopsided: a bettor can never be all-in against a coin
# of the opposite sign and full size.
#
# The code below replays both coin sequences, then runs the buggy bettor on the
# showcase stream: its worst step factor sits on the bound (a cover right after a
# miss), and its long-run gap is indistinguishable from the correct bettor's.
# :::

# %% tags=["solution", "hide-cell"]
def kt_wealth_from_coins(coins, eps=1.0, off_by_one=False):
    """Wealth path of the KT bettor fed the given coins (divisor t, or t - 1)."""
    wealth, coin_sum, path = eps, 0.0, [eps]
    for n, c in enumerate(coins):  # n coins seen so far
        beta = coin_sum / (max(n, 1) if off_by_one else n + 1)
        wealth, coin_sum = wealth * (1 + c * beta), coin_sum + c
        path.append(wealth)
    return np.array(path)


def kt_off_by_one(scores, alpha, eps=1.0):
    """KT-ACI with the divisor t - 1; also returns its smallest step factor."""
    radius, wealth, coin_sum, worst = np.empty_like(scores), eps, 0.0, np.inf
    for t in range(len(scores)):
        beta = coin_sum / max(t, 1)
        radius[t] = beta * wealth
        coin = (scores[t] > radius[t]) - alpha
        worst = min(worst, 1 + coin * beta)
        wealth, coin_sum = wealth * (1 + coin * beta), coin_sum + coin
    return radius, worst


general = np.array([1.0] * 5 + [-1.0])  # five wins, then a full-size loss
print("general coins, divisor t-1:", kt_wealth_from_coins(general, off_by_one=True)[-1],
      " divisor t:", kt_wealth_from_coins(general)[-1])
r_bug, worst_factor = kt_off_by_one(base_scores, alpha, initial_wealth)
print(f"showcase stream: gap with the bug "
      f"{float(miscoverage_gap(base_scores, r_bug, alpha)):.4f}, without "
      f"{float(miscoverage_gap(base_scores, showcase['KT'], alpha)):.4f}; "
      f"smallest step factor {worst_factor:.4f}")

# %% tags=["solution", "hide-cell"]
# the bound 1 - alpha (1 - alpha) derived above, less a rounding allowance
S_STEP_FACTOR = 1 - alpha * (1 - alpha) - 1e-12
icmlbook.solution_check("the buggy bettor's smallest step factor is at least "
                        "1 - alpha (1 - alpha)", worst_factor, ">=", S_STEP_FACTOR)

# %% [markdown] tags=["exercise"]
# **2. Local adaptivity.** KT's fraction averages all past coins. Restart the bettor
# every $k$ steps, or discount old coins, and measure the worst local coverage
# deviation against the long-run gap. What does the change cost in Eq. 7?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 2
# **Restarts.** Cut the stream into blocks of $k$ steps and run a fresh bettor (wealth
# $\varepsilon$, no past coins) on each. A block that starts after a changepoint no
# longer drags the coins of the old regime along, so local coverage recovers faster.
# With the learners broadcasting over a last axis, the restarted bettor is one call:
# reshape the stream to $(k, T/k)$, one block per column.
#
# **The cost in Eq. 7.** Eq. 7 now holds per block: each block's coin sum is
# $O(\sqrt{k \log k})$, and there are $T/k$ blocks, so
# $$\Big|\sum_{t\le T} c_t\Big| \le \frac{T}{k}\, O\big(\sqrt{k\log k}\big)
#   \quad\Longrightarrow\quad |\overline{\mathrm{err}}_T - \alpha|
#   = O\Big(\sqrt{\tfrac{\log k}{k}}\Big).$$
# The long-run gap no longer vanishes as $T \to \infty$: it settles at the level of a
# single block, because every restart pays the bettor's warm-up again. Discounting
# old coins by $\lambda = 1 - 1/k$ (an effective memory of $k$ steps) behaves alike
# with a smaller price, as it keeps the wealth. Restarts or discounts buy local
# adaptivity with the long-run guarantee; the code measures both sides with
# $k$ equal to the window of the local coverage.
# :::

# %% tags=["solution", "hide-cell"]
def kt_restarted(scores, alpha, k, eps=1.0):
    """KT-ACI restarted every k steps (T a multiple of k): a fresh bettor per block."""
    blocks = scores.reshape(-1, k).T  # (k, T / k): block b is column b
    return kt_aci(blocks, alpha, eps)[0].T.reshape(-1)


def kt_discounted(scores, alpha, lam, eps=1.0):
    """KT-ACI whose coin sum and step count forget at rate lam per step."""
    radius, wealth, coin_sum, count = np.empty_like(scores), eps, 0.0, 0.0
    for t in range(len(scores)):
        radius[t] = coin_sum / (count + 1) * wealth
        coin = (scores[t] > radius[t]) - alpha
        wealth = wealth + coin * radius[t]
        coin_sum, count = lam * coin_sum + coin, lam * count + 1
    return radius


def worst_local(scores, radius):
    """Worst deviation of the rolling coverage (window steps) from 1 - alpha."""
    return float(np.max(np.abs(rolling_coverage(scores, radius, window) - (1 - alpha))))


k_restart = window  # restart period: the window of the local coverage
n_used = cfg.T // k_restart * k_restart
sc_used = base_scores[:n_used]
local_adapt = {
    "KT": showcase["KT"][:n_used],
    f"KT restarted every {k_restart}": kt_restarted(sc_used, alpha, k_restart),
    f"KT discounted, memory {k_restart}": kt_discounted(sc_used, alpha,
                                                         1 - 1 / k_restart),
}
for name, r in local_adapt.items():
    print(f"{name:<28} worst local deviation {worst_local(sc_used, r):.3f}, "
          f"long-run gap {float(miscoverage_gap(sc_used, r, alpha)):.4f}")

# %% tags=["solution", "hide-cell"]
# restarts must cut the worst local deviation by at least 15 % to count as a gain
# (about 30 % measured on seeds 0-4 at both tiers)
S_LOCAL_RATIO = 0.85
local_ratio = worst_local(sc_used, local_adapt[f"KT restarted every {k_restart}"]) / \
    worst_local(sc_used, local_adapt["KT"])
icmlbook.solution_check("restarted KT's worst local deviation / plain KT's",
                        local_ratio, "<=", S_LOCAL_RATIO)

# %% [markdown] tags=["exercise"]
# **3. Multi-step forecasting.** Forecast $h = 1, \dots, 5$ steps ahead with the naive
# forecaster, run one KT learner per horizon, and check that each horizon's long-run
# miscoverage converges to $\alpha$, although horizon $h$ only learns about step $t$
# at step $t + h$.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 3
# The forecast of $y_{t+h}$ made at time $t$ is $y_t$, with score
# $S^{(h)}_t = |y_{t+h} - y_t|$, and its outcome is known only at time $t+h$. A
# learner that bets at every step would bet $h-1$ times without news of its last bet.
# The standard way round the delay: run $h$ interleaved KT bettors for horizon $h$,
# bettor $r$ taking the steps $t \equiv r \pmod h$. Bettor $r$'s previous step was
# $t-h$, whose score is revealed exactly at time $t$: each bettor sees its feedback
# before its next bet, so each is a plain KT bettor on its own stream of $T/h$ steps.
#
# Eq. 7 then holds for each of them, with $T/h$ in place of $T$, and the horizon's
# miscoverage is the mean of theirs:
# $$|\overline{\mathrm{err}}^{(h)}_T - \alpha| \le \max_r\,|\overline{\mathrm{err}}_r
#   - \alpha| = O\Big(\sqrt{\tfrac{\log (T/h)}{T/h}}\Big)
#   \xrightarrow[T\to\infty]{} 0 .$$
# The delay costs a factor of about $\sqrt h$ in the rate, nothing in the limit. With
# the learners broadcasting over a last axis, the $h$ bettors are one call: reshape the
# stream to $(T/h, h)$. The code runs horizons 1 to 5 on a fresh stream and compares
# each gap with its rate.
# :::

# %% tags=["solution", "hide-cell"]
def kt_horizon(scores, alpha, h, eps=1.0):
    """h interleaved KT bettors; bettor r takes the steps t = r mod h (h divides T)."""
    return kt_aci(scores.reshape(-1, h), alpha, eps)[0].reshape(-1)


def ar1_path(T, rng, sigmas=SIGMAS, phi=0.8):
    """The AR(1) series of the chapter's streams itself, y_0 .. y_T."""
    segments = np.minimum(np.arange(T) * len(sigmas) // T, len(sigmas) - 1)
    noise = np.asarray(sigmas)[segments] * rng.standard_normal(T)
    y = np.zeros(T + 1)
    for t in range(T):
        y[t + 1] = phi * y[t] + noise[t]
    return y


y_multi = ar1_path(cfg.T, run.rng("multi-step exercise"))
horizon_ratio = {}
for h in range(1, 6):
    sc_h = np.abs(y_multi[h:] - y_multi[:-h])  # naive forecast y_t of y_{t+h}
    sc_h = sc_h[: len(sc_h) // h * h]
    g = float(miscoverage_gap(sc_h, kt_horizon(sc_h, alpha, h), alpha))
    per_bettor = len(sc_h) / h
    horizon_ratio[h] = g / np.sqrt(np.log(per_bettor) / per_bettor)
    print(f"h = {h}: long-run gap {g:.4f}, Eq. 7's rate with T/h steps "
          f"{np.sqrt(np.log(per_bettor) / per_bettor):.4f}")

# %% tags=["solution", "hide-cell"]
# every horizon's gap within half of Eq. 7's sqrt(log n / n), n = T/h steps per
# bettor (about a quarter of it measured on seeds 0-4 at both tiers)
S_RATE_FRACTION = 0.5
icmlbook.solution_check("worst horizon's gap / sqrt(log(T/h) / (T/h))",
                        max(horizon_ratio.values()), "<=", S_RATE_FRACTION)

# %% [markdown]
# ## References
#
# - A. Podkopaev, D. Xu, K. Lee. Adaptive Conformal Inference by Betting. ICML 2024.
# - F. Orabona, D. Pál. Coin Betting and Parameter-Free Online Learning. NeurIPS 2016.
# - A. Cutkosky, F. Orabona. Black-Box Reductions for Parameter-free Online Learning in
#   Banach Spaces. COLT 2018.
# - I. Gibbs, E. Candès. Adaptive Conformal Inference Under Distribution Shift.
#   NeurIPS 2021.
# - A. Bhatnagar, H. Wang, C. Xiong, Y. Bai. Improved Online Conformal Prediction via
#   Strongly Adaptive Online Learning. ICML 2023.

# %% tags=["remove-cell"]
run.finish();
