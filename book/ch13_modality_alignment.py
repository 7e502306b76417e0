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
# # Modality knowledge alignment before fine-tuning
#
# **Paper.** Wenxuan Ma, Shuang Li, Lincan Cai, Jingxuan Kang. *Learning Modality
# Knowledge Alignment for Cross-Modality Transfer.* ICML 2024, PMLR 235.
# [PMLR](https://proceedings.mlr.press/v235/ma24d.html) ·
# [arXiv:2406.18864](https://arxiv.org/abs/2406.18864). We found no official code; the
# baseline the paper builds on is ORCA (Shen et al., ICML 2023).
#
# **The problem.** Cross-modality transfer fine-tunes a model pretrained on one
# modality (images, text) for a task in another (spectra, PDE fields, ECGs). A new
# *embedder* maps the target data into the pretrained body's input space, and then
# everything is fine-tuned. The paper's experiments find that the larger the gap
# between the modalities, the more of the source model's knowledge fine-tuning
# destroys, and the less of it the target task reuses.
#
# **The idea.** Call a modality's *knowledge* its conditional distribution
# $P(Y \mid X)$, and the gap the misalignment between the source's and the target's.
# MoNA (Modality kNowledge Alignment) learns the target embedder *before* fine-tuning,
# by meta-learning: it simulates one fine-tuning step of the body on the target task
# and asks the embedder to make that step harmless to the source knowledge.
#
# **The claim.** Aligning first keeps more source knowledge through fine-tuning than
# naive fine-tuning, and improves on cross-modal fine-tuning methods such as ORCA.
# **What stands in for the paper, and what is ours.** The pretrained model is a small
# MLP trained on a synthetic source modality (Gaussian inputs in 8 dimensions,
# labelled by a fixed random network), not a Swin or RoBERTa; the target modality is
# the *same* task seen through a rotation of the input space whose angle, the
# *modality gap*, we control, so the source knowledge is exactly what the target needs
# and the ideal ("oracle") embedder, the inverse rotation, is known. The target has a
# few labelled examples per class; the label map between the modalities is the
# identity and the target head starts from the source head. ORCA's optimal-transport
# alignment is stood in for by a class-wise MMD ("ORCA-like"). Reconstructed, not
# taken from the paper's text, which we could only partly check: the exact outer
# objective of MoNA's meta-learning (here: the alignment and uniformity of the body's
# source features after the simulated step, Eq. 4), the form of its stage-1 loss
# (Eq. 5) and the equation numbers, which are ours.

# %% tags=["parameters"]
tier = "default"  # smoke | default | full: size of the experiment
seed = 0  # drives every random number in the chapter
gap = 1.0  # modality gap of the main comparison: the rotation angle, 0 (none) to 1
shots = 10  # labelled target examples per class
inner_lr = 10.0  # alpha: step size of MoNA's simulated fine-tuning step (Eq. 3)
meta_weight = 1.0  # lambda: weight of the source-knowledge term in stage 1 (Eq. 5)
finetune_lr = 0.01  # SGD step size of the fine-tuning stage, the same for every arm

# %% tags=["validate"]
from icmlbook import check_int, check_range, check_seed, check_tier

check_tier(tier)
check_seed(seed)
check_range("gap", gap, 0.0, 1.0)
check_int("shots", shots, 2, 50)
check_range("inner_lr", inner_lr, 0.0, 30.0)
check_range("meta_weight", meta_weight, 0.0, 30.0)
check_range("finetune_lr", finetune_lr, 0.0, 0.1, lo_open=True)

# %% [markdown]
# ## Setup
#
# Everything is a few-thousand-parameter MLP trained full-batch, so one CPU thread is
# the fastest choice. The tier sets the size of the source set, the number of
# pretraining, stage-1 and fine-tuning steps, and how many independent draws of the
# target shots every number is averaged over (`repeats`). The full tier (more source
# data, twice the stage lengths, six draws of the shots) runs on the CPU in about four
# minutes on a busy 2-core machine; nothing in it needs a GPU.

# %%
import math

import numpy as np
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import icmlbook

run = icmlbook.start("13_modality_alignment", tier=tier, seed=seed,
                     params=dict(gap=gap, shots=shots, inner_lr=inner_lr,
                                 meta_weight=meta_weight, finetune_lr=finetune_lr))
icmlbook.use_style()
cfg = run.pick(
    smoke=dict(n_source=1000, pretrain_steps=100, stage1=10, stage2=20, repeats=1,
               n_test=500, gaps=(0.0, 0.25, 1.0), curve_points=5, widget_stage1=5,
               widget_stage2=10),
    default=dict(n_source=8000, pretrain_steps=600, stage1=100, stage2=150, repeats=3,
                 n_test=4000, gaps=(0.0, 0.25, 0.5, 0.75, 1.0), curve_points=11,
                 widget_stage1=30, widget_stage2=50),
    full=dict(n_source=20000, pretrain_steps=1500, stage1=200, stage2=300, repeats=6,
              n_test=10000, gaps=(0.0, 0.125, 0.25, 0.5, 0.75, 1.0), curve_points=11,
              widget_stage1=30, widget_stage2=50),
)
D = 8  # input dimension of both modalities
WIDTH = 64  # hidden width of the pretrained body
BITS = 3  # the source labels are 3 bits: K = 8 classes
K = 2 ** BITS
ANGLE = 3.0  # the largest rotation (gap 1) has generator norm ANGLE
OUTER_BATCH = 512  # labelled source examples seen by the outer loss and by ORCA-like
ARMS = ("naive fine-tuning", "ORCA-like", "warm-up only", "MoNA", "oracle embedder")
STYLE = icmlbook.method_styles(*ARMS)
print(f"tier {tier}: {cfg.pretrain_steps} pretraining steps, stage 1 {cfg.stage1} "
      f"steps, fine-tuning {cfg.stage2} steps; {cfg.repeats} draws of {shots} shots "
      f"per class at gap {gap:.2f}")

