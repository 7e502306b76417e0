"""Chapter 01: the effective theory's closed forms and invariants, and claims that fail when broken."""
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import chapter_defs
from scipy.integrate import solve_ivp

ch = chapter_defs("ch01_representation_universality")
torch.set_num_threads(1)

STATES = [  # (h0, y0, w0, eta_h, eta_y, dx2, dy2)
    (0.3, 0.01, -0.02, 0.7, 1.3, 1.0, 0.5),
    (1.2, 0.4, 0.1, 2.0, 0.5, 2.0, 1.0),
    (0.05, 0.002, 0.0, 0.3, 3.0, 1.0, 0.25),
]


@pytest.mark.parametrize("h0, y0, w0, eta_h, eta_y, dx2, dy2", STATES)
def test_ode_converges_to_the_closed_form(h0, y0, w0, eta_h, eta_y, dx2, dy2):
    t = np.linspace(0, 400, 2001)
    h, y, w = ch.integrate([h0, y0, w0], t, eta_h, eta_y, dx2, dy2, rtol=1e-10)
    assert h[-1] == pytest.approx(ch.h_final(h0, y0, eta_h / eta_y, dx2, dy2), rel=1e-6)
    assert y[-1] == pytest.approx(dy2, rel=1e-6)
    assert abs(w[-1]) < 1e-7
    C = ch.conserved(h, y, eta_h, eta_y, dx2)
    assert np.max(np.abs(C - C[0])) < 1e-8 * max(1.0, abs(C[0]))


def test_h_final_limits():
    r, dx2, dy2 = 0.6, 1.0, 0.5
    # rich: a -> 0 gives sqrt(r dx dy); lazy: a large gives h0
    assert ch.h_final(1e-9, 0.0, r, dx2, dy2) == pytest.approx(np.sqrt(r * dx2 * dy2), rel=1e-6)
    assert ch.h_final(50.0, 1e-3, r, dx2, dy2) == pytest.approx(50.0, rel=1e-3)
    # same-label pairs (dy2 = 0) collapse in the rich limit
    assert ch.h_final(1e-6, 1e-7, r, dx2, 0.0) < 1e-5


def test_loss_identity_on_random_vectors():
    rng = np.random.default_rng(0)
    for d in (1, 3):
        yhat, ystar = rng.normal(size=(2, d)), rng.normal(size=(2, d))
        m = 0.5 * ((yhat[0] + yhat[1]) - (ystar[0] + ystar[1]))
        h, y, w = ch.pair_stats(rng.normal(size=(2, 4)), yhat, ystar)
        dy2 = np.sum((ystar[1] - ystar[0]) ** 2)
        assert 0.25 * np.sum((yhat - ystar) ** 2) == pytest.approx(ch.loss_split(m, y, w, dy2), rel=1e-12)


def test_pair_stats_by_hand():
    H = np.array([[0.0, 0.0], [3.0, 4.0]])
    yhat, ystar = np.array([[1.0], [3.0]]), np.array([[0.0], [1.0]])
    h, y, w = ch.pair_stats(H, yhat, ystar)
    assert (h, y, w) == (25.0, 4.0, 4.0 - 2.0)


