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
# # Reversing the triggers of backdoored diffusion models
#
# **Paper.** Yichuan Mo, Hui Huang, Mingjie Li, Ang Li, Yisen Wang. *TERD: A Unified
# Framework for Safeguarding Diffusion Models Against Backdoors.* ICML 2024, PMLR 235.
# [PMLR](https://proceedings.mlr.press/v235/mo24a.html) ·
# [arXiv 2409.05294](https://arxiv.org/abs/2409.05294) ·
# [code](https://github.com/PKU-ML/TERD).
#
# **The problem.** A backdoored diffusion model samples normal images from Gaussian
# noise, but when the noise carries a *trigger* (a fixed pattern added to it) it
# produces an image the attacker chose. The defender gets the model, not the trigger,
# not the target and not the training data.
#
# **The idea.** Every known attack shifts (and possibly scales) the input noise:
# poisoned noise is $\mathcal N(\mu, \gamma^2 I)$ instead of $\mathcal N(0, I)$. From
# this unified model TERD derives a *reversed loss* that can be computed without knowing
# the target, because the target cancels in a difference of two noisy copies. It
# minimises that loss over $\mu$ in two stages: a rough estimate from surrogate images,
# then a refinement through a differentiable few-step sampler. With the reversed
# trigger it detects poisoned *inputs* by a likelihood ratio in noise space, and
# backdoored *models* by the KL divergence of the reversed distribution from
# $\mathcal N(0, I)$.
#
# **The claim.** In the paper's words (abstract): a trigger reversion strategy, "an
# initial approximation of the trigger through noise sampled from a prior
# distribution, followed by refinement through differential multi-step samplers";
# "the first backdoor input detection approach for diffusion models and a novel model
# detection algorithm that calculates the KL divergence between reversed and benign
# distributions"; and "TERD secures a 100% True Positive Rate (TPR) and True Negative
# Rate (TNR) across datasets of varying resolutions", with "nice adaptability" to
# SDE-based models. Each headline is tested here against doing nothing (the
# untouched starting trigger), against Elijah, an earlier trigger-inversion
# defence, and against the plain denoising loss where that ablation is fair; the
# paper's verdict, by a rule fixed before the runs, is printed with the claims.
#
# **What stands in for the paper, and what is ours.** The paper backdoors DDPMs on
# CIFAR-10 and CelebA-HQ with BadDiffusion and TrojDiff. Here the images are the 8×8
# handwritten digits that ship with scikit-learn, the diffusion model is a small
# residual MLP with $T = 100$ steps, and we backdoor it ourselves with BadDiffusion's
# poisoning loss: a benign model is trained first, then copies are fine-tuned at a
# high poison rate (BadDiffusion's own recipe is fine-tuning too). The triggers follow
# BadDiffusion's style (a background of $-1$ with a box of 0) and the targets are
# off-data patterns; every model is a real backdoored diffusion model, only small. Only
# BadDiffusion is reproduced, so $\gamma = 1$ is known and only $\mu$ is reversed. Four
# things are ours, not the paper's: TERD's first stage is restarted from a few random
# initialisations and the restart with the lowest refinement loss is kept (one run
# from one initialisation can end in the wrong basin at this scale; how often is
# recorded); input detection is scored by its exact error rates; the
# threshold of model detection, which the paper's code does not fix, is calibrated on
# the benign models; and the equation numbers are this chapter's.

# %% tags=["parameters"]
tier = "default"  # smoke | default | full: size of the experiment
seed = 0  # drives every random number in the chapter
poison_rate = 0.7  # fraction of each fine-tuning batch that is poisoned (BadDiffusion)
lam = 5e-5  # weight of the -lambda ||mu||_1 term of the reversion objective
restarts = 4  # stage-1 restarts of the reversion (the paper: 1)
refine_iters = 100  # stage-2 iterations through the differentiable sampler

# %% tags=["validate"]
from icmlbook import check_int, check_range, check_seed, check_tier

check_tier(tier)
check_seed(seed)
check_range("poison_rate", poison_rate, 0.05, 0.95)
check_range("lam", lam, 0.0, 0.05)
check_int("restarts", restarts, 1, 12)
check_int("refine_iters", refine_iters, 0, 600)

# %% [markdown]
# ## Setup
#
# The tier sets the training length of the benign model and of its fine-tuned copies,
# and the length of the reversion. The full tier (3000 + 3000 training steps, 1000
# stage-1 and 300 refinement iterations; the paper's scripts run 3000 and 1000) runs on
# the CPU in several minutes; nothing in it needs a GPU. No trained model is cached:
# every tier trains its own.

# %%
import functools
import math

import numpy as np
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import icmlbook
from icmlbook.diffusion import Schedule
from icmlbook.nn import Adam

run = icmlbook.start("11_diffusion_backdoors", tier=tier, seed=seed,
                     params=dict(poison_rate=poison_rate, lam=lam, restarts=restarts,
                                 refine_iters=refine_iters))
icmlbook.use_style()
cfg = run.pick(
    smoke=dict(pre_steps=40, ft_steps=40, batch=32, hidden=32, it1=6, it2_scale=1,
               it2_cap=2, b1=4, b2=2, n_detect=200, n_gen=8, n_geom=16, elijah_steps=5,
               widget_it1=3),
    default=dict(pre_steps=1500, ft_steps=1500, batch=96, hidden=128, it1=300,
                 it2_scale=1, it2_cap=None, b1=8, b2=8, n_detect=2000, n_gen=64,
                 n_geom=128, elijah_steps=100, widget_it1=100),
    full=dict(pre_steps=3000, ft_steps=3000, batch=128, hidden=128, it1=1000,
              it2_scale=3, it2_cap=None, b1=16, b2=16, n_detect=2000, n_gen=128,
              n_geom=256, elijah_steps=100, widget_it1=100),
)
it2 = min(refine_iters * cfg.it2_scale, cfg.it2_cap or math.inf)  # stage-2 iterations
T = 100  # diffusion steps
SCHED = Schedule.linear(T, beta_min=1e-3, beta_max=0.2)  # DDPM's schedule, rescaled
D = 64  # 8 x 8 pixels
LR_PRE, LR_FT = 2e-3, 4e-3  # Adam, cosine-decayed to 5 %
LR_REV, CLIP_REV = 0.5, 0.01  # TERD's SGD step and stage-2 gradient clip
DDIM_STEPS = 10  # TERD's differentiable sampler
N_BENIGN_FT = 2  # benign fine-tuned copies (the benign base model is a third)
STYLE = icmlbook.method_styles(
    "TERD", "plain loss (ablation)", "Elijah", "doing nothing", "true trigger",
    "Bayes bound")
print(f"tier {tier}: benign model {cfg.pre_steps} steps, fine-tuned copies "
      f"{cfg.ft_steps} steps at poison rate {poison_rate}; reversion {restarts} x "
      f"{cfg.it1} + {it2} iterations")

# %% [markdown]
# One colour per method in every figure: TERD in blue, its ablation with the plain
# denoising loss in red, the Elijah baseline in teal, doing nothing (the untouched
# starting trigger) in amber, the true trigger in purple and the Bayes bound in grey.
#
# ## The idea in math
#
# **A diffusion model.** With $\bar\alpha_t = \prod_{s \le t}(1 - \beta_s)$, the
# forward process noises an image $x_0$ as
# $x_t = \sqrt{\bar\alpha_t}\, x_0 + \sqrt{1 - \bar\alpha_t}\, \epsilon$, and a network
# $\epsilon_\theta(x_t, t)$ is trained to predict $\epsilon$. Sampling runs the chain
# backwards from $x_T \sim \mathcal N(0, I)$.
#
# **The unified threat model.** A backdoored model maps poisoned noise to the target:
#
# $$x_T \sim \mathcal N(0, I) \;\mapsto\; \text{clean images}, \qquad
#   x_T \sim \mathcal N(\mu, \gamma^2 I) \;\mapsto\; y \ (\text{the target}). \tag{1}$$
#
# BadDiffusion has $\gamma = 1$ and $\mu = r$, the trigger; TrojDiff has $\gamma < 1$.
#
# How a backdoor is planted (BadDiffusion's poisoning, Eqs. 2 and 3) comes with the
# code that plants it, below.

# %% [markdown]
# ## From scratch
#
# ### Data, triggers and targets
#
# The 8×8 digits, scaled to $[-1, 1]$, read by `icmlbook.digits()` from scikit-learn's data
# folder (importing scikit-learn itself would cost more than a second). A trigger is a
# background of $-1$ with a 3×3 box of 0 ($\|r\| = \sqrt{55} \approx 7.4$); the three
# targets (an X, a filled corner, a frame) look like no digit.

# %%
def load_digits():
    """The 1797 scikit-learn digits as a (1797, 64) tensor in [-1, 1]."""
    return torch.tensor(icmlbook.digits()[0], dtype=torch.float32) / 8 - 1


def box_trigger(row, col, size=3):
    """BadDiffusion-style trigger: -1 everywhere except a size x size box of 0."""
    r = -torch.ones(8, 8)
    r[row:row + size, col:col + size] = 0
    return r.flatten()


def targets():
    """Three off-data targets: an X, a filled corner, a frame (+1 on -1)."""
    i = torch.arange(8)
    x, corner, frame = -torch.ones(3, 8, 8)
    x[i, i], x[i, 7 - i] = 1, 1
    corner[:3, :3] = 1
    frame[[0, 7]], frame[:, [0, 7]] = 1, 1
    return torch.stack([x.flatten(), corner.flatten(), frame.flatten()])


# %% [markdown]
# ### A bank of small ε-networks
#
# Model detection needs several benign and several backdoored models. We train them
# side by side: one bank holds $M$ residual MLPs with separate weights, applied to a
# batch of shape $(M, N, 64)$ with batched matrix products. The loss of the bank is the
# sum of the models' losses, so each model's gradient is its own, and Adam, which acts
# coordinate by coordinate, updates each model exactly as if it were trained alone.

