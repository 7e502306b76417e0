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
# # One-shot differentiable multi-task grouping
#
# **Paper.** Yuan Gao, Shuguo Jiang, Moran Li, Jin-Gang Yu, Gui-Song Xia. *DMTG:
# One-Shot Differentiable Multi-Task Grouping.* ICML 2024, PMLR 235.
# [OpenReview](https://openreview.net/forum?id=lcX5GbDIi8) ·
# [arXiv:2407.05082](https://arxiv.org/abs/2407.05082) ·
# authors' code: [ethanygao/DMTG](https://github.com/ethanygao/DMTG). Everything below
# is written from scratch from the paper's description; we did not copy the authors'
# code.
#
# **The problem.** Training many tasks in one network helps when the tasks are related
# and hurts when they compete for the same capacity. *Task grouping* splits $N$ tasks
# into groups, one network branch per group. The number of candidate groupings grows
# like the Bell numbers, and the classical recipes are sequential: estimate pairwise
# task affinities (from the targets, or from how a gradient step on one task changes
# another's loss, as in TAG) or train many candidate groupings, pick one, then train
# it.
#
# **The idea.** Make the grouping itself a learnable, relaxed categorical variable.
# Build $K$ encoder branches, give every branch a head for every task ($KN$ heads), and
# weight the loss of task $i$ on branch $k$ by a Gumbel-softmax sample $G_{ik}$ of a
# learnable logit matrix $\Theta$. Weights and grouping are trained together, in one
# shot, with one optimiser; at the end each task keeps the head of its most likely
# branch and the rest is pruned away.
#
# **The claims, and what this book changed.** The paper's abstract makes three
# headline claims: DMTG can "simultaneously identify the best task groups from $2^N$
# candidates and train the model weights simultaneously in one-shot"; doing so "not
# only improves the training efficiency, but also mitigates the objective bias
# introduced by the sequential procedures that potentially lead to a suboptimal
# solution". Its tables report these on CelebA and Taskonomy. We test all three at
# laptop scale, each by claims and findings recorded below, and the paper's verdict
# (reproduced, partly, not reproduced) follows from them by a rule fixed before the
# final runs; it is printed with the claims. The tasks are six synthetic regression
# tasks in three planted groups, where a group's two tasks are an odd and an even
# function of one shared feature: their targets are *uncorrelated*, so clustering tasks
# by the correlation of their targets is misled by construction, while a network that
# learns the shared feature is not. On a second family, with one function per group,
# correlation clustering does find the groups, and we say so. Against TAG-style
# lookahead affinity (Fifty et al., 2021), the strongest pairwise baseline we know,
# DMTG does not win on error here: both find the planted grouping, and DMTG's
# advantage is cost. The changes against the paper: synthetic tasks instead of CelebA
# and Taskonomy, small MLP branches with a width-1 bottleneck and small MLP heads, a
# short fine-tuning of the pruned network (which the paper does, with a recipe the
# authors did not release), and thresholds of our own, calibrated on our
# implementation (the "Paper vs. this book" table lists them).

# %% tags=["parameters"]
tier = "default"  # smoke | default | full: size of the experiment
seed = 0  # drives every random number in the chapter (data set and restarts)
tau = 2.5  # Gumbel-softmax temperature (constant, as in the paper's CelebA setting)
lr = 0.01  # one Adam learning rate for the weights AND the assignment logits
restarts = 3  # independent DMTG runs (restarts) on the same data
minor = 0.2  # amplitude of each task's own (non-shared) component
rho = 0.7  # cosine between the shared directions of different groups

# %% tags=["validate"]
from icmlbook import check_int, check_range, check_seed, check_tier

check_tier(tier)
check_seed(seed)
check_range("tau", tau, 0.05, 20.0)
check_range("lr", lr, 1e-4, 0.1)
check_int("restarts", restarts, 1, 20)
check_range("minor", minor, 0.0, 1.0)
check_range("rho", rho, 0.0, 0.95)

# %% [markdown]
# ## Setup
#
# Tiny models (a branch is a 32-unit MLP), so one CPU thread. The $K$ branches and the
# $KN$ heads are stored as stacked tensors and evaluated with one `einsum` each, not
# as $K N$ separate modules. The tier sets the data size and the length of training;
# the `full` tier is three times larger and takes a few minutes on the CPU (no GPU
# needed or used).

# %%
import itertools

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn

import icmlbook

run = icmlbook.start("15_multitask_grouping", tier=tier, seed=seed,
                     params=dict(tau=tau, lr=lr, restarts=restarts, minor=minor,
                                 rho=rho))
icmlbook.use_style()
cfg = run.pick(
    smoke=dict(n_train=200, n_test=200, epochs=2, finetune=1, widget_n=100,
               widget_epochs=1),
    default=dict(n_train=2000, n_test=2000, epochs=15, finetune=5, widget_n=1000,
                 widget_epochs=15),
    full=dict(n_train=6000, n_test=5000, epochs=25, finetune=8, widget_n=1000,
              widget_epochs=15),
)
D_IN = 8  # input dimension
HIDDEN = 32  # hidden width of every branch
BOTTLENECK = 1  # width r of a branch's output: one branch can carry one group's feature
HEAD = 8  # hidden width of every task head
SCALE = 1.5  # length of the shared directions u_g
BATCH = 128  # mini-batch size
GROUPS, PER_GROUP = 3, 2  # planted structure: 3 groups of 2 tasks (an odd and an even)
K_MAIN = 3  # branches
STYLE = icmlbook.method_styles("DMTG", "TAG lookahead affinity", "|corr| clustering",
                               "planted grouping", "one shared branch",
                               "assignment not learned")
print(f"tier {tier}: {cfg.n_train} training points, {cfg.epochs} + {cfg.finetune} "
      f"epochs, {restarts} DMTG restarts, N = {GROUPS * PER_GROUP} tasks, "
      f"K = {K_MAIN} branches")

# %% [markdown]
# ## From scratch
#
# ### Tasks with a planted group structure
#
# Each of $N$ regression tasks reads a shared input $x \in \mathbb R^8$. Task $i$
# belongs to a group $g(i)$ and reads that group's projection $s_{g} = u_{g}^\top x$
# through a function $\phi_i$ of its own, plus a small component of its own:
#
# $$y_i = w_i\, \phi_i\big(u_{g(i)}^\top x\big) + m \sin\!\big(v_i^\top x\big)
#   + 0.1\,\epsilon, \qquad \phi_i \in \{\tanh,\ \tanh^2\},
#   \quad \epsilon \sim \mathcal N(0, 1). \tag{1}$$
#
# In the main family every group has one odd task ($\tanh$) and one even task
# ($\tanh^2$). Since $s_g$ is a centred Gaussian, an odd and an even function of it are
# uncorrelated: but for their small own components, the two tasks of a group are
# uncorrelated. The
# directions of different groups have cosine $\rho$ = `rho` between them, so the odd
# tasks of *different* groups are correlated, and so are the even ones. In the
# same-function family every $\phi_i = \tanh$ and the tasks of a group are strongly
# correlated. The weights are $w_i = \pm\,\mathcal U(0.7, 1.3)$, $v_i$ is a random
# direction per task, $m$ = `minor`, and targets are standardised with the training
# set's moments.

# %%
def task_coefficients(n_groups, per_group, rho, rng, mixed=True, d=D_IN):
    """Eq. 1's coefficients: directions u_g (pairwise cosine rho), which tasks are even,
    the weights w_i and the own directions v_i."""
    gram = np.full((n_groups, n_groups), rho) + (1 - rho) * np.eye(n_groups)
    basis = np.linalg.qr(rng.standard_normal((d, d)))[0][:n_groups]
    U = SCALE * np.linalg.cholesky(gram) @ basis
    N = n_groups * per_group
    even = (np.arange(N) % per_group) % 2 == 1 if mixed else np.zeros(N, bool)
    w = rng.choice([-1.0, 1.0], N) * rng.uniform(0.7, 1.3, N)
    V = rng.standard_normal((N, d)) / np.sqrt(d)
    truth = np.repeat(np.arange(n_groups), per_group)
    return dict(U=U, even=even, w=w, V=V, truth=truth)


def sample_tasks(n, coef, rng, minor=0.2, noise=0.1):
    """n inputs x ~ N(0, I) and Eq. 1's targets for every task: X (n, d), Y (n, N)."""
    X = rng.standard_normal((n, coef["U"].shape[1]))
    s = X @ coef["U"][coef["truth"]].T  # u_g(i)^T x, one column per task
    phi = np.where(coef["even"], np.tanh(s) ** 2, np.tanh(s))
    Y = (coef["w"] * phi + minor * np.sin(X @ coef["V"].T)
         + noise * rng.standard_normal(s.shape))
    return X.astype(np.float32), Y.astype(np.float32)