def test_aligned_decoder_model_gives_eq3():
    # Gradient flow of the local linear model (Eq. 2's derivation) with 1-d output and J
    # aligned with dh at the start: (h, y, w) must follow Eq. 3 with the same rates.
    rng = np.random.default_rng(1)
    k, eta_h, eta_y = 5, 0.8, 1.7
    dx = np.array([1.0, 0.0, 0.0])
    dystar = np.array([np.sqrt(0.5)])
    A0 = 0.3 * rng.normal(size=(k, 3))
    J0 = 0.2 * (A0 @ dx)[None, :]

    def flow(t, z):
        A, J = z[:3 * k].reshape(k, 3), z[3 * k:].reshape(1, k)
        dh = A @ dx
        de = J @ dh - dystar
        dA = -0.5 * eta_h * np.outer(J.T @ de, dx)
        dJ = -0.5 * eta_y * np.outer(de, dh)
        return np.concatenate([dA.ravel(), dJ.ravel()])

    t = np.linspace(0, 30, 301)
    sol = solve_ivp(flow, (0, 30), np.concatenate([A0.ravel(), J0.ravel()]), t_eval=t,
                    rtol=1e-10, atol=1e-12)
    A = sol.y[:3 * k].T.reshape(-1, k, 3)
    J = sol.y[3 * k:].T.reshape(-1, 1, k)
    dh = A @ dx
    dyhat = np.einsum("tok,tk->to", J, dh)
    h, y = np.sum(dh**2, -1), np.sum(dyhat**2, -1)
    w = y - dyhat @ dystar
    pred = ch.integrate([h[0], y[0], w[0]], t, eta_h, eta_y, 1.0, 0.5, rtol=1e-10)
    assert np.max(np.abs(pred - np.stack([h, y, w]))) < 1e-6


def test_fit_recovers_the_rates_of_a_synthetic_trajectory():
    t = np.linspace(0, 20, 300)
    obs = ch.integrate([0.2, 0.001, -0.01], t, 0.7, 1.9, 1.0, 0.5)
    assert ch.moment_fit(t, *obs, 1.0) == pytest.approx((0.7, 1.9), rel=2e-2)
    eta_h, eta_y, r2 = ch.fit_rates(t, *obs, 1.0, 0.5)
    assert (eta_h, eta_y) == pytest.approx((0.7, 1.9), rel=1e-3)
    assert r2 > 0.9999


def test_theory_matrix_rich_limit_is_the_xor_pattern():
    Dx = ch.sq_dists(ch.XOR_X)
    y = np.where(ch.XOR_LABELS == 1, 0.5, -0.5)[:, None]
    D = ch.theory_matrix(np.full((4, 4), 1e-8), np.full((4, 4), 1e-10), Dx, ch.sq_dists(y), 1.0)
    assert ch.same_diff_ratio(D, ch.XOR_LABELS) < 1e-2
    assert np.allclose(np.diag(D), 0)


def test_batched_networks_are_independent():
    gen = torch.Generator().manual_seed(0)
    X = torch.tensor(np.stack([ch.PAIR_X, ch.PAIR_X]))
    Y = torch.tensor(np.stack([[[0.0], [1.0]], [[0.0], [-1.0]]]))
    H, out, t, lr, ystar = ch.train_nets(X, Y, "tanh", False, 16, 3, [1.0, 1.0], [0.05, 0.0],
                                         50, 2, gen)
    assert np.allclose(out[1, 0], out[1, -1])  # lr 0: the second network never moves
    assert not np.allclose(out[0, 0], out[0, -1])
    assert np.allclose(ystar.mean(1), out[:, 0].mean(1))  # centred on the initial mean output
    assert np.allclose(ystar[:, 1] - ystar[:, 0], [[1.0], [-1.0]])


# -- the claims, on real networks, and the broken variants that must fail them ----------
DY2 = 0.5
PAIR_Y = np.array([[-0.5], [0.5]]) * np.sqrt(DY2)


@pytest.fixture(scope="module")
def leaky_two_point():
    act, residual, gain, lr = ch.ARCHS["leaky_relu"]
    gen = torch.Generator().manual_seed(0)
    H, out, t, _, ystar = ch.train_nets(torch.tensor(ch.PAIR_X[None]), torch.tensor(PAIR_Y[None]),
                                        act, residual, 128, 6, [gain], [lr], 2000, 3, gen, every=5)
    return t[0], np.stack(ch.pair_stats(H[0], out[0], ystar[0]))


