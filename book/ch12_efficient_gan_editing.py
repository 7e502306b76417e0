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
# # Efficient training of efficient GANs for image editing
#
# **Paper.** Yifan Gong, Zheng Zhan, Qing Jin, Yanyu Li, Yerlan Idelbayev, Xian Liu,
# Andrey Zharkov, Kfir Aberman, Sergey Tulyakov, Yanzhi Wang, Jian Ren.
# *E$^2$GAN: Efficient Training of Efficient GANs for Image-to-Image Translation.*
# ICML 2024 (PMLR 235). [arXiv:2401.06127](https://arxiv.org/abs/2401.06127) ·
# [project page](https://yifanfanfanfan.github.io/e2gan/). We found no official code.
#
# **The problem.** A text-to-image diffusion model can edit a photo ("make it a
# sketch", "add snow"), but far too slowly for a phone. One way out is *data
# distillation*: run the diffusion editor once over many photos, and train a small
# image-to-image GAN (pix2pix-style) on the resulting pairs; the GAN then edits in one
# forward pass. But every new editing concept needs a new GAN, trained from scratch,
# on thousands of pairs that each cost a diffusion run.
#
# **The idea.** Make each new concept cheap. (i) Train one *base* GAN on a mixture of
# representative concepts, with the concept given to a transformer block as a text
# embedding, so that its features are general. (ii) For a new concept, freeze the base
# and train only low-rank adapters (LoRA) on a few *crucial layers*, with a rank found
# by a simple search. (iii) Send to the teacher only a small, diverse subset of the
# source images, picked by k-means.
#
# **The claim.** In the abstract's words: a base GAN with generalized features is
# "adaptable to different concepts through fine-tuning, eliminating the need for
# training from scratch"; LoRA on crucial layers "with a simple yet effective rank
# search process, rather than fine-tuning the entire base model", and "the minimal
# amount of data necessary for fine-tuning", give "remarkably reduced training and
# storage costs for each concept"; the project page adds that this fine-tunes "only
# 1% weights with only portion of training data". The claims below test these three
# headlines at toy scale, and the paper's verdict is given with them.
#
# **What stands in for the paper, and what is ours.** The teacher is not a diffusion
# model: it is an exact *procedural editor* on 8×8 procedurally drawn
# RGB images (flips, a circular shift, inversion, gamma, a channel swap and
# compositions of two of them). Its edits are exact and cheap, so this chapter tests
# the *training-efficiency mechanics* (transfer from a multi-concept base, LoRA on
# crucial layers, rank search, data selection), not how faithfully a GAN distils a real
# diffusion editor. The "text" embedding of a concept is a pair of fixed random unit
# vectors, one per primitive edit (a cheap analogue of a text encoder on a two-word
# prompt). Quality is the held-out L1 error against the teacher, not FID. The generator
# (down-sampling, three residual blocks, one transformer block after the second, up-
# sampling) follows the paper's layout at a toy size, with mobile-style depthwise-
# separable residual blocks. Reconstructed, not taken from the paper's text: the rule
# that ranks layer groups as crucial (gain per trained parameter on a probe concept),
# the rank-search stopping rule, the loss weights and every step count. Ours too: the
# budgets (training from scratch gets three times the fine-tuning steps and its own
# learning-rate grid) and the cost measure (operations per training step, not
# seconds).

# %% tags=["parameters"]
tier = "default"  # smoke | default | full: size of the experiment
seed = 0  # drives every random number in the chapter
concept = "flipH+invert"  # the new editing concept (not among the base concepts)
n_pairs = 40  # teacher pairs available per new concept (picked from a pool of 400)
rank_tol = 0.1  # rank search: the smallest rank within this of the best rank's error

# %% tags=["validate"]
from icmlbook import check_choice, check_int, check_range, check_seed, check_tier

NEW_CONCEPTS = ("flipH+invert", "flipH+gamma", "shiftD+chswap", "flipV+chswap")
check_tier(tier)
check_seed(seed)
check_choice("concept", concept, NEW_CONCEPTS)
check_int("n_pairs", n_pairs, 8, 400)
check_range("rank_tol", rank_tol, 0.0, 1.0)

# %% [markdown]
# ## Setup
#
# Everything runs on one CPU thread. The tier sets the fine-tuning steps per arm, the
# length of the crucial-layer search and the number of held-out images. The full tier
# doubles the fine-tuning steps, uses more test images and trains a base model of its
# own for every seed (below). Nothing in it needs a GPU.

# %%
import copy
import math
import time

import numpy as np
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import icmlbook

run = icmlbook.start("12_efficient_gan_editing", tier=tier, seed=seed,
                     params=dict(concept=concept, n_pairs=n_pairs, rank_tol=rank_tol))
icmlbook.use_style()
cfg = run.pick(
    smoke=dict(base_steps=6, cached_base=False, save_base=False, ft_steps=2,
               search_steps=1, n_test=48, n_val=24, pool=32, widget_steps=1,
               bench_steps=1, restarts=2),
    default=dict(base_steps=4000, cached_base=True, save_base=False, ft_steps=100,
                 search_steps=40, n_test=400, n_val=200, pool=400, widget_steps=30,
                 bench_steps=10, restarts=3),
    full=dict(base_steps=4000, cached_base=False, save_base=True, ft_steps=200,
              search_steps=120, n_test=1000, n_val=400, pool=400, widget_steps=80,
              bench_steps=40, restarts=3),
)
N_SEL = min(n_pairs, cfg.pool)  # the smoke tier's pool is smaller
SIZE = 8  # images are SIZE x SIZE RGB in [-1, 1]
D_TEXT = 16  # width of a concept token
BATCH = 32
L1_WEIGHT = 100.0  # lambda_L1 in Eq. 1 (pix2pix's value)
ADV_WEIGHT = 1.0  # weight of the adversarial term in Eq. 1
LR_BASE = 2e-3  # peak learning rate of the base model (one-cycle schedule)
LR_FULL = (3e-4, 1e-3, 3e-3)  # full fine-tuning: the best one on validation
LR_SCRATCH = (3e-3, 1e-2, 3e-2)  # training from scratch: the best one on validation
SCRATCH_X = 3  # training from scratch gets SCRATCH_X times the fine-tuning steps
LR_LORA = 1e-2  # LoRA adapters (not tuned)
RANKS = (1, 2, 4, 8)  # ranks the search tries, ascending
SEARCH_RANK = 4  # rank of the per-group LoRA in the crucial-layer search
N_CRUCIAL = 2  # layer groups kept as crucial
BASE_CONCEPTS = ("flipH", "flipV", "shiftD", "invert", "gamma", "chswap",
                 "flipV+invert", "shiftD+gamma")
PROBE = next(c for c in NEW_CONCEPTS if c != concept)  # for the crucial-layer search
STYLE = icmlbook.method_styles(
    "LoRA on crucial layers", "full fine-tune", "from scratch", "LoRA elsewhere",
    "zero-shot base", "LoRA, random subset",
)
print(f"tier {tier}: base {cfg.base_steps} steps; {cfg.ft_steps} steps per arm on "
      f"{N_SEL} pairs of '{concept}'; probe concept '{PROBE}'; "
      f"{cfg.n_test} test images")

# %% [markdown]
# One colour per method in every figure: LoRA on the crucial layers in blue, full
# fine-tuning of the base in red, training from scratch in teal, LoRA on the other
# layers in amber, the base used zero-shot in purple, and LoRA on a random subset of
# the data in grey.
#
# ## The idea in math
#
# **Distillation data.** A teacher $T$ edits a source image $x$ under concept $c$:
# $y = T(x, c)$. A concept comes with a text embedding $e_c$ (here: two tokens in
# $\mathbb R^{16}$). The generator $G(x, e_c)$ is trained on pairs $(x, y)$ with the
# pix2pix objective, a conditional discriminator $D(x, y)$ and least-squares GAN terms:
#
# $$\mathcal L_G = \mathbb E\big[(D(x, G(x, e_c)) - 1)^2\big]
#   + \lambda_{L1}\, \mathbb E\,\lVert G(x, e_c) - y \rVert_1, \qquad
#   \mathcal L_D = \mathbb E\big[(D(x, y) - 1)^2 + D(x, G(x, e_c))^2\big]. \tag{1}$$
#
# The base model is trained with (1) on a mixture of base concepts; every arm for a new
# concept $c^\star$ uses the same objective on that concept's pairs.

# %% [markdown]
# **LoRA.** A frozen weight $W \in \mathbb R^{d_{out} \times d_{in}}$ of a crucial
# layer is replaced by
#
# $$W' = W + \frac{\alpha}{r} B A, \qquad B \in \mathbb R^{d_{out} \times r},\;
#   A \in \mathbb R^{r \times d_{in}},\; B_0 = 0, \tag{2}$$
#
# so training starts *exactly* at the base model. For a convolution with kernel
# $k \times k$, $d_{in} = C_{in} k^2 / g$ ($g$ groups) and $BA$ is reshaped to the
# kernel; for a transposed convolution the kernel is stored $(C_{in}, C_{out}, k, k)$,
# so $d_{out} = C_{out}$ and the reshaped $BA$ is transposed. The adapters of a set
# $\mathcal S$ of layers train
#
# $$P_{\text{LoRA}}(r) = \sum_{\ell \in \mathcal S} r\,(d_{in}^\ell + d_{out}^\ell)
#   \tag{3}$$
#
# parameters, and they can be merged into $W$ after training: zero inference cost.