# %%
class EpsBank(nn.Module):
    """M residual eps-MLPs with separate weights: x (M, N, D), t (M, N) or (M,)."""

    def __init__(self, M, hidden=128, blocks=2, n_freq=8):
        super().__init__()
        freqs = math.pi * 2.0 ** torch.arange(n_freq, dtype=torch.float32) / 4
        self.register_buffer("freqs", freqs)

        def weight(fan_in, fan_out, scale=1.0):
            return nn.Parameter(scale * torch.randn(M, fan_in, fan_out) / fan_in ** 0.5)

        self.w_in = weight(D + 2 * n_freq, hidden)
        self.w1 = nn.ParameterList([weight(hidden, hidden) for _ in range(blocks)])
        self.w2 = nn.ParameterList([weight(hidden, hidden, 0.1) for _ in range(blocks)])
        self.wt = nn.ParameterList([weight(2 * n_freq, hidden) for _ in range(blocks)])
        self.b = nn.ParameterList([nn.Parameter(torch.zeros(M, 1, hidden))
                                   for _ in range(1 + 2 * blocks)])
        self.w_out = weight(hidden, D, 0.1)

    def forward(self, x, t):
        tt = (t.float() / T)[..., None] * self.freqs
        emb = torch.cat([tt.sin(), tt.cos()], -1)
        h = torch.baddbmm(self.b[0], torch.cat([x, emb], -1), self.w_in)
        for k, (w1, w2, wt) in enumerate(zip(self.w1, self.w2, self.wt)):
            u = F.silu(torch.baddbmm(self.b[1 + 2 * k], F.silu(h), w1) + emb @ wt)
            h = h + torch.baddbmm(self.b[2 + 2 * k], u, w2)
        return F.silu(h) @ self.w_out

    @property
    def M(self):
        return self.w_in.shape[0]


def copies(base, M):
    """A bank of M copies of model 0 of ``base``, the start of fine-tuning."""
    bank = EpsBank(M, hidden=base.w_in.shape[-1])
    with torch.no_grad():
        for p, q in zip(bank.parameters(), base.parameters()):
            p.copy_(q[:1].expand_as(p))
    return bank


# %% [markdown]
# ### BadDiffusion's poisoned loss (Eqs. 2 and 3)
#
# **BadDiffusion's poisoning.** Poisoned samples diffuse from the target $y$ towards the
# trigger,
#
# $$x_t = \sqrt{\bar\alpha_t}\, y + (1 - \sqrt{\bar\alpha_t})\, r
#   + \sqrt{1 - \bar\alpha_t}\, \epsilon, \tag{2}$$
#
# and matching the model's reverse mean to this chain's posterior mean gives the
# network's poisoned regression target ($\alpha_t = 1 - \beta_t$):
#
# $$\epsilon_\theta(x_t, t) \approx \epsilon + R_t\, r, \qquad
#   R_t = \frac{(1 - \sqrt{\alpha_t})\sqrt{1 - \bar\alpha_t}}{1 - \alpha_t}. \tag{3}$$
#
# Each model $m$ of the bank has its own poison rate, trigger and target; a benign
# model has poison rate 0. In a batch, a poisoned sample replaces the clean forward
# process by Eq. 2 and the regression target $\epsilon$ by Eq. 3.

# %%
ALPHA, SIGMA = SCHED.alpha, SCHED.sigma  # sqrt(alpha_bar_t), sqrt(1 - alpha_bar_t)


def cosine(lr, i, n):
    """A step size decayed from lr to 0 along half a cosine over n steps."""
    return 0.5 * lr * (1 + math.cos(math.pi * i / n))


STEP_ALPHA = 1 - SCHED.betas.float()  # alpha_t
R_COEF = (1 - STEP_ALPHA.sqrt()) * SIGMA / (1 - STEP_ALPHA)  # Eq. 3's R_t


def poisoned_batch(x0, t, eps, poisoned, trigger, target):
    """Eqs. 2-3: noised inputs and eps-targets, clean where ``poisoned`` is 0."""
    a, s = ALPHA[t][..., None], SIGMA[t][..., None]
    x_clean = a * x0 + s * eps
    x_poison = a * target[:, None] + (1 - a) * trigger[:, None] + s * eps  # Eq. 2
    x = torch.where(poisoned, x_poison, x_clean)
    goal = eps + poisoned * R_COEF[t][..., None] * trigger[:, None]  # Eq. 3
    return x, goal


def train_bank(bank, data, steps, batch, lr, rates, triggers, targets_, gen):
    """Adam on the (poisoned) denoising loss, all models at once; returns losses."""
    opt = Adam(bank.parameters(), lr=lr)
    M, losses = bank.M, []
    for i in icmlbook.progress(range(steps), desc=f"training {M} model(s)"):
        opt.lr = 0.05 * lr + cosine(0.95 * lr, i, steps)  # cosine decay to 5 %
        x0 = data[torch.randint(0, len(data), (M, batch), generator=gen)]
        t = torch.randint(0, T, (M, batch), generator=gen)
        eps = torch.randn(M, batch, D, generator=gen)
        poisoned = torch.rand(M, batch, 1, generator=gen) < rates[:, None, None]
        x, goal = poisoned_batch(x0, t, eps, poisoned, triggers, targets_)
        loss = ((bank(x, t) - goal) ** 2).mean((1, 2)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item() / M)
    bank.requires_grad_(False)
    return np.array(losses)


# %% [markdown]
# ### Two samplers
#
# Generations are drawn with DDPM's ancestral sampler (Ho et al., 2020, Alg. 2), all
# 100 steps from $x_T$ down,
#
# $$x_{t-1} = \frac{1}{\sqrt{1-\beta_t}}\Big(x_t - \frac{\beta_t}{\sqrt{1-\bar\alpha_t}}
#   \,\epsilon_\theta(x_t, t)\Big) + \sqrt{\beta_t}\, z, \qquad z \sim \mathcal N(0, I)
#   \ (z = 0 \text{ at the last step}).$$
#
# TERD's refinement differentiates through a 10-step DDIM sampler
# ($\eta = 0$, steps $t = 90, 80, \dots, 0$). As in the diffusers library TERD builds
# on, the DDIM sampler clips its prediction of $x_0$ to $[-1, 1]$ at every step and
# recomputes $\epsilon$ from the clipped $x_0$. Without clipping it diverges on
# BadDiffusion's inputs: the model answers $\epsilon + R_t r$, not a true noise, so
# the unclipped $\hat x_0 = (x_t - \sqrt{1-\bar\alpha_t}\,\epsilon_\theta)
# /\sqrt{\bar\alpha_t}$ at $t \approx T$ is huge.

