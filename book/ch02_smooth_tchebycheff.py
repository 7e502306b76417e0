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
# # Smooth Tchebycheff scalarization
#
# **Paper.** Xi Lin, Xiaoyuan Zhang, Zhiyuan Yang, Fei Liu, Zhenkun Wang, Qingfu Zhang.
# *Smooth Tchebycheff Scalarization for Multi-Objective Optimization.* ICML 2024,
# PMLR 235:30479–30509.
# [OpenReview](https://openreview.net/forum?id=m4dO5L6eCp) ·
# [arXiv:2402.19078](https://arxiv.org/abs/2402.19078) ·
# [authors' code](https://github.com/Xi-L/STCH). Everything below is written from the
# paper's equations; none of the authors' code is used.
#
# **The problem.** Many learning problems have several objectives at once: the losses of
# several tasks, accuracy and fairness, quality and cost. Usually no single solution
# minimises them all, and we want a *Pareto-optimal* trade-off chosen by a preference
# vector $\lambda$. The cheap way, a weighted sum of the objectives (linear
# scalarization, LS), provably cannot reach any point in a *concave* part of the Pareto
# front. The classic fix, Tchebycheff scalarization (TCH), minimises the worst weighted
# objective and reaches every Pareto point, but it is a max, non-smooth, and gradient
# methods on it oscillate and converge slowly. Adaptive multi-task methods such as MGDA
# avoid both problems but need one gradient per objective and a small quadratic program
# at every step.
#
# **The idea.** Replace the max by its log-sum-exp smoothing with a temperature $\mu$:
# smooth Tchebycheff (STCH). Its gradient is a softmax-weighted sum of the objectives'
# gradients, so it costs one backward pass, like LS.
#
# **The claim.** The paper's headline claims, in its words where we quote them: STCH is
# a "lightweight and efficient" scalarization that "has good theoretical properties for
# finding all Pareto solutions with valid trade-off preferences", the non-convex parts of
# the front that LS cannot reach included, "while enjoying significantly lower
# computational complexity compared to other methods"; because it is smooth, gradient
# methods on it converge faster than the subgradient method on classic TCH; and on
# multi-task learning benchmarks it does as well as or better than adaptive gradient
# methods such as MGDA, and better than linear scalarization. The chapter tests each at
# its own scale, and gives the paper its verdict with the claims below, by a rule fixed
# before the final runs.
#
# **What this book does.** Everything runs on two small problems of our own: a
# 10-dimensional problem with a concave front whose exact TCH solutions we know, and a
# synthetic three-task regression network. The reach and the $\mu \log m$ bound
# reproduce, and at the same constant step STCH gets much closer to the TCH optimum than
# TCH does. The speed-up over the *classic* subgradient method (diminishing steps, step
# size tuned) does **not** show at our scale: tuned that way, TCH ends closer to the TCH
# optimum than STCH on most seeds, since STCH stops at its own small bias. On the network,
# STCH beats MGDA on the worst task and matches or beats it on hypervolume, each method at
# its best of two learning rates and averaged over restarts, at one backward pass per step
# instead of three; against plain LS its lead is small and not on every seed. The
# paper's benchmarks (NYUv2, Office, QM9), its other adaptive baselines and its Pareto
# set learning are not reproduced (a small Pareto-set-learning run is exercise 3).

# %% tags=["parameters"]
tier = "default"  # smoke | default | full: size of the experiment
seed = 0  # drives every random number in the chapter (starting points, data, networks)
# STCH smoothing temperature of the showcase (the claims also sweep other values)
mu = 0.01
# adam | gd | subgradient: the update rule shared by LS, TCH and STCH
optimizer = "adam"
lr = 0.05  # learning rate shared by LS, TCH and STCH on the concave problem

# %% tags=["validate"]
from icmlbook import check_choice, check_range, check_seed, check_tier

check_tier(tier)
check_seed(seed)
check_range("mu", mu, 1e-4, 10.0)
check_choice("optimizer", optimizer, ("adam", "gd", "subgradient"))
check_range("lr", lr, 0.0, 1.0, lo_open=True)

# %% [markdown]
# ## Setup
#
# Everything is small: a 10-dimensional decision vector per preference, eleven
# preferences optimised side by side as one batch, and a multi-task network with a few
# thousand weights. PyTorch gives us the gradients; one CPU thread is fastest at this
# size. The problems are computed in float64 so that gaps of $10^{-3}$ are far above
# rounding. The tier sets the number of starting points and of steps.

# %%
import math
import time

import numpy as np
import torch
from torch import nn
import matplotlib.pyplot as plt
import icmlbook

run = icmlbook.start("02_smooth_tchebycheff", tier=tier, seed=seed,
                     params=dict(mu=mu, optimizer=optimizer, lr=lr))
icmlbook.use_style()
cfg = run.pick(
    smoke=dict(
        n_starts=1,
        steps=100,
        lr_stride=4,
        mtl_steps=20,
        mtl_restarts=1,
        cost_steps=4,
        widget_steps_max=100,
        ex_starts=1,
        psl_steps=300,
    ),
    default=dict(
        n_starts=3,
        steps=300,
        lr_stride=1,
        mtl_steps=300,
        mtl_restarts=8,
        cost_steps=30,
        widget_steps_max=500,
        ex_starts=3,
        psl_steps=500,
    ),
)  # full: nothing here needs more than the default tier, so full falls back to it
DIM = 10  # dimension of the decision vector x
N_PREFS = 11  # number of preference vectors
# lambda = (w, 1 - w): interior of the simplex
PREF_W = np.linspace(0.02, 0.98, N_PREFS)
MUS = (0.003, 0.01, 0.05, 0.2, 1.0)  # the temperatures of the mu sweep
BOUND_MUS = (0.01, 0.05, 0.2)  # temperatures at which a check tests the mu log m bound
REF_POINT = 1.1  # hypervolume reference point (both objectives lie in [0, 1])
DISTINCT_TOL = 0.02  # two solutions are "the same" if their objectives differ by less
# one colour and line style per method, for every figure of the chapter
STYLE = icmlbook.method_styles("LS", "TCH", "STCH", "MGDA")
COLOURS = {name: style["color"] for name, style in STYLE.items()}
# one line style per update rule
RULE_STYLES = {"gd": "--", "subgradient": ":", "adam": "-"}
preferences = torch.tensor(np.stack([PREF_W, 1 - PREF_W], axis=1))  # (P, 2)
print(f"tier {tier}: {cfg.n_starts} starting point(s) x {N_PREFS} preferences, "
      f"{cfg.steps} steps of {optimizer} (lr {lr}); multi-task: {cfg.mtl_steps} steps")

# %% [markdown]
# ## The idea in math
#
# We minimise $m$ objectives $f(x) = (f_1(x), \dots, f_m(x))$ at once. A point is
# *Pareto optimal* if no other point is at least as good on every objective and better
# on one; the image of all of them is the *Pareto front*. A scalarization turns the
# vector into one number, steered by a preference $\lambda$ in the simplex
# $\Delta_m = \{\lambda \ge 0, \sum_i \lambda_i = 1\}$, relative to an ideal point
# $z^* \le \inf f$ (here $z^* = 0$).
#
# **Linear scalarization (LS)**, the weighted sum:
#
# $$g^{\mathrm{LS}}(x \mid \lambda) = \sum_{i=1}^m \lambda_i\,(f_i(x) - z^*_i). \tag{1}$$
#
# Its level sets in objective space are straight lines, so its minimisers are points
# where a line touches the front from below: it can only find points on the *convex
# hull* of the front and skips every concave stretch.
#
# **Tchebycheff scalarization (TCH)**, the worst weighted objective:
#
# $$g^{\mathrm{TCH}}(x \mid \lambda) = \max_{1 \le i \le m}\ \lambda_i\,(f_i(x) - z^*_i). \tag{2}$$
#
# Its level sets are corners ("L" shapes) pointing at $z^*$; every Pareto point is the
# TCH solution of some $\lambda$, convex front or not: the solution for $\lambda$ sits
# on the ray $\lambda_1 (f_1 - z_1^*) = \dots = \lambda_m (f_m - z_m^*)$. But the max
# is non-smooth: a gradient step follows only the currently worst objective, and near
# the solution the "active" objective switches at every step.
#
# **Smooth Tchebycheff (STCH)**, the paper's Eq. 9, smooths the max with a log-sum-exp
# at temperature $\mu > 0$:
#
# $$g^{\mathrm{STCH}}_\mu(x \mid \lambda) = \mu \log \sum_{i=1}^m
#   \exp\!\Big(\frac{\lambda_i (f_i(x) - z^*_i)}{\mu}\Big). \tag{3}$$
#
# Its gradient is a convex combination of the objectives' gradients, with softmax
# weights that concentrate on the worst objective as $\mu \to 0$:
#
# $$\nabla_x g^{\mathrm{STCH}}_\mu = \sum_{i=1}^m \pi_i\, \lambda_i \nabla f_i(x), \qquad
#   \pi = \mathrm{softmax}\Big(\frac{\lambda \odot (f(x) - z^*)}{\mu}\Big). \tag{4}$$
#
# So it costs what LS costs: one forward pass and **one** backward pass, whatever $m$.
#
# **How close is it to TCH?** The log-sum-exp is sandwiched between the max and the max
# plus $\mu \log m$ (the sum has between one and $m$ terms as large as the largest):
#
# $$g^{\mathrm{TCH}}(x \mid \lambda) \;\le\; g^{\mathrm{STCH}}_\mu(x \mid \lambda)
#   \;\le\; g^{\mathrm{TCH}}(x \mid \lambda) + \mu \log m. \tag{5}$$
#
# Apply (5) at the STCH minimiser $x_\mu$ and at a TCH minimiser $x^*$:
# $g^{\mathrm{TCH}}(x_\mu) \le g^{\mathrm{STCH}}_\mu(x_\mu) \le g^{\mathrm{STCH}}_\mu(x^*)
# \le g^{\mathrm{TCH}}(x^*) + \mu \log m$. Hence the **TCH gap** of the STCH solution is
# bounded:
#
# $$\mathrm{gap}(x_\mu) = g^{\mathrm{TCH}}(x_\mu \mid \lambda) - \min_x g^{\mathrm{TCH}}(x
#   \mid \lambda) \;\le\; \mu \log m. \tag{6}$$
#
# At the other end, for large $\mu$ a first-order expansion of (3) gives
# $g^{\mathrm{STCH}}_\mu \approx \mu \log m + \frac1m \sum_i \lambda_i (f_i - z^*_i)$:
# STCH turns into LS (with weights $\lambda / m$) and loses the concave part again. The
# temperature trades smoothness (the gradient of (3) is Lipschitz with a constant that
# grows like $1/\mu$) against bias (6).
#
# **What the paper proves** (paraphrased, not checked against its exact wording; see the
# paper for the precise statements and conditions):
# every STCH minimiser is weakly Pareto optimal, and Pareto optimal if all
# $\lambda_i > 0$ or if it is unique; under mild conditions there is a $\mu^* > 0$ such
# that for every $0 < \mu < \mu^*$ *every* Pareto solution, on a convex front or not, is
# an STCH minimiser for some $\lambda$; and gradient methods on the smooth (3) converge
# faster than subgradient methods on the non-smooth (2). Eqs. 5 and 6 above are our
# derivation of the standard log-sum-exp facts that these results rest on.

# %% [markdown]
# ## From scratch
#
# ### The three scalarizations (Eqs. 1–3)
#
# Each takes a tensor of objective values `f` of shape `(..., m)` and preferences `lam`
# that broadcast against it, and returns one scalar per leading index. STCH uses
# `torch.logsumexp`, which subtracts the largest term before exponentiating: the naive
# `log(sum(exp(v / mu)))` overflows for $\mu \le 0.01$ once $v/\mu$ reaches ~700.

