"""Chapter 14: the simulator's premise, the disentangler's invariants, and claims that fail
for broken variants (a frozen mask, the domain loss on the wrong branch, a broken generator,
scrambled labels). The claims use the chapter's mean over paired restarts, each restart
from a fixed generator; the broken variants that need no mean train once."""
import numpy as np
import pytest
import torch
from helpers import chapter_defs

ch = chapter_defs("ch14_causal_time_series_adaptation")
torch.set_num_threads(1)

# the chapter's default tier
N, T, N_TEST, KW = 512, 48, 768, dict(epochs=30, batch=128, warmup=10)


def chapter_data(seed, mode="reverse", factor=0.3):
    """The chapter's four data sets, drawn in the chapter's order."""
    rng = np.random.default_rng(seed)
    sim = dict(T=T, strength=1.2, mode=mode, factor=factor)
    xs, ys = ch.simulate(N, "source", rng, **sim)
    xt, yt = ch.simulate(N, "target", rng, **sim)
    xs_te, ys_te = ch.simulate(N_TEST, "source", rng, **sim)
    xt_te, yt_te = ch.simulate(N_TEST, "target", rng, **sim)
    return xs, ys, xt, yt, xs_te, ys_te, xt_te, yt_te


# -- the generator ---------------------------------------------------------------------

def test_simulate_shapes_labels_and_determinism():
    x, y = ch.simulate(50, "source", np.random.default_rng(0), T=40)
    assert x.shape == (50, ch.V_VARS, 40) and x.dtype == np.float32
    assert set(np.unique(y)) <= {0, 1, 2}
    x2, y2 = ch.simulate(50, "source", np.random.default_rng(0), T=40)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)


def test_spurious_coupling_per_mode():
    y = np.array([0, 1, 2])
    base = 1.2 * ch.CLASS_SIGN
    for mode in ch.SHIFT_MODES:  # the source never depends on the mode
        assert np.allclose(ch.spurious_coupling(y, "source", 1.2, mode, 0.3), base)
    assert np.allclose(ch.spurious_coupling(y, "target", 1.2, "vanish", 0.3), 0.0)
    assert np.allclose(ch.spurious_coupling(y, "target", 1.2, "attenuate", 0.3), 0.3 * base)
    assert np.allclose(ch.spurious_coupling(y, "target", 1.2, "reverse", 0.3), -0.3 * base)
    permuted = ch.spurious_coupling(y, "target", 1.2, "permute", 0.3)
    assert sorted(permuted) == sorted(base) and not np.allclose(permuted, base)
    with pytest.raises(ValueError):
        ch.spurious_coupling(y, "target", 1.2, "sideways", 0.3)


def test_target_covariate_shift_is_per_variable_scale_and_offset():
    # without label-dependent edges the distractor x4 differs only by scale 1.5, offset 1.0
    xs, _ = ch.simulate(4000, "source", np.random.default_rng(1), T=48, mode="vanish")
    xt, _ = ch.simulate(4000, "target", np.random.default_rng(1), T=48, mode="vanish")
    assert np.allclose(xt[:, 4], 1.5 * xs[:, 4] + 1.0, atol=1e-5)
    assert xt[:, 4].mean() == pytest.approx(1.0, abs=0.05)


def test_lag_corr_recovers_a_known_lag():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((200, 300))
    b = np.roll(a, 3, axis=1) + 0.1 * rng.standard_normal((200, 300))  # b(t) ~ a(t - 3)
    assert ch.lag_corr(b, a, 3).mean() > 0.95
    assert abs(ch.lag_corr(b, a, 1).mean()) < 0.05


@pytest.mark.parametrize("seed", range(5))
def test_generator_premise_holds(seed):
    # the brief's hidden check: causal statistic transfers, spurious one does not
    xs, ys, _, _, _, _, xt_te, yt_te = chapter_data(seed)
    acc = ch.statistic_accuracies(xs, ys, xt_te, yt_te)
    assert acc["causal"][1] >= ch.C_CAUSAL_TRANSFERS
    assert acc["spurious"][0] >= ch.C_SPURIOUS_IN_SOURCE
    assert acc["spurious"][1] <= ch.C_SPURIOUS_FAILS


