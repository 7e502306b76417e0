"""Chapter 06: Density-Softmax's invariants (the brief's hidden checks), and claims that fail
when the method is broken."""
import math

import numpy as np
import pytest
import torch
from helpers import chapter_defs

ch = chapter_defs("ch06_density_softmax")
torch.set_num_threads(1)


# -- the brief's hidden checks and other invariants ----------------------------------------

def small_toy_ds(seed=0, steps=150):
    torch.manual_seed(seed)
    X, y = ch.moons(400, seed)
    X_val, _ = ch.moons(200, seed + 1)
    net = ch.train_classifier(ch.Classifier(2, 2, lipschitz=0.9), X, y, steps, seed=seed)
    return net, ch.build_density_softmax(net, X, y, X_val, flow_steps=80, head_steps=30)


@pytest.fixture(scope="module")
def toy_small():
    return small_toy_ds()


def test_argmax_invariance(toy_small):
    # (a) a positive scale of the logits never changes the argmax
    _, ds = toy_small
    x = torch.randn(2000, 2) * 2
    with torch.no_grad():
        s = ds.scale(x)
        keep = s > 1e-30  # where p~ has underflowed to 0 every logit is 0: a tie, by design
        assert keep.sum() >= 500 and torch.all(s <= 1.0)
        assert torch.equal(ds(x)[keep].argmax(1), ds.g(ds.f(x))[keep].argmax(1))
        assert torch.all(ds(x)[s == 0] == 0)


def test_far_point_is_uniform(toy_small):
    # (b) at x = (50, 50) the density scale vanishes and the entropy is log 2
    _, ds = toy_small
    p = ch.predict(ds, torch.tensor([[50.0, 50.0]])).numpy()
    assert ch.entropy(p)[0] == pytest.approx(math.log(2), abs=1e-4)


def test_flow_logdet_matches_autograd_jacobian():
    # (c) log|det dT/dz| of the RealNVP equals the autograd Jacobian's on a 4-d flow
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
    assert torch.all(ch.density_scale(torch.tensor([-1e6]), 0.0, 1.0) == 0)  # no NaN, no overflow
    train, val = torch.randn(500) * 10, torch.randn(300) * 10 - 5
    tau = ch.temperature(train, val, 0.05)
    q = torch.quantile(val, 0.05)
    assert ch.density_scale(q, train.max(), tau).item() == pytest.approx(0.5, rel=1e-5)


@pytest.mark.slow
def test_lipschitz_features_are_bi_lipschitz():
    torch.manual_seed(0)
    X, y = ch.moons(400, 0)
    c, depth = 0.9, ch.DEPTH
    net = ch.train_classifier(ch.Classifier(2, 2, lipschitz=c), X, y, 100)
    # baked: the spectral norm is about 1 (one power iteration per step slightly underestimates
    # ||W||_2, so it may exceed 1 by a little)
    sig = [torch.linalg.matrix_norm(lin.weight, 2).item() for lin in net.f.blocks]
    assert all(0.9 <= s <= 1.2 for s in sig)
    a, b = torch.randn(500, 2) * 3, torch.randn(500, 2) * 3
    with torch.no_grad():
        ratio = (net.f(a) - net.f(b)).norm(dim=1) / (net.f.proj(a) - net.f.proj(b)).norm(dim=1)
    assert ratio.max() <= np.prod([1 + c * s for s in sig]) + 1e-5
    assert ratio.min() >= np.prod([max(1 - c * s, 0.0) for s in sig]) - 1e-5


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


def test_rotate_and_shift_helpers():
    X = torch.tensor([[1.5, 0.25]])
    assert torch.allclose(ch.rotate_points(X, 180), torch.tensor([[-0.5, 0.25]]), atol=1e-6)
    (D, _), _, _ = ch.digits_split(0)
    assert torch.allclose(ch.shift_digits(D[:20], 0, 0.0, np.random.default_rng(0)), D[:20],
                          atol=1e-5)


# -- the claims, and broken variants that fail them ----------------------------------------

@pytest.fixture(scope="module")
def toy():
    torch.manual_seed(0)
    X, y = ch.moons(1000, 0)
    X_val, _ = ch.moons(500, 1000)
    X_te, y_te = ch.moons(1000, 2000)
    X_far, grid_all, grid_dist = ch.far_grid(X, 40)
    members, lip_net, ds, ds_plain = ch.train_all(X, y, X_val, 2, 0.9, 1, 300, 200, 100, 0.05,
                                                  2, seed=0)
    return dict(erm=members[0], ds=ds, X_te=X_te, y_te=y_te, X_far=X_far)


@pytest.fixture(scope="module")
def digits():
    torch.manual_seed(0)
    (X, y), (X_val, _), (X_te, y_te) = ch.digits_split(0)
    rng = np.random.default_rng(7)
    shifted = [ch.shift_digits(X_te, a, s, rng) for a, s in ch.DIGIT_SHIFTS]
    ood = X_te[:, torch.tensor(rng.permutation(64))]
    members, lip_net, ds, ds_plain = ch.train_all(X, y, X_val, 10, 0.9, 2, 300, 200, 100, 0.05,
                                                  2, seed=0)
    return dict(members=members, lip_net=lip_net, ds=ds, X_te=X_te, y_te=y_te,
                shifted=shifted, ood=ood)