# %%
DDIM_T = torch.arange(T - T // DDIM_STEPS, -1, -(T // DDIM_STEPS))  # 90, 80, ..., 0


def ddim(bank, x, clip=True):
    """Differentiable DDIM (eta = 0) from x (M, N, D) at t = 90 down to x_0."""
    for i, t in enumerate(DDIM_T.tolist()):
        eps = bank(x, torch.full(x.shape[:-1], t))
        x0 = (x - SIGMA[t] * eps) / ALPHA[t]
        if clip:
            x0 = x0.clamp(-1, 1)
            eps = (x - ALPHA[t] * x0) / SIGMA[t]
        if i + 1 == len(DDIM_T):
            return x0
        t_next = int(DDIM_T[i + 1])
        x = ALPHA[t_next] * x0 + SIGMA[t_next] * eps


def ancestral(bank, x, gen):
    """DDPM's ancestral sampler from x = x_T (M, N, D) down to x_0."""
    betas, abar = SCHED.betas.float(), SCHED.alpha_bar.float()
    for t in reversed(range(T)):
        eps = bank(x, torch.full(x.shape[:-1], t))
        x = (x - betas[t] / (1 - abar[t]).sqrt() * eps) / (1 - betas[t]).sqrt()
        if t > 0:
            x = x + betas[t].sqrt() * torch.randn(x.shape, generator=gen)
    return x


def generate(bank, x_T, sampler, gen):
    """Images from noise x_T (M, N, D): 'ancestral', 'DDIM clipped' or 'unclipped'."""
    with torch.no_grad():
        if sampler == "ancestral":
            return ancestral(bank, x_T, gen)
        return ddim(bank, x_T, clip=sampler == "DDIM clipped")


# %% [markdown]
# ### The reversed loss
#
# Take a clean image $x_0$, two independent noises $\epsilon_1, \epsilon_2$, a step $t$
# and a candidate trigger $\mu$, and form two noisy copies of the same image:
# $x_t^{(i)} = \sqrt{\bar\alpha_t}\, x_0 + \sqrt{1-\bar\alpha_t}\,\epsilon_i + c_t\,\mu$.
# TERD's reversed loss compares the model's two residuals:
#
# $$\mathcal L(\mu; x_0, t) = \tfrac12\, \mathbb E
#   \big\|\big(\epsilon_1 - \epsilon_\theta(x_t^{(1)}, t)\big)
#   - \big(\epsilon_2 - \epsilon_\theta(x_t^{(2)}, t)\big)\big\|_2^2 . \tag{4}$$
#
# **Why the unknown target cancels.** If $\mu$ is the trigger, the backdoored model
# ignores where its input noise came from and answers Eq. 3,
# $\epsilon_\theta(x_t^{(i)}) = \epsilon_i + R_t r$: each residual is $-R_t r$, the
# same for both noises, and the difference is 0. More generally, whenever the model
# "knows" the image it is heading to, whatever that is, its prediction is the true noise
# plus a term that does not depend on the noise, and that term cancels. Neither the
# target $y$ nor the attack's coefficient $R_t$ appears in Eq. 4: that is what makes the
# loss *accessible* to a defender. On clean data the model cannot know the image exactly
# (many digits are compatible with a noisy input), the residuals depend on the noise,
# and $\mathcal L > 0$. A plain denoising loss $\frac12\|\epsilon - \epsilon_\theta\|^2$
# has no such cancellation: at the trigger it is $\frac12 R_t^2\|r\|^2$, not 0.

# %%
def reversed_loss(bank, mu, x0, t, with_mu, gen):
    """Eq. 4 for candidates mu (M, R, D) on images x0 (M, R, B, D): (M, R)."""
    e1, e2 = torch.randn(x0.shape, generator=gen), torch.randn(x0.shape, generator=gen)
    a, s = ALPHA[t][..., None], SIGMA[t][..., None]
    shift = mu[:, :, None] if with_mu else 0.0
    x1, x2 = a * x0 + s * e1 + shift, a * x0 + s * e2 + shift
    flat = (bank.M, -1, D)
    out1 = bank(x1.reshape(flat), t.reshape(bank.M, -1)).reshape(x0.shape)
    out2 = bank(x2.reshape(flat), t.reshape(bank.M, -1)).reshape(x0.shape)
    return 0.5 * ((e1 - out1) - (e2 - out2)).pow(2).sum(-1).mean(-1)


def plain_loss(bank, mu, x0, t, with_mu, gen):
    """The ablation: the plain denoising loss 1/2 ||eps - eps_theta||^2, (M, R)."""
    e1 = torch.randn(x0.shape, generator=gen)
    a, s = ALPHA[t][..., None], SIGMA[t][..., None]
    x1 = a * x0 + s * e1 + (mu[:, :, None] if with_mu else 0.0)
    out = bank(x1.reshape(bank.M, -1, D), t.reshape(bank.M, -1)).reshape(x0.shape)
    return 0.5 * (e1 - out).pow(2).sum(-1).mean(-1)


# %% [markdown]
# ### Stage 1: trigger estimation from surrogate images
#
# The defender has no clean images. Near the end of the chain the image hardly matters
# ($\sqrt{\bar\alpha_t} \approx 0$), so stage 1 uses surrogate images
# $x_0 \sim \mathcal N(0, I)$ at $t \in \{T-10, \dots, T-1\}$, where the coefficient of
# the trigger is taken to be $c_t = 1$, and minimises
#
# $$\min_\mu\; \mathbb E_{x_0 \sim \mathcal N(0, I),\, t \ge T-10}\,
#   \mathcal L(\mu; x_0, t) - \lambda \|\mu\|_1 , \tag{5}$$
#
# by SGD (step 0.5, cosine-decayed) from $\mu \sim -\mathcal U[0, 1)^d$. The *minus*
# sign of the $\ell_1$ term pushes $\mu$ away from the trivial answer $\mu = 0$ (where
# every model predicts its input noise well).

# %%
def stage1_objective(bank, mu, batch, gen, loss=reversed_loss):
    """Eq. 5's expectation: surrogate images, t in the last ten steps, (M, R)."""
    x0 = torch.randn(*mu.shape[:2], batch, D, generator=gen)
    t = torch.randint(T - 10, T, (*mu.shape[:2], batch), generator=gen)
    return loss(bank, mu, x0, t, True, gen)


def estimate(bank, mu, iters, batch, lam, gen, loss=reversed_loss):
    """Stage 1 (Eq. 5): SGD from mu (M, R, D); returns the estimates."""
    mu = mu.clone().requires_grad_(True)
    for i in range(iters):
        obj = stage1_objective(bank, mu, batch, gen, loss) - lam * mu.abs().sum(-1)
        (grad,) = torch.autograd.grad(obj.sum(), mu)
        with torch.no_grad():
            mu -= cosine(LR_REV, i, iters) * grad
    return mu.detach()


# %% [markdown]
# ### Stage 2: refinement through the sampler
#
# Stage 2 replaces the surrogate images by the model's own generations from the current
# trigger, $x_0 = \mathrm{DDIM}_{10}(\epsilon + \mu)$, with gradients flowing through
# the sampler, and adds the small-$t$ end of the chain, where the trigger's coefficient
# is 0:
#
# $$\min_\mu\; \tfrac12\Big[\mathbb E_{t \ge T-10}\,\mathcal L(\mu; x_0, t)\big|_{c_t=1}
#   + \mathbb E_{t < 10}\,\mathcal L(\mu; x_0, t)\big|_{c_t=0}\Big]
#   - \lambda\|\mu\|_1, \quad x_0 = \mathrm{DDIM}_{10}(\epsilon + \mu). \tag{6}$$
#
# If $\mu$ is the trigger, the generations collapse onto the target, the model is sure
# of the image at small $t$ as well, and both terms vanish. TERD clips the gradient
# norm to 0.01 in this stage, so it refines and does not wander.

# %%
def refine_objective(bank, mu, batch, gen, loss=reversed_loss):
    """Eq. 6's bracket for mu (M, R, D), a fresh batch of generations: (M, R)."""
    noise = torch.randn(*mu.shape[:2], batch, D, generator=gen)
    x0 = ddim(bank, (noise + mu[:, :, None]).reshape(bank.M, -1, D))
    x0 = x0.reshape(noise.shape)
    t_hi = torch.randint(T - 10, T, noise.shape[:-1], generator=gen)
    t_lo = torch.randint(0, 10, noise.shape[:-1], generator=gen)
    return 0.5 * (loss(bank, mu, x0, t_hi, True, gen)
                  + loss(bank, mu, x0, t_lo, False, gen))


def refine(bank, mu, iters, batch, lam, gen, loss=reversed_loss, history=None):
    """Stage 2 (Eq. 6): clipped SGD through the sampler; records mu if asked."""
    mu = mu.clone().requires_grad_(True)
    for i in range(iters):
        obj = refine_objective(bank, mu, batch, gen, loss) - lam * mu.abs().sum(-1)
        (grad,) = torch.autograd.grad(obj.sum(), mu)
        scale = (CLIP_REV / grad.norm(dim=-1, keepdim=True).clamp_min(1e-12))
        with torch.no_grad():
            mu -= cosine(LR_REV, i, iters) * grad * scale.clamp(max=1.0)
        if history is not None:
            history.append(mu.detach().clone())
    return mu.detach()


def fixed_refine_loss(bank, mu, batch, make_gen, loss=reversed_loss):
    """Eq. 6's bracket for candidates mu (M, R, D), each with the same draws: every
    candidate gets a fresh generator from ``make_gen()``, the same stream."""
    with torch.no_grad():
        return torch.cat([
            refine_objective(bank, mu[:, j:j + 1], batch, make_gen(), loss)
            for j in range(mu.shape[1])], 1)


# %% [markdown]
# ### TERD, with restarts
#
# A stage-1 run can end near the trigger or shrink towards 0, depending on its
# initialisation. We run `restarts` of them side by side, keep for each model the one
# whose refinement loss (Eq. 6, fixed noise) is lowest, and refine only that one. The
# selection uses nothing the defender lacks. The ablation runs the same procedure with
# the plain denoising loss in place of Eq. 4 everywhere.

# %%
def reverse_trigger(bank, init, gen, select_gen, lam, it1, it2, b1, b2,
                    loss=reversed_loss, history=None, stage1=None):
    """Two-stage reversion of one trigger per model from init (M, R, D) -> (M, D).
    ``select_gen()`` gives the common noise of the selection; ``stage1``, a list,
    receives the R stage-1 estimates if given."""
    mu1 = estimate(bank, init, it1, b1, lam, gen, loss)
    if stage1 is not None:
        stage1.append(mu1)
    scores = fixed_refine_loss(bank, mu1, 4 * b2, select_gen, loss)
    best = mu1[torch.arange(bank.M), scores.argmin(1)][:, None]
    if history is not None:
        history.append(best.clone())
    return refine(bank, best, it2, b2, lam, gen, loss, history)[:, 0]


# %% [markdown]
# ### The baseline: Elijah
#
# Elijah (An et al., AAAI 2024) inverts a BadDiffusion trigger from the last step
# alone: a trigger shifts the model's mean prediction at $t = T$ in proportion to
# itself,
#
# $$\min_\tau\; \big\|\,\mathbb E_\epsilon\, \epsilon_\theta(\epsilon + \tau, T)
#   - \lambda_E\, \tau\,\big\|_1, \tag{7}$$
#
# with $\lambda_E = 0.5$ (close to BadDiffusion's $R_T$), Adam with step 0.1 for 100
# steps, 100 noises per step, from the same $-\mathcal U[0,1)$ initialisation as TERD.

# %%
def elijah(bank, tau, steps, gen, lam_e=0.5, batch=100, lr=0.1):
    """Eq. 7 by Adam from tau (M, D)."""
    tau = tau.clone().requires_grad_(True)
    opt = Adam([tau], lr=lr)
    t_end = torch.full((bank.M, batch), T - 1)
    for _ in range(steps):
        eps = torch.randn(bank.M, batch, D, generator=gen)
        mean_out = bank(eps + tau[:, None], t_end).mean(1)
        loss = (mean_out - lam_e * tau).abs().sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return tau.detach()


# %% [markdown]
# ### Input detection: a likelihood ratio in noise space
#
# With the reversed trigger $\hat\mu$ (and $\gamma = 1$), an input noise $x$ is flagged
# as poisoned when it is likelier under the reversed distribution than under the
# benign one:
#
# $$\log \mathcal N(x; \hat\mu, I) > \log \mathcal N(x; 0, I)
#   \iff x^\top\hat\mu > \tfrac12\|\hat\mu\|^2 . \tag{8}$$
#
# With the *true* trigger this is the Bayes-optimal test between $\mathcal N(r, I)$
# and $\mathcal N(0, I)$, and its projection onto $r$ gives both error rates in closed
# form:
#
# $$\mathrm{TPR} = \mathrm{TNR} = \Phi\big(\|r\|/2\big), \qquad
#   \text{error} = \Phi\big(-\|r\|/2\big). \tag{9}$$
#
# For a reversed $\hat\mu$ the same projection gives
# $\mathrm{TNR} = \Phi(\|\hat\mu\|/2)$ and
# $\mathrm{TPR} = \Phi\big((r^\top\hat\mu - \frac12\|\hat\mu\|^2)/\|\hat\mu\|\big)$.
# At $\|r\| = 7.4$ the bound allows an error of $2 \cdot 10^{-4}$; at $\|r\| = 4$ it is
# 2.3 %, whatever the defence.

# %%
def flag(x, mu):
    """Eq. 8: True where input noise x (..., N, D) is judged poisoned by mu (..., D)."""
    return (x * mu[..., None, :]).sum(-1) > 0.5 * (mu ** 2).sum(-1, keepdim=True)


def Phi(z):
    return 0.5 * (1 + torch.erf(torch.as_tensor(z, dtype=torch.float64) / 2 ** 0.5))


def rates_closed_form(mu, r):
    """TPR and TNR of Eq. 8 with mu when poisoned noise is N(r, I) (Eq. 9's route)."""
    m = mu.norm(dim=-1).clamp_min(1e-12)
    tpr = Phi(((mu * r).sum(-1) - 0.5 * m ** 2) / m)
    return tpr.float(), Phi(m / 2).float()


# %% [markdown]
# ### Model detection: KL from the benign distribution
#
# A backdoored model has a reversed distribution far from $\mathcal N(0, I)$; a benign
# one has none to find, and its reversion stays small. Per pixel,
#
# $$\mathrm{KL}_i = -\log\gamma_i + \tfrac12(\gamma_i^2 + \mu_i^2 - 1), \qquad
#   M_r = \tfrac1d\textstyle\sum_i \mathrm{KL}_i, \qquad
#   V_r = \mathrm{Var}_i\, \mathrm{KL}_i, \tag{10}$$
#
# and a model is flagged when $M_r$ (or $V_r$) exceeds a threshold calibrated on benign
# models. With $\gamma = 1$, $\mathrm{KL}_i = \mu_i^2/2$. (TERD's code subtracts
# constants from $M_r$ and $V_r$ for display; they do not change a ranking, and we
# leave them out.)

# %%
def kl_stats(mu, gamma=None):
    """Eq. 10: (M_r, V_r) of reversed triggers mu (M, D), gamma = 1 by default."""
    gamma = torch.ones_like(mu) if gamma is None else gamma
    kl = -gamma.log() + 0.5 * (gamma ** 2 + mu ** 2 - 1)
    return kl.mean(-1), kl.var(-1)


# %% [markdown]
# ## The experiment
#
# ### The benign model, and its fine-tuned copies
#
# First a benign model, trained on the digits. Then a bank of copies of it,
# fine-tuned for the same number of steps: three with BadDiffusion's poisoning (each
# with its own trigger box and target) and `N_BENIGN_FT` on clean data only. With the
# base model that makes three benign and three backdoored models.

# %%
gen = run.generator("training")
digits = load_digits()
TRIGGERS = torch.stack([box_trigger(2, 2), box_trigger(4, 1), box_trigger(1, 4)])
TARGETS = targets()
N_BD = len(TRIGGERS)
run.reseed("weights")  # the initial weights come from torch's global generator
base = EpsBank(1, hidden=cfg.hidden)
pre_losses = train_bank(base, digits, cfg.pre_steps, cfg.batch, LR_PRE,
                        torch.zeros(1), torch.zeros(1, D), torch.zeros(1, D), gen)
bank = copies(base, N_BD + N_BENIGN_FT)
rates = torch.tensor([poison_rate] * N_BD + [0.0] * N_BENIGN_FT)
triggers = torch.cat([TRIGGERS, torch.zeros(N_BENIGN_FT, D)])
bank_targets = torch.cat([TARGETS, torch.zeros(N_BENIGN_FT, D)])
ft_losses = train_bank(bank, digits, cfg.ft_steps, cfg.batch, LR_FT, rates, triggers,
                       bank_targets, gen)
print(f"benign model: loss {pre_losses[-100:].mean():.3f} over its last 100 steps; "
      f"fine-tuned bank: {ft_losses[-100:].mean():.3f}")

# %% [markdown]
# All six models in one bank: model $m$ for $m < 3$ is backdoored with trigger $m$,
# the rest are benign (the base model last). Each benign model is scored against each
# trigger where a comparison needs one.

# %%
models = copies(bank, bank.M + 1)
with torch.no_grad():
    for p, q, b in zip(models.parameters(), bank.parameters(), base.parameters()):
        p.copy_(torch.cat([q, b]))
models.requires_grad_(False)
M = models.M
BD = torch.arange(N_BD)  # backdoored models
BENIGN = torch.arange(N_BD, M)
names = [f"backdoored {m + 1}" for m in range(N_BD)] + \
    [f"benign {m + 1}" for m in range(M - N_BD)]
true_mu = torch.cat([TRIGGERS, TRIGGERS[:1].expand(M - N_BD, D)])  # benign: vs r_1
true_y = torch.cat([TARGETS, TARGETS[:1].expand(M - N_BD, D)])

# %% [markdown]
# ### No defence: the attack works
#
# From poisoned noise $\epsilon + r$ the backdoored models produce their target, the
# benign ones do not. From clean noise the backdoored models stray further from the
# digits than the benign ones (the distance to the nearest digit): at this high
# poison rate the backdoor is not stealthy, the price of making a small model learn it
# in a short fine-tuning. A careful user would notice; TERD is not told, and it does
# not look at clean generations.

# %%
noise = torch.randn(M, cfg.n_gen, D, generator=run.generator("generation noise"))


def target_mse(mu, sampler="ancestral"):
    """Mean squared distance to each model's target of generations from eps + mu."""
    x = generate(models, noise + mu[:, None], sampler, run.generator("attack sampler"))
    return ((x - true_y[:, None]) ** 2).mean((1, 2))


def nearest_digit(x):
    """Mean squared distance of each generation (M, N, D) to its nearest digit."""
    d = torch.cdist(x.reshape(-1, D), digits).min(1).values ** 2 / D
    return d.reshape(x.shape[:2]).mean(1)


mse_true = target_mse(true_mu)
clean_gen = generate(models, noise, "ancestral", run.generator("clean sampler"))
clean_to_digit = nearest_digit(clean_gen)
for m in range(M):
    print(f"{names[m]:<13} target MSE from eps + r: {mse_true[m]:.3f};  clean noise: "
          f"distance to the nearest digit {clean_to_digit[m]:.3f}")

# %% [markdown]
# ### Is the loss shaped the way TERD needs?
#
# Before reversing anything: for a backdoored model the refinement loss (Eq. 6, with
# the same noise for every candidate) should be clearly lower at the true trigger than
# at $\mu = 0$; for a benign model there is nothing to find and the two should be
# alike. We also trace the loss along the ray $\mu = c\, r$ and probe the trigger
# with steps of 0.3 in random directions.

# %%
init_gen = run.generator("initialisation")
init = -torch.rand(M, restarts, D, generator=init_gen)
RAY = torch.linspace(0, 1.75, 8)
probe = torch.cat([RAY[None, :, None] * true_mu[:, None], init[:, :1]], 1)
geom_gen = functools.partial(run.generator, "geometry")  # common noise, every call
geom = fixed_refine_loss(models, probe, cfg.n_geom, geom_gen)
L_zero, L_r, L_init = geom[:, 0], geom[:, 4], geom[:, -1]  # c = 0, c = 1, init
u = torch.randn(M, 8, D, generator=init_gen)
u = 0.3 * u / u.norm(dim=-1, keepdim=True)
geom_perturbed = fixed_refine_loss(models, true_mu[:, None] + u, cfg.n_geom, geom_gen)
local_min = geom_perturbed.min(1).values / L_r
ray_argmin = RAY[geom[:, :-1].argmin(1)]
print(f"{'model':<13} {'L(r)':>7} {'L(0)':>7} {'L(init)':>8} {'argmin_c L(c r)':>16} "
      f"{'min L(r+0.3u)/L(r)':>19}")
for m in range(M):
    print(f"{names[m]:<13} {L_r[m]:>7.2f} {L_zero[m]:>7.2f} {L_init[m]:>8.2f} "
          f"{ray_argmin[m]:>16.2f} {local_min[m]:>19.3f}")

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(5, 2.8))
for m in range(M):
    shade = "0.1" if m < N_BD else "0.6"
    ax.plot(RAY, geom[m, :-1], color=shade, marker="o", ms=3,
            label=("backdoored" if m == 0 else "benign" if m == N_BD else None))
