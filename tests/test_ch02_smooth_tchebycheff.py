"""Chapter 02: the scalarizations' invariants, exact solutions, and claims that fail when broken."""
import math
import types

import numpy as np
import pytest
import torch
from helpers import chapter_defs

from icmlbook.session import Session

ch = chapter_defs("ch02_smooth_tchebycheff")
torch.set_num_threads(1)

def stream(seed, name):
    """The chapter's named random stream at a seed, as run.generator(name) draws it."""
    run = types.SimpleNamespace(seed=seed, chapter="02_smooth_tchebycheff")
    return torch.Generator().manual_seed(Session.stream_seed(run, name))


def gen(k):
    """A fixed torch generator for the unit tests."""
    return torch.Generator().manual_seed(k)


PREFS = torch.tensor(np.stack([ch.PREF_W, 1 - ch.PREF_W], axis=1))
G_STAR = np.array([ch.tch_optimum(ch.concave_front, lam)[1] for lam in PREFS.numpy()])


def concave_run(seed, method, mu=0.01, scalarizer=None, opt="adam", lr=0.05, steps=300,
                n_starts=3):
    """The chapter's concave experiment at the default tier: final objectives (S, P, 2)."""
    x0 = ch.starting_points(stream(seed, "starting points"), n_starts)
    F = ch.objective_history(x0, PREFS, method, mu, opt, lr, steps,
                             scalarizer=scalarizer or ch.scalarize)
    return ch.summarise(F[-1], PREFS, G_STAR)


def plugged(stch):
    """scalarize() with a (broken) STCH function in place of Eq. 3."""
    def scalarizer(method, f, lam, mu=0.01, z=0.0):
        return stch(f, lam, mu, z) if method == "STCH" else ch.scalarize(method, f, lam, mu, z)
    return scalarizer


def soft_min(f, lam, mu, z=0.0):
    """Broken: a soft-MIN (the best weighted objective) instead of a soft-max."""
    return -mu * torch.logsumexp(-lam * (f - z) / mu, dim=-1)


def hard_max(f, lam, mu, z=0.0):
    """Broken: the softmax replaced by its mu -> 0 limit, i.e. plain TCH."""
    return (lam * (f - z)).max(-1).values


# -- the scalarizations ------------------------------------------------------------------
@pytest.mark.parametrize("m", [2, 3, 7])
@pytest.mark.parametrize("mu", [1e-3, 0.05, 1.0, 30.0])
def test_log_sum_exp_sandwich(m, mu):
    # Eq. 5: max v <= mu lse(v / mu) <= max v + mu log m, on random values
    gen = torch.Generator().manual_seed(m)
    f = 3 * torch.rand(500, m, generator=gen, dtype=torch.float64)
    lam = torch.distributions.Dirichlet(torch.ones(m, dtype=torch.float64)).sample((500,))
    tch = ch.tch_scalarization(f, lam)
    stch = ch.stch_scalarization(f, lam, mu)
    assert torch.all(tch <= stch + 1e-12)
    assert torch.all(stch <= tch + mu * math.log(m) + 1e-12)


def test_limits_tch_and_ls():
    gen = torch.Generator().manual_seed(0)
    f = torch.rand(100, 3, generator=gen, dtype=torch.float64)
    lam = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    z = torch.tensor([-0.1, 0.0, -0.2], dtype=torch.float64)
    # mu -> 0: TCH
    assert torch.allclose(ch.stch_scalarization(f, lam, 1e-6, z), ch.tch_scalarization(f, lam, z),
                          atol=1e-5)
    # mu -> inf: mu log m + LS / m
    big = 1e5
    approx = big * math.log(3) + ch.ls_scalarization(f, lam, z) / 3
    assert torch.allclose(ch.stch_scalarization(f, lam, big, z), approx, atol=1e-4)


def test_no_overflow_at_small_mu():
    f = torch.tensor([[0.9, 0.95]], dtype=torch.float64)
    lam = torch.tensor([0.5, 0.5], dtype=torch.float64)
    val = ch.stch_scalarization(f, lam, 1e-4)  # v / mu = 4750: exp overflows naively
    assert torch.isfinite(val).all()
    assert val.item() == pytest.approx(0.475, abs=1e-4 * math.log(2) + 1e-12)