def toy_far(model, d):
    p_in = ch.predict(model, d["X_te"]).numpy().max(1)
    p_far = ch.predict(model, d["X_far"]).numpy().max(1)
    return ch.auroc(p_in, p_far), p_far.mean()


def without_density(ds):
    """Broken: the density scale is ignored (tau = inf makes it 1): a plain softmax."""
    return ch.DensitySoftmax(ds.f, ds.g, ds.flow, ds.logp_max, tau=float("inf"))


def test_far_ood_claims_hold_and_fail_without_the_density(toy):
    auroc, maxp = toy_far(toy["ds"], toy)
    assert auroc >= 0.95 and maxp <= 0.6  # claim 1
    auroc, maxp = toy_far(without_density(toy["ds"]), toy)
    assert auroc < 0.95 and maxp > 0.6


def test_erm_overconfidence_claim_fails_if_the_baseline_is_density_scaled(toy):
    assert toy_far(toy["erm"], toy)[0] <= 0.7  # claim 2
    assert toy_far(toy["ds"], toy)[0] > 0.7  # a "baseline" that secretly uses the density


def test_digits_ood_claim_fails_without_the_density(digits):
    def score(model):
        return ch.auroc(ch.predict(model, digits["X_te"]).numpy().max(1),
                        ch.predict(model, digits["ood"]).numpy().max(1))
    assert score(digits["ds"]) >= 0.95  # claim 3
    assert score(without_density(digits["ds"])) < 0.95


@pytest.mark.parametrize("data", ["toy", "digits"])
def test_accuracy_claim_fails_when_the_density_underflows(data, toy, digits):
    d = toy if data == "toy" else digits
    erm = d["erm"] if data == "toy" else d["members"][0]
    tol = 0.02 if data == "toy" else 0.025

    def acc(model):
        return np.mean(ch.predict(model, d["X_te"]).numpy().argmax(1) == d["y_te"].numpy())
    assert abs(acc(d["ds"]) - acc(erm)) <= tol  # claim 4
    # broken: Eq. 1 with a tiny temperature: p~ underflows to 0 on test points, logits tie
    ds = d["ds"]
    broken = ch.DensitySoftmax(ds.f, ds.g, ds.flow, ds.logp_max, tau=1e-3)
    assert abs(acc(broken) - acc(erm)) > tol


def shift_ece(model, d):
    return np.mean([ch.ece(ch.predict(model, x).numpy(), d["y_te"]) for x in d["shifted"]])


class InvertedDensity(torch.nn.Module):
    """Broken: the scale grows off the data (1 / p~) instead of shrinking."""

    def __init__(self, ds):
        super().__init__()
        self.ds = ds

    def forward(self, x):
        z = self.ds.f(x)
        s = ch.density_scale(self.ds.flow.log_prob(z), self.ds.logp_max, self.ds.tau)
        return self.ds.g(z) / s.clamp_min(1e-6)[:, None]


def test_shift_calibration_claim_fails_for_an_inverted_density(digits):
    erm = digits["members"][0]
    assert shift_ece(digits["ds"], digits) - shift_ece(erm, digits) <= 0.0  # claim 5
    assert shift_ece(InvertedDensity(digits["ds"]), digits) - shift_ece(erm, digits) > 0.0


def test_cost_claims_fail_for_a_sampling_density_softmax(digits):
    ds, members, lip_net = digits["ds"], digits["members"], digits["lip_net"]
    x = digits["X_te"].repeat(20, 1)
    erm = members[0]
    ensemble = members * 3  # 6 passes (2 distinct members, to keep the fixture cheap)

    def ds_fn(v):
        return ch.predict(ds, v)

    def sampled_ds(v):  # broken: Density-Softmax averaged over 10 dropout samples
        ds.train()
        with torch.no_grad():
            out = torch.stack([torch.softmax(ds(v), -1) for _ in range(10)]).mean(0)
        ds.eval()
        return out
    nets = members + [lip_net]
    erm_macs = ch.linear_macs_per_input(lambda v: ch.predict(erm, v), x[:10])
    assert ch.count_feature_passes(ds_fn, nets, x[:10]) == 1
    assert ch.linear_macs_per_input(ds_fn, x[:10]) / erm_macs <= 1.5
    assert ch.count_feature_passes(sampled_ds, nets, x[:10]) == 10
    assert ch.linear_macs_per_input(sampled_ds, x[:10]) / erm_macs > 1.5
    sec = ch.median_seconds({"ds": ds_fn, "broken": sampled_ds,
                             "ens": lambda v: ch.predict_ensemble(ensemble, v)}, x, 5)
    assert sec["ds"] / sec["ens"] <= 0.5
    assert sec["broken"] / sec["ens"] > 0.5
