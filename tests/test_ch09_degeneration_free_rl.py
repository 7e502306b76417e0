"""Chapter 09: DfPO's masks, masked policies and truncated advantages (the brief's hidden
checks), the policy-gradient pieces, and for each claim a broken variant that fails it."""
import random

import pytest
import torch
from helpers import chapter_defs

ch = chapter_defs("ch09_degeneration_free_rl")
V = 12


def probs_with_ties(seed, V=V, n_moved=4):
    """p_ref and a p_theta that equals it exactly except on n_moved tokens (ties elsewhere)."""
    g = torch.Generator().manual_seed(seed)
    p_ref = torch.rand(V, generator=g, dtype=torch.float64) + 0.05
    p_ref /= p_ref.sum()
    p_th = p_ref.clone()
    idx = torch.randperm(V, generator=g)[:n_moved]
    for a, b in idx.view(-1, 2).tolist():  # move mass from a to b: one up, one down
        delta = 0.5 * p_th[a]
        p_th[a] -= delta
        p_th[b] += delta
    return p_th.log().float(), p_ref.log().float()


# -- the brief's hidden checks --------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_masked_policy_supports_and_normalisation(seed):
    z_th, z_ref = probs_with_ties(seed)
    lp_th, lp_ref = z_th.log_softmax(-1), z_ref.log_softmax(-1)
    for which, expected in (("plus", lp_th <= lp_ref + 1e-6), ("minus", lp_th >= lp_ref - 1e-6)):
        p = ch.behaviour_logits(z_th[None], z_ref[None], which, top_p=1.0)[0].softmax(-1)
        assert torch.equal(p > 0, expected)
        assert p.sum().item() == pytest.approx(1.0, abs=1e-6)
        # on its support, the masked policy is pi_theta renormalised (Eq. 5)
        pt = lp_th.exp()
        assert torch.allclose(p[expected], pt[expected] / pt[expected].sum(), atol=1e-6)
    plus, minus = ch.kl_masks(lp_th, lp_ref)
    assert (plus | minus).all()  # every token is in at least one mask
    assert (plus & minus).sum().item() == V - 4  # exactly the untouched tokens are ties


def test_strict_inequalities_would_empty_masks_at_init():
    z = torch.randn(3, V)
    plus, minus = ch.kl_masks(z.log_softmax(-1), z.log_softmax(-1))
    assert plus.all() and minus.all()


@pytest.mark.parametrize("seed", range(3))
def test_at_reference_both_masked_policies_equal_pi_ref(seed):
    z = torch.randn(4, V, generator=torch.Generator().manual_seed(seed)) * 3
    for which in ("plus", "minus", "theta"):
        p = ch.behaviour_logits(z, z.clone(), which, top_p=1.0).softmax(-1)
        assert torch.allclose(p, z.softmax(-1), atol=1e-7)


def test_masks_live_inside_the_nucleus_and_never_empty():
    g = torch.Generator().manual_seed(0)
    z_th, z_ref = torch.randn(200, V, generator=g) * 2, torch.randn(200, V, generator=g) * 2
    nucleus = torch.isfinite(ch.filter_logits(z_th, top_p=0.9))
    both = nucleus & torch.isfinite(ch.filter_logits(z_ref, top_p=0.9))
    for which in ("plus", "minus"):
        keep = torch.isfinite(ch.behaviour_logits(z_th, z_ref, which, top_p=0.9))
        assert (keep <= nucleus).all()
        assert keep.any(-1).all()
        guarded = torch.isfinite(ch.behaviour_logits(z_th, z_ref, which, top_p=0.9, guard=True))
        rows = both.any(-1)  # where the two nuclei meet, inference stays inside both
        assert (guarded[rows] <= both[rows]).all() and guarded.any(-1).all()


def test_wrong_sign_samples_have_exactly_zero_gradient():
    torch.manual_seed(0)
    logits = torch.randn(6, 5, V, requires_grad=True)
    tokens = torch.randint(V, (6, 5))
    logp = logits.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
    adv_neg, adv_pos = -torch.rand(6, 5) - 0.1, torch.rand(6, 5) + 0.1
    for adv, sign in ((adv_neg, +1), (adv_pos, -1)):  # pi+ with A<0, pi- with A>0
        logits.grad = None
        ch.pg_loss(logp, ch.truncate_advantage(adv, sign)).backward(retain_graph=True)
        assert torch.count_nonzero(logits.grad) == 0
    logits.grad = None
    ch.pg_loss(logp, ch.truncate_advantage(adv_pos, +1)).backward()
    assert torch.count_nonzero(logits.grad) > 0


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return ch.TinyGPT(ch.GPTConfig(vocab_size=len(ch.TOK), d_model=16, n_layers=1, n_heads=2,
                                   max_len=32, abs_pe="learned"))