# %% [markdown]
# One colour per method in every figure: naive fine-tuning in blue, ORCA-like in red,
# the warm-up-only ablation in teal, MoNA in amber and the oracle embedder in purple.
#
# ## The idea in math
#
# **Knowledge as a conditional.** The paper calls $P(Y \mid X)$ a modality's
# *semantic knowledge*. The source model $f = h \circ g_\theta$ (a body $g_\theta$ and
# a head $h$) has learned $P_s(Y \mid X)$. A target embedder $e_\phi$ maps target
# inputs into the body's input space, and the source model then says
# $P_s(Y \mid e_\phi(x))$. The *modality knowledge discrepancy* of an embedder is how
# far that is from the target's own conditional; with deterministic target labels
# $y(x)$ the total-variation distance is one minus the probability of the right label:
#
# $$\mathcal D(e_\phi) = \mathbb E_{x \sim P_t}\,
#   \mathrm{TV}\big(P_s(\cdot \mid e_\phi(x)),\, P_t(\cdot \mid x)\big)
#   = \mathbb E_{x \sim P_t}\big[1 - P_s\big(y(x) \mid e_\phi(x)\big)\big]. \tag{1}$$
#
# The paper takes an infimum over label maps between the two label sets; ours share
# their labels, so the map is the identity.

# %% [markdown]
# **The two modalities.** Source inputs are $x \sim \mathcal N(0, I_D)$, labelled by a
# fixed random teacher: three random one-hidden-layer networks, each thresholded at its
# median, give three bits and $K = 8$ balanced classes. The target modality is the
# same task through a rotation:
#
# $$x_t = R_\gamma\, x, \qquad R_\gamma = \exp(\gamma\, A), \qquad y_t = y(x),
#   \tag{2}$$
#
# with $A$ a fixed random skew-symmetric matrix (norm `ANGLE`) and $\gamma \in [0, 1]$
# the modality gap. A rotation leaves $\mathcal N(0, I)$ unchanged: the target inputs
# have *exactly* the source's marginal distribution at every gap, and only the
# conditional $P(Y \mid X)$ moves. The oracle embedder is $R_\gamma^{\top}$.

# %% [markdown]
# **MoNA's meta-learned embedder (our reconstruction).** Stage 1 keeps the body
# $\theta$ frozen. With the embedder $\phi$ and the target head $\psi$, the target
# loss on the shots is
# $\mathcal L_{\text{in}}(\phi, \psi, \theta) = \mathrm{CE}\big(h_\psi(g_\theta(
# e_\phi(x_t))), y_t\big)$, and one simulated fine-tuning step of the body is
#
# $$\theta'(\phi, \psi) = \theta - \alpha\, \nabla_\theta\,
#   \mathcal L_{\text{in}}(\phi, \psi, \theta). \tag{3}$$
#
# The source knowledge after that step is scored on labelled source data by the
# quality of the body's representation, with the alignment and uniformity losses of
# Wang & Isola (2020) on the normalised features $\hat z = g_{\theta'}(x_s) /
# \lVert g_{\theta'}(x_s) \rVert$, same-class pairs counting as positives:
#
# $$\mathcal L_{\text{out}}(\phi, \psi) = \mathbb E_{y_u = y_v,\, u \ne v}
#   \lVert \hat z_u - \hat z_v \rVert^2 + \log \mathbb E_{u \ne v}\,
#   e^{-2 \lVert \hat z_u - \hat z_v \rVert^2}. \tag{4}$$

# %% [markdown]
# The embedder and the head descend
#
# $$\min_{\phi, \psi}\; \mathcal L_{\text{in}}(\phi, \psi, \theta) + \lambda\,
#   \mathcal L_{\text{out}}(\phi, \psi), \tag{5}$$
#
# whose gradient runs *through* the inner step (3): a second-order derivative. To
# first order in $\alpha$,
# $\mathcal L_{\text{out}} \approx \mathcal L_{\text{out}}(\theta) - \alpha \langle
# \nabla_\theta \mathcal L_{\text{out}}, \nabla_\theta \mathcal L_{\text{in}}
# \rangle$: the embedder is pushed
# towards target data whose fine-tuning gradients agree with the source's. With
# $\lambda = 0$ (or $\alpha = 0$) Eq. 5 is plain *warm-up*: the embedder and head
# trained on the target loss with the body frozen, the paper's ablation.

# %% [markdown]
# **The baseline: ORCA-like alignment.** ORCA trains the embedder before fine-tuning
# to bring each target class close to the labelled source data, with an
# optimal-transport dataset distance. We use the class-wise squared MMD with a
# Gaussian kernel $k$, between the embedded target examples of class $c$ and the
# source examples of class $c$:
#
# $$\mathcal L_{\text{ORCA}}(\phi) = \sum_{c=1}^{K} \mathrm{MMD}_k^2\big(
#   \{e_\phi(x_t) : y_t = c\},\, \{x_s : y_s = c\}\big). \tag{6}$$

# %% [markdown]
# **Stage 2 and knowledge reuse.** Every arm then fine-tunes everything, embedder,
# body and head, on the target shots with the same SGD recipe,
#
# $$(\phi, \theta, \psi) \leftarrow (\phi, \theta, \psi) - \eta\, \nabla
#   \mathcal L_{\text{in}} \quad \text{(with momentum)}, \tag{7}$$
#
# and we measure how much source knowledge the fine-tuned body still holds: the
# accuracy on held-out *source* data of the fine-tuned body under the original
# source head,
#
# $$\mathrm{reuse} = \Pr_{x \sim P_s}\big[\arg\max h_s(g_{\theta_{\text{FT}}}(x))
#   = y(x)\big]. \tag{8}$$
#
# ## From scratch
#
# ### The source task and the modality gap (Eq. 2)

# %%
def make_teacher(gen, width=32):
    """Three random one-hidden-layer scorers and their medians: the source task."""
    w1 = torch.randn(BITS, D, width, generator=gen) / math.sqrt(D)
    b1 = 0.5 * torch.randn(BITS, 1, width, generator=gen)
    w2 = torch.randn(BITS, width, 1, generator=gen) / math.sqrt(width)
    teacher = dict(w1=w1, b1=b1, w2=w2, median=torch.zeros(BITS))
    probe = torch.randn(20000, D, generator=gen)
    teacher["median"] = teacher_scores(probe, teacher).median(0).values
    return teacher