# %%
def ls_scalarization(f, lam, z=0.0):
    """Linear scalarization, Eq. 1: sum_i lam_i (f_i - z_i)."""
    return (lam * (f - z)).sum(-1)


def tch_scalarization(f, lam, z=0.0):
    """Tchebycheff scalarization, Eq. 2: max_i lam_i (f_i - z_i)."""
    return (lam * (f - z)).max(-1).values


def stch_scalarization(f, lam, mu, z=0.0):
    """Smooth Tchebycheff, Eq. 3: mu * log sum_i exp(lam_i (f_i - z_i) / mu)."""
    return mu * torch.logsumexp(lam * (f - z) / mu, dim=-1)


def stch_weights(f, lam, mu, z=0.0):
    """The softmax weights pi of Eq. 4: how much each objective's gradient counts."""
    return torch.softmax(lam * (f - z) / mu, dim=-1)


def scalarize(method, f, lam, mu=0.01, z=0.0):
    """One of 'LS', 'TCH', 'STCH' applied to objective values f (shape (..., m))."""
    if method == "LS":
        return ls_scalarization(f, lam, z)
    if method == "TCH":
        return tch_scalarization(f, lam, z)
    if method == "STCH":
        return stch_scalarization(f, lam, mu, z)
    raise ValueError(f"unknown scalarization {method!r}")


# %% [markdown]
# Two quick checks of the formulas (the unit tests check them more thoroughly): the
# sandwich (5) on random values, and autograd's gradient of (3) against the weighted sum
# (4) of per-objective gradients.

# %%
check_gen = run.generator("identity checks")  # a named random stream of this run
v = torch.rand(1000, 3, generator=check_gen, dtype=torch.float64)
ones = torch.ones(3, dtype=torch.float64)
sandwich_err = 0.0  # the largest violation of Eq. 5 on either side
for m_check in (0.001, 0.1, 10.0):
    s, t_max = stch_scalarization(v, ones, m_check), v.max(-1).values
    below, above = (
        (t_max - s).max().item(),
        (s - t_max - m_check * math.log(3)).max().item(),
    )
    sandwich_err = max(sandwich_err, below, above, 0.0)
    print(
        f"mu = {m_check:<6g}: max <= STCH holds: {below <= 1e-12}, STCH - max <= mu "
        f"log 3 holds: {above <= 1e-12}"
    )

x_check = torch.randn(4, generator=check_gen, dtype=torch.float64, requires_grad=True)
lam_check = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
f_check = torch.stack(
    [(x_check**2).sum(), (x_check - 1).abs().sum(), torch.sin(x_check).sum()]
)
grads = torch.stack(
    [torch.autograd.grad(fi, x_check, retain_graph=True)[0] for fi in f_check]
)
by_eq4 = (
    stch_weights(f_check, lam_check, 0.1)[:, None] * lam_check[:, None] * grads
).sum(0)
by_autograd = torch.autograd.grad(stch_scalarization(f_check, lam_check, 0.1), x_check)[
    0
]
grad_err = (by_autograd - by_eq4).abs().max().item()
print(f"autograd gradient of Eq. 3 equals Eq. 4: {grad_err < 1e-12}")

# %% [markdown]
# ### The solver
#
# All three scalarizations are minimised by the same first-order update rule, with the
# same learning rate and number of steps; only the scalar differs. Three rules, with
# $g_t$ the (sub)gradient of the scalarized objective at step $t$ and $\eta$ the learning
# rate:
#
# - **gradient descent** with a constant step, $x_{t+1} = x_t - \eta\, g_t$;
# - the **classic subgradient method** (Shor's normalised step with a diminishing size,
#   the method whose $O(1/\sqrt{t})$ guarantee for non-smooth problems the paper
#   contrasts with smooth optimisation),
#   $x_{t+1} = x_t - \frac{\eta}{\sqrt{t+1}}\, \frac{g_t}{\|g_t\|}$;
# - **Adam** (the optimizer of the authors' code), whose step has size about $\eta$
#   whatever the size of $g_t$.
#
# For TCH, autograd's gradient of `max` is a subgradient: the gradient of the currently
# worst objective.

# %%
ADAM_BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # PyTorch's defaults


def apply_rule(rule, x, g, state, lr, t):
    """One step of 'gd', 'subgradient' or 'adam' on x (in place); lr broadcasts against
    x."""
    if rule == "gd":
        x -= lr * g
    elif rule == "subgradient":  # normalised, diminishing step
        x -= lr / math.sqrt(t + 1) * g / g.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    elif rule == "adam":
        (b1, b2), (m, v) = ADAM_BETAS, state
        m.mul_(b1).add_((1 - b1) * g)
        v.mul_(b2).add_((1 - b2) * g * g)
        m_hat, v_hat = m / (1 - b1 ** (t + 1)), v / (1 - b2 ** (t + 1))
        x -= lr * m_hat / (v_hat.sqrt() + ADAM_EPS)
    else:
        raise ValueError(f"unknown update rule {rule!r}")


# %% [markdown]
# The preferences are independent problems, so we stack them (and the starting points,
# and several learning rates) in one batch and minimise the *sum* of their scalarized
# objectives: each row of `x` only receives the gradient of its own term, and the three
# rules act row by row, so this is exactly that many separate runs done at once.

# %%
def solve(
    objectives,
    lam,
    x0,
    method,
    mu=0.01,
    optimizer="adam",
    lr=0.05,
    steps=300,
    z=0.0,
    scalarizer=scalarize,
):
    """Minimise scalarizer(method, objectives(x), lam, mu, z) from x0; returns the
    trajectory.

    x0 has shape (..., d), lam (..., m) and lr (a number or a tensor) broadcast to it;
    every leading index is an independent problem. Returns x at every step, shape
    (steps + 1, ..., d)."""
    lr = torch.as_tensor(lr, dtype=x0.dtype)
    x = (x0 + 0 * lr).detach().clone().requires_grad_(True)  # broadcast x0 over the lrs
    state = (torch.zeros_like(x), torch.zeros_like(x))
    traj = [x.detach().clone()]
    for t in range(steps):
        value = scalarizer(method, objectives(x), lam, mu, z).sum()
        (g,) = torch.autograd.grad(value, x)  # one backward pass
        with torch.no_grad():
            apply_rule(optimizer, x, g, state, lr, t)
        traj.append(x.detach().clone())
    return torch.stack(traj)


# %% [markdown]
# ### A problem with a concave Pareto front, and its exact TCH solutions
#
# With $u = \mathbf 1 / \sqrt d$ (a unit vector) in $d = 10$ dimensions,
#
# $$f_1(x) = 1 - e^{-\|x - u\|^2}, \qquad f_2(x) = 1 - e^{-\|x + u\|^2}. \tag{7}$$
#
# Both objectives lie in $[0, 1)$, so the ideal point is $z^* = 0$. The Pareto set is the
# segment $x = t\,u$, $t \in [-1, 1]$: any $x$ is weakly dominated by its projection onto
# that segment, which shortens both distances. The front is
# $\big(1 - e^{-(1-t)^2},\ 1 - e^{-(1+t)^2}\big)$, which bulges *away from* the ideal
# point: a concave front (see the figures below). On it $f_1$ falls and $f_2$ rises
# with $t$, so the exact TCH solution for $\lambda$ is the $t^*$ where $\lambda_1 f_1(t) = \lambda_2
# f_2(t)$: one bisection gives it to machine precision, and with it the TCH gap (6) of
# any point. For the widget we add the convex counterpart $f_{1,2} = \|x \mp u\|^2/4$,
# with front $\big((1-t)^2/4, (1+t)^2/4\big)$.

# %%
def _unit(d, dtype=torch.float64):
    return torch.ones(d, dtype=dtype) / math.sqrt(d)


def concave_objectives(x):
    """Eq. 7: f(x) = (1 - exp(-|x - u|^2), 1 - exp(-|x + u|^2)), shape (..., 2)."""
    u = _unit(x.shape[-1], x.dtype)
    return torch.stack([1 - torch.exp(-((x - u) ** 2).sum(-1)),
                        1 - torch.exp(-((x + u) ** 2).sum(-1))], dim=-1)


def convex_objectives(x):
    """The convex counterpart: f(x) = (|x - u|^2 / 4, |x + u|^2 / 4)."""
    u = _unit(x.shape[-1], x.dtype)
    return torch.stack([((x - u) ** 2).sum(-1) / 4, ((x + u) ** 2).sum(-1) / 4], dim=-1)


def concave_front(t):
    """The Pareto front of Eq. 7 at x = t u, t in [-1, 1] (NumPy, shape (..., 2))."""
    t = np.asarray(t, dtype=float)
    return np.stack([1 - np.exp(-(1 - t) ** 2), 1 - np.exp(-(1 + t) ** 2)], axis=-1)


def convex_front(t):
    """The Pareto front of the convex problem at x = t u."""
    t = np.asarray(t, dtype=float)
    return np.stack([(1 - t) ** 2 / 4, (1 + t) ** 2 / 4], axis=-1)


PROBLEMS = {"concave": (concave_objectives, concave_front),
            "convex": (convex_objectives, convex_front)}


def tch_optimum(front, lam, iters=80):
    """Exact TCH solution on the Pareto set x = t u by bisection on lam_1 f_1 = lam_2
    f_2.

    Returns (t*, min g^TCH). Needs lam_1, lam_2 > 0 (f_1 falls and f_2 rises in t)."""
    lo, hi = -1.0, 1.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        f = front(mid)
        if lam[0] * f[0] > lam[1] * f[1]:
            lo = mid
        else:
            hi = mid
    t = 0.5 * (lo + hi)
    f = front(t)
    return t, float(max(lam[0] * f[0], lam[1] * f[1]))


def tch_gap(f, lam, g_star):
    """Eq. 6: g^TCH(x | lam) - min g^TCH, from objective values f (NumPy or torch)."""
    return np.max(np.asarray(lam) * np.asarray(f), axis=-1) - np.asarray(g_star)


# %% [markdown]
# ### Measuring a set of solutions
#
# Two numbers summarise how well a set of solutions covers the front. The
# **hypervolume** (HV) is the area dominated by the set and bounded by a reference point
# $r = (1.1, 1.1)$; for two objectives it is a sum of rectangles after sorting by $f_1$.
# The whole front of Eq. 7 has HV 0.552. And we count **distinct solutions**: points
# whose objectives differ by less than 0.02 count once (eleven preferences that all land
# on the same two endpoints give two).

# %%
def hypervolume_2d(F, ref=REF_POINT):
    """Area dominated by the points F (n, 2) and bounded by (ref, ref) (minimisation).
    """
    F = np.asarray(F, dtype=float).reshape(-1, 2)
    F = F[(F < ref).all(axis=1)]
    F = F[np.argsort(F[:, 0], kind="stable")]
    hv, level = 0.0, ref
    for f1, f2 in F:
        if f2 < level:  # not dominated by a point with smaller f1
            hv += (ref - f1) * (level - f2)
            level = f2
    return hv


def count_distinct(F, tol=DISTINCT_TOL):
    """Number of solutions whose objectives differ (max-norm) by at least tol from all
    others."""
    reps = []
    for f in np.asarray(F, dtype=float).reshape(-1, 2):
        if all(np.abs(f - r).max() >= tol for r in reps):
            reps.append(f)
    return len(reps)


true_front = concave_front(np.linspace(-1, 1, 4001))
hv_true = hypervolume_2d(true_front)
print(f"hypervolume of the whole concave front (4001 points): {hv_true:.4f}")

# %% [markdown]
# ## The experiment
#
# Eleven preferences $\lambda = (w, 1-w)$, $w \in \{0.02, 0.116, \dots, 0.98\}$, all
# started from the same random point $x_0 \sim 0.3\,\mathcal N(0, I)$, and
# `n_starts` such starting points (drawn from `seed`). LS, TCH and STCH at temperature
# `mu` get the same update rule (`optimizer`), learning rate and number of steps. For
# every solution we know its TCH gap exactly.

