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
# # One neural solver for many vehicle-routing variants: MVMoE
#
# **Paper.** Jianan Zhou, Zhiguang Cao, Yaoxin Wu, Wen Song, Yining Ma, Jie Zhang, Chi Xu.
# *MVMoE: Multi-Task Vehicle Routing Solver with Mixture-of-Experts.* ICML 2024.
# [arXiv 2405.01029](https://arxiv.org/abs/2405.01029) ·
# [OpenReview](https://openreview.net/forum?id=lsQnneYa8p) ·
# [code](https://github.com/RoyalSkye/Routing-MVMoE).
#
# **The problem.** Vehicle-routing problems come in many variants: a capacitated fleet
# (CVRP), routes that need not return to the depot (open routes, O), customers who
# hand goods *back* to the vehicle (backhauls, B), a limit on each route's length (L),
# time windows (TW). Neural solvers are usually trained for one variant at a time.
#
# **The idea.** Treat every variant as a *composition of attributes*: one network reads
# the attributes as input features and context, the environment enforces each
# attribute's constraint with a feasibility mask, and a single POMO-style attention
# model is trained with REINFORCE on a few variants at once. To give that one network
# more capacity without more computation per node, replace its feed-forward layers by
# a *mixture of experts* (MoE) with sparse top-$k$ gating; a *hierarchical* gate can
# further route whole problems to a sparse or a dense branch.
#
# **The claims.** The paper states two headlines in its abstract: one network
# "can cope with a range of VRP variants simultaneously" and "significantly promotes
# zero-shot generalization performance on 10 unseen VRP variants"; and the mixture of
# experts "greatly enhances the model capacity without a proportional increase in
# computation", so that MVMoE has a lower gap than the dense multi-task model POMO-MTL
# on every unseen variant of its Table 1. A third, the hierarchical gate's "good
# trade-off between empirical performance and computational complexity", needs the
# full tier here. The paper's verdict at our scale is printed with the claims, by a
# rule fixed before the runs over the seeds.
#
# **What stands in for the paper, and what is ours.** Instances have 10 customers
# (the paper: 50 and 100), with attributes O, B and L only: time windows are left out,
# to keep the default run within two minutes on a laptop CPU. The network is the
# paper's design shrunk (embedding 64, 3 encoder layers, 4 heads), trained for a few
# hundred batches instead of 5000 epochs. The experts are the paper's: four per layer,
# each as wide as the dense layer it replaces, two active per node, so MVMoE spends
# twice the dense model's feed-forward compute per node (Eq. 6), as the authors' model
# does. The paper's reference solvers (HGS, LKH3, OR-Tools) are replaced by an *exact*
# dynamic program over customer subsets, which is affordable at 10 customers, and its
# constructive baseline by nearest neighbour from every start. Reconstructed by us
# rather than taken from the paper: the instance generator (depot in the central
# square, a duration limit of 2.2 that every single-customer route meets), the classic
# backhaul rule (on each route all deliveries before any pickup; the paper's code mixes
# them under a load bound) and the decoder's context vector.

# %% tags=["parameters"]
tier = "default"  # smoke | default | full: size of the experiment
seed = 0  # drives every random number in the chapter
experts = 4  # experts per MoE layer (the paper: 4)
top_k = 2  # experts each node is routed to (1, 2 or 4; the paper: 2)
aux_weight = 0.01  # weight of the load-balancing loss (Eq. 7)

# %% tags=["validate"]
from icmlbook import check_choice, check_int, check_range, check_seed, check_tier

check_tier(tier)
check_seed(seed)
check_int("experts", experts, 2, 8)
check_choice("top_k", top_k, [1, 2, 4])
check_int("top_k (at most experts)", top_k, 1, experts)
check_range("aux_weight", aux_weight, 0.0, 1.0)

# %% [markdown]
# ## Setup
#
# The tier sets the training budget (batches of instances, each batch one variant),
# the number of test instances and whether the hierarchical-gate model MVMoE-L is
# trained too (full tier only). The full tier (500 batches of 64 per model, four
# models, 200 test instances) takes several times the default's two minutes on a
# 2-core CPU; nothing in it needs a GPU. All models run on one CPU thread.

# %%
import functools
import math

import numpy as np
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import icmlbook
from icmlbook.nn import Adam

run = icmlbook.start("18_routing_moe", tier=tier, seed=seed,
                     params=dict(experts=experts, top_k=top_k, aux_weight=aux_weight))
icmlbook.use_style()
cfg = run.pick(
    smoke=dict(steps=3, batch=8, n_test=6, d=32, layers=2, light=False),
    default=dict(steps=250, batch=32, n_test=100, d=64, layers=3, light=False),
    full=dict(steps=500, batch=64, n_test=200, d=64, layers=3, light=True),
)
N_CUSTOMERS = 10
CAPACITY = 30  # demands are integers 1..9
N_BACKHAUL = 2  # the last two customers are pickups in the B variants (20 %)
LIMIT = 2.2  # route-length limit of the L variants
HEADS = 4
D_FF = 128  # hidden width of the dense feed-forward layer
LR = 1e-3  # Adam's step; the paper uses 1e-4 over a far longer run
N_CTX = 5  # decoder context: remaining capacity, length, budget, open, pickup phase
VARIANTS = {"CVRP": (0, 0, 0), "OVRP": (1, 0, 0), "VRPB": (0, 1, 0), "VRPL": (0, 0, 1),
            "OVRPB": (1, 1, 0), "OVRPL": (1, 0, 1), "VRPBL": (0, 1, 1),
            "OVRPBL": (1, 1, 1)}  # (open, backhaul, limit)
TRAIN_VARIANTS = ["CVRP", "OVRP", "VRPB", "VRPL"]
UNSEEN = ["OVRPB", "OVRPL", "VRPBL", "OVRPBL"]
SINGLE_TASK = "OVRP"  # the single-task solver's own variant
METHODS = ["MVMoE", "POMO-MTL (dense)", f"single-task ({SINGLE_TASK})",
           "nearest neighbour", "MVMoE-L"]
STYLE = icmlbook.method_styles(*METHODS)
print(f"tier {tier}: {cfg.steps} batches of {cfg.batch} instances per model, "
      f"{N_CUSTOMERS} customers; {cfg.n_test} test instances per variant; "
      f"{experts} experts, top-{top_k}")

# %% [markdown]
# One colour per method in every figure: MVMoE in blue, the dense multi-task model in
# red, the single-task solver in teal, nearest neighbour in amber, MVMoE-L (full tier)
# in purple.
#
# ## The idea in math
#
# **Variants from attributes.** An instance has a depot $0$ and customers
# $1..n$ at points $x_i \in [0,1]^2$ with demands $q_i$, and a vehicle capacity $Q$.
# A solution is a set of routes, each leaving the depot, serving customers once, and
# (unless the variant is open) returning. Its cost is the length driven,
#
# $$c(\pi) = \sum_{\text{routes } r} \Big(\sum_{(i,j) \in r} \lVert x_i - x_j\rVert
#   \;-\; \mathbb 1[\mathrm O]\, \lVert x_{\text{last}(r)} - x_0\rVert\Big), \tag{1}$$
#
# the return leg dropped for open routes. Each attribute adds a constraint per route:
# C, delivered load $\le Q$; B, a set of pickup customers whose collected load is
# $\le Q$ too, all served after the route's deliveries; L, route length (with the
# return leg unless open) $\le$ `LIMIT`. Eight variants come from $\{O, B, L\}$;
# we train on CVRP, OVRP, VRPB, VRPL and test on the four unseen combinations.

# %% [markdown]
# **POMO training.** The policy $p_\theta(\pi \mid s)$ builds $P$ solutions per
# instance, one from each (delivery) customer as its first stop. REINFORCE with the
# *shared baseline*, the mean cost over the $P$ rollouts of the same instance:
#
# $$\nabla_\theta J = \frac1{BP}\sum_{b,i} \big(c(\pi_{b,i}) - \tfrac1P\textstyle\sum_{i'}
#   c(\pi_{b,i'})\big)\, \nabla_\theta \log p_\theta(\pi_{b,i} \mid s_b). \tag{3}$$
#
# At test time each start decodes greedily, on the instance and its 8 flips and
# swaps of the coordinates (the paper's ×8 augmentation), and the best of the $8P$
# solutions is kept.

# %% [markdown]
# **Mixture of experts.** An MoE layer replaces a feed-forward layer by $m$ experts
# $E_j$ and a gate $G$ that sends each node embedding $x$ to $k$ of them:
#
# $$\mathrm{MoE}(x) = \sum_{j=1}^m G(x)_j\, E_j(x). \tag{4}$$
#
# The feasibility masks (Eq. 2), the gate (Eq. 5), its load-balancing loss (Eq. 7), the
# experts' cost (Eq. 6), the hierarchical gate of MVMoE-L (Eq. 8) and the exact
# reference (Eq. 9) sit with the code that computes them, below.

# %% [markdown]
# ## From scratch
#
# ### Instances and variants
#
# One generator for every variant: a variant only changes how the same numbers are
# read. The last `N_BACKHAUL` customers are the pickups of the B variants (customers
# are exchangeable, so fixing their indices loses nothing).

# %%
def sample_instances(b, gen, n=N_CUSTOMERS):
    """Points (b, n + 1, 2), depot first in the central square, and demands (b, n)."""
    depot = 0.25 + 0.5 * torch.rand(b, 1, 2, generator=gen)
    customers = torch.rand(b, n, 2, generator=gen)
    demand = torch.randint(1, 10, (b, n), generator=gen).float()
    return torch.cat([depot, customers], 1), demand


