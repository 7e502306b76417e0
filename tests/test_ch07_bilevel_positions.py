"""Chapter 07: bilevel ids and BiPE's invariances, and claims that fail when BiPE is broken."""
import random

import numpy as np
import pytest
import torch
from helpers import chapter_defs

from icmlbook.toylang import split_words

ch = chapter_defs("ch07_bilevel_positions")
L = 64


# -- Eq. 1: the bilevel ids ---------------------------------------------------
def test_bilevel_ids_of_the_papers_example():
    # a b . c d \n e with separators "." and newline
    ends = torch.tensor([[False, False, True, False, False, True, False]])
    intra, seg = ch.bilevel_ids(ends, max_intra=L)
    assert seg[0].tolist() == [0, 0, 0, 1, 1, 1, 2]
    assert intra[0].tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_a_long_segment_has_its_intra_id_clamped():
    ends = torch.zeros(1, 100, dtype=torch.bool)
    intra, seg = ch.bilevel_ids(ends, max_intra=10)
    assert intra[0].tolist() == [min(t, 9) for t in range(100)]
    assert seg.abs().sum() == 0


def test_ids_on_text_reset_after_every_full_stop():
    text = ch.chain_text(ch.CHAIN, 300, random.Random(0))[None]
    intra, seg = ch.bilevel_ids(ch.segment_ends(text), L)
    stops = (text[0] == ch.SEP_ID).nonzero().flatten().tolist()
    for s in stops[:-1]:
        assert intra[0, s + 1] == 0 and seg[0, s + 1] == seg[0, s] + 1
    assert seg[0, -1] == sum(t < 299 for t in stops)
    # between separators, intra counts up by one and seg is constant
    inside = text[0, :-1] != ch.SEP_ID
    assert torch.all((intra[0, 1:] - intra[0, :-1])[inside] == 1)
    assert torch.all((seg[0, 1:] == seg[0, :-1])[inside])