def test_gradient_is_softmax_weighted_sum():
    # Eq. 4 on a 3-objective problem, at several temperatures
    gen = torch.Generator().manual_seed(1)
    lam = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    for mu in (0.01, 0.1, 2.0):
        x = torch.randn(6, generator=gen, dtype=torch.float64, requires_grad=True)
        f = torch.stack([(x ** 2).sum(), ((x - 1) ** 2).sum() / 3, torch.sin(x).sum() + 2])
        grads = torch.stack([torch.autograd.grad(fi, x, retain_graph=True)[0] for fi in f])
        pi = ch.stch_weights(f, lam, mu)
        assert pi.sum().item() == pytest.approx(1.0)
        expected = (pi[:, None] * lam[:, None] * grads).sum(0)
        got = torch.autograd.grad(ch.stch_scalarization(f, lam, mu), x)[0]
        assert torch.allclose(got, expected, atol=1e-10)


def test_batched_solve_equals_separate_solves():
    x0 = ch.starting_points(gen(3), 1)[0]  # (P, d)
    both = ch.solve(ch.concave_objectives, PREFS, x0, "STCH", 0.01, "adam", 0.05, 50)
    for p in (0, 5, 10):
        one = ch.solve(ch.concave_objectives, PREFS[p], x0[p], "STCH", 0.01, "adam", 0.05, 50)
        assert torch.allclose(both[:, p], one, atol=1e-12)
    # a batch of learning rates is a batch of separate runs
    lrs = torch.tensor([0.01, 0.3], dtype=torch.float64).view(2, 1, 1)
    for rule in ch.RULES:
        batch = ch.solve(ch.concave_objectives, PREFS, x0, "TCH", 0.01, rule, lrs, 40)
        for i, lr in enumerate((0.01, 0.3)):
            one = ch.solve(ch.concave_objectives, PREFS, x0, "TCH", 0.01, rule, lr, 40)
            assert torch.allclose(batch[:, i], one, atol=1e-12)


@pytest.mark.slow
def test_adam_rule_equals_torch_adam():
    x0 = ch.starting_points(gen(1), 1)[0]
    ours = ch.solve(ch.concave_objectives, PREFS, x0, "STCH", 0.01, "adam", 0.05, 30)[-1]
    x = x0.clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=0.05)
    for _ in range(30):
        opt.zero_grad()
        ch.stch_scalarization(ch.concave_objectives(x), PREFS, 0.01).sum().backward()
        opt.step()
    assert torch.allclose(ours, x.detach(), atol=1e-10)


def test_subgradient_rule_takes_normalised_shrinking_steps():
    x0 = ch.starting_points(gen(2), 1)[0]
    traj = ch.solve(ch.concave_objectives, PREFS, x0, "TCH", 0.01, "subgradient", 0.3, 5)
    steps = (traj[1:] - traj[:-1]).norm(dim=-1)  # (5, P)
    expected = 0.3 / torch.sqrt(torch.arange(1, 6, dtype=torch.float64))
    assert torch.allclose(steps, expected[:, None].expand_as(steps), atol=1e-12)


# -- the problem and its exact TCH solutions ---------------------------------------------
def test_exact_tch_symmetric_preference():
    t, g = ch.tch_optimum(ch.concave_front, (0.5, 0.5))
    assert t == pytest.approx(0.0, abs=1e-12)
    assert ch.concave_front(t) == pytest.approx([1 - math.exp(-1)] * 2)  # (0.632, 0.632)
    assert g == pytest.approx(0.5 * (1 - math.exp(-1)))


@pytest.mark.parametrize("problem", ["concave", "convex"])
def test_exact_tch_matches_brute_force(problem):
    _, front = ch.PROBLEMS[problem]
    ts = np.linspace(-1, 1, 200001)
    F = front(ts)
    for w in (0.02, 0.3, 0.7, 0.98):
        lam = np.array([w, 1 - w])
        t, g = ch.tch_optimum(front, lam)
        brute = np.max(lam * F, axis=1).min()  # a grid can only do worse than the exact optimum
        assert g <= brute + 1e-12 and brute - g < 1e-6
        f = front(t)
        assert lam[0] * f[0] == pytest.approx(lam[1] * f[1], abs=1e-12)  # on the ray


@pytest.mark.parametrize("problem", ["concave", "convex"])
def test_front_is_the_image_of_the_pareto_set(problem):
    objectives, front = ch.PROBLEMS[problem]
    t = np.linspace(-1, 1, 11)
    x = torch.tensor(t)[:, None] * torch.ones(ch.DIM, dtype=torch.float64) / math.sqrt(ch.DIM)
    assert np.allclose(objectives(x).numpy(), front(t))
    # a point off the segment is dominated by its projection onto it
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(100, ch.DIM, generator=gen, dtype=torch.float64)
    u = torch.ones(ch.DIM, dtype=torch.float64) / math.sqrt(ch.DIM)
    proj = torch.clamp(y @ u, -1, 1)[:, None] * u
    assert torch.all(objectives(proj) <= objectives(y) + 1e-12)