# %%
def starting_points(gen, n_starts, n_prefs=N_PREFS, d=DIM):
    """n_starts points x0 ~ 0.3 N(0, I) drawn from the torch generator gen, each shared
    by all preferences: shape (S, P, d)."""
    x0_ = 0.3 * torch.randn(n_starts, 1, d, generator=gen, dtype=torch.float64)
    return x0_.expand(n_starts, n_prefs, d)


def objective_history(x0_, lam, method, mu_, opt, lr_, steps, scalarizer=scalarize):
    """Solve every (start, preference) on the concave problem; objectives per step (T,
    S, P, 2)."""
    traj = solve(
        concave_objectives,
        lam,
        x0_,
        method,
        mu_,
        opt,
        lr_,
        steps,
        scalarizer=scalarizer,
    )
    return concave_objectives(traj).numpy()


def summarise(F_final, lam, g_star_):
    """Worst case over starting points (F_final is (S, P, 2)) of: distinct solutions, HV
    and the max TCH gap over preferences."""
    return dict(distinct=min(count_distinct(F) for F in F_final),
                hv=min(hypervolume_2d(F) for F in F_final),
                max_gap=float(tch_gap(F_final, np.asarray(lam), g_star_).max()))


x0 = starting_points(run.generator("starting points"), cfg.n_starts)
tch_star = [tch_optimum(concave_front, lam) for lam in preferences.numpy()]
g_star = np.array([g for _, g in tch_star])  # (P,) exact min of g^TCH per preference
f_star = concave_front(np.array([t for t, _ in tch_star]))  # (P, 2) exact TCH points
setting = dict(opt=optimizer, lr_=lr, steps=cfg.steps)  # shared by every method

t0 = time.perf_counter()
F_hist = {
    name: objective_history(x0, preferences, method, mu, **setting)
    for name, method in [("LS", "LS"), ("TCH", "TCH"), (f"STCH mu={mu:g}", "STCH")]
}
print(
    f"3 methods x {cfg.n_starts * N_PREFS} problems x {cfg.steps} steps in "
    f"{time.perf_counter() - t0:.1f} s"
)

results = {name: summarise(F[-1], preferences, g_star) for name, F in F_hist.items()}
print(f"{'method':<14} {'distinct of 11':>14} {'HV':>7} {'max TCH gap':>12}")
for name, r in results.items():
    print(f"{name:<14} {r['distinct']:>14d} {r['hv']:>7.4f} {r['max_gap']:>12.4f}")
print(f"{'whole front':<14} {'':>14} {hv_true:>7.4f}")

# %% tags=["hide-input"]
def draw_front(ax, front_pts, F, lam_np, title, f_exact=None, label="solutions",
               color=COLOURS["STCH"]):
    """The front, the solutions F (P, 2) and the preference rays lam_1 f_1 = lam_2
    f_2."""
    ax.plot(front_pts[:, 0], front_pts[:, 1], color="0.6", lw=1.2, zorder=1)
    s = np.linspace(0, 1.05, 2)
    # the ray f = s (1/lam_1, 1/lam_2) / |.|: where TCH's solution lies
    for lam_ in lam_np:
        d = np.array([1 / lam_[0], 1 / lam_[1]])
        d = d / np.abs(d).max()
        ax.plot(s * d[0], s * d[1], color="0.85", lw=0.7, zorder=0)
    if f_exact is not None:
        ax.scatter(
            f_exact[:, 0],
            f_exact[:, 1],
            s=40,
            facecolors="none",
            edgecolors="k",
            lw=0.8,
            zorder=2,
            label="exact TCH",
        )
    ax.scatter(F[:, 0], F[:, 1], s=16, color=color, zorder=3, label=label)
    ax.set(
        xlim=(-0.03, 1.03),
        ylim=(-0.03, 1.03),
        xlabel="$f_1$",
        title=title,
        aspect="equal",
    )


fig, axes = plt.subplots(1, 3, figsize=(8.4, 3.0), sharey=True)
for ax, (name, F) in zip(axes, F_hist.items()):
    r = results[name]
    draw_front(ax, true_front, F[-1, 0], preferences.numpy(),
               f"{name}: {r['distinct']} distinct, HV {r['hv']:.3f}", f_star,
               color=COLOURS[name.split()[0]])
axes[0].set_ylabel("$f_2$")
axes[0].legend(loc="upper right")
plt.show()

# %% [markdown]
# LS sends every preference to one of the two ends of the front: on a concave front the
# weighted sum is smallest at an endpoint for *every* $\lambda$, so the middle of the
# front is unreachable, whatever the optimizer. TCH and STCH put each solution on its
# preference ray (the grey lines), at the exact TCH point (the circles).
#
# ### Convergence: smooth vs. non-smooth at the same step
#
# The final picture hides how the two Tchebycheff methods got there, both run with the
# same update rule and learning rate (`optimizer`, `lr`: Adam at 0.05 by default). The
# worst TCH gap over the eleven preferences, step by step, and the weight $\pi_1$ that
# each method puts on objective 1 for the middle preference ($\lambda = (0.5, 0.5)$).
# For TCH the "weight" is the subgradient's choice, 0 or 1: which objective is currently
# the worst.

# %%
gap_curves = {name: tch_gap(F, preferences.numpy(), g_star).max(axis=(1, 2))
              for name, F in F_hist.items() if name != "LS"}
mid = N_PREFS // 2
pi_tch = (F_hist["TCH"][:, 0, mid, 0] * PREF_W[mid] >=
          F_hist["TCH"][:, 0, mid, 1] * (1 - PREF_W[mid])).astype(float)
pi_stch = stch_weights(torch.tensor(F_hist[f"STCH mu={mu:g}"][:, 0, mid]),
                       preferences[mid], mu)[:, 0].numpy()

fig, axes = plt.subplots(1, 2, figsize=(8, 2.8))
for i, (name, g) in enumerate(gap_curves.items()):
    axes[0].semilogy(
        np.maximum(g, 1e-6), color=COLOURS[name.split()[0]], label=name, lw=1
    )
axes[0].axhline(mu * math.log(2), color="k", ls=":", lw=1, label=r"$\mu \log 2$")
axes[0].set(xlabel="step", ylabel="max TCH gap over preferences", ylim=(1e-4, 1))
axes[0].legend()
axes[1].plot(pi_tch, color=COLOURS["TCH"], lw=0.6, label="TCH (active objective)")
axes[1].plot(pi_stch, color=COLOURS["STCH"], lw=1.4, label=f"STCH mu={mu:g}: $\\pi_1$")
axes[1].set(xlabel="step", ylabel="weight on $f_1$", ylim=(-0.05, 1.05),
            title=r"$\lambda = (0.5, 0.5)$")
