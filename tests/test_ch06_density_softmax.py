"""Chapter 06: Density-Softmax's invariants, and the paper claims, each shown to fail for a
deliberately broken variant."""
import math

import numpy as np
import pytest
import torch
from helpers import chapter_defs

import icmlbook

ch = chapter_defs("ch06_density_softmax")
torch.set_num_threads(1)


# -- invariants ------------------------------------------------------------------------------

def small_toy_ds(seed=0, steps=150):
    torch.manual_seed(seed)
    X, y = ch.moons(400, np.random.default_rng(seed))
    X_val, _ = ch.moons(200, np.random.default_rng(seed + 1))
    net = ch.train_classifier(ch.Classifier(2, 2, lipschitz=0.9), X, y, steps,
                              torch.Generator().manual_seed(seed))
    return net, ch.build_density_softmax(net, X, y, X_val, flow_steps=80, head_steps=30)


@pytest.fixture(scope="module")
def toy_small():
    return small_toy_ds()


def test_argmax_invariance(toy_small):
    # a positive scale of the logits never changes the argmax
    _, ds = toy_small
    x = torch.randn(2000, 2) * 2
    with torch.no_grad():
        s = ds.scale(x)
        keep = s > 0  # where p~ has underflowed to 0 every logit is 0: a tie, by design
        assert keep.sum() >= 500 and torch.all(s <= 1.0)
        assert torch.equal(ds(x)[keep].argmax(1), ds.g(ds.f(x))[keep].argmax(1))
        assert torch.all(ds(x)[s == 0] == 0)


def test_far_point_is_uniform(toy_small):
    # at x = (50, 50) the density scale vanishes and the entropy is log 2
    _, ds = toy_small
    p = ch.predict(ds, torch.tensor([[50.0, 50.0]])).numpy()
    assert ch.entropy(p)[0] == pytest.approx(math.log(2), abs=ch.C_ROUNDING)


def test_flow_logdet_matches_autograd_jacobian():
    # log|det dT/dz| of the RealNVP equals the autograd Jacobian's on a 4-d flow
    torch.manual_seed(0)
    flow = ch.RealNVP(4, n_layers=3, hidden=8).double()
    for layer in flow.layers:  # leave the identity: random last layers
        torch.nn.init.normal_(layer.net[-1].weight, std=0.5)
        torch.nn.init.normal_(layer.net[-1].bias, std=0.5)
    flow.mu.copy_(torch.tensor([0.1, -0.2, 0.3, 0.0], dtype=torch.float64))
    flow.sd.copy_(torch.tensor([1.5, 0.5, 2.0, 1.0], dtype=torch.float64))
    for z in torch.randn(5, 4, dtype=torch.float64):
        _, logdet = flow(z[None])
        J = torch.autograd.functional.jacobian(lambda v: flow(v[None])[0][0], z)
        assert logdet.item() == pytest.approx(torch.linalg.slogdet(J)[1].item(), abs=1e-5)


def test_flow_density_integrates_to_one():
    torch.manual_seed(1)
    flow = ch.RealNVP(2, n_layers=2, hidden=8)
    for layer in flow.layers:
        torch.nn.init.normal_(layer.net[-1].weight, std=0.5)
    g = torch.linspace(-9, 9, 601)
    Z = torch.cartesian_prod(g, g)
    with torch.no_grad():
        mass = flow.log_prob(Z).exp().sum() * (g[1] - g[0]) ** 2
    assert mass.item() == pytest.approx(1.0, abs=1e-2)


def test_density_scale_and_temperature():
    logp = torch.tensor([-5.0, -1.0, 0.0, 3.0])
    s = ch.density_scale(logp, 0.0, tau=2.0)
    assert torch.allclose(s, torch.tensor([math.exp(-2.5), math.exp(-0.5), 1.0, 1.0]))
    assert torch.all(ch.density_scale(torch.tensor([-1e6]), 0.0, 1.0) == 0)  # no NaN
    train, val = torch.randn(500) * 10, torch.randn(300) * 10 - 5
    tau = ch.temperature(train, val, 0.05)
    q = torch.quantile(val, 0.05)
    assert ch.density_scale(q, train.max(), tau).item() == pytest.approx(0.5, rel=1e-5)


