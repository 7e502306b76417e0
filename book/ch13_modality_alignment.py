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
# **The claim.** In the paper's words (abstract): experiments reveal "the connection
# between larger modality gap and lesser knowledge reuse", and MoNA "enables better
# reuse of source modality knowledge in cross-modality transfer, which leads to
# improvements upon existing finetuning methods"; its ablations credit the embedder
# warm-up and the meta-learned two-stage objective. The chapter tests each part at
# toy scale and gives the paper's verdict with the claims, by a rule fixed in advance:
# better reuse reproduces against naive fine-tuning and an ORCA-like baseline, but
# not against the warm-up alone; the meta-learned term adds a little target accuracy
# over the warm-up, but the gain in target accuracy over naive fine-tuning and
# ORCA-like does not reproduce.
#
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
# data, twice the stage lengths, nine draws of the shots) runs on the CPU in about four
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
    default=dict(n_source=8000, pretrain_steps=600, stage1=100, stage2=150, repeats=6,
                 n_test=4000, gaps=(0.0, 0.25, 0.5, 0.75, 1.0), curve_points=11,
                 widget_stage1=30, widget_stage2=50),
    full=dict(n_source=20000, pretrain_steps=1500, stage1=200, stage2=300, repeats=9,
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
# $m_c^\top K m_c$. For a fair comparison the target head gets the same warm-up as in
# MoNA and warm-up only: beside the embedder's alignment it is trained on the target
# loss of the shots, through the current embedder, with the body frozen. The
# bandwidth is the input dimension, the median pairwise squared
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


def orca_embedder(embed, body, head, shots_xy, source_xy, steps, lr=1e-2):
    """ORCA's align stage, as we stand it in: Adam on Eq. 6 over the embedder, while
    the target head warms up on the shots (body frozen), as in MoNA and warm-up."""
    embed, head = embed.detach().clone().requires_grad_(True), fresh(head)
    params = [embed, *head.values()]
    opt = Adam(params, lr)
    x_t, y_t = shots_xy
    for _ in range(steps):
        align = classwise_mmd(x_t @ embed.T, y_t, *source_xy)
        head_fit = inner_loss(embed.detach(), body, head, x_t, y_t)
        opt.step(torch.autograd.grad(align + head_fit, params))
    return embed.detach(), {k: v.detach() for k, v in head.items()}


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
        embed, head = orca_embedder(embed, body, head, shots_xy, source_xy, steps1)
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
#
# Every random draw comes from a named stream of this run's seed: the teacher, the
# rotation, the source data, pretraining, the test set, the labelled source batch of
# stage 1 and the target shots each have their own.

# %%
teacher = make_teacher(run.generator("teacher"))
skew = random_skew(run.generator("modality gap"))
x_src, y_src = sample_source(cfg.n_source, teacher, run.generator("source data"))
model = pretrain(x_src, y_src, cfg.pretrain_steps, run.generator("pretraining"))
# the target test set rotates these same inputs
x_test, y_test = sample_source(cfg.n_test, teacher, run.generator("test data"))
# labelled source data for stage 1 (outer loss, ORCA-like)
source_xy = sample_source(OUTER_BATCH, teacher, run.generator("labelled source batch"))
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
marginal_gen = run.generator("marginal sample")
for g in gap_curve:
    rotation, test = target_test(float(g))
    mis_identity.append(discrepancy(eye, *model, test[0], test[1]))
    mis_oracle.append(discrepancy(rotation.T, *model, test[0], test[1]))
    x_a, x_b = test[0][mmd_rows], sample_source(len(mmd_rows), teacher, marginal_gen)[0]
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
# knowledge. Every number is a mean over `repeats` draws of the shots; every gap
# rotates the same draws (a fresh generator of one stream per gap), so the gaps are
# compared on paired data.

# %%
def run_arms(arms, gap_value, k, repeats, steps1, steps2, shot_gen, **kw):
    """Mean metrics of each arm over `repeats` draws of k shots per class from
    the generator `shot_gen`; every arm sees the same shots."""
    kw = dict(alpha=inner_lr, lam=meta_weight, lr=finetune_lr) | kw
    rotation, test = target_test(gap_value)
    out = {arm: dict(target=0.0, reuse=0.0, misalignment=0.0) for arm in arms}
    embeds = {}
    for _ in range(repeats):
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
                               run.generator("target shots"))[0]["naive fine-tuning"]
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
# The shots are the draws of the gap sweep above, so naive fine-tuning at gap 1 scores
# the same here as there.