axes[1].legend(loc="center right", frameon=True, framealpha=0.9)
plt.show()
switches = int(np.abs(np.diff(pi_tch[len(pi_tch) // 2:])).sum())
print(
    f"TCH switched its active objective {switches} times in the last half of the run; "
    f"STCH's pi_1 ended at {pi_stch[-1]:.3f}"
)

# %% [markdown]
# Once near the solution, the constant-step TCH ping-pongs: each step follows whichever
# objective is worse, overshoots, and the other one becomes the worst. Its error stalls at
# a level set by the step size. STCH's weights settle at an interior value (a fixed
# mixture of the two gradients), and its gap drops to its bias, which is below the bound
# $\mu \log 2$ of Eq. 6.
#
# ### Against the classic subgradient method, every step size tuned
#
# A constant step is not how the textbook treats a non-smooth problem: the classic
# subgradient method shrinks its step like $1/\sqrt t$, and every method deserves its
# best learning rate. So we give each pair (scalarization, update rule) the same 300
# steps and a grid of learning rates, all in one batch, and keep each pair's best worst
# final gap over the grid. STCH keeps its temperature `mu`.

# %%
# learning rates tried for every (method, rule) pair
LR_GRID = np.logspace(-2.5, 0.5, 13)
RULES = ("gd", "subgradient", "adam")


def tuned_gaps(x0_, lam, g_star_, method, mu_, rule, steps, lrs=LR_GRID):
    """Worst final TCH gap (over starts and preferences) at each learning rate in lrs,
    and the final objectives, shape (lrs, starts, preferences, 2)."""
    lr_t = torch.tensor(lrs, dtype=torch.float64).view(-1, 1, 1, 1)
    F = concave_objectives(
        solve(concave_objectives, lam, x0_, method, mu_, rule, lr_t, steps)[-1]
    )
    F = F.numpy()
    return tch_gap(F, np.asarray(lam), g_star_).reshape(len(lrs), -1).max(axis=1), F


lr_grid = LR_GRID[::cfg.lr_stride]  # the smoke tier tries every fourth
tuned_runs = {
    (m_, rule): tuned_gaps(x0, preferences, g_star, m_, mu, rule, cfg.steps, lr_grid)
    for m_ in ("TCH", "STCH")
    for rule in RULES
}
tuned = {k: gaps for k, (gaps, _) in tuned_runs.items()}
print(
    f"worst final TCH gap after {cfg.steps} steps, best learning rate of {len(lr_grid)}"
)
print(f"{'rule':<12} {'TCH':>8} {'(lr)':>7} {f'STCH mu={mu:g}':>13} {'(lr)':>7}")
for rule in RULES:
    t_, s_ = tuned[("TCH", rule)], tuned[("STCH", rule)]
    print(
        f"{rule:<12} {t_.min():>8.4f} {lr_grid[t_.argmin()]:>7.3g} {s_.min():>13.4f} "
        f"{lr_grid[s_.argmin()]:>7.3g}"
    )
best_tch = min(tuned[("TCH", r)].min() for r in RULES)
best_stch = min(tuned[("STCH", r)].min() for r in RULES)
sub_best = tuned[("TCH", "subgradient")].min()
sub_F = tuned_runs[("TCH", "subgradient")][1][tuned[("TCH", "subgradient")].argmin()]
hv_sub = min(hypervolume_2d(F) for F in sub_F)  # worst start, as in summarise()
print(
    f"best TCH (any rule) {best_tch:.4f}; best STCH {best_stch:.4f}; classic "
    f"subgradient / best STCH: {sub_best / best_stch:.2f}"
)

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(5, 3))
for (m_, rule), gaps in tuned.items():
    ax.loglog(
        lr_grid,
        np.maximum(gaps, 1e-6),
        color=COLOURS[m_],
        ls=RULE_STYLES[rule],
        lw=1.2,
        marker="o",
        ms=2.5,
        label=f"{m_}, {rule}",
    )
ax.axhline(mu * math.log(2), color="k", ls=":", lw=1, label=r"$\mu \log 2$")
ax.set(xlabel=r"learning rate $\eta$", ylabel="worst final TCH gap", ylim=(1e-4, 1.5))
ax.legend(ncol=2, fontsize=7)
plt.show()

# %% [markdown]
# Read the table with care. At a *constant* step (gradient descent or Adam) the smoothing
# is what lets the method settle. But the classic subgradient method, with its shrinking
# step and a tuned $\eta$, ends closer to the TCH optimum in the same 300 steps, on most
# seeds by a wide margin: STCH cannot go below its own bias (the gap of its exact
# minimiser, a fraction of $\mu \log 2$), while the subgradient method converges to the
# TCH point itself (on an occasional seed one of its starts is still oscillating after
# 300 steps, and it ends behind STCH). On this smooth, well-conditioned problem the faster convergence the paper proves for STCH
# does not show against a well-tuned subgradient method; what shows is that STCH does not
# need a step schedule: one constant step works, as it does for Adam in the authors'
# code. The claims below say exactly that, and a finding records the comparison with the
# tuned subgradient method on every seed.

# %% [markdown]
# ### The temperature: from TCH to LS
#
# Now a sweep over $\mu$. Small $\mu$ is TCH-like (near-exact, but less smooth: at
# $\mu = 0.003$ the optimizer starts to oscillate again); large $\mu$ is LS-like and loses
# the middle of the front. The bound of Eq. 6 is shown next to each measured gap.

# %%
sweep_mus = sorted(set(MUS) | {mu})
sweep = {}
for m_ in icmlbook.progress(sweep_mus, desc="mu sweep"):
    F = (F_hist[f"STCH mu={mu:g}"] if m_ == mu
         else objective_history(x0, preferences, "STCH", m_, **setting))
    sweep[m_] = dict(summarise(F[-1], preferences, g_star),
                     curve=tch_gap(F, preferences.numpy(), g_star).max(axis=(1, 2)))
print(f"{'mu':>6} {'distinct':>8} {'HV':>7} {'max gap':>8} {'mu log 2':>9}")
for m_, r in sweep.items():
    print(
        f"{m_:>6g} {r['distinct']:>8d} {r['hv']:>7.4f} {r['max_gap']:>8.4f} "
        f"{m_ * math.log(2):>9.4f}"
    )

# %% [markdown]
# Where does the STCH minimiser sit on the front as $\mu$ grows? STCH is a strictly
# increasing function of each objective, so its minimiser is Pareto optimal and lies on
# the segment $x = t u$: a fine grid over $t$ finds it exactly, no optimizer involved.
# For the symmetric preference the answer stays at the middle of the front ($t = 0$, the
# exact TCH point) until $\mu$ crosses a threshold and then jumps towards an endpoint:
# this is the paper's $\mu^*$ at work, seen on one preference. For an asymmetric
# preference it drifts gradually.

# %%
def stch_argmin_on_front(front, lam, mus, ts):
    """For each mu, the t in ts minimising Eq. 3 on the Pareto set (grid search)."""
    F = torch.tensor(front(ts))  # (T, 2)
    lam_t = torch.as_tensor(lam, dtype=torch.float64)
    # (M, T)
    vals = torch.stack([stch_scalarization(F, lam_t, float(m_)) for m_ in mus])
    return np.asarray(ts)[vals.argmin(dim=1).numpy()]


t_grid = np.linspace(-1, 1, 4001)
mu_grid = np.logspace(-3, 0.5, 71)
argmins = {lam: stch_argmin_on_front(concave_front, lam, mu_grid, t_grid)
           for lam in [(0.5, 0.5), (0.3, 0.7)]}
mu_jump = float(mu_grid[np.argmax(np.abs(argmins[(0.5, 0.5)]) > 0.05)])
print(
    f"lambda = (0.5, 0.5): minimiser at t = 0 for every mu below {mu_jump:.3g}; at mu "
    f"= 1 it is t = {argmins[(0.5, 0.5)][np.searchsorted(mu_grid, 1.0)]:+.2f}"
)
print(
    f"lambda = (0.3, 0.7): exact TCH t* = "
    f"{tch_optimum(concave_front, (0.3, 0.7))[0]:+.3f}; STCH minimiser at mu = 0.001: "
    f"{argmins[(0.3, 0.7)][0]:+.3f}, mu = 0.2: "
    f"{argmins[(0.3, 0.7)][np.searchsorted(mu_grid, 0.2)]:+.3f}"
)

fig, axes = plt.subplots(1, 2, figsize=(8, 2.8))
for i, m_ in enumerate(sweep_mus):
    axes[0].semilogy(np.maximum(sweep[m_]["curve"], 1e-6), lw=1, label=f"mu={m_:g}",
                     color=plt.cm.viridis(i / max(1, len(sweep_mus) - 1)))
axes[0].semilogy(gap_curves["TCH"], color=COLOURS["TCH"], lw=0.8, ls="--", label="TCH")
axes[0].set(xlabel="step", ylabel="max TCH gap", ylim=(1e-4, 1))
axes[0].legend(ncol=2)
for i, (lam, tt) in enumerate(argmins.items()):
    axes[1].semilogx(mu_grid, tt, color=("0.15", "0.6")[i], label=f"$\\lambda$ = {lam}")
    axes[1].axhline(
        tch_optimum(concave_front, lam)[0], color=("0.15", "0.6")[i], ls=":", lw=1
    )
axes[1].set(xlabel=r"$\mu$", ylabel="STCH minimiser $t$ on the front",
            title="dotted: exact TCH solution")
axes[1].legend()
plt.show()

# %% [markdown]
# ## Multi-task learning: the price of one backward pass
#
# The same scalarizations train a network with several task losses. Three regression
# tasks on the same inputs $x \in \mathbb R^8$ share a trunk with a deliberately narrow
# bottleneck (two units), so the tasks must compete for it; each has its own small head.
# We scalarize the *normalised* losses $\tilde\ell_i = \ell_i / \ell_i(\theta_0)$ (so that
# every task starts at 1, the ideal point is $z^* = 0$, and equal preferences
# $\lambda = (\frac13, \frac13, \frac13)$ mean equal relative progress), and train with
# Adam for the same number of full-batch steps:
#
# - **LS**, **TCH** and **STCH** ($\mu = 0.1$, on the normalised losses): one backward pass
#   per step;
# - **MGDA** (Désidéri 2012; Sener and Koltun 2018): one backward pass *per task* to get
#   each task's gradient $G_i$ on the shared weights, then the minimum-norm point of their
#   convex hull, $\alpha = \arg\min_{\alpha \in \Delta_m} \|\sum_i \alpha_i G_i\|^2$, by
#   Frank–Wolfe (Eq. 8, below), and the step follows $\sum_i \alpha_i G_i$.
#
# This is a setting the paper's multi-task experiments (NYUv2, Office, QM9) share at a
# much larger scale. Note that the authors' multi-task code is not the bare Eq. 3: it
# warms up for a few epochs on $\sum_i \log \ell_i$, normalises by the losses at the end
# of the warm-up and applies STCH to log-losses with $\mu = 1$. We implement the paper's
# Eq. 3 on losses normalised by their initial values, and say so.

# %%
MTL_TASKS = 3  # number of regression tasks
MTL_MU = 0.1  # STCH temperature on the normalised losses


def make_mtl_data(n, d, gen):
    """Three regression targets of different shape on shared Gaussian inputs."""
    X = torch.randn(n, d, generator=gen)
    A = torch.randn(MTL_TASKS, d, generator=gen) / math.sqrt(d)
    s = X @ A.T
    Y = torch.stack([torch.sin(2 * s[:, 0]), s[:, 1] ** 2 - 1,
                     2 * torch.tanh(3 * s[:, 2]) + 0.5 * s[:, 0]], dim=1)
    return X, Y


def stacked_linear(n_in, n_out, *lead, gen=None):
    """Weights and biases of independent Linear layers stacked along the leading axes,
    drawn like PyTorch's nn.Linear (uniform in +-1/sqrt(n_in))."""
    bound = 1 / math.sqrt(n_in)
    draw = lambda *shape: nn.Parameter(
        (2 * torch.rand(*shape, generator=gen) - 1) * bound
    )
    return [draw(*lead, n_in, n_out), draw(*lead, 1, n_out)]


class MultiTaskNets(nn.Module):
    """k independent networks, each a shared trunk with a narrow bottleneck and one
    small head per task, stacked along a leading axis so that they train in one
    batch."""

    def __init__(self, k, d_in, width=64, bottleneck=2, tasks=MTL_TASKS, gen=None):
        super().__init__()
        self.trunk = nn.ParameterList(stacked_linear(d_in, width, k, gen=gen)
                                      + stacked_linear(width, bottleneck, k, gen=gen))
        self.heads = nn.ParameterList(
            stacked_linear(bottleneck, width, k, tasks, gen=gen)
            + stacked_linear(width, 1, k, tasks, gen=gen)
        )

    def forward(self, x):
        """x (n, d) -> predictions (k, n, tasks)."""
        w1, b1, w2, b2 = self.trunk
        h = torch.relu(torch.relu(x @ w1 + b1) @ w2 + b2)  # (k, n, bottleneck)
        v1, c1, v2, c2 = self.heads
        out = torch.relu(h[:, None] @ v1 + c1) @ v2 + c2  # (k, tasks, n, 1)
        return out[..., 0].transpose(1, 2)


def task_losses(net, X, Y):
    """Mean squared error of each task in each network, shape (k, tasks)."""
    return ((net(X) - Y) ** 2).mean(dim=1)

# %% [markdown]
# **MGDA's direction.** Each task's gradient $G_i$ on the shared trunk comes from its own
# backward pass; the step follows the minimum-norm point of their convex hull, found by
# Frank–Wolfe: move towards the vertex whose gradient agrees least with the current
# combination, with an exact line search.
#
# $$\alpha \leftarrow (1-\gamma)\,\alpha + \gamma\, e_{j}, \quad j = \arg\min_i (M\alpha)_i,
#   \quad \gamma = \arg\min_{[0,1]} \big\|G^\top\big((1-\gamma)\alpha + \gamma e_j\big)\big\|^2,
#   \quad M = G G^\top. \tag{8}$$

# %%
def min_norm_weights(G, iters=50):
    """Eq. 8: Frank-Wolfe for argmin over the simplex of |sum_i alpha_i G_i|^2, with G
    of
    shape (..., m, p): every leading index is its own problem, solved side by side."""
    # (..., m, m): NumPy is fast at this size
    M = (G @ G.transpose(-1, -2)).double().numpy()
    alpha = np.full(M.shape[:-1], 1.0 / M.shape[-1])
    for _ in range(iters):
        M_alpha = (M @ alpha[..., None])[..., 0]
        d = -alpha.copy()
        np.put_along_axis(d, M_alpha.argmin(-1)[..., None], 1 - np.take_along_axis(
            # direction towards vertex e_j
            alpha, M_alpha.argmin(-1)[..., None], -1), -1)
        curv = (d * (M @ d[..., None])[..., 0]).sum(-1)
        # line search
        gamma = np.clip(-(d * M_alpha).sum(-1) / np.maximum(curv, 1e-20), 0.0, 1.0)
        alpha = alpha + np.where(curv > 1e-20, gamma, 0.0)[..., None] * d
    return torch.as_tensor(alpha, dtype=G.dtype)


def mgda_grads(net, losses):
    """MGDA's update direction for every parameter: one backward pass per task, then the
    min-norm combination (Eq. 8) of the tasks' trunk gradients, network by network."""
    n_trunk, params = len(net.trunk), list(net.trunk) + list(net.heads)
    per_task = [torch.autograd.grad(losses[:, i].sum(), params, retain_graph=True)
                # m backward passes (all k networks at once)
                for i in range(losses.shape[1])]
    k = losses.shape[0]
    G = torch.stack([torch.cat([g.reshape(k, -1) for g in gr[:n_trunk]], dim=1)
                     for gr in per_task], dim=1)  # (k, m, trunk parameters)
    alpha = min_norm_weights(G)  # (k, m)
    grads = []
    for j in range(len(params)):
        if j < n_trunk:
            a = alpha.view(k, len(per_task), *[1] * (params[j].dim() - 1))
            grads.append(sum(a[:, i] * per_task[i][j] for i in range(len(per_task))))
        else:  # a head only feels its own task's loss
            grads.append(sum(gr[j] for gr in per_task))
    return grads

# %% [markdown]
# **One training loop for all four methods.** Every network of a batch (learning rates ×
# restarts) is trained side by side with Adam on the normalised losses; LS, TCH and STCH
# differentiate one scalar (one backward pass), MGDA combines the tasks' gradients by
# Eq. 8 (one backward pass per task).

# %%
def train_mtl(method, X, Y, steps, gen, lrs=(3e-3,), restarts=1, mu_=MTL_MU,
              scalarizer=scalarize):
    """Train len(lrs) x restarts networks with LS / TCH / STCH / MGDA on normalised
    losses, in one batch, with Adam (apply_rule) at each network's learning rate; the
    networks' initial weights are drawn from the torch generator gen.

    Returns the normalised losses per step (steps + 1, networks, tasks), with networks
    ordered lr-major, the seconds of each step and the backward passes per step."""
    net = MultiTaskNets(len(lrs) * restarts, X.shape[1], tasks=Y.shape[1], gen=gen)
    params = list(net.trunk) + list(net.heads)
    lr_k = torch.tensor(lrs).repeat_interleave(restarts)  # (k,)
    lr_p = [lr_k.view(-1, *[1] * (p.dim() - 1)) for p in params]
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    with torch.no_grad():
        l0 = task_losses(net, X, Y)
    lam = torch.full((Y.shape[1],), 1.0 / Y.shape[1])
    hist, seconds, passes = [torch.ones_like(l0)], [], 1
    for t in range(steps):
        t_start = time.perf_counter()
        norm_losses = task_losses(net, X, Y) / l0  # (k, tasks)
        if method == "MGDA":
            grads, passes = mgda_grads(net, norm_losses), Y.shape[1]
        else:
            value = scalarizer(method, norm_losses, lam, mu_).sum()
            grads = torch.autograd.grad(value, params)  # one backward pass
        with torch.no_grad():
            for p, g, st, lr_ in zip(params, grads, state, lr_p):
                apply_rule("adam", p, g, st, lr_, t)
        seconds.append(time.perf_counter() - t_start)
        hist.append(norm_losses.detach())
    with torch.no_grad():
        hist[-1] = task_losses(net, X, Y) / l0  # the losses after the last step
    return torch.stack(hist).numpy(), np.array(seconds), passes

# %% [markdown]
# Every method gets the same data, network, steps and two Adam learning rates, and
# `mtl_restarts` network initialisations per learning rate; a method's score is its mean
# over the restarts at its best learning rate. Two measures of the final normalised losses
# $\tilde\ell$: the **worst task**, $\max_i \tilde\ell_i$ (what TCH and STCH aim at), and
# the **hypervolume** of the loss vector with reference point $(1, 1, 1)$, the volume
# $\prod_i (1 - \tilde\ell_i)$ it dominates, which rewards progress on every task and
# favours no scalarization. All networks of one method train in one batch: each has its
# own weights and its own Adam state, so this is exactly that many separate runs.

# %%
MTL_N = 256  # training examples of the multi-task problem
MTL_LRS = (3e-3, 1e-2)  # Adam learning rates every multi-task method is tried with


def mtl_scores(final):
    """Worst task and hypervolume (reference point 1) of final normalised losses (...,
    m)."""
    return final.max(axis=-1), np.prod(np.clip(1 - final, 0, None), axis=-1)


X_mtl, Y_mtl = make_mtl_data(MTL_N, 8, run.generator("multi-task data"))
R = cfg.mtl_restarts
mtl_runs = {
    # a fresh generator of one stream per method: every method starts from the same
    # networks (a paired comparison)
    m_: train_mtl(m_, X_mtl, Y_mtl, cfg.mtl_steps, run.generator("multi-task init"),
                  MTL_LRS, R)
    for m_ in icmlbook.progress(["LS", "TCH", "STCH", "MGDA"], desc="multi-task")
}
mtl_worst, mtl_hv = {}, {}
for m_, (hist, _, _) in mtl_runs.items():
    worst, hv = mtl_scores(hist[-1].reshape(len(MTL_LRS), R, -1))  # (lrs, restarts)
    # mean over restarts, best lr for each
    mtl_worst[m_] = float(worst.mean(axis=1).min())
    mtl_hv[m_] = float(hv.mean(axis=1).max())
# figure
mtl = {m_: (hist[:, 0], secs, passes) for m_, (hist, secs, passes) in mtl_runs.items()}
step_ms = {
    k: 1e3 * float(np.median(v[1][5:] if len(v[1]) > 10 else v[1]))
    for k, v in mtl.items()
}
print(
    f"{'method':<6} {'backward/step':>13} {'ms/step':>8} {'worst task':>11} {'HV':>7}  "
    f" (mean of {cfg.mtl_restarts} restarts, best of {len(MTL_LRS)} learning rates)"
)
for k, (hist, _, passes) in mtl.items():
    print(
        f"{k:<6} {passes:>13d} {step_ms[k]:>8.2f} {mtl_worst[k]:>11.3f} "
        f"{mtl_hv[k]:>7.3f}"
    )
step_ratio = step_ms["MGDA"] / step_ms["STCH"]
print(
    f"measured step-time ratio MGDA / STCH: {step_ratio:.2f} ({len(MTL_LRS) * R} "
    f"networks of 3 tasks per step; machine load matters)"
)

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(8, 2.8))
for k, (hist, _, _) in mtl.items():
    axes[0].semilogy(hist.max(axis=1), color=COLOURS[k], lw=1, label=k)
axes[0].set(xlabel="step", ylabel="worst normalised task loss")
axes[0].legend()
xs = np.arange(MTL_TASKS)
for i, (k, (hist, _, _)) in enumerate(mtl.items()):
    axes[1].bar(xs + (i - 1.5) * 0.2, hist[-1], width=0.2, color=COLOURS[k], label=k)
axes[1].set(
    xticks=xs,
    xticklabels=[f"task {i + 1}" for i in xs],
    ylabel="final normalised loss",
    title=f"after {cfg.mtl_steps} steps, lr {MTL_LRS[0]:g}",
)
plt.show()

# %% [markdown]
# LS minimises the *average* normalised loss and is free to neglect one task; STCH
# minimises a smoothed *worst* one and spreads the bottleneck more evenly. Hard TCH aims at
# the same target but its subgradient whipsaws between tasks. MGDA's min-norm direction
# is a descent direction for every task, but it stops at the first Pareto-*stationary*
# point it meets, not at a chosen trade-off, and on this network that point is often a
# poor one for some task: its worst task is behind STCH's, and its hypervolume usually is
# (the claims below measure by how much). It also pays one backward pass per task plus the
# small quadratic program: the step-time ratio above grows with the number of tasks (next
# cell) and with the size of the shared network. Timings on a shared CPU are noisy, so
# the chapter reports the ratios but does not assert on them. LS is close to STCH here
# on both measures: on this problem the worst task is not much worse under the plain
# average.

# %% [markdown]
# How does the cost grow with the number of tasks? The same network with $m = 2, 4, 8$
# heads on random targets (the values do not matter for timing), a few steps each, median
# seconds per step. STCH's step stays one forward and one backward pass; MGDA's grows
# with one backward pass per task.

# %%
TASK_COUNTS = (2, 4, 8)  # numbers of tasks for the cost measurement


def ms_per_step(method, n_tasks, steps, gen, n=1024, d=8):
    """Median milliseconds per training step with n_tasks random regression targets
    (data and network drawn from the torch generator gen)."""
    X, Y = torch.randn(n, d, generator=gen), torch.randn(n, n_tasks, generator=gen)
    _, secs, passes = train_mtl(method, X, Y, steps, gen)
    return 1e3 * float(np.median(secs[1:] if len(secs) > 2 else secs)), passes


cost = {method: [ms_per_step(method, k, cfg.cost_steps, run.generator("cost"))
                  for k in TASK_COUNTS]
        for method in ("STCH", "MGDA")}
fig, ax = plt.subplots(figsize=(4.2, 2.6))
for i, (method, rows) in enumerate(cost.items()):
    ax.plot(TASK_COUNTS, [ms for ms, _ in rows], "o-", color=COLOURS[method],
            label=f"{method} ({', '.join(str(p) for _, p in rows)} backward passes)")
ax.set(
    xlabel="number of tasks $m$",
    ylabel="ms per step",
    xticks=TASK_COUNTS,
    ylim=(0, None),
)
ax.legend()
plt.show()
for k, (a, b) in zip(TASK_COUNTS, zip(cost["STCH"], cost["MGDA"])):
    print(
        f"m = {k}: STCH {a[0]:.2f} ms, MGDA {b[0]:.2f} ms per step, ratio "
        f"{b[0] / a[0]:.2f}"
    )
run.metric(
    "ms_per_step_vs_tasks",
    {
        f"{method} m={k}": round(ms, 3)
        for method, rows in cost.items()
        for k, (ms, _) in zip(TASK_COUNTS, rows)
    },
)
# %% [markdown]
# ## Claims
#
# Paper claims first: what the paper says STCH does, each against the strongest
# baseline we could give the same budget, or against STCH with its key ingredient (the
# smoothing) removed. Each says how strong it is: *superiority* (STCH beats the baseline)
# or *non-inferiority* (STCH is no worse up to a stated tolerance, where the paper claims
# better; whether it is also better is recorded beside it). Then checks: what must hold
# if the code is right (the formulas, the closed-form behaviour of LS on a concave front,
# the bound of Eq. 6, the count of backward passes), which is no evidence for the paper.
# Then findings: what the paper states and we measure without claiming it, because it
# does not hold on every seed or goes the other way. Last, the paper's headline claims,
# each graded from the claims and findings that test it by one fixed rule.
#
# The thresholds were set on seeds 0-9 and then frozen; seeds 10-19 confirm them. Three
# claims were changed after a failure, and say so: the convergence claim was first stated
# against TCH at the same Adam step under the name of the subgradient method; once the
# classic subgradient method was tuned and did as well as STCH, the claim was restricted
# to the constant step and the comparison with the tuned method became a finding. The
# multi-task hypervolume bar was raised above parity on early runs and put back at
# "matches" when one seed fell below it. And both multi-task claims failed one
# calibration seed with three restarts per learning rate: each method's score is now the
# mean of eight, a steadier statistic, with the bars unchanged. The claims hold at the default parameters;
# changing `optimizer`, `lr` or `mu` changes what is measured. At the smoke tier they are
# recorded, not enforced.

# %% tags=["thresholds"]
# Thresholds calibrated on seeds 0-9 (named random streams) and frozen before the final
# sweep over seeds 0-19; the paper's verdict follows icmlbook.verdicts' rule, fixed
# before the final sweep.

# distinct STCH solutions of 11; calibrated: 11 on every seed 0-9
C_DISTINCT = 10
# HV of STCH / LS on the concave front; calibrated: 2.005-2.017 on seeds 0-9 (LS: ends)
C_HV_VS_LS = 1.8
# HV of STCH / tuned subgradient TCH, non-inferiority; calibrated: 1.002 on seeds 0-9, a
# value of the method, not the seed (both end on the exact TCH points): the 2 %
# tolerance is many times its spread; no averaging inside the run moves its centre
C_HV_VS_SUB = 0.98
# worst gap STCH / TCH at the same Adam step; changed after failure (the claim narrowed
# to the constant step); 0.09-0.25 on seeds 0-9
C_SMOOTH = 0.5
# multi-task HV of STCH / MGDA, non-inferiority ("matches"); changed after failure
# (raised to 1.1, back at 0.9 when a seed fell below; 8 restarts, not 3, after seed 9
# fell below 0.9); 1.09-1.67 on seeds 0-9
C_MTL_HV = 0.9
# multi-task worst task of STCH / MGDA; changed after failure (mean of 8 restarts, not
# 3, after seed 9 gave 0.82); 0.30-0.58 on seeds 0-9
C_MTL_WORST = 0.8
# LS on a concave front lands on the two endpoints (closed form); 1 to spare
C_LS_DISTINCT = 3
# TCH gap - mu log 2 at mu in BOUND_MUS: Eq. 6 plus the optimizer's error (a priori)
C_BOUND_SLACK = 0.005
C_ROUNDING = 1e-10  # float64 rounding of the identities Eq. 4 and Eq. 5 (a priori)
C_ONE_PASS = 1  # backward passes per STCH step with 8 tasks (fixed by Eq. 4)

# %%
# a ratio of 1: the bar of a claim's strict (superiority) version, a finding's reference
PARITY = 1.0
ls_r, stch_r, tch_r = results["LS"], results[f"STCH mu={mu:g}"], results["TCH"]
run.claim(
    "STCH distinct solutions (of 11)",
    stch_r["distinct"],
    ">=",
    C_DISTINCT,
    "STCH finds a distinct Pareto solution for (almost) every preference, the concave "
    "middle of the front included",
    versus="baseline",
    against="LS with the same update rule, learning rate and steps",
    strength="superiority",
    provenance="calibrated",
)
run.claim(
    "HV ratio STCH / LS",
    stch_r["hv"] / ls_r["hv"],
    ">=",
    C_HV_VS_LS,
    "STCH's solutions cover far more of the concave front than LS's",
    versus="baseline",
    against="LS with the same update rule, learning rate and steps",
    strength="superiority",
    provenance="calibrated",
)
run.claim(
    "HV ratio STCH / tuned subgradient TCH",
    stch_r["hv"] / hv_sub,
    ">=",
    C_HV_VS_SUB,
    "STCH covers the front as well as TCH solved by the classic subgradient method "
    "with its best step size",
    versus="baseline",
    against="TCH, classic subgradient method, step size tuned over LR_GRID",
    strength="non-inferiority",
    provenance="calibrated",
    strict=PARITY,
)
run.claim(
    "same constant step: worst gap STCH / TCH",
    stch_r["max_gap"] / tch_r["max_gap"],
    "<=",
    C_SMOOTH,
    "at the same constant-step optimizer (Adam), learning rate and steps, the smooth "
    "surrogate gets much closer to the TCH optimum than TCH itself",
    versus="ablation",
    against="TCH: the same Adam, learning rate and steps, no smoothing",
    strength="superiority",
    provenance="changed after failure",
)
run.claim(
    "MTL hypervolume STCH / MGDA",
    mtl_hv["STCH"] / mtl_hv["MGDA"],
    ">=",
    C_MTL_HV,
    "on a shared network STCH's final losses dominate at least about as much as "
    "MGDA's, at one backward pass per step instead of m",
    versus="baseline",
    against="MGDA, best of MTL_LRS, mean of the restarts",
    strength="non-inferiority",
    provenance="changed after failure",
    strict=PARITY,
)
run.claim(
    "MTL worst task STCH / MGDA",
    mtl_worst["STCH"] / mtl_worst["MGDA"],
    "<=",
    C_MTL_WORST,
    "STCH's worst task ends clearly below MGDA's",
    versus="baseline",
    against="MGDA, best of MTL_LRS, mean of the restarts",
    strength="superiority",
    provenance="changed after failure",
)

excess = max(sweep[m_]["max_gap"] - m_ * math.log(2) for m_ in BOUND_MUS)

# %%
run.check(
    "LS distinct solutions (of 11)",
    ls_r["distinct"],
    "<=",
    C_LS_DISTINCT,
    "on a concave front LS's minimisers are the endpoints, whatever the preference",
)
run.check(
    "max(TCH gap - mu log 2), mu in {0.01, 0.05, 0.2}",
    excess,
    "<=",
    C_BOUND_SLACK,
    "STCH's solution is within mu log m of the exact TCH optimum (Eq. 6)",
)
run.check("log-sum-exp sandwich (Eq. 5): violation", sandwich_err, "<=", C_ROUNDING,
          "max <= STCH <= max + mu log m on 1000 random vectors")
run.check(
    "autograd vs Eq. 4: max abs difference",
    grad_err,
    "<=",
    C_ROUNDING,
    "the gradient of Eq. 3 is the softmax-weighted sum of the objectives' gradients",
)
run.check(
    "backward passes per STCH step, 8 tasks",
    cost["STCH"][-1][1],
    "<=",
    C_ONE_PASS,
    "STCH needs one backward pass whatever the number of tasks",
);

# %%
run.finding(
    "tuned subgradient gap / best STCH gap",
    sub_best / best_stch,
    ">",
    PARITY,
    paper="gradient methods on the smooth STCH converge faster than the subgradient "
    "method on the non-smooth TCH",
    shows="the worst final TCH gap after the same steps of the classic subgradient "
    "method at its best step size, over that of STCH at its best update rule and step: "
    "above 1 when STCH got closer to the TCH optimum",
)
run.finding(
    "MTL worst task STCH / LS",
    mtl_worst["STCH"] / mtl_worst["LS"],
    "<",
    PARITY,
    paper="STCH does better than linear scalarization in multi-task learning",
    shows="the worst normalised task loss of STCH over LS's, each at its best learning "
    "rate and averaged over restarts: below 1 when STCH's worst task is lower",
)
run.finding(
    "MTL hypervolume STCH / LS",
    mtl_hv["STCH"] / mtl_hv["LS"],
    ">",
    PARITY,
    paper="STCH does better than linear scalarization in multi-task learning",
    shows="the hypervolume of STCH's final losses over LS's, each at its best learning "
    "rate and averaged over restarts: above 1 when STCH's losses dominate more",
)
run.finding(
    "step time MGDA / STCH, 8 tasks",
    cost["MGDA"][-1][0] / cost["STCH"][-1][0],
    ">",
    PARITY,
    paper="STCH has a much lower computational cost than adaptive gradient methods",
    shows="the measured milliseconds per training step of MGDA over STCH's with 8 "
    "tasks (timings on a shared CPU are noisy)",
)

run.headline(
    "all Pareto solutions, non-convex fronts included",
    "STCH 'has good theoretical properties for finding all Pareto solutions with valid "
    "trade-off preferences', including those on non-convex parts of the front that "
    "linear scalarization cannot reach",
    source="Abstract; theory of STCH's Pareto properties",
    claims=["STCH distinct solutions (of 11)", "HV ratio STCH / LS"],
)
run.headline(
    "faster than classic TCH",
    "by smoothing the Tchebycheff scalarization, gradient methods converge faster than "
    "the subgradient method on the non-smooth classic TCH",
    source="convergence analysis of STCH (main text)",
    claims=["same constant step: worst gap STCH / TCH",
            "HV ratio STCH / tuned subgradient TCH"],
    findings=["tuned subgradient gap / best STCH gap"],
)
run.headline(
    "as good as adaptive methods, at far lower cost",
    "a 'lightweight and efficient' method 'enjoying significantly lower computational "
    "complexity compared to other methods', which performs on par with or better than "
    "adaptive gradient methods such as MGDA, and better than linear scalarization, on "
    "multi-task learning",
    source="Abstract; multi-task tables (NYUv2, Office-31/Home, QM9)",
    claims=["MTL hypervolume STCH / MGDA", "MTL worst task STCH / MGDA"],
    findings=["MTL worst task STCH / LS", "MTL hypervolume STCH / LS",
              "step time MGDA / STCH, 8 tasks"],
)
run.metric("classic_subgradient_gap_over_stch", round(float(sub_best / best_stch), 4))
run.metric("tuned_worst_gap", {f"{m_} {rule}": round(float(g.min()), 5)
                               for (m_, rule), g in tuned.items()})
run.metric("distinct", {k: v["distinct"] for k, v in results.items()})
run.metric("hv", {k: round(v["hv"], 5) for k, v in results.items()})
run.metric("max_tch_gap", {k: round(v["max_gap"], 5) for k, v in results.items()})
run.metric("mu_sweep", {f"{m_:g}": dict(distinct=r["distinct"], hv=round(r["hv"], 5),
                                        max_gap=round(r["max_gap"], 5))
                        for m_, r in sweep.items()})
run.metric("mu_jump_symmetric", mu_jump)
run.metric("mtl_worst_task", {k: round(v, 4) for k, v in mtl_worst.items()})
run.metric("mtl_hypervolume", {k: round(v, 4) for k, v in mtl_hv.items()})
run.metric("mtl_ms_per_step", step_ms)
run.metric("mtl_step_time_ratio_mgda_over_stch", round(step_ratio, 3));

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed. The table and strip plot below read this chapter's results
# file, made by `icmlbook sweep 2 --seeds 0-19 --update-results`: every claim, check and
# finding at the default tier over the calibration seeds 0-9 (on which the thresholds
# were set) and the confirmation seeds 10-19 (run once, after the thresholds were
# frozen), with the number of seeds on which each holds, its worst margin (how far
# inside the threshold the worst seed stayed) and the paper's verdict over all of them.

# %%
across = icmlbook.across_seeds(run)

# %% [markdown]
# What did not reproduce, in numbers, on this run: the classic subgradient method with its
# best step size against STCH with its best update rule and step, both after the same
# 300 steps (the finding "tuned subgradient gap / best STCH gap" above). A ratio above 1
# would mean that STCH converged faster; below 1, the subgradient method got closer to
# the TCH optimum.

# %%
print(
    f"classic subgradient method, tuned: worst gap {sub_best:.5f}; STCH, best rule and "
    f"step: {best_stch:.5f}; ratio {sub_best / best_stch:.2f}"
)

# %% [markdown]
# ## What a broken STCH does
#
# A claim check is only worth something if a wrong implementation fails it. A tempting
# "simplification" of Eq. 3 leaves out the division by $\mu$ inside the exponential,
# $\mu \log \sum_i e^{\lambda_i f_i}$. For objectives in $[0, 1]$, $e^{v} \approx 1 + v$,
# so this is almost LS in disguise: it loses the middle of the front and fails the
# distinct-solutions and both hypervolume claims on the concave front. The tests break the
# method in other ways too and check that each broken variant fails its claim: a hard
# argmax in place of the softmax (that is, TCH) fails the constant-step claim; a soft-*min*
# instead of a soft-max fails the two multi-task claims and the bound of Eq. 6; an "LS"
# that secretly sums *squared* objectives reaches the concave part and fails the LS check.

# %%
def stch_missing_temperature(f, lam, mu, z=0.0):
    """A deliberately broken Eq. 3: mu * log sum exp(lam (f - z)), no division by mu."""
    return mu * torch.logsumexp(lam * (f - z), dim=-1)


def scalarize_broken(method, f, lam, mu=0.01, z=0.0):
    """scalarize() with the broken STCH plugged in."""
    return (
        stch_missing_temperature(f, lam, mu, z)
        if method == "STCH"
        else scalarize(method, f, lam, mu, z)
    )


broken = summarise(
    objective_history(
        x0, preferences, "STCH", mu, **setting, scalarizer=scalarize_broken
    )[-1],
    preferences,
    g_star,
)
print(
    f"STCH without 1/mu: {broken['distinct']} distinct solutions, HV "
    f"{broken['hv']:.3f} (LS: {ls_r['hv']:.3f}), max TCH gap {broken['max_gap']:.3f} "
    f"vs. mu log 2 = {mu * math.log(2):.4f}"
)

# %% [markdown]
# ## Explore
#
# The temperature $\mu$ is the knob the paper is about. Pick it, a preference
# $\lambda = (w, 1-w)$, a method, the update rule and its learning rate, the number of
# steps and the problem. The left panel shows the front, the path of the solution in
# objective space from the start (grey dot) to where it lands, in the method's colour
# (blue LS, red TCH, teal STCH), the preference ray and the exact TCH point (circle).
# Then the TCH gap along the way, and the weight on $f_1$ (the softmax $\pi_1$ of Eq. 4
# for STCH, the active objective for TCH, $\lambda_1$ for LS). For STCH the purple star
# marks the exact minimiser of Eq. 3 on the front at the current $\mu$: slide $\mu$ up
# and watch it leave the TCH point (the circle) for an endpoint, the slide from TCH to LS.
# Things to try: LS on the concave front at any $w$; TCH with Adam at a large learning
# rate, then with the `subgradient` rule; STCH at $\mu = 0.001$ with gradient descent
# (`gd`) and lr 0.5 (too sharp for the step: it oscillates like TCH); $\mu = 1$ on the
# concave front (LS again); everything on the convex front.

# %% tags=["hide-input"]
import ipywidgets as W

widget_x0 = x0[0, 0]  # the first starting point of this seed


def update(w, mu_w, method, opt_name, lr_w, steps, problem):
    objectives, front = PROBLEMS[problem]
    lam_np = np.array([w, 1 - w])
    lam_t = torch.tensor(lam_np)
    traj = solve(objectives, lam_t, widget_x0, method, mu_w, opt_name, lr_w, int(steps))
    F = objectives(traj).numpy()  # (T, 2)
    t_star, g_min = tch_optimum(front, lam_np)
    gap = np.maximum(tch_gap(F, lam_np, g_min), 1e-8)
    if method == "STCH":
        weight = stch_weights(torch.tensor(F), lam_t, mu_w)[:, 0].numpy()
    elif method == "TCH":
        weight = (F[:, 0] * lam_np[0] >= F[:, 1] * lam_np[1]).astype(float)
    else:
        weight = np.full(len(F), lam_np[0])
    front_pts = front(np.linspace(-1, 1, 201))
    # fixed layout: faster
    fig, axes = plt.subplots(1, 3, figsize=(9, 3.0), layout="none")
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.16, top=0.9, wspace=0.3)
    draw_front(
        axes[0],
        front_pts,
        F[-1:],
        lam_np[None],
        f"{method} on the {problem} front",
        front(np.array([t_star]))[None, 0],
        label="final point",
        color=COLOURS[method],
    )
    axes[0].plot(F[:, 0], F[:, 1], color=COLOURS[method], lw=0.8, zorder=2)
    axes[0].scatter(F[0, 0], F[0, 1], color="0.5", s=14, zorder=3)
    if method == "STCH":  # where the exact STCH minimiser for this mu sits on the front
        t_mu = stch_argmin_on_front(front, lam_np, [mu_w], np.linspace(-1, 1, 801))[0]
        f_mu = front(t_mu)
        axes[0].scatter(
            f_mu[0],
            f_mu[1],
            marker="*",
            s=70,
            color=icmlbook.plot.PALETTE[4],
            zorder=4,
            label="exact STCH minimiser",
        )
        axes[0].legend(loc="upper right")
    axes[0].set_ylabel("$f_2$")
    # log10 on a linear axis: log axes redraw slowly
    axes[1].plot(np.log10(gap), lw=0.9)
    axes[1].set(xlabel="step", ylabel="log10", title=f"TCH gap (final {gap[-1]:.2g})",
                ylim=(-8.2, 0.5))
    axes[2].plot(weight, lw=0.8, color=COLOURS[method])
    axes[2].set(xlabel="step", title="weight on $f_1$", ylim=(-0.05, 1.05))
    plt.show()


controls = dict(
    w=W.FloatSlider(
        value=0.3, min=0.02, max=0.98, step=0.02, description="w = lambda_1"
    ),
    mu_w=W.FloatLogSlider(
        value=mu, base=10, min=-3, max=0, step=0.25, description="mu"
    ),
    method=W.Dropdown(
        options=["STCH", "TCH", "LS"], value="STCH", description="method"
    ),
    opt_name=W.Dropdown(
        options=["adam", "gd", "subgradient"],
        value=optimizer,
        description="update rule",
    ),
    lr_w=W.FloatLogSlider(
        value=lr, base=10, min=-3, max=np.log10(0.5), step=0.25, description="lr"
    ),
    steps=W.IntSlider(
        value=min(300, cfg.widget_steps_max),
        min=10,
        max=cfg.widget_steps_max,
        step=10,
        description="steps",
    ),
    problem=W.Dropdown(
        options=["concave", "convex"], value="concave", description="problem"
    ),
)
icmlbook.explore(update, controls, run=run)

# %% [markdown]
# ## Paper vs. this book
#
# | | paper | this book |
# |---|---|---|
# | method | STCH, Eq. 9 of the paper (our Eq. 3); TCH and LS as baselines | all three from scratch, with the exact TCH solution as ground truth |
# | non-convex fronts | STCH finds all Pareto solutions for small enough $\mu$; LS cannot | concave front in $d = 10$: STCH at least 10 (`C_DISTINCT`) distinct solutions of 11 and at least 1.8 (`C_HV_VS_LS`) times LS's hypervolume; LS's two endpoints are a check (closed form) |
# | approximation | bias of order $\mu \log m$ | a check: TCH gap at most $\mu \log 2$ + 0.005 (`C_BOUND_SLACK`) at $\mu \in \{0.01, 0.05, 0.2\}$; the jump of the STCH minimiser at $\mu^*$ on one preference |
# | convergence | gradient methods on STCH converge faster than the subgradient method on TCH (rates in the paper) | at the same constant Adam step STCH's worst gap is at most 0.5 (`C_SMOOTH`) of TCH's (ablation claim); STCH's hypervolume is at least 0.98 (`C_HV_VS_SUB`) of the tuned subgradient method's (non-inferiority); against the classic subgradient method (diminishing normalised steps, step size tuned over 13 values) STCH is **not** faster here (a finding); we measure, we do not prove rates |
# | cost | one backward pass, like LS; much cheaper than adaptive gradient methods | a check: one backward pass per step for 8 tasks; timed against MGDA for 2 to 8 tasks (a finding: timings are noisy) |
# | multi-task | NYUv2, Office-31/Home, QM9: STCH reported on par with or better than adaptive methods (MGDA, PCGrad, CAGrad, Nash-MTL and others) and linear scalarization, at lower cost; we compare with the claim, not the tables' numbers | a synthetic 3-task regression with a narrow shared bottleneck; against MGDA only, each method at its best of two Adam learning rates and averaged over restarts: hypervolume at least 0.9 (`C_MTL_HV`) times MGDA's (non-inferiority), worst task at most 0.8 (`C_MTL_WORST`) of MGDA's, at one backward pass per step instead of three; against LS, two findings |
# | Pareto set learning | hypernetwork from $\lambda$ to $x$ on synthetic and engineering problems | not claimed; a small version is exercise 3 |
#
# **Paper coverage.** Each of the paper's main results that carries a claim, and where it
# is tested here (the names are those of the claims, checks and findings above).
#
# | the paper's result | here |
# |---|---|
# | theory: STCH's minimisers are (weakly) Pareto optimal, and for small $\mu$ every Pareto solution is one, non-convex fronts included | tested: "STCH distinct solutions (of 11)", "HV ratio STCH / LS"; the jump at $\mu^*$ shown, not asserted |
# | theory: STCH lies within $\mu \log m$ of TCH | a check: "max(TCH gap - mu log 2), ..." (Eq. 6 is a closed form) |
# | theory: faster convergence than the subgradient method on TCH | tested: "same constant step: worst gap STCH / TCH", "HV ratio STCH / tuned subgradient TCH", finding "tuned subgradient gap / best STCH gap"; rates out of scope |
# | multi-task tables (NYUv2, Office-31/Home, QM9) | stand-in problem: "MTL hypervolume STCH / MGDA", "MTL worst task STCH / MGDA", findings "MTL worst task STCH / LS", "MTL hypervolume STCH / LS"; the other adaptive methods and the benchmarks out of scope (data and compute) |
# | cost against adaptive methods | a check (one backward pass) and the finding "step time MGDA / STCH, 8 tasks" |
# | Pareto set learning (synthetic and engineering problems) | out of scope as a claim; exercise 3 runs a small version |
#
# **What did not reproduce.** The paper's speed-up over the subgradient method holds only
# against TCH run with the same constant step: against the classic subgradient method with
# a tuned, shrinking step, STCH is not faster at our scale (the finding above, against the
# paper on most seeds). Two claims are weaker than the paper's statements: STCH's
# hypervolume is claimed no worse than the tuned subgradient method's and than MGDA's,
# within a tolerance, where the paper reports better (whether it is also better is
# recorded beside each claim). Three claims were changed after a failure (the
# constant-step claim and both multi-task claims, see "Claims"). Against LS, STCH's
# multi-task lead is not on every seed. So the verdict is *partly*: the reach on
# non-convex fronts reproduces in full; the speed and the multi-task comparison in part.
#
# **Notes.**
# - *Which STCH.* We implement the paper's formula (Eq. 3) everywhere. The authors'
#   multi-task code is a stateful variant (a warm-up on $\sum \log \ell_i$, normalisation
#   by the losses at the end of the warm-up, log-losses, $\mu = 1$); our multi-task
#   section normalises by the initial losses instead, with $\mu = 0.1$.
# - *The convergence claim depends on the step rule.* With a constant step (Adam or
#   gradient descent) TCH keeps oscillating at an amplitude set by the learning rate, and
#   STCH's advantage is large. The classic subgradient method shrinks its step and, tuned,
#   reaches the TCH point itself, below STCH's own bias; the paper's faster rate is a
#   worst-case statement for convex problems, and this small smooth problem is far from
#   the worst case. The authors' Pareto-set code compares TCH and STCH with the same Adam
#   and learning rate, as our ablation claim does. A too small $\mu$ for the step size
#   ($\mu = 0.003$ in the sweep) brings the oscillation back: the smoothness constant grows
#   like $1/\mu$.
# - *The hypervolume against the tuned subgradient method* barely moves with the seed:
#   both methods end on the exact TCH points, up to STCH's small bias, so the ratio is a
#   property of the method and its margin to the bar is the tolerance itself; averaging
#   more starting points would not move it.
# - *The gap of the Eq. 6 check* combines the bias of Eq. 6 with the optimizer's error; the
#   allowance `C_BOUND_SLACK` covers the latter. At $\mu = 0.003$ the optimizer's error
#   dominates and we do not include it.
# - *The multi-task claims* are about training losses of a small synthetic problem, not
#   generalisation or the paper's benchmarks, and MGDA is the only adaptive method we
#   implemented. STCH against LS is recorded as two findings, not claimed: the worst task
#   is what STCH optimises, and LS comes close on this problem. The hypervolume bar, first
#   set at the paper's "matches" (within 10 % of MGDA), was raised to 1.1 after early runs
#   and put back at 0.9 when a later seed fell below 1.1: STCH's hypervolume lead over
#   MGDA is large on most seeds but not on all; its lead on the worst task is steadier.

# %% [markdown]
# ## Exercises
#
# Each exercise is followed by a worked solution, folded: the reasoning first, then the
# code that checks it (at a reduced size, said in each), then what the result shows.

# %% [markdown] tags=["exercise"]
# **Exercise 1. Three objectives.** Add $f_3(x) = 1 - e^{-\|x - v\|^2}$ with a unit
# vector $v \perp u$, sample preferences on the 2-simplex, find the exact TCH optimum of
# each preference, and check the $\mu \log 3$ bound of Eq. 6 for STCH at $\mu = 0.01$
# and $0.05$. How close to the TCH optimum does LS get?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 1
# **Reasoning.** Nothing in Eqs. 5 and 6 depends on $m = 2$: a sum of $m$ exponentials
# lies between its largest term and $m$ times it, so the TCH gap of the STCH minimiser is
# at most $\mu \log m = \mu \log 3$. To measure the gap we need $\min_x g^{\mathrm{TCH}}$
# for every preference. Each objective is an increasing function of the distance to one
# anchor ($u$, $-u$ or $v$), and projecting any $x$ onto the triangle
# $T = \mathrm{conv}\{u, -u, v\}$ shortens its distance to every point of $T$, the anchors
# included. So every $x$ is weakly dominated by its projection, the Pareto set is $T$,
# and the minimum of $g^{\mathrm{TCH}}$ over all of $\mathbb R^{10}$ is its minimum over
# $T$: a grid over $T$'s barycentric coordinates, refined three times around its best
# point, gives it far more precisely than the bound needs.
#
# The code uses 28 preferences ($\lambda = 0.02 + 0.94\,b$ for the 28 points $b$ of a
# simplex grid with step $1/6$), the chapter's `ex_starts` starting points, and 300 Adam
# steps at learning rate 0.05, for STCH at both temperatures and for LS.
#
# **What it shows.** STCH's worst gap stays below $\mu \log 3$ at both temperatures, with
# room to spare. LS is far from the TCH optimum for some preferences: with three
# objectives its weighted sum has local minima inside the front (Adam settles in them),
# and none of its solutions sits on the preference rays, whose points are what TCH and
# STCH aim at.
# :::

# %% tags=["solution", "hide-cell"]
def simplex_grid(n):
    """The barycentric points (i, j, n - i - j) / n of the 2-simplex."""
    return np.array([(i, j, n - i - j) for i in range(n + 1) for j in range(n + 1 - i)],
                    dtype=float) / n


v_perp = torch.tensor([(-1.0) ** i for i in range(DIM)], dtype=torch.float64)
ANCHORS = torch.stack([_unit(DIM), -_unit(DIM), v_perp / math.sqrt(DIM)])  # u, -u, v


def three_objectives(x):
    """f_i(x) = 1 - exp(-|x - a_i|^2) for the anchors a = u, -u, v: shape (..., 3)."""
    return 1 - torch.exp(-((x[..., None, :] - ANCHORS) ** 2).sum(-1))


def tch_min_on_triangle(lam, n=60, rounds=3):
    """min over the triangle conv(u, -u, v) of max_i lam_i f_i, for each row of lam:
    a grid, then three finer grids around each preference's best point."""
    best_b = torch.tensor(simplex_grid(n))[None].expand(len(lam), -1, -1)
    g = torch.full((len(lam),), math.inf, dtype=torch.float64)
    offsets, h = torch.tensor(simplex_grid(20)), 1.0 / n
    for _ in range(rounds + 1):
        vals = (lam[:, None] * three_objectives(best_b @ ANCHORS)).max(-1).values
        g = torch.minimum(g, vals.min(1).values)
        centre = best_b[torch.arange(len(lam)), vals.argmin(1)]  # (P, 3)
        local = (offsets - offsets.mean(0)) * 3 * h  # a small grid around the centre
        best_b = (centre[:, None] + local).clamp_min(0)
        best_b = best_b / best_b.sum(-1, keepdim=True)
        h /= 5
    return g.numpy()


lam3 = torch.tensor(0.02 + 0.94 * simplex_grid(6))  # 28 interior preferences
g3_star = tch_min_on_triangle(lam3)
x0_3 = starting_points(run.generator("exercise 1"), cfg.ex_starts, len(lam3))
ex1_gap = {}
for name, method, mu_ in [("LS", "LS", 0.0), ("STCH mu=0.01", "STCH", 0.01),
                          ("STCH mu=0.05", "STCH", 0.05)]:
    F3 = three_objectives(solve(three_objectives, lam3, x0_3, method, mu_ or 0.01,
                                "adam", 0.05, 300)[-1])
    ex1_gap[name] = (float(tch_gap(F3.numpy(), lam3.numpy(), g3_star).max()), mu_)
    print(f"{name:<13} worst TCH gap {ex1_gap[name][0]:.4f}"
          + (f"   mu log 3 = {mu_ * math.log(3):.4f}" if mu_ else ""))
# Eq. 6's allowance for the optimizer's error, as in the chapter's check C_BOUND_SLACK
S_EXCESS = 0.005
icmlbook.solution_check("STCH's worst TCH gap minus mu log 3, worst of the two mu",
                        max(g - m_ * math.log(3) for g, m_ in ex1_gap.values() if m_),
                        "<=", S_EXCESS)

# %% [markdown] tags=["exercise"]
# **Exercise 2. Annealing $\mu$.** Start at $\mu = 0.2$ (smooth) and shrink $\mu$
# geometrically to $0.001$ during the run, once with Adam's constant learning rate 0.05
# and once with a learning rate that shrinks in proportion to $\mu$ (at most 0.05).
# Compare the final worst TCH gap with fixed $\mu \in \{0.2, 0.01, 0.001\}$ at equal
# steps. When does annealing beat both ends of the trade-off, and why?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 2
# **Reasoning.** A fixed $\mu$ trades bias against smoothness: the gap of Eq. 6 grows like
# $\mu$, while the gradient of Eq. 3 is Lipschitz with a constant that grows like $1/\mu$,
# so the step a method can take without oscillating shrinks like $\mu$. Annealing hopes to
# get the best of both: a large $\mu$ early, while far from the front, where only the
# direction matters; a small $\mu$ at the end, where the bias would dominate. But the end
# phase is only as good as its step: with Adam's constant step of 0.05 the last steps, at
# $\mu \approx 0.001$, are far too long for so sharp a function, and the iterate
# oscillates like TCH's. Shrinking the step with $\mu$, $\eta_t = \min(0.05, 5 \mu_t)$,
# keeps every phase within what its smoothness allows.
#
# The code runs 300 Adam steps on the chapter's concave problem and eleven preferences,
# from the chapter's `ex_starts` starting points.
#
# **What it shows.** Annealing with a constant step does not beat the best fixed $\mu$:
# it ends in the oscillation of its smallest $\mu$. Annealing with the step shrunk in
# proportion to $\mu$ beats every fixed temperature, the small ones included: the answer
# to "when" is *when the step follows the temperature*.
# :::

# %% tags=["solution", "hide-cell"]
def solve_annealed(objectives, lam, x0_, mus, lrs, rule="adam"):
    """Minimise Eq. 3 with the temperature mus[t] and learning rate lrs[t] at step t."""
    x = x0_.detach().clone().requires_grad_(True)
    state = (torch.zeros_like(x), torch.zeros_like(x))
    for t, (mu_t, lr_t) in enumerate(zip(mus, lrs)):
        value = stch_scalarization(objectives(x), lam, mu_t).sum()
        (g,) = torch.autograd.grad(value, x)
        with torch.no_grad():
            apply_rule(rule, x, g, state, lr_t, t)
    return objectives(x).detach().numpy()


ex2_x0 = starting_points(run.generator("exercise 2"), cfg.ex_starts)
ex2_steps = 300
annealed_mu = np.geomspace(0.2, 0.001, ex2_steps)
schedules = {f"fixed mu={m_:g}": ([m_] * ex2_steps, [0.05] * ex2_steps)
             for m_ in (0.2, 0.01, 0.001)}
schedules["annealed, step 0.05"] = (annealed_mu, [0.05] * ex2_steps)
schedules["annealed, step ~ mu"] = (annealed_mu, np.minimum(0.05, 5 * annealed_mu))
ex2_gap = {}
for name, (mus_, lrs_) in schedules.items():
    F2 = solve_annealed(concave_objectives, preferences, ex2_x0, mus_, lrs_)
    ex2_gap[name] = float(tch_gap(F2, preferences.numpy(), g_star).max())
    print(f"{name:<20} worst final TCH gap {ex2_gap[name]:.5f}")
best_fixed = min(g for k, g in ex2_gap.items() if k.startswith("fixed"))
# at most half the best fixed temperature's gap (a quarter or less on trial seeds)
S_ANNEAL = 0.5
icmlbook.solution_check("annealed (step ~ mu) / best fixed mu, worst final gap",
                        ex2_gap["annealed, step ~ mu"] / best_fixed, "<=", S_ANNEAL)

# %% [markdown] tags=["exercise"]
# **Exercise 3. Pareto set learning.** Train one small MLP $x = h_\theta(\lambda)$ that
# maps any preference to its solution, minimising Eq. 3 for a fresh batch of
# Dirichlet-sampled preferences at each step (the paper's set-learning experiment, with
# $\mu = 0.01$). Measure the hypervolume of $h_\theta$ on 100 preferences for LS, TCH and
# STCH.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 3
# **Reasoning.** Pareto set learning replaces eleven separate problems by one network:
# the loss is the mean of the scalarized objectives over a batch of preferences, and the
# network learns the whole map $\lambda \mapsto x^*(\lambda)$ at once. Whatever a
# scalarization does per preference it does here too: LS still wants an endpoint for
# every $\lambda$, TCH and STCH want the point on each preference ray. One difference:
# the network is continuous in $\lambda$, so an LS network cannot jump from one endpoint
# to the other; the preferences near the switch land in between, on the Pareto set, and
# give LS some hypervolume it could not get one preference at a time. Training sharpens
# the switch, so that share shrinks with the steps.
#
# The code is much smaller than the paper's set-learning setting: an MLP with two hidden
# layers of 64 units (ReLU), the chapter's Adam at learning rate $3 \cdot 10^{-3}$,
# 16 preferences from Dirichlet(1, 1) per step, `psl_steps` steps, one network per
# method, and the hypervolume of its outputs for 100 evenly spaced preferences.
#
# **What it shows.** STCH's network covers the front clearly better than LS's, and
# about as well as TCH's (on every trial seed a little better, by less than a percent,
# which is why the check below is against LS). LS's network covers far more than LS
# did one preference at a time, through the continuity above.
# :::

# %% tags=["solution", "hide-cell"]
def train_pareto_set(method, steps, width=64, batch=16, lr_=3e-3, mu_=0.01):
    """An MLP from a preference (w, 1 - w) to x, trained on Eq. 1, 2 or 3 averaged over
    Dirichlet-sampled preferences (drawn from the global generator); returns it."""
    net = nn.Sequential(nn.Linear(2, width), nn.ReLU(), nn.Linear(width, width),
                        nn.ReLU(), nn.Linear(width, DIM)).double()
    params = list(net.parameters())
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    dirichlet = torch.distributions.Dirichlet(torch.ones(2, dtype=torch.float64))
    for t in range(steps):
        lam = dirichlet.sample((batch,))
        loss = scalarize(method, concave_objectives(net(lam)), lam, mu_).mean()
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g, st in zip(params, grads, state):
                apply_rule("adam", p, g, st, lr_, t)
    return net


w_eval = torch.linspace(0.01, 0.99, 100, dtype=torch.float64)
lam_eval = torch.stack([w_eval, 1 - w_eval], dim=1)
psl_hv = {}
for method in ("LS", "TCH", "STCH"):
    # the same initial network and preferences for every method
    run.reseed("exercise 3")
    psl_net = train_pareto_set(method, cfg.psl_steps)
    with torch.no_grad():
        F_psl = concave_objectives(psl_net(lam_eval))
    psl_hv[method] = hypervolume_2d(F_psl.numpy())
    print(f"{method:<5} hypervolume of the learned set: {psl_hv[method]:.4f}")
print(f"whole front: {hv_true:.4f}")
# STCH above LS by at least 3 % (4.5 % after 200 steps, 11 % after 500 on trial seeds)
S_PSL = 1.03
icmlbook.solution_check("Pareto set learning: HV of STCH / HV of LS",
                        psl_hv["STCH"] / psl_hv["LS"], ">=", S_PSL)

# %% [markdown]
# ## References
#
# - X. Lin, X. Zhang, Z. Yang, F. Liu, Z. Wang, Q. Zhang. Smooth Tchebycheff Scalarization
#   for Multi-Objective Optimization. ICML 2024.
# - K. Miettinen. Nonlinear Multiobjective Optimization. Springer, 1999 (LS, TCH and their
#   reach on non-convex fronts).
# - Y. Nesterov. Smooth minimization of non-smooth functions. Mathematical Programming,
#   2005 (smoothing a max at temperature $\mu$).
# - J.-A. Désidéri. Multiple-gradient descent algorithm (MGDA) for multiobjective
#   optimization. Comptes Rendus Mathématique, 2012.
# - O. Sener, V. Koltun. Multi-Task Learning as Multi-Objective Optimization. NeurIPS 2018.
# - E. Zitzler, L. Thiele. Multiobjective optimization using evolutionary algorithms: a
#   comparative case study. PPSN 1998 (the hypervolume indicator).

# %% tags=["remove-cell"]
run.finish();