@pytest.mark.slow
def test_sgd_step_on_a_negative_pi_minus_sample_lowers_its_probability():
    model = tiny_model()
    ids = torch.tensor([[ch.BOS] + ch.TOK.encode("the film was great".split())])
    t0 = 4  # the last word is the "generated" one
    before = ch.continuation_logp(model, ids, t0)[0].exp().item()
    logp, _ = ch.continuation_logp(model, ids, t0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ch.pg_loss(logp, ch.truncate_advantage(torch.tensor([[-1.0]]), -1)).backward()
    opt.step()
    after = ch.continuation_logp(model, ids, t0)[0].exp().item()
    assert after < before


# -- the policy-gradient pieces ----------------------------------------------------
def test_group_advantage_is_centred_per_prompt():
    v = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.25, 0.75])
    adv = ch.group_advantage(v, 2)
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.0, 0.0, -0.25, 0.25]))
    assert torch.allclose(ch.group_advantage(torch.rand(8, 3), 4).view(2, 4, 3).sum(1),
                          torch.zeros(2, 3), atol=1e-6)


def test_kl_shaped_returns_closed_form():
    R = torch.tensor([1.0, 0.0])
    lt = torch.log(torch.tensor([[0.5, 0.2, 0.4], [0.1, 0.1, 0.1]]))
    lr = torch.log(torch.tensor([[0.25, 0.2, 0.8], [0.1, 0.2, 0.05]]))
    G0 = ch.kl_shaped_returns(R, lt, lr, 0.0)
    assert torch.allclose(G0, R[:, None].expand(2, 3))
    G = ch.kl_shaped_returns(R, lt, lr, 0.5)
    r = -0.5 * (lt - lr)
    r[:, -1] += R
    assert torch.allclose(G[:, 0], r.sum(1)) and torch.allclose(G[:, -1], r[:, -1])


def test_reward_and_exact_acceptor():
    g = ch.GRAMMAR
    assert ch.task_reward("the film was dull .".split(), g) == 0.25
    assert ch.task_reward("loved loved loved".split(), g) == 1.0
    assert ch.task_reward("the film was fine".split(), g) == 0.5
    assert g.accepts("the film was very good . i".split(), prefix=True)
    assert not g.accepts("the film loved loved".split(), prefix=True)
    assert ch.distinct_n([["a", "b", "a", "b"]], 2) == pytest.approx(2 / 3)


@pytest.mark.slow
def test_datasets_are_grammatical_and_prompts_are_prefixes():
    lm, train, held = ch.make_datasets(ch.GRAMMAR, ch.TOK, 16, seed=3)
    assert lm.shape == (6000, 25) and (lm[:, 0] == ch.BOS).all()
    for row in lm[:50]:
        assert ch.GRAMMAR.accepts([ch.TOK.symbols[i] for i in row[1:].tolist()], prefix=True)
    for p in held:
        assert ch.GRAMMAR.accepts([ch.TOK.symbols[i] for i in p[1:].tolist()], prefix=True)


def test_sampling_from_a_masked_policy_stays_in_its_support():
    model, ref_model = tiny_model(1), tiny_model(2)
    prompts = ch.make_prompts(ch.GRAMMAR, ch.TOK, 8, 2, random.Random(0))
    ids = ch.sample(model, ref_model, prompts, 5, "minus", 0.9, torch.Generator().manual_seed(0))
    with torch.no_grad():
        for t in range(prompts.shape[1], ids.shape[1]):
            z = ch.behaviour_logits(model(ids[:, :t])[:, -1], ref_model(ids[:, :t])[:, -1],
                                    "minus", 0.9)
            assert torch.isfinite(z.gather(1, ids[:, t:t + 1])).all()


# -- claims fail for broken variants (default-tier sizes, seed 0) --------------------
DEFAULT = dict(iters=60, n_prompts=32, group=4, n_new=10, top_p=0.9)


@pytest.fixture(scope="module")
def setup():
    lm, train, held = ch.make_datasets(ch.GRAMMAR, ch.TOK, 256, seed=0)
    ref, _ = ch.train_reference(lm, len(ch.TOK), 300, seed=0)
    ev = dict(n_new=10, top_p=0.9, tok=ch.TOK, grammar=ch.GRAMMAR, seed=7)
    base = ch.evaluate(ref, ref, held, "theta", **ev)
    return ref, train, held, ev, base