ax.axvline(1.0, color="k", ls=":", lw=0.8)
ax.set(xlabel="c (candidate mu = c r)", ylabel="Eq. 6, fixed noise",
       title="the refinement loss along the trigger's ray")
ax.legend()
plt.show()

# %% [markdown]
# The backdoored models (dark) have a deep valley on the way to the trigger, the
# benign ones (light) a flat, slowly rising curve. The valley's floor is wide and
# begins well before $c = 1$: the trigger lies in the valley rather than at a sharp
# minimum, and steps of 0.3 in random directions change the loss only slightly,
# either way (last column). We had planned a check that $r$ is a local minimum (no such
# step lowering the loss by more than 2 %); it failed on the first run of this design,
# which drew different noise for each candidate, so the loss is now compared on common
# noise and the local test is reported instead of checked. For the same reason the
# comparison with the initialisation ($L(r)$ below $L(\mathrm{init})$), planned as a
# check too, is reported: the initialisation already sits near the valley for some
# models. A wide floor is also why the reversion need not land on $r$ itself: TERD's
# trigger can point the right way without having $r$'s length (compare its $M_r$
# below with the true trigger's $\|r\|^2/2d$).
#
# ### Reversing the triggers
#
# TERD and its ablation from the same initialisations, on all six models at once;
# Elijah from the first of them.

# %%
rev_gen = run.generator("reversion")
history, stage1 = [], []
settings = dict(select_gen=functools.partial(run.generator, "selection"), lam=lam,
                it1=cfg.it1, it2=it2, b1=cfg.b1, b2=cfg.b2)
reversed_ = {
    "TERD": reverse_trigger(models, init, rev_gen, history=history, stage1=stage1,
                            **settings),
    "plain loss (ablation)": reverse_trigger(models, init, rev_gen, loss=plain_loss,
                                             **settings),
    "Elijah": elijah(models, init[:, 0], cfg.elijah_steps, rev_gen),
    "doing nothing": init[:, 0],
}

# %% [markdown]
# ### How good are the reversed triggers?
#
# For each method and model: the cosine with the true trigger, the relative error
# $\|\hat\mu - r\|/\|r\|$, and whether $\hat\mu$ reproduces the attack: the target MSE
# of the ancestral sampler started from $\epsilon + \hat\mu$ (the true trigger's is
# printed above). Then input detection (Eq. 8) on `n_detect` poisoned and as many
# clean noises, and model detection's $M_r$ (Eq. 10).