# %%
results, examples, rotation = run_arms(ARMS, gap, shots, cfg.repeats, cfg.stage1,
                                       cfg.stage2, run.generator("target shots"))
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
# step the change of the outer loss is its first-order Taylor term: the remainder
#
# $$r(\alpha) = \mathcal L_{\text{out}}(\theta') - \mathcal L_{\text{out}}(\theta)
#   + \alpha\langle \nabla \mathcal L_{\text{out}}, \nabla \mathcal L_{\text{in}}
#   \rangle$$
#
# is small against $\alpha \lVert \nabla \mathcal L_{\text{out}} \rVert\, \lVert
# \nabla \mathcal L_{\text{in}} \rVert$, the largest the first-order term can be.
# (Dividing by the first-order term itself would be ill-posed: the two gradients can
# be nearly orthogonal. Halving $\alpha$ and expecting the remainder to fall by four
# fails too: the ReLU body is only piecewise smooth, and a step crosses kinks.) And
# with $\alpha = 0$ the outer loss does not depend on the embedder at all, so its
# gradient is exactly zero (MoNA is then its warm-up ablation).

# %%
def first_order_error(embed, body, head, shots_xy, source_xy, alpha=1e-4):
    """|r(alpha)| / (alpha |grad L_out| |grad L_in|), in float64: r is the change of
    Eq. 4 under the step (3) minus its first-order term."""
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
    norms = math.sqrt(sum(float(a.square().sum()) for a in g_in)
                      * sum(float(c.square().sum()) for c in g_out))
    return abs(float(exact.detach() - linear)) / (alpha * norms)


def meta_gradient_at_zero_step(embed, body, head, shots_xy, source_xy):
    """|d L_out / d phi| at alpha = 0: exactly zero."""
    embed = embed.clone().requires_grad_(True)
    stepped = inner_step(embed, body, head, *shots_xy, 0.0)
    g = torch.autograd.grad(outer_loss(stepped, *source_xy), [embed],
                            allow_unused=True)[0]
    return 0.0 if g is None else float(g.abs().max())


check_shots = sample_shots(shots, teacher, rotation, run.generator("check shots"))
taylor_err = first_order_error(eye, *model, check_shots, source_xy)
zero_grad = meta_gradient_at_zero_step(eye, *model, check_shots, source_xy)
print(f"first-order term at alpha = 1e-4: error / gradient norms {taylor_err:.1e}; "
      f"meta-gradient at alpha = 0: {zero_grad:.1e}")

# %% [markdown]
# ## Claims
#
# Paper claims first, each against an ablation or a baseline, then checks that must
# hold if the code is right, then findings: what the paper states and the chapter
# measures without claiming it. Seeds 0-9 calibrate the thresholds; seeds 10-19 are run
# once, after the thresholds are fixed, as a fresh test. Each threshold's line says
# where it comes from. Changed after a first look: the outer loss was first the source
# cross-entropy after the simulated step; it showed the same trade as below, and we
# moved to the alignment and uniformity losses of Eq. 4, closer to the paper's
# description. Changed after a fresh test of an earlier version of this chapter: the
# premise check on the gap first compared gap 1 with gap 0.25 and now compares it with
# no gap (gap 0); the first-order check of the meta-step divided its remainder by the
# first-order term, which can be near zero, and now divides by the gradients' norms.
# Two claims against a bar of zero, MoNA against ORCA-like on reuse and against
# warm-up on target accuracy, came close to it on seeds 0-9 with three draws of the
# shots; every number of the comparison is now a mean over six draws, fixed before
# seeds 10-19 were run. In an earlier version of the chapter the second was reported,
# not claimed (fresh seeds measured it barely above zero); the ORCA-like baseline now
# warms up its head like MoNA, and the claim is made again.