def make_splits(n_groups, per_group, sizes, rng, rho=0.7, minor=0.2, mixed=True):
    """Splits of one planted task family, standardised by the training moments."""
    coef = task_coefficients(n_groups, per_group, rho, rng, mixed)
    splits = [sample_tasks(n, coef, rng, minor) for n in sizes]
    mu, sd = splits[0][1].mean(0), splits[0][1].std(0)
    return [(X, (Y - mu) / sd) for X, Y in splits], coef["truth"]


# %% [markdown]
# ### Branches and heads
#
# Branch $k$ is an encoder $f_k : \mathbb R^8 \to \mathbb R^r$, and every branch
# carries a head for every task, a one-hidden-layer MLP $h_{ki} : \mathbb R^r \to
# \mathbb R$: $KN$ heads in all. The loss of task $i$ on branch $k$ is
#
# $$L_{ik} = \frac1B \sum_{b} \big(h_{ki}(f_k(x_b)) - y_{bi}\big)^2 . \tag{2}$$
#
# With a bottleneck of width $r = 1$ a branch can carry one group's feature $s_g$ and
# no more; a nonlinear head can then read both $\tanh(s_g)$ and $\tanh^2(s_g)$ from
# it. Tasks of different groups sharing a branch *compete*, tasks of one group
# *cooperate*, whether or not their targets are correlated. The branches are
# initialised independently (the authors' code deep-copies one initialised branch
# $K$ times, so that only the Gumbel noise breaks the symmetry at first; independent
# initialisation is simpler at this scale).

# %%
def init(*shape, fan_in, generator):
    """PyTorch's default Linear initialisation, for a stack of layers."""
    return nn.Parameter((2 * torch.rand(*shape, generator=generator) - 1) / fan_in**0.5)


class GroupedBranches(nn.Module):
    """K encoder branches x -> tanh MLP -> R^r, each with an MLP head per task (K*N).

    forward(x) returns every head's prediction, shape (batch, N, K): the prediction
    of task i by head (k, i) on branch k.
    """

    def __init__(self, d_in, K, N, gen, hidden=HIDDEN, r=BOTTLENECK, head=HEAD):
        super().__init__()
        self.W1 = init(K, d_in, hidden, fan_in=d_in, generator=gen)
        self.b1 = init(K, hidden, fan_in=d_in, generator=gen)
        self.W2 = init(K, hidden, r, fan_in=hidden, generator=gen)
        self.b2 = init(K, r, fan_in=hidden, generator=gen)
        self.A1 = init(K, N, r, head, fan_in=r, generator=gen)
        self.a1 = init(K, N, head, fan_in=r, generator=gen)
        self.A2 = init(K, N, head, fan_in=head, generator=gen)
        self.a2 = init(K, N, fan_in=head, generator=gen)

    def encoder(self):
        return [self.W1, self.b1, self.W2, self.b2]

    def encode(self, x, params=None):
        """f_k(x) for every branch, shape (K, batch, r); params replaces the encoder."""
        W1, b1, W2, b2 = params or self.encoder()
        h = torch.tanh(torch.einsum("bd,kdh->kbh", x, W1) + b1[:, None])
        return torch.einsum("kbh,khr->kbr", h, W2) + b2[:, None]

    def heads(self, z):
        """h_ki(z_k) for every head, shape (batch, N, K)."""
        a = torch.einsum("kbr,knrh->bnkh", z, self.A1) + self.a1.transpose(0, 1)
        return torch.einsum("bnkh,knh->bnk", torch.tanh(a), self.A2) + self.a2.T

    def forward(self, x):
        return self.heads(self.encode(x))


def branch_losses(pred, y):
    """Eq. 2: L[i, k], the mean squared error of task i's head on branch k."""
    return ((pred - y[:, :, None]) ** 2).mean(0)


# %% [markdown]
# ### The relaxed assignment
#
# A logit matrix $\Theta \in \mathbb R^{N \times K}$ (zeros at the start: every
# grouping equally likely) defines a categorical distribution over branches for each
# task. Its Gumbel-softmax relaxation draws, at every step,
#
# $$G_{ik} = \frac{\exp\big((\Theta_{ik} + \gamma_{ik})/\tau\big)}
#   {\sum_{k'} \exp\big((\Theta_{ik'} + \gamma_{ik'})/\tau\big)}, \qquad
#   \gamma_{ik} = -\log(-\log U_{ik}),\ U_{ik} \sim \mathcal U(0, 1). \tag{3}$$
#
# Each row of $G$ is a point of the simplex, close to a corner when $\tau$ is small.
# The noise comes from an explicit generator, so a run is reproducible; samples are
# soft during training and $\tau$ is constant, as in the authors' configurations.

# %%
def gumbel_softmax(theta, tau, generator=None):
    """Eq. 3: a relaxed one-hot sample per row of theta (N, K); each row sums to one."""
    u = torch.rand(theta.shape, generator=generator).clamp(1e-10, 1 - 1e-10)
    gumbel = -torch.log(-torch.log(u))
    return torch.softmax((theta + gumbel) / tau, dim=-1)


# %% [markdown]
# ### One objective for everything
#
# The weights of branches and heads and the logits $\Theta$ minimise, with one
# optimiser,
#
# $$\mathcal L(\text{weights}, \Theta) = \sum_{i=1}^{N} \sum_{k=1}^{K} G_{ik}\,
#   L_{ik}. \tag{4}$$
#
# The gradient with respect to $\Theta_{i\cdot}$ moves task $i$'s probability toward
# the branches where its loss is low; the gradient with respect to a branch's weights
# is its tasks' losses weighted by how much they currently belong to it. Tasks that
# help each other end up on the same branch, and the branch is trained for them.

# %%
def dmtg_loss(L, G):
    """Eq. 4: every task's loss on every branch, weighted by its relaxed assignment."""
    return (G * L).sum()


# %% [markdown]
# ### Pruning
#
# At the end, task $i$ goes to $k^*(i) = \arg\max_k \Theta_{ik}$; every other head,
# and every branch left without a task, is deleted:
#
# $$\hat y_i(x) = h_{k^*(i)\,i}\big(f_{k^*(i)}(x)\big). \tag{5}$$
#
# The paper then fine-tunes the pruned network; we do too, for a few epochs with the
# grouping fixed.

# %%
def prune(theta):
    """Eq. 5: the branch kept by each task, argmax_k theta[i, k] (N labels)."""
    return np.asarray(theta).argmax(axis=1)


@torch.no_grad()
def pruned_mse(model, grouping, X, Y):
    """Mean over tasks of the MSE of the pruned network (Eq. 5): N heads of K*N."""
    pred = model(torch.as_tensor(X))
    kept = pred[:, torch.arange(pred.shape[1]), torch.as_tensor(np.asarray(grouping))]
    return float(((kept - torch.as_tensor(Y)) ** 2).mean())


@torch.no_grad()
def best_heads(model, X, Y):
    """Each task's branch whose head has the lowest loss (the ablation's pruning)."""
    L = branch_losses(model(torch.as_tensor(X)), torch.as_tensor(Y))
    return L.argmin(1).numpy()


# %% [markdown]
# ### Training
#
# One loop serves DMTG, its ablation and every fixed grouping. With `grouping=None` it
# is DMTG: $\Theta$ is a parameter and $G$ is drawn by Eq. 3 at every step. With
# `learn_theta=False` it is the ablation: the same network and the same Gumbel noise,
# but $\Theta$ stays at zero, so every branch is trained on every task with random
# weights, and each task finally keeps the head with the lowest training loss. With a
# fixed grouping $G$ is that grouping's one-hot matrix: this trains a grouping chosen
# in advance, or fine-tunes a pruned network (`model=`). Everything shares one Adam
# optimiser and one learning rate, as in the paper: the assignment must not commit
# faster than the branches specialise.