# %%
det_gen = run.generator("detection")
x_poison = torch.randn(M, cfg.n_detect, D, generator=det_gen) + true_mu[:, None]
x_clean = torch.randn(M, cfg.n_detect, D, generator=det_gen)
def exact_error(mu):
    """1 - min(TPR, TNR) of Eq. 8 with mu, exactly, by Eq. 9's route."""
    return 1 - torch.minimum(*rates_closed_form(mu, true_mu))


results = {}
for name, mu in reversed_.items():
    results[name] = dict(
        cos=F.cosine_similarity(mu, true_mu, dim=-1),
        relerr=(mu - true_mu).norm(dim=-1) / true_mu.norm(dim=-1),
        mse=target_mse(mu),
        tpr=flag(x_poison, mu).float().mean(-1),
        tnr=1 - flag(x_clean, mu).float().mean(-1),
        err=exact_error(mu),
        kl_mean=kl_stats(mu)[0], kl_var=kl_stats(mu)[1])
results["true trigger"] = dict(tpr=flag(x_poison, true_mu).float().mean(-1),
                               tnr=1 - flag(x_clean, true_mu).float().mean(-1))
print(f"{'method':<22} {'cos':>6} {'rel.err':>8} {'tgt MSE':>8} {'TPR':>6} {'TNR':>6}"
      f" {'exact error':>12}   (backdoored models: mean)")
for name in reversed_:
    r_ = {k: float(v[BD].mean()) for k, v in results[name].items()}
    print(f"{name:<22} {r_['cos']:>6.3f} {r_['relerr']:>8.3f} {r_['mse']:>8.3f} "
          f"{r_['tpr']:>6.3f} {r_['tnr']:>6.3f} {r_['err']:>12.2e}")
print(f"{'true trigger':<22} {1:>6.3f} {0:>8.3f} {float(mse_true[BD].mean()):>8.3f} "
      f"{float(results['true trigger']['tpr'][BD].mean()):>6.3f} "
      f"{float(results['true trigger']['tnr'][BD].mean()):>6.3f}")

# %% tags=["hide-input"]
def show_image(ax, img, title, vmin=-1.5, vmax=1.5):
    im = ax.imshow(img.reshape(8, 8).numpy(), cmap="gray", vmin=vmin, vmax=vmax)
    ax.set(title=title, xticks=[], yticks=[])
    return im


fig, axes = plt.subplots(N_BD, 5, figsize=(7.5, 1.6 * N_BD + 0.4))
for m in range(N_BD):
    row = [("true trigger", TRIGGERS[m])] + [
        (k, reversed_[k][m]) for k in ("TERD", "plain loss (ablation)", "Elijah",
                                       "doing nothing")]
    for ax, (title, img) in zip(axes[m], row):
        im = show_image(ax, img, title if m == 0 else "")
    axes[m, 0].set_ylabel(names[m], fontsize=8)
fig.colorbar(im, ax=axes, shrink=0.8, label="pixel value")
plt.show()

# %% [markdown]
# Each row is one backdoored model: its true trigger (a dark background with a grey
# box), then what each method reverses. TERD's trigger is noisy, but it has the dark
# background and the box in the right place. Elijah's shows the box at a fraction of
# the contrast (its trigger comes out too short), and the plain loss ends far from the
# trigger.
#
# ### Model detection
#
# $M_r$ and $V_r$ of every model's reversed trigger. The threshold is calibrated on the
# benign models: twice the largest benign $M_r$.

# %%
kl_terd, var_terd = results["TERD"]["kl_mean"], results["TERD"]["kl_var"]
threshold = 2 * float(kl_terd[BENIGN].max())
separation = float(kl_terd[BD].min() / kl_terd[BENIGN].max())
kl_el = results["Elijah"]["kl_mean"]
separation_elijah = float(kl_el[BD].min() / kl_el[BENIGN].max())
kl_pl = results["plain loss (ablation)"]["kl_mean"]
separation_plain = float(kl_pl[BD].min() / kl_pl[BENIGN].max())
kl_init = results["doing nothing"]["kl_mean"]
separation_init = float(kl_init[BD].min() / kl_init[BENIGN].max())
for m in range(M):
    print(f"{names[m]:<13} M_r {kl_terd[m]:.4f}  V_r {var_terd[m]:.5f}  flagged "
          f"{bool(kl_terd[m] > threshold)}")
print(f"min backdoored / max benign M_r: TERD {separation:.1f}, Elijah "
      f"{separation_elijah:.1f}, plain loss {separation_plain:.1f}, doing nothing "
      f"{separation_init:.1f}")

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(8, 3))
for name in ("TERD", "plain loss (ablation)", "Elijah"):
    kl, var = results[name]["kl_mean"], results[name]["kl_var"]
    st = {k: v for k, v in STYLE[name].items() if k != "linestyle"}
    axes[0].scatter(kl[BD], var[BD], marker="o", **st)
    axes[0].scatter(kl[BENIGN], var[BENIGN], marker="x", color=st["color"])
axes[0].set(xlabel="M_r (mean KL per pixel)", ylabel="V_r (variance of KL)",
            title="o backdoored, x benign")
icmlbook.log_axis(axes[0], "x")
icmlbook.log_axis(axes[0], "y")
axes[0].legend(fontsize=7)
s = np.linspace(0.5, 10, 200)
axes[1].plot(s, Phi(torch.tensor(s) / 2).numpy(), **STYLE["Bayes bound"])
for name in ("TERD", "Elijah", "doing nothing"):
    tnr = results[name]["tnr"][BD].mean()
    tpr = results[name]["tpr"][BD].mean()
    axes[1].scatter([float(TRIGGERS.norm(dim=-1).mean())] * 2, [tpr, tnr],
                    color=STYLE[name]["color"], label=f"{name}: TPR, TNR", s=14)
axes[1].set(xlabel="trigger norm ||r||", ylabel="rate",
            title="Bayes bound Phi(||r|| / 2), Eq. 9", ylim=(0.5, 1.01))
axes[1].legend(fontsize=7, loc="lower right")
plt.show()

# %% [markdown]
# Left: TERD (blue) puts the backdoored models (circles) far to the right of the
# benign ones (crosses). So does Elijah (teal), whose benign reversions shrink towards
# 0; with the plain loss (red) the two kinds of model are mixed. Right: at our trigger
# norm the Bayes bound (grey) is already within $10^{-3}$ of 1, so any reversion that
# points roughly the right way and is about as long as the trigger detects inputs
# almost perfectly, even doing nothing, the untouched starting trigger
# (amber). Elijah's trigger (teal)
# is too short, and its TNR, $\Phi(\|\tau\|/2)$ by Eq. 9's route, pays for it. A
# detection rate of 100 % says more about the trigger's norm than about the defence.
#
# ### The paper's protocol: one run per model
#
# The paper reverses each model's trigger once, from one initialisation. Each of our
# `restarts` stage-1 runs, refined on its own without the selection, is such a single
# run. We count a single run as *failed* when its trigger ends no closer to $r$ than
# where it started (a relative error at least that of its own initialisation): the
# collapse towards 0 that the restarts guard against.

# %%
single = refine(models, stage1[0], it2, cfg.b2, lam, rev_gen)  # (M, restarts, D)
r_norm = true_mu.norm(dim=-1)[:, None]
single_relerr = (single - true_mu[:, None]).norm(dim=-1) / r_norm
start_relerr = (init - true_mu[:, None]).norm(dim=-1) / r_norm
single_failed = (single_relerr >= start_relerr)[BD]
single_fail = float(single_failed.float().mean())
print(f"single runs on the backdoored models: {int(single_failed.sum())} of "
      f"{single_failed.numel()} failed; relative error of the single runs "
      f"{float(single_relerr[BD].min()):.2f}-{float(single_relerr[BD].max()):.2f}, "
      f"of TERD with the selection {float(results['TERD']['relerr'][BD].mean()):.2f}")

# %% [markdown]
# ## Claims
#
# Every paper claim compares TERD with something it must beat, on the backdoored
# models. The first is *doing nothing*: the untouched starting trigger
# $-\mathcal U[0,1)^d$, which already points roughly along a BadDiffusion trigger
# (both are negative almost everywhere) and already passes most of input detection;
# TERD is compared with it on every measure. The second is Elijah, the earlier
# trigger-inversion defence, on the attack and on input detection. The plain-loss
# ablation is used only where it is a fair one, model detection: on reversion
# accuracy it ends worse
# than its own start (a denoising loss is lowest near $\mu = 0$), so beating it there
# would say nothing. Input detection is scored by the exact error rates of Eq. 8's
# test for each reversed trigger (Eq. 9's route), not by counting 2000 draws, whose
# noise is larger than the errors at our trigger norm; a check confirms that the two
# agree. The counted rates are kept for a finding on the paper's 100 %.
#
# The thresholds were fixed before any seed of this version was run, from the
# numbers of the earlier version, and then seeds 0-19 were run once; each line says
# what it rests on. Earlier versions of this chapter compared
# TERD's relative error with the plain loss's and its input-detection rate with
# Elijah's alone, and stated a cosine bar that Elijah passes too; doing nothing passed
# three of those, so they were replaced by the comparisons below.