def attributes(name, n=N_CUSTOMERS):
    """A variant's flags: open routes, the pickup set (n,), the length limit."""
    is_open, backhaul, limited = VARIANTS[name]
    pickups = torch.arange(n) >= n - N_BACKHAUL
    if not backhaul:
        pickups = torch.zeros(n, dtype=torch.bool)
    return bool(is_open), pickups, LIMIT if limited else math.inf


def node_features(coords, demand, name):
    """Depot (b, 1, 2) and customers (b, n, 3): x, y, signed demand / Q."""
    _, pickups, _ = attributes(name, demand.shape[1])
    sign = 1 - 2 * pickups.float()  # pickups carry negative demand, as in the paper
    signed = (sign * demand / CAPACITY)[..., None]
    return coords[:, :1], torch.cat([coords[:, 1:], signed], -1)


# %% [markdown]
# ### The environment: state, masks (Eq. 2), steps and cost (Eq. 1)
#
# The state of $P$ partial solutions per instance, all advanced one node per step.
# A constructive policy picks the next node $a_t$ among the *feasible*
# ones. With $\ell$ the delivered load, $p$ the collected load, $\phi \in \{0, 1\}$
# whether the route has started its pickups, $\lambda$ its length so far and $i$ the
# current node, customer $j$ is allowed when
#
# $$\underbrace{j \text{ unvisited}}_{\text{all}} \;\wedge\;
#   \underbrace{\big(j \notin \mathcal B \Rightarrow \neg\phi \wedge \ell + q_j \le Q\big)
#   \wedge \big(j \in \mathcal B \Rightarrow p + q_j \le Q\big)}_{\text{C, B}} \;\wedge\;
#   \underbrace{\lambda + d_{ij} + \mathbb 1[\neg \mathrm O]\, d_{j0} \le L}_{\text{L}},
#   \tag{2}$$
#
# and the depot is allowed unless the vehicle is already there. Every state the mask
# lets through can be completed: a fresh route can always serve any one customer
# (a premise of the generator, checked below).

# %%
class RoutingEnv:
    """P partial solutions of b instances of one variant; loads are fractions of Q."""

    def __init__(self, coords, demand, name, starts):
        b, n = demand.shape
        self.open, pickups, self.limit = attributes(name, n)
        self.pickup = torch.cat([torch.zeros(1, dtype=torch.bool), pickups])
        self.dist = torch.cdist(coords, coords)
        self.q = torch.cat([torch.zeros(b, 1), demand], 1) / CAPACITY
        shape = (b, starts)
        self.cur = torch.zeros(shape, dtype=torch.long)
        self.visited = torch.zeros(*shape, n + 1, dtype=torch.bool)
        self.delivered, self.collected = torch.zeros(shape), torch.zeros(shape)
        self.in_pickups = torch.zeros(shape, dtype=torch.bool)
        self.length, self.cost = torch.zeros(shape), torch.zeros(shape)

    def legs(self):
        """Distances from the current node to every node: (b, P, n + 1)."""
        idx = self.cur[..., None].expand(-1, -1, self.dist.shape[2])
        return self.dist.gather(1, idx)

    def done(self):
        return self.visited[..., 1:].all(-1)

    def mask(self):
        """Eq. 2: the nodes each partial solution may visit next, (b, P, n + 1)."""
        q, pick = self.q[:, None, :], self.pickup[None, None, :]
        deliver_ok = ~pick & ~self.in_pickups[..., None] & (
            self.delivered[..., None] + q <= 1 + 1e-6)
        pickup_ok = pick & (self.collected[..., None] + q <= 1 + 1e-6)
        ok = ~self.visited & (deliver_ok | pickup_ok)
        if math.isfinite(self.limit):
            home = 0 if self.open else self.dist[:, None, 0, :]
            ok &= self.length[..., None] + self.legs() + home <= self.limit + 1e-6
        ok[..., 0] = (self.cur != 0) | self.done()
        return ok

    def step(self, a):
        """Move to nodes a (b, P); a return to the depot closes the route (Eq. 1)."""
        leg = self.legs().gather(2, a[..., None])[..., 0]
        home, pick = a == 0, self.pickup[a]
        self.cost += torch.where(home & self.open, 0.0, leg)
        self.length = torch.where(home, 0.0, self.length + leg)
        q = self.q.gather(1, a)
        self.collected = torch.where(home, 0.0, self.collected + pick * q)
        self.delivered = torch.where(home, 0.0, self.delivered + ~pick * q)
        self.in_pickups = ~home & (self.in_pickups | pick)
        self.visited.scatter_(2, a[..., None], True)
        self.cur = a

    def context(self):
        """The decoder's dynamic context (b, P, N_CTX)."""
        left = 1 - torch.where(self.in_pickups, self.collected, self.delivered)
        budget = ((self.limit - self.length) / LIMIT if math.isfinite(self.limit)
                  else torch.zeros_like(self.length))
        return torch.stack([left, self.length, budget,
                            torch.full_like(left, float(self.open)),
                            self.in_pickups.float()], -1)


def first_stops(name, n=N_CUSTOMERS):
    """POMO's starts: every delivery customer."""
    return torch.nonzero(~attributes(name, n)[1])[:, 0] + 1


# %% [markdown]
# ### An independent validator
#
# Plain Python, sharing nothing with the environment: it splits a node sequence into
# routes and checks every constraint of the variant from the definitions, then
# recomputes the cost (1). Every route any method produces goes through it.

# %%
def validate(coords, demand, name, seq):
    """(feasible, cost) of node sequence seq (depot 0 first and last), one instance."""
    is_open, backhaul, limited = VARIANTS[name]
    n, pts, q = len(demand), coords.tolist(), demand.tolist()
    pickup = [False] + [bool(backhaul) and i >= n - N_BACKHAUL for i in range(n)]
    seq = [int(s) for s in seq]
    every_customer_once = sorted(s for s in seq if s) == list(range(1, n + 1))
    if seq[0] != 0 or seq[-1] != 0 or not every_customer_once:
        return False, math.inf
    routes, route = [], []
    for s in seq[1:]:
        if s == 0 and route:
            routes.append(route)
            route = []
        elif s:
            route.append(s)
    total = 0.0
    for r in routes:
        kinds = [pickup[c] for c in r]
        if kinds != sorted(kinds):  # a delivery after a pickup
            return False, math.inf
        if (sum(q[c - 1] for c in r if not pickup[c]) > CAPACITY
                or sum(q[c - 1] for c in r if pickup[c]) > CAPACITY):
            return False, math.inf
        path = [0] + r + ([] if is_open else [0])
        length = sum(math.dist(pts[i], pts[j]) for i, j in zip(path, path[1:]))
        if limited and length > LIMIT + 1e-6:
            return False, math.inf
        total += length
    return True, total


# %% [markdown]
# ### The exact reference: dynamic programming over subsets
#
# Under the classic backhaul rule every constraint is a constraint on one route, so
# the optimum is the best partition of the customers into feasible routes. First, for
# every subset $S$, the shortest route serving exactly $S$ (Held–Karp, with no
# delivery after a pickup); then the best partition, by always putting the lowest
# customer of $S$ into the next route $R \subseteq S$:
#
# $$f(S) = \min_{R \subseteq S,\ \min S \in R}\ \big[c(R) + f(S \setminus R)\big],
#   \qquad f(\varnothing) = 0. \tag{9}$$

# %%
def route_lengths(dist, pickup, is_open):
    """Held-Karp: the shortest route serving exactly subset S, for all S: (b, 2^n)."""
    D = dist.double().numpy()
    b, n = D.shape[0], D.shape[1] - 1
    bits = ((np.arange(1 << n)[:, None] >> np.arange(n)) & 1).astype(bool)
    allowed = ~(pickup[:, None] & ~pickup[None, :])  # i -> j: no delivery after pickup
    step = np.where(allowed[None], D[:, 1:, 1:], np.inf).transpose(0, 2, 1)  # (b, j, i)
    dp = np.full((b, 1 << n, n), np.inf)  # dp[S, j]: from the depot through S, at j
    dp[:, 1 << np.arange(n), np.arange(n)] = D[:, 0, 1:]
    for S in sorted(range(1, 1 << n), key=lambda m: bits[m].sum()):
        if S & (S - 1):
            js = np.nonzero(bits[S])[0]
            dp[:, S, js] = (dp[:, S ^ (1 << js), :] + step[:, js]).min(2)
    best = (dp + (0 if is_open else D[:, None, 1:, 0])).min(2)
    best[:, 0] = 0
    return best


@functools.lru_cache(maxsize=4)
def partition_table(n):
    """Per set size: the sets S and, per S, every R within S holding S's lowest bit."""
    levels = []
    for k in range(1, n + 1):
        sets = np.array([m for m in range(1 << n) if bin(m).count("1") == k])
        subsets = []
        for S in sets:
            low = S & -S
            rest = [i for i in range(n) if (S ^ low) >> i & 1]
            subsets.append([low | sum(1 << p for j, p in enumerate(rest) if t >> j & 1)
                            for t in range(1 << (k - 1))])
        levels.append((sets, np.array(subsets)))
    return levels


