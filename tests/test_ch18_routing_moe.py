"""Chapter 18: variants, masks, the validator, the exact DP, the MoE layer and the
hierarchical gate, and paper claims that hold for the chapter's solvers and fail for
broken ones."""
import math

import numpy as np
import pytest
import torch
from helpers import chapter_defs

ch = chapter_defs("ch18_routing_moe")
STEPS, BATCH, N_TEST = 250, 32, 100  # the default tier


def gen(seed):
    return torch.Generator().manual_seed(seed)


# ---- variants, masks and the validator ----------------------------------------------

@pytest.mark.parametrize("variant", list(ch.VARIANTS))
def test_random_feasible_walks_pass_the_validator_with_the_same_cost(variant):
    coords, demand = ch.sample_instances(12, gen(1))
    costs, seqs = ch.random_walks(coords, demand, variant, gen(2))
    for i in range(12):
        for p in range(seqs.shape[1]):
            ok, c = ch.validate(coords[i], demand[i], variant, seqs[i, p])
            assert ok and abs(c - float(costs[i, p])) < ch.C_COST


def test_the_validator_rejects_each_kind_of_violation():
    coords, demand = ch.sample_instances(1, gen(3))
    c, d = coords[0], demand[0].clone()
    heavy = torch.full((10,), 9.0)  # 90 > CAPACITY on one route
    assert not ch.validate(c, heavy, "CVRP", [0] + list(range(1, 11)) + [0])[0]
    singles = [0] + [x for i in range(1, 11) for x in (i, 0)]
    assert ch.validate(c, d, "CVRP", singles)[0]
    assert not ch.validate(c, d, "CVRP", singles[:-2] + [0])[0]  # a customer missing
    assert not ch.validate(c, d, "CVRP", singles[:3] + singles[1:])[0]  # served twice
    # a pickup (customer 10) before a delivery (customer 1) on one route
    order = [0, 10, 1, 0] + [x for i in range(2, 10) for x in (i, 0)]
    assert ch.validate(c, d, "CVRP", order)[0] == (d[0] + d[9] <= ch.CAPACITY)
    assert not ch.validate(c, d, "VRPB", order)[0]
    # a route longer than the limit: all customers in the order of their angle
    far = torch.tensor([[0.5, 0.5]] + [[0.5 + 0.5 * math.cos(a), 0.5 + 0.5 * math.sin(a)]
                                       for a in np.linspace(0, 6, 10)])
    one = torch.ones(10)
    tour = [0] + list(range(1, 11)) + [0]
    assert ch.validate(far, one, "CVRP", tour)[0]
    assert not ch.validate(far, one, "VRPL", tour)[0]


def test_mask_depot_rule_and_first_stops():
    coords, demand = ch.sample_instances(4, gen(4))
    assert ch.first_stops("VRPB").tolist() == list(range(1, 9))
    assert ch.first_stops("CVRP").tolist() == list(range(1, 11))
    env = ch.RoutingEnv(coords, demand, "VRPB", 8)
    assert not env.mask()[..., 0].any()  # never stay at the depot before the end
    env.step(ch.first_stops("VRPB")[None].expand(4, -1))
    assert env.mask()[..., 0].all()
    env.step(torch.full((4, 8), 10))  # a pickup: no delivery may follow on this route
    assert not env.mask()[..., 1:9].any()


def test_open_routes_drop_the_return_leg():
    coords, demand = ch.sample_instances(1, gen(5))
    singles = [0] + [x for i in range(1, 11) for x in (i, 0)]
    _, closed = ch.validate(coords[0], demand[0], "CVRP", singles)
    _, opened = ch.validate(coords[0], demand[0], "OVRP", singles)
    depot_d = torch.cdist(coords[0, :1], coords[0, 1:]).sum()
    assert closed == pytest.approx(2 * float(depot_d), abs=1e-5)
    assert opened == pytest.approx(float(depot_d), abs=1e-5)


# ---- the exact optimum --------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1])
def test_exact_dp_matches_brute_force(seed):
    coords, demand = ch.sample_instances(2, gen(seed), 5)
    demand = demand * 3
    for v in ch.VARIANTS:
        dp = ch.exact_optimum(coords, demand, v)
        for i in range(2):
            assert abs(dp[i] - ch.brute_force(coords[i], demand[i], v)) <= ch.C_DP


def test_exact_optimum_orders_the_variants():
    coords, demand = ch.sample_instances(30, gen(6))
    cache = {}
    opt = {v: ch.exact_optimum(coords, demand, v, cache) for v in ch.VARIANTS}
    assert np.all(opt["VRPL"] >= opt["CVRP"] - 1e-9)  # a constraint can only cost
    assert np.all(opt["OVRP"] <= opt["CVRP"] + 1e-9)  # dropping return legs only saves
    nn_cost = ch.rollout_nearest(coords, demand, "CVRP")[0].min(1).values.numpy()
    assert np.all(nn_cost >= opt["CVRP"] - 1e-5)