def test_segmentation_rules():
    idx = torch.zeros(2, 12, dtype=torch.long)
    chunks = ch.segment_ends(idx, "chunks", chunk_len=3)
    assert chunks[0].nonzero().flatten().tolist() == [2, 5, 8, 11]
    intra, seg = ch.bilevel_ids(chunks, L)
    assert intra[0].tolist() == [t % 3 for t in range(12)]
    assert seg[0].tolist() == [t // 3 for t in range(12)]
    rnd = ch.segment_ends(torch.zeros(50, 400, dtype=torch.long), "random", chunk_len=18,
                          generator=torch.Generator().manual_seed(0))
    assert abs(rnd.float().mean().item() - 1 / 18) < 0.005
    with pytest.raises(ValueError):
        ch.segment_ends(idx, "paragraphs")


# -- the toy language ---------------------------------------------------------
def test_chain_text_is_grammatical_and_chained():
    text = ch.TOK.decode(ch.chain_text(ch.CHAIN, 2000, random.Random(3)).tolist())
    words = split_words(text)[:-1]  # the text is cut after 2000 characters, maybe mid-word
    assert ch.CHAIN.accepts(words, prefix=True)
    assert not ch.CHAIN.accepts(words[:1] + ["xx"] + words[2:], prefix=True)
    sentences = [s.split() for s in text.split(".")[:-1]]
    for prev, cur in zip(sentences, sentences[1:]):
        assert cur[0] == prev[2]  # the subject is the previous object


# -- Eqs. 3-4: invariances ----------------------------------------------------
@pytest.mark.parametrize("pe", ["BiPE-RoPE", "BiPE-ALiBi"])
@pytest.mark.parametrize("shift", [7, 1000])
def test_logits_invariant_to_shifting_segment_ids(pe, shift):
    torch.manual_seed(0)
    model = ch.make_model(pe, L).eval()
    with torch.no_grad():  # random weights of the size the chapter trains (std 0.02 is too tame)
        for p in model.parameters():
            p.normal_(0, 0.3)
    idx = ch.chain_text(ch.CHAIN, 3 * L, random.Random(1))[None]
    pos = ch.positions_for(pe, L)(idx)
    with torch.no_grad():
        a = model(idx, **pos)
        b = model(idx, abs_pos=pos["abs_pos"], rel_pos=pos["rel_pos"] + shift)
    assert torch.allclose(a, b, atol=1e-5 if shift < 100 else 1e-4)


def test_rope_score_within_a_segment_ignores_the_segment_index():
    torch.manual_seed(1)
    model = ch.make_model("BiPE-RoPE", L).eval()
    model.keep_attention()
    idx = torch.randint(0, len(ch.TOK), (1, 20))
    intra = torch.arange(20)[None]
    attn = []
    for s in (0, 5, 123):  # one segment, whose index is s
        with torch.no_grad():
            model(idx, abs_pos=intra, rel_pos=torch.full((1, 20), s))
        attn.append(model.blocks[0].attn.last_attn.clone())
    assert torch.allclose(attn[0], attn[1], atol=1e-6)
    assert torch.allclose(attn[0], attn[2], atol=1e-6)


def test_bipe_differs_from_flat_when_segments_are_real():
    # the same weights read with BiPE ids and with flat ids give different predictions
    torch.manual_seed(2)
    model = ch.make_model("BiPE-RoPE", L).eval()
    idx = ch.chain_text(ch.CHAIN, 2 * L, random.Random(2))[None]
    with torch.no_grad():
        a = model(idx, **ch.positions_for("BiPE-RoPE", L)(idx))
        b = model(idx)
    assert (a - b).abs().max() > 1e-4


# -- Eq. 5: one long window gives every shorter length ------------------------
@pytest.mark.parametrize("pe", ["RoPE", "BiPE-ALiBi"])
def test_per_position_loss_is_causal(pe):
    torch.manual_seed(3)
    model = ch.make_model(pe, L)
    windows = ch.sample_windows(ch.chain_text(ch.CHAIN, 5000, random.Random(4)), 4, 2 * L + 1,
                                torch.Generator().manual_seed(0))
    pos = ch.positions_for(pe, L)
    long = ch.per_position_nll(model, windows, pos)
    short = ch.per_position_nll(model, windows[:, :L + 1], pos)
    assert np.allclose(long[:L], short, atol=1e-5)


def test_length_report():
    curve = np.concatenate([np.full(64, 1.0), np.full(64, 2.0), np.full(128, 3.0),
                            np.full(256, 4.0)])
    rep = ch.length_report(curve, 64)
    assert rep["in-dist"] == 1.0 and rep["far 2x"] == 2.0
    assert rep["far 4x"] == 3.0 and rep["far 8x"] == 4.0
    assert rep["all 2x"] == 1.5
    short = ch.length_report(curve[:256], 32)  # a window shorter than the 64 far positions
    assert short["far 1x"] == 1.0 and short["far 2x"] == 1.0


# -- claims: trained at the default tier, seed 0 ------------------------------
def flat_ids(idx):
    """Broken segment rule: every token 'ends a segment', so seg = t and intra = 0."""
    intra, seg = ch.bilevel_ids(idx != ch.SEP_ID, L)
    return dict(abs_pos=intra, rel_pos=seg)


def flipped_seg_ids(idx):
    """Broken sign in Eq. 4: rel_pos = -seg, so ALiBi rewards distant segments."""
    intra, seg = ch.bilevel_ids(ch.segment_ends(idx), L)
    return dict(abs_pos=intra, rel_pos=-seg)


def unrotated_seg_ids(idx):
    """Broken BiPE-RoPE: the segment index never reaches RoPE (rel_pos = 0)."""
    intra, seg = ch.bilevel_ids(ch.segment_ends(idx), L)
    return dict(abs_pos=intra, rel_pos=torch.zeros_like(seg))


def zero_ids(idx):
    """Broken RoPE: every position id is 0, so nothing rotates (a model without positions)."""
    return dict(rel_pos=torch.zeros_like(idx))


def scrambled_seg_ids(idx):
    """Broken BiPE-ALiBi: the segment indices reach Eq. 4 in a fixed shuffled order."""
    intra, seg = ch.bilevel_ids(ch.segment_ends(idx), L)
    perm = torch.randperm(8 * L, generator=torch.Generator().manual_seed(5))
    return dict(abs_pos=intra, rel_pos=seg[:, perm[perm < idx.shape[1]]])


def split_report(nll, inputs):
    """The chapter's split: (subject-letter, other-letter) loss in distribution, far 2x, 8x."""
    subject = torch.zeros_like(inputs, dtype=torch.bool)
    subject[:, 1:] = (inputs[:, 1:] == ch.TOK.id(" ")) & (inputs[:, :-1] == ch.SEP_ID)
    T = inputs.shape[1]
    regions = {"in-dist": slice(0, L), "far 2x": slice(2 * L - ch.FAR, 2 * L),
               "far 8x": slice(T - ch.FAR, T)}
    return {name: (float(nll[:, r][subject[:, r]].mean()),
                   float(nll[:, r][~subject[:, r]].mean())) for name, r in regions.items()}


@pytest.fixture(scope="module")
def trained():
    """Reports (Eq. 5 and the split) of the chapter's default-tier variants and of broken
    ones, seed 0."""
    train_text = ch.chain_text(ch.CHAIN, 300_000, random.Random(1000))
    test_text = ch.chain_text(ch.CHAIN, 100_000, random.Random(2000))
    windows = ch.sample_windows(test_text, 32, 8 * L + 1, torch.Generator().manual_seed(7))
    kw = dict(train_len=L, steps=300, batch=16, init=0, chunk_len=18, alibi_scale=12.0)
    specs = {  # name: (variant, segmentation, positions override, model override)
        "RoPE": ("RoPE", "sentences", None, None),
        "ALiBi": ("ALiBi", "sentences", None, None),
        "BiPE-RoPE": ("BiPE-RoPE", "sentences", None, None),
        "BiPE-ALiBi": ("BiPE-ALiBi", "sentences", None, None),
        "intra only": ("intra only", "sentences", None, None),
        "sinusoidal": ("sinusoidal", "sentences", None, None),
        "chunks": ("BiPE-RoPE", "chunks", None, None),
        "random": ("BiPE-RoPE", "random", None, None),
        "flat ids": ("BiPE-RoPE", "sentences", flat_ids, None),
        "segments not rotated": ("BiPE-RoPE", "sentences", unrotated_seg_ids, None),
        "no intra table": ("BiPE-RoPE", "sentences", ch.bipe_positions(L),
                           ch.make_model("RoPE", L)),
        "ALiBi sign flipped": ("BiPE-ALiBi", "sentences", flipped_seg_ids, None),
        "ALiBi segments scrambled": ("BiPE-ALiBi", "sentences", scrambled_seg_ids, None),
        "RoPE without rotation": ("RoPE", "sentences", zero_ids, None),
    }
    out = {}
    for name, (pe, rule, positions, model) in specs.items():
        m, _ = ch.train_model(pe, train_text, rule=rule, positions=positions, model=model,
                              data=torch.Generator().manual_seed(0),
                              boundaries=torch.Generator().manual_seed(1), **kw)
        eval_pos = positions or ch.positions_for(pe, L, rule, chunk_len=18,
                                                 generator=torch.Generator().manual_seed(11))
        nll = ch.token_nll(m, windows, eval_pos)
        out[name] = ch.length_report(nll.mean(0).numpy(), L)
        out[name]["split"] = split_report(nll, windows[:, :-1])
        print(name, {k: round(v, 3) for k, v in out[name].items() if k != "split"},
              out[name]["split"])  # shown with pytest -s
    return out


def blowup(rep):
    return rep["far 8x"] / rep["in-dist"]


def vs_flat(rep, rope, k):
    return rep[f"far {k}x"] / rope[f"far {k}x"]


def other_8x(rep, rope):
    return rep["split"]["far 8x"][1] / rope["split"]["far 8x"][1]


def subject(rep, intra_only, region):
    return rep["split"][region][0] / intra_only["split"][region][0]


def test_bipe_vs_flat_claims_hold_and_fail_for_a_rule_that_fires_everywhere(trained):
    rope, bipe = trained["RoPE"], trained["BiPE-RoPE"]
    for k in (4, 8):
        assert vs_flat(bipe, rope, k) <= ch.C_VS_FLAT
    assert other_8x(bipe, rope) <= ch.C_INTRA_HALF
    assert bipe["far 8x"] / trained["sinusoidal"]["far 8x"] <= ch.C_VS_FLAT
    # a segment rule that fires on every token (seg = t, intra = 0) is plain RoPE again
    flat = trained["flat ids"]
    for k in (4, 8):
        assert vs_flat(flat, rope, k) > ch.C_VS_FLAT
    assert other_8x(flat, rope) > ch.C_INTRA_HALF
    assert flat["far 8x"] / trained["sinusoidal"]["far 8x"] > ch.C_VS_FLAT


def test_segments_claim_fails_when_the_sentences_are_ignored(trained):
    worst = min(trained["chunks"]["far 8x"], trained["random"]["far 8x"])
    assert worst / trained["BiPE-RoPE"]["far 8x"] >= ch.C_SEGMENTS
    # with a rule that fires on every token, sentences are no better than chunks
    assert worst / trained["flat ids"]["far 8x"] < ch.C_SEGMENTS


def test_segment_rope_helps_at_2x_only_when_the_index_reaches_rope(trained):
    # reported, not claimed (it fails on some seeds); on the tests' model it shows
    intra = trained["intra only"]
    assert (subject(trained["BiPE-RoPE"], intra, "far 2x")
            < subject(trained["segments not rotated"], intra, "far 2x"))


def test_rope_blowup_check_fails_for_a_rope_that_does_not_rotate(trained):
    assert blowup(trained["RoPE"]) >= ch.C_ROPE_BLOWUP
    # a "RoPE" baseline whose position ids are all 0 degrades, but far less than 3x
    assert blowup(trained["RoPE without rotation"]) < ch.C_ROPE_BLOWUP


def test_indist_claim_fails_without_the_intra_table(trained):
    assert trained["BiPE-RoPE"]["in-dist"] - trained["RoPE"]["in-dist"] <= ch.C_INDIST_COST
    # BiPE-RoPE without Eq. 2: tokens of one sentence share a rotation and have no order
    gap = trained["no intra table"]["in-dist"] - trained["RoPE"]["in-dist"]
    assert gap > ch.C_INDIST_COST


def test_alibi_claims_fail_with_the_sign_of_eq4_flipped(trained):
    alibi, intra = trained["ALiBi"], trained["intra only"]
    good, broken = trained["BiPE-ALiBi"], trained["ALiBi sign flipped"]
    assert good["all 8x"] - alibi["all 8x"] <= ch.C_VS_ALIBI
    assert good["in-dist"] - alibi["in-dist"] <= ch.C_VS_ALIBI
    assert subject(good, intra, "far 8x") <= ch.C_INTER_ALIBI
    assert broken["all 8x"] - alibi["all 8x"] > ch.C_VS_ALIBI
    assert subject(broken, intra, "far 8x") > ch.C_INTER_ALIBI


def sinusoidal_fit(trained):
    """The chapter's fairness check: the sinusoidal model's in-distribution shortfall
    behind the worst other encoding, over its far(8x) excess over BiPE-RoPE."""
    worst = max(trained[pe]["in-dist"] for pe in ch.VARIANTS if pe != "sinusoidal")
    sin = trained["sinusoidal"]
    return (sin["in-dist"] - worst) / (sin["far 8x"] - trained["BiPE-RoPE"]["far 8x"])


def test_the_sinusoidal_baseline_is_fair(trained):
    assert sinusoidal_fit(trained) <= ch.C_FAIR_SIN


def test_alibi_indist_claim_fails_with_scrambled_segment_indices(trained):
    alibi = trained["ALiBi"]
    assert trained["BiPE-ALiBi"]["in-dist"] - alibi["in-dist"] <= ch.C_VS_ALIBI
    # Eq. 4 on a shuffled segment index: the penalty no longer follows the sentences
    broken = trained["ALiBi segments scrambled"]
    assert broken["in-dist"] - alibi["in-dist"] > ch.C_VS_ALIBI