def exact_optimum(coords, demand, name, cache=None):
    """Eq. 9: the optimal cost of each instance, (b,); cache reuses route lengths."""
    is_open, backhaul, limited = VARIANTS[name]
    b, n = demand.shape
    pickup = attributes(name, n)[1].numpy()
    key = (is_open, backhaul)
    if cache is None or key not in cache:
        lengths = route_lengths(torch.cdist(coords.double(), coords.double()), pickup,
                                bool(is_open))
        if cache is not None:
            cache[key] = lengths
    lengths = cache[key] if cache is not None else lengths
    bits = ((np.arange(1 << n)[:, None] >> np.arange(n)) & 1).astype(float)
    q = demand.double().numpy()
    delivered, collected = (q * ~pickup) @ bits.T, (q * pickup) @ bits.T
    infeasible = (delivered > CAPACITY) | (collected > CAPACITY)
    if limited:
        infeasible |= lengths > LIMIT
    cost = np.where(infeasible, np.inf, lengths)
    f = np.full((b, 1 << n), np.inf)
    f[:, 0] = 0
    for sets, subsets in partition_table(n):
        f[:, sets] = (cost[:, subsets] + f[:, sets[:, None] ^ subsets]).min(2)
    return f[:, -1]


# %% [markdown]
# ### The constructive baseline: nearest neighbour from every start
#
# From each of POMO's first stops, go to the nearest customer the mask allows, and
# back to the depot only when none is; keep the best of the starts. It sees exactly
# the same masks as the learned solvers and as many starts.

# %%
def rollout_nearest(coords, demand, name):
    """Costs (b, P) and node sequences (b, P, T): nearest neighbour from each start."""
    starts = first_stops(name, demand.shape[1])
    env = RoutingEnv(coords, demand, name, len(starts))
    first = starts[None].expand(len(coords), -1)
    env.step(first)
    seqs = [torch.zeros_like(first), first]
    while not bool((env.done() & (env.cur == 0)).all()):
        ok = env.mask()
        ok[..., 0] &= ~ok[..., 1:].any(-1)  # the depot only when no customer fits
        a = (-env.legs()).masked_fill(~ok, -math.inf).argmax(-1)
        env.step(a)
        seqs.append(a)
    return env.cost, torch.stack(seqs, -1)


# %% [markdown]
# ### The network
#
# The POMO encoder: node embeddings, then layers of multi-head self-attention and a
# feed-forward block, each with a residual connection and instance normalisation
# (statistics over the nodes of an instance, as in POMO).

# %%
class InstanceNorm(nn.Module):
    """Normalise each feature over the nodes of an instance, then scale and shift."""

    def __init__(self, d):
        super().__init__()
        self.g, self.b = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

    def forward(self, x):
        x = x - x.mean(-2, keepdim=True)
        scale = torch.rsqrt(x.square().mean(-2, keepdim=True) + 1e-5)
        return x * scale * self.g + self.b


def attention(q, k, v, allowed=None):
    """Scaled dot-product attention over the last two axes, with an optional mask."""
    w = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if allowed is not None:
        w = w.masked_fill(~allowed, -math.inf)
    return w.softmax(-1) @ v