# ---- the MoE layer, the hierarchical gate, the solver ---------------------------------

def explicit_moe(layer, x):
    """Eq. 4 one expert at a time: sum_j G_j E_j(x)."""
    g = layer.gates(x)
    out = 0
    for j in range(layer.m):
        w_in = layer.inp.weight[j * layer.h:(j + 1) * layer.h]
        z = x @ w_in.T
        if layer.act:
            z = torch.relu(z + layer.inp.bias[j * layer.h:(j + 1) * layer.h])
            e = z @ layer.out.weight[:, j * layer.h:(j + 1) * layer.h].T + layer.bias[j]
        else:  # a linear expert W_j x + e_j
            e = z + layer.bias[j]
        out = out + g[..., j:j + 1] * e
    return out


@pytest.mark.parametrize("act", [True, False])
def test_packed_experts_equal_the_sum_over_experts(act):
    torch.manual_seed(0)
    layer = ch.MoE(16, 8 if act else 16, 4, 2, act=act).eval()
    with torch.no_grad():
        layer.w_g.normal_()
        layer.bias.normal_()
    x = torch.randn(5, 7, 16)
    assert torch.allclose(layer(x), explicit_moe(layer, x), atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_gates_are_sparse_and_sum_to_one(k):
    torch.manual_seed(1)
    layer = ch.MoE(16, 8, 4, k)
    with torch.no_grad():
        layer.w_g.normal_()
        layer.w_noise.normal_()
    x = torch.randn(50, 16)
    for mode in (layer.train, layer.eval):
        mode()
        g = layer.gates(x)
        assert torch.allclose(g.sum(-1), torch.ones(50), atol=1e-6)
        assert ((g > 0).sum(-1) == k).all()


def test_load_balancing_loss_is_zero_when_balanced_and_trains_the_gates():
    assert float(ch.cv_squared(torch.ones(4))) == pytest.approx(0)
    assert float(ch.cv_squared(torch.tensor([1.0, 0, 0, 0]))) == pytest.approx(3)
    layer = ch.MoE(16, 8, 4, 2).train()
    x = torch.randn(64, 16)
    layer(x)
    layer.aux.backward()
    assert layer.w_g.grad.abs().sum() > 0 and layer.w_noise.grad.abs().sum() > 0


def test_zero_gates_tie_onto_the_same_experts_without_noise():
    layer = ch.MoE(16, 8, 4, 2).eval()
    layer.gates(torch.randn(40, 16))
    assert (layer.counts > 0).sum() == 2  # why the claim needs trained gates


def test_hierarchical_gate_keeps_its_branch_for_a_rollout():
    torch.manual_seed(2)
    h = ch.HierarchicalMoE(16, 16, 4, 2).eval()  # linear experts are d x d
    with torch.no_grad():
        h.w1.normal_()
    x = torch.randn(3, 5, 16)
    y = h(x)
    branch = h.branch
    want = (h.g1[0] * h.sparse(x)) if branch == 0 else (h.g1[1] * h.dense(x))
    assert torch.allclose(y, want, atol=1e-6)
    h(torch.randn(3, 5, 16) * 10)
    assert h.branch == branch
    h.reset()
    assert h.branch is None


@pytest.mark.parametrize("k", [1, 2, 4])
def test_full_width_experts_cost_top_k_dense_layers(k):
    moe, dense = ch.Solver("moe", 64, 3, 4, k), ch.Solver("dense", 64, 3, 4, k)
    assert ch.active_macs(moe) == k * ch.active_macs(dense)  # Eq. 6
    assert moe.layers[0].ff.h == ch.D_FF and moe.combine.h == 64


def test_augmentation_keeps_distances_and_solutions_are_feasible():
    coords, demand = ch.sample_instances(3, gen(7))
    aug = ch.augment(coords)
    assert aug.shape == (24, 11, 2)
    d0 = torch.cdist(coords, coords)
    for t in range(8):
        assert torch.allclose(torch.cdist(aug[3 * t:3 * t + 3], aug[3 * t:3 * t + 3]), d0,
                              atol=1e-6)
    for kind in ("dense", "moe", "light"):
        model = ch.Solver(kind, 16, 1).eval()
        for v in ("OVRPBL", "VRPB"):
            cost, seq = ch.solve(model, coords, demand, v)
            for i in range(3):
                ok, c = ch.validate(coords[i], demand[i], v, seq[i])
                assert ok and abs(c - float(cost[i])) < ch.C_COST


def test_training_lowers_the_cost():
    torch.manual_seed(0)
    model = ch.Solver("moe", 32, 2)
    hist = ch.train(model, ch.TRAIN_VARIANTS, 40, 32, gen(8), 0.01)
    assert hist.shape == (40, 2) and hist[-10:, 0].mean() < hist[:10, 0].mean()


def test_thresholds_are_the_chapters():
    assert 0 < ch.C_VS_NEAREST < 1 and ch.C_SINGLE_OWN < 0
    assert 0 < ch.C_VS_SPECIALIST < 1 and 0 < ch.C_MIN_SHARE < 0.25


# ---- paper claims: they hold for the chapter's solvers, and fail for broken ones -----

@pytest.fixture(scope="module")
def trained():
    """The default tier at seed 0: three solvers and the test instances."""
    out = {}
    for name, kind, variants in [("moe", "moe", ch.TRAIN_VARIANTS),
                                 ("dense", "dense", ch.TRAIN_VARIANTS),
                                 ("single", "dense", [ch.SINGLE_TASK])]:
        torch.manual_seed(0)
        out[name] = ch.Solver(kind, 64, 3, 4, 2)
        ch.train(out[name], variants, STEPS, BATCH, gen(1), 0.01)
    coords, demand = ch.sample_instances(N_TEST, gen(10_000))
    cache = {}
    opt = {v: ch.exact_optimum(coords, demand, v, cache) for v in ch.VARIANTS}
    nearest = {v: ch.rollout_nearest(coords, demand, v)[0].min(1).values.numpy()
               for v in ch.VARIANTS}
    return out, coords, demand, opt, nearest


def cost(model, data, v):
    _, coords, demand, _, _ = data
    return ch.solve(model, coords, demand, v)[0].numpy()


def gap(c, data, v):
    return 100 * np.mean(c / data[3][v] - 1)


def test_paper_claims_hold_for_the_chapter_solvers(trained):
    models, *_ = trained
    nearest = trained[4]
    ratio = np.mean([np.mean([cost(models[m], trained, v).mean() for m in ("moe", "dense")])
                     / nearest[v].mean() for v in ch.UNSEEN])
    assert ratio <= ch.C_VS_NEAREST
    own = (gap(cost(models["single"], trained, "OVRP"), trained, "OVRP")
           - gap(cost(models["moe"], trained, "OVRP"), trained, "OVRP"))
    assert own <= ch.C_SINGLE_OWN
    spec = cost(models["single"], trained, "VRPBL").mean()
    assert np.mean([cost(models[m], trained, "VRPBL").mean()
                    for m in ("moe", "dense")]) / spec <= ch.C_VS_SPECIALIST
    share = ch.expert_usage(models["moe"], trained[1], trained[2], "VRPBL")
    assert share.min() >= ch.C_MIN_SHARE


def test_a_policy_that_ignores_the_network_fails_the_heuristic_claim(trained):
    _, coords, demand, _, nearest = trained
    ratio = np.mean([float(ch.random_walks(coords, demand, v, gen(3))[0].min(1).values.mean())
                     / nearest[v].mean() for v in ch.UNSEEN])
    assert not ratio <= ch.C_VS_NEAREST


def test_a_specialist_of_the_wrong_variant_fails_the_single_task_claim(trained):
    models = trained[0]
    torch.manual_seed(0)
    wrong = ch.Solver("dense", 64, 3)
    ch.train(wrong, ["CVRP"], STEPS, BATCH, gen(1), 0.01)
    own = (gap(cost(wrong, trained, "OVRP"), trained, "OVRP")
           - gap(cost(models["moe"], trained, "OVRP"), trained, "OVRP"))
    assert not own <= ch.C_SINGLE_OWN


def test_without_multi_task_training_the_specialist_claim_fails(trained):
    # the multi-task training removed: the same budget spent on OVRP alone, in the
    # multi-task solvers' place (the specialist itself, and a second one trained on
    # another stream of OVRP instances)
    models = trained[0]
    spec = cost(models["single"], trained, "VRPBL").mean()
    assert not cost(models["single"], trained, "VRPBL").mean() / spec <= ch.C_VS_SPECIALIST
    torch.manual_seed(0)
    other = ch.Solver("dense", 64, 3)
    ch.train(other, ["OVRP"], STEPS, BATCH, gen(2), 0.01)
    assert not cost(other, trained, "VRPBL").mean() / spec <= ch.C_VS_SPECIALIST


def test_a_collapsed_router_fails_the_routing_check(trained):
    _, coords, demand, _, _ = trained
    moe = ch.Solver("moe", 64, 3).eval()  # untrained: zero gates tie on two experts
    share = ch.expert_usage(moe, coords[:20], demand[:20], "CVRP")
    assert not share.min() >= ch.C_MIN_SHARE


def test_the_hierarchical_model_trains_and_routes():
    torch.manual_seed(0)
    model = ch.Solver("light", 16, 1)
    hist = ch.train(model, ch.TRAIN_VARIANTS, 3, 4, gen(9), 0.01)
    assert np.isfinite(hist).all() and model.combine.w1.grad is not None
    share = ch.expert_usage(model, *ch.sample_instances(3, gen(10)), "OVRPBL")
    assert np.isfinite(share).all() and share.shape == (2, 4)