@pytest.mark.slow
def test_generator_claims_fail_for_broken_generators():
    rng = np.random.default_rng(0)
    xs, ys = ch.simulate(N, "source", rng, T=T)
    # a target whose spurious edge does not change (attenuate by 1): the shortcut transfers
    xt, yt = ch.simulate(N, "target", rng, T=T, mode="attenuate", factor=1.0)
    assert ch.statistic_accuracies(xs, ys, xt, yt)["spurious"][1] > ch.C_SPURIOUS_FAILS
    # a target whose "causal" edge flips too: it is no longer causal, and does not transfer
    xt, yt = ch.simulate(N, "target", rng, T=T, c=-0.9)
    assert ch.statistic_accuracies(xs, ys, xt, yt)["causal"][1] < ch.C_CAUSAL_TRANSFERS
    # a source without the spurious edge: it is no shortcut there
    xs0, ys0 = ch.simulate(N, "source", rng, T=T, strength=0.0)
    assert ch.statistic_accuracies(xs0, ys0, xt, yt)["spurious"][0] < ch.C_SPURIOUS_IN_SOURCE


# -- the network's pieces ----------------------------------------------------------------

def test_edge_features_match_an_explicit_loop():
    torch.manual_seed(0)
    h = torch.randn(2, 3, 4, 10)
    c = ch.edge_features(h)
    n_lags = len(ch.LAGS)
    assert c.shape == (2, 3, 3, 4 * (n_lags + 1))
    hs = ch.standardise(h)
    for b in range(2):
        for u in range(3):
            for v in range(3):
                for i, k in enumerate(ch.LAGS):
                    want = (hs[b, u, :, k:] * hs[b, v, :, :10 - k]).sum(-1) / (10 - k)
                    assert torch.allclose(c[b, u, v, 4 * i:4 * i + 4], want, atol=1e-5)
                assert torch.allclose(c[b, u, v, 4 * n_lags:], h[b, v].mean(-1))


def test_attention_rows_sum_to_one_and_the_split_is_complete():
    torch.manual_seed(0)
    net = ch.RationaleNet()
    with torch.no_grad():
        net.mask_logits.normal_()
        x = torch.randn(6, ch.V_VARS, 32)
        r_c, r_s, att = net(x)
    assert torch.allclose(att.sum(-1), torch.ones(6, ch.V_VARS), atol=1e-5)
    M = net.mask()
    assert torch.allclose(att * M + att * (1 - M), att)  # Eq. 4: G_c + G_s = I
    assert r_c.shape == r_s.shape == (6, 32)
    base = ch.RationaleNet(learn_mask=False)  # the baselines: M = 1, so G_s = 0
    assert torch.equal(base.mask(), torch.ones(ch.V_VARS, ch.V_VARS))
    r_s_base = base(x)[1]  # ReLU(bias): the same for every window, it carries nothing
    assert torch.allclose(r_s_base, r_s_base[:1].expand_as(r_s_base))


def test_interrelation_stats_match_lag_corr_per_pair():
    x, _ = ch.simulate(20, "source", np.random.default_rng(0), T=40)
    st = ch.interrelation_stats(x)
    assert st.shape == (20, ch.V_VARS, ch.V_VARS, len(ch.LAGS))
    for u in range(ch.V_VARS):
        for v in range(ch.V_VARS):
            for i, k in enumerate(ch.LAGS):
                assert np.allclose(st[:, u, v, i], ch.lag_corr(x[:, u], x[:, v], k), atol=1e-5)


def test_stability_discrepancy_flags_the_changed_edge_only():
    xs, _, xt, _, _, _, _, _ = chapter_data(0)
    D = ch.stability_discrepancy(xs, xt)
    assert D.shape == (ch.V_VARS, ch.V_VARS) and D.min() >= 0 and D.max() == pytest.approx(1)
    assert np.unravel_index(D.argmax(), D.shape) in (ch.SPURIOUS_EDGE, (3, 3))
    others = np.sort(D[~np.eye(ch.V_VARS, dtype=bool)])
    assert D[ch.SPURIOUS_EDGE] == others[-1] and others[-1] - others[-2] >= ch.C_DHAT_LEAD
    # the causal pair moves only by sampling noise (the class shares differ a little)
    assert D[ch.SPURIOUS_EDGE] > max(D[ch.CAUSAL_EDGE], D[ch.REVERSE[ch.CAUSAL_EDGE]])
    # correlations ignore each variable's scale and offset: so does D
    scale = np.array([2.0, 0.5, 3.0, 1.0, 0.7], dtype=np.float32)[:, None]
    assert np.allclose(ch.stability_discrepancy(xs, xt * scale - 4.0), D, atol=1e-3)
    # a target with no shift of the dynamics (attenuate by 1): no edge stands out
    rng = np.random.default_rng(1)
    xs1, _ = ch.simulate(N, "source", rng, T=T)
    xt1, _ = ch.simulate(N, "target", rng, T=T, mode="attenuate", factor=1.0)
    shift = ch.stability_discrepancy(xs, xt, normalise=False)
    assert np.allclose(D, shift / shift.max())
    assert ch.stability_discrepancy(xs1, xt1, normalise=False).max() < 0.2 * shift.max()