def test_universality_claim_and_broken_theories(leaky_two_point):
    t, (h, y, w) = leaky_two_point
    assert ch.fit_rates(t, h, y, w, 1.0, DY2)[2] >= ch.C_R2  # the fit check holds
    # broken: the flipped sign convention of w, or a wrong decoder term in Eq. 3
    assert ch.fit_rates(t, h, y, 2 * y - w, 1.0, DY2)[2] < ch.C_R2
    assert ch.fit_rates(t, h, y, w, 1.0, DY2, rhs=ch.rhs_one_w)[2] < ch.C_R2


def test_endpoint_claims_fail_with_a_broken_closed_form(leaky_two_point):
    t, (h, y, w) = leaky_two_point
    pred, ratio, k = ch.endpoint_prediction(t, h, y, w, 1.0, DY2, 0.5)
    err = abs(pred - h[-1]) / h[-1]
    best_limit = min(abs(h[0] - h[-1]), abs(np.sqrt(ratio * DY2) - h[-1])) / h[-1]
    assert err <= ch.C_ENDPOINT and err / best_limit <= ch.C_VS_LIMITS  # hold (one network)
    # broken: the rate ratio inverted in Eq. 6 (eta_y / eta_h), a one-character slip
    bad = abs(ch.h_final(h[0], y[0], 1 / ratio, 1.0, DY2) - h[-1]) / h[-1]
    assert bad > ch.C_ENDPOINT and bad / best_limit > ch.C_VS_LIMITS
    # broken: no representation learning at all (the lazy guess) fails the endpoint check
    assert abs(h[0] - h[-1]) / h[-1] > ch.C_ENDPOINT


def test_curve_baseline_and_a_broken_closed_form(leaky_two_point):
    t, (h, y, w) = leaky_two_point
    pred, ratio, k = ch.endpoint_prediction(t, h, y, w, 1.0, DY2, 0.5)
    curves = ch.curve_endpoints(t[:k], h[:k], y[:k], DY2)
    best = min(abs(v - h[-1]) for v in curves.values()) / h[-1]
    assert abs(pred - h[-1]) / h[-1] <= best  # one network; the claim is on the mean of five
    # broken: Eq. 6 with the rate ratio inverted loses to plain curve fitting
    bad = abs(ch.h_final(h[0], y[0], 1 / ratio, 1.0, DY2) - h[-1]) / h[-1]
    assert bad > best


def test_curve_endpoints_recover_their_own_families():
    t = np.linspace(0, 5, 200)
    y = np.linspace(0.0, 0.3, 200)
    h = 0.2 + 0.7 * np.sqrt(y)
    assert ch.curve_endpoints(t, h, y, 0.5)["a + b sqrt(y)"] == pytest.approx(
        0.2 + 0.7 * np.sqrt(0.5), rel=1e-9)
    assert ch.curve_endpoints(t, 0.1 + 2 * y, y, 0.5)["line in y"] == pytest.approx(1.1)
    sig = 1 / (1 + np.exp(-(t - 3.0) / 0.8))
    h = 0.3 + 0.5 * (sig - 1 / (1 + np.exp(3.0 / 0.8)))
    assert ch.logistic_endpoint(t, h) == pytest.approx(0.3 + 0.5 * (1 - 1 / (1 + np.exp(3 / 0.8))),
                                                       rel=1e-4)


def test_encoder_terms_are_not_identified_by_one_dimensional_outputs():
    # the reported limitation: on Eq. 3's exact solution, dropping the encoder's feedback
    # still fits almost perfectly, while the wrong decoder term does not
    t = np.linspace(0, 4, 400)
    exact = ch.integrate([0.19, 0.003, 0.003 - np.sqrt(0.5) * 0.05], t, 0.9, 2.2, 1.0, 0.5,
                         rtol=1e-10)
    assert ch.fit_rates(t, *exact, 1.0, 0.5, rhs=ch.rhs_no_feedback)[2] > 0.95
    assert ch.fit_rates(t, *exact, 1.0, 0.5, rhs=ch.rhs_one_w)[2] < 1 - ch.C_SPECIFIC