class FeedForward(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.inp, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return self.out(F.relu(self.inp(x)))


# %% [markdown]
# ### The MoE layer (Eqs. 4, 5 and 7)
#
# The gate is noisy top-$k$ gating (Shazeer et al., 2017), with noise during training
# only, and both $W_g$ and $W_{\text{noise}}$ start at zero (as in the authors' code):
#
# $$H(x) = x W_g + \varepsilon \odot \mathrm{softplus}(x W_{\text{noise}}),\quad
#   \varepsilon \sim \mathcal N(0, I); \qquad
#   G(x) = \mathrm{softmax}\big(\mathrm{TopK}(H(x), k)\big), \tag{5}$$
#
# where TopK keeps the $k$ largest entries and sets the others to $-\infty$.
#
# **Load balancing.** Without pressure, a router can collapse onto a few experts. Per
# MoE layer, over the $T$ nodes of a batch, the importance and the (smooth) load of
# expert $j$ are
#
# $$\mathrm{Imp}_j = \sum_{t} G(x_t)_j, \qquad
#   \mathrm{Load}_j = \sum_t \Phi\Big(\frac{(x_t W_g)_j - \tau_{t,j}}
#   {\mathrm{softplus}((x_t W_{\text{noise}})_j)}\Big),\qquad
#   \mathcal L_{\text{aux}} = \mathrm{CV}^2(\mathrm{Imp}) + \mathrm{CV}^2(\mathrm{Load}),
#   \tag{7}$$
#
# with $\Phi$ the normal CDF, $\tau_{t,j}$ the $k$-th largest noisy logit among the
# *other* experts (so $\mathrm{Load}_j$ is the probability that expert $j$ is in the
# top $k$ under fresh noise) and $\mathrm{CV}^2 = $ variance / mean². The training
# loss is (3)'s REINFORCE loss plus `aux_weight` times the sum of (7) over layers.
#
# **The experts.** The $m$ experts are stored side by side: expert $j$ owns hidden
# units $jh..(j+1)h-1$ of one wide layer, so multiplying each expert's hidden units by
# its gate and applying the output layer is exactly Eq. 4. Each expert is as wide as
# the dense layer it replaces ($h = d_{ff}$), as in the authors' model; the decoder's
# experts are linear maps. This evaluates all experts (the sparse gates make the unused
# ones contribute zero); a sparse dispatcher would skip them, which matters at scale
# and not for the result. `counts` keeps how many nodes each expert received, for the
# routing diagnostics.

# %%
def cv_squared(x):
    """Squared coefficient of variation, variance / mean^2 (Eq. 7)."""
    return x.var(unbiased=False) / (x.mean() ** 2 + 1e-10)


class MoE(nn.Module):
    """Eq. 4 with m experts: x -> U_j relu(V_j x + c_j) + e_j of hidden width h, or,
    with act=False, linear experts x -> W_j x + e_j (then h = d)."""

    def __init__(self, d, h, m=4, k=2, act=True):
        super().__init__()
        self.m, self.h, self.k, self.act = m, h, k, act
        self.inp = nn.Linear(d, m * h, bias=act)
        self.out = nn.Linear(m * h, d, bias=False) if act else None
        self.bias = nn.Parameter(torch.zeros(m, d))
        self.w_g = nn.Parameter(torch.zeros(d, m))  # zero-initialised, as the paper
        self.w_noise = nn.Parameter(torch.zeros(d, m))
        self.aux, self.counts, self.keep = torch.tensor(0.0), torch.zeros(m), None

    def gates(self, x):
        """Eq. 5, and Eq. 7's load-balancing loss in training."""
        clean = x @ self.w_g
        k = self.k if self.keep is None else min(self.k, int(self.keep.sum()))
        std = F.softplus(x @ self.w_noise) + 1e-2
        logits = clean + torch.randn_like(clean) * std if self.training else clean
        if self.keep is not None:  # experts switched off (the widget)
            logits = logits.masked_fill(~self.keep, -1e9)
        top, idx = logits.topk(min(k + 1, self.m), -1)
        g = torch.zeros_like(logits).scatter(-1, idx[..., :k], top[..., :k].softmax(-1))
        if self.training and k < self.m:
            kth_in, kth_out = top[..., k:k + 1], top[..., k - 1:k]
            tau = torch.where(logits > kth_in, kth_in, kth_out)  # k-th best of others
            load = torch.special.ndtr((clean - tau) / std).reshape(-1, self.m).sum(0)
            self.aux = cv_squared(g.reshape(-1, self.m).sum(0)) + cv_squared(load)
        self.counts = (g > 0).reshape(-1, self.m).sum(0).detach().float()
        return g

    def forward(self, x):
        g = self.gates(x)
        z = self.inp(x)
        if self.act:
            return self.out(F.relu(z) * g.repeat_interleave(self.h, -1)) + g @ self.bias
        return ((z.unflatten(-1, (self.m, self.h)) * g[..., None]).sum(-2)
                + g @ self.bias)  # linear experts: sum_j G_j (W_j x + e_j)


# %% [markdown]
# ### The hierarchical gate (Eq. 8)
#
# Used in the decoder of MVMoE-L. In the decoder, which runs at every construction
# step, a problem-level gate $G_1$ first chooses, once per batch and at the first
# step, between the sparse MoE and one dense layer $D$:
#
# $$G_1 = \mathrm{softmax}\big(W_1\, \bar x\big) \in \mathbb R^2,\qquad
#   \mathrm{HMoE}(x) = \begin{cases} G_{1,0} \sum_j G_2(x)_j E_j(x) &
#   \text{sparse branch} \\ G_{1,1}\, D(x) & \text{dense branch,}\end{cases} \tag{8}$$
#
# with $\bar x$ the mean decoder input over the batch, the branch sampled from $G_1$
# in training (its probability scales the output, so $W_1$ is trained) and the likelier
# branch taken at test time. The branch is kept until `reset()`, which each rollout
# calls.

# %%
class HierarchicalMoE(nn.Module):
    """Eq. 8: a problem-level gate G1 between a sparse MoE and one dense layer."""

    def __init__(self, d, h, m=4, k=2):
        super().__init__()
        self.w1 = nn.Parameter(torch.zeros(d, 2))
        self.sparse = MoE(d, h, m, k, act=False)
        self.dense = nn.Linear(d, d)
        self.reset()

    def reset(self):
        self.branch, self.g1 = None, None

    def forward(self, x):
        if self.branch is None:
            self.g1 = (x.reshape(-1, x.shape[-1]).mean(0) @ self.w1).softmax(-1)
            self.branch = (int(torch.multinomial(self.g1.detach(), 1)) if self.training
                           else int(self.g1.argmax()))
        if self.branch == 0:
            return self.g1[0] * self.sparse(x)
        self.sparse.aux = torch.tensor(0.0)
        return self.g1[1] * self.dense(x)


# %% [markdown]
# ### Encoder, decoder and the whole solver
#
# `kind` is "dense" (POMO-MTL and the single-task solver), "moe" (MVMoE: an MoE in
# every encoder feed-forward block and in the decoder's multi-head combination) or
# "light" (MVMoE-L: the decoder's MoE under the hierarchical gate). The decoder's
# query reads the current node's embedding and the context; its single-head pointer
# scores are clipped by $10\tanh(\cdot)$ and masked by Eq. 2, as in POMO.

# %%
class EncoderLayer(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
        self.ff = ff
        self.norm1, self.norm2 = InstanceNorm(d), InstanceNorm(d)

    def forward(self, h):
        b, n, d = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        mixed = attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        h = self.norm1(h + self.proj(mixed))
        return self.norm2(h + self.ff(h))


class Solver(nn.Module):
    """POMO-style attention model: dense, MoE (MVMoE) or hierarchical (MVMoE-L)."""

    def __init__(self, kind="dense", d=64, layers=3, m=4, k=2):
        super().__init__()
        self.d, self.kind = d, kind
        self.depot, self.customer = nn.Linear(2, d), nn.Linear(3, d)

        def ff():
            return MoE(d, D_FF, m, k) if kind != "dense" else FeedForward(d, D_FF)

        self.layers = nn.ModuleList(EncoderLayer(d, ff()) for _ in range(layers))
        self.query = nn.Linear(d + N_CTX, d, bias=False)
        self.keys_values = nn.Linear(d, 2 * d, bias=False)
        self.combine = {"dense": lambda: nn.Linear(d, d),
                        "moe": lambda: MoE(d, d, m, k, act=False),
                        "light": lambda: HierarchicalMoE(d, d, m, k)}[kind]()

    def moe_layers(self):
        return [mod for mod in self.modules() if isinstance(mod, MoE)]

    def encode(self, depot, customers):
        h = torch.cat([self.depot(depot), self.customer(customers)], 1)
        for layer in self.layers:
            h = layer(h)
        b, n, d = h.shape
        kv = self.keys_values(h).view(b, n, 2, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        return h, kv

    def scores(self, h, kv, cur, ctx, allowed):
        """Masked pointer logits over the nodes, (b, P, n + 1)."""
        b, P = cur.shape
        last = h.gather(1, cur[..., None].expand(-1, -1, self.d))
        q = self.query(torch.cat([last, ctx], -1)).view(b, P, HEADS, -1).transpose(1, 2)
        glimpse = attention(q, kv[0], kv[1], allowed[:, None])
        g = self.combine(glimpse.transpose(1, 2).reshape(b, P, self.d))
        logits = 10 * torch.tanh(g @ h.transpose(1, 2) / math.sqrt(self.d))
        return logits.masked_fill(~allowed, -math.inf)


# %% [markdown]
# ### Active compute (Eq. 6)
#
# The experts are as wide as the dense layer they replace, as in the authors' model: an
# encoder expert has hidden width $d_{ff}$ and a decoder expert is a full $d \times d$
# linear map. With $k$ of $m$ experts active, a token then costs $k$ times the dense
# layer's multiply-adds, and the MoE layer holds $m$ times its weights:
#
# $$\text{active cost per token} = k \cdot 2 d\, d_{ff} \;\;(\text{encoder}),
#   \qquad k \cdot d^2 \;\;(\text{decoder}); \qquad
#   \text{dense: } 2 d\, d_{ff} \text{ and } d^2. \tag{6}$$
#
# So the paper's top-2 MVMoE spends about twice the dense model's feed-forward compute
# per token: "without a proportional increase" means proportional to the number of
# experts, not equal to the dense model. The function counts the multiply-adds from the
# weights of the modules themselves.

# %%
def active_macs(model):
    """Multiply-adds per token of the encoder's feed-forward blocks and the decoder's
    combination, counting the k of m experts each token uses (Eq. 6)."""
    total = 0
    for mod in [layer.ff for layer in model.layers] + [model.combine]:
        if isinstance(mod, MoE):
            weights = (mod.inp.weight.numel()
                       + (mod.out.weight.numel() if mod.act else 0))
            total += mod.k * weights // mod.m
        else:
            total += sum(p.numel() for n, p in mod.named_parameters()
                         if n.endswith("weight"))
    return total


# %% [markdown]
# ### Rollouts (Eq. 3's samples, and greedy decoding)

# %%
def rollout(model, coords, demand, name, greedy=True):
    """Costs (b, P), summed log-probabilities (b, P) and node sequences (b, P, T)."""
    if isinstance(model.combine, HierarchicalMoE):
        model.combine.reset()
    starts = first_stops(name, demand.shape[1])
    env = RoutingEnv(coords, demand, name, len(starts))
    h, kv = model.encode(*node_features(coords, demand, name))
    first = starts[None].expand(len(coords), -1)
    env.step(first)
    seqs, logp = [torch.zeros_like(first), first], torch.zeros(first.shape)
    while not bool((env.done() & (env.cur == 0)).all()):
        finished = env.done() & (env.cur == 0)
        lp = model.scores(h, kv, env.cur, env.context(), env.mask()).log_softmax(-1)
        a = (lp.argmax(-1) if greedy else
             torch.multinomial(lp.exp().flatten(0, 1), 1).view(first.shape))
        logp = logp + torch.where(finished, 0.0, lp.gather(2, a[..., None])[..., 0])
        env.step(a)
        seqs.append(a)
    return env.cost, logp, torch.stack(seqs, -1)


def augment(coords):
    """The 8 flips and swaps of the unit square (distances are unchanged): (8b, ...)."""
    out = []
    for swap in (False, True):
        for fx in (False, True):
            for fy in (False, True):
                c = coords.flip(-1) if swap else coords.clone()
                c[..., 0] = 1 - c[..., 0] if fx else c[..., 0]
                c[..., 1] = 1 - c[..., 1] if fy else c[..., 1]
                out.append(c)
    return torch.cat(out)


@torch.no_grad()
def solve(model, coords, demand, name, aug=8):
    """Greedy from every start on aug coordinate transforms; the best cost, sequence."""
    b = len(coords)
    coords_aug, demand_aug = augment(coords)[:aug * b], demand.repeat(aug, 1)
    cost, _, seqs = rollout(model, coords_aug, demand_aug, name)
    cost = cost.view(aug, b, -1).transpose(0, 1).reshape(b, -1)
    seqs = seqs.view(aug, b, *seqs.shape[1:]).transpose(0, 1).flatten(1, 2)
    best = cost.argmin(1)
    return cost[torch.arange(b), best], seqs[torch.arange(b), best]


# %% [markdown]
# ### Training (Eq. 3 plus Eq. 7)
#
# Each batch draws one training variant uniformly, as in the paper. The optimiser is
# the library's Adam (the arithmetic of `torch.optim.Adam` without its import cost);
# gradients are clipped at norm 1.

# %%
def train(model, variants, steps, batch, gen, aux, lr=LR):
    """POMO REINFORCE, shared baseline (Eq. 3), + aux * load balancing (Eq. 7)."""
    params = list(model.parameters())
    opt = Adam(params, lr=lr)
    history = []
    model.train()
    for step in icmlbook.progress(range(steps), desc=f"training {model.kind}"):
        name = variants[int(torch.randint(len(variants), (1,), generator=gen))]
        coords, demand = sample_instances(batch, gen)
        cost, logp, _ = rollout(model, coords, demand, name, greedy=False)
        advantage = cost - cost.mean(1, keepdim=True)  # cost, so minimise A * log p
        balance = sum((mod.aux for mod in model.moe_layers()), torch.tensor(0.0))
        loss = (advantage * logp).mean() + aux * balance
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        history.append((float(cost.mean()), float(balance.detach())))
    model.eval()
    return np.array(history)


# %% [markdown]
# ## The experiment
#
# ### Test instances, the exact optimum and the baseline
#
# One fixed set of test instances, read as each of the eight variants. The generator's
# premises come first: every customer can be served by a route of its own in every
# variant (its demand fits, and its out-and-back trip meets the limit), and the limit
# actually binds, changing the optimum of a share of the instances.

# %%
test_gen = run.generator("test instances")
test_coords, test_demand = sample_instances(cfg.n_test, test_gen)
route_cache = {}
optimum = {v: exact_optimum(test_coords, test_demand, v, route_cache) for v in VARIANTS}
solo_trip = float(2 * torch.cdist(test_coords[:, :1], test_coords[:, 1:]).max())
limit_binds = float(np.mean(optimum["VRPL"] > optimum["CVRP"] + 1e-9))
limit_binds_open = float(np.mean(optimum["OVRPL"] > optimum["OVRP"] + 1e-9))
nearest = {v: rollout_nearest(test_coords, test_demand, v) for v in VARIANTS}
nearest_cost = {v: c.min(1).values for v, (c, _) in nearest.items()}
print(f"longest out-and-back trip {solo_trip:.3f} (limit {LIMIT}); the limit changes "
      f"the optimum of {limit_binds:.0%} of the closed and {limit_binds_open:.0%} of "
      f"the open instances")

# %% [markdown]
# The limit binds on closed routes. On open routes it hardly ever does at 10
# customers: without a return leg, the best open routes are short. OVRPL and OVRPBL
# then differ from OVRP and OVRPB in what the network is told (a length budget in its
# context) more than in their optima.
#
# ### Three solvers, one budget
#
# MVMoE and POMO-MTL (dense) train on the four training variants, the single-task
# solver (dense POMO) on OVRP only; all three for the same number of batches of the
# same size, on the same stream of training instances and from the same stream of
# initial weights. MVMoE holds more weights than the dense model (the ratio is
# printed below) and spends twice its feed-forward compute per node (Eq. 6).

# %%
def new_model(kind):
    return Solver(kind, cfg.d, cfg.layers, experts, top_k)


models, histories = {}, {}
for name, kind, variants in [("MVMoE", "moe", TRAIN_VARIANTS),
                             ("POMO-MTL (dense)", "dense", TRAIN_VARIANTS),
                             (f"single-task ({SINGLE_TASK})", "dense", [SINGLE_TASK]),
                             ("MVMoE-L", "light", TRAIN_VARIANTS)]:
    if kind == "light" and not cfg.light:
        continue
    run.reseed("initial weights")  # every solver starts from the same stream
    models[name] = new_model(kind)
    histories[name] = train(models[name], variants, cfg.steps, cfg.batch,
                            run.generator("training instances"), aux_weight)
n_params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
print("parameters:", ", ".join(f"{k} {v:,}" for k, v in n_params.items()),
      f"(MVMoE / dense {n_params['MVMoE'] / n_params['POMO-MTL (dense)']:.2f})")

# %% [markdown]
# ### Evaluation on every variant
#
# Each solver's best of $8P$ greedy solutions per instance; the gap is to the exact
# optimum, in percent of it. Every solution goes through the validator.

# %%
single = f"single-task ({SINGLE_TASK})"


def gap(cost, v):
    return float(100 * np.mean(np.asarray(cost) / optimum[v] - 1))


results, invalid, n_checked = {}, 0, 0
for name, model in models.items():
    for v in ([SINGLE_TASK] + UNSEEN if name == single else VARIANTS):
        cost, seqs = solve(model, test_coords, test_demand, v)
        results[name, v] = cost.numpy()
        for i in range(cfg.n_test):
            ok, c = validate(test_coords[i], test_demand[i], v, seqs[i])
            invalid += not ok or abs(c - float(cost[i])) > 1e-4
            n_checked += 1
for v in VARIANTS:
    costs, seqs = nearest[v]
    best = costs.argmin(1)
    results["nearest neighbour", v] = costs.min(1).values.numpy()
    for i in range(cfg.n_test):
        ok, _ = validate(test_coords[i], test_demand[i], v, seqs[i, best[i]])
        invalid += not ok
        n_checked += 1
gaps = {(k, v): gap(c, v) for (k, v), c in results.items()}
shown = [m for m in METHODS if any(k == m for k, _ in gaps)]
print(f"{'variant':<8}" + "".join(f"{m[:16]:>18}" for m in shown))
for v in VARIANTS:
    tag = "*" if v in UNSEEN else " "
    print(f"{v:<7}{tag}" + "".join(f"{gaps[m, v]:>17.2f}%" if (m, v) in gaps
                                   else f"{'-':>18}" for m in shown))
print(f"(* unseen in training) {n_checked} solutions validated, {invalid} invalid")

# %% [markdown]
# At this budget the multi-task models have learned the closed variants (CVRP, VRPL)
# to within a few percent of the optimum, but not the open one: their gap on OVRP,
# a training variant, stays several times that of the specialist, which spends its
# whole budget there. A default run is a few hundred batches; the paper's models see
# thousands of times more instances. Gaps to the optimum, trained variants on the
# left and the four unseen ones on the right:

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(7.5, 3.0))
width = 0.8 / len(shown)
for i, m in enumerate(shown):
    ax.bar(np.arange(len(VARIANTS)) + (i - (len(shown) - 1) / 2) * width,
           [gaps.get((m, v), np.nan) for v in VARIANTS], width,
           color=STYLE[m]["color"], label=m)
ax.axvline(3.5, color="black", lw=0.8)
ax.set_xticks(range(len(VARIANTS)), list(VARIANTS))
ax.set_ylabel("gap to the optimum (%)")
ax.set_title("trained variants | unseen variants (zero-shot)")
ax.legend(ncol=3, fontsize=7);

# %% [markdown]
# ### Masks never let an infeasible step through
#
# The validator checks the solutions the solvers chose. A harsher test of the masks is
# a policy that picks *uniformly* among the allowed nodes: its walks go where no
# trained policy would, and every one of them must still be feasible.

# %%
def random_walks(coords, demand, name, gen):
    """Costs and node sequences of uniformly random feasible choices, every start."""
    starts = first_stops(name, demand.shape[1])
    env = RoutingEnv(coords, demand, name, len(starts))
    first = starts[None].expand(len(coords), -1)
    env.step(first)
    seqs = [torch.zeros_like(first), first]
    while not bool((env.done() & (env.cur == 0)).all()):
        w = env.mask().float().flatten(0, 1)
        a = torch.multinomial(w, 1, generator=gen).view(first.shape)
        env.step(a)
        seqs.append(a)
    return env.cost, torch.stack(seqs, -1)


walk_gen = run.generator("random walks")
walk_invalid, walk_cost_err, n_walks = 0, 0.0, 0
for v in VARIANTS:
    costs, seqs = random_walks(test_coords[:20], test_demand[:20], v, walk_gen)
    for i in range(seqs.shape[0]):
        for p in range(seqs.shape[1]):
            ok, c = validate(test_coords[i], test_demand[i], v, seqs[i, p])
            walk_invalid += not ok
            walk_cost_err = max(walk_cost_err, abs(c - float(costs[i, p])))
            n_walks += 1
print(f"{n_walks} random feasible walks: {walk_invalid} infeasible; largest cost "
      f"difference environment vs validator {walk_cost_err:.1e}")

# %% [markdown]
# And the exact optimum against brute force over every ordering and split, on small
# instances of 5 customers (two of them pickups in the B variants):

# %%
def brute_force(coords, demand, name):
    """The best feasible sequence over all orders and route splits (n <= 6)."""
    import itertools

    n, best = len(demand), math.inf
    for order in itertools.permutations(range(1, n + 1)):
        for cuts in itertools.product((0, 1), repeat=n - 1):
            seq = [0, order[0]]
            for c, cut in zip(order[1:], cuts):
                seq += [0, c] if cut else [c]
            best = min(best, validate(coords, demand, name, seq + [0])[1])
    return best


small_coords, small_demand = sample_instances(2, run.generator("small instances"), 5)
small_demand = small_demand * 3  # heavier loads, so that capacity binds at n = 5
dp_err = max(abs(exact_optimum(small_coords, small_demand, v)[i]
                 - brute_force(small_coords[i], small_demand[i], v))
             for v in VARIANTS for i in range(2))
print(f"exact DP vs brute force, 8 variants x 2 instances: max difference {dp_err:.1e}")

# %% [markdown]
# ### Routing: does every expert get used?
#
# The share of top-$k$ slots each expert of each MoE layer receives on the test
# instances, per variant (with the gates as trained), and the load-balancing loss
# during training.

# %%
@torch.no_grad()
def expert_usage(model, coords, demand, name):
    """Share of top-k slots per expert, per MoE layer: (layers, m), greedy rollouts."""
    totals = [torch.zeros(layer.m) for layer in model.moe_layers()]

    def hook(idx):
        def record(module, inputs, output):
            totals[idx] += module.counts
        return record

    handles = [layer.register_forward_hook(hook(i))
               for i, layer in enumerate(model.moe_layers())]
    rollout(model, coords, demand, name)
    for h in handles:
        h.remove()
    return torch.stack([t / t.sum().clamp_min(1) for t in totals]).numpy()


usage = {v: expert_usage(models["MVMoE"], test_coords, test_demand, v)
         for v in VARIANTS}
usage_all = np.mean(list(usage.values()), 0)
min_share = float(min(u.min() for u in usage.values()))
max_share = float(max(u.max() for u in usage.values()))
gate_norm = min(float(layer.w_g.detach().norm())
                for layer in models["MVMoE"].moe_layers())
layer_names = [f"enc {i}" for i in range(cfg.layers)] + ["dec"]
print(f"expert shares over all layers and variants: {min_share:.3f}..{max_share:.3f} "
      f"(uniform {1 / experts:.3f}); smallest gate norm |W_g| {gate_norm:.3f}")

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 3, figsize=(9.5, 2.8), width_ratios=[1, 1.6, 1.2])
im = axes[0].imshow(usage_all, vmin=0, vmax=max(0.5, max_share), cmap="viridis")
fig.colorbar(im, ax=axes[0], shrink=0.8, label="share")
axes[0].set(xticks=range(experts), yticks=range(len(layer_names)), xlabel="expert",
            title="share of top-k slots")
axes[0].set_yticklabels(layer_names)
by_variant = np.stack([usage[v][0] for v in VARIANTS])
im = axes[1].imshow(by_variant.T, vmin=0, vmax=max(0.5, max_share), cmap="viridis")
fig.colorbar(im, ax=axes[1], shrink=0.8, label="share")
axes[1].set(xticks=range(len(VARIANTS)), yticks=range(experts), ylabel="expert",
            title="encoder layer 0, per variant")
axes[1].set_xticklabels(list(VARIANTS), rotation=60, fontsize=7)
for name, hist in histories.items():
    if name.startswith("MVMoE"):
        smooth = np.convolve(hist[:, 1], np.ones(10) / 10, mode="valid")
        axes[2].plot(smooth, **STYLE[name])
axes[2].set(xlabel="training batch", ylabel="load-balancing loss (Eq. 7)",
            title="summed over MoE layers")
axes[2].legend();

# %% [markdown]
# ## Claims
#
# Paper claims first, each against a baseline or an ablation; then checks that must
# hold if the code is right; then *findings*: what the paper states, measured here but
# not claimed. The thresholds were set on the calibration seeds 0-9 and frozen before
# the confirmation seeds 10-19 were run; each line says where its number comes from.
# The paper's central comparison, MVMoE against its dense twin POMO-MTL, is a finding,
# not a claim: at this scale it goes either way from seed to seed. Two statistics were
# chosen during calibration, before the bars were frozen: the zero-shot claim was
# first the worst of the eight pairs of multi-task solver and unseen variant, which
# came within a few per cent of its bar on a calibration seed, and is now the mean over
# the unseen variants (each variant's ratio is recorded with the run); the specialist
# claim compares the mean cost of the two multi-task solvers with the specialist's,
# where an earlier version took the worse of the two and sat at the edge of its bar.
# Even so, its worst calibration seed stays only a few per cent inside the bar: the
# spread is that of three solvers trained afresh on every seed and scored on a variant
# none of them saw, and the bar is not moved in either direction.

# %% tags=["thresholds"]
# the paper's verdict follows icmlbook.verdicts' rule, fixed before the final sweep
C_VS_NEAREST = 0.97  # mean unseen cost ratio learned / nearest; set on first runs
C_SINGLE_OWN = -1.0  # gap(single on OVRP) - gap(MVMoE on OVRP), pp; set on first runs
C_VS_SPECIALIST = 0.97  # VRPBL: mean multi-task / specialist cost; first runs; thin
C_MIN_SHARE = 0.05  # smallest expert share, any layer or variant; set on first runs
C_INVALID = 0  # solutions or random walks the validator rejects
C_DP = 1e-9  # exact DP vs brute force at n = 5, float64 rounding
C_COST = 1e-4  # environment's cost vs the validator's, float32 rounding
C_ACTIVE = 1e-12  # |active compute MoE / dense - top_k| (Eq. 6), by construction
C_GATE_NORM = 1e-3  # smallest |W_g|: the zero-initialised gates have been trained
C_SOLO_TRIP = LIMIT  # longest out-and-back trip: every customer has a feasible route
C_LIMIT_BINDS = 0.1  # share of closed instances whose optimum the limit changes

# %%
learned = ["MVMoE", "POMO-MTL (dense)"]
mean_cost = {key: float(c.mean()) for key, c in results.items()}
to_nearest = {v: np.mean([mean_cost[m, v] for m in learned])
              / mean_cost["nearest neighbour", v] for v in UNSEEN}
vs_nearest = float(np.mean(list(to_nearest.values())))  # mean over the unseen variants
single_own = gaps[single, SINGLE_TASK] - gaps["MVMoE", SINGLE_TASK]
# the two multi-task solvers' mean cost over the specialist's
vs_specialist = {v: np.mean([mean_cost[m, v] for m in learned]) / mean_cost[single, v]
                 for v in UNSEEN}
active_ratio = active_macs(models["MVMoE"]) / active_macs(models["POMO-MTL (dense)"])
run.claim("zero-shot: mean unseen cost ratio to nearest neighbour", vs_nearest, "<=",
          C_VS_NEAREST, "On the unseen variants the multi-task solvers clearly beat "
          "the constructive heuristic", versus="baseline",
          against="nearest neighbour from every start, same masks and starts",
          strength="superiority", provenance="calibrated")
run.claim("single-task beats multi-task on its own variant (gap points)", single_own,
          "<=", C_SINGLE_OWN, "A solver trained on OVRP alone, with the same budget, "
          "is better on OVRP than the multi-task MVMoE", versus="baseline",
          against="single-task dense POMO on OVRP, same batches",
          strength="superiority", provenance="calibrated")
run.claim("multi-task vs specialist on unseen VRPBL: cost ratio",
          vs_specialist["VRPBL"], "<=", C_VS_SPECIALIST, "Training on several variants "
          "is what carries a solver to an unseen closed variant with pickups and a "
          "limit: the multi-task solvers beat the OVRP specialist there",
          versus="ablation", against="the same budget spent on one variant "
          "(single-task OVRP)", strength="superiority", provenance="calibrated")
run.check("routing healthy: smallest expert share", min_share, ">=", C_MIN_SHARE,
          "every expert of every MoE layer receives a share of the nodes on every "
          "variant: the router has not collapsed, what Eq. 7 guards against")
run.check("validator rejects no solution", invalid, "<=", C_INVALID,
          "every solution of every solver is feasible and its cost is recomputed")
run.check("random feasible walks: infeasible", walk_invalid, "<=", C_INVALID,
          "the masks never allow an infeasible step")
run.check("environment cost = validator cost", walk_cost_err, "<=", C_COST,
          "Eq. 1 computed two independent ways", digits=2)
run.check("exact DP = brute force (n = 5)", dp_err, "<=", C_DP,
          "Eq. 9 finds the optimum over all orders and splits", digits=2)
run.check("active compute MoE / dense - top_k (Eq. 6)", abs(active_ratio - top_k), "<=",
          C_ACTIVE, "full-width experts: each token costs top_k dense layers, as in "
          "the paper's model", digits=2)
run.check("trained gates: smallest |W_g|", gate_norm, ">=", C_GATE_NORM,
          "the zero-initialised gates have moved, so routing is learned")
run.check("longest out-and-back trip", solo_trip, "<=", C_SOLO_TRIP,
          "generator premise: every customer fits a route of its own")
run.check("share of instances where the limit binds", limit_binds, ">=",
          C_LIMIT_BINDS, "generator premise: the L attribute changes the problem");

# %% [markdown]
# The findings. The first three ask what the specialist does on the other unseen
# variants, all of them open like its own; the last three are the paper's comparison
# of MVMoE with POMO-MTL, with the direction the paper reports (a cost ratio at most 1,
# MVMoE ahead on every unseen variant).

# %%
def unseen_mean(m, vs=UNSEEN):
    return float(np.mean([mean_cost[m, v] for v in vs]))


moe_vs_dense = {v: mean_cost["MVMoE", v] / mean_cost["POMO-MTL (dense)", v]
                for v in VARIANTS}
moe_vs_dense_unseen = unseen_mean("MVMoE") / unseen_mean("POMO-MTL (dense)")
moe_vs_dense_trained = (unseen_mean("MVMoE", TRAIN_VARIANTS)
                        / unseen_mean("POMO-MTL (dense)", TRAIN_VARIANTS))
moe_wins = int(sum(gaps["MVMoE", v] < gaps["POMO-MTL (dense)", v] for v in UNSEEN))
for v in ["OVRPB", "OVRPL", "OVRPBL"]:
    run.finding(f"multi-task vs specialist on unseen {v}: cost ratio",
                vs_specialist[v], "<=", 1.0,
                paper="a solver trained on one variant is tailored to it; one solver "
                "trained on several variants generalises zero-shot to unseen ones (the "
                "paper does not run its single-task POMO on unseen variants)",
                shows="the two multi-task solvers' mean cost over that of the OVRP "
                "specialist; above 1, the specialist does better on this open variant")
run.finding("MVMoE vs POMO-MTL: mean unseen cost ratio", moe_vs_dense_unseen, "<=", 1.0,
            paper="MVMoE/4E has a lower gap than POMO-MTL on every unseen variant, "
            "at 50 and 100 customers",
            shows="MVMoE's mean cost over the dense twin's on the four unseen "
            "variants, same data and batches; above 1, the dense model does better")
run.finding("MVMoE vs POMO-MTL: unseen variants won", moe_wins, ">=", len(UNSEEN),
            paper="MVMoE/4E beats POMO-MTL on all 10 unseen variants",
            shows="on how many of the four unseen variants MVMoE's gap is below "
            "POMO-MTL's")
run.finding("MVMoE vs POMO-MTL: mean trained cost ratio", moe_vs_dense_trained, "<=",
            1.0, paper="MVMoE/4E has a lower gap than POMO-MTL on every trained "
            "variant", shows="MVMoE's mean cost over the dense twin's on the four "
            "training variants; above 1, the dense model does better")
run.metric("gaps", {f"{m} | {v}": g for (m, v), g in gaps.items()})
run.metric("unseen_gap", {m: float(np.mean([gaps[m, v] for v in UNSEEN]))
                          for m in shown})
run.metric("moe_vs_dense_cost", moe_vs_dense)
run.metric("vs_specialist", vs_specialist)
run.metric("to_nearest", to_nearest)
run.metric("expert_share", dict(min=min_share, max=max_share))
run.metric("limit_binds", dict(closed=limit_binds, open=limit_binds_open))
run.metric("parameters", n_params)
run.metric("active_compute_ratio", active_ratio)

# %% [markdown]
# The paper's headline claims, in its words (its abstract; Table 1 holds the gaps of
# every model on every variant), and what tests each here.

# %%
run.headline("one solver, zero-shot on unseen variants",
             "we aim to develop a unified neural solver that can cope with a range of "
             "VRP variants simultaneously [...] our method significantly promotes "
             "zero-shot generalization performance on 10 unseen VRP variants",
             source="Abstract, Table 1",
             claims=["zero-shot: mean unseen cost ratio to nearest neighbour",
                     "single-task beats multi-task on its own variant (gap points)",
                     "multi-task vs specialist on unseen VRPBL: cost ratio"],
             findings=[f"multi-task vs specialist on unseen {v}: cost ratio"
                       for v in ["OVRPB", "OVRPL", "OVRPBL"]])
run.headline("mixture of experts beats the dense multi-task model",
             "MVMoE, which greatly enhances the model capacity without a proportional "
             "increase in computation; MVMoE/4E has a lower gap than POMO-MTL on all "
             "10 unseen variants", source="Abstract, Table 1",
             findings=["MVMoE vs POMO-MTL: mean unseen cost ratio",
                       "MVMoE vs POMO-MTL: unseen variants won",
                       "MVMoE vs POMO-MTL: mean trained cost ratio"])
run.headline("hierarchical gating trades little accuracy for less compute",
             "We further develop a hierarchical gating mechanism for the MVMoE, "
             "delivering a good trade-off between empirical performance and "
             "computational complexity", source="Abstract, Table 1",
             testable=False, why="MVMoE-L is trained at the full tier only; at the "
             "default budget there is no MVMoE-L to compare")

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed: fresh training instances, fresh initial weights and fresh test
# instances. The table and strip plot below read this chapter's results file, made by
# `icmlbook sweep 18 --seeds 0-19 --update-results`: every claim, check and finding
# over the calibration seeds 0-9 and the confirmation seeds 10-19 at the default tier,
# with the number of seeds on which each holds and its worst margin.

# %%
across = icmlbook.across_seeds(run)

# %% [markdown]
# ### MVMoE against its dense twin, variant by variant
#
# The paper's MVMoE beats POMO-MTL on every unseen variant, by 0.15-0.5 gap points at
# 50 and 100 customers. Here, on this seed (the table across seeds above has the
# findings on every seed):

# %%
print(f"MVMoE / POMO-MTL mean cost, unseen {moe_vs_dense_unseen:.3f}, trained "
      f"{moe_vs_dense_trained:.3f}; MVMoE's gap below POMO-MTL's on {moe_wins} of "
      f"{len(UNSEEN)} unseen variants")
print("per variant, MVMoE / POMO-MTL cost: " + ", ".join(
    f"{v} {moe_vs_dense[v]:.3f}" for v in VARIANTS))
print(f"parameters MVMoE / POMO-MTL: "
      f"{n_params['MVMoE'] / n_params['POMO-MTL (dense)']:.2f}; active compute per "
      f"token: {active_ratio:.2f}")
print("multi-task mean / specialist cost on the unseen variants: " + ", ".join(
    f"{v} {vs_specialist[v]:.3f}" for v in UNSEEN))

# %% [markdown]
# At our scale MVMoE is not reliably better than its dense twin: the ratio of their
# mean costs stays close to 1, on either side of it from seed to seed, so the
# comparison is recorded as findings, not claimed (the table across seeds gives each
# finding's range and the seeds on which it goes the paper's way). The MoE holds more
# than twice the dense model's weights (the ratio of parameter counts is printed
# above) and spends twice its active feed-forward compute, yet with a few hundred
# batches each expert sees only a share of the gradient signal, and the gates start at
# zero, so early training routes by noise. More capacity pays when there is more to
# learn than a small dense model can hold, which a 10-customer problem with three
# attributes does not seem to be.
#
# The specialist rows show the other side of the multi-task trade. A solver that has
# never seen pickups or closed routes is poor on VRPBL; that is the edge the specialist
# claim measures, and it comes from the multi-task models having trained on closed
# routes and pickups at all (a specialist of a closed variant would be a harder
# comparison, not run here). On the open variants, its own attribute, the specialist
# stays stronger than the multi-task models, which at this budget have not learned
# open routes as well as it has.
#
# ## What a broken solver does
#
# Each paper claim should fail for a broken solver. The tests
# (`tests/test_ch18_routing_moe.py`) break one ingredient at a time at the default
# budget: a policy that ignores the network and picks uniformly among feasible nodes
# (it fails the heuristic claim); a specialist trained on CVRP but scored on OVRP (it
# loses the specialist's advantage); the OVRP budget in the multi-task solvers' place
# (no multi-task training: a specialist, retrained on fresh instances, is no better
# than the first on VRPBL). A router whose gates were never trained fails the routing
# check (zero gates tie onto the same two experts: a share of 0).

# %% [markdown]
# ## Explore
#
# Compose a variant from its attributes, pick a solver and, for MVMoE, how many experts
# stay switched on and how many each node is routed to *at inference* (the trained
# gates are kept; with fewer experts the others are masked out of the top-$k$). Left:
# the routes on one test instance (pickups as triangles; open routes end where they
# stop), with the exact optimum. Right: the share of top-$k$ slots of each expert, per
# layer, on the test instances of that variant.

# %% tags=["hide-input"]
import ipywidgets as W

N_WIDGET = min(16, cfg.n_test)


def set_routing(model, k_w, m_w):
    for layer in model.moe_layers():
        layer.k = min(k_w, m_w)
        layer.keep = (None if m_w >= layer.m else torch.arange(layer.m) < m_w)


def draw_routes(ax, coords, demand, v, seq, title):
    is_open, pickups, _ = attributes(v)
    xy = coords.numpy()
    route = [0]
    for node in [int(s) for s in seq[1:]]:
        route.append(node)
        if node == 0:
            if len(route) > 2:
                path = route[:-1] if is_open else route
                ax.plot(xy[path, 0], xy[path, 1], color="grey", lw=1.2)
            route = [0]
    back = pickups.numpy()
    ax.scatter(xy[1:][~back, 0], xy[1:][~back, 1], s=22, color="black", zorder=3)
    ax.scatter(xy[1:][back, 0], xy[1:][back, 1], s=40, marker="^", color="white",
               edgecolor="black", zorder=3)
    ax.scatter(*xy[0], s=70, marker="s", color="black", zorder=3)
    ax.set(xlim=(-0.05, 1.05), ylim=(-0.05, 1.05), aspect="equal", title=title)
    ax.set_xticks([])
    ax.set_yticks([])


def update(open_routes, backhaul, limit, solver, experts_on, routed_to, instance):
    v = {flags: name for name, flags in VARIANTS.items()}[
        (int(open_routes), int(backhaul), int(limit))]
    model = models[solver]
    set_routing(model, routed_to, experts_on)
    i = min(instance, N_WIDGET - 1)
    try:
        cost, seq = solve(model, test_coords[i:i + 1], test_demand[i:i + 1], v)
        share = (expert_usage(model, test_coords[:N_WIDGET], test_demand[:N_WIDGET], v)
                 if model.moe_layers() else None)
    finally:
        set_routing(model, top_k, experts)
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.4), width_ratios=[1, 1.3])
    tag = "unseen" if v in UNSEEN else "trained"
    draw_routes(axes[0], test_coords[i], test_demand[i], v, seq[0],
                f"{v} ({tag}): {float(cost[0]):.3f}, optimum {optimum[v][i]:.3f}")
    if share is None:
        axes[1].text(0.5, 0.5, "dense model: no experts", ha="center", va="center")
        axes[1].set_axis_off()
    else:
        im = axes[1].imshow(share, vmin=0, vmax=1, cmap="viridis")
        fig.colorbar(im, ax=axes[1], shrink=0.8, label="share of top-k slots")
        axes[1].set(xticks=range(experts), yticks=range(len(layer_names)),
                    xlabel="expert", title=f"expert usage on {v}")
        axes[1].set_yticklabels(layer_names)
    plt.show()