@pytest.mark.parametrize("mu", [0.01, 0.05, 0.2])
@pytest.mark.slow
def test_stch_symmetric_converges_to_the_middle(mu):
    # lambda = (1/2, 1/2): the exact TCH solution is x = 0; STCH with mu <= 0.2 must get there
    x0 = ch.starting_points(gen(0), 5, n_prefs=1)
    lam = torch.tensor([0.5, 0.5], dtype=torch.float64)
    x = ch.solve(ch.concave_objectives, lam, x0, "STCH", mu, "gd", 0.02, 2000)[-1]
    assert x.norm(dim=-1).max().item() < 1e-3


def test_large_mu_leaves_the_middle():
    # above mu* the STCH minimiser for lambda = (1/2, 1/2) jumps towards an endpoint
    ts = np.linspace(-1, 1, 4001)
    t = ch.stch_argmin_on_front(ch.concave_front, (0.5, 0.5), [0.01, 0.2, 1.0], ts)
    assert abs(t[0]) < 1e-3 and abs(t[1]) < 1e-3 and abs(t[2]) > 0.8
    x0 = ch.starting_points(gen(0), 3, n_prefs=1)
    x = ch.solve(ch.concave_objectives, torch.tensor([0.5, 0.5], dtype=torch.float64), x0,
                 "STCH", 1.0, "adam", 0.05, 500)[-1]
    assert x.norm(dim=-1).min().item() > 0.8


# -- the measurements --------------------------------------------------------------------
def test_hypervolume_2d():
    assert ch.hypervolume_2d([[0.0, 0.0]]) == pytest.approx(1.21)
    # two rectangles 1.0 x 0.5 and 0.5 x 1.0 overlapping in 0.5 x 0.5
    assert ch.hypervolume_2d([[0.1, 0.6], [0.6, 0.1]]) == pytest.approx(0.75, rel=1e-12)
    # a dominated point and a point beyond the reference change nothing
    base = [[0.1, 0.6], [0.6, 0.1]]
    assert ch.hypervolume_2d(base + [[0.7, 0.7], [1.2, 0.0]]) == pytest.approx(
        ch.hypervolume_2d(base))
    assert ch.hypervolume_2d(np.zeros((0, 2))) == 0.0
    # the whole concave front: 0.552
    front = ch.concave_front(np.linspace(-1, 1, 4001))
    assert ch.hypervolume_2d(front) == pytest.approx(0.552, abs=1e-3)


def test_count_distinct():
    F = np.array([[0.0, 1.0], [0.005, 0.995], [1.0, 0.0], [0.5, 0.5], [0.5, 0.515]])
    assert ch.count_distinct(F) == 3
    assert ch.count_distinct(F, tol=0.001) == 5


# -- MGDA --------------------------------------------------------------------------------
def test_min_norm_weights_two_vectors_closed_form():
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        G = torch.randn(2, 7, generator=gen, dtype=torch.float64)
        g1, g2 = G
        a = float(torch.clamp((g2 - g1) @ g2 / ((g1 - g2) @ (g1 - g2)), 0, 1))
        alpha = ch.min_norm_weights(G, iters=200)
        assert alpha[0].item() == pytest.approx(a, abs=1e-6)


def test_min_norm_weights_three_vectors_brute_force():
    gen = torch.Generator().manual_seed(2)
    G = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    alpha = ch.min_norm_weights(G, iters=500)
    assert alpha.min() >= 0 and alpha.sum().item() == pytest.approx(1.0)
    grid = np.linspace(0, 1, 201)
    best = min(np.linalg.norm(G.numpy().T @ np.array([a, b, 1 - a - b]))
               for a in grid for b in grid if a + b <= 1)
    assert torch.linalg.norm(G.T @ alpha).item() <= best + 1e-3
    # orthonormal gradients: equal weights
    eye = torch.eye(3, dtype=torch.float64)
    assert torch.allclose(ch.min_norm_weights(eye, iters=500), torch.full((3,), 1 / 3, dtype=torch.float64),
                          atol=1e-2)