# %% tags=["thresholds"]
# the paper's verdict follows icmlbook.verdicts' rule, fixed before the final sweep
# paper claims at gap 1; reuse = source accuracy of the fine-tuned body (Eq. 8)
C_ALIGN_KEEPS = 0.05  # reuse MoNA - naive FT; calibrated on seeds 0-9 (0.16-0.29)
C_VS_ORCA = 0.0  # reuse MoNA - ORCA-like > 0: set a priori; six draws after seeds 0-9
C_META_TARGET = 0.0  # target acc. MoNA - warm-up > 0: set a priori; six draws, as above
# checks
C_GAP_LOSS = 0.05  # source knowledge lost by naive FT, gap 1 - gap 0 (was gap 0.25)
C_SOURCE_ACC = 0.75  # source model's test accuracy; calibrated on seeds 0-9
C_MARGINAL = 0.01  # marginal MMD^2, target vs source, any gap: sampling noise ~ 1e-3
C_ORACLE_FLAT = 1e-3  # max |D(oracle, gap) - D(oracle, 0)|: float32 rounding
C_MISALIGN_GROWS = 0.3  # D(identity, gap 1) - D(identity, gap 0); calibrated, seeds 0-9
C_TAYLOR = 0.01  # |r(a)| / (a |g_out| |g_in|) at a = 1e-4: ~a; after a failure (below)
C_ZERO_STEP = 0.0  # meta-gradient at alpha = 0: exactly zero

# %%
mona, warm = results["MoNA"], results["warm-up only"]
naive, orca = results["naive fine-tuning"], results["ORCA-like"]
oracle = results["oracle embedder"]
run.claim("source reuse: MoNA minus naive FT", mona["reuse"] - naive["reuse"], ">=",
          C_ALIGN_KEEPS, "Aligning the embedder before fine-tuning keeps clearly more "
          "source knowledge than fine-tuning straight away", versus="ablation",
          against="MoNA without its stage 1, i.e. naive fine-tuning, same shots, "
          "recipe and budget", strength="superiority", provenance="calibrated")
run.claim("source reuse: MoNA minus ORCA-like", mona["reuse"] - orca["reuse"], ">",
          C_VS_ORCA, "MoNA keeps more source knowledge than ORCA-like class-wise "
          "alignment", versus="baseline",
          against="ORCA-like alignment (Eq. 6) with the same head warm-up, same shots, "
          "steps and fine-tuning", strength="superiority", provenance="a priori")
run.claim("target accuracy: MoNA minus warm-up", mona["target"] - warm["target"], ">",
          C_META_TARGET, "The meta-learned term of Eq. 5 improves the target task over "
          "the embedder warm-up alone", versus="ablation",
          against="warm-up only: Eq. 5 with lambda = 0, same shots, steps and "
          "fine-tuning", strength="superiority", provenance="a priori")
run.check("knowledge lost by naive FT: gap 1 minus gap 0",
          loss_by_gap[1.0] - loss_by_gap[0.0], ">=", C_GAP_LOSS,
          "the premise: naive fine-tuning destroys more source knowledge at a larger "
          "gap (paired shots)")
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
          "the change of Eq. 4 under the step (3) is its Taylor term, up to a "
          "remainder small against the gradients' norms", digits=2)
run.check("meta-gradient at alpha = 0", zero_grad, "<=", C_ZERO_STEP,
          "with no inner step MoNA is its warm-up ablation", digits=2)