def teacher_scores(x, teacher):
    """The three scores of inputs x (n, D): shape (n, BITS)."""
    hidden = torch.relu(x @ teacher["w1"] + teacher["b1"])
    return (hidden @ teacher["w2"])[..., 0].T


def teacher_label(x, teacher):
    """y(x): the class whose binary code is the three thresholded scores."""
    code = (teacher_scores(x, teacher) > teacher["median"]).long()
    return (code * 2 ** torch.arange(BITS)).sum(1)


def sample_source(n, teacher, gen):
    """n source examples: x ~ N(0, I), y = y(x)."""
    x = torch.randn(n, D, generator=gen)
    return x, teacher_label(x, teacher)


def random_skew(gen):
    """A random skew-symmetric generator A with Frobenius norm ANGLE."""
    a = torch.randn(D, D, generator=gen)
    a = a - a.T
    return ANGLE * a / torch.linalg.norm(a)


def sensor(gap_value, skew):
    """Eq. 2: the rotation R = exp(gap * A) turning source inputs into target ones."""
    return torch.linalg.matrix_exp(gap_value * skew)


def sample_shots(k, teacher, rotation, gen):
    """k target examples of every class, (x_t, y): x_t = R x with x ~ N(0, I)."""
    x, y = sample_source(200 * k * K, teacher, gen)
    rows = torch.cat([torch.nonzero(y == c)[:k, 0] for c in range(K)])
    assert len(rows) == k * K, "a class is too rare for the probe"
    return x[rows] @ rotation.T, y[rows]


# %% [markdown]
# ### The model, written as functions of its parameters
#
# The body, the head and the embedder are plain tensors in dictionaries, so the
# simulated step (3) is ordinary arithmetic on them and its second derivative comes
# for free from autograd. The embedder is a linear map $e_\phi(x) = \Phi x$, the
# shape of a patch embedding; the target head is a linear layer.

# %%
def init_linear(n_in, n_out, gen):
    bound = 1 / math.sqrt(n_in)
    w = (2 * torch.rand(n_in, n_out, generator=gen) - 1) * bound
    b = (2 * torch.rand(n_out, generator=gen) - 1) * bound
    return w, b


def init_body(gen):
    (w1, b1), (w2, b2) = init_linear(D, WIDTH, gen), init_linear(WIDTH, WIDTH, gen)
    return dict(w1=w1, b1=b1, w2=w2, b2=b2)


def init_head(gen):
    w, b = init_linear(WIDTH, K, gen)
    return dict(w=w, b=b)


def body_fn(body, z):
    """g_theta: a two-layer ReLU MLP."""
    return torch.relu(torch.relu(z @ body["w1"] + body["b1"]) @ body["w2"] + body["b2"])


def head_fn(head, f):
    return f @ head["w"] + head["b"]


def predict(embed, body, head, x):
    """Logits h(g(e(x))) of target inputs x through the embedder matrix `embed`."""
    return head_fn(head, body_fn(body, x @ embed.T))


def fresh(params):
    """Detached copies that require gradients: a new set of trainable parameters."""
    return {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}


# %% [markdown]
# Adam for pretraining and stage 1, SGD with momentum for fine-tuning, written out in a
# dozen lines: they step with gradients from `torch.autograd.grad`, which is also how
# the meta-gradient of stage 1 is taken.

# %%
class Adam:
    """Adam (Kingma & Ba) over a list of tensors, stepping with given gradients."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.betas, self.eps, self.t = params, lr, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self, grads):
        self.t += 1
        b1, b2 = self.betas
        for p, g, m, v in zip(self.params, grads, self.m, self.v):
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            p.sub_(self.lr * (m / (1 - b1 ** self.t))
                   / ((v / (1 - b2 ** self.t)).sqrt() + self.eps))


@torch.no_grad()
def sgd_momentum_step(params, grads, velocity, lr, momentum=0.9):
    for p, g, v in zip(params, grads, velocity):
        v.mul_(momentum).add_(g)
        p.sub_(lr * v)


# %% [markdown]
# ### Pretraining on the source modality

# %%
def pretrain(x, y, steps, gen, batch=256, lr=3e-3):
    """The source model: body and head trained with Adam on the source task."""
    body, head = fresh(init_body(gen)), fresh(init_head(gen))
    params = list(body.values()) + list(head.values())
    opt = Adam(params, lr)
    for _ in icmlbook.progress(range(steps), desc="pretraining"):
        rows = torch.randint(0, len(x), (batch,), generator=gen)
        loss = F.cross_entropy(head_fn(head, body_fn(body, x[rows])), y[rows])
        opt.step(torch.autograd.grad(loss, params))
    return ({k: v.detach() for k, v in body.items()},
            {k: v.detach() for k, v in head.items()})


@torch.no_grad()
def accuracy(embed, body, head, x, y):
    return float((predict(embed, body, head, x).argmax(1) == y).float().mean())


# %% [markdown]
# ### The knowledge discrepancy (Eq. 1)
#
# Measured on many fresh target examples with their true labels: an instrument of
# this chapter, never seen by any method.

# %%
@torch.no_grad()
def discrepancy(embed, body, head, x_t, y_t):
    """Eq. 1: E[1 - P_s(y | e(x))] = E[TV(P_s(. | e(x)), P_t(. | x))]."""
    p = predict(embed, body, head, x_t).softmax(1)
    return float(1 - p.gather(1, y_t[:, None]).mean())


# %% [markdown]
# ### MoNA's stage 1 (Eqs. 3-5)
#
# The inner step (3) keeps its graph (`create_graph=True`), so the outer loss (4) can
# be differentiated through it with respect to the embedder and the head.

# %%
def inner_loss(embed, body, head, x_t, y_t):
    """L_in: the target cross-entropy of the shots."""
    return F.cross_entropy(predict(embed, body, head, x_t), y_t)


def inner_step(embed, body, head, x_t, y_t, alpha):
    """Eq. 3: theta' = theta - alpha grad_theta L_in, differentiable in (phi, psi)."""
    body = {k: v.detach().requires_grad_(True) for k, v in body.items()}
    grads = torch.autograd.grad(inner_loss(embed, body, head, x_t, y_t),
                                list(body.values()), create_graph=True)
    return {k: v - alpha * g for (k, v), g in zip(body.items(), grads)}