def test_prose_quotes_the_thresholds_it_uses():
    import re

    text = Path(ch.__file__).read_text(encoding="utf-8")
    quoted = re.findall(r"`(C_[A-Z_]+) = ([0-9.eE+-]+)`", text)
    assert quoted, "the claims and the table name their thresholds"
    for name, value in quoted:
        assert float(value) == getattr(ch, name), f"{name} is quoted as {value}"



def test_specificity_claim_fails_if_the_theory_itself_is_wrong(leaky_two_point):
    t, (h, y, w) = leaky_two_point
    # swap roles: a chapter whose "Eq. 3" had 3w -> w, checked against the real Eq. 3
    broken = ch.fit_rates(t, h, y, w, 1.0, DY2, rhs=ch.rhs_one_w)[2]
    other = ch.fit_rates(t, h, y, w, 1.0, DY2)[2]
    assert broken - other < ch.C_SPECIFIC


def xor_run(gain, steps=2000, freeze_hidden=False, width=128, depth=6):
    """An XOR network as in the chapter; freeze_hidden trains the readout only (broken)."""
    X = torch.tensor(ch.XOR_X[None])
    Y = torch.tensor((np.where(ch.XOR_LABELS == 1, 0.5, -0.5)[:, None] * np.sqrt(DY2))[None])
    gen = torch.Generator().manual_seed(0)
    if not freeze_hidden:
        H, out, *_ = ch.train_nets(X, Y, "leaky_relu", False, width, depth, [gain], None, steps,
                                   depth - 1, gen, every=steps, lr_max=0.2)
        return ch.sq_dists(H[0, 0]), ch.sq_dists(H[0, -1]), H[0]
    params = ch.init_nets(1, 3, width, depth, 1, [gain], gen)
    H0 = ch.forward(params, X, "leaky_relu", track=depth - 1)[1].detach().numpy()[0]
    W, b = params[-1]
    for _ in range(steps):
        out = ch.forward(params, X, "leaky_relu")[0]
        gW, gb = torch.autograd.grad(ch.half_mse(out, Y).sum(), [W, b])
        with torch.no_grad():
            W -= 0.2 * gW
            b -= 0.2 * gb
    HT = ch.forward(params, X, "leaky_relu", track=depth - 1)[1].detach().numpy()[0]
    return ch.sq_dists(H0), ch.sq_dists(HT), np.stack([H0, HT])


@pytest.mark.slow
def test_rich_claims_and_a_frozen_encoder():
    Dx = ch.sq_dists(ch.XOR_X)
    Dy = ch.sq_dists(np.where(ch.XOR_LABELS == 1, 0.5, -0.5)[:, None])
    D0, DT, _ = xor_run(0.5)
    assert ch.same_diff_ratio(DT, ch.XOR_LABELS) <= ch.C_RICH
    assert ch.offdiag_corr(DT, np.sqrt(Dx * Dy)) >= 0.95  # a metric of the chapter
    # broken: only the readout learns, so the representation cannot align
    D0, DT, _ = xor_run(0.5, steps=500, freeze_hidden=True)
    assert ch.same_diff_ratio(DT, ch.XOR_LABELS) > ch.C_RICH
    assert ch.offdiag_corr(DT, np.sqrt(Dx * Dy)) < 0.95


@pytest.mark.slow
def test_lazy_claims_and_a_gain_that_is_not_applied():
    D0, DT, H = xor_run(2.0)
    change = np.linalg.norm(H[-1] - H[0]) / np.linalg.norm(H[0])
    assert 1 - ch.offdiag_corr(DT, D0) <= ch.C_LAZY and change <= ch.C_LAZY_MOVE
    # broken: an initialisation that ignores the gain (stuck at 0.5) is not lazy
    D0, DT, H = xor_run(0.5)
    change = np.linalg.norm(H[-1] - H[0]) / np.linalg.norm(H[0])
    assert 1 - ch.offdiag_corr(DT, D0) > ch.C_LAZY and change > ch.C_LAZY_MOVE