# %%
def train_grouped(X, Y, K, grouping=None, *, gen, tau=2.5, lr=0.01, epochs=15,
                  batch=BATCH, r=BOTTLENECK, learn_theta=True, model=None,
                  loss_fn=dmtg_loss, assign=gumbel_softmax):
    """Train K branches with K*N heads: DMTG (grouping=None) or a fixed grouping.

    gen (a torch Generator) draws the initialisation, the mini-batches and the
    Gumbel noise. Returns (model, grouping, history): history[e] is softmax(theta)
    after epoch e.
    """
    X, Y = torch.as_tensor(X), torch.as_tensor(Y)
    n, N = Y.shape
    model = GroupedBranches(X.shape[1], K, N, gen, r=r) if model is None else model
    theta = nn.Parameter(torch.zeros(N, K))  # uniform over branches at the start
    fixed = None
    if grouping is not None:
        fixed = nn.functional.one_hot(torch.as_tensor(np.asarray(grouping)), K).float()
    learned = fixed is None and learn_theta
    opt = icmlbook.Adam(list(model.parameters()) + [theta] * learned, lr=lr)
    history = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for start in range(0, n, batch):
            idx = perm[start:start + batch]
            L = branch_losses(model(X[idx]), Y[idx])
            G = fixed if fixed is not None else assign(theta, tau, gen)
            loss = loss_fn(L, G)
            opt.zero_grad()
            loss.backward()
            opt.step()
        history.append(torch.softmax(theta.detach(), -1).numpy().copy())
    if fixed is not None:
        final = np.asarray(grouping)
    else:
        final = prune(theta.detach()) if learn_theta else best_heads(model, X, Y)
    return model, final, np.array(history)


def dmtg(X, Y, K, *, epochs, finetune, gen, test, **kw):
    """One DMTG run: the one-shot grouping stage, pruning, then a short fine-tuning.

    pruned_test_mse is measured on `test` before the fine-tuning, test_mse after it."""
    model, grouping, history = train_grouped(X, Y, K, epochs=epochs, gen=gen, **kw)
    pruned = pruned_mse(model, grouping, *test)
    kw = {k: v for k, v in kw.items() if k in ("lr", "batch", "r")}
    train_grouped(X, Y, K, grouping, model=model, epochs=finetune, gen=gen, **kw)
    return dict(model=model, grouping=grouping, history=history, pruned_test_mse=pruned,
                train_mse=pruned_mse(model, grouping, X, Y),
                test_mse=pruned_mse(model, grouping, *test))


# %% [markdown]
# ### Groupings
#
# Branch labels are arbitrary, so a grouping is compared with the truth up to a
# relabelling: the number of *misassigned tasks* is the fewest tasks that must move to
# turn one partition into the other (0 means identical). A count is a coarse
# measure of a learned assignment, so we also measure by how much it recovers the
# truth: the *planted lead* is the smallest margin, over tasks, by which
# $\mathrm{softmax}(\Theta_{i\cdot})$ puts task $i$ on its planted group's branch
# rather than on any other (groups matched to branches in the best way). It is
# positive exactly when the pruned grouping is the planted one. The groupings of
# $N$ tasks into at most $K$ non-empty groups number
#
# $$\#\text{groupings}(N, K) = \sum_{j=1}^{K} S(N, j), \tag{6}$$
#
# with $S$ the Stirling numbers of the second kind: 32 for $N = 6$, $K = 2$; 122 for
# $K = 3$; 4 140 for $N = 10$, $K = 4$. An exhaustive search trains every one of them;
# DMTG trains one network with $K$ branches, whatever their number. We enumerate them
# in a canonical form (the first task is in group 0, the next new group is 1, ...).

# %%
def canonical(grouping):
    """Relabel groups in order of first appearance: (1, 1, 0) -> (0, 0, 1)."""
    seen = {}
    return tuple(seen.setdefault(int(g), len(seen)) for g in grouping)


def misassigned(grouping, truth):
    """Fewest tasks to move so that `grouping` equals `truth` up to relabelling."""
    a, b = canonical(grouping), canonical(truth)
    n = max(max(a), max(b)) + 1
    best = 0
    for perm in itertools.permutations(range(n), max(a) + 1):
        best = max(best, sum(perm[x] == y for x, y in zip(a, b)))
    return len(a) - best


def planted_lead(P, truth):
    """The smallest lead, over tasks, of a task's planted branch in P (N, K) over its
    best other branch, under the relabelling of groups to branches that makes it
    largest: positive exactly when argmax P names the planted grouping."""
    t = canonical(truth)
    P, K, best = np.asarray(P), P.shape[1], -1.0
    for perm in itertools.permutations(range(K), max(t) + 1):
        own = np.array([perm[g] for g in t])
        others = np.where(np.eye(K, dtype=bool)[own], -np.inf, P).max(1)
        best = max(best, float((P[np.arange(len(t)), own] - others).min()))
    return best


def all_groupings(N, K):
    """Eq. 6: every partition of N tasks into at most K non-empty groups."""
    return sorted({canonical(lab) for lab in itertools.product(range(K), repeat=N)})


# %% [markdown]
# ### The baselines: grouping by pairwise affinity
#
# The sequential recipe the paper argues against measures an affinity $A_{ij}$ between
# every pair of tasks, picks the grouping that puts high-affinity pairs together, and
# then trains that grouping. We give it two affinities.
#
# *Target correlation*, $A_{ij} = |\mathrm{corr}(y_i, y_j)|$ on the training set: free,
# and a natural first try.
#
# *Lookahead affinity* (TAG, Fifty et al., 2021): train one shared branch with all $N$
# heads and, at every step $t$, measure how a gradient step on task $i$ alone, applied
# to the shared encoder $\theta_s$, changes the loss of task $j$,
#
# $$Z_{i \to j} = \mathbb E_t \left[1 - \frac{L_j\big(\theta_s^t - \eta
#   \nabla_{\theta_s} L_i(\theta_s^t),\ \theta_j^t\big)}{L_j(\theta_s^t,\ \theta_j^t)}
#   \right]. \tag{7}$$
#
# A positive $Z_{i \to j}$ means task $i$'s gradient helps task $j$. The shared
# encoder is one DMTG branch (the same width-1 bottleneck), $\eta$ is the learning
# rate, and the affinity is averaged over all steps of a training as long as DMTG's
# grouping stage.

# %%
def corr_affinity(Y):
    """|corr(y_i, y_j)| of the training targets."""
    return np.abs(np.corrcoef(np.asarray(Y).T))


def lookahead_affinity(X, Y, *, gen, lr=0.01, epochs=15, batch=BATCH, r=BOTTLENECK):
    """Eq. 7: TAG's affinity Z[i, j], averaged over the training of a shared branch."""
    X, Y = torch.as_tensor(X), torch.as_tensor(Y)
    n, N = Y.shape
    model = GroupedBranches(X.shape[1], 1, N, gen, r=r)
    opt = icmlbook.Adam(model.parameters(), lr=lr)
    Z, steps = np.zeros((N, N)), 0
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for start in range(0, n, batch):
            x, y = X[perm[start:start + batch]], Y[perm[start:start + batch]]
            L = branch_losses(model(x), y)[:, 0]
            for i in range(N):
                grads = torch.autograd.grad(L[i], model.encoder(), retain_graph=True)
                with torch.no_grad():
                    ahead = [p - lr * g for p, g in zip(model.encoder(), grads)]
                    L_ahead = branch_losses(model.heads(model.encode(x, ahead)), y)
                    Z[i] += (1 - L_ahead[:, 0] / L.detach()).numpy()
            steps += 1
            opt.zero_grad()
            L.sum().backward()
            opt.step()
    return Z / steps


# %% [markdown]
# Given an affinity, the grouping into $K$ groups follows TAG's selection score: each
# task scores the mean affinity onto it from the other members of its group, and the
# grouping with the largest total score wins (TAG also lets a task be trained in
# several groups and served by the best one; we keep groups disjoint, as DMTG's are),
#
# $$\hat g = \arg\max_{g \text{ with } K \text{ groups}} \sum_{j=1}^{N}
#   \frac{1}{|g(j)| - 1} \sum_{i \in g(j),\, i \ne j} A_{ij}, \tag{8}$$
#
# with a task alone in its group scoring zero. We search all groupings into exactly
# $K$ groups: a user who has $K$ branches uses them all (with "at most $K$" groups,
# a non-negative affinity such as $|\mathrm{corr}|$ would merge everything).

# %%
def group_by_affinity(A, K):
    """Eq. 8: the grouping into exactly K groups with the largest total affinity."""
    N, best, best_score = len(A), None, -np.inf
    for g in all_groupings(N, K):
        g = np.array(g)
        if g.max() + 1 < K:
            continue
        same = (g[:, None] == g[None]) & ~np.eye(N, dtype=bool)
        score = np.sum((A * same).sum(0) / np.maximum(same.sum(0), 1))
        if score > best_score + 1e-12:
            best, best_score = g, score
    return best