def test_min_norm_weights_batched_equals_one_by_one():
    G = torch.randn(4, 3, 6, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    batch = ch.min_norm_weights(G)
    for k in range(4):
        assert torch.allclose(batch[k], ch.min_norm_weights(G[k]), atol=1e-12)


def test_mgda_uses_one_backward_per_task_and_combines_on_the_trunk():
    X, Y = ch.make_mtl_data(64, 8, torch.Generator().manual_seed(0))
    net = ch.MultiTaskNets(2, 8, gen=torch.Generator().manual_seed(0))
    losses = ch.task_losses(net, X, Y)  # (2 networks, tasks)
    grads = ch.mgda_grads(net, losses)
    trunk = list(net.trunk)
    for k in range(2):  # network by network: the min-norm point of its own task gradients
        G = torch.stack([torch.cat([g[k].flatten() for g in torch.autograd.grad(
            losses[k, i], trunk, retain_graph=True)]) for i in range(ch.MTL_TASKS)])
        alpha = ch.min_norm_weights(G)
        got = torch.cat([g[k].flatten() for g in grads[:len(trunk)]])
        assert torch.allclose(got, (alpha[:, None] * G).sum(0), atol=1e-6)
        assert torch.all(G @ got >= -1e-6)  # no task increases to first order
    # the heads: each task's head gets its own task's gradient
    heads = list(net.heads)
    own = torch.autograd.grad(losses.sum(), heads, retain_graph=True)
    for g, o in zip(grads[len(trunk):], own):
        assert torch.allclose(g, o, atol=1e-7)


def test_networks_of_a_batch_are_independent():
    X, Y = ch.make_mtl_data(64, 8, torch.Generator().manual_seed(0))
    net = ch.MultiTaskNets(3, 8, gen=torch.Generator().manual_seed(1))
    losses = ch.task_losses(net, X, Y)
    grads = torch.autograd.grad(losses[1].sum(), list(net.trunk) + list(net.heads))
    for g in grads:  # network 1's losses do not depend on networks 0 and 2
        assert g[0].abs().max() == 0 and g[2].abs().max() == 0 and g[1].abs().max() > 0


def test_train_mtl_counts_backward_passes():
    X, Y = ch.make_mtl_data(64, 8, torch.Generator().manual_seed(0))
    for method, passes in [("LS", 1), ("TCH", 1), ("STCH", 1), ("MGDA", ch.MTL_TASKS)]:
        hist, secs, n = ch.train_mtl(method, X, Y, 3, gen(0), lrs=(1e-3, 1e-2), restarts=2)
        assert n == passes and hist.shape == (4, 4, ch.MTL_TASKS) and len(secs) == 3
        assert np.allclose(hist[0], 1.0)
    # any number of tasks: MGDA needs one backward pass per task, STCH one in all
    Y5 = torch.randn(64, 5, generator=torch.Generator().manual_seed(1))
    assert ch.train_mtl("MGDA", X, Y5, 2, gen(0))[2] == 5
    assert ch.train_mtl("STCH", X, Y5, 2, gen(0))[2] == 1
    assert ch.ms_per_step("STCH", 2, 3, gen(0), n=64)[1] == 1


# -- the claims hold, and fail for broken variants ----------------------------------------
def hv_subgradient(seed, steps=300, n_starts=3):
    """HV of the classic subgradient method at its best learning rate, as in the chapter."""
    x0 = ch.starting_points(stream(seed, "starting points"), n_starts)
    gaps, F = ch.tuned_gaps(x0, PREFS, G_STAR, "TCH", 0.01, "subgradient", steps)
    return min(ch.hypervolume_2d(f) for f in F[gaps.argmin()])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.slow
def test_concave_claims_hold(seed):
    ls, tch, stch = (concave_run(seed, m) for m in ("LS", "TCH", "STCH"))
    assert stch["distinct"] >= ch.C_DISTINCT and stch["hv"] >= ch.C_HV_VS_LS * ls["hv"]
    assert stch["hv"] >= ch.C_HV_VS_SUB * hv_subgradient(seed)
    assert stch["max_gap"] <= ch.C_SMOOTH * tch["max_gap"]
    assert ls["distinct"] <= ch.C_LS_DISTINCT
    for mu in ch.BOUND_MUS:
        assert concave_run(seed, "STCH", mu)["max_gap"] - mu * math.log(2) <= ch.C_BOUND_SLACK


@pytest.mark.slow
def test_coverage_claims_fail_without_the_temperature():
    # STCH without the division by mu (the chapter's broken example) is LS in disguise
    ls, broken = concave_run(0, "LS"), concave_run(0, "STCH", scalarizer=ch.scalarize_broken)
    assert broken["distinct"] < ch.C_DISTINCT
    assert broken["hv"] < ch.C_HV_VS_LS * ls["hv"]
    assert broken["hv"] < ch.C_HV_VS_SUB * hv_subgradient(0)
    # a soft-min heads for the best objective, an endpoint: it fails the HV claims too
    soft = concave_run(0, "STCH", scalarizer=plugged(soft_min))
    assert soft["hv"] < ch.C_HV_VS_SUB * hv_subgradient(0)


def test_ls_check_fails_for_a_nonlinear_ls():
    # an "LS" that is not linear (weighted sum of squares) reaches the concave part
    def squared_ls(method, f, lam, mu=0.01, z=0.0):
        return (lam * (f - z) ** 2).sum(-1)
    assert concave_run(0, "LS", scalarizer=squared_ls)["distinct"] > ch.C_LS_DISTINCT


@pytest.mark.slow
def test_bound_check_fails_for_broken_variants():
    for stch in (soft_min, ch.stch_missing_temperature):
        excess = max(concave_run(0, "STCH", mu, scalarizer=plugged(stch))["max_gap"]
                     - mu * math.log(2) for mu in ch.BOUND_MUS)
        assert excess > ch.C_BOUND_SLACK


@pytest.mark.slow
def test_constant_step_claim_fails_without_smoothing():
    tch = concave_run(0, "TCH")
    # a hard argmax in place of the softmax is the subgradient method: no gain
    hard = concave_run(0, "STCH", scalarizer=plugged(hard_max))
    assert hard["max_gap"] > ch.C_SMOOTH * tch["max_gap"]
    # a temperature far too small for the step size behaves like TCH too
    assert concave_run(0, "STCH", mu=1e-5)["max_gap"] > ch.C_SMOOTH * tch["max_gap"]


RESTARTS = 8  # the chapter's mtl_restarts at the default tier


def mtl_scores(seed, method, scalarizer=None):
    """The chapter's multi-task measures at the default tier: (worst task, HV)."""
    X, Y = ch.make_mtl_data(ch.MTL_N, 8, stream(seed, "multi-task data"))
    hist, _, _ = ch.train_mtl(method, X, Y, 300, stream(seed, "multi-task init"), ch.MTL_LRS,
                              RESTARTS, scalarizer=scalarizer or ch.scalarize)
    worst, hv = ch.mtl_scores(hist[-1].reshape(len(ch.MTL_LRS), RESTARTS, -1))
    return worst.mean(axis=1).min(), hv.mean(axis=1).max()


def first_task_only(f, lam, mu, z=0.0):
    """Broken: the preference replaced by all weight on the first task."""
    one_hot = torch.nn.functional.one_hot(torch.tensor(0), lam.shape[-1]).to(lam.dtype)
    return ch.scalarize("STCH", f, one_hot, mu, z)


@pytest.mark.slow
def test_mtl_claims_hold_and_fail_for_broken_scalarizers():
    stch, mgda = mtl_scores(0, "STCH"), mtl_scores(0, "MGDA")
    worst_bar, hv_bar = ch.C_MTL_WORST * mgda[0], ch.C_MTL_HV * mgda[1]
    assert stch[0] <= worst_bar and stch[1] >= hv_bar
    # a soft-min focuses on the best task and leaves the worst one behind
    assert mtl_scores(0, "STCH", scalarizer=plugged(soft_min))[0] > worst_bar
    # training one task alone fails both: the worst task and the hypervolume
    one = mtl_scores(0, "STCH", scalarizer=plugged(first_task_only))
    assert one[0] > worst_bar and one[1] < hv_bar


def test_thresholds_are_the_chapters():
    # the claims' bars come from the chapter's thresholds cell, never retyped here
    assert ch.C_DISTINCT <= ch.N_PREFS and ch.C_LS_DISTINCT < ch.C_DISTINCT
    assert ch.C_HV_VS_LS > 1 and ch.C_HV_VS_SUB < 1 and 0 < ch.C_SMOOTH < 1
    assert ch.C_MTL_WORST < 1 and 0 < ch.C_MTL_HV <= 1 and ch.C_ONE_PASS == 1
    # the strict versions of the two non-inferiority claims: parity
    assert ch.C_HV_VS_SUB < ch.PARITY == 1.0 and ch.C_MTL_HV < ch.PARITY