# %% [markdown]
# **Crucial layers (our reconstruction).** Give each layer group $g$ alone LoRA of rank
# 4 and fine-tune it briefly on a *probe* concept; score it by the drop in validation
# L1 per trained parameter,
#
# $$s_g = \frac{\mathrm{L1}_{\text{zero-shot}} - \mathrm{L1}_g}{P_g}, \tag{4}$$
#
# and keep the `N_CRUCIAL` best groups. The probe is a different new concept, so the
# choice is made before the target concept is seen, as a layer choice fixed once for an
# architecture would be.
#
# **Rank search (our reconstruction of the "simple yet effective" search).** Train
# LoRA on the crucial layers at ranks $r_1 < r_2 < \dots$ and keep
#
# $$r^\star = \min\{\, r : \mathrm{L1}_{val}(r) \le (1 + \delta)
#   \min_{r'} \mathrm{L1}_{val}(r') \,\}, \tag{5}$$
#
# the smallest rank within a tolerance $\delta$ (`rank_tol`) of the best one.
#
# **Minimal data.** Embed the candidate source images, run k-means with $K$ clusters
# ($K$ = `n_pairs`) and send only the image nearest each centroid to the teacher:
#
# $$\mathcal D_K = \{\arg\min_{x \in \text{pool}} \lVert \phi(x) - \mu_k \rVert
#   : k = 1..K\}, \tag{6}$$
#
# with $\phi$ the image's pixels here and $\mu_k$ the k-means centroids.

# %% [markdown]
# ## From scratch
#
# ### Images, the teacher and the concept tokens
#
# A source image is a random colour gradient with two random ellipses or rectangles.
# The teacher composes primitive edits. Three are non-local (two flips and a circular
# shift by a third of the image), three act on colours.

# %%
def make_images(n, gen):
    """n random source images (n, 3, SIZE, SIZE) in [-1, 1]."""
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, SIZE), torch.linspace(-1, 1, SIZE),
                            indexing="ij")
    c0, c1 = torch.rand(2, n, 3, 1, 1, generator=gen)
    angle = 2 * math.pi * torch.rand(n, 1, 1, generator=gen)
    ramp = (torch.cos(angle) * xx + torch.sin(angle) * yy + 1.4) / 2.8
    img = c0 + (c1 - c0) * ramp[:, None]
    for _ in range(2):
        cx, cy = 1.6 * torch.rand(2, n, 1, 1, generator=gen) - 0.8
        rx, ry = 0.3 + 0.5 * torch.rand(2, n, 1, 1, generator=gen)
        rect = torch.rand(n, 1, 1, generator=gen) < 0.5
        dx, dy = (xx - cx) / rx, (yy - cy) / ry
        inside = torch.where(rect, (dx.abs() < 1) & (dy.abs() < 1), dx**2 + dy**2 < 1)
        img = torch.where(inside[:, None], torch.rand(n, 3, 1, 1, generator=gen), img)
    return 2 * img - 1


PRIMITIVES = {
    "flipH": lambda x: x.flip(-1),
    "flipV": lambda x: x.flip(-2),
    "shiftD": lambda x: x.roll(SIZE // 3, -2),
    "invert": lambda x: -x,
    "gamma": lambda x: 2 * ((x + 1) / 2).clamp(0, 1) ** 2.2 - 1,
    "chswap": lambda x: x[:, [2, 0, 1]],
}


def teacher(x, c):
    """The editor T(x, c): apply the primitives of concept c ("a+b") in order."""
    for name in c.split("+"):
        x = PRIMITIVES[name](x)
    return x


# %% [markdown]
# Each primitive has a fixed random unit token; a concept is its one or two tokens (a
# single primitive is padded with a "null" token). The tokens are the same in every
# run, as a text encoder would be.

# %%
NAMES = tuple(PRIMITIVES)
TOKEN_SEED = 1234  # the "text encoder": fixed, the same tokens for every seed
TOKENS = F.normalize(torch.randn(len(NAMES) + 1, D_TEXT,
                                 generator=torch.Generator().manual_seed(TOKEN_SEED)),
                     dim=-1)


def embed(c):
    """The text embedding e_c of concept c: (2, D_TEXT)."""
    ids = [NAMES.index(p) for p in c.split("+")]
    return TOKENS[ids + [len(NAMES)] * (2 - len(ids))]


# %% [markdown]
# ### The generator and the discriminator
#
# Down-sampling to 4×4, two residual blocks, the transformer block, a third residual
# block, up-sampling, and a skip from the first features to a **linear** output layer
# (a tanh output saturates on the ±1 targets of an exact teacher and stalls
# fine-tuning; we clamp only when evaluating). The residual blocks are depthwise-
# separable (a 3×3 depthwise and a 1×1 convolution, mobile style). The transformer
# block carries the concept: cross-attention to the concept tokens, then an adaptive
# layer norm whose scale and shift come from the concept (a multiplicative condition:
# without it a single attention layer cannot switch a spatial permutation per concept),
# then self-attention over the 16 positions and a feed-forward layer.

# %%
class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.GroupNorm(4, c)
        self.dw = nn.Conv2d(c, c, 3, padding=1, groups=c)
        self.pw = nn.Conv2d(c, c, 1)

    def forward(self, h):
        return h + self.pw(F.gelu(self.dw(self.norm(h))))


class Attention(nn.Module):
    def __init__(self, d, d_ctx, heads=4):
        super().__init__()
        self.heads = heads
        self.q, self.k = nn.Linear(d, d), nn.Linear(d_ctx, d)
        self.v, self.o = nn.Linear(d_ctx, d), nn.Linear(d, d)

    def forward(self, h, ctx):
        b, n, d = h.shape
        split = lambda t: t.view(b, -1, self.heads, d // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(split(self.q(h)), split(self.k(ctx)),
                                           split(self.v(ctx)))
        return self.o(y.transpose(1, 2).reshape(b, n, d))


class TransformerBlock(nn.Module):
    def __init__(self, d, n_pos):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, n_pos, d))
        self.norm1, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d, elementwise_affine=False)
        self.cross, self.self_attn = Attention(d, D_TEXT), Attention(d, d)
        self.ada = nn.Linear(D_TEXT, 2 * d)  # adaptive layer norm from the concept
        self.ff1, self.ff2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, h, e):
        b, c, hh, ww = h.shape
        t = h.flatten(2).transpose(1, 2) + self.pos
        t = t + self.cross(self.norm1(t), e)
        scale, shift = self.ada(e.mean(1))[:, None].chunk(2, -1)
        z = self.norm2(t) * (1 + scale) + shift
        t = t + self.self_attn(z, z)
        t = t + self.ff2(F.gelu(self.ff1(self.norm3(t))))
        return t.transpose(1, 2).reshape(b, c, hh, ww)


