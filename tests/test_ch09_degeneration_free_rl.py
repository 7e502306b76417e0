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
    rows = both.any(-1)  # where the two nuclei meet, the guard stays inside both
    for which in ("plus", "minus", "theta"):
        keep = torch.isfinite(ch.behaviour_logits(z_th, z_ref, which, top_p=0.9))
        assert (keep <= nucleus).all()
        assert keep.any(-1).all()
        guarded = torch.isfinite(ch.behaviour_logits(z_th, z_ref, which, top_p=0.9, guard=True))
        assert (guarded[rows] <= both[rows]).all() and guarded.any(-1).all()
    # the guard is one filter for every policy: for pi_theta it is exactly the two nuclei
    theta = torch.isfinite(ch.behaviour_logits(z_th, z_ref, "theta", top_p=0.9, guard=True))
    assert torch.equal(theta[rows], both[rows])


def test_cached_next_logits_equal_a_full_forward_pass():
    model = tiny_model(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    idx = torch.randint(len(ch.TOK), (5, 3), generator=torch.Generator().manual_seed(0))
    cache = {}
    for _ in range(6):
        assert torch.allclose(ch.next_logits(model, idx, cache), model(idx)[:, -1], atol=1e-4)
        idx = torch.cat([idx, torch.randint(len(ch.TOK), (5, 1))], 1)


def test_tuned_run_is_the_best_natural_one():
    ref_r = dict(ref_ppl=2.0)
    res = {"a": dict(reward=0.9, grammatical=0.5, ref_ppl=2.0),   # degenerate
           "b": dict(reward=0.8, grammatical=1.0, ref_ppl=3.0),   # too perplexing
           "c": dict(reward=0.6, grammatical=0.97, ref_ppl=2.2),
           "d": dict(reward=0.5, grammatical=1.0, ref_ppl=2.0)}
    assert ch.tuned(list(res), res, ref_r, **ch.NATURAL) == "c"
    assert ch.tuned(["a", "b"], res, ref_r, **ch.NATURAL) == "b"


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
    lm, train, held = ch.make_datasets(ch.GRAMMAR, ch.TOK, 16, random.Random(3))
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


# -- each paper claim fails for a broken variant (default-tier sizes, seed 0) ---------
DEFAULT = dict(iters=60, n_prompts=32, group=4, n_new=10, top_p=0.9)
# fixed generator seeds per run (the chapter draws each run from its own named stream)
RL_SEED = {"PG beta=0.05": 1, "PG beta=0.2": 2, "DfPO": 4, "DfPO x2": 5, "no masks": 6,
           "no trunc": 7}


@pytest.fixture(scope="module")
def setup():
    lm, train_p, held = ch.make_datasets(ch.GRAMMAR, ch.TOK, 256, random.Random(0))
    torch.manual_seed(0)  # the reference's initial weights
    ref, _ = ch.train_reference(lm, len(ch.TOK), 300, torch.Generator().manual_seed(0))
    ev = dict(n_new=10, top_p=0.9, tok=ch.TOK, grammar=ch.GRAMMAR, stream_seed=7,
              guard=True)
    base = ch.evaluate(ref, ref, held, "theta", **ev)
    return ref, train_p, held, ev, base


def train(ref, prompts, run, **kw):
    args = dict(DEFAULT, gen=torch.Generator().manual_seed(RL_SEED[run]), tok=ch.TOK,
                grammar=ch.GRAMMAR, lr=1e-3)
    args.update(kw)
    return ch.rl_train(ref, prompts, **args)[0]


def dfpo_eval(setup, **kw):
    ref, train_p, held, ev, _ = setup
    top_p = kw.get("top_p", 0.9)
    model = train(ref, train_p, "DfPO", method="dfpo", **kw)
    return model, ch.evaluate(model, ref, held, "minus", **dict(ev, top_p=top_p))


@pytest.fixture(scope="module")
def dfpo(setup):
    return dfpo_eval(setup)


@pytest.fixture(scope="module")
def ablations(setup):
    ref, train_p, held, ev, _ = setup
    out = []
    for run, kw in (("no masks", dict(mask=False)), ("no trunc", dict(truncate=False))):
        model = train(ref, train_p, run, method="dfpo", **kw)
        out.append(ch.evaluate(model, ref, held, "minus", **ev))
    return out


@pytest.fixture(scope="module")
def tuned_pg(setup):
    ref, train_p, held, ev, base = setup
    res = {}
    for beta in (0.05, 0.2):  # the natural part of the chapter's grid
        model = train(ref, train_p, f"PG beta={beta:g}", method="pg", beta=beta)
        res[beta] = ch.evaluate(model, ref, held, "theta", **ev)
    return res[ch.tuned(list(res), res, base, **ch.NATURAL)]


def drift_ratio(setup, model, tuned_pg):
    ref, _, held, ev, _ = setup
    return ch.evaluate(model, ref, held, "minus", **ev)["kl"] / tuned_pg["kl"]


def test_correct_dfpo_passes_the_claims(setup, dfpo, ablations, tuned_pg):
    ref, train_p, held, ev, base = setup
    model, res = dfpo
    fast = train(ref, train_p, "DfPO x2", method="dfpo", lr=2e-3)
    both = {"lr": res, "2 lr": ch.evaluate(fast, ref, held, "minus", **ev)}
    best = both[ch.tuned(list(both), both, base, **ch.NATURAL)]  # the claim's tuned run
    assert res["kl"] / ablations[0]["kl"] <= ch.C_MASK_DRIFT
    assert res["kl"] / ablations[1]["kl"] <= ch.C_TRUNC_DRIFT
    assert drift_ratio(setup, model, tuned_pg) <= ch.C_DRIFT
    assert res["grammatical"] >= ch.C_GRAMMATICAL
    assert best["reward"] - base["reward"] >= ch.C_GAIN


def test_mask_claim_fails_with_swapped_kl_masks(setup, ablations, monkeypatch):
    # bug: M+ and M- exchanged, so every update pushes a word away from the reference
    original = ch.kl_masks
    monkeypatch.setattr(ch, "kl_masks", lambda *a, **k: original(*a, **k)[::-1])
    _, res = dfpo_eval(setup)
    assert res["kl"] / ablations[0]["kl"] > ch.C_MASK_DRIFT


def test_truncation_claim_fails_with_the_truncation_on_the_wrong_side(setup, ablations,
                                                                      monkeypatch):
    # bug: pi+ rollouts keep only their negative advantages, pi- only their positive
    original = ch.truncate_advantage
    monkeypatch.setattr(ch, "truncate_advantage", lambda adv, sign: original(adv, -sign))
    _, res = dfpo_eval(setup)
    assert res["kl"] / ablations[1]["kl"] > ch.C_TRUNC_DRIFT


def test_drift_claim_fails_when_the_masks_compare_the_policy_with_itself(setup, tuned_pg,
                                                                         monkeypatch):
    # bug: the policy passed where the reference belongs, so every word is a tie and
    # nothing is masked; the inference mask is computed correctly
    original = ch.dfpo_step
    monkeypatch.setattr(ch, "dfpo_step", lambda policy, ref, *a, **k:
                        original(policy, policy, *a, **k))
    model, _ = dfpo_eval(setup)
    monkeypatch.setattr(ch, "dfpo_step", original)
    assert drift_ratio(setup, model, tuned_pg) > ch.C_DRIFT


def test_gain_claim_fails_with_a_sign_flipped_advantage(setup, monkeypatch):
    base = setup[4]
    original = ch.group_advantage
    monkeypatch.setattr(ch, "group_advantage", lambda v, g: -original(v, g))
    _, res = dfpo_eval(setup)
    assert res["reward"] - base["reward"] < ch.C_GAIN


def test_grammar_claim_fails_without_the_nucleus_before_masking(setup):
    _, res = dfpo_eval(setup, top_p=1.0)
    assert res["grammatical"] < ch.C_GRAMMATICAL