run.finding("source reuse: MoNA minus warm-up", mona["reuse"] - warm["reuse"], ">", 0.0,
            paper="the meta-learned objective, not the embedder warm-up alone, keeps "
            "the source knowledge (the ablation of the two-stage objective)",
            shows="the meta term keeps slightly less source knowledge than warm-up: "
            "the linear embedder can undo the rotation, so warm-up alone already "
            "aligns and the meta term has nothing left to protect")
run.finding("target accuracy: MoNA minus naive FT", mona["target"] - naive["target"],
            ">", 0.0, paper="better reuse 'leads to improvements upon existing "
            "finetuning methods'", shows="no gain on most seeds: the knowledge kept "
            "is not what limits the target task here; naive fine-tuning re-learns it "
            "from the shots")
run.finding("target accuracy: MoNA minus ORCA-like", mona["target"] - orca["target"],
            ">", 0.0, paper="MoNA improves on cross-modal fine-tuning such as ORCA",
            shows="no consistent sign: ahead on some seeds, behind on others")
run.headline("better reuse of source knowledge",
             "MoNA \"enables better reuse of source modality knowledge in "
             "cross-modality transfer\"; its ablations credit the meta-learned "
             "two-stage objective",
             source="Abstract; ablation study",
             claims=["source reuse: MoNA minus naive FT",
                     "source reuse: MoNA minus ORCA-like"],
             findings=["source reuse: MoNA minus warm-up"])
run.headline("better target performance",
             "better reuse \"leads to improvements upon existing finetuning methods\" "
             "(NAS-Bench-360, PDEBench and more tasks)",
             source="Abstract; benchmark tables",
             claims=["target accuracy: MoNA minus warm-up"],
             findings=["target accuracy: MoNA minus naive FT",
                       "target accuracy: MoNA minus ORCA-like"])
run.metric("results", {a: {k: m[k] for k in ("target", "reuse", "misalignment")}
                       for a, m in results.items()})
run.metric("naive_by_gap", {str(g): m for g, m in naive_by_gap.items()})
run.metric("source_acc", source_acc)
run.metric("target_oracle_minus_mona", oracle["target"] - mona["target"])
run.metric("cos_oracle", cos_oracle)

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed: a fresh teacher, rotation, source model and fresh shots. The
# table and strip plot below read this chapter's results file, made by
# `icmlbook sweep 13 --seeds 0-19 --update-results`: every claim, check and finding
# over the calibration seeds 0-9 and, apart, the confirmation seeds 10-19 at the
# default tier, with the number of seeds on which each holds and its worst margin.

# %%
across = icmlbook.across_seeds(run)

# %% [markdown]
# ### What does not reproduce
#
# The findings above, on this seed (the across-seeds table gives their spread):

# %%
reported = {"source reuse, MoNA - warm-up": mona["reuse"] - warm["reuse"],
            "target accuracy, MoNA - warm-up": mona["target"] - warm["target"],
            "target accuracy, MoNA - naive FT": mona["target"] - naive["target"],
            "target accuracy, MoNA - ORCA-like": mona["target"] - orca["target"],
            "target accuracy, oracle - MoNA": oracle["target"] - mona["target"]}
for label, diff in reported.items():
    print(f"{label + ':':<36} {diff:+.3f}")