# %% [markdown]
# ## The experiment
#
# Six tasks in three planted groups of an odd and an even task, $K = 3$ branches.
# Every method gets the same data and the same number of epochs to train its final
# network, `epochs + finetune`:
#
# * **DMTG**, `restarts` times (different initialisations and Gumbel noise, same data):
#   `epochs` epochs of Eq. 4, pruning, `finetune` epochs of the pruned network;
# * **TAG lookahead affinity**: `epochs` epochs of a shared branch to measure Eq. 7,
#   the grouping of Eq. 8, then that grouping trained for `epochs + finetune` epochs
#   (TAG gets more training in total than DMTG);
# * **|corr| clustering**: Eq. 8 on the target correlations, then that grouping
#   trained like TAG's;
# * **assignment not learned** (the ablation): DMTG's network and schedule with
#   $\Theta$ frozen at zero, each task keeping its best head;
# * **planted grouping** (the oracle) and **one shared branch** (plain multi-task
#   learning), trained like TAG's grouping.
#
# We report the DMTG restart with the lowest training loss (the cheap model selection
# a practitioner would do) and the median restart (what one run typically gives).

# %%
(train, test), truth = make_splits(GROUPS, PER_GROUP, (cfg.n_train, cfg.n_test),
                                   run.rng("data"), rho, minor)
n_tasks = len(truth)
budget = cfg.epochs + cfg.finetune  # epochs of every final network

dmtg_runs = []
for r in icmlbook.progress(range(restarts), desc="DMTG restarts"):
    d = dmtg(*train, K_MAIN, tau=tau, lr=lr, epochs=cfg.epochs, finetune=cfg.finetune,
             gen=run.generator(f"DMTG restart {r}"), test=test)
    dmtg_runs.append(dict(d, wrong=misassigned(d["grouping"], truth)))
best = min(dmtg_runs, key=lambda d: d["train_mse"])
dmtg_median = float(np.median([d["test_mse"] for d in dmtg_runs]))


def fixed_grouping_mse(grouping):
    """Test MSE of a grouping chosen in advance, trained for the full budget."""
    g = canonical(grouping)  # every grouping starts from the same stream
    model, _, _ = train_grouped(*train, max(g) + 1, g, lr=lr, epochs=budget,
                                gen=run.generator("fixed grouping"))
    return pruned_mse(model, g, *test)


Z_tag = lookahead_affinity(*train, lr=lr, epochs=cfg.epochs, gen=run.generator("TAG"))
g_tag = group_by_affinity(Z_tag, K_MAIN)
mse = {"TAG lookahead affinity": fixed_grouping_mse(g_tag)}
A_corr = corr_affinity(train[1])
groupings = {"TAG lookahead affinity": g_tag,
             "|corr| clustering": group_by_affinity(A_corr, K_MAIN),
             "planted grouping": truth, "one shared branch": np.zeros(n_tasks, int)}
for name in ("|corr| clustering", "planted grouping", "one shared branch"):
    mse[name] = fixed_grouping_mse(groupings[name])

# the ablation draws the same initialisation and noise as DMTG's first restart
frozen_gen = run.generator("DMTG restart 0")
frozen, g_frozen, _ = train_grouped(*train, K_MAIN, tau=tau, lr=lr, epochs=cfg.epochs,
                                    gen=frozen_gen, learn_theta=False)
groupings["assignment not learned"] = g_frozen
frozen_pruned_mse = pruned_mse(frozen, g_frozen, *test)
train_grouped(*train, K_MAIN, g_frozen, model=frozen, lr=lr, epochs=cfg.finetune,
              gen=frozen_gen)
mse["assignment not learned"] = pruned_mse(frozen, g_frozen, *test)
dmtg_pruned_mse = float(np.median([d["pruned_test_mse"] for d in dmtg_runs]))

for r, d in enumerate(dmtg_runs):
    print(f"DMTG restart {r}: grouping {canonical(d['grouping'])}, misassigned "
          f"{d['wrong']}, train MSE {d['train_mse']:.3f}, "
          f"test MSE {d['test_mse']:.3f}")
for name, g in groupings.items():
    print(f"{name:<24} grouping {canonical(g)}, misassigned {misassigned(g, truth)}")

# %% [markdown]
# The affinities the two baselines see, next to those of the same-function family
# (the same directions $u_g$, every $\phi_i = \tanh$). With one function per group the
# target correlation shows the three groups as bright blocks on the diagonal; with an
# odd and an even task per group the blocks vanish and what remains links tasks of
# *different* groups. The lookahead affinity of Eq. 7 is measured on the main family:
# its positive entries pair the two tasks of each group.

# %% tags=["hide-input"]
((_, easy_Y),), easy_truth = make_splits(GROUPS, PER_GROUP, (cfg.n_train,),
                                         run.rng("same-function data"), rho, minor,
                                         mixed=False)
A_easy = corr_affinity(easy_Y)
g_easy = group_by_affinity(A_easy, K_MAIN)
labels = [f"{i}: g{t} {'even' if i % 2 else 'odd'}" for i, t in enumerate(truth)]
fig, axes = plt.subplots(1, 3, figsize=(10, 3.1))
for ax, A, title in [(axes[0], A_easy, "|corr|, one function per group"),
                     (axes[1], A_corr, "|corr|, odd + even per group")]:
    im = ax.imshow(A, vmin=0, vmax=1, cmap="viridis")
    ax.set(title=title, xticks=range(n_tasks), yticks=range(n_tasks), xlabel="task j")
fig.colorbar(im, ax=axes[:2], label="|corr(y_i, y_j)|", shrink=0.9)
axes[0].set_yticklabels([f"{i}: g{t}" for i, t in enumerate(easy_truth)])
axes[1].set_yticklabels(labels)
Z_show = np.where(np.eye(n_tasks, dtype=bool), np.nan, Z_tag)
vmax = np.nanmax(np.abs(Z_show))
im = axes[2].imshow(Z_show, vmin=-vmax, vmax=vmax, cmap="RdBu_r")
axes[2].set(title="lookahead affinity (Eq. 7)", xticks=range(n_tasks),
            yticks=range(n_tasks), xlabel="task j (helped)", ylabel="task i (stepped)")
fig.colorbar(im, ax=axes[2], label=r"$Z_{i \to j}$", shrink=0.9)
plt.show()
print(f"same-function family: |corr| clustering finds {canonical(g_easy)}, "
      f"misassigned {misassigned(g_easy, easy_truth)}")

# %% [markdown]
# How DMTG's assignment commits: the probability $\mathrm{softmax}(\Theta_{i\cdot})$ of
# each task's final branch, epoch by epoch, for every restart (one thin line per task
# and restart), and the final $\mathrm{softmax}(\Theta)$ of the best restart. From one
# third, the two tasks of each group drift together to one branch, although their
# targets are uncorrelated: what they share is the feature the branch learns.

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(8, 2.9), gridspec_kw=dict(width_ratios=[2, 1]))
epochs_axis = np.arange(1, cfg.epochs + 1)
for d in dmtg_runs:
    for i in range(n_tasks):
        axes[0].plot(epochs_axis, d["history"][:, i, d["grouping"][i]], lw=0.8,
                     alpha=0.6, color=STYLE["DMTG"]["color"])
axes[0].axhline(1 / K_MAIN, color="0.5", ls=":", lw=0.8)
axes[0].set(xlabel="epoch (grouping stage)", ylim=(0, 1.02),
            ylabel="P(task -> its final branch)",
            title=f"DMTG commitment, {restarts} restarts x {n_tasks} tasks")
im = axes[1].imshow(best["history"][-1], vmin=0, vmax=1, cmap="viridis", aspect="auto")
axes[1].set(xticks=range(K_MAIN), yticks=range(n_tasks), xlabel="branch k",
            yticklabels=labels, title=r"softmax($\Theta$), best restart")
fig.colorbar(im, ax=axes[1], label="probability")
plt.show()

# %% [markdown]
# ### What each run costs
#
# The wall-clock time of a whole run depends on whatever else the machine is doing
# while it runs. We therefore time one epoch of each kind of training in CPU seconds
# of this process (one torch thread), the kinds taking turns three times, and scale
# the medians by the epochs each method trains: one DMTG run is `budget` epochs of
# the $K$-branch network; TAG is `epochs` epochs of the shared network with $N$
# lookahead steps per training step, then `budget` epochs of its grouping. An
# exhaustive search trains every grouping of Eq. 6 for `budget` epochs; we bound its
# cost from below by pricing every grouping at the epoch of the cheapest network, one
# shared branch with $N$ heads.