# the chapter's RL generator seeds at seed 0 (1000 * seed + index of the run in `specs`)
RL_SEED = {"pg": 1, "dfpo": 6}


def train(ref, prompts, **kw):
    args = dict(DEFAULT, seed=RL_SEED[kw["method"]], tok=ch.TOK, grammar=ch.GRAMMAR, lr=1e-3)
    args.update(kw)
    return ch.rl_train(ref, prompts, **args)[0]


@pytest.fixture(scope="module")
def dfpo(setup):
    ref, train_p, held, ev, base = setup
    model = train(ref, train_p, method="dfpo")
    return model, ch.evaluate(model, ref, held, "minus", **ev)


def test_correct_dfpo_passes_the_claims(setup, dfpo):
    _, _, _, _, base = setup
    _, res = dfpo
    assert res["reward"] - base["reward"] >= 0.15
    assert res["grammatical"] >= 0.95
    assert res["ref_ppl"] / base["ref_ppl"] <= 1.15
    assert res["distinct2"] / base["distinct2"] >= 0.35


def test_claim1_fails_with_a_sign_flipped_advantage(setup, monkeypatch):
    ref, train_p, held, ev, base = setup
    original = ch.group_advantage
    monkeypatch.setattr(ch, "group_advantage", lambda v, g: -original(v, g))
    model = train(ref, train_p, method="dfpo")
    res = ch.evaluate(model, ref, held, "minus", **ev)
    assert res["reward"] - base["reward"] < 0.15


def test_claims2_3_fail_without_the_nucleus_before_masking(setup):
    ref, train_p, held, ev, base = setup
    model = train(ref, train_p, method="dfpo", top_p=1.0)
    res = ch.evaluate(model, ref, held, "minus", **dict(ev, top_p=1.0))
    assert res["grammatical"] < 0.95
    assert res["ref_ppl"] / base["ref_ppl"] > 1.15


def test_claim4_fails_when_the_baseline_cancels_its_own_advantage(setup):
    # bug: a "group" of one sample, so the baseline is the sample's own return
    ref, train_p, held, ev, _ = setup
    model = train(ref, train_p, method="pg", beta=0.0, group=1, n_prompts=128)
    assert ch.evaluate(model, ref, held, "theta", **ev)["grammatical"] > 0.5


def test_claim5_fails_for_greedy_masked_decoding(setup, dfpo):
    ref, _, held, ev, base = setup
    model, _ = dfpo
    greedy = ch.evaluate(model, ref, held, "minus", **dict(ev, top_p=1e-6))
    assert greedy["distinct2"] / base["distinct2"] < 0.35


def test_claim6_fails_when_the_penalty_compares_the_policy_with_itself(setup, monkeypatch):
    # bug: the "reference" log-probs are the policy's own (no frozen copy), so KL = 0
    ref, train_p, held, ev, base = setup
    right = train(ref, train_p, method="pg", beta=0.2)
    gain_02 = ch.evaluate(right, ref, held, "theta", **ev)["reward"] - base["reward"]
    correct_1 = train(ref, train_p, method="pg", beta=1.0)
    gain_1 = ch.evaluate(correct_1, ref, held, "theta", **ev)["reward"] - base["reward"]
    assert gain_1 / gain_02 <= 0.5
    original = ch.kl_shaped_returns
    monkeypatch.setattr(ch, "kl_shaped_returns", lambda R, lt, lr, b: original(R, lt, lt, b))
    wrong = train(ref, train_p, method="pg", beta=1.0)
    gain_1 = ch.evaluate(wrong, ref, held, "theta", **ev)["reward"] - base["reward"]
    assert gain_1 / gain_02 > 0.5


def test_claim7_fails_without_truncation(setup, dfpo):
    ref, train_p, held, ev, _ = setup
    tuned = train(ref, train_p, method="pg", beta=0.2)
    kl_tuned = ch.evaluate(tuned, ref, held, "theta", **ev)["kl"]
    good, _ = dfpo
    assert ch.evaluate(good, ref, held, "theta", **ev)["kl"] / kl_tuned <= 0.5
    broken = train(ref, train_p, method="dfpo", truncate=False)
    assert ch.evaluate(broken, ref, held, "theta", **ev)["kl"] / kl_tuned > 0.5