# %% [markdown]
# * **The meta-learned term does not keep more knowledge than warm-up** (first line).
#   Warm-up, the same stage 1 without the term, keeps as much or a little more: the
#   simulated step looks one step ahead and prefers embedders whose *first* target
#   gradient is harmless, but stage 1 fits the shots so well that the many real
#   fine-tuning steps that follow move the body little either way. For reuse, what
#   the chapter can credit is stage 1 as a whole, not the meta term. (The term's small
#   gain in target accuracy, the second line, is claimed above.)
# * **No target-accuracy gain over naive fine-tuning or ORCA-like** (third and
#   fourth lines). Every aligned arm keeps far more source knowledge than naive
#   fine-tuning, but at this gap that knowledge is not what limits the target: from
#   ten shots per class no stage 1 recovers a large rotation of the input space (the
#   embedders above are only loosely like $R_\gamma^\top$), and the naive arm's body
#   re-learns enough of the task from the shots to match them.
# * **All learned arms stay far below the oracle embedder**, the ceiling a perfect
#   alignment would reach with the same shots (last line). The linear embedder family
#   contains that oracle exactly, so the target task never *needs* the body to move:
#   a toy in which the meta term has work to do would need a gap no linear embedder
#   can undo, or target labels the frozen body cannot separate.
#
# The paper's MoNA, at its scale, turns better knowledge reuse into better target
# accuracy. Here the first half reproduces against naive fine-tuning and the
# ORCA-like baseline, not against warm-up alone, and the second does not.

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
                            cfg.widget_stage2, run.generator("widget shots"),
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
# | key ingredient | the meta-learned term, against embedder warm-up | MoNA against warm-up only (Eq. 5 with $\lambda = 0$): a claim on target accuracy, a finding on source reuse |
# | baselines | naive fine-tuning, ORCA (OTDD alignment), PaRe and others | naive fine-tuning and a class-wise MMD with the same head warm-up ("ORCA-like", Eq. 6) |
#
# **Paper coverage.** The paper's main results and where this chapter tests them:
#
# | the paper's result | here |
# |---|---|
# | pre-experiments: a larger modality gap, less reuse of source knowledge | a check, the premise of the toy ("knowledge lost by naive FT") |
# | the gap as a misalignment of $P(Y \mid X)$ | Eq. 1, measured; checks "misalignment grows" and "marginal MMD" |
# | better reuse of source knowledge with MoNA | claims against naive fine-tuning and ORCA-like; finding against warm-up |
# | ablations: embedder warm-up and the two-stage objective | claim "target accuracy: MoNA minus warm-up"; finding "source reuse: MoNA minus warm-up" |
# | benchmark tables (NAS-Bench-360, PDEBench): better than fine-tuning, ORCA and others | the datasets are out of scope (pretrained transformers); the ordering is tested by findings on the toy's target accuracy |
# | PaRe and the other competitors | out of scope: ORCA-like is the one cross-modal baseline |
#
# What reproduces: aligning the embedder before fine-tuning keeps far more source
# knowledge than fine-tuning straight away, and MoNA keeps more than the ORCA-like
# alignment given the same head warm-up; the meta-learned term adds a little target
# accuracy over warm-up alone. What does not: the meta term keeps no *more*
# source knowledge than warm-up (slightly less, on every seed we ran), and MoNA's
# target accuracy is no better than naive fine-tuning's; against ORCA-like it is
# ahead on some seeds and behind on others. The premise, that a larger gap costs more
# knowledge under naive fine-tuning, holds on every seed, but here it is built into
# the toy and is a check, not evidence.
#
# Why the meta term has little to do here: the linear embedder family contains the
# exact inverse of the rotation, so warm-up alone can align the modalities, and
# fine-tuning then moves the body little whatever stage 1 did. A toy in which the
# body must move, because no embedder of the family undoes the gap, is the test this
# chapter does not make; in a side run on two seeds with a rotation whose angle
# grows with the input's norm (which no linear map undoes), MoNA and warm-up still
# tied on source reuse. The paper's link from reuse to target accuracy needs a
# stage 1 that actually aligns the modalities; with a linear embedder, eight classes
# and ten shots per class, none of the learned arms comes near the oracle ceiling.

# %% [markdown]
# ## Exercises
#
# Each exercise is followed by a worked solution (folded), which runs at a small size
# and checks what it shows.