# %%
# median CPU seconds of one epoch of each, the kinds taking turns three times
shared = np.zeros(n_tasks, int)
epoch_seconds = icmlbook.seconds_in_turns({
    "DMTG": lambda: train_grouped(*train, K_MAIN, tau=tau, lr=lr, epochs=1,
                                  gen=run.generator("timing")),
    "lookahead": lambda: lookahead_affinity(*train, lr=lr, epochs=1,
                                            gen=run.generator("timing")),
    "fixed grouping": lambda: train_grouped(*train, K_MAIN, truth, lr=lr, epochs=1,
                                            gen=run.generator("timing")),
    "one branch": lambda: train_grouped(*train, 1, shared, lr=lr, epochs=1,
                                        gen=run.generator("timing"))})
dmtg_seconds = budget * epoch_seconds["DMTG"]
tag_seconds = (cfg.epochs * epoch_seconds["lookahead"]
               + budget * epoch_seconds["fixed grouping"])
n_groupings = len(all_groupings(n_tasks, K_MAIN))  # Eq. 6
search_seconds = n_groupings * budget * epoch_seconds["one branch"]  # a lower bound
print("CPU seconds per epoch: " + ", ".join(f"{k} {v:.3f}"
                                            for k, v in epoch_seconds.items()))
print(f"exhaustive search over {n_groupings} groupings: at least "
      f"{search_seconds:.0f} CPU s, {search_seconds / dmtg_seconds:.0f} DMTG runs")

# %% [markdown]
# ### The table

# %%
planted = mse["planted grouping"]
rows = [("DMTG", "DMTG, best restart by training loss", best["test_mse"],
         best["wrong"], dmtg_seconds),
        ("DMTG", "DMTG, median restart", dmtg_median, np.nan, dmtg_seconds)]
rows += [(name, name, mse[name], misassigned(groupings[name], truth),
          tag_seconds if name.startswith("TAG") else np.nan) for name in mse]
print(f"{'method':<36} {'test MSE':>9} {'x planted':>10} {'misassigned':>12} "
      f"{'CPU s':>8}")
for _, name, m, wrong, sec in rows:
    w = "" if np.isnan(wrong) else f"{wrong:.0f}"
    s = "" if np.isnan(sec) else f"{sec:.1f}"
    print(f"{name:<36} {m:>9.4f} {m / planted:>10.2f} {w:>12} {s:>8}")
print(f"\npruned networks before fine-tuning: DMTG (median restart) "
      f"{dmtg_pruned_mse:.4f}, assignment not learned {frozen_pruned_mse:.4f}")
recovered = sum(d["wrong"] == 0 for d in dmtg_runs)
print(f"DMTG recovered the planted grouping in {recovered} of {restarts} restarts; "
      f"one run costs {dmtg_seconds:.1f} CPU s, TAG's affinity and training "
      f"{tag_seconds:.1f} CPU s")

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(7, 2.8))
for y, (style, name, m, _, _) in enumerate(rows):
    ax.barh(y, m, color=STYLE[style]["color"], alpha=0.55 if "median" in name else 1)
ax.set_yticks(range(len(rows)), [r[1] for r in rows])
ax.invert_yaxis()
ax.set(xlabel="test MSE (mean over tasks)", title="the pruned networks on test data")
icmlbook.log_axis(ax, "x")
plt.show()

# %% [markdown]
# The planted grouping, TAG's grouping and DMTG's best restart are the same grouping
# here, so their errors differ only by training noise; target correlation picks a
# grouping that mixes groups and pays for it several times over. The ablation is the
# instructive one: with $\Theta$ frozen the branches never specialise, so the pruned
# network is about as bad as one shared branch, even when the best heads happen to
# name the right grouping; a short fine-tuning then repairs part of the damage.

# %% [markdown]
# ## Claims
#
# Paper claims first, each against the paper's key ingredient removed or against the
# strongest fair baseline, each with its strength (does it say that DMTG is better,
# or only that it is no worse) and where its threshold came from; then findings,
# what the paper states and we measure without claiming it; then checks, which must
# hold if the code is right but are no evidence for the paper. The thresholds were
# fixed before the final runs, calibrated on seeds 0-9 at the default tier and
# confirmed on seeds 10-19; each line says where its number comes from. The smoke
# tier records them without enforcing them. One claim changed after a failure: the
# cost claim first compared the wall-clock seconds of whole runs, which fell just
# under its bar on a busy machine; it now compares CPU seconds per epoch measured
# in turns (above), with the same bar. The planted-lead claim replaces a count of
# misassigned tasks, which sat exactly at its bar of zero whenever it held.

# %% tags=["thresholds"]
# the paper's verdict follows icmlbook.verdicts' rule, fixed before the final sweep
C_VS_FROZEN = 0.5  # DMTG / ablation, pruned test MSE; 0.21-0.31 on seeds 0-9
C_LEAD = 0.2  # planted lead of the best restart; 0.35-0.96 on seeds 0-9
C_VS_TAG = 1.15  # DMTG / TAG grouping, test MSE; no worse up to 15 %; 0.99-1.05, 0-9
C_VS_CORR = 0.6  # DMTG / |corr| grouping, test MSE; 0.25-0.37 on seeds 0-9
C_COST = 1.5  # TAG / one DMTG run, CPU s; kept when the statistic changed; 2.9-3.2
C_WITHIN = 0.5  # max within / max cross-group |corr|; population 0; 0.10-0.38, 0-9
C_EASY = 0  # misassigned by |corr| clustering, same-function family; 0 by design
C_GROUPING_MATTERS = 0.4  # planted grouping / one shared branch; 0.17-0.23, 0-9
C_SEARCH = 20  # exhaustive search (lower bound) / one DMTG run, CPU s; 80-91, 0-9
C_ROWS = 1e-6  # |row sum of G - 1| (rounding only)
C_ONE_HOT = 1e-6  # relative gap of Eq. 4 with one-hot G to the fixed grouping's loss

# %%
vs_tag = dmtg_median / mse["TAG lookahead affinity"]
lead = planted_lead(best["history"][-1], truth)
run.claim("DMTG / assignment not learned, pruned MSE",
          dmtg_pruned_mse / frozen_pruned_mse, "<=", C_VS_FROZEN,
          "Learning the assignment trains each branch for its group: the pruned "
          "network has a fraction of the error of the same network with Theta frozen",
          versus="ablation", against="Theta frozen at uniform, best head per task",
          strength="superiority", provenance="calibrated")
run.claim("planted lead, best restart", lead, ">=", C_LEAD,
          "The restart with the lowest training loss puts every task on its planted "
          "group's branch, by a clear margin in softmax(Theta)",
          versus="baseline", against="the planted grouping (oracle)",
          strength="superiority", provenance="calibrated")
run.claim("DMTG / TAG lookahead grouping, test MSE", vs_tag, "<=", C_VS_TAG,
          "One DMTG run is as good as grouping by lookahead affinity and retraining "
          "(the paper: better)", versus="baseline",
          against="TAG lookahead affinity, Eq. 8, retrained",
          strength="non-inferiority", provenance="calibrated", strict=1.0)
run.claim("DMTG / |corr| clustering, test MSE", dmtg_median / mse["|corr| clustering"],
          "<=", C_VS_CORR,
          "Where the targets of a group are uncorrelated, DMTG beats grouping by "
          "target correlation", versus="baseline",
          against="|corr| of targets, Eq. 8, retrained (a stand-in for the paper's "
          "heuristic groupings)", strength="against a stand-in",
          provenance="calibrated", strict=1.0)
run.claim("TAG CPU seconds / one DMTG run", tag_seconds / dmtg_seconds, ">=", C_COST,
          "One DMTG run costs less than TAG's affinity pass plus the training of its "
          "grouping", versus="baseline", against="TAG: N lookahead steps per step, "
          "then its grouping trained", strength="superiority",
          provenance="changed after failure")
run.finding("DMTG / TAG lookahead grouping, strict", vs_tag, "<", 1.0,
            paper="DMTG's one-shot grouping has lower error than the sequential "
            "grouping methods, TAG among them",
            shows="whether DMTG's median restart beats TAG's retrained grouping; both "
            "usually find the planted grouping, so this is a tie up to training noise")
run.finding("share of restarts finding the planted grouping", recovered / restarts,
            ">=", 1.0, paper="one training run identifies the groups (one shot)",
            shows="how often a single DMTG run, not the best of several, recovers the "
            "planted grouping")

within = np.where(truth[:, None] == truth[None], A_corr, 0) - np.eye(n_tasks)
across = np.where(truth[:, None] != truth[None], A_corr, 0)
check_gen = run.generator("checks")
G_rows = gumbel_softmax(torch.randn(n_tasks, K_MAIN, generator=check_gen) * 3, tau,
                        check_gen)