def outer_loss(stepped_body, x_s, y_s):
    """Eq. 4: alignment (same-class pairs) + uniformity of the stepped features."""
    z = F.normalize(body_fn(stepped_body, x_s), dim=1)
    d2 = (2 - 2 * z @ z.T).clamp_min(0)  # squared distances of unit vectors
    off = 1 - torch.eye(len(y_s))
    same = (y_s[:, None] == y_s[None]).float() * off
    align = (d2 * same).sum() / same.sum()
    uniform = torch.log((torch.exp(-2 * d2) * off).sum() / off.sum())
    return align + uniform


def stage1_objective(embed, body, head, shots_xy, source_xy, alpha, lam):
    """Eq. 5: L_in + lambda L_out(theta'(phi, psi)); plain warm-up when lambda = 0."""
    loss = inner_loss(embed, body, head, *shots_xy)
    if lam > 0 and alpha > 0:
        stepped = inner_step(embed, body, head, *shots_xy, alpha)
        loss = loss + lam * outer_loss(stepped, *source_xy)
    return loss


def learn_embedder(embed, body, head, shots_xy, source_xy, steps, alpha, lam,
                   lr=1e-2):
    """Stage 1: Adam on Eq. 5 over the embedder and the target head, body frozen."""
    embed, head = embed.detach().clone().requires_grad_(True), fresh(head)
    params = [embed, *head.values()]
    opt = Adam(params, lr)
    for _ in range(steps):
        loss = stage1_objective(embed, body, head, shots_xy, source_xy, alpha, lam)
        opt.step(torch.autograd.grad(loss, params))
    return embed.detach(), {k: v.detach() for k, v in head.items()}


# %% [markdown]
# ### The ORCA-like baseline (Eq. 6)
#
# Vectorised over classes with one-hot weight matrices: the class-$c$ kernel means are
# $m_c^\top K m_c$. The bandwidth is the input dimension, the median pairwise squared
# distance of standard Gaussian data in $D$ dimensions divided by two.

# %%
def gaussian_kernel(a, b, bandwidth=float(D)):
    return torch.exp(-torch.cdist(a, b).square() / (2 * bandwidth))


def classwise_mmd(z, y_t, x_s, y_s):
    """Eq. 6: sum over classes of the squared MMD, target class c vs source class c."""
    mt = F.one_hot(y_t, K).float()
    ms = F.one_hot(y_s, K).float()
    mt, ms = mt / mt.sum(0).clamp_min(1), ms / ms.sum(0).clamp_min(1)
    tt = (mt * (gaussian_kernel(z, z) @ mt)).sum(0)
    ss = (ms * (gaussian_kernel(x_s, x_s) @ ms)).sum(0)
    ts = (mt * (gaussian_kernel(z, x_s) @ ms)).sum(0)
    return (tt + ss - 2 * ts).sum()


def orca_embedder(embed, shots_xy, source_xy, steps, lr=1e-2):
    """ORCA's align stage, as we stand it in: Adam on Eq. 6 over the embedder only."""
    embed = embed.detach().clone().requires_grad_(True)
    opt = Adam([embed], lr)
    x_t, y_t = shots_xy
    for _ in range(steps):
        loss = classwise_mmd(x_t @ embed.T, y_t, *source_xy)
        opt.step(torch.autograd.grad(loss, [embed]))
    return embed.detach()


# %% [markdown]
# ### Fine-tuning (Eq. 7) and knowledge reuse (Eq. 8)

# %%
def finetune(embed, body, head, shots_xy, steps, lr):
    """Eq. 7: full-batch SGD with momentum on embedder, body and head."""
    embed = embed.detach().clone().requires_grad_(True)
    body, head = fresh(body), fresh(head)
    params = [embed, *body.values(), *head.values()]
    velocity = [torch.zeros_like(p) for p in params]
    for _ in range(steps):
        loss = inner_loss(embed, body, head, *shots_xy)
        sgd_momentum_step(params, torch.autograd.grad(loss, params), velocity, lr)
    return (embed.detach(), {k: v.detach() for k, v in body.items()},
            {k: v.detach() for k, v in head.items()})


def reuse(body, source_head, x_s, y_s):
    """Eq. 8: source accuracy of a (fine-tuned) body under the original source head."""
    return accuracy(torch.eye(D), body, source_head, x_s, y_s)


# %% [markdown]
# ### One transfer, start to finish
#
# An arm is a choice of stage 1: none (naive fine-tuning from the identity embedder,
# which is what the source model itself would use), ORCA-like, warm-up, MoNA, or the
# oracle embedder $R_\gamma^\top$ with no stage 1. Then Eq. 7 for every arm.

# %%
def transfer(arm, rotation, model, shots_xy, source_xy, test, steps1, steps2, *,
             alpha, lam, lr):
    """Stage 1 of `arm`, then fine-tuning; returns the metrics and the embedders."""
    body, head = model
    embed = rotation.T.clone() if arm == "oracle embedder" else torch.eye(D)
    if arm == "ORCA-like":
        embed = orca_embedder(embed, shots_xy, source_xy, steps1)
    elif arm in ("warm-up only", "MoNA"):
        lam_arm = lam if arm == "MoNA" else 0.0
        embed, head = learn_embedder(embed, body, head, shots_xy, source_xy, steps1,
                                     alpha, lam_arm)
    x_tt, y_tt, x_st, y_st = test
    d_before = discrepancy(embed, body, head, x_tt, y_tt)
    tuned = finetune(embed, body, head, shots_xy, steps2, lr)
    return dict(target=accuracy(tuned[0], tuned[1], tuned[2], x_tt, y_tt),
                reuse=reuse(tuned[1], model[1], x_st, y_st),
                misalignment=d_before, embed_stage1=embed, embed=tuned[0])


# %% [markdown]
# ## The experiment
#
# ### Pretraining

