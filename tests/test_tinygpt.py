"""The tiny transformer: causality, the positional encodings' invariances, sampling, training."""
import pytest
import torch

from icmlbook.tinygpt import (PE_PRESETS, GPTConfig, TinyGPT, filter_logits, fit_lm, generate,
                              lm_loss, rope)


def model(pe, **kw):
    torch.manual_seed(0)
    return TinyGPT(GPTConfig.preset(pe, vocab_size=11, d_model=16, n_layers=2, n_heads=2,
                                    max_len=32, **kw)).eval()


@pytest.mark.parametrize("pe", sorted(PE_PRESETS))
def test_causal(pe):
    m, x = model(pe), torch.randint(0, 11, (2, 12))
    y = x.clone()
    y[:, 7:] = (y[:, 7:] + 1) % 11
    with torch.no_grad():
        assert torch.allclose(m(x)[:, :7], m(y)[:, :7], atol=1e-5)


@pytest.mark.parametrize("pe", ["rope", "alibi"])
def test_relative_encodings_ignore_a_shift_of_all_positions(pe):
    m, x = model(pe, alibi_scale=4.0), torch.randint(0, 11, (2, 10))
    pos = torch.tensor([[0, 0, 1, 1, 1, 2, 3, 3, 4, 5]])
    with torch.no_grad():
        assert torch.allclose(m(x, rel_pos=pos), m(x, rel_pos=pos + 37), atol=1e-4)
        assert not torch.allclose(m(x, rel_pos=pos), m(x), atol=1e-4)


def test_rope_dot_products_depend_on_offsets_only():
    q, k = torch.randn(1, 1, 1, 8).expand(1, 1, 2, 8), torch.randn(1, 1, 1, 8).expand(1, 1, 2, 8)
    pa, pb = torch.tensor([[3, 7]]), torch.tensor([[13, 17]])
    dots = [(rope(q, p)[..., 1, :] * rope(k, p)[..., 0, :]).sum() for p in (pa, pb)]
    assert torch.allclose(*dots, atol=1e-5)


def test_absolute_tables():
    m = model("learned")
    x = torch.randint(0, 11, (1, 40))                     # longer than max_len=32: clamped, no crash
    assert m(x).shape == (1, 40, 11)
    assert not torch.allclose(m(x[:, :5]), m(x[:, :5], abs_pos=torch.arange(5) + 3))
    with pytest.raises(ValueError, match="unknown positional"):
        GPTConfig.preset("xpos", vocab_size=3)
    with pytest.raises(ValueError, match="rel_pe"):
        GPTConfig(vocab_size=3, rel_pe="t5")


def test_attention_maps_and_hidden_states():
    m = model("alibi")
    m.keep_attention()
    with torch.no_grad():
        h = m(torch.randint(0, 11, (3, 6)), return_hidden=True)
    att = m.blocks[0].attn.last_attn
    assert h.shape == (3, 6, 16) and att.shape == (3, 2, 6, 6)
    assert torch.allclose(att.sum(-1), torch.ones(3, 2, 6)) and (att.triu(1) == 0).all()
    assert m(embeds=torch.randn(1, 4, 16)).shape == (1, 4, 11)


def test_filter_logits():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2))[0].tolist() == [False, False, True, True]
    assert torch.isinf(filter_logits(logits, top_p=0.7))[0].tolist() == [False, False, True, True]
    assert torch.isinf(filter_logits(logits, top_p=0.1))[0].tolist() == [False, True, True, True]
    assert not torch.isinf(filter_logits(logits, top_p=1.0)).any()


@pytest.mark.slow
def test_generate_and_fit():
    m = model("rope")
    data = torch.arange(12).remainder(11).repeat(8, 1)       # 0 1 2 ... 10 0: a deterministic cycle
    before = lm_loss(m, data).item()
    fit_lm(m, lambda step: data, 60, lr=1e-2, progress=False)
    assert lm_loss(m, data).item() < 0.2 * before
    out = generate(m, torch.tensor([[3, 4]]), 5, temperature=0)
    assert out.tolist() == [[3, 4, 5, 6, 7, 8, 9]]
    g = torch.Generator().manual_seed(0)
    assert generate(m, torch.zeros(4, 1, dtype=torch.long), 3, top_p=0.9, generator=g).shape == (4, 4)


def manual_forward(m, x, extra):
    """The forward pass written out: token embedding (times ``m.tok_scale``) + ``extra``."""
    h = m.tok(x) * m.tok_scale + extra
    for block in m.blocks:
        h = block(h, torch.arange(x.shape[1]).expand_as(x))
    return m.head(m.ln_f(h))


@pytest.mark.parametrize("pe", ["none", "learned", "rope", "alibi"])
def test_non_sinusoidal_paths_keep_the_plain_token_embedding(pe):
    m, x = model(pe), torch.randint(0, 11, (2, 9))
    assert m.tok_scale == 1.0
    assert abs(m.tok.weight.std().item() - 0.02) < 0.005  # the init of every other table
    extra = m.pos(torch.arange(9)) if m.pos is not None else 0.0
    with torch.no_grad():
        assert torch.equal(m(x), manual_forward(m, x, extra))
        assert torch.equal(m.tok(x) * m.tok_scale, m.tok(x))


def test_sinusoidal_path_scales_tokens_as_vaswani_et_al():
    from icmlbook.tinygpt import sinusoidal
    m, plain = model("sinusoidal"), model("none")
    d = 16
    assert m.tok_scale == pytest.approx(d ** 0.5)
    # same random draws as any other model, the token table rescaled to std d^-1/2
    assert torch.allclose(m.tok.weight, plain.tok.weight * (d ** -0.5 / 0.02), atol=1e-6)
    for (name, p), (_, q) in zip(m.named_parameters(), plain.named_parameters()):
        if name != "tok.weight":
            assert torch.equal(p, q)
    x = torch.randint(0, 11, (2, 9))
    with torch.no_grad():
        assert torch.equal(m(x), manual_forward(m, x, sinusoidal(torch.arange(9).expand(2, 9),
                                                                 d)))
        rms = (m.tok(x) * m.tok_scale).pow(2).mean().sqrt()
    assert 0.5 < rms < 2.0                             # unit-scale tokens, as the sinusoids


def test_fit_lm_is_torchs_adamw_with_a_cosine_schedule():
    """fit_lm's optimizer (icmlbook.Adam) gives the bits torch.optim.AdamW and LambdaLR
    give: chapters trained before the switch keep their results."""
    import copy
    import math

    a = model("rope").train()
    b = copy.deepcopy(a)
    data = [torch.randint(0, 11, (4, 17), generator=torch.Generator().manual_seed(i))
            for i in range(12)]
    opt = torch.optim.AdamW(a.parameters(), lr=3e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, 12) / 12)))
    for batch in data:
        loss = lm_loss(a, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(a.parameters(), 1.0)
        opt.step()
        sched.step()
    fit_lm(b, lambda s: data[s], 12, weight_decay=0.1, progress=False)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