with torch.no_grad():
    L_check = branch_losses(best["model"](torch.as_tensor(test[0])),
                            torch.as_tensor(test[1]))
one_hot = nn.functional.one_hot(torch.as_tensor(best["grouping"]), K_MAIN).float()
G_hot = gumbel_softmax(1e4 * one_hot, tau, check_gen)
eq4 = dmtg_loss(L_check, G_hot).item()
fixed_loss = n_tasks * pruned_mse(best["model"], best["grouping"], *test)
run.check("within / cross-group |corr|, main family", within.max() / across.max(), "<=",
          C_WITHIN, "premise: the two tasks of a group are (nearly) uncorrelated")
run.check("|corr| misassigned, same-function family", misassigned(g_easy, easy_truth),
          "<=", C_EASY,
          "premise: with one function per group, correlation finds the groups")
run.check("planted grouping / one shared branch, test MSE",
          planted / mse["one shared branch"], "<=", C_GROUPING_MATTERS,
          "premise: with a width-1 bottleneck the grouping matters")
run.check("exhaustive search CPU seconds / one DMTG run", search_seconds / dmtg_seconds,
          ">=", C_SEARCH, "Eq. 6: a search trains every grouping, DMTG one network")
run.check("rows of G sum to one", float((G_rows.sum(1) - 1).abs().max()), "<=", C_ROWS,
          "Eq. 3 is a distribution over branches for every task")
run.check("Eq. 4 with one-hot G = fixed-grouping loss",
          abs(eq4 - fixed_loss) / fixed_loss, "<=", C_ONE_HOT,
          "a committed assignment trains exactly its grouping")
run.headline("one-shot grouping", "we propose to simultaneously identify the best task "
             "groups from 2^N candidates and train the model weights simultaneously in "
             "one-shot", source="Abstract",
             claims=["DMTG / assignment not learned, pruned MSE",
                     "planted lead, best restart"],
             findings=["share of restarts finding the planted grouping"])
run.headline("better than sequential grouping", "our method ... mitigates the "
             "objective bias introduced by the sequential procedures that potentially "
             "lead to a suboptimal solution",
             source="Abstract; CelebA and Taskonomy tables",
             claims=["DMTG / TAG lookahead grouping, test MSE",
                     "DMTG / |corr| clustering, test MSE"],
             findings=["DMTG / TAG lookahead grouping, strict"])
run.headline("training efficiency", "our method not only improves the training "
             "efficiency", source="Abstract", claims=["TAG CPU seconds / one DMTG run"])
run.metric("test_mse", {name: m for _, name, m, _, _ in rows})
run.metric("dmtg_seconds", dmtg_seconds)
run.metric("tag_seconds", tag_seconds)
run.metric("search_seconds", search_seconds)
run.metric("restarts_recovering", recovered)
run.metric("misassigned", {k: misassigned(g, truth) for k, g in groupings.items()})
run.metric("frozen_finetuned_over_planted", mse["assignment not learned"] / planted)

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed. The table and strip plot below read this chapter's results
# file, made by `icmlbook sweep 15 --seeds 0-19 --update-results`: every claim, check
# and finding over seeds 0-9 (on which the thresholds were calibrated) and seeds
# 10-19 (run once, after the thresholds were frozen, to confirm them) at the default
# tier, with the number of seeds on which each holds and its worst margin (how far
# inside the threshold the worst seed stayed).

# %%
across = icmlbook.across_seeds(run)

# %% [markdown]
# ## What a broken DMTG does
#
# A claim is worth something only if a wrong implementation fails it. The most natural
# bug is to forget the weights $G$ in Eq. 4 and sum every head's loss: all branches and
# heads train, but $\Theta$ gets no gradient, stays at zero, and the argmax sends every
# task to branch 0, which was trained to serve all six tasks at once: a one-shared-
# branch model in disguise, which fails every paper claim above on error and on
# the grouping (it is no slower, so the cost claim is tested by another variant:
# a DMTG that takes sixteen times the optimiser steps). The tests run these
# variants and one more (Eq. 3's softmax taken over tasks instead of branches) and
# check that each fails the claims it should.

# %%
def unweighted_loss(L, G):
    """A deliberately broken Eq. 4: every head's loss, ignoring the assignment G."""
    return L.sum()


broken = dmtg(*train, K_MAIN, tau=tau, lr=lr, epochs=cfg.epochs, finetune=cfg.finetune,
              gen=run.generator("DMTG restart 0"), test=test, loss_fn=unweighted_loss)
print(f"unweighted loss: grouping {canonical(broken['grouping'])}, misassigned "
      f"{misassigned(broken['grouping'], truth)}, test MSE / TAG's "
      f"{broken['test_mse'] / mse['TAG lookahead affinity']:.2f} "
      f"(claim: <= {C_VS_TAG})")


# %% [markdown]
# ## Explore
#
# Choose the planted structure, the number of branches $K$, the width $r$ of each
# branch's bottleneck, the temperature $\tau$, the seed of the data and the number of
# restarts. The left panel follows every task's probability of its final branch,
# epoch by epoch (best restart); the middle one is the final
# $\mathrm{softmax}(\Theta)$; the right one compares test errors with the planted
# grouping, $|\mathrm{corr}|$ clustering and one shared branch. Things to try: the
# bottleneck at $r = 2$ or 3, where one branch can carry two or three group features
# and the grouping matters less (watch one shared branch); $K$ smaller than the
# number of groups (some branch must mix); $K$ larger (a group is split, or a branch
# goes unused); the same-function structures, where $|\mathrm{corr}|$ clustering is as
# good as DMTG; and a very small or very large $\tau$. The widget trains on a smaller
# data set (in mini-batches of 64) than the experiment, so that a move answers in
# about a second.

# %% tags=["hide-input"]
import ipywidgets as W

STRUCTURES = {"3 groups: odd + even": (3, 2, True),
              "3 groups: one function": (3, 2, False),
              "2 groups of 3: odd, even, odd": (2, 3, True),
              "4 groups: odd + even": (4, 2, True)}
_widget_cache = {}


def widget_reference(structure, data_seed, r, K):
    """Data and the planted / |corr| / one-branch errors, computed once per setting."""
    key = (structure, data_seed, r, K)
    if key not in _widget_cache:
        n_groups, per_group, mixed = STRUCTURES[structure]
        (tr, te), tr_truth = make_splits(n_groups, per_group, (cfg.widget_n, 500),
                                         run.rng(f"widget data {data_seed}"), rho,
                                         minor, mixed)
        kw = dict(lr=lr, epochs=cfg.widget_epochs + cfg.finetune, r=r, batch=64)
        g_corr = group_by_affinity(corr_affinity(tr[1]), K)
        ref = {}
        for name, g in [("planted grouping", tr_truth), ("|corr| clustering", g_corr),
                        ("one shared branch", np.zeros(len(tr_truth), int))]:
            m, _, _ = train_grouped(*tr, max(g) + 1, canonical(g), **kw,
                                    gen=run.generator("widget fixed grouping"))
            ref[name] = pruned_mse(m, canonical(g), *te)
        _widget_cache[key] = (tr, te, tr_truth, ref)
    return _widget_cache[key]


def update(structure, K, r, tau, data_seed, restarts):
    tr, te, tr_truth, ref = widget_reference(structure, data_seed, r, K)
    runs_ = [dmtg(*tr, K, tau=tau, lr=lr, r=r, batch=64, epochs=cfg.widget_epochs,
                  finetune=cfg.finetune, gen=run.generator(f"widget restart {s}"),
                  test=te) for s in range(restarts)]
    best_ = min(runs_, key=lambda d: d["train_mse"])
    g_, hist_ = best_["grouping"], best_["history"]
    n = len(tr_truth)
    fig, axes = plt.subplots(1, 3, figsize=(10, 3),
                             gridspec_kw=dict(width_ratios=[1.5, 1, 1.2]))
    ep = np.arange(1, len(hist_) + 1)
    for i in range(n):
        axes[0].plot(ep, hist_[:, i, g_[i]], lw=1.2, color=STYLE["DMTG"]["color"],
                     alpha=0.7)
    axes[0].axhline(1 / K, color="0.5", ls=":", lw=0.8)
    axes[0].set(xlabel="epoch", ylabel="P(task -> its final branch)", ylim=(0, 1.02),
                title="commitment, best restart")
    im = axes[1].imshow(hist_[-1], vmin=0, vmax=1, cmap="viridis", aspect="auto")
    fig.colorbar(im, ax=axes[1], label="probability")
    axes[1].set(xticks=range(K), yticks=range(n), xlabel="branch",
                yticklabels=[f"{i}: g{t}" for i, t in enumerate(tr_truth)])
    note = " (K < groups)" if K < len(set(tr_truth)) else ""
    axes[1].set_title(f"softmax(Θ); {misassigned(g_, tr_truth)} misassigned{note}",
                      fontsize=8)
    mses = {"DMTG": best_["test_mse"], **ref}
    bars = axes[2].bar(range(len(mses)), list(mses.values()),
                       color=[STYLE[k]["color"] for k in mses])
    axes[2].bar_label(bars, fmt="%.3f", fontsize=7)
    axes[2].set_xticks(range(len(mses)), [k.replace(" ", "\n", 1) for k in mses],
                       fontsize=7)
    axes[2].set(ylabel="test MSE", ylim=(0, 1.2 * max(mses.values())),
                title=f"best of {restarts} restart(s), r = {r}")
    plt.show()