# %%
gen = torch.Generator().manual_seed(seed)
teacher = make_teacher(gen)
skew = random_skew(gen)
x_src, y_src = sample_source(cfg.n_source, teacher, gen)
model = pretrain(x_src, y_src, cfg.pretrain_steps, gen)
x_test, y_test = sample_source(cfg.n_test, teacher, gen)  # the target test draws x here
source_xy = sample_source(OUTER_BATCH, teacher, gen)  # labelled source data, stage 1
source_acc = accuracy(torch.eye(D), *model, x_test, y_test)
class_counts = torch.bincount(y_test, minlength=K)
print(f"source test accuracy {source_acc:.3f}; test classes "
      f"{class_counts.min().item()}-{class_counts.max().item()} examples each")

# %% [markdown]
# ### The gap is a misalignment of $P(Y \mid X)$, not of $P(X)$
#
# For every gap, the discrepancy (1) of the source model applied to target data as
# they come (the identity embedder) and through the oracle embedder, and the MMD
# between the target and source *marginals*, which the rotation leaves unchanged.

# %%
def target_test(gap_value):
    rotation = sensor(gap_value, skew)
    return rotation, (x_test @ rotation.T, y_test, x_test, y_test)


eye = torch.eye(D)
gap_curve = np.linspace(0, 1, cfg.curve_points)
mis_identity, mis_oracle, marginal_mmd = [], [], []
mmd_rows = torch.arange(min(1000, cfg.n_test // 2))
for g in gap_curve:
    rotation, test = target_test(float(g))
    mis_identity.append(discrepancy(eye, *model, test[0], test[1]))
    mis_oracle.append(discrepancy(rotation.T, *model, test[0], test[1]))
    x_a, x_b = test[0][mmd_rows], sample_source(len(mmd_rows), teacher, gen)[0]
    marginal_mmd.append(float(classwise_mmd(x_a, torch.zeros_like(mmd_rows), x_b,
                                            torch.zeros_like(mmd_rows))))
print("gap:           ", " ".join(f"{g:5.2f}" for g in gap_curve))
print("D(identity):   ", " ".join(f"{v:5.3f}" for v in mis_identity))
print("D(oracle):     ", " ".join(f"{v:5.3f}" for v in mis_oracle))
print("marginal MMD^2:", " ".join(f"{v:5.3f}" for v in marginal_mmd))

# %% [markdown]
# The source model applied to rotated data gets worse as the gap grows, while the
# marginals stay indistinguishable (their MMD is the noise level of two samples of the
# same Gaussian). Through the oracle embedder the discrepancy is the same at every gap:
# the source model's own error. Alignment of $P(X)$ alone has nothing to work with
# here; only the labels reveal the gap.
#
# ### Naive fine-tuning at growing gaps
#
# The paper's pre-experiment: fine-tune naively at several gaps and watch the source
# knowledge. Every number is a mean over `repeats` draws of the shots.

# %%
def run_arms(arms, gap_value, k, repeats, steps1, steps2, shot_seed, **kw):
    """Mean metrics of each arm over `repeats` draws of k shots per class."""
    kw = dict(alpha=inner_lr, lam=meta_weight, lr=finetune_lr) | kw
    rotation, test = target_test(gap_value)
    out = {arm: dict(target=0.0, reuse=0.0, misalignment=0.0) for arm in arms}
    embeds = {}
    for r in range(repeats):
        shot_gen = torch.Generator().manual_seed(shot_seed + r)
        shots_xy = sample_shots(k, teacher, rotation, shot_gen)
        for arm in arms:
            res = transfer(arm, rotation, model, shots_xy, source_xy, test, steps1,
                           steps2, **kw)
            for key in out[arm]:
                out[arm][key] += res[key] / repeats
            embeds.setdefault(arm, res)
    return out, embeds, rotation


naive_by_gap = {}
for g in icmlbook.progress(cfg.gaps, desc="naive fine-tuning"):
    naive_by_gap[g] = run_arms(["naive fine-tuning"], g, shots, cfg.repeats,
                               cfg.stage1, cfg.stage2,
                               seed + 100)[0]["naive fine-tuning"]
loss_by_gap = {g: source_acc - m["reuse"] for g, m in naive_by_gap.items()}
print(f"{'gap':>5} {'target acc':>11} {'source reuse':>13} {'knowledge lost':>15}")
for g, m in naive_by_gap.items():
    print(f"{g:>5.2f} {m['target']:>11.3f} {m['reuse']:>13.3f} {loss_by_gap[g]:>15.3f}")

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(8, 2.9))
axes[0].plot(gap_curve, mis_identity, marker="o", ms=3, **STYLE["naive fine-tuning"])
axes[0].plot(gap_curve, mis_oracle, marker="o", ms=3, **STYLE["oracle embedder"])
axes[0].plot(gap_curve, marginal_mmd, color="0.5", ls=":", label="marginal MMD$^2$")
axes[0].set(xlabel="modality gap", ylabel="discrepancy (Eq. 1)",
            title="misalignment before any training")
axes[0].legend(["identity embedder", "oracle embedder", "marginal MMD$^2$"], fontsize=7)
gaps_run = list(naive_by_gap)
axes[1].plot(gaps_run, [loss_by_gap[g] for g in gaps_run], marker="o",
             **STYLE["naive fine-tuning"])
axes[1].set(xlabel="modality gap", ylabel="source accuracy lost",
            title="knowledge lost by naive fine-tuning")
plt.show()

# %% [markdown]
# The larger the gap, the more of the source model's knowledge naive fine-tuning
# destroys (right, blue): at a small gap the shots are already classified almost
# right and the gradients are small; at a large gap the body itself is rewritten to
# fit the shots.
#
# ### Five arms at the chosen gap
#
# Same shots, same fine-tuning recipe and budget for every arm; only stage 1 differs.

# %%
results, examples, rotation = run_arms(ARMS, gap, shots, cfg.repeats, cfg.stage1,
                                       cfg.stage2, seed + 200)
print(f"gap {gap:.2f}, {shots} shots per class, source accuracy before transfer "
      f"{source_acc:.3f}")
print(f"{'arm':<18} {'D after stage 1':>15} {'target acc':>11} {'source reuse':>13}")
for arm, m in results.items():
    print(f"{arm:<18} {m['misalignment']:>15.3f} {m['target']:>11.3f} "
          f"{m['reuse']:>13.3f}")

# %% tags=["hide-input"]
def bar_panel(ax, values, title, ylabel, ref=None):
    names = list(values)
    for i, name in enumerate(names):
        ax.bar(i, values[name], color=STYLE[name]["color"], label=name)
    if ref is not None:
        ax.axhline(ref, color="k", ls=":", lw=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([n.replace(" ", "\n", 1) for n in names], fontsize=6)
    ax.set(title=title, ylabel=ylabel, ylim=(0, 1))


def embedder_panels(axes, learned, oracle_matrix, title):
    vmax = 1.0
    for ax, mat, name in zip(axes, (learned, oracle_matrix), (title, "oracle R^T")):
        im = ax.imshow(mat.numpy(), cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.set(title=name, xticks=[], yticks=[])
    axes[0].figure.colorbar(im, ax=list(axes), shrink=0.8)


fig, axes = plt.subplots(1, 2, figsize=(8, 2.8))
bar_panel(axes[0], {a: m["target"] for a, m in results.items()}, "target accuracy",
          "accuracy on target test data")
bar_panel(axes[1], {a: m["reuse"] for a, m in results.items()},
          "source knowledge kept (Eq. 8)", "source accuracy after fine-tuning",
          ref=source_acc)
plt.show()

# %% [markdown]
# The dotted line is the source accuracy before any transfer.
#
# ### What the embedders learned
#
# A rotation is a picture one can read: the oracle embedder $R_\gamma^\top$ next to
# the embedders after stage 1 of the warm-up ablation and of MoNA (first draw of the
# shots; colours on one shared scale).

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 3, figsize=(8, 2.6))
mats = (examples["warm-up only"]["embed_stage1"], examples["MoNA"]["embed_stage1"],
        rotation.T)
for ax, mat, name in zip(axes, mats, ("warm-up only", "MoNA", "oracle embedder")):
    im = ax.imshow(mat.numpy(), cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set(title=name, xticks=[], yticks=[])
fig.colorbar(im, ax=list(axes), shrink=0.8, label="matrix entry")
plt.show()
cos_oracle = {arm: float(F.cosine_similarity(examples[arm]["embed_stage1"].flatten(),
                                              rotation.T.flatten(), dim=0))
              for arm in ("ORCA-like", "warm-up only", "MoNA")}
print("cosine between the stage-1 embedder and the oracle:",
      ", ".join(f"{a} {c:.2f}" for a, c in cos_oracle.items()))

# %% [markdown]
# ### Checks of the meta-gradient
#
# Two properties that must hold if Eqs. 3-5 are implemented right. For a small inner
# step the change of the outer loss is its first-order Taylor term,
# $\mathcal L_{\text{out}}(\theta') - \mathcal L_{\text{out}}(\theta) \approx
# -\alpha\langle \nabla \mathcal L_{\text{out}}, \nabla \mathcal L_{\text{in}}\rangle$;
# and with $\alpha = 0$ the
# outer loss does not depend on the embedder at all, so its gradient is exactly zero
# (MoNA is then its warm-up ablation).

# %%
def first_order_error(embed, body, head, shots_xy, source_xy, alpha=1e-4):
    """Relative error of the first-order Taylor term of Eq. 4 (float64)."""
    d64 = lambda p: {k: v.double() for k, v in p.items()}  # noqa: E731
    body, head = d64(body), d64(head)
    embed = embed.double()
    shots64 = (shots_xy[0].double(), shots_xy[1])
    src64 = (source_xy[0].double(), source_xy[1])
    stepped = inner_step(embed, body, head, *shots64, alpha)
    exact = outer_loss(stepped, *src64) - outer_loss(body, *src64)
    b = {k: v.requires_grad_(True) for k, v in fresh(body).items()}
    g_in = torch.autograd.grad(inner_loss(embed, b, head, *shots64), list(b.values()))
    g_out = torch.autograd.grad(outer_loss(b, *src64), list(b.values()))
    linear = -alpha * sum((a * c).sum() for a, c in zip(g_in, g_out))
    return float((exact.detach() - linear).abs() / linear.abs())


def meta_gradient_at_zero_step(embed, body, head, shots_xy, source_xy):
    """|d L_out / d phi| at alpha = 0: exactly zero."""
    embed = embed.clone().requires_grad_(True)
    stepped = inner_step(embed, body, head, *shots_xy, 0.0)
    g = torch.autograd.grad(outer_loss(stepped, *source_xy), [embed],
                            allow_unused=True)[0]
    return 0.0 if g is None else float(g.abs().max())


check_shots = sample_shots(shots, teacher, rotation,
                           torch.Generator().manual_seed(seed))
taylor_err = first_order_error(eye, *model, check_shots, source_xy)
zero_grad = meta_gradient_at_zero_step(eye, *model, check_shots, source_xy)
print(f"first-order Taylor term at alpha = 1e-4: relative error {taylor_err:.2e}; "
      f"meta-gradient at alpha = 0: {zero_grad:.1e}")

# %% [markdown]
# ## Claims
#
# Paper claims first, each against an ablation or a baseline, then checks that must
# hold if the code is right. The thresholds were fixed on seeds 0-9 of a first run of
# this code (one setting of $\alpha, \lambda$, picked on seeds 0-3 among six that all
# showed the same signs), and seeds 10-19 were run afterwards as a fresh test; each
# line says what the first run measured. Changed after a first look: the outer loss
# was first the source cross-entropy after the simulated step; it showed the same
# trade as below, and we moved to the alignment and uniformity losses of Eq. 4, closer
# to the paper's description. Changed after a fresh test: the target-accuracy gain of
# MoNA over its warm-up ablation was first a claim (> 0); seeds 10-19 measured it
# barely above zero, and neither nine draws of the shots nor an average over three
# gaps made it steadier, so it is now reported, not claimed (below the verdict).

# %% tags=["thresholds"]
# knowledge lost by naive FT, gap 1 minus gap 0; set a priori; seeds 0-9: 0.09-0.26
C_GAP_LOSS = 0.05
C_ALIGN_KEEPS = 0.05  # reuse MoNA - naive FT at gap 1; first run 0.11-0.23
C_VS_ORCA = 0.0  # reuse MoNA - ORCA-like, must be > 0; first run +0.016-+0.064
C_SOURCE_ACC = 0.75  # source model's test accuracy; first run 0.81-0.88
C_MARGINAL = 0.01  # marginal MMD^2, target vs source, any gap: sampling noise ~ 1e-3
C_ORACLE_FLAT = 1e-3  # max |D(oracle, gap) - D(oracle, 0)|: float32 rounding
C_MISALIGN_GROWS = 0.3  # D(identity, gap 1) - D(identity, gap 0); seed 0: 0.52
C_TAYLOR = 0.05  # relative error of the first-order term at alpha = 1e-4
C_ZERO_STEP = 0.0  # meta-gradient at alpha = 0: exactly zero

# %%
mona, warm = results["MoNA"], results["warm-up only"]
naive, orca = results["naive fine-tuning"], results["ORCA-like"]
run.claim("knowledge lost by naive FT: gap 1 minus gap 0",
          loss_by_gap[1.0] - loss_by_gap[0.0], ">=", C_GAP_LOSS,
          "The source knowledge naive fine-tuning destroys grows with the modality gap",
          versus="ablation", against="the same naive fine-tuning with no gap (gap 0: "
          "the target modality is the source's), same shots and budget")
run.claim("source reuse: MoNA minus naive FT", mona["reuse"] - naive["reuse"], ">=",
          C_ALIGN_KEEPS, "Aligning the embedder before fine-tuning keeps clearly more "
          "source knowledge than fine-tuning straight away", versus="ablation",
          against="MoNA without its stage 1, i.e. naive fine-tuning, same shots, "
          "recipe and budget")
run.claim("source reuse: MoNA minus ORCA-like", mona["reuse"] - orca["reuse"], ">",
          C_VS_ORCA, "MoNA keeps more source knowledge than ORCA-like class-wise "
          "alignment", versus="baseline",
          against="ORCA-like alignment (Eq. 6), same shots, steps and fine-tuning")
run.check("source model accuracy", source_acc, ">=", C_SOURCE_ACC,
          "pretraining has learned the source task")
run.check("marginal MMD^2 at every gap", max(marginal_mmd), "<=", C_MARGINAL,
          "a rotation leaves the Gaussian marginal unchanged (Eq. 2)")
run.check("oracle discrepancy flat in the gap",
          max(abs(v - mis_oracle[0]) for v in mis_oracle), "<=", C_ORACLE_FLAT,
          "through R^T the target data are the source data", digits=2)
run.check("misalignment grows: D(gap 1) - D(gap 0)", mis_identity[-1] - mis_identity[0],
          ">=", C_MISALIGN_GROWS, "the gap is a misalignment of P(Y|X) (Eq. 1)")
run.check("first-order term of the meta-step", taylor_err, "<=", C_TAYLOR,
          "the second-order gradient through Eq. 3 matches its Taylor expansion",
          digits=2)
run.check("meta-gradient at alpha = 0", zero_grad, "<=", C_ZERO_STEP,
          "with no inner step MoNA is its warm-up ablation", digits=2)
run.metric("results", {a: {k: m[k] for k in ("target", "reuse", "misalignment")}
                       for a, m in results.items()})
run.metric("naive_by_gap", {str(g): m for g, m in naive_by_gap.items()})
run.metric("source_acc", source_acc)
run.metric("reported", dict(
    target_mona_minus_warm=mona["target"] - warm["target"],
    reuse_mona_minus_warm=mona["reuse"] - warm["reuse"],
    target_mona_minus_naive=mona["target"] - naive["target"],
    target_mona_minus_orca=mona["target"] - orca["target"],
    target_oracle_minus_mona=results["oracle embedder"]["target"] - mona["target"]))
run.metric("cos_oracle", cos_oracle);

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed: a fresh teacher, rotation, source model and fresh shots. The
# table and strip plot below read this chapter's results file, made by
# `icmlbook sweep 13 --seeds 0-9 --update-results`: every claim and check over seeds
# 0-9 at the default tier, with the number of seeds on which it holds and its worst
# margin.

# %%
across = icmlbook.across_seeds(run)

# %% [markdown]
# ### Reported, not claimed: what does not reproduce
#
# Four of the paper's expectations do not show at our scale, or not robustly, on this
# seed and across the seeds we ran:

# %%
print(f"target accuracy, MoNA - warm-up:       {mona['target'] - warm['target']:+.3f}")
print(f"source reuse, MoNA - warm-up:          {mona['reuse'] - warm['reuse']:+.3f}")
print(f"target accuracy, MoNA - naive FT:      {mona['target'] - naive['target']:+.3f}")
print(f"target accuracy, MoNA - ORCA-like:     {mona['target'] - orca['target']:+.3f}")
print(f"target accuracy, oracle - MoNA:        "
      f"{results['oracle embedder']['target'] - mona['target']:+.3f}")

# %% [markdown]
# * **The meta-learned term's gain in target accuracy is too small to claim** (first
#   line). It was positive on every seed we ran, about a point on average, but on
#   some seeds barely above zero: the spread between seeds is as large as the gain,
#   and neither more draws of the shots nor an average over gaps narrowed it. The
#   paper's ablation of this term is the one result we cannot confirm with a margin.
# * **The meta-learned term does not keep more knowledge than warm-up.** What little
#   target accuracy it buys it pays for with a little source reuse (second line,
#   usually just below zero). The simulated step looks
#   one step ahead: it prefers embedders whose *first* target gradient is harmless,
#   and these fit the shots slightly less well (the discrepancy after stage 1 is
#   higher for MoNA than for warm-up in the table above, on most seeds), so the many
#   real fine-tuning steps that follow move the body a bit more.
# * **No target-accuracy gain over naive fine-tuning or ORCA-like** (third and
#   fourth lines). Every aligned arm keeps far more source knowledge than naive
#   fine-tuning, but at this gap that knowledge is not what limits the target: from
#   ten shots per class no stage 1 recovers a large rotation of the input space (the
#   embedders above are only loosely like $R_\gamma^\top$), and the naive arm's body
#   re-learns enough of the task from the shots to match them. ORCA-like, whose
#   class-wise MMD uses the labelled source data directly, usually has the best
#   target accuracy of the learned arms.
# * **All learned arms stay far below the oracle embedder**, the ceiling
#   a perfect alignment would reach with the same shots (last line).
#
# The paper's MoNA, at its scale, turns better knowledge reuse into better target
# accuracy. Here the first half reproduces robustly and the second does not.

# %% [markdown]
# ## Explore
#
# Move the modality gap, the number of shots per class and MoNA's inner step size
# $\alpha$. Left: target accuracy of the five arms; middle: the source knowledge each
# keeps; right: MoNA's stage-1 embedder next to the oracle. One draw of the shots and
# shorter stages than above, so the bars are noisier than the tables. A new $\alpha$
# retrains MoNA alone (about a second); a new gap or number of shots retrains all five
# arms, with shorter stages still, and takes a second or two; settings already seen
# are cached.

# %% tags=["hide-input"]
import functools

import ipywidgets as W


@functools.lru_cache(maxsize=64)
def widget_arms(gap_w, shots_w, alpha_w):
    arms = [a for a in ARMS if a != "MoNA"] if alpha_w is None else ["MoNA"]
    res, ex, rot = run_arms(arms, gap_w, shots_w, 1, cfg.widget_stage1,
                            cfg.widget_stage2, seed + 300,
                            alpha=0.0 if alpha_w is None else alpha_w)
    return res, ex, rot


def update(gap_w, shots_w, alpha_w):
    gap_w, alpha_w = round(gap_w, 2), round(alpha_w, 3)
    base, _, rot = widget_arms(gap_w, shots_w, None)
    mona_w, ex, _ = widget_arms(gap_w, shots_w, alpha_w)
    res = {**base, "MoNA": mona_w["MoNA"]}
    fig, axes = plt.subplots(1, 4, figsize=(11, 2.8),
                             gridspec_kw=dict(width_ratios=[1.3, 1.3, 1, 1]))
    bar_panel(axes[0], {a: res[a]["target"] for a in ARMS}, "target accuracy",
              "accuracy")
    bar_panel(axes[1], {a: res[a]["reuse"] for a in ARMS}, "source knowledge kept",
              "source accuracy", ref=source_acc)
    embedder_panels(axes[2:], ex["MoNA"]["embed_stage1"], rot.T,
                    f"MoNA, alpha {alpha_w:g}")
    plt.show()


controls = dict(
    gap_w=W.FloatSlider(value=gap, min=0.0, max=1.0, step=0.25, description="gap"),
    shots_w=W.IntSlider(value=shots, min=2, max=30, step=4, description="shots"),
    alpha_w=W.FloatLogSlider(value=max(inner_lr, 0.1), base=10, min=-1, max=1.5,
                             step=0.5, description="inner lr"),
)
icmlbook.explore(update, controls, run=run)

# %% [markdown]
# ## Paper vs. this book
#
# | | paper | this book |
# |---|---|---|
# | source model | Swin (ImageNet) and RoBERTa | an 8-64-64 ReLU MLP pretrained on a synthetic 8-class task |
# | target tasks | NAS-Bench-360, PDEBench and others | the source task through a rotation of angle set by the gap (Eq. 2), a few shots per class |
# | knowledge discrepancy | $P(Y \mid X)$ misalignment, infimum over label maps | Eq. 1 with the identity label map, measured with the true target labels |
# | MoNA stage 1 | meta-learning of the embedder through a simulated fine-tuning step | Eqs. 3-5, our reconstruction: one second-order step; the outer loss is the alignment (same-class pairs) and uniformity of the stepped source features |
# | key ingredient | the meta-learned term, against embedder warm-up | MoNA against warm-up only (Eq. 5 with $\lambda = 0$): reported, not claimed; the claimed ablation is stage 1 as a whole, against naive fine-tuning |
# | baselines | naive fine-tuning, ORCA (OTDD alignment), PaRe and others | naive fine-tuning and a class-wise MMD ("ORCA-like", Eq. 6) |
#
# What reproduces: the larger the modality gap, the more source knowledge naive
# fine-tuning destroys; aligning the embedder first keeps much more of it, and MoNA
# keeps more than the ORCA-like alignment. What does not: the meta-learned term's
# gain in target accuracy over its warm-up ablation is about a point, positive on
# every seed we ran but too close to zero on some to claim; it does not keep *more*
# knowledge than warm-up (slightly less); and MoNA's target accuracy is no better
# than naive fine-tuning's and below ORCA-like's. The paper's link from reuse to
# accuracy needs a stage 1 that actually aligns the modalities; with a linear
# embedder, eight classes and ten shots per class, none of the learned arms comes
# near the oracle ceiling.

# %% [markdown]
# ## Exercises
#
# 1. **Marginal alignment.** Replace Eq. 6 by the MMD between all embedded target
#    examples and all source examples, ignoring labels. Why can it not tell the
#    oracle embedder from the identity here?
# 2. **The first-order reading.** Replace the second-order step by its first-order
#    approximation, $-\alpha \langle \nabla \mathcal L_{\text{out}},
#    \nabla \mathcal L_{\text{in}} \rangle$ as the outer term. Does MoNA change?
# 3. **More shots.** With the widget, find the number of shots at which the warm-up
#    ablation reaches the oracle embedder's target accuracy at gap 0.5.
#
# ## References
#
# - W. Ma, S. Li, L. Cai, J. Kang. Learning Modality Knowledge Alignment for
#   Cross-Modality Transfer. ICML 2024.
# - J. Shen, L. Li, L. M. Dery, C. Staten, M. Khodak, G. Neubig, A. Talwalkar.
#   Cross-Modal Fine-Tuning: Align then Refine (ORCA). ICML 2023.
# - C. Finn, P. Abbeel, S. Levine. Model-Agnostic Meta-Learning for Fast Adaptation
#   of Deep Networks. ICML 2017.
# - A. Gretton, K. M. Borgwardt, M. J. Rasch, B. Schölkopf, A. Smola. A Kernel
#   Two-Sample Test. JMLR 2012.

# %% tags=["remove-cell"]
run.finish();