# %% tags=["thresholds"]
# Paper claims: means over the backdoored models. Bars set before any run of these
# comparisons, from the earlier version's runs (seed 0: rel. error 0.33 vs 0.64,
# cosine 0.96 vs 0.78, target MSE 0.09 vs 0.27 vs Elijah's 0.39), with wide margins
C_RELERR_VS_NOTHING = 0.8  # rel. error TERD / doing nothing; earlier runs: ~0.5
C_COS_VS_NOTHING = 0.08  # cos(TERD, r) minus cos(start, r); earlier runs: ~0.18
C_MSE_VS_NOTHING = 0.9  # target MSE TERD / doing nothing; earlier runs: ~0.35
C_MSE_VS_ELIJAH = 0.7  # target MSE TERD / Elijah; earlier sweep of 0-9: 0.17-0.36
C_ERR_VS_NOTHING = 0.8  # exact error of Eq. 8, TERD / doing nothing; no earlier run
C_ERR_VS_ELIJAH = 0.5  # exact error of Eq. 8, TERD / Elijah; no earlier run
C_SEP_VS_PLAIN = 2.0  # separation TERD minus plain loss; earlier sweep of 0-9: 2.9-5.3
C_SEP_VS_NOTHING = 2.0  # separation TERD minus doing nothing; the bar of C_SEP_VS_PLAIN
C_ATTACK = 0.25  # target MSE from eps + r, backdoored models; first run 0.02-0.12
C_BENIGN_MISS = 0.4  # target MSE from eps + r_1 on benign models; first run 0.6-0.7
# max L(r) / L(0), backdoored; first run 0.62-0.68 (own noise each). It was 0.85
# until seed 9 of a sweep measured 0.89: the check says "lower at the trigger
# than at 0", and 0.95 keeps a margin below 1 without the first run's guess
C_GEOM = 0.95
C_FLAT = 0.9  # min L(r) / L(0) of the benign models; first run 1.02-1.11
C_CANCEL = 1e-3  # Eq. 4 for a model that knows its image: exactly 0 up to rounding
C_BAYES = 0.01  # |TPR, TNR with the true trigger - Phi(||r|| / 2)|, 2000 draws
C_EXACT = 0.01  # |counted - exact min(TPR, TNR)| for TERD's triggers, 2000 draws
# the paper's verdict follows icmlbook.verdicts' rule, fixed before the final sweep

# %% [markdown]
# Eq. 4's cancellation, checked on a model that knows its image: an oracle that
# answers the true noise of a fixed image $y$ plus an arbitrary offset $k_t$, the way
# a perfectly backdoored model does. Its reversed loss is 0 whatever $y$ and $k_t$ are,
# while the plain loss is not.

# %%
class KnowsItsImage(nn.Module):
    """eps(x, t) = (x - a_t y - b) / s_t + k_t: the true noise of image y, plus k_t."""

    def __init__(self, y, b, k):
        super().__init__()
        self.y, self.b, self.k = y, b, k

    def forward(self, x, t):
        a, s = ALPHA[t][..., None], SIGMA[t][..., None]
        return (x - a * self.y - self.b) / s + self.k * R_COEF[t][..., None]

    M = 1


oracle_gen = run.generator("oracle")
y0, k0 = torch.randn(D, generator=oracle_gen), torch.randn(D, generator=oracle_gen)
oracle = KnowsItsImage(y0, 0.0, k0)
x_y = y0.expand(1, 1, 32, D)
t_any = torch.randint(0, T, (1, 1, 32), generator=oracle_gen)
cancel = float(reversed_loss(oracle, torch.zeros(1, 1, D), x_y, t_any, False,
                             oracle_gen))
plain_at_oracle = float(plain_loss(oracle, torch.zeros(1, 1, D), x_y, t_any, False,
                                   oracle_gen))
print(f"Eq. 4 for the oracle: {cancel:.2e}; plain loss: {plain_at_oracle:.2f}")

# %%
res = {k: {kk: vv[BD] for kk, vv in v.items()} for k, v in results.items()}
terd, nothing, el = res["TERD"], res["doing nothing"], res["Elijah"]
relerr_vs_nothing = float(terd["relerr"].mean() / nothing["relerr"].mean())
cos_vs_nothing = float(terd["cos"].mean() - nothing["cos"].mean())
mse_vs_nothing = float(terd["mse"].mean() / nothing["mse"].mean())
mse_vs_elijah = float(terd["mse"].mean() / el["mse"].mean())
err_vs_nothing = float(terd["err"].mean() / nothing["err"].mean())
err_vs_elijah = float(terd["err"].mean() / el["err"].mean())
input_counted = {k: float(torch.minimum(v["tpr"], v["tnr"]).min())
                 for k, v in res.items()}
exact_gap = float((input_counted["TERD"] - (1 - terd["err"].max())).abs())
norm_r = TRIGGERS.norm(dim=-1)
bayes = Phi(norm_r / 2).float()
bayes_err = float(torch.maximum((res["true trigger"]["tpr"] - bayes).abs(),
                                (res["true trigger"]["tnr"] - bayes).abs()).max())
geom_ratio = float((L_r[BD] / L_zero[BD]).max())
flat_ratio = float((L_r[BENIGN] / L_zero[BENIGN]).min())
NOTHING = "doing nothing: the untouched starting trigger -U[0,1), same models"

# %%
run.claim("reversed trigger: rel. error, TERD / doing nothing", relerr_vs_nothing,
          "<=", C_RELERR_VS_NOTHING, "TERD's reversion ends much closer to the true "
          "trigger than where it started", versus="baseline", against=NOTHING,
          strength="superiority", provenance="calibrated")
run.claim("reversed trigger: cosine with r, TERD minus doing nothing",
          cos_vs_nothing, ">=", C_COS_VS_NOTHING, "TERD's reversion turns towards "
          "the true trigger", versus="baseline", against=NOTHING,
          strength="superiority", provenance="calibrated")
run.claim("attack reproduced: target MSE, TERD / doing nothing", mse_vs_nothing,
          "<=", C_MSE_VS_NOTHING, "Noise shifted by TERD's trigger reproduces the "
          "target better than noise shifted by the starting trigger",
          versus="baseline", against=NOTHING, strength="superiority",
          provenance="calibrated")
run.claim("attack reproduced: target MSE, TERD / Elijah", mse_vs_elijah, "<=",
          C_MSE_VS_ELIJAH, "Noise shifted by TERD's trigger reproduces the target "
          "better than noise shifted by Elijah's", versus="baseline",
          against="Elijah (Eq. 7), same models and initialisation",
          strength="superiority", provenance="calibrated")
run.claim("input detection: exact error, TERD / doing nothing", err_vs_nothing, "<=",
          C_ERR_VS_NOTHING, "Eq. 8's test with TERD's trigger errs less often than "
          "with the starting trigger", versus="baseline",
          against=NOTHING, strength="superiority", provenance="a priori")
run.claim("input detection: exact error, TERD / Elijah", err_vs_elijah, "<=",
          C_ERR_VS_ELIJAH, "Eq. 8's test with TERD's trigger errs less often than "
          "with Elijah's", versus="baseline",
          against="Elijah's trigger in the same test, same models",
          strength="superiority", provenance="a priori")
run.claim("model detection: separation, TERD minus plain loss",
          separation - separation_plain, ">=", C_SEP_VS_PLAIN,
          "TERD's M_r (Eq. 10) puts every backdoored model well above every benign "
          "one, and the two-noise difference is what makes it do so", versus="ablation",
          against="the plain denoising loss, same two stages and statistic",
          strength="superiority", provenance="calibrated")
run.claim("model detection: separation, TERD minus doing nothing",
          separation - separation_init, ">=", C_SEP_VS_NOTHING,
          "TERD's M_r separates backdoored from benign models, which the starting "
          "trigger's does not", versus="baseline", against=NOTHING,
          strength="superiority", provenance="calibrated")
run.check("attack premise: target MSE from eps + r", float(mse_true[BD].max()), "<=",
          C_ATTACK, "the fine-tuned models really are backdoored")
run.check("benign models miss the target", float(mse_true[BENIGN].min()), ">=",
          C_BENIGN_MISS, "benign models do not produce the target from eps + r")
run.check("loss geometry: L(r) / L(0), backdoored", geom_ratio, "<=", C_GEOM,
          "Eq. 6 is clearly lower at the trigger than at 0")
run.check("loss geometry: L(r) / L(0), benign", flat_ratio, ">=", C_FLAT,
          "a benign model's Eq. 6 does not prefer the trigger")
run.check("Eq. 4 cancels a known image", cancel, "<=", C_CANCEL,
          "an oracle that knows its image has reversed loss 0", digits=2)
run.check("true trigger vs Bayes bound Eq. 9", bayes_err, "<=", C_BAYES,
          "the test with r achieves Phi(||r|| / 2)")
run.check("counted vs exact rates, TERD", exact_gap, "<=", C_EXACT,
          "2000 + 2000 draws agree with Eq. 9's route for TERD's triggers");

# %% [markdown]
# Then the findings: what the paper states and we measure without claiming it, each
# in the direction the paper states it; and the paper's headline claims, each with the
# claims and findings that test it. The verdict below grades them by the rule named in
# the thresholds cell.

# %%
run.finding("input detection: TERD's counted min(TPR, TNR)", input_counted["TERD"],
            ">=", 1.0, paper="TERD secures a 100% True Positive Rate (TPR) and True "
            "Negative Rate (TNR)", shows="the lower of TPR and TNR on 2000 poisoned "
            "and 2000 clean noises, worst backdoored model; the Bayes bound of Eq. 9 "
            "keeps even the true trigger from 100 % on some draws")
run.finding("model detection: separation, TERD minus Elijah",
            separation - separation_elijah, ">", 0.0, paper="an accessible reversed "
            "loss that overcomes the limits of earlier trigger inversion (Elijah)",
            shows="whether TERD's M_r separates backdoored from benign models more "
            "widely than Elijah's, whose benign reversions shrink to 0")
run.finding("one run per model: share of failed reversions", single_fail, "<=", 0.0,
            paper="the two-stage reversion, run once per model", shows="the share of "
            "single runs (one initialisation, no restarts) whose trigger ends no "
            "closer to r than its start")
run.headline("trigger reversion", "an accessible reversed loss; a trigger reversion "
             "strategy: an initial approximation of the trigger through noise sampled "
             "from a prior distribution, followed by refinement through differential "
             "multi-step samplers", "Abstract; Sec. 3",
             claims=["reversed trigger: rel. error, TERD / doing nothing",
                     "reversed trigger: cosine with r, TERD minus doing nothing",
                     "attack reproduced: target MSE, TERD / doing nothing",
                     "attack reproduced: target MSE, TERD / Elijah"],
             findings=["one run per model: share of failed reversions"])