controls = dict(
    open_routes=W.Checkbox(value=True, description="open routes (O)"),
    backhaul=W.Checkbox(value=True, description="backhauls (B)"),
    limit=W.Checkbox(value=False, description="length limit (L)"),
    solver=W.Dropdown(options=list(models), value="MVMoE", description="solver"),
    experts_on=W.IntSlider(value=experts, min=1, max=experts, description="experts on"),
    routed_to=W.IntSlider(value=top_k, min=1, max=experts, description="top-k"),
    instance=W.IntSlider(value=0, min=0, max=N_WIDGET - 1, description="instance"),
)
icmlbook.explore(update, controls, run=run)

# %% [markdown]
# ## Paper vs. this book
#
# | | paper | this book |
# |---|---|---|
# | variants | 16 from C, O, B, L, TW; train on 6, zero-shot on 10 | 8 from C, O, B, L; train on 4 (CVRP, OVRP, VRPB, VRPL), zero-shot on 4 |
# | instances | 50 and 100 customers, L = 3, backhauls mixed with a load bound | 10 customers, L = 2.2, classic backhauls (deliveries first on each route) |
# | model | POMO: 6 encoder layers, $d = 128$, 8 heads; MoE with 4 full-width experts, top-2, in every encoder FFN and the decoder | 3 layers, $d = 64$, 4 heads; the same MoE: 4 full-width experts, top-2, same placement (twice the dense active compute, Eq. 6) |
# | training | 5000 epochs × 20,000 instances, batch 128, Adam $10^{-4}$ | a few hundred batches of 32 (tier), Adam $10^{-3}$, clip 1 |
# | reference | HGS, LKH3, OR-Tools | the exact optimum (Eq. 9) |
# | baselines | POMO-MTL, single-task POMO | the same two, and nearest neighbour from every start |
# | hierarchical gate | MVMoE-L | implemented (Eq. 8), trained at the full tier only |
#
# **Paper coverage.** The paper's main results, and what tests each here.
#
# | the paper's result | here |
# |---|---|
# | Table 1, unseen variants: the multi-task models solve 10 unseen variants zero-shot | tested on 4: claim "zero-shot: mean unseen cost ratio to nearest neighbour" (a baseline of ours; the paper reports gaps to strong solvers) |
# | Table 1, trained variants: single-task POMO beats the multi-task models on its own variant | tested for OVRP: claim "single-task beats multi-task on its own variant" |
# | the premise that a single-task solver does not carry to other variants | claim "multi-task vs specialist on unseen VRPBL"; findings for OVRPB, OVRPL, OVRPBL |
# | Table 1: MVMoE/4E below POMO-MTL on every variant, trained and unseen | findings "MVMoE vs POMO-MTL" (mean unseen and trained cost ratios, unseen variants won) |
# | Table 1: MVMoE/4E-L close to MVMoE/4E at less compute | not tested at the default tier: MVMoE-L is trained at the full tier only |
# | few-shot fine-tuning on new variants; CVRPLIB benchmark instances | out of scope: no fine-tuning stage, and no benchmark instances at 10 customers |
# | studies of MoE configurations (number of experts, placement, routing level) | not swept: the number of experts and top-$k$ are parameters of the chapter, and the widget switches experts off at inference |
#
# **What reproduces.** One network, trained on four variants, solves four unseen
# combinations of their attributes far better than a constructive heuristic and within
# a few percent of the optimum; a specialist still wins on its own variant; training on
# several variants is what carries a solver to the unseen closed variant with pickups
# and a limit; and the routers keep every expert in use.
#
# **What does not, and why.** MVMoE's advantage over its dense twin did not reproduce:
# with the paper's full-width experts, twice the dense model's active compute and the
# same batches, the two multi-task models end within about the seed-to-seed spread of
# each other, in either order; the findings' rows in the table across seeds give the
# ratios and the number of seeds on which MVMoE is ahead. The paper's own margin is
# 0.15-0.5 gap points, at 5-10 times our instance size and thousands of times our
# training. At our budget the multi-task models are also undertrained on open routes:
# their gap on OVRP, a training variant, stays several times the specialist's (the
# table of gaps above), and on the three unseen open variants the OVRP specialist beats
# them (findings "multi-task vs specialist"), so the zero-shot headline holds only in
# part. The full tier trains longer and adds MVMoE-L; it is not what the verdict
# grades. Not attempted: time windows, few-shot fine-tuning, CVRPLIB instances.