# %% [markdown] tags=["exercise"]
# **1. Marginal alignment.** Replace Eq. 6 by the MMD between all embedded target
# examples and all source examples, ignoring labels. Why can it not tell the oracle
# embedder from the identity here? Check it on the test data at gap 1.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 1
# A rotation maps $\mathcal N(0, I)$ to itself. Through the identity embedder the
# embedded target inputs are $x_t = R_\gamma x$; through the oracle they are
# $R_\gamma^\top x_t = x$. Both are standard Gaussian samples, so the population MMD
# to the source marginal is zero for both, and a finite sample sees only noise: the
# label-free MMD has no gradient that points from the identity towards the oracle.
# Only the labels tell the two apart, which is why ORCA's distance (and Eq. 6) is
# class-wise. The code measures both distances for both embedders; the label-free
# one differs between them by sampling noise only, the class-wise one clearly.
# :::

# %% tags=["solution", "hide-cell"]
n_ex = min(1000, cfg.n_test // 2)  # the size of the marginal check above
rot_ex, test_ex = target_test(1.0)
x_ex, y_ex = test_ex[0][:n_ex], test_ex[1][:n_ex]
x_ref, y_ref = sample_source(n_ex, teacher, run.generator("exercise source sample"))
flat = torch.zeros(n_ex, dtype=torch.long)  # one label for all: the marginal MMD
mmd_ex = {}
for name, emb in (("identity", eye), ("oracle", rot_ex.T)):
    z = x_ex @ emb.T
    mmd_ex[name] = (float(classwise_mmd(z, flat, x_ref, flat)),
                    float(classwise_mmd(z, y_ex, x_ref, y_ref)))
    print(f"{name:>8}: label-free MMD^2 {mmd_ex[name][0]:.4f}, "
          f"class-wise (Eq. 6) {mmd_ex[name][1]:.4f}")

# %% tags=["solution", "hide-cell"]
S_TIE = 0.01  # sampling noise of MMD^2 between two such samples (the bar C_MARGINAL)
icmlbook.solution_check("label-free MMD^2: identity minus oracle, absolute",
                        abs(mmd_ex["identity"][0] - mmd_ex["oracle"][0]), "<=", S_TIE)

# %% [markdown] tags=["exercise"]
# **2. The first-order reading.** Replace the outer term of Eq. 5 by its first-order
# approximation $-\alpha \langle \nabla_\theta \mathcal L_{\text{out}}(\theta),
# \nabla_\theta \mathcal L_{\text{in}}(\phi, \psi, \theta) \rangle$. Derive its
# gradient with respect to the embedder and compare it with the chapter's
# second-order meta-gradient at a small $\alpha$ and at the $\alpha$ used here.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 2
# Write $g(\phi) = \nabla_\theta \mathcal L_{\text{in}}(\phi, \psi, \theta)$ and
# $u = \nabla_\theta \mathcal L_{\text{out}}(\theta)$, which does not depend on
# $\phi$. Expanding the outer loss after the step (3),
#
# $$\mathcal L_{\text{out}}(\theta - \alpha g(\phi)) = \mathcal L_{\text{out}}(\theta)
#   - \alpha \langle u, g(\phi) \rangle + \tfrac{\alpha^2}{2}\, g(\phi)^\top H\,
#   g(\phi) + O(\alpha^3),$$
#
# with $H$ the Hessian of $\mathcal L_{\text{out}}$ at $\theta$. The first-order
# reading keeps the second term, whose gradient is $-\alpha\, J_\phi g^\top u$: a
# Hessian-vector product of the *inner* loss only. The full meta-gradient adds
# $\alpha^2 J_\phi g^\top H g + \dots$, so the two point the same way when
# $\alpha \lVert H g \rVert \ll \lVert u \rVert$ and part ways when the step is large.
# The code computes both in float64 at the identity embedder: at
# $\alpha = 10^{-4}$ their cosine is one to several digits; at the chapter's
# $\alpha$ it is printed, and is well below one: the MoNA of this chapter uses the
# step's second-order effect, not only the alignment of the two gradients.
# :::

# %% tags=["solution", "hide-cell"]
def first_order_outer(embed, body, head, shots_xy, source_xy, alpha):
    """-alpha <grad L_out(theta), grad L_in(phi, psi, theta)>, differentiable in phi."""
    b_out = fresh(body)
    u = torch.autograd.grad(outer_loss(b_out, *source_xy), list(b_out.values()))
    b_in = fresh(body)
    g = torch.autograd.grad(inner_loss(embed, b_in, head, *shots_xy),
                            list(b_in.values()), create_graph=True)
    return -alpha * sum((a * c).sum() for a, c in zip(u, g))


def meta_gradients(alpha):
    """The embedder's gradient of the second-order outer term and of its reading."""
    body64, head64 = ({k: v.double() for k, v in p.items()} for p in model)
    shots64 = (check_shots[0].double(), check_shots[1])
    src64 = (source_xy[0].double(), source_xy[1])
    grads = []
    for term in ("second order", "first order"):
        e = eye.double().clone().requires_grad_(True)
        if term == "second order":
            out = outer_loss(inner_step(e, body64, head64, *shots64, alpha), *src64)
        else:
            out = first_order_outer(e, body64, head64, shots64, src64, alpha)
        grads.append(torch.autograd.grad(out, [e])[0].flatten())
    return float(F.cosine_similarity(grads[0], grads[1], dim=0))


cos_small, cos_used = meta_gradients(1e-4), meta_gradients(inner_lr)
print(f"cosine of the two meta-gradients: alpha = 1e-4: {cos_small:.6f}; "
      f"alpha = {inner_lr:g}: {cos_used:.3f}")

# %% tags=["solution", "hide-cell"]
S_COS = 0.999  # two gradients that agree to first order in alpha, at alpha = 1e-4
icmlbook.solution_check("cosine of the meta-gradients at alpha = 1e-4", cos_small,
                        ">=", S_COS)

# %% [markdown] tags=["exercise"]
# **3. More shots.** At gap 0.5, how much does the warm-up ablation gain in target
# accuracy when the shots per class grow from 4 to 30, and how much of its distance
# to the oracle embedder closes? Why?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 3
# Warm-up learns a $D \times D$ embedder and a new head from the shots: with four
# shots per class that is 32 examples for 64 embedder entries, so the fitted embedder
# is underdetermined and far from $R_\gamma^\top$; with 30 per class (240 examples)
# it is pinned down much better, and fine-tuning has more data too. So warm-up's
# target accuracy should rise. The oracle starts from the right embedder, but it is
# fine-tuned on the same shots and gains from more of them as well, so the distance
# between the two closes by less than warm-up gains, and on some seeds hardly at all.
# The code runs both arms with the widget's short stages (30 and 50 steps) and two
# draws of the shots, at every tier (a smaller run than the tables above), prints
# both accuracies and checks that warm-up's accuracy rises.
# :::

# %% tags=["solution", "hide-cell"]
acc_ex = {}
for k_ex in (4, 30):
    res_ex = run_arms(["warm-up only", "oracle embedder"], 0.5, k_ex, 2, 30, 50,
                      run.generator("exercise shots"))[0]
    acc_ex[k_ex] = {arm: m["target"] for arm, m in res_ex.items()}
    print(f"{k_ex:>2} shots per class: warm-up {acc_ex[k_ex]['warm-up only']:.3f}, "
          f"oracle {acc_ex[k_ex]['oracle embedder']:.3f}, distance "
          f"{acc_ex[k_ex]['oracle embedder'] - acc_ex[k_ex]['warm-up only']:+.3f}")

# %% tags=["solution", "hide-cell"]
S_GAIN = 0.0  # more shots must help warm-up: a gain above zero
icmlbook.solution_check("warm-up target accuracy: 30 shots minus 4 shots",
                        acc_ex[30]["warm-up only"] - acc_ex[4]["warm-up only"], ">",
                        S_GAIN)

# %% [markdown]
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