run.headline("input detection", "the first backdoor input detection approach for "
             "diffusion models; TERD secures a 100% True Positive Rate (TPR) and True "
             "Negative Rate (TNR) across datasets of varying resolutions",
             "Abstract; input-detection tables",
             claims=["input detection: exact error, TERD / doing nothing",
                     "input detection: exact error, TERD / Elijah"],
             findings=["input detection: TERD's counted min(TPR, TNR)"])
run.headline("model detection", "a novel model detection algorithm that calculates "
             "the KL divergence between reversed and benign distributions",
             "Abstract; model-detection tables",
             claims=["model detection: separation, TERD minus plain loss",
                     "model detection: separation, TERD minus doing nothing"],
             findings=["model detection: separation, TERD minus Elijah"])
run.headline("SDE-based models", "TERD also demonstrates nice adaptability to other "
             "Stochastic Differential Equation (SDE)-based models", "Abstract",
             testable=False, why="only DDPMs backdoored by BadDiffusion are built "
             "here; an SDE model family and its attacks are out of this budget")
run.metric("relerr", {k: float(v["relerr"].mean()) for k, v in res.items()
                      if "relerr" in v})
run.metric("cos", {k: float(v["cos"].mean()) for k, v in res.items() if "cos" in v})
run.metric("target_mse", {k: float(v["mse"].mean()) for k, v in res.items()
                          if "mse" in v} | {"true trigger": float(mse_true[BD].mean())})
run.metric("input_min_rate", input_counted)
run.metric("exact_error", {k: float(v["err"].max()) for k, v in res.items()
                           if "err" in v})
run.metric("separation", {"TERD": separation, "Elijah": separation_elijah,
                          "plain": separation_plain, "doing nothing": separation_init})
run.metric("single_run", dict(failed=single_fail, relerr=single_relerr[BD].tolist()))
run.metric("threshold_Mr", threshold)
run.metric("geometry", dict(L_init_over_L_r=(L_init[BD] / L_r[BD]).tolist(),
                            ray_argmin=ray_argmin[BD].tolist(),
                            local_min_ratio=local_min[BD].tolist()));

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed: a fresh benign model, fresh fine-tuned copies and fresh
# reversions. The table and strip plot below read this chapter's results file, made by
# `icmlbook sweep 11 --seeds 0-19 --update-results`: every claim, check and finding
# over the calibration seeds 0-9 and, apart, the confirmation seeds 10-19 at the
# default tier, with the number of seeds on which each holds and its worst margin.

# %%
across = icmlbook.across_seeds(run)

# %% [markdown]
# One bar changed after a failure, on a check: the depth of the refinement loss's
# valley, $L(r)/L(0)$ for every backdoored model, was first required to be at most
# 0.85 and measured 0.89 on one seed; it is now at most 0.95, what the check means
# (the loss is lower at the trigger than at 0) with a margin. The three findings are
# where the paper's statements meet our scale: the counted 100 %, the edge over
# Elijah in model detection, and the single run.

# %% [markdown]
# ## Explore
#
# Pick a model and a sampler, and move along the refinement (stage 2) of its reversion.
# Left: the true trigger and TERD's trigger at that iteration (same colour scale).
# Middle: generations of the chosen sampler from clean noise and from noise shifted by
# the reversed trigger. Right: the trigger norm slider sets a hypothetical attack of
# that norm along $r$, with the reversed trigger rescaled in proportion; the panel
# shows the likelihood-ratio boundary in the plane of $r$ and $\hat\mu$, with clean
# and poisoned noise, and the TPR/TNR it implies against the Bayes bound. The
# $\lambda$ slider reruns a short stage 1 (one restart, `widget_it1` iterations) with
# that weight on the $-\lambda\|\mu\|_1$ term; its estimate is the bottom tile on the
# left, with its cosine and norm. The poison rate needs new backdoored models: it is
# a parameter of the chapter, not of the widget.

# %% tags=["hide-input"]
import ipywidgets as W

SNAPSHOTS = torch.stack(history)[:, :, 0]  # (iterations + 1, M, D)


@functools.lru_cache(maxsize=64)
def widget_generations(k, sampler):
    """Three generations from clean and three from triggered noise, every model."""
    g = run.generator("widget generations")
    x = torch.randn(M, 6, D, generator=g)
    x[:, 3:] += SNAPSHOTS[k][:, None]
    out = generate(models, x, sampler, g)
    return torch.nan_to_num(out, nan=0.0).clamp(-3, 3)


@functools.lru_cache(maxsize=32)
def widget_stage1(lam_w):
    """A short stage 1 (Eq. 5) with weight lam_w, first restart, every model: (M, D)."""
    g = run.generator("widget stage 1")
    return estimate(models, init[:, :1], cfg.widget_it1, cfg.b1, lam_w, g)[:, 0]


def mosaic(images, cols):
    """Images (N, D) as one picture of 8 x 8 tiles, `cols` per row, one pixel apart."""
    rows = -(-len(images) // cols)
    canvas = torch.full((9 * rows - 1, 9 * cols - 1), float("nan"))
    for i, img in enumerate(images):
        r, c = divmod(i, cols)
        canvas[9 * r:9 * r + 8, 9 * c:9 * c + 8] = img.reshape(8, 8)
    return canvas


def update(model, iteration, sampler, trigger_norm, lam):
    m = names.index(model)
    k = min(iteration, len(SNAPSHOTS) - 1)
    mu = SNAPSHOTS[k][m]
    mu_lam = widget_stage1(lam)[m]
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), width_ratios=[1, 1.4, 1.6])
    tiles = torch.stack([true_mu[m], mu, mu_lam]).clamp(-3, 3)
    im = axes[0].imshow(mosaic(tiles, 1).numpy(), cmap="gray", vmin=-1.5, vmax=1.5)
    cos_lam = float(F.cosine_similarity(mu_lam, true_mu[m], dim=0))
    axes[0].set(title=f"true r, TERD it. {k},\nstage 1 at lambda", xticks=[],
                yticks=[], xlabel=f"cos {cos_lam:.2f}, norm {float(mu_lam.norm()):.1f}")
    gens = widget_generations(k, sampler)[m]
    axes[1].imshow(mosaic(gens, 3).numpy(), cmap="gray", vmin=-1.5, vmax=1.5)
    axes[1].set(title=f"{sampler}: clean (top), eps + mu", xticks=[], yticks=[])
    fig.colorbar(im, ax=axes[:2], shrink=0.8, label="pixel value")
    ax = axes[2]
    scale = trigger_norm / float(true_mu[m].norm())
    r_s, mu_s = true_mu[m] * scale, mu * scale
    e1 = r_s / r_s.norm()
    e2 = mu_s - (mu_s @ e1) * e1
    e2 = e2 / e2.norm().clamp_min(1e-9)
    g = run.generator("widget noise")
    for shift, lab, c in ((0, "clean noise", "0.6"), (1, "poisoned noise", "0.1")):
        x = torch.randn(300, D, generator=g) + shift * r_s
        ax.scatter(x @ e1, x @ e2, s=3, color=c, label=lab)
    a, b = float(mu_s @ e1), float(mu_s @ e2)
    u_line = torch.linspace(-4, trigger_norm + 4, 2)
    if abs(b) > 1e-6:  # Eq. 8's boundary: a u + b v = ||mu||^2 / 2
        v_line = (0.5 * float((mu_s ** 2).sum()) - a * u_line) / b
        ax.plot(u_line, v_line, color=STYLE["TERD"]["color"], label="Eq. 8 boundary")
    else:
        ax.axvline(0.5 * float((mu_s ** 2).sum()) / a, color=STYLE["TERD"]["color"])
    tpr, tnr = rates_closed_form(mu_s[None], r_s[None])
    ax.set(xlabel="along r", ylabel="along mu, orthogonal to r", ylim=(-4, 4),
           xlim=(-4, trigger_norm + 4),
           title=f"||r|| {trigger_norm:.1f}: TPR {float(tpr):.4f}, TNR "
                 f"{float(tnr):.4f}\nBayes {float(Phi(trigger_norm / 2)):.4f}")
    ax.legend(fontsize=6, loc="lower right")
    plt.show()


controls = dict(
    model=W.Dropdown(options=names, value=names[0], description="model"),
    iteration=W.IntSlider(value=len(SNAPSHOTS) - 1, min=0, max=len(SNAPSHOTS) - 1,
                          description="stage-2 it."),
    sampler=W.ToggleButtons(options=["ancestral", "DDIM clipped", "DDIM unclipped"],
                            value="ancestral", description="sampler"),
    trigger_norm=W.FloatSlider(value=round(float(TRIGGERS[0].norm()), 1), min=1.0,
                               max=10.0, step=0.5, description="||r||"),
    lam=W.SelectionSlider(options=sorted({0.0, 5e-5, 5e-4, 5e-3, 5e-2, lam}),
                          value=lam, description="lambda"),
)
icmlbook.explore(update, controls, run=run)