# %% [markdown]
# ## Exercises

# %% [markdown] tags=["exercise"]
# **1. What a constraint can cost.** Without running anything, say which pairs of the
# eight variants have optima in a fixed order on *every* instance, and why. Then check
# your orders on the test instances with the exact optimum (Eq. 9). Why can VRPB and
# CVRP not be ordered?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 1
# **Adding the limit can only cost.** A solution of VRPL is a solution of CVRP that
# also meets the length limit, so the best VRPL solution is among the CVRP solutions:
# $f_{V\mathrm{L}} \ge f_V$ for each of CVRP, OVRP, VRPB and OVRPB.
#
# **Opening the routes can only save.** Take the best closed solution and drop its
# return legs. Every route keeps its loads and its order of deliveries and pickups,
# and it gets shorter, so it also meets an open limit, which leaves out the return
# leg. It is feasible for the open variant and costs less, so
# $f_{\mathrm{O}V} \le f_V$ for each of CVRP, VRPB, VRPL and VRPBL.
#
# **Backhauls change the problem, not just its feasible set.** In CVRP the two last
# customers add to the delivered load; in VRPB they are pickups, counted against a
# capacity of their own but only after the route's deliveries. A CVRP solution that
# serves a pickup before a delivery is infeasible in VRPB, and a VRPB route whose
# deliveries and pickups each fit but together exceed $Q$ is infeasible in CVRP, so
# neither feasible set contains the other and the optima go either way.
#
# The check counts the instances where an order is broken (none may be) and, for VRPB
# against CVRP, on what share of instances each is the cheaper one.
# :::