controls = dict(
    structure=W.Dropdown(options=list(STRUCTURES), value="3 groups: odd + even",
                         description="groups"),
    K=W.IntSlider(value=K_MAIN, min=1, max=4, description="K"),
    r=W.IntSlider(value=BOTTLENECK, min=1, max=3, description="bottleneck r"),
    tau=W.FloatLogSlider(value=tau, base=10, min=-1, max=1, step=0.1,
                         description="tau"),
    data_seed=W.IntSlider(value=seed, min=0, max=9, description="data seed"),
    restarts=W.IntSlider(value=1, min=1, max=3, description="restarts"),
)
icmlbook.explore(update, controls, run=run)

# %% [markdown]
# ## Paper vs. this book
#
# | | paper | this book |
# |---|---|---|
# | method | $K$ branches, $KN$ heads, Gumbel-softmax assignment, one optimiser, pruning to $N$ heads, fine-tuning | the same, from scratch (Eqs. 2-5), fine-tuned for `finetune` epochs |
# | data | CelebA (9 attributes), Taskonomy (5 dense tasks) | six synthetic regression tasks in three planted groups of an odd and an even task (Eq. 1) |
# | networks | ResNet / Xception / ViT branches, linear heads (CelebA) or decoders (Taskonomy) | 32-unit tanh MLP branches with a width-1 bottleneck, 8-unit MLP heads, no shared stem |
# | temperature | constant, 2.5 (CelebA) or 4 (Taskonomy) | constant 2.5 |
# | baselines | grouping methods from the literature, among them TAG | TAG-style lookahead affinity and $\lvert\mathrm{corr}\rvert$ clustering (Eqs. 7-8), each grouping retrained; the assignment frozen (ablation); the planted grouping |
# | evidence | better errors than grouping baselines at lower cost | ablation: pruned error at most `C_VS_FROZEN` times the frozen assignment's; the best restart's planted lead at least `C_LEAD`; no worse than TAG (at most `C_VS_TAG` times its error); at most `C_VS_CORR` times the $\lvert\mathrm{corr}\rvert$ grouping's error; TAG at least `C_COST` times the CPU time of one DMTG run |
#
# **Paper coverage.** What each of the paper's main results is tested by here.
#
# | paper | this book |
# |---|---|
# | one-shot grouping and training (abstract, method) | tested: claims "DMTG / assignment not learned" and "planted lead", finding "share of restarts finding the planted grouping" |
# | CelebA-9 comparisons with naive multi-task learning, single-task learning and grouping methods, TAG among them, for several $K$ | tested in kind, on synthetic tasks: claims "DMTG / TAG" (no worse) and "DMTG / $\lvert\mathrm{corr}\rvert$" (a stand-in heuristic), finding "DMTG / TAG, strict"; naive multi-task learning appears as the premise check "planted grouping / one shared branch" |
# | Taskonomy-5 comparisons | out of scope: dense vision tasks on Xception branches are beyond a CPU budget; the synthetic family stands in |
# | training efficiency, encoders $O(K)$ | tested: claim "TAG CPU seconds / one DMTG run", check "exhaustive search CPU seconds / one DMTG run" |
# | ablations: a transformer backbone, how many encoder layers are shared | out of scope: our branches share no stem and are two-layer MLPs |
#
# **What is reconstructed.** The planted task families, the width-1 bottleneck that
# makes tasks of different groups compete, the MLP heads, the fine-tuning schedule and
# every threshold are ours, calibrated on our implementation (seeds 0-9, confirmed on
# seeds 10-19). The paper's tables are not reproduced, so we compare with its claims,
# not its numbers. TAG is implemented from its published description (Eq. 7 with a
# plain gradient step of the learning rate, the grouping by Eq. 8 over all groupings
# into $K$ groups), not from its code.
#
# **What does not reproduce, and what holds only in a weaker form.** The paper
# presents DMTG as better than the sequential grouping methods, TAG among them. Here
# the lookahead affinity finds the planted grouping as reliably as DMTG does, so
# after retraining the two errors tie up to training noise: we claim only that DMTG
# is no worse, and the finding "DMTG / TAG lookahead grouping, strict" records on
# how few seeds it is strictly better (the across-seeds table counts them). What
# shows at our scale is cost: one DMTG run against TAG's affinity pass, with $N$
# lookahead steps per training step, plus a second training; that claim's statistic
# was changed after a failure (from wall-clock seconds of whole runs to CPU seconds
# per epoch), which the verdict counts. "One shot" holds for the best of `restarts`
# runs picked by training loss; a single run does not always find the planted
# grouping (the finding "share of restarts finding the planted grouping"). Target
# correlation, the other baseline, is a stand-in for the heuristics the paper argues
# against, misled here on purpose: on the same-function family it finds the groups
# for free (the check above), so DMTG's win over it is a statement about tasks
# whose relation is nonlinear. Nor is the Gumbel noise what makes DMTG work here,
# with independently initialised branches (exercise 1 measures it).

# %% [markdown]
# ## Exercises
#
# Each exercise is followed by a worked solution, folded; try it first. The solutions
# run on smaller problems than the experiment (the sizes are in their code) and
# change none of the chapter's results.

# %% [markdown] tags=["exercise"]
# **1. Noise or not.** Replace Eq. 3's sample by the deterministic
# $\mathrm{softmax}(\Theta / \tau)$ and run DMTG again, each restart with its own
# stream as above. Does it still find the planted grouping, and is its error close
# to the Gumbel version's? Then show that without the noise, $K$ branches that start
# identical (as the authors' code initialises them) stay identical forever, whatever
# the data, and check it numerically.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 1
# **Why the noise can matter.** Suppose the $K$ branches and their heads start with
# identical weights and $\Theta$ with identical columns (zeros). Then $L_{ik} = L_i$
# for every $k$, and the deterministic assignment is $G_{ik} = 1/K$. The gradient of
# Eq. 4 with respect to branch $k$'s weights $w_k$ is
#
# $$\frac{\partial \mathcal L}{\partial w_k} = \sum_i G_{ik}\,
#   \frac{\partial L_{ik}}{\partial w_k} = \frac1K \sum_i \frac{\partial L_i}{\partial w},$$
#
# the same for every $k$, so Adam (whose state also starts equal) moves every branch
# alike. The gradient with respect to the logits is
#
# $$\frac{\partial \mathcal L}{\partial \Theta_{ik}} = \frac{G_{ik}}{\tau}
#   \Big(L_{ik} - \sum_{k'} G_{ik'} L_{ik'}\Big),$$
#
# equal across $k$ for each task (it is zero up to rounding), so the columns of
# $\Theta$ stay identical and $G$ stays uniform. By induction the branches never
# separate: without noise, a symmetric start is a fixed point. The Gumbel noise makes
# $G_{ik}$ differ across $k$ at every step, the branches receive differently weighted
# gradients, and they split.
#
# **What the experiment shows.** Our branches are initialised independently, so the
# initialisation already breaks the symmetry and the noise is not needed for that:
# the deterministic version finds the planted grouping in most restarts (a restart
# can still fail, as the printed counts show), and the restart one would keep, the one
# with the lowest training loss as for DMTG above, finds it with an error close to the
# Gumbel version's (first cell). We first compared the medians over restarts, which
# failed on seeds where two of the three restarts without noise missed (the median is
# then a missed restart's error); the kept restart is how the chapter compares DMTG
# runs, and it holds on every seed we swept. Started from identical branches (second cell), the
# deterministic version keeps them identical to the last bit, while the noisy one
# pulls them apart. The noise matters for the authors' initialisation, not for ours.
# :::

# %% tags=["solution", "hide-cell"]
def softmax_assignment(theta, tau, generator=None):
    """Eq. 3 without the Gumbel noise: softmax(theta / tau), the same at every step."""
    return torch.softmax(theta / tau, dim=-1)