def test_gradient_reversal_and_its_ramp():
    x = torch.randn(5, requires_grad=True)
    ch.GradReverse.apply(x, 0.5).sum().backward()
    assert torch.equal(x.grad, -0.5 * torch.ones(5))
    assert ch.grl_ramp(0.0) == 0.0 and ch.grl_ramp(1.0) == pytest.approx(1.0, abs=1e-4)
    assert np.all(np.diff([ch.grl_ramp(p) for p in np.linspace(0, 1, 11)]) > 0)



def test_prototype_loss_zero_when_aligned_and_safe_on_empty_classes():
    torch.manual_seed(0)
    r = torch.randn(30, 8)
    y = torch.arange(30) % 3
    p = torch.nn.functional.one_hot(y, 3).float()
    assert float(ch.prototype_loss(r, y, r, p)) == pytest.approx(0.0, abs=1e-6)
    # class 2 absent in the source batch, no confident target windows: finite, not NaN
    y0 = torch.arange(30) % 2
    loss = ch.prototype_loss(r, y0, torch.randn(30, 8), torch.full((30, 3), 1 / 3))
    assert torch.isfinite(loss) and float(loss) == 0.0
    # low-confidence pseudo-labels are ignored
    p_low = 0.5 * p + 0.5 / 3
    assert float(ch.prototype_loss(r, y, -r, p_low, conf=0.9)) == 0.0
    assert float(ch.prototype_loss(r, y, -r, p, conf=0.9)) > 1.0


def test_intervention_loss_reduces_to_the_source_loss_when_the_head_ignores_r_s():
    # why the intervention is easy to satisfy here: a head that ignores r^s meets it
    torch.manual_seed(0)
    net = ch.RationaleNet(h=8)
    with torch.no_grad():
        net.head[0].weight[:, 8:] = 0.0  # f ignores the domain-specific half
        r_c_s, r_s_s, r_c_t, r_s_t = (torch.randn(10, 8) for _ in range(4))
        y_s = torch.randint(0, 3, (10,))
        p_t = torch.softmax(net.classify(r_c_t), -1)
        perm = torch.randperm(10)
        loss = ch.intervention_loss(net, r_c_s, r_s_s, r_c_t, r_s_t, y_s, p_t, perm, perm)
        ce = torch.nn.functional.cross_entropy(net.classify(r_c_s), y_s)
    assert loss.item() == pytest.approx(ce.item(), abs=1e-5)  # the KL term vanishes


# -- the claims, and broken variants that fail them ------------------------------------

def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def swapped_domain_loss(net, r_c, r_s, d, coef=1.0):
    """Eq. 10 with the branches' roles swapped: r^c must reveal the domain, r^s hide it."""
    return (torch.nn.functional.cross_entropy(net.disc_s(ch.GradReverse.apply(r_s, coef)), d)
            + torch.nn.functional.cross_entropy(net.disc_c(r_c), d))


# The chapter's claims are made on the mean over paired restarts (restart r of every
# method starts from the same generator), because one run can settle on the shortcut:
# the claim tests use that statistic, on the chapter's default number of restarts. The
# broken variants that need no mean (a frozen mask, swapped domain roles) train once.
RESTARTS = 3
PAIRED = ("source", "dann", "prior mask", "caudits", "no disentangler")