class Generator(nn.Module):
    def __init__(self, c1=16, c2=32):
        super().__init__()
        self.inc = nn.Conv2d(3, c1, 3, padding=1)
        self.down = nn.Conv2d(c1, c2, 2, stride=2)
        self.rb1, self.rb2, self.rb3 = ResBlock(c2), ResBlock(c2), ResBlock(c2)
        self.tb = TransformerBlock(c2, (SIZE // 2) ** 2)
        self.up = nn.ConvTranspose2d(c2, c1, 2, stride=2)
        self.outc = nn.Conv2d(2 * c1, 3, 3, padding=1)

    def forward(self, x, e):
        h0 = F.gelu(self.inc(x))
        h = self.rb2(self.rb1(F.gelu(self.down(h0))))
        h = self.rb3(self.tb(h, e))
        return self.outc(torch.cat([F.gelu(self.up(h)), h0], 1))  # linear output


class Discriminator(nn.Module):
    """A conditional PatchGAN on [x, y]: a 2 x 2 grid of patch scores."""

    def __init__(self, c=16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(6, c, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(c, 2 * c, 4, 2, 1), nn.LeakyReLU(0.2),
            nn.Conv2d(2 * c, 1, 3, 1, 1))

    def forward(self, x, y):
        return self.net(torch.cat([x, y], 1))


# %% [markdown]
# The layer groups that LoRA may target. Normalisation layers, biases, the position
# table and the output layer's neighbours outside a group are never adapted.

# %%
LAYER_GROUPS = {
    "in/out convs": ("inc", "outc"),
    "down/up-sampling": ("down", "up"),
    "residual blocks": tuple(f"rb{i}.{p}" for i in (1, 2, 3) for p in ("dw", "pw")),
    "cross-attention": ("tb.cross.q", "tb.cross.k", "tb.cross.v", "tb.cross.o",
                        "tb.ada"),
    "self-attention": ("tb.self_attn.q", "tb.self_attn.k", "tb.self_attn.v",
                       "tb.self_attn.o"),
    "feed-forward": ("tb.ff1", "tb.ff2"),
}

# %% [markdown]
# ### LoRA (Eqs. 2-3)

# %%
def lora_dims(layer):
    """(d_out, d_in) of the matrix that LoRA factorises for this layer."""
    w = layer.weight
    if isinstance(layer, nn.ConvTranspose2d):  # weight (C_in, C_out, k, k)
        return w.shape[1], w.shape[0] * w.shape[2] * w.shape[3]
    return w.shape[0], w[0].numel()


class LoRA(nn.Module):
    """Eq. 2 around a frozen Linear, Conv2d or ConvTranspose2d."""

    def __init__(self, base, r, alpha=None, gen=None):
        super().__init__()
        self.base, self.r, self.scale = base, r, (alpha or r) / r
        d_out, d_in = lora_dims(base)
        self.A = nn.Parameter(torch.randn(r, d_in, generator=gen) / math.sqrt(d_in))
        self.B = nn.Parameter(torch.zeros(d_out, r))  # B_0 = 0

    def delta(self):
        """(alpha / r) B A, reshaped to the layer's weight."""
        w, d = self.base.weight, self.scale * self.B @ self.A  # Eq. 2
        if isinstance(self.base, nn.ConvTranspose2d):
            return d.view(w.shape[1], w.shape[0], *w.shape[2:]).transpose(0, 1)
        return d.view_as(w)

    def forward(self, x):
        """W x + (alpha / r) B A x: exactly the base layer's output while B = 0."""
        return self.base(x) + self.apply_weight(x, self.delta())

    def apply_weight(self, x, w):
        """The layer's operation with weight w and no bias."""
        b = self.base
        if isinstance(b, nn.Linear):
            return F.linear(x, w)
        if isinstance(b, nn.ConvTranspose2d):
            return F.conv_transpose2d(x, w, None, b.stride, b.padding)
        return F.conv2d(x, w, None, b.stride, b.padding, groups=b.groups)


def with_lora(model, layers, r, gen=None):
    """A copy of model, frozen, with LoRA of rank r on the named layers."""
    m = copy.deepcopy(model)
    m.requires_grad_(False)
    for name in layers:
        parent, _, leaf = name.rpartition(".")
        owner = m.get_submodule(parent) if parent else m
        setattr(owner, leaf, LoRA(getattr(owner, leaf), r, gen=gen))
    return m


def merge_lora(model):
    """A plain copy of a LoRA model with W + (alpha / r) B A folded into each W."""
    m = copy.deepcopy(model)
    for name, mod in list(m.named_modules()):
        if isinstance(mod, LoRA):
            with torch.no_grad():
                mod.base.weight += mod.delta()
            parent, _, leaf = name.rpartition(".")
            setattr(m.get_submodule(parent) if parent else m, leaf, mod.base)
    return m


def lora_count(model, layers, r):
    """Eq. 3: trainable parameters of rank-r LoRA on the named layers."""
    return sum(r * sum(lora_dims(model.get_submodule(n))) for n in layers)


def trainable(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# %% [markdown]
# ### Training with Eq. 1, and the quality measure
#
# One loop serves the base model and every arm: Adam, a generator step on
# $\mathcal L_G$, then a discriminator step on $\mathcal L_D$. The discriminator keeps
# pix2pix's $\beta_1 = 0.5$; the generator follows a one-cycle learning-rate schedule,
# which also cycles its $\beta_1$ against the learning rate between 0.95 and 0.85
# (PyTorch's defaults, written out below). It updates only what requires a gradient, so
# the same loop trains the whole generator or just its adapters. Quality is the mean
# L1 error against the teacher on held-out images, with the output clamped to $[-1, 1]$.

# %%
def train_gan(G, D, sample, steps, lr, gen, batch=BATCH):
    """Eq. 1 for `steps` steps; sample(batch, gen) -> (x, y, e). Returns seconds."""
    opt_g = torch.optim.Adam([p for p in G.parameters() if p.requires_grad], lr,
                             betas=(0.95, 0.999))  # beta_1: the schedule sets it
    sched = torch.optim.lr_scheduler.OneCycleLR(opt_g, lr, total_steps=max(steps, 2),
                                                pct_start=0.15, cycle_momentum=True,
                                                base_momentum=0.85, max_momentum=0.95)
    opt_d = torch.optim.Adam(D.parameters(), 2e-4, betas=(0.5, 0.999))
    t0 = time.perf_counter()
    for _ in range(steps):
        x, y, e = sample(batch, gen)
        out = G(x, e)
        loss_g = (ADV_WEIGHT * ((D(x, out) - 1) ** 2).mean()
                  + L1_WEIGHT * (out - y).abs().mean())  # Eq. 1, L_G
        opt_g.zero_grad()
        loss_g.backward()
        opt_g.step()
        sched.step()
        loss_d = ((D(x, y) - 1) ** 2).mean() + (D(x, out.detach()) ** 2).mean()
        opt_d.zero_grad()
        loss_d.backward()
        opt_d.step()
    return time.perf_counter() - t0


def held_out_l1(G, c, xs):
    """Mean |clamp(G(x, e_c)) - T(x, c)| over images xs."""
    with torch.no_grad():
        out = G(xs, embed(c).expand(len(xs), -1, -1)).clamp(-1, 1)
    return float((out - teacher(xs, c)).abs().mean())


def pair_sampler(xs, c):
    """Minibatches (with replacement) of the fixed pairs (xs, T(xs, c))."""
    ys, e = teacher(xs, c), embed(c)

    def sample(batch, gen):
        i = torch.randint(0, len(xs), (batch,), generator=gen)
        return xs[i], ys[i], e.expand(batch, -1, -1)
    return sample


def base_sampler(concepts):
    """Fresh images, each edited by a random base concept."""
    e_all = torch.stack([embed(c) for c in concepts])

    def sample(batch, gen):
        x = make_images(batch, gen)
        k = torch.randint(0, len(concepts), (batch,), generator=gen)
        y = torch.empty_like(x)
        for j, c in enumerate(concepts):
            y[k == j] = teacher(x[k == j], c)
        return x, y, e_all[k]
    return sample


# %% [markdown]
# ### Minimal data: k-means selection (Eq. 6)

# %%
def kmeans(z, k, gen, iters=20):
    """Lloyd's k-means on rows of z, k-means++ start: the centroids (k, d)."""
    cent = z[torch.randint(0, len(z), (1,), generator=gen)]
    while len(cent) < k:
        d2 = torch.cdist(z, cent).min(1).values ** 2
        cent = torch.cat([cent, z[torch.multinomial(d2 + 1e-12, 1, generator=gen)]])
    for _ in range(iters):
        lab = torch.cdist(z, cent).argmin(1)
        for j in range(k):
            if (lab == j).any():
                cent[j] = z[lab == j].mean(0)
    return cent


def kmeans_subset(pool, k, gen):
    """Eq. 6: indices of the pool images nearest each k-means centroid."""
    z = pool.flatten(1)
    dist = torch.cdist(kmeans(z, k, gen), z)
    chosen = []
    for row in dist:  # nearest unused image to each centroid
        row = row.clone()
        row[chosen] = math.inf
        chosen.append(int(row.argmin()))
    return torch.tensor(chosen)


def coverage(pool, idx):
    """Mean distance of a pool image to its nearest chosen one (lower: more spread)."""
    z = pool.flatten(1)
    return float(torch.cdist(z, z[idx]).min(1).values.mean())


# %% [markdown]
# ### The base model, trained once
#
# The base GAN is trained on the eight base concepts, with a fresh batch from the
# teacher at every step. That is the slow part (several minutes on a busy 2-core CPU
# at `base_steps`), and the paper trains its base once for all future concepts, so the
# default tier does the same: it loads `book/ch12_base_gan.pt` (0.15 MB), a base
# trained once with this chapter's `train_base` (4000 steps, at seed 0, with an
# earlier seeding of its random numbers). Every default seed therefore starts from
# the *same* base and re-draws everything else (images, data pool, probe data,
# adapters, the arms from scratch). The full tier trains a base of its own for every
# seed and writes it to the system's temporary folder (copy it next to the notebook
# to replace the shipped one); the smoke tier trains a tiny one.

# %%
BASE_FILE = "ch12_base_gan.pt"  # next to this notebook, shipped with the book


def train_base(steps, gen):
    """The base G and D, trained with Eq. 1 on the base concepts: (G, D, seconds).
    Their initial weights come from the global generator (seed it first)."""
    G, D = Generator(), Discriminator()
    seconds = train_gan(G, D, base_sampler(BASE_CONCEPTS), steps, LR_BASE, gen)
    return G, D, seconds


def save_base(G, D, path, steps):
    torch.save(dict(G=G.state_dict(), D=D.state_dict(), steps=steps), path)


def load_base(path):
    """(G, D, steps) from a file written by save_base."""
    state = torch.load(path, weights_only=True)
    G, D = Generator(), Discriminator()
    G.load_state_dict(state["G"])
    D.load_state_dict(state["D"])
    return G, D, int(state["steps"])


# %% [markdown]
# Before anything trains we check what must hold of the teacher: a composite is the
# composition of its parts; flips and inversion are involutions.

# %%
import os
import tempfile

x_check = make_images(16, run.generator("teacher check"))
teacher_err = max(
    float((teacher(x_check, "flipV+invert") - (-x_check.flip(-2))).abs().max()),
    float((teacher(teacher(x_check, "flipH"), "flipH") - x_check).abs().max()),
    float((teacher(teacher(x_check, "invert"), "invert") - x_check).abs().max()))
if cfg.cached_base:
    G_base, D_base, base_steps = load_base(BASE_FILE)
    base_seconds = 0.0
    print(f"loaded the shipped base model ({base_steps} steps) from {BASE_FILE}")
else:
    run.reseed("base init")
    G_base, D_base, base_seconds = train_base(cfg.base_steps,
                                              run.generator("base batches"))
    base_steps = cfg.base_steps
    if cfg.save_base:
        base_path = os.path.join(tempfile.gettempdir(), f"ch12_base_gan_s{seed}.pt")
        save_base(G_base, D_base, base_path, base_steps)
        print(f"trained a base model for this seed; saved to {base_path}")
n_gen = trainable(G_base)
test_x = make_images(cfg.n_test, run.generator("test images"))
val_x = make_images(cfg.n_val, run.generator("validation images"))
base_l1 = {c: held_out_l1(G_base, c, test_x) for c in BASE_CONCEPTS}
zero_shot = {c: held_out_l1(G_base, c, test_x) for c in NEW_CONCEPTS}
print(f"generator: {n_gen:,} parameters; base: {base_steps} steps "
      f"({base_seconds:.0f} s here)")
print("base concepts, held-out L1: "
      + ", ".join(f"{c} {v:.3f}" for c, v in base_l1.items()))
print("new concepts zero-shot:     "
      + ", ".join(f"{c} {v:.3f}" for c, v in zero_shot.items()))

# %% [markdown]
# ### The new concept's data: k-means against random
#
# A pool of `pool` candidate source images; only `n_pairs` of them go to the teacher.
# Eq. 6 picks them by k-means on the pixels; the comparison picks the same number at
# random. Coverage is how far a pool image lies from its nearest picked one.

# %%
pool = make_images(cfg.pool, run.generator("pool"))
pick_km = kmeans_subset(pool, N_SEL, run.generator("k-means"))
pick_rand = torch.randperm(cfg.pool, generator=run.generator("random subset"))[:N_SEL]
cover_ratio = coverage(pool, pick_km) / coverage(pool, pick_rand)
train_km, train_rand = pool[pick_km], pool[pick_rand]
print(f"{N_SEL} of {cfg.pool} pool images; coverage k-means / random "
      f"{cover_ratio:.3f}")


# %% [markdown]
# Every arm below sees the same minibatch order (the run's "minibatches" stream, drawn
# afresh for each arm) and the same pairs. A transfer arm starts from the base
# generator and a copy of the base discriminator; the arm from scratch starts from
# fresh ones (the run's "scratch init" stream). The budgets are stated plainly: LoRA
# and full fine-tuning get `ft_steps` steps; training from scratch gets `SCRATCH_X`
# times as many, since it starts from nothing, and the best of its own learning-rate
# grid, whose middle value is the one that wins on most seeds. Each arm's learning rate
# is picked on validation images.

# %%
def fine_tune_full(xs, c, lr, steps, scratch=False, restart=0):
    """Full fine-tuning of the base (or training from scratch): (G, seconds)."""
    if scratch:
        run.reseed(f"scratch init {restart}")
        G, D = Generator(), Discriminator()
    else:
        G, D = copy.deepcopy(G_base), copy.deepcopy(D_base)
    return G, train_gan(G, D, pair_sampler(xs, c), steps, lr,
                        run.generator(f"minibatches {restart}"))


def fine_tune_lora(xs, c, layers, r, steps=None, restart=0):
    """LoRA of rank r on the named layers of the frozen base: (G, seconds)."""
    G = with_lora(G_base, layers, r, gen=run.generator(f"lora init {restart}"))
    seconds = train_gan(G, copy.deepcopy(D_base), pair_sampler(xs, c),
                        steps or cfg.ft_steps, LR_LORA,
                        run.generator(f"minibatches {restart}"))
    return G, seconds


def tuned(xs, c, lrs, steps, scratch=False):
    """The best learning rate of lrs on validation images: (G, seconds, lr)."""
    runs = [(*fine_tune_full(xs, c, lr, steps, scratch), lr) for lr in lrs]
    return min(runs, key=lambda t: held_out_l1(t[0], c, val_x))


# %% [markdown]
# ### Which layers are crucial (Eq. 4)
#
# On the probe concept (a different new concept, with its own `n_pairs` pairs), each
# layer group alone gets rank-4 LoRA for `search_steps` steps.

# %%
probe_x = make_images(N_SEL, run.generator("probe images"))
probe_zero = held_out_l1(G_base, PROBE, val_x)
group_score, group_gain = {}, {}
for g_name, layers in icmlbook.progress(LAYER_GROUPS.items(), desc="layer search"):
    G_g, _ = fine_tune_lora(probe_x, PROBE, layers, SEARCH_RANK, cfg.search_steps)
    group_gain[g_name] = probe_zero - held_out_l1(G_g, PROBE, val_x)
    group_score[g_name] = group_gain[g_name] / trainable(G_g)  # Eq. 4
ranked = sorted(group_score, key=group_score.get, reverse=True)
crucial_groups = ranked[:N_CRUCIAL]
CRUCIAL = tuple(n for g in crucial_groups for n in LAYER_GROUPS[g])
ELSEWHERE = tuple(n for g in ranked[-N_CRUCIAL:] for n in LAYER_GROUPS[g])
for g_name in ranked:
    print(f"{g_name:>17}: L1 gain {group_gain[g_name]:+.4f}, "
          f"{lora_count(G_base, LAYER_GROUPS[g_name], SEARCH_RANK):5d} params, "
          f"score {1e6 * group_score[g_name]:6.2f} per 1e6 params")
print("crucial:", " + ".join(crucial_groups))

# %% [markdown]
# ### Rank search (Eq. 5), full fine-tuning and training from scratch

# %%
def rank_search(val_by_rank, tol):
    """Eq. 5: the smallest rank within a factor (1 + tol) of the best validation L1."""
    best = min(val_by_rank.values())
    return min(r for r, v in val_by_rank.items() if v <= (1 + tol) * best)


# %% [markdown]
# LoRA on the crucial layers at each rank, on the k-means pairs of the target concept;
# the rank is chosen on validation images, and all quality numbers below are on the
# held-out test images. Full fine-tuning and training from scratch each get the best
# of three learning rates on the same validation images.

# %%
lora_runs = {r: fine_tune_lora(train_km, concept, CRUCIAL, r) for r in RANKS}
val_by_rank = {r: held_out_l1(G, concept, val_x) for r, (G, _) in lora_runs.items()}
r_star = rank_search(val_by_rank, rank_tol)  # Eq. 5
G_lora, lora_seconds = lora_runs[r_star]
G_full, full_seconds, lr_full = tuned(train_km, concept, LR_FULL, cfg.ft_steps)
G_scratch, scratch_seconds, lr_scratch = tuned(train_km, concept, LR_SCRATCH,
                                               SCRATCH_X * cfg.ft_steps, scratch=True)
p_crucial = lora_count(G_base, CRUCIAL, r_star)
r_else = max([r for r in range(1, 65) if lora_count(G_base, ELSEWHERE, r) <= p_crucial]
             or [1])
G_else, _ = fine_tune_lora(train_km, concept, ELSEWHERE, r_else)
G_rand, _ = fine_tune_lora(train_rand, concept, CRUCIAL, r_star)
print("rank search, validation L1: "
      + ", ".join(f"r={r} {v:.4f}" for r, v in val_by_rank.items())
      + f" -> r* = {r_star}")
print(f"learning rates: full fine-tune {lr_full:g} of {LR_FULL}, from scratch "
      f"{lr_scratch:g} of {LR_SCRATCH} ({SCRATCH_X * cfg.ft_steps} steps)")

# %% [markdown]
# ### Quality against trainable parameters and time

# %%
quality = {
    "LoRA on crucial layers": held_out_l1(G_lora, concept, test_x),
    "full fine-tune": held_out_l1(G_full, concept, test_x),
    "from scratch": held_out_l1(G_scratch, concept, test_x),
    "LoRA elsewhere": held_out_l1(G_else, concept, test_x),
    "zero-shot base": zero_shot[concept],
    "LoRA, random subset": held_out_l1(G_rand, concept, test_x),
}
params = {
    "LoRA on crucial layers": trainable(G_lora), "full fine-tune": n_gen,
    "from scratch": n_gen, "LoRA elsewhere": trainable(G_else), "zero-shot base": 0,
    "LoRA, random subset": trainable(G_rand),
}
test_by_rank = {r: held_out_l1(G, concept, test_x) for r, (G, _) in lora_runs.items()}
print(f"{'arm':>24} {'test L1':>8} {'trainable':>10} {'of G':>7}")
for name, q in quality.items():
    print(f"{name:>24} {q:8.4f} {params[name]:10,d} {params[name] / n_gen:7.2%}")
print(f"LoRA elsewhere: rank {r_else} on "
      + ", ".join(ranked[-N_CRUCIAL:]))

# %% [markdown]
# One training run is noisy (its minibatch order, its adapters' start), and the claims
# compare arms within a few percent of each other, so the arms they compare are
# trained `restarts` times each, with fresh streams, and their held-out errors
# averaged: LoRA at the searched rank and at the smallest and largest ranks, and full
# fine-tuning at its chosen learning rate. The rank search itself and the table above
# use the first run.

# %%
def mean_l1(first, retrain):
    """Mean held-out L1 of the run `first` and of retrain(k), k = 1..restarts-1."""
    runs = [first] + [retrain(k) for k in range(1, cfg.restarts)]
    return float(np.mean([held_out_l1(G, concept, test_x) for G in runs]))


mean_by_rank = {r: mean_l1(lora_runs[r][0], lambda k: fine_tune_lora(
    train_km, concept, CRUCIAL, r, restart=k)[0])
    for r in sorted({r_star, min(RANKS), max(RANKS)})}
mean_full = mean_l1(G_full, lambda k: fine_tune_full(train_km, concept, lr_full,
                                                     cfg.ft_steps, restart=k)[0])
print(f"mean held-out L1 over {cfg.restarts} runs: "
      + ", ".join(f"LoRA r={r} {v:.4f}" for r, v in mean_by_rank.items())
      + f", full fine-tune {mean_full:.4f}")

# %% [markdown]
# ### How much the number of pairs matters
#
# The comparison with training from scratch depends on how many pairs there are: with
# few pairs a network from scratch overfits them, with many it can learn the edit
# itself. The same two arms again, on *every* image of the pool (`pool` pairs instead
# of `n_pairs`), with the learning rate each picked above:

# %%
G_lora_all, _ = fine_tune_lora(pool, concept, CRUCIAL, r_star)
G_scratch_all, _ = fine_tune_full(pool, concept, lr_scratch, SCRATCH_X * cfg.ft_steps,
                                  scratch=True)
l1_lora_all = held_out_l1(G_lora_all, concept, test_x)
l1_scratch_all = held_out_l1(G_scratch_all, concept, test_x)
vs_scratch_all = l1_lora_all / l1_scratch_all
subset_vs_all = quality["LoRA on crucial layers"] / l1_lora_all
print(f"{cfg.pool} pairs: LoRA {l1_lora_all:.4f}, from scratch {l1_scratch_all:.4f} "
      f"(ratio {vs_scratch_all:.3f}; with {N_SEL} pairs "
      f"{quality['LoRA on crucial layers'] / quality['from scratch']:.3f}); LoRA on "
      f"{N_SEL} k-means pairs / on all {cfg.pool}: {subset_vs_all:.3f}")

# %% [markdown]
# Training cost. Seconds are noisy on a shared machine (two runs of the same seed
# differ in the second digit), so the claim counts work instead: the floating-point
# operations of one training step (forward and backward of generator and
# discriminator, as torch's `FlopCounterMode` counts matrix products and
# convolutions), for LoRA at rank $r^\star$ and for full fine-tuning. LoRA skips the
# weight gradients of every frozen layer and the backward pass below the first adapted
# layer, but adds its own small products. The count depends only on the layers and the
# rank, not on the machine. The CPU time per step is measured too and recorded as a
# finding: LoRA and full fine-tuning run `bench_steps` steps in turn, five times each,
# and the ratio is that of their medians.

# %%
def flops_per_step(G, D, sample, gen):
    """Floating-point operations of one training step of Eq. 1 (G and D)."""
    with FlopCounterMode(display=False) as counter:
        train_gan(G, D, sample, 1, 1e-3, gen)
    return counter.get_total_flops()


sample_km = pair_sampler(train_km, concept)
flops_lora = flops_per_step(with_lora(G_base, CRUCIAL, r_star), copy.deepcopy(D_base),
                            sample_km, run.generator("minibatches"))
flops_full = flops_per_step(copy.deepcopy(G_base), copy.deepcopy(D_base), sample_km,
                            run.generator("minibatches"))
flop_ratio = flops_lora / flops_full


def cpu_seconds_per_step(make):
    """CPU seconds per training step of one short run of a fresh (G, D) = make()."""
    G, D = make()
    t0 = time.process_time()
    train_gan(G, D, pair_sampler(train_km, concept), cfg.bench_steps, 1e-3,
              run.generator("minibatches"))
    return (time.process_time() - t0) / cfg.bench_steps


timings = {"lora": [], "full": []}
for _ in range(5):
    timings["lora"].append(cpu_seconds_per_step(
        lambda: (with_lora(G_base, CRUCIAL, r_star), copy.deepcopy(D_base))))
    timings["full"].append(cpu_seconds_per_step(
        lambda: (copy.deepcopy(G_base), copy.deepcopy(D_base))))
step_lora, step_full = (float(np.median(timings[k])) for k in ("lora", "full"))
time_ratio = step_lora / step_full
print(f"FLOPs per step: LoRA {flops_lora / 1e6:.2f} M, full {flops_full / 1e6:.2f} M "
      f"(ratio {flop_ratio:.3f})")
print(f"CPU ms per step: LoRA {1e3 * step_lora:.1f}, full {1e3 * step_full:.1f} "
      f"(ratio {time_ratio:.2f}); wall s per arm: LoRA {lora_seconds:.1f}, full "
      f"{full_seconds:.1f}, scratch {scratch_seconds:.1f} ({SCRATCH_X}x the steps)")

# %% [markdown]
# ### What must hold if the code is right
#
# With $B = 0$ the adapted generator *is* the base generator, bit for bit (compared
# with the base frozen in the same way: freezing the weights alone changes which CPU
# kernels run, and the outputs at the 1e-7 level); after
# training, merging $W + \frac{\alpha}{r}BA$ into the weights reproduces the adapted
# outputs; and the adapters' size is Eq. 3.

# %%
with torch.no_grad():
    e_t = embed(concept).expand(len(test_x), -1, -1)
    fresh = with_lora(G_base, CRUCIAL + ELSEWHERE, 4, gen=run.generator("lora init"))
    frozen = copy.deepcopy(G_base).requires_grad_(False)
    init_err = float((fresh(test_x, e_t) - frozen(test_x, e_t)).abs().max())
    merge_err = float((merge_lora(G_lora)(test_x, e_t) - G_lora(test_x, e_t))
                      .abs().max())
count_err = abs(trainable(G_lora) - p_crucial) + abs(
    trainable(G_else) - lora_count(G_base, ELSEWHERE, r_else))
print(f"B = 0: max |LoRA - base| = {init_err:.1e}; merged vs unmerged "
      f"{merge_err:.1e}; Eq. 3 vs counted: off by {count_err}")

# %% [markdown]
# ## Claims
#
# Paper claims first, each against a baseline or an ablation, then checks, then
# findings: what the paper states and this book measures without claiming it. Every
# threshold was set on the calibration seeds 0-9 (or before any run, where its line
# says so) and frozen before the confirmation seeds 10-19 were run. The training cost
# was first a paper claim on the CPU time per step (bar 0.9), which one seed of an
# early sweep missed; the CPU time is now a finding, and the operation count of a
# step, fixed by the architecture and the searched rank, is a check, not evidence.
# The crucial layers against adapters elsewhere was first a paper claim, which
# failed on the first seeds run; it is now a finding. Two claims are weaker than the
# paper's words and say so in their strength: LoRA is *no worse than* full
# fine-tuning up to a tolerance (the paper: comparable quality), and the smallest rank
# is no worse than the largest up to a tolerance. On the calibration seeds, single
# runs of these two comparisons came within 5 % of their bars (the rank claim's bar
# was then 1.12); both now average `restarts` runs of each arm, and the rank claim
# takes the same 15 % tolerance as the claim against full fine-tuning. That the rank
# search picks a small rank is a check (it tells whether the search works), not
# evidence; the claim on ranks compares the smallest rank with the largest, whatever
# the search picks, so that it can fail.

# %% tags=["thresholds"]
C_VS_FULL = 1.15  # L1 LoRA(r*) / full fine-tune, "comparable" within 15 %: a priori
C_VS_SCRATCH = 0.95  # L1 LoRA(r*) / scratch with 3x steps; seeds 0-9: 0.80-0.88
C_RANK_LOSS = 1.15  # L1 rank 1 / rank 8, the tolerance of C_VS_FULL; was 1.12 (above)
# operations per step LoRA / full: a count fixed by the architecture and r*, so a
# check (the training cost itself is the CPU-time finding); was a CPU-time bar of 0.9
C_FLOPS = 1.0
C_RANK = 4  # r* <= 4 of ranks 1-8 (a check); r* was 1 on every seed of 0-9
C_FRACTION = 0.10  # trainable share of LoRA(r*) in G (the paper: about 1 %)
C_BASE = 0.2  # mean held-out L1 of the base on its concepts; the shipped base 0.13
C_INIT = 0.0  # B = 0: the adapted generator equals the base exactly
C_MERGE = 1e-5  # merged vs unmerged outputs, float32 rounding
C_COUNT = 0  # Eq. 3 against the counted trainable parameters
C_TEACHER = 0.0  # composition and involutions of the teacher, exact
C_COVER = 1.0  # coverage k-means / random: k-means covers the pool better
# the paper's verdict follows icmlbook.verdicts' rule, fixed before the final sweep

# %%
l1_lora, l1_full = mean_by_rank[r_star], mean_full  # means over the restarts
run.claim("LoRA(r*) vs full fine-tune: L1 ratio", l1_lora / l1_full, "<=", C_VS_FULL,
          "LoRA on the crucial layers at the searched rank comes close to fine-tuning "
          "the whole generator", versus="baseline",
          against="full fine-tune of the base, same pairs, steps and tuned lr",
          strength="non-inferiority", provenance="a priori", strict=1.0)
run.claim("LoRA(r*) vs from scratch (3x steps): L1 ratio",
          l1_lora / quality["from scratch"], "<=", C_VS_SCRATCH,
          "Fine-tuning the base beats training a GAN from scratch, even with three "
          "times the steps", versus="baseline",
          against="pix2pix-style training from scratch, same pairs, 3x the steps, "
                  "tuned lr", strength="superiority", provenance="calibrated")
run.claim("rank 1 vs rank 8: L1 ratio", mean_by_rank[min(RANKS)] / mean_by_rank[
          max(RANKS)], "<=", C_RANK_LOSS, "The smallest rank searched loses little "
          "against the largest", versus="ablation",
          against="LoRA at the largest rank searched (8), same layers",
          strength="non-inferiority", provenance="calibrated", strict=1.0)
run.check("LoRA(r*) vs full: operations per step", flop_ratio, "<=", C_FLOPS,
          "a LoRA training step counts fewer operations than a full fine-tuning step")
run.check("rank search: r*", r_star, "<=", C_RANK, "the rank search picks a small rank")
run.check("trainable share of LoRA(r*)", p_crucial / n_gen, "<=", C_FRACTION,
          "the adapters are a small fraction of the generator")
run.check("base model: mean L1 on its concepts", float(np.mean(list(base_l1.values()))),
          "<=", C_BASE, "the base has learned its concepts")
run.check("B = 0: LoRA generator = base", init_err, "<=", C_INIT,
          "LoRA starts exactly at the base model", digits=2)
run.check("merged = unmerged LoRA", merge_err, "<=", C_MERGE,
          "folding BA into W changes nothing", digits=2)
run.check("Eq. 3 = counted parameters", count_err, "<=", C_COUNT,
          "the parameter count formula")
run.check("teacher: composition and involutions", teacher_err, "<=", C_TEACHER,
          "the editor's premises")
run.check("coverage k-means / random", cover_ratio, "<=", C_COVER,
          "the k-means subset spreads over the pool")
crucial_vs_else = quality["LoRA on crucial layers"] / quality["LoRA elsewhere"]
km_vs_rand = quality["LoRA on crucial layers"] / quality["LoRA, random subset"]
run.finding("LoRA vs from scratch, whole pool: L1 ratio", vs_scratch_all, "<=", 1.0,
            paper="a base model adaptable through fine-tuning eliminates the need for "
                  "training from scratch", shows="with ten times the pairs, whether "
                  "the base still beats a GAN trained from scratch")
run.finding("crucial vs lowest-scoring groups: L1 ratio", crucial_vs_else, "<=", 1.0,
            paper="LoRA on the crucial layers", shows="the crucial groups against "
            "the two lowest-scoring ones at no more parameters, a comparison chosen "
            "after the registered one (against all other groups) failed")
run.finding("trainable share vs the paper's 1 %", p_crucial / n_gen, "<=", 0.01,
            paper="fine-tuning only 1% weights (project page)", shows="the share "
                  "of a 23 k-parameter generator that rank-1 adapters on two groups "
                  "train")
run.finding("k-means vs random subset: L1 ratio", km_vs_rand, "<=", 1.0,
            paper="a small subset chosen by clustering suffices", shows="whether "
            "k-means pairs train better than as many random ones")
run.finding("k-means subset vs whole pool: L1 ratio", subset_vs_all, "<=", C_VS_FULL,
            paper="the minimal amount of data necessary for fine-tuning", shows="LoRA "
            "on one tenth of the pool against LoRA on all of it, within the tolerance "
            "of the claim against full fine-tuning")
run.finding("LoRA vs full: CPU time per step", time_ratio, "<=", 1.0,
            paper="remarkably reduced training costs", shows="the measured CPU time "
            "of a step, which varies from run to run on a shared machine")
run.headline("no training from scratch", "a base GAN model with generalized "
             "features, adaptable to different concepts through fine-tuning, "
             "eliminating the need for training from scratch", "Abstract",
             claims=["LoRA(r*) vs from scratch (3x steps): L1 ratio"],
             findings=["LoRA vs from scratch, whole pool: L1 ratio"])
run.headline("LoRA on crucial layers with a rank search", "LoRA on crucial layers "
             "with a simple yet effective rank search process, rather than "
             "fine-tuning the entire base model; only 1% of the weights fine-tuned, "
             "with remarkably reduced training and storage costs",
             "Abstract; project page, overview figure",
             claims=["LoRA(r*) vs full fine-tune: L1 ratio",
                     "rank 1 vs rank 8: L1 ratio"],
             findings=["crucial vs lowest-scoring groups: L1 ratio",
                       "trainable share vs the paper's 1 %",
                       "LoRA vs full: CPU time per step"])
run.headline("minimal data", "the minimal amount of data necessary for fine-tuning, "
             "further reducing the overall training time", "Abstract",
             findings=["k-means vs random subset: L1 ratio",
                       "k-means subset vs whole pool: L1 ratio"])
run.metric("quality", quality)
run.metric("params", params)
run.metric("test_by_rank", test_by_rank)
run.metric("val_by_rank", val_by_rank)
run.metric("crucial_groups", crucial_groups)
run.metric("group_score", group_score)
run.metric("learning_rates", dict(full=lr_full, scratch=lr_scratch))
run.metric("whole_pool", dict(lora=l1_lora_all, scratch=l1_scratch_all))
run.metric("flops", dict(lora=flops_lora, full=flops_full))
run.metric("zero_shot_vs_lora", zero_shot[concept] / l1_lora)
run.metric("seconds", dict(base=base_seconds, lora=lora_seconds, full=full_seconds,
                           scratch=scratch_seconds));

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed: fresh images, a fresh data pool, fresh probe data, fresh
# adapters and fresh arms from scratch, but the *same* shipped base model, trained
# once; the spread below therefore leaves out how much the base itself varies from one
# training to the next. The table and strip plot read this chapter's results file,
# made by `icmlbook sweep 12 --seeds 0-19 --update-results`: every claim, check and
# finding over the calibration seeds 0-9 and, apart, the confirmation seeds 10-19, run
# once after the thresholds were frozen, at the default tier, with the number of seeds
# on which each holds and its worst margin.

# %%
across = icmlbook.across_seeds(run)

# %% [markdown]
# ### What did not reproduce, and what is only reported
#
# The findings above, once more with the numbers they compare: the crucial layers
# against the two groups that scored lowest in the search (at the largest rank whose
# adapters are no larger than the crucial ones; rank 1 if even that is larger, which
# favours the ablation), k-means against random pairs, and the two arms on the whole
# pool.

# %%
print(f"L1 crucial / lowest-scoring groups: {crucial_vs_else:.3f} with "
      f"{params['LoRA elsewhere']} vs {p_crucial} parameters")
print(f"L1 k-means subset / random subset: {km_vs_rand:.3f}; k-means subset / whole "
      f"pool: {subset_vs_all:.3f}")
vs_scratch_few = quality["LoRA on crucial layers"] / quality["from scratch"]
print(f"LoRA / from scratch: {vs_scratch_few:.3f} on {N_SEL} pairs, "
      f"{vs_scratch_all:.3f} on {cfg.pool} (single runs)")
print(f"trainable share of LoRA(r*): {p_crucial / n_gen:.2%}; zero-shot base / LoRA: "
      f"{zero_shot[concept] / l1_lora:.2f}")

# %% [markdown]
# A ratio below 1 goes the paper's way. What the findings show, over the seeds of the
# table above:
#
# * **Training from scratch wins once pairs are plentiful.** On the `n_pairs` pairs
#   of the claims, a GAN from scratch overfits and LoRA on the base beats it even
#   with three times the steps. On the whole pool (`pool` pairs), the same
#   GAN from scratch learns the edit itself and ends far below every LoRA arm, whose
#   error hardly moves with the extra pairs (the "k-means subset vs whole pool"
#   finding): rank-1 adapters on two groups are limited by their capacity, not by
#   their data. So "no training from scratch" holds here only in the few-pair regime,
#   which is the paper's setting (each pair costs a diffusion run), but it is a
#   statement about data cost, not about what the small generator can learn.
# * **The crucial layers.** The registered comparison, crucial groups against
#   adapters on *all* the other groups, failed on the first seeds run (four groups at
#   rank 1 have more parameters than two crucial groups at the searched rank, and
#   caught up). Against the two lowest-scoring groups at no more parameters, the
#   crucial groups come out ahead on the seeds above, but that comparison was chosen
#   after the first one failed, so it stays a finding. The search's gains per
#   parameter are of the same order for every group (the bar chart below): on this
#   small generator every group, given adapters, buys a similar drop in error.
# * **The share of trained weights** is above the paper's 1 % even at rank 1
#   (printed above): a 23 k-parameter generator has little to spare.
# * **k-means against random pairs.** The k-means subset covers the pool better (a
#   check) but trains no better than a random one: with exact, noise-free teacher
#   pairs, `n_pairs` random images already cover this simple image distribution.
#   The paper's argument for clustering is cost and diversity at scale, which this
#   toy cannot test.
# * **CPU time per step** goes the paper's way on every run, but it varies from run to
#   run on a shared machine, so the claim counts operations instead.

# %% [markdown]
# ## Figures
#
# Left: the layer-group scores of Eq. 4 on the probe concept (the crucial groups in
# blue). Right: held-out L1 against trainable parameters; the blue line is LoRA on the
# crucial layers at ranks 1, 2, 4 and 8, the blue dot its searched rank.

# %% tags=["hide-input"]
def plot_quality(ax, extra=None):
    """Held-out L1 against trainable parameters (log axis) for every arm."""
    lo = STYLE["LoRA on crucial layers"]
    counts = [lora_count(G_base, CRUCIAL, r) for r in RANKS]
    ax.plot(counts, [test_by_rank[r] for r in RANKS], color=lo["color"], lw=1,
            alpha=0.6)
    for name, q in quality.items():
        x = max(params[name], 10)  # the zero-shot base trains nothing: at 10
        ax.plot([x], [q], "o", ms=6, **STYLE[name])
    if extra is not None:
        ax.plot([max(extra[0], 10)], [extra[1]], "*", ms=12, color="black",
                label="widget setting")
    icmlbook.log_axis(ax, "x")
    ax.set_xlabel("trainable parameters")
    ax.set_ylabel("held-out L1 vs teacher")
    ax.legend(fontsize=7)


fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), width_ratios=(1, 1.3))
names = list(LAYER_GROUPS)
colours = [STYLE["LoRA on crucial layers" if g in crucial_groups
                 else "LoRA elsewhere"]["color"] for g in names]
axes[0].barh(names, [1e6 * group_score[g] for g in names], color=colours)
axes[0].set_xlabel("L1 gain per 1e6 trained parameters")
axes[0].set_title(f"crucial-layer search on '{PROBE}'")
axes[0].invert_yaxis()
plot_quality(axes[1])
axes[1].set_title(f"'{concept}', {N_SEL} pairs, {cfg.ft_steps} steps")
plt.show()

# %% [markdown]
# Inputs, the teacher's edits, and the students' outputs on held-out images; the last
# row is the error of LoRA on the crucial layers, $|G(x) - T(x)|$ averaged over the
# colour channels, on one colour scale.

# %% tags=["hide-input"]
def montage(imgs, gap=1):
    """Images (n, C, H, W) side by side with white gaps: (H, n (W + gap) - gap, C)."""
    n, ch_, h, w = imgs.shape
    out = torch.ones(ch_, h, n * (w + gap) - gap)
    for j in range(n):
        out[:, :, j * (w + gap):j * (w + gap) + w] = imgs[j]
    return out.permute(1, 2, 0).squeeze(-1).numpy()


def show_grid(xs, c, models, title=""):
    """Rows: input, teacher, one row per model; then the first model's error map."""
    with torch.no_grad():
        e = embed(c).expand(len(xs), -1, -1)
        rows = {"input": xs, "teacher": teacher(xs, c)}
        rows |= {k: m(xs, e).clamp(-1, 1) for k, m in models.items()}
    first = next(iter(models))
    err = (rows[first] - rows["teacher"]).abs().mean(1, keepdim=True)
    fig, axes = plt.subplots(len(rows) + 1, 1, figsize=(0.9 * len(xs) + 2.2,
                                                       0.8 * (len(rows) + 1)))
    for ax, (name, imgs) in zip(axes, rows.items()):
        ax.imshow(montage((imgs + 1) / 2))
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=7)
    im = axes[-1].imshow(montage(err, gap=0), vmin=0, vmax=1, cmap="magma")
    axes[-1].set_ylabel(f"|error|\n{first}", rotation=0, ha="right", va="center",
                        fontsize=7)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.grid(False)
    fig.colorbar(im, ax=axes[-1], shrink=0.9, label="L1", aspect=8)
    fig.suptitle(title, fontsize=9)
    plt.show()


show_grid(test_x[:8], concept, {"LoRA (crucial)": G_lora, "full fine-tune": G_full,
                                "from scratch": G_scratch, "zero-shot": G_base},
          f"'{concept}'");

# %% [markdown]
# What the images show: no student visibly performs the edit. At 8×8 pixels, with a
# held-out error that is a sizeable fraction of the colour range for every arm (the
# table above), each student row is a blurred field of colour, roughly the teacher's
# colours in roughly the teacher's places, with the shapes' edges gone; the error map
# is bright almost everywhere. The differences that the claims measure are
# differences between such blurs, in the mean error, not edits one can see. A
# reader who wants edits that look like edits needs a larger image, a larger
# generator and a longer budget than this chapter's (the full tier goes part of the
# way).

# %% [markdown]
# ## What a broken method does
#
# Each paper claim should fail for a wrong method. The tests
# (`tests/test_ch12_efficient_gan_editing.py`) break them one by one: LoRA whose
# adapters never train (a learning rate of zero, which leaves the zero-shot base)
# fails the comparisons with full fine-tuning, with training from scratch and, at
# rank 1, with the largest rank; LoRA on an *untrained* generator, which has nothing
# to transfer, fails the comparison with training from scratch; adapters on every
# layer, or on the layers nearest the input, cost more operations per step than full
# fine-tuning; and a search that always returns the largest rank fails the check on
# $r^\star$. Here the first of those, the zero-shot base against the two baselines:

# %%
print(f"zero-shot base: vs full fine-tune {zero_shot[concept] / l1_full:.2f} "
      f"(needs <= {C_VS_FULL}), vs from scratch "
      f"{zero_shot[concept] / quality['from scratch']:.2f} (needs <= {C_VS_SCRATCH})")

# %% [markdown]
# ## Explore
#
# Pick a new concept, the LoRA rank, the layer groups that get adapters, how many pairs
# the teacher makes and how they are picked. Each move fine-tunes a fresh LoRA on the
# frozen base for `widget_steps` steps (shorter than the arms above, so the star sits
# a little higher than a full-length run would) and draws the inputs, the teacher and
# the student, and where the setting lands among the arms of the experiment. Things to
# try: all groups at rank 8 (more parameters, little gain), one group alone, 8 pairs.

# %% tags=["hide-input"]
import functools

import ipywidgets as W


@functools.lru_cache(maxsize=16)
def widget_pairs(n, rule):
    """The pool images the teacher edits: n of them, by k-means or at random."""
    g = run.generator("widget subset")
    idx = (kmeans_subset(pool, n, g) if rule == "k-means"
           else torch.randperm(len(pool), generator=g)[:n])
    return pool[idx]


@functools.lru_cache(maxsize=64)
def widget_run(c, r, groups, n, rule):
    """A short LoRA run on the chosen layers: (generator, params, held-out L1)."""
    layers = tuple(name for g in groups for name in LAYER_GROUPS[g])
    if not layers:  # no adapters: the base itself
        return G_base, 0, held_out_l1(G_base, c, test_x[:200])
    G, _ = fine_tune_lora(widget_pairs(n, rule), c, layers, r, cfg.widget_steps)
    return G, trainable(G), held_out_l1(G, c, test_x[:200])


def update(c, r, groups, n, rule):
    G, n_par, l1 = widget_run(c, r, tuple(groups), min(n, len(pool)), rule)
    show_grid(test_x[:6], c, {"student": G},
              f"'{c}': rank {r}, {n_par:,} params ({n_par / n_gen:.1%}), "
              f"{min(n, len(pool))} pairs ({rule}); held-out L1 {l1:.3f}")
    fig, ax = plt.subplots(figsize=(5, 2.8))
    plot_quality(ax, extra=(n_par, l1))
    ax.set_title(f"arms of the experiment ('{concept}') and this setting", fontsize=8)
    plt.show()


controls = dict(
    c=W.Dropdown(options=NEW_CONCEPTS, value=concept, description="concept"),
    r=W.SelectionSlider(options=RANKS, value=r_star, description="rank r"),
    groups=W.SelectMultiple(options=tuple(LAYER_GROUPS), value=tuple(crucial_groups),
                            rows=6, description="layers"),
    n=W.IntSlider(value=N_SEL, min=8, max=cfg.pool, step=8, description="pairs"),
    rule=W.ToggleButtons(options=["k-means", "random"], value="k-means",
                         description="subset"),
)
icmlbook.explore(update, controls, run=run)

# %% [markdown]
# ## Paper vs. this book
#
# | | paper | this book |
# |---|---|---|
# | teacher | Stable-Diffusion-based editors (e.g. instruction-guided editing) on photos | an exact procedural editor: flips, a circular shift, inversion, gamma, a channel swap, compositions of two |
# | data | thousands of real images per concept; the teacher's output as the target | 8×8 procedural RGB images; `n_pairs` pairs per new concept from a pool of 400 |
# | generator | down/up-sampling, 3 residual blocks, 1 transformer block (self- and cross-attention to a text embedding), on-device size | the same layout at 8×8 with depthwise-separable residual blocks and an adaptive layer norm from the concept; about 23 k parameters |
# | concept embedding | a text encoder's embedding of the prompt | one fixed random unit token per primitive edit, two per concept |
# | base model | trained on representative concepts chosen by k-means over a concept pool | trained on eight hand-picked base concepts, fresh pairs every step |
# | crucial layers | identified in the paper for its architecture (we did not reproduce its procedure) | Eq. 4 (our reconstruction) on a probe concept, top two groups |
# | rank search | a "simple yet effective" search | Eq. 5 (our reconstruction): the smallest rank within $\delta$ of the best |
# | minimal data | k-means on image features, nearest to each centroid | Eq. 6 on pixels |
# | quality | FID, CLIP score | held-out L1 against the teacher |
#
# **Paper coverage.** Each main result of the paper, and what tests it here:
#
# | the paper's result | here |
# |---|---|
# | E²GAN against GANs trained from scratch per concept (pix2pix, pix2pix-zero-distilled): quality and training cost | tested: claim "LoRA(r*) vs from scratch (3x steps)"; finding "LoRA vs from scratch, whole pool"; FID and CLIP score out of scope (L1 against an exact teacher instead) |
# | LoRA on crucial layers against fine-tuning the whole base: quality, trained weights, training cost | tested: claim "LoRA(r*) vs full fine-tune" (non-inferiority), check "operations per step"; findings "trainable share vs the paper's 1 %" and "CPU time per step" |
# | which layers are crucial (ablation) | finding "crucial vs lowest-scoring groups" |
# | the rank search | claim "rank 1 vs rank 8" (non-inferiority); check on $r^\star$ |
# | minimal data by clustering | findings "k-means vs random subset" and "k-means subset vs whole pool"; check on coverage |
# | the base model's concepts, chosen by clustering text embeddings | reported only: eight hand-picked base concepts |
# | real-time inference on a phone | out of scope: no phone, and an 8×8 model says nothing about latency |
# | edited photos (qualitative figures) | out of scope: at 8×8 no student visibly performs an edit (figures above) |
#
# What reproduces at this scale: a base trained on several concepts transfers. On
# `n_pairs` pairs, LoRA on two layer groups at the searched rank beats a GAN trained
# from scratch even when that one gets three times the steps and its own
# learning-rate grid; it stays within a 15 % tolerance of fine-tuning every weight;
# rank 1 stays within the same tolerance of rank 8; and a LoRA step counts fewer
# operations than a full step (a check: a count by construction). What holds only in a weaker form, or not: LoRA is
# *worse* than full fine-tuning, only within the tolerance (the strict version is
# counted in the results file); the training cost is measured only as CPU time, a
# finding; with the whole pool of pairs, training from scratch wins by far;
# the trained share is above the paper's 1 %; k-means selection trains no better than
# random pairs; the crucial layers beat only a comparison chosen after the registered
# one failed. The base does not compose concepts zero-shot (exercise 3 shows that it
# composes them by running twice). Nothing here says how well a GAN distils a real
# diffusion editor, and at 8×8 no student visibly performs an edit. The paper's
# verdict, by the rule named in the thresholds cell, is printed with the claims:
# *partly*, for each headline.

# %% [markdown]
# ## Exercises
#
# Each exercise is followed by a worked solution (folded in the HTML book); the
# solutions run in seconds and change nothing above.

# %% [markdown] tags=["exercise"]
# **Exercise 1. The break-even rank.** Rank-$r$ LoRA on a layer whose weight is a
# $d_{out} \times d_{in}$ matrix trains $r(d_{in} + d_{out})$ parameters (Eq. 3). Up
# to which rank are the adapters smaller than the layer itself? Derive it, and check
# it on every layer that LoRA may target in this generator.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 1
# The adapters are smaller than the layer while $r(d_{in} + d_{out}) \le d_{in}
# d_{out}$, that is for
#
# $$r \le r_{be} = \frac{d_{in}\, d_{out}}{d_{in} + d_{out}},$$
#
# half the harmonic mean of the two dimensions. For a square $d \times d$ projection
# it is $d/2$: on the 32-wide attention projections here, LoRA stops saving parameters
# at rank 16, twice the largest rank searched. A layer with one small dimension has a
# small break-even rank: the depthwise convolutions of the residual blocks (a
# depthwise 3×3 kernel has $d_{in} = 9$) reach it at rank 7, and the output
# convolution to three colours ($d_{out} = 3$) at rank 2, so LoRA there is barely
# cheaper than training the layer. The largest integer rank below break-even is
# $\lfloor r_{be} \rfloor$; the code checks, layer by layer, that Eq. 3 at that rank
# is at most the layer's weight count and at the next rank above it.
# :::

# %% tags=["solution", "hide-cell"]
S_MISSES = 0  # floor(r_be) is, on every layer, the largest rank below its size


def break_even(layer):
    d_out, d_in = lora_dims(layer)
    return d_in * d_out // (d_in + d_out)


misses = 0
for name in (n for layers in LAYER_GROUPS.values() for n in layers):
    layer = G_base.get_submodule(name)
    r_be, size = break_even(layer), layer.weight.numel()
    below = lora_count(G_base, (name,), r_be) <= size
    above = lora_count(G_base, (name,), r_be + 1) > size
    misses += not (below and above)
    print(f"{name:>15}: weight {size:5d}, break-even rank {r_be}")
icmlbook.solution_check("layers where floor(r_be) is not the break-even rank", misses,
                        "<=", S_MISSES)

# %% [markdown] tags=["exercise"]
# **Exercise 2. The rank tolerance.** The rank search (Eq. 5) keeps the smallest rank
# within `rank_tol` of the best one on validation images. Which rank does it keep for
# a tolerance of 0, of `rank_tol` and of 0.3, and what does each choice cost in
# held-out error and in trained parameters? Show first that a larger tolerance can
# never pick a larger rank.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 2
# Write $S(\delta) = \{r : \mathrm{L1}_{val}(r) \le (1 + \delta) \min_{r'}
# \mathrm{L1}_{val}(r')\}$. If $\delta \le \delta'$, every rank in $S(\delta)$ is in
# $S(\delta')$, so $r^\star(\delta') = \min S(\delta') \le \min S(\delta) =
# r^\star(\delta)$: the chosen rank never grows with the tolerance. At $\delta = 0$ the
# search keeps the rank with the lowest validation error; any tolerance trades a
# little error for fewer parameters. No new training is needed: the search's
# validation errors and the test errors of every rank are already there. What the
# printout shows on this run: how far apart the ranks are. When even rank 1 is close to
# the best, as in this chapter's runs, any tolerance of a few percent picks rank 1, and
# the price is the small test-error gap that the claim "rank 1 vs rank 8" bounds.
# :::

# %% tags=["solution", "hide-cell"]
S_GROWS = 0  # ranks that grow with the tolerance: none, by the argument above

tols = (0.0, rank_tol, 0.3)
picked = [rank_search(val_by_rank, t) for t in sorted(tols)]
for t, r in zip(sorted(tols), picked):
    print(f"tolerance {t:.2f}: rank {r}, test L1 {test_by_rank[r]:.4f}, "
          f"{lora_count(G_base, CRUCIAL, r)} parameters")
grows = sum(b > a for a, b in zip(picked, picked[1:]))
icmlbook.solution_check("times a larger tolerance picked a larger rank", grows, "<=",
                        S_GROWS)

# %% [markdown] tags=["exercise"]
# **Exercise 3. Composition by chaining.** The base model never saw the new concept,
# but it saw each of its two primitive edits alone. Its zero-shot answer to the
# composite tokens is poor. Run the base twice instead, once per primitive,
# $G(G(x, e_a), e_b)$, and compare its error with the zero-shot answer and with the
# fine-tuned arms. What does the result say about where the base's knowledge sits?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 3
# The teacher applies the primitives in order, $T(x, a{+}b) = T_b(T_a(x))$, so a base
# that does each primitive well composes them by running twice, with no training at
# all. The code uses the shipped base at every tier (at the smoke tier the chapter's
# own base is a few steps old) and the held-out images. Chaining beats the zero-shot
# answer to the composite tokens by a wide margin; compare it with the fine-tuned
# arms printed beside it. The base *knows* both edits; what
# it lacks is a way to read two tokens as "one after the other" in a single pass, and
# that is what the adapters learn from the new pairs. It also shows a cost the paper
# avoids: chaining doubles the inference time, while a merged LoRA adds none.
# :::

# %% tags=["solution", "hide-cell"]
S_CHAIN = 0.9  # chaining must beat the one-pass zero-shot answer by at least 10 %

G_shipped, _, _ = load_base(BASE_FILE)
first, second = concept.split("+")
with torch.no_grad():
    e_of = lambda c: embed(c).expand(len(test_x), -1, -1)
    chained = G_shipped(G_shipped(test_x, e_of(first)).clamp(-1, 1), e_of(second))
    l1_chain = float((chained.clamp(-1, 1) - teacher(test_x, concept)).abs().mean())
l1_zero = held_out_l1(G_shipped, concept, test_x)
print(f"shipped base on '{concept}': zero-shot {l1_zero:.4f}, chained {l1_chain:.4f}; "
      f"this run's LoRA {quality['LoRA on crucial layers']:.4f}, full fine-tune "
      f"{quality['full fine-tune']:.4f}")
icmlbook.solution_check("chained / zero-shot L1 of the shipped base",
                        l1_chain / l1_zero, "<=", S_CHAIN)

# %% [markdown]
# ## References
#
# - Y. Gong, Z. Zhan, Q. Jin, Y. Li, Y. Idelbayev, X. Liu, A. Zharkov, K. Aberman,
#   S. Tulyakov, Y. Wang, J. Ren. E$^2$GAN: Efficient Training of Efficient GANs for
#   Image-to-Image Translation. ICML 2024.
# - P. Isola, J.-Y. Zhu, T. Zhou, A. A. Efros. Image-to-Image Translation with
#   Conditional Adversarial Networks (pix2pix). CVPR 2017.
# - E. J. Hu, Y. Shen, P. Wallis, Z. Allen-Zhu, Y. Li, S. Wang, L. Wang, W. Chen.
#   LoRA: Low-Rank Adaptation of Large Language Models. ICLR 2022.
# - X. Mao, Q. Li, H. Xie, R. Y. K. Lau, Z. Wang, S. P. Smolley. Least Squares
#   Generative Adversarial Networks. ICCV 2017.

# %% tags=["remove-cell"]
run.finish();