# %% tags=["solution", "hide-cell"]
S_ORDER_BROKEN = 0  # a theorem: the orders hold on every instance (to float rounding)
limited = [("CVRP", "VRPL"), ("OVRP", "OVRPL"), ("VRPB", "VRPBL"), ("OVRPB", "OVRPBL")]
opened = [("OVRP", "CVRP"), ("OVRPB", "VRPB"), ("OVRPL", "VRPL"), ("OVRPBL", "VRPBL")]
broken = sum(int(np.sum(optimum[lo] > optimum[hi] + 1e-9))
             for lo, hi in limited + opened)
cheaper_b = float(np.mean(optimum["VRPB"] < optimum["CVRP"] - 1e-9))
dearer_b = float(np.mean(optimum["VRPB"] > optimum["CVRP"] + 1e-9))
print(f"{len(limited + opened)} ordered pairs x {cfg.n_test} instances: "
      f"{broken} broken; VRPB cheaper than CVRP on {cheaper_b:.0%}, "
      f"dearer on {dearer_b:.0%}")
icmlbook.solution_check("instances breaking an order", broken, "<=", S_ORDER_BROKEN)

# %% [markdown] tags=["exercise"]
# **2. Gates that start at zero.** The gates start with $W_g = W_{\text{noise}} = 0$
# (Eq. 5). Which experts does an untrained MoE layer send the nodes to at evaluation,
# and which in training? What makes the router learn, and why does the chapter check
# that $W_g$ has moved?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 2
# **At evaluation** there is no noise and every logit is $x W_g = 0$: all experts tie.
# The top-$k$ of a tie is decided by the sort, the same for every node, so every node
# goes to the same $k$ experts and the other $m - k$ receive nothing.
#
# **In training** the logits are pure noise,
# $\varepsilon_j\,(\mathrm{softplus}(0) + 0.01)$ with independent
# $\varepsilon_j \sim \mathcal N(0, 1)$, the same scale for every expert. By symmetry
# each expert is among the $k$ largest with probability $k/m$, and its share of the
# top-$k$ slots is $1/m$.
#
# So the noise spreads the nodes evenly at first, and each expert receives gradients
# from the nodes it was given. The router's own weights learn only through the gates'
# values and the load-balancing loss (Eq. 7). If $W_g$ never moved, evaluation would
# route by the tie alone, to the same $k$ experts, whatever the node, which is why the
# chapter checks that the gates have trained. The check below counts the experts an
# untrained layer uses at evaluation and measures how far the training-time shares
# sit from $1/m$, on random node embeddings.
# :::