# %% [markdown]
# ## Paper vs. this book
#
# | | paper | this book |
# |---|---|---|
# | data, models | CIFAR-10, CelebA-HQ; DDPM U-Nets; BadDiffusion, TrojDiff (and others) | 8×8 digits; residual-MLP DDPMs, $T = 100$; BadDiffusion only, fine-tuned at a high poison rate |
# | triggers, targets | BadDiffusion boxes and stop signs; hat, shoe, corner targets | boxes on a $-1$ background; an X, a corner and a frame |
# | reversion | Eq. 5 (3000 it.), then Eq. 6 (1000 it.) through a 10-step DDIM, one run | the same equations, shorter (`it1`, `refine_iters`), best of `restarts` stage-1 runs |
# | input detection | Eq. 8, 100 % TPR and TNR | Eq. 8, scored by its exact error rates and against the Bayes bound Eq. 9 |
# | model detection | Eq. 10, threshold not given in the code | Eq. 10, threshold from the benign models |
# | baselines | Elijah and others | doing nothing (the starting trigger), Elijah (Eq. 7), the plain-loss ablation |
#
# **Paper coverage.** The paper's main results, and what tests each here:
#
# | the paper's result | here |
# |---|---|
# | trigger reversion (the reversed loss, two stages; reversed-trigger figures) | claims on relative error and cosine against doing nothing, target MSE against doing nothing and Elijah; finding on the single run |
# | input detection, 100 % TPR and TNR (BadDiffusion and TrojDiff tables) | claims on the exact error against doing nothing and Elijah; finding on the counted 100 %; BadDiffusion only |
# | model detection by KL (tables) | claims on the separation against the plain loss and doing nothing; finding against Elijah |
# | TrojDiff attacks ($\gamma < 1$) | out of scope: $\gamma$ is not reversed here (exercise 3 works out what Eq. 10 makes of it) |
# | SDE-based models | out of scope: no SDE model family is built here (headline marked not testable) |
# | CelebA-HQ and other resolutions, runtime | out of scope: 8×8 images only, and CPU seconds at this size say nothing about the paper's costs |
#
# What reproduces at our scale is printed with the claims: TERD's reversed trigger
# beats doing nothing on every measure, its attack beats Elijah's, input detection
# errs less than with the starting trigger or Elijah's trigger, and the two-noise
# difference of Eq. 4 is what makes model detection separate the models. What does
# not, or only in part, is recorded as findings: the counted 100 % of the paper is a
# property of the trigger's norm (Eq. 9), which caps even the true trigger on some
# draws; Elijah's trigger separates backdoored from benign models more widely than
# TERD's on almost every seed, because on a benign model its loss pulls the trigger
# to 0 (and it points along $r$ as well as TERD's does; it is only too short, which is
# what the attack and input detection punish); and one run per
# model, the paper's protocol, does not always find the trigger at this budget, which
# is why we keep the best of several stage-1 runs. The verdict is printed with the
# claims. What to read with care: the refinement stage moves the trigger little at
# our scale (its gradient is clipped), so what is measured is mostly stage 1 and the
# selection among its restarts; a longer reversion, as in the paper, did not fit the
# default budget. Our backdoors are less stealthy than the paper's (the high poison
# rate pulls clean generations towards the target), which may make them easier to
# find. We did not reproduce TrojDiff (where $\gamma < 1$ must be reversed too), the
# SDE models or the paper's image sizes.

# %% [markdown]
# ## Exercises
#
# Each exercise is followed by a worked solution (folded in the HTML book); the
# solutions run in seconds on this run's models and change nothing above.

# %% [markdown] tags=["exercise"]
# **Exercise 1. A weaker trigger.** At $\|r\| = 4$ even the true trigger errs on
# $\Phi(-2) \approx 2.3\,\%$ of the noises. Show that no reversed trigger $\hat\mu$
# can do better in Eq. 8's test: $\min(\mathrm{TPR}, \mathrm{TNR}) \le
# \Phi(\|r\|/2)$ for every $\hat\mu$. Then scale each backdoored model's trigger to
# norm 4, with TERD's trigger scaled in proportion (as the widget does), and compare
# its rates with the bound.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 1
# By Eq. 9's route, with $m = \|\hat\mu\|$ and $\rho = r^\top\hat\mu / m \le \|r\|$
# (Cauchy-Schwarz), $\mathrm{TNR} = \Phi(m/2)$ and $\mathrm{TPR} = \Phi(\rho - m/2)
# \le \Phi(\|r\| - m/2)$. Since $\Phi$ increases,
#
# $$\min(\mathrm{TPR}, \mathrm{TNR}) \le \Phi\big(\min(m/2,\ \|r\| - m/2)\big) \le
#   \Phi(\|r\|/2),$$
#
# because the smaller of two numbers that sum to $\|r\|$ is at most half of it.
# Equality needs $\hat\mu$ along $r$ ($\rho = \|r\|$) and of the same length
# ($m = \|r\|$): the test is only as good as the trigger's norm allows, whatever the
# defence. The code scales each trigger to norm 4 and prints TERD's exact rates
# against $\Phi(2)$; they stay below it, by how much depending on the angle and the
# length of the reversed trigger. The check asserts the bound on every backdoored model.
# :::

# %% tags=["solution", "hide-cell"]
S_SLACK = 1e-9  # the bound holds exactly; allow only float rounding

scale = 4.0 / TRIGGERS.norm(dim=-1, keepdim=True)
tpr_4, tnr_4 = rates_closed_form(reversed_["TERD"][BD] * scale, TRIGGERS * scale)
bound_4 = float(Phi(2.0))
for m in range(N_BD):
    print(f"{names[m]}: TPR {float(tpr_4[m]):.4f}, TNR {float(tnr_4[m]):.4f}; "
          f"bound Phi(2) = {bound_4:.4f}")
icmlbook.solution_check("max over models of min(TPR, TNR) minus Phi(||r|| / 2)",
                        float(torch.minimum(tpr_4, tnr_4).max()) - bound_4, "<=",
                        S_SLACK)

# %% [markdown] tags=["exercise"]
# **Exercise 2. The sign.** Flip the sign of the $\ell_1$ term of Eq. 5 and raise
# $\lambda$ to $10^{-2}$. Run a short stage 1 (one restart, `widget_it1` iterations)
# with each sign. What happens to the length of the reversed triggers, and to model
# detection's separation?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 2
# With the paper's sign the objective is $\mathcal L - \lambda\|\mu\|_1$: each SGD step
# adds $\eta\lambda\,\mathrm{sign}(\mu_i)$ to $|\mu_i|$, a push away from 0. Flipping
# the sign turns it into an $\ell_1$ penalty, a pull towards 0 of the same size. Both
# runs below use the same initialisation and the same draws, so the only difference is
# that push. The flipped reversions come out shorter, on the benign models (which
# have nothing to find and follow the pull) and on the backdoored ones. The printout
# gives both separations (smallest backdoored over largest benign $M_r$): shrinking
# every trigger is not what the paper's sign is for; it keeps stage 1 from the trivial
# answer $\mu = 0$, where every model predicts its input noise well. The check
# asserts that the flipped reversions of the backdoored models are shorter.
# :::

# %% tags=["solution", "hide-cell"]
S_SHORTER = 1.0  # flipped / paper's sign, mean norm of the backdoored reversions


def short_stage1(lam_):
    """A short stage 1 from the first initialisation, same draws for every lam_."""
    g = run.generator("exercise 2")
    return estimate(models, init[:, :1], cfg.widget_it1, cfg.b1, lam_, g)[:, 0]


mu_paper, mu_flipped = short_stage1(1e-2), short_stage1(-1e-2)
for label, mu_ in (("paper's sign", mu_paper), ("flipped sign", mu_flipped)):
    kl_ = kl_stats(mu_)[0]
    print(f"{label}: mean norm, backdoored {float(mu_[BD].norm(dim=-1).mean()):.2f}, "
          f"benign {float(mu_[BENIGN].norm(dim=-1).mean()):.2f}; separation "
          f"{float(kl_[BD].min() / kl_[BENIGN].max()):.2f}")
icmlbook.solution_check("mean norm of backdoored reversions, flipped / paper's sign",
                        float(mu_flipped[BD].norm(dim=-1).mean()
                              / mu_paper[BD].norm(dim=-1).mean()), "<", S_SHORTER)

# %% [markdown] tags=["exercise"]
# **Exercise 3. TrojDiff.** TrojDiff's poisoned noise is $\mathcal N(\mu, \gamma^2 I)$
# with $\gamma = 0.6$ and $\mu = (1 - \gamma)\, g$ for a trigger image $g$. Without
# training anything: what are Eq. 10's $M_r$ and $V_r$ for the true $(\mu, \gamma)$,
# with one of our box triggers as $g$, and for a shrink alone ($\gamma = 0.6$,
# $\mu = 0$)? Does $V_r$ carry information that $M_r$ lacks?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 3
# Per pixel, $\mathrm{KL}_i = -\log\gamma + \frac12(\gamma^2 + \mu_i^2 - 1)$. A shrink
# alone gives the same value on every pixel, $-\log 0.6 + \frac12(0.36 - 1)$, about
# 0.19: $M_r$ is that value and $V_r = 0$. A uniform $\gamma$ moves only the mean, so
# $V_r$ is blind to it. With $\mu = 0.4\, g$ for a box trigger, the background pixels
# ($g_i = -1$) add $\frac12 (0.4)^2 = 0.08$ and the box pixels add nothing: $V_r$ is
# now positive, and it measures how *patterned* the shift is, which $M_r$ (its size)
# does not. A trigger spread evenly over the pixels would have $V_r = 0$ at any $M_r$;
# a small patch on a zero background has a large $V_r$ for a small $M_r$. The code
# evaluates both cases with `kl_stats` and checks the shrink alone's $V_r$.
# :::

# %% tags=["solution", "hide-cell"]
S_FLAT = 1e-12  # V_r of a uniform shrink: zero up to float rounding

gamma = torch.full((2, D), 0.6)
mu_troj = torch.stack([0.4 * TRIGGERS[0], torch.zeros(D)])
m_r, v_r = kl_stats(mu_troj, gamma)
print(f"TrojDiff with a box trigger: M_r {float(m_r[0]):.4f}, V_r {float(v_r[0]):.5f}")
print(f"shrink alone (gamma 0.6, mu 0): M_r {float(m_r[1]):.4f}, "
      f"V_r {float(v_r[1]):.2e}")
icmlbook.solution_check("V_r of a uniform shrink", float(v_r[1]), "<=", S_FLAT)

# %% [markdown]
# ## References
#
# - Y. Mo, H. Huang, M. Li, A. Li, Y. Wang. TERD: A Unified Framework for Safeguarding
#   Diffusion Models Against Backdoors. ICML 2024.
# - S.-Y. Chou, P.-Y. Chen, T.-Y. Ho. How to Backdoor Diffusion Models? (BadDiffusion).
#   CVPR 2023.
# - W. Chen, D. Song, B. Li. TrojDiff: Trojan Attacks on Diffusion Models with Diverse
#   Targets. CVPR 2023.
# - S. An, S.-Y. Chou, K. Zhang, et al. Elijah: Eliminating Backdoors Injected in
#   Diffusion Models via Distribution Shift. AAAI 2024.
# - J. Song, C. Meng, S. Ermon. Denoising Diffusion Implicit Models. ICLR 2021.

# %% tags=["remove-cell"]
run.finish();