@pytest.fixture(scope="module")
def trained():
    """{name: [net per restart]}, mean target accuracy, mean source accuracy, the data."""
    data = chapter_data(0)
    xs, ys, xt, _, xs_te, ys_te, xt_te, yt_te = data
    prior = 1 - ch.stability_discrepancy(xs, xt)
    variants = {  # name: (method, extra arguments of train_model)
        "source": ("source", {}),
        "dann": ("dann", {}),
        "prior mask": ("source", dict(fixed_mask=prior)),
        "caudits": ("caudits", {}),
        "no disentangler": ("caudits", dict(mask=False)),
    }
    nets = {name: [ch.train_model(method, xs, ys, xt, gen(r), **kw, **KW)
                   for r in range(RESTARTS)]
            for name, (method, kw) in variants.items()}
    nets["frozen mask"] = [ch.train_model("caudits", xs, ys, xt, gen(), mask_lr=0.0, **KW)]
    original = ch.domain_loss
    try:  # train_model looks it up in the chapter's namespace
        ch.domain_loss = swapped_domain_loss
        nets["swapped domain roles"] = [ch.train_model("caudits", xs, ys, xt, gen(), **KW)]
    finally:
        ch.domain_loss = original
    acc = {k: float(np.mean([ch.accuracy(n, xt_te, yt_te) for n in v]))
           for k, v in nets.items()}
    src = {k: float(np.mean([ch.accuracy(n, xs_te, ys_te) for n in v]))
           for k, v in nets.items()}
    print({k: round(v, 3) for k, v in acc.items()})
    return nets, acc, src, data


def best_baseline(acc):
    return max(acc["source"], acc["dann"], acc["prior mask"])


def test_claims_hold_for_seed0(trained):
    # the chapter's statistic: each network's target accuracy averaged over paired restarts
    _, acc, src, _ = trained
    assert acc["caudits"] - best_baseline(acc) >= ch.C_VS_BASELINE
    assert acc["caudits"] - acc["no disentangler"] >= ch.C_VS_NO_DISENTANGLER
    assert src["caudits"] >= ch.C_SOURCE_ACC


def test_prior_mask_baseline_cuts_the_edges_that_moved(trained):
    # the baseline with the same label-free information: M = 1 - D-hat, fixed
    nets, _, _, data = trained
    net = nets["prior mask"][0]
    M = net.mask().numpy()
    D = ch.stability_discrepancy(data[0], data[2])
    assert np.allclose(M, 1 - D, atol=1e-6) and not net.learn_mask
    assert M[ch.SPURIOUS_EDGE] < 0.5 < min(M[ch.CAUSAL_EDGE], M[ch.REVERSE[ch.CAUSAL_EDGE]])


def test_frozen_mask_stays_at_one_half(trained):
    # the chapter's "mask frozen at 0.5" arm: its learning rate is 0, so neither training
    # nor the prior moves it, and the causal and spurious relationships are split alike.
    # It is not a broken variant of claim 2 (against M = 1): on this seed-0 data it beats
    # M = 1 by more than the bar, and CauDiTS's first restart too (not the mean of its
    # restarts). So claim 2 alone does not isolate learning the mask; the chapter records
    # CauDiTS minus this arm as a finding
    nets, _, _, _ = trained
    assert np.allclose(nets["frozen mask"][0].mask().detach().numpy(), 0.5)


def test_inverted_test_time_mask_fails_both_claims(trained):
    # an evaluation bug: the rationale read through 1 - M (the domain-specific graph),
    # averaged over the same restarts as the claims
    nets, acc, _, data = trained
    xt_te, yt_te = data[6], data[7]
    wrong = float(np.mean([ch.accuracy(net, xt_te, yt_te, 1 - net.mask().detach())
                           for net in nets["caudits"]]))
    assert wrong - best_baseline(acc) < ch.C_VS_BASELINE
    assert wrong - acc["no disentangler"] < ch.C_VS_NO_DISENTANGLER  # and claim 2


def test_swapped_domain_roles_lose_the_lead(trained):
    # the GRL on the wrong branch: the causal part is trained to carry the domain, and the
    # lead over the best baseline (the baseline claim's strict version) is gone; compared
    # with the baselines' first restarts, which start from the same generator
    nets, _, _, data = trained
    xt_te, yt_te = data[6], data[7]
    first = {k: ch.accuracy(v[0], xt_te, yt_te) for k, v in nets.items()}
    assert first["swapped domain roles"] - best_baseline(first) < 0.0


@pytest.mark.slow
def test_scrambled_source_labels_fail_the_source_accuracy_check():
    # a batching bug: labels drawn with the wrong permutation, i.e. unrelated to the windows
    xs, ys, xt, _, xs_te, ys_te, _, _ = chapter_data(0)
    wrong = np.random.default_rng(0).permutation(ys)
    net = ch.train_model("caudits", xs, wrong, xt, gen(), epochs=5, batch=128, warmup=5)
    assert ch.accuracy(net, xs_te, ys_te) < ch.C_SOURCE_ACC