# %% tags=["solution", "hide-cell"]
S_TIED = top_k  # experts used at evaluation: the tie picks the same k for every node
S_SPREAD = 0.01  # |share - 1/m| in training: > 5 binomial std errors at 20,000 nodes
fresh = MoE(cfg.d, 8, experts, top_k)
x = torch.randn(20_000, cfg.d, generator=run.generator("exercise 2"))
with torch.no_grad():
    fresh.eval()
    fresh(x)
    used = int((fresh.counts > 0).sum())
    fresh.train()
    fresh(x)
spread = float((fresh.counts / fresh.counts.sum() - 1 / experts).abs().max())
print(f"untrained, evaluation: {used} of {experts} experts used; training: shares "
      f"{np.round((fresh.counts / fresh.counts.sum()).numpy(), 3)}")
icmlbook.solution_check("experts used at evaluation, untrained", used, "<=", S_TIED)
icmlbook.solution_check("largest |training share - 1/m|, untrained", spread, "<=",
                        S_SPREAD)

# %% [markdown] tags=["exercise"]
# **3. What the ×8 augmentation buys.** Decode MVMoE greedily on the unseen variants
# with and without the eight flips and swaps of the coordinates. Why can the
# augmented solution never be worse on any instance? How much of the gap to the
# optimum does the augmentation remove?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 3
# Flips and swaps of the unit square keep every distance, so a solution's cost (Eq. 1)
# is the same on all eight copies of an instance. The first of the eight transforms
# is the identity: the augmented decoder keeps the best of a set of candidates that
# contains the plain one, so it cannot do worse, instance by instance. It can do
# better because the network is not invariant to the transforms: it reads the
# coordinates, so each copy can lead its greedy decoder to different routes.
#
# The cell decodes the unseen variants once on all eight copies (40 test instances at
# the default tier, all of them at smoke) and compares the identity copy with the best
# of eight: how much worse the best of eight ever is (never: the value is at most 0),
# and the mean gap to the optimum each way.
# :::

# %% tags=["solution", "hide-cell"]
S_NEVER_WORSE = 0.0  # a theorem: the best of eight includes the plain decode
n_aug = min(40, cfg.n_test)
worse, gap_plain, gap_aug = -math.inf, [], []
with torch.no_grad():
    for v in UNSEEN:
        c, d = test_coords[:n_aug], test_demand[:n_aug]
        cost = rollout(models["MVMoE"], augment(c), d.repeat(8, 1), v)[0]
        best = cost.view(8, n_aug, -1).min(-1).values  # (transform, instance)
        plain, aug = best[0].numpy(), best.min(0).values.numpy()
        worse = max(worse, float((aug - plain).max()))
        gap_plain.append(100 * np.mean(plain / optimum[v][:n_aug] - 1))
        gap_aug.append(100 * np.mean(aug / optimum[v][:n_aug] - 1))
print(f"MVMoE, mean unseen gap: x1 {np.mean(gap_plain):.2f}%, "
      f"x8 {np.mean(gap_aug):.2f}%")
icmlbook.solution_check("largest (x8 - x1) cost on any instance", worse, "<=",
                        S_NEVER_WORSE)

# %% [markdown]
# ## References
#
# - J. Zhou, Z. Cao, Y. Wu, W. Song, Y. Ma, J. Zhang, C. Xu. MVMoE: Multi-Task Vehicle
#   Routing Solver with Mixture-of-Experts. ICML 2024.
# - Y.-D. Kwon, J. Choo, B. Kim, I. Yoon, Y. Gwon, S. Min. POMO: Policy Optimization
#   with Multiple Optima for Reinforcement Learning. NeurIPS 2020.
# - F. Liu, X. Lin, Z. Wang, Q. Zhang, X. Tong, M. Yuan. Multi-Task Learning for
#   Routing Problem with Cross-Problem Zero-Shot Generalization. KDD 2024.
# - N. Shazeer, A. Mirhoseini, K. Maziarz, A. Davis, Q. Le, G. Hinton, J. Dean.
#   Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer.
#   ICLR 2017.
# - W. Kool, H. van Hoof, M. Welling. Attention, Learn to Solve Routing Problems!
#   ICLR 2019.

# %% tags=["remove-cell"]
run.finish();