def test_temperature_scaling_minimises_validation_nll():
    torch.manual_seed(0)
    net = ch.Classifier(2, 2)
    X, y = ch.moons(300, np.random.default_rng(0))
    T = ch.fit_temperature(net, X, y)
    with torch.no_grad():
        logits = net(X)
    nll = lambda t: float(torch.nn.functional.cross_entropy(logits / t, y))  # noqa: E731
    assert nll(T) <= min(nll(T * 1.05), nll(T / 1.05)) + 1e-9
    p = ch.predict_temperature(net, X, T)
    assert torch.equal(p.argmax(1), ch.predict(net, X).argmax(1))  # T > 0 keeps the argmax


@pytest.mark.parametrize("c", [0.9, 0.5])
def test_lipschitz_extractor_respects_the_bounds_of_eq2(c):
    torch.manual_seed(0)
    X, y = ch.moons(400, np.random.default_rng(0))
    net = ch.train_classifier(ch.Classifier(2, 2, lipschitz=c), X, y, 100,
                              torch.Generator().manual_seed(0))
    lo, hi, largest = ch.lipschitz_bounds(net.f)
    assert largest <= 1.0 + 1e-5  # the baked weights have ||W||_2 <= 1 exactly
    assert lo == pytest.approx((1 - c) ** ch.DEPTH, rel=1e-3)
    assert hi == pytest.approx((1 + c) ** ch.DEPTH, rel=1e-3)
    pts = torch.randn(3000, 2) * 3
    r = ch.distance_ratios(net.f, pts, 5000, torch.Generator().manual_seed(0))
    assert lo - 1e-5 <= r.min() and r.max() <= hi + 1e-5
    # without the exact division the power-iteration estimate leaves ||W||_2 above 1
    torch.manual_seed(0)
    unbaked = ch.Classifier(2, 2, lipschitz=c)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam([p for p in unbaked.parameters() if p.requires_grad], lr=ch.LR)
    unbaked.train()
    for _ in range(100):
        idx = torch.randint(len(X), (128,), generator=gen)
        loss = torch.nn.functional.cross_entropy(unbaked(X[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    unbaked.eval()
    with torch.no_grad():
        est = [torch.linalg.matrix_norm(lin.weight, 2).item() for lin in unbaked.f.blocks]
    assert max(est) > 1.0 + 1e-3


def test_metrics():
    assert ch.auroc(np.array([2.0, 3.0]), np.array([0.0, 1.0])) == 1.0
    assert ch.auroc(np.array([0.0, 1.0]), np.array([2.0, 3.0])) == 0.0
    assert ch.auroc(np.ones(5), np.ones(7)) == 0.5
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=300), rng.normal(size=200)
    brute = np.mean((a[:, None] > b[None]) + 0.5 * (a[:, None] == b[None]))
    assert ch.auroc(a, b) == pytest.approx(brute)
    assert ch.spearman(np.arange(10), np.arange(10) ** 3) == pytest.approx(1.0)
    p = np.array([[0.8, 0.2]] * 10)
    y = np.array([0] * 8 + [1] * 2)  # 80% confident and 80% right: calibrated
    assert ch.ece(p, y) == pytest.approx(0.0, abs=1e-12)
    assert ch.ece(p, np.ones(10, int)) == pytest.approx(0.8)
    c, a, n = ch.reliability(p, y)
    assert n.sum() == 10 and c[0] == pytest.approx(0.8) and a[0] == pytest.approx(0.8)


def test_rotate_and_shift_helpers():
    X = torch.tensor([[1.5, 0.25]])
    assert torch.allclose(ch.rotate_points(X, 180), torch.tensor([[-0.5, 0.25]]), atol=1e-6)
    (D, _), _, _ = ch.digits_split(np.random.default_rng(0))
    assert torch.allclose(ch.shift_digits(D[:20], 0, 0.0, np.random.default_rng(0)), D[:20],
                          atol=1e-5)


# -- the paper claims at the chapter's default settings (seed 0), and broken variants ---------

def chapter_run():
    """The chapter's session at the default tier, seed 0: its named random streams."""
    return icmlbook.start("06_density_softmax", tier="default", seed=0)


@pytest.fixture(scope="module")
def toy():
    run = chapter_run()
    X, y = ch.moons(1000, run.rng("toy train"))
    X_val, y_val = ch.moons(500, run.rng("toy validation"))
    X_te, y_te = ch.moons(1000, run.rng("toy test"))
    X_far, _, _ = ch.far_grid(X, 70)
    m = ch.train_all(X, y, X_val, y_val, 2, 0.9, 5, 300, 200, 100, 0.05, 2, run, "toy")
    return dict(m, X=X, y=y, X_te=X_te, y_te=y_te, X_far=X_far)


@pytest.fixture(scope="module")
def digits():
    run = chapter_run()
    (X, y), (X_val, y_val), (X_te, y_te) = ch.digits_split(run.rng("digits split"))
    rng = run.rng("digits shift and OOD")
    shifted = [ch.shift_digits(X_te, a, s, rng) for a, s in ch.DIGIT_SHIFTS]
    ood = X_te[:, torch.tensor(rng.permutation(64))]
    m = ch.train_all(X, y, X_val, y_val, 10, 0.9, 5, 300, 200, 100, 0.05, 2, run,
                     "digits")
    return dict(m, X_te=X_te, y_te=y_te, shifted=shifted, ood=ood)


def ood_auroc(fn, x_in, x_out):
    return ch.auroc(fn(x_in).numpy().max(1), fn(x_out).numpy().max(1))


def shift_ece(fn, d):
    return np.mean([ch.ece(fn(x).numpy(), d["y_te"]) for x in d["shifted"]])


def accuracy(fn, d):
    return np.mean(fn(d["X_te"]).numpy().argmax(1) == d["y_te"].numpy())


def ds_fn(ds):
    return lambda x: ch.predict(ds, x)


def with_tau(ds, tau):
    """tau = inf: the density scale is 1, a plain softmax on the Lipschitz features (the
    density ignored); tau tiny: p~ underflows to 0 on test points and the logits tie."""
    return ch.DensitySoftmax(ds.f, ds.g, ds.flow, ds.logp_max, tau=tau)


def ensemble_fn(d):
    return lambda x: ch.predict_ensemble(d["members"], x)


def test_claim_far_ood_vs_ensemble_fails_without_the_density(toy):
    def gap(ds):
        return (ood_auroc(ds_fn(ds), toy["X_te"], toy["X_far"])
                - ood_auroc(ensemble_fn(toy), toy["X_te"], toy["X_far"]))
    assert gap(toy["ds"]) >= ch.C_FAR_VS_ENSEMBLE
    assert gap(with_tau(toy["ds"], float("inf"))) < ch.C_FAR_VS_ENSEMBLE


def test_ablation_claim_shift_ece_fails_without_the_density(digits):
    def gap(ds):
        return shift_ece(ds_fn(digits["ds_plain"]), digits) - shift_ece(ds_fn(ds), digits)
    assert gap(digits["ds"]) >= ch.C_SHIFT_VS_NO_LIPSCHITZ
    assert gap(with_tau(digits["ds"], float("inf"))) < ch.C_SHIFT_VS_NO_LIPSCHITZ


def test_claim_shift_ece_vs_temperature_fails_without_the_density(digits):
    erm, T = digits["members"][0], digits["T"]
    ts = shift_ece(lambda x: ch.predict_temperature(erm, x, T), digits)
    assert ts - shift_ece(ds_fn(digits["ds"]), digits) >= ch.C_SHIFT_VS_TEMPERATURE
    broken = with_tau(digits["ds"], float("inf"))
    assert ts - shift_ece(ds_fn(broken), digits) < ch.C_SHIFT_VS_TEMPERATURE


def test_claim_ood_vs_ensemble_fails_without_the_density(digits):
    ens = ood_auroc(ensemble_fn(digits), digits["X_te"], digits["ood"])

    def gap(ds):
        return ens - ood_auroc(ds_fn(ds), digits["X_te"], digits["ood"])
    assert gap(digits["ds"]) <= ch.C_OOD_VS_ENSEMBLE
    assert gap(with_tau(digits["ds"], float("inf"))) > ch.C_OOD_VS_ENSEMBLE


def test_accuracy_claim_fails_when_the_density_underflows(digits):
    erm = accuracy(lambda x: ch.predict(digits["members"][0], x), digits)
    assert erm - accuracy(ds_fn(digits["ds"]), digits) <= ch.C_ACC_DROP
    broken = with_tau(digits["ds"], 1e-3)
    assert erm - accuracy(ds_fn(broken), digits) > ch.C_ACC_DROP


def test_cost_checks_fail_for_a_sampling_density_softmax(digits):
    ds, members, lip_net = digits["ds"], digits["members"], digits["lip_net"]
    x = digits["X_te"].repeat(20, 1)
    erm = members[0]

    def sampled_ds(v):  # broken: Density-Softmax averaged over 10 dropout samples
        ds.train()
        with torch.no_grad():
            out = torch.stack([torch.softmax(ds(v), -1) for _ in range(10)]).mean(0)
        ds.eval()
        return out
    nets = members + [lip_net]
    erm_macs = ch.linear_macs_per_input(lambda v: ch.predict(erm, v), x[:10])
    assert ch.count_feature_passes(ds_fn(ds), nets, x[:10]) == ch.C_PASSES
    assert ch.linear_macs_per_input(ds_fn(ds), x[:10]) / erm_macs <= ch.C_MACS
    assert ch.count_feature_passes(sampled_ds, nets, x[:10]) == 10
    assert ch.linear_macs_per_input(sampled_ds, x[:10]) / erm_macs > ch.C_MACS
    sec = ch.median_seconds({"ds": ds_fn(ds), "broken": sampled_ds,
                             "ens": ensemble_fn(digits)}, x, 5)
    assert sec["ds"] / sec["ens"] <= ch.C_TIME_VS_ENSEMBLE
    assert sec["broken"] / sec["ens"] > ch.C_TIME_VS_ENSEMBLE


def test_refit_tau_only_changes_the_head(toy):
    net, ds = toy["lip_net"], toy["ds"]
    X, y = toy["X"], toy["y"]
    for tau in (1.0, 1000.0):
        other = ch.refit_tau(ds, net, X, y, tau, 20)
        assert other.f is ds.f and other.flow is ds.flow and other.tau == tau
        p = ch.predict(other, toy["X_te"])
        assert torch.isfinite(p).all()


def test_named_streams_pair_the_lipschitz_network_with_erm():
    # the Lipschitz network starts from ERM's weights (same stream); other members do not
    run = chapter_run()
    erm = ch.new_network(run, "toy member 0", 2, 2)
    lip = ch.new_network(run, "toy member 0", 2, 2, lipschitz=0.9)
    other = ch.new_network(run, "toy member 1", 2, 2)
    assert torch.equal(erm.f.proj.weight, lip.f.proj.weight)
    for a, b in zip(erm.f.blocks, lip.f.blocks):
        assert torch.equal(a.weight, b.parametrizations.weight.original)
        assert torch.equal(a.bias, b.bias)
    assert not torch.equal(erm.f.proj.weight, other.f.proj.weight)
    g1, g2 = run.generator("toy member 0 batches"), run.generator("toy member 0 batches")
    assert torch.equal(torch.randint(100, (50,), generator=g1),
                       torch.randint(100, (50,), generator=g2))