no_noise = [dmtg(*train, K_MAIN, tau=tau, lr=lr, epochs=cfg.epochs,
                 finetune=cfg.finetune, gen=run.generator(f"DMTG restart {r}"),
                 test=test, assign=softmax_assignment) for r in range(restarts)]
no_noise_median = float(np.median([d["test_mse"] for d in no_noise]))
kept = min(no_noise, key=lambda d: d["train_mse"])  # selected as DMTG's run is above
print("misassigned without noise:",
      [misassigned(d["grouping"], truth) for d in no_noise],
      "with noise:", [d["wrong"] for d in dmtg_runs])
print(f"restart kept (lowest training loss): misassigned without noise "
      f"{misassigned(kept['grouping'], truth)}, with {best['wrong']}; test MSE without "
      f"noise {kept['test_mse']:.4f}, with {best['test_mse']:.4f}")
print(f"median test MSE over restarts without noise {no_noise_median:.4f}, "
      f"with {dmtg_median:.4f}")
S_NO_NOISE = 1.5  # "close": at most half as much error again as the Gumbel version
icmlbook.solution_check("kept restart's test MSE, no noise / Gumbel",
                        kept["test_mse"] / best["test_mse"], "<=", S_NO_NOISE)


# %% tags=["solution", "hide-cell"]
def branch_spread(assign, n=256, epochs=2):
    """Largest weight difference between any branch and branch 0 after training K
    branches (and their heads) that start identical, with the given assignment."""
    gen = run.generator("identical branches")
    model = GroupedBranches(D_IN, K_MAIN, n_tasks, gen)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p[:1].clone().expand_as(p))
    train_grouped(train[0][:n], train[1][:n], K_MAIN, model=model, tau=tau, lr=lr,
                  epochs=epochs, gen=gen, assign=assign)
    return max(float((p - p[:1]).abs().max()) for p in model.parameters())


spread_noise = branch_spread(gumbel_softmax)
spread_plain = branch_spread(softmax_assignment)
print(f"largest difference between branches: with noise {spread_noise:.2e}, "
      f"without {spread_plain:.2e}")
S_IDENTICAL = 1e-6  # the derivation says exactly 0; this leaves room for rounding
icmlbook.solution_check("noisy branches separate", spread_noise, ">", S_IDENTICAL)
icmlbook.solution_check("noiseless branches stay identical", spread_plain, "<=",
                        S_IDENTICAL)

# %% [markdown] tags=["exercise"]
# **2. A local exhaustive search.** An exhaustive search would train all 122
# groupings of Eq. 6 for $N = 6$, $K = 3$. Train just the planted grouping and its
# twelve neighbours, the groupings one moved task away from it, and rank them by
# test error. Is the planted grouping first? Using the CPU times per epoch measured
# above, how many DMTG runs would the whole search cost?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 2
# **Reasoning.** A neighbour moves one task $i$ onto a branch that serves another
# group. With a width-1 bottleneck that branch carries the other group's feature
# $s_{g'}$, and task $i$ must be read from it. Since the group directions have cosine
# $\rho$, $s_{g'}$ still holds part of $s_{g(i)}$, so the moved task is not lost, but
# its error rises, and the group it left or joined may lose some accuracy too. Every
# neighbour should therefore be worse than the planted grouping: the planted
# grouping is a strict local optimum of the search.
#
# **What it shows.** The planted grouping ranks first among the thirteen, with a
# clear gap to the runner-up (the code prints both). The whole search would train
# 122 groupings; priced at the cheapest network's epoch, the cost check of the
# claims already bounds it from below, in DMTG runs (printed again here). The
# search was run on a fresh data set of the same family, with fewer training points
# than the experiment (the sizes are in the code).
# :::

# %% tags=["solution", "hide-cell"]
local = run.pick(smoke=dict(n=600, epochs=12), default=dict(n=1000, epochs=budget))
(ex_train, ex_test), ex_truth = make_splits(GROUPS, PER_GROUP, (local.n, 1000),
                                            run.rng("exercise data"), rho, minor)
planted_g = canonical(ex_truth)
neighbours = sorted({canonical([h if j == i else g for j, g in enumerate(ex_truth)])
                     for i in range(n_tasks) for h in range(GROUPS)
                     if h != ex_truth[i]})
local_mse = {}
for g in [planted_g] + neighbours:
    model, _, _ = train_grouped(*ex_train, max(g) + 1, g, lr=lr, epochs=local.epochs,
                                gen=run.generator("fixed grouping"))
    local_mse[g] = pruned_mse(model, g, *ex_test)
ranked = sorted(local_mse, key=local_mse.get)
runner_up = local_mse[ranked[1]] if ranked[0] == planted_g else local_mse[ranked[0]]
print(f"{len(neighbours)} neighbours; the planted grouping ranks "
      f"{ranked.index(planted_g) + 1} of {len(ranked)}: test MSE "
      f"{local_mse[planted_g]:.4f}, best other {runner_up:.4f}")
print(f"the whole search over {n_groupings} groupings: at least "
      f"{search_seconds / dmtg_seconds:.0f} DMTG runs of CPU time")
S_LOCAL = 1.0  # the planted grouping is first: every neighbour has a larger error
icmlbook.solution_check("best other grouping / planted grouping, test MSE",
                        runner_up / local_mse[planted_g], ">", S_LOCAL)

# %% [markdown] tags=["exercise"]
# **3. Counting groupings.** Derive Eq. 6 in closed form and check the formula
# against the enumeration `all_groupings`. How fast does an exhaustive search grow
# with $N$ at fixed $K$, and how fast does the DMTG network grow?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 3
# **Derivation.** A grouping of $N$ tasks into exactly $j$ non-empty, unlabelled
# groups is a surjection from the tasks onto $j$ labels, divided by the $j!$
# relabellings. By inclusion-exclusion over the labels left unused, the surjections
# number $\sum_{i=0}^{j} (-1)^i \binom{j}{i} (j - i)^N$, so
#
# $$S(N, j) = \frac{1}{j!} \sum_{i=0}^{j} (-1)^i \binom{j}{i} (j-i)^N, \qquad
#   \#\text{groupings}(N, K) = \sum_{j=1}^{K} S(N, j).$$
#
# The $i = 0$ term dominates: $S(N, K) \approx K^N / K!$, so at fixed $K$ an
# exhaustive search grows exponentially in $N$ (and with the Bell numbers when $K =
# N$). DMTG trains one network with $K$ branches and $KN$ heads: linear in $K$ and
# $N$, and one training whatever the count.
#
# **What it shows.** The formula agrees with the enumeration for every size checked
# (the code compares them), and the printed counts show the exponential growth.
# :::

# %% tags=["solution", "hide-cell"]
from math import comb, factorial


def n_groupings_formula(N, K):
    """Eq. 6 by inclusion-exclusion: sum over j <= K of the Stirling numbers S(N, j)."""
    return sum(sum((-1) ** i * comb(j, i) * (j - i) ** N for i in range(j + 1))
               // factorial(j) for j in range(1, K + 1))


largest = run.pick(smoke=dict(N=6), default=dict(N=8)).N  # enumeration: K^N labellings
sizes = [(N, K) for N in range(1, largest + 1) for K in range(1, 5)]
gap = max(abs(n_groupings_formula(N, K) - len(all_groupings(N, K))) for N, K in sizes)
print("groupings into at most 4 groups:",
      ", ".join(f"N={N}: {n_groupings_formula(N, 4):,}" for N in (6, 10, 20, 40)))
S_EXACT = 0  # counts are integers: the formula and the enumeration agree exactly
icmlbook.solution_check("largest |formula - enumeration|", gap, "<=", S_EXACT)

# %% [markdown]
# ## References
#
# - Y. Gao, S. Jiang, M. Li, J.-G. Yu, G.-S. Xia. DMTG: One-Shot Differentiable
#   Multi-Task Grouping. ICML 2024.
# - C. Fifty, E. Amid, Z. Zhao, T. Yu, R. Anil, C. Finn. Efficiently Identifying Task
#   Groupings for Multi-Task Learning. NeurIPS 2021.
# - T. Standley, A. Zamir, D. Chen, L. Guibas, J. Malik, S. Savarese. Which Tasks
#   Should Be Learned Together in Multi-task Learning? ICML 2020.
# - E. Jang, S. Gu, B. Poole. Categorical Reparameterization with Gumbel-Softmax.
#   ICLR 2017.
# - C. J. Maddison, A. Mnih, Y. W. Teh. The Concrete Distribution. ICLR 2017.

# %% tags=["remove-cell"]
run.finish();
