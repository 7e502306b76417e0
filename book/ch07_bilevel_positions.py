# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Bilevel positional encoding for length extrapolation
#
# **Paper.** Zhenyu He\*, Guhao Feng\*, Shengjie Luo\*, Kai Yang, Liwei Wang, Jingjing Xu,
# Zhi Zhang, Hongxia Yang, Di He. *Two Stones Hit One Bird: Bilevel Positional Encoding
# for Better Length Extrapolation.* ICML 2024, PMLR 235:17858–17876.
# [arXiv:2401.16421](https://arxiv.org/abs/2401.16421) ·
# [OpenReview](https://openreview.net/forum?id=luqH1eL4PN) ·
# authors' code: [zhenyuhe00/BiPE](https://github.com/zhenyuhe00/BiPE). Everything below is
# written from the paper's description; nothing is copied from the authors' code.
#
# **The problem.** A language model trained on windows of $L$ tokens is usually asked to
# read longer texts. With a flat positional encoding, the positions (or the distances
# between positions) of a longer text were never seen in training, and the loss explodes
# past $L$.
#
# **The idea.** Text is made of *segments*: sentences, lines. BiPE gives every token
# two positions: its position *inside* its segment, encoded by a learned absolute
# table, and the *index* of its segment, encoded by a relative scheme (RoPE or ALiBi)
# inside attention. A longer text has more sentences, not longer ones: the inner
# positions stay in the range seen in training, and the relative encoding only has to
# count sentences, a number that grows about eighteen times more slowly than the
# token count in our data.
#
# **The claim.** BiPE extrapolates to longer inputs far better than the flat encoding
# it is built on, at no in-distribution cost. We train a tiny character-level
# transformer on 64-character windows of a toy language of short chained sentences and
# evaluate it on 1–8× that length, against sinusoidal, RoPE and ALiBi baselines.
#
# **What this book adds or changes.** The data is our own toy language, not the Pile;
# BiPE-ALiBi's slopes are multiplied by 12, not the official code's 96; the
# sinusoidal baseline scales its token embeddings as Vaswani et al. do and gets its own
# learning rate, so that it fits the training length as well as the others. We add two
# ablations (segments that ignore the sentences) and a split of the loss into the one
# letter that needs the previous sentence and all others. That split tells which half
# of BiPE carries the result here: the intra-segment table extrapolates, the RoPE on
# segment indices does not. At $8\times$ BiPE-RoPE guesses the letter that needs the
# previous sentence about blindly, just as flat RoPE does; it keeps everything inside a
# sentence, and RoPE does not.
#
# **Verdict: partly.** BiPE-RoPE's loss at $4\times$ and $8\times$ the training length
# stays far below flat RoPE's and a tuned sinusoidal encoding's, at no in-distribution
# cost, and segments that ignore the sentences lose the gain. But the paper credits the
# inter-segment (relative) half with the extrapolation, and here the RoPE on segment
# indices does not carry it at $8\times$ (findings); BiPE-ALiBi only ties ALiBi (a
# non-inferiority claim); and two claims and one check were restated after runs failed
# them (the Claims section says which and why).

# %% tags=["parameters"]
tier = "default"  # smoke | default | full: size of the experiment
seed = 0  # drives every random number in the chapter
train_len = 64  # training window L in characters; evaluation goes to 8 L
alibi_scale = 12.0  # multiplier of BiPE-ALiBi's head slopes (the official code uses 96)
chunk_len = 18  # segment length of the fixed-chunk and random-boundary ablations

# %% tags=["validate"]
from icmlbook import check_int, check_range, check_seed, check_tier

check_tier(tier)
check_seed(seed)
check_int("train_len", train_len, 32, 96)
check_range("alibi_scale", alibi_scale, 0.0, 200.0, lo_open=True)
check_int("chunk_len", chunk_len, 2, 64)

# %% [markdown]
# ## Setup
#
# The model is the book's tiny causal transformer (`icmlbook.tinygpt`: pre-LayerNorm,
# 2 layers, 4 heads, $d = 48$), which takes two separate sets of position ids, one for
# an absolute table and one for RoPE/ALiBi. BiPE is nothing more than a choice of those
# ids; it is written below, in this chapter. The tier sets the number of training steps
# and of evaluation windows.

# %%
import random

import matplotlib.pyplot as plt
import matplotlib.lines as mlines
import matplotlib.patches as mpatches
import numpy as np
import torch

import icmlbook
from icmlbook.tinygpt import GPTConfig, TinyGPT, fit_lm, token_logprobs
from icmlbook.toylang import Grammar, Tokenizer

run = icmlbook.start("07_bilevel_positions", tier=tier, seed=seed,
                     params=dict(train_len=train_len, alibi_scale=alibi_scale,
                                 chunk_len=chunk_len))
icmlbook.use_style()
cfg = run.pick(
    # parallel: spread the trainings over the cores (at smoke they are too short to
    # repay forking the workers)
    smoke=dict(steps=6, batch=4, n_eval=2, widget_windows=1, train_chars=20_000,
               test_chars=20_000, widget_chars=6_000, parallel=False),
    default=dict(steps=300, batch=16, n_eval=32, widget_windows=4, train_chars=300_000,
                 test_chars=100_000, widget_chars=40_000, parallel=True),
    full=dict(steps=1500, batch=32, n_eval=128, widget_windows=8,
              train_chars=2_000_000, test_chars=100_000, widget_chars=40_000,
              parallel=True),
)
D_MODEL, N_LAYERS, N_HEADS = 48, 2, 4  # the tiny transformer of every variant
LR = 3e-3  # AdamW learning rate (cosine decay, clip 1.0: icmlbook.tinygpt.fit_lm)
# the sinusoidal model's own rate: the best in-distribution loss of 1e-3, 3e-3, 6e-3 and
# 1e-2 (seed 0); at 3e-3 it fits the training length worse than every other encoding
LR_OF = {"sinusoidal": 1e-2}
FACTORS = (1, 2, 4, 8)  # evaluation lengths, in multiples of train_len
FAR = 64  # "far" positions: the last 64 of a window


def py_rng(name):
    """A Python random.Random on the named stream (the toy grammar draws from one)."""
    return random.Random(run.stream_seed(name))


print(
    f"tier {tier}: {cfg.steps} steps of batch {cfg.batch} x {train_len} characters per "
    f"model, evaluation on {cfg.n_eval} windows of {max(FACTORS) * train_len}"
)

# %% [markdown]
# ## The idea in math
#
# Every token $t$ gets two positions instead of one: its **segment index**
# $\mathrm{seg}_t$ (how many sentences came before it) and its **intra-segment
# position** $\mathrm{intra}_t$ (where it sits inside its sentence). The first layer
# adds a learned table of intra positions to the token embedding, and attention sees
# segment indices only through their difference:
#
# $$h^0_t = E_\text{tok}[x_t] + E_\text{intra}[\mathrm{intra}_t], \qquad
#   a_{ij} = \operatorname{score}\big(q_i, k_j;\ \mathrm{seg}_i - \mathrm{seg}_j\big).$$
#
# A text eight times longer has eight times as many sentences, not longer ones: the
# intra positions stay in the range seen in training, and only the segment distances
# grow. Each piece is written out (Eqs. 1–5) directly above the code that computes it.

# %% [markdown]
# ## The toy language
#
# Sentences are "subject verb object [modifiers]." over eight two-letter names, four
# verbs and six modifiers, written out in characters. Two things make positions
# matter. *Inside* a sentence the structure is positional (a name, a verb, a name,
# modifiers, a full stop). *Across* sentences there is a dependency: the subject of
# each sentence is the object of the previous one, so the model has to look back one
# sentence. The number of modifiers sets the segment length: training uses 0–2 (the
# Explore section goes up to 6).

# %%
NAMES = ("al", "bo", "cy", "di", "ed", "fy", "gu", "hu")
VERBS = ("sees", "likes", "calls", "helps")
MODIFIERS = ("today", "again", "twice", "here", "now", "too")
TRAIN_MODS = (0, 2)  # modifiers per sentence in training (inclusive range)
MAX_MODS = 6  # the most any text in this chapter uses


def make_grammar(lo, hi):
    """Sentences 'SUBJ VERB OBJ MOD*k .' with k uniform in lo..hi (toylang's template
    grammar)."""
    templates = [
        (1.0, ("SUBJ", "VERB", "OBJ") + ("MOD",) * k + (".",))
        for k in range(lo, hi + 1)
    ]
    return Grammar(templates=templates,
                   slots={"SUBJ": NAMES, "OBJ": NAMES, "VERB": VERBS, "MOD": MODIFIERS})


CHAIN = make_grammar(*TRAIN_MODS)
# one alphabet for all texts
TOK = Tokenizer.for_grammar(make_grammar(0, MAX_MODS), "char")
SEP_ID = TOK.id(".")


def chain_text(grammar, n_chars, rng):
    """n_chars character ids of running text drawn with ``rng`` (a random.Random); each
    subject repeats the previous object."""
    out, subject = [], rng.choice(NAMES)
    while len(out) < n_chars:
        words = grammar.sentence(rng, fixed={"SUBJ": subject})
        subject = words[2]  # the object becomes the next subject
        out += TOK.encode(words) + [TOK.id(" ")]
    return torch.tensor(out[:n_chars])


def sample_windows(text, n, length, generator):
    """n random windows (n, length) of a long text (they start anywhere, even
    mid-sentence)."""
    starts = torch.randint(0, len(text) - length, (n,), generator=generator)
    return torch.stack([text[s:s + length] for s in starts.tolist()])


train_text = chain_text(CHAIN, cfg.train_chars, py_rng("training text"))
test_text = chain_text(CHAIN, cfg.test_chars, py_rng("test text"))
seg_lengths = np.diff(np.flatnonzero(test_text.numpy() == SEP_ID))
print(f"alphabet of {len(TOK)} characters: {''.join(TOK.symbols)!r}")
print(TOK.decode(test_text[:120].tolist()) + " ...")
print(
    f"segment length: mean {seg_lengths.mean():.1f}, min {seg_lengths.min()}, max "
    f"{seg_lengths.max()} characters; a window of L = {train_len} holds about "
    f"{train_len / seg_lengths.mean():.1f} segments, one of 8 L about "
    f"{8 * train_len / seg_lengths.mean():.0f}"
)

# %% [markdown]
# ## From scratch
#
# ### Bilevel position ids (Eq. 1)
#
# A text $x_0 x_1 \dots x_{T-1}$ is cut into segments by *separators*: $s_t = 1$ if
# token $t$ ends a segment (in the paper, a full stop or a newline; here the character
# "."). A separator belongs to the segment it ends. Each token gets a **segment index**
# and an **intra-segment position**:
#
# $$\mathrm{seg}_t = \sum_{u<t} s_u, \qquad
#   \mathrm{intra}_t = \min\big(t - \max\{u < t : s_u = 1\} - 1,\ L - 1\big),
#   \quad \max\varnothing = -1. \tag{1}$$
#
# For `a b . c d \n e` (separators "." and newline) this gives seg $= 0,0,0,1,1,1,2$ and
# intra $= 0,1,2,0,1,2,0$. The intra position is clamped to the $L$ rows of its table,
# as in the official code.
#
# `segment_ends` marks the tokens that end a segment. The paper's rule is the
# separator ("sentences"); two ablations cut the text into fixed chunks of `chunk_len`
# characters or at random boundaries with the same mean length, to test whether the
# segments have to *mean* something. `bilevel_ids` turns the marks into Eq. 1.

# %%
SEGMENTATIONS = ("sentences", "chunks", "random")


def segment_ends(idx, rule="sentences", *, chunk_len=18, sep_id=SEP_ID, generator=None):
    """Boolean (B, T): does token t end a segment? (the s_t of Eq. 1)"""
    B, T = idx.shape
    if rule == "sentences":
        return idx == sep_id
    if rule == "chunks":
        return (torch.arange(T) % chunk_len == chunk_len - 1).expand(B, T)
    if rule == "random":
        return torch.rand(B, T, generator=generator) < 1.0 / chunk_len
    raise ValueError(f"unknown segmentation {rule!r}; choose from {SEGMENTATIONS}")


def bilevel_ids(ends, max_intra):
    """Eq. 1: (intra, seg), each (B, T), from the segment-end marks (B, T)."""
    B, T = ends.shape
    s = ends.long()
    seg = s.cumsum(1) - s  # sum over u < t: a separator belongs to the segment it ends
    t = torch.arange(T).expand(B, T)
    # last u <= t
    last_end = torch.where(ends, t, torch.full_like(t, -1)).cummax(1).values
    # last u < t
    last_before = torch.cat([torch.full((B, 1), -1), last_end[:, :-1]], dim=1)
    intra = (t - last_before - 1).clamp(max=max_intra - 1)
    return intra, seg


# %% [markdown]
# The example of Eq. 1, with "." and newline as separators (here spelled with two
# characters of our alphabet, "." and "o", so that it fits the tokenizer):

# %%
example = torch.tensor([TOK.encode("ab.cdoe")])
ends = (example == TOK.id(".")) | (example == TOK.id("o"))
intra, seg = bilevel_ids(ends, max_intra=train_len)
print("tokens:", list("ab.cdoe"))
print("seg:   ", seg[0].tolist(), "  (Eq. 1 says 0,0,0,1,1,1,2)")
print("intra: ", intra[0].tolist(), "  (Eq. 1 says 0,1,2,0,1,2,0)")
example_mismatch = int((seg[0] != torch.tensor([0, 0, 0, 1, 1, 1, 2])).sum()
                       + (intra[0] != torch.tensor([0, 1, 2, 0, 1, 2, 0])).sum())

# %% [markdown]
# ### Six position encodings on one transformer (Eqs. 2–4)
#
# **Intra-segment: a learned absolute encoding.** The input of the first layer is
#
# $$h^0_t = E_\text{tok}[x_t] + E_\text{intra}[\mathrm{intra}_t], \qquad
#   E_\text{intra} \in \mathbb R^{L \times d}. \tag{2}$$
#
# **Inter-segment: a relative encoding on segment indices.** In every attention layer,
# with per-head queries and keys $q_i, k_j \in \mathbb R^{d_h}$, BiPE-RoPE rotates them
# by their *segment* index,
#
# $$a_{ij} = \frac{(R_{\mathrm{seg}_i} q_i)^\top (R_{\mathrm{seg}_j} k_j)}{\sqrt{d_h}}
#   = \frac{q_i^\top R_{\mathrm{seg}_j - \mathrm{seg}_i}\, k_j}{\sqrt{d_h}}, \qquad
#   R_p = \operatorname{diag}_k \begin{pmatrix}\cos p\theta_k & -\sin p\theta_k\\
#   \sin p\theta_k & \cos p\theta_k\end{pmatrix},\ \theta_k = 10000^{-2k/d_h}, \tag{3}$$
#
# so the score depends on how many sentences apart two tokens are, and two tokens of
# the same sentence get the same rotation (their order comes from Eq. 2 and the causal
# mask). BiPE-ALiBi instead subtracts a per-head linear penalty in the segment distance,
#
# $$a_{ij} = \frac{q_i^\top k_j}{\sqrt{d_h}} - c\, m_h\,(\mathrm{seg}_i - \mathrm{seg}_j),
#   \qquad m_h = 2^{-8h/H},\ h = 1..H, \tag{4}$$
#
# with a slope multiplier $c$ ($c = 96$ in the official code for 12 heads; we expose it
# as `alibi_scale`). Attention is causal, $a_{ij} = -\infty$ for $j > i$.
#
# **Baselines** are the flat versions: RoPE and ALiBi with $\mathrm{seg}_t$ replaced by
# $t$ in Eqs. 3–4 ($c = 1$, the standard slopes) and no absolute table; and the
# sinusoidal absolute encoding of the original Transformer,
# $h^0_t = \sqrt d\, E_\text{tok}[x_t] + \mathrm{PE}_\text{sin}(t)$, whose token
# embeddings are scaled by $\sqrt d$ (Vaswani et al., Sec. 3.4; drawn at standard
# deviation $d^{-1/2}$) so that they are as large as the unit-amplitude sinusoids.
#
# `TinyGPT` adds a learned table at `abs_pos` (Eq. 2; ids past its $L$ rows are clamped
# to the last one) and applies RoPE or ALiBi at `rel_pos` (Eqs. 3–4; see
# `icmlbook/tinygpt.py`, `rope` and `Attention.forward`). A flat model uses the default
# ids $0, 1, \dots, T-1$; BiPE feeds `abs_pos = intra` and `rel_pos = seg`. That is the
# whole method. Besides the four of the paper's kind (two flat, two bilevel) and the
# sinusoidal baseline, "intra only" is BiPE without its inter-segment half: the intra
# table of Eq. 2 and nothing else, so that each half of BiPE can be tested against the
# model that lacks it.

# %%
VARIANTS = {  # name: (absolute encoding, relative encoding, bilevel ids?)
    "sinusoidal": ("sinusoidal", None, False),
    "RoPE": (None, "rope", False),
    "ALiBi": (None, "alibi", False),
    "BiPE-RoPE": ("learned", "rope", True),  # Eqs. 1-3
    "BiPE-ALiBi": ("learned", "alibi", True),  # Eqs. 1, 2, 4
    # BiPE without its inter-segment half: Eqs. 1-2 only, no RoPE/ALiBi at all
    "intra only": ("learned", None, True),
}
# one colour per encoding in every figure (BiPE-RoPE's segmentations vary the line)
STYLE = icmlbook.method_styles("BiPE-RoPE", "RoPE", "ALiBi", "BiPE-ALiBi", "sinusoidal",
                               "intra only")


def make_model(pe, train_len, alibi_scale=12.0):
    """The tiny transformer with position encoding ``pe`` (a key of VARIANTS)."""
    abs_pe, rel_pe, bilevel = VARIANTS[pe]
    return TinyGPT(
        GPTConfig(
            vocab_size=len(TOK),
            d_model=D_MODEL,
            n_layers=N_LAYERS,
            n_heads=N_HEADS,
            max_len=train_len,
            abs_pe=abs_pe,
            rel_pe=rel_pe,
            alibi_scale=alibi_scale if bilevel else 1.0,
        )
    )


def bipe_positions(max_intra, rule="sentences", *, chunk_len=18, generator=None):
    """idx -> the position ids of BiPE: intra for the absolute table, seg for
    RoPE/ALiBi."""
    def positions(idx):
        ends = segment_ends(idx, rule, chunk_len=chunk_len, generator=generator)
        intra, seg = bilevel_ids(ends, max_intra)
        return dict(abs_pos=intra, rel_pos=seg)
    return positions


def positions_for(pe, train_len, rule="sentences", *, chunk_len=18, generator=None):
    """The position function of a variant (None: the flat ids 0..T-1)."""
    if not VARIANTS[pe][2]:
        return None
    return bipe_positions(train_len, rule, chunk_len=chunk_len, generator=generator)


# %% [markdown]
# Two invariances pin the implementation down (they are also unit tests). Adding a
# constant to every segment index must not change BiPE's logits (Eqs. 3–4 see only
# differences), and within one segment the RoPE score between two tokens must not
# depend on which segment they are in.

# %%
run.reseed("probe weights")  # the untrained models' weights
probe = sample_windows(test_text, 2, 3 * train_len, run.generator("probe windows"))
shift_change = {}
for pe in ("BiPE-RoPE", "BiPE-ALiBi"):
    model = make_model(pe, train_len, alibi_scale).eval()
    pos = positions_for(pe, train_len)(probe)
    with torch.no_grad():
        a = model(probe, **pos)
        b = model(probe, abs_pos=pos["abs_pos"], rel_pos=pos["rel_pos"] + 1000)
    shift_change[pe] = (a - b).abs().max().item()
    print(
        f"{pe}: max |logit change| when every segment index moves by 1000: "
        f"{shift_change[pe]:.1e}"
    )

# %% [markdown]
# ### Training
#
# Every variant gets the same data, the same initial-weight stream and the same number of AdamW steps on
# batches of windows of $L + 1$ characters (cosine-decayed learning rate, the library's
# `fit_lm`). All use the learning rate `LR` except the sinusoidal model, which fits
# the training length only at a larger one (`LR_OF`). The random-boundary ablation
# draws fresh boundaries for every batch.

# %%
def train_model(
    pe,
    text,
    *,
    train_len,
    steps,
    batch,
    init,
    data,
    boundaries=None,
    rule="sentences",
    chunk_len=18,
    alibi_scale=12.0,
    lr=None,
    positions=None,
    model=None,
):
    """Train one variant on next-character prediction; returns (model, losses).

    ``init`` seeds the weights, ``data`` (a torch.Generator) draws the training windows
    and ``boundaries`` the random segment boundaries of that ablation.
    ``positions``/``model`` override the variant's own (the tests use them to break
    things); ``lr`` defaults to the variant's rate."""
    lr = LR_OF.get(pe, LR) if lr is None else lr
    torch.manual_seed(init)
    model = make_model(pe, train_len, alibi_scale) if model is None else model
    if positions is None:
        positions = positions_for(pe, train_len, rule, chunk_len=chunk_len,
                                  generator=boundaries)
    losses = fit_lm(
        model,
        lambda step: sample_windows(text, batch, train_len + 1, data),
        steps,
        lr=lr,
        positions=positions,
        progress=False,
    )
    return model, losses


# %% [markdown]
# ### The per-position loss (Eq. 5)
#
# A causal model's prediction at position $t$ depends only on $x_{\le t}$, and so do
# the ids of Eq. 1. One pass over a window of $8L$ tokens therefore gives the loss at
# every length up to $8L$: the per-position loss
#
# $$\ell_t = -\log p_\theta(x_{t+1} \mid x_{\le t}), \qquad
#   \text{in-dist} = \frac1L \sum_{t<L} \ell_t, \qquad
#   \text{far}(k) = \frac1{64}\sum_{kL - 64 \le t < kL} \ell_t, \tag{5}$$
#
# averaged over many windows. $\text{far}(k)$ is the loss on the last 64 positions of a
# window $k$ times the training length, positions never seen in training for $k \ge 2$.

# %%
@torch.no_grad()
def token_nll(model, windows, positions=None, batch=8):
    """-log p(x_{t+1} | x_{<=t}) for every one of (n, T + 1) windows and position t: (n,
    T)."""
    model.eval()
    out = []
    for w in windows.split(batch):
        inputs = w[:, :-1]
        kw = positions(inputs) if positions is not None else {}
        out.append(-token_logprobs(model(inputs, **kw), w[:, 1:]))
    return torch.cat(out)


def per_position_nll(model, windows, positions=None, batch=8):
    """Eq. 5: the loss l_t at every position t, averaged over the windows."""
    return token_nll(model, windows, positions, batch).mean(0).numpy()


def length_report(curve, train_len, factors=FACTORS, far=FAR):
    """Eq. 5: in-distribution loss and far(k), the loss on the last ``far`` positions of
    k L."""
    out = {"in-dist": float(curve[:train_len].mean())}
    for k in factors:
        out[f"far {k}x"] = float(
            curve[max(0, k * train_len - far) : k * train_len].mean()
        )
        out[f"all {k}x"] = float(curve[:k * train_len].mean())
    return out


# %% [markdown]
# ## The experiment
#
# Six encodings on sentence segments, plus BiPE-RoPE trained and evaluated with the two
# meaningless segmentations. Each model is read on the same $8L$-character test
# windows (random starting points in a held-out text). `fit_and_read` trains one
# variant and keeps its per-token loss.

# %%
eval_windows = sample_windows(test_text, cfg.n_eval, max(FACTORS) * train_len + 1,
                              run.generator("evaluation windows"))


def fit_and_read(pe, rule):
    """Train the variant (pe, rule) and read it on the test windows: (model, training
    losses, per-token loss of every test window)."""
    model, losses = train_model(pe, train_text, train_len=train_len, steps=cfg.steps,
                                batch=cfg.batch, init=run.stream_seed("weights"),
                                data=run.generator("training windows"),
                                boundaries=run.generator("training boundaries"),
                                rule=rule, chunk_len=chunk_len, alibi_scale=alibi_scale)
    eval_pos = positions_for(pe, train_len, rule, chunk_len=chunk_len,
                             generator=run.generator("evaluation boundaries"))
    return model, losses, token_nll(model, eval_windows, eval_pos)


# %% [markdown]
# The eight trainings are independent and each seeds itself, so they are spread over
# the machine's cores (forked processes, one thread each, on Linux); the results are
# the bits a plain loop gives, only sooner.

# %% tags=["hide-input"]
import multiprocessing
import os
import sys


def on_cores(fn, jobs, desc, parallel=True):
    """[fn(*job) for job in jobs], on up to one forked process per core (Linux); the
    plain loop elsewhere, on one core, or with parallel=False."""
    workers = min(len(jobs), os.cpu_count() or 1) if parallel else 1
    if workers < 2 or not sys.platform.startswith("linux"):
        return [fn(*job) for job in icmlbook.progress(jobs, desc=desc)]
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return list(icmlbook.progress(pool.imap(_star, [(fn, job) for job in jobs]),
                                      desc=desc, total=len(jobs)))


def _star(fn_job):
    fn, job = fn_job
    return fn(*job)


# %%
RUNS = [("sinusoidal", "sentences"), ("RoPE", "sentences"), ("ALiBi", "sentences"),
        ("BiPE-RoPE", "sentences"), ("BiPE-ALiBi", "sentences"),
        ("intra only", "sentences"),
        ("BiPE-RoPE", "chunks"), ("BiPE-RoPE", "random")]  # the segmentation ablations
fitted = dict(zip(RUNS, on_cores(fit_and_read, RUNS, desc="models",
                                 parallel=cfg.parallel)))
models = {key: model for key, (model, _, _) in fitted.items()}
nlls = {key: nll for key, (_, _, nll) in fitted.items()}
curves = {key: nll.mean(0).numpy() for key, nll in nlls.items()}
reports = {key: length_report(c, train_len) for key, c in curves.items()}
for key, (_, losses, _) in fitted.items():
    print(f"{key[0]:>11} ({key[1]}): final training loss "
          f"{np.mean(losses[-20:]):.3f}")

# %% [markdown]
# ### Per-position loss
#
# The curves are smoothed over 16 positions. Dotted lines mark $L$, $2L$ and $4L$;
# everything right of the first one is a position no model has seen in training.

# %% tags=["hide-input"]
def smooth(curve, w=16):
    """Moving mean over w positions (for display)."""
    return np.convolve(curve, np.ones(w) / w, mode="valid")


def log_loss_axis(ax):
    """A log-scaled loss axis whose tick labels do not overlap (0.5, 1, 2)."""
    icmlbook.log_axis(ax, "y")


fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
for pe in VARIANTS:
    ax = axes[1] if "ALiBi" in pe else axes[0]
    ax.plot(smooth(curves[(pe, "sentences")]), lw=1.2, **STYLE[pe])
for ax, title in zip(axes, ("absolute and rotary", "linear biases (ALiBi)")):
    for k in (1, 2, 4):
        ax.axvline(k * train_len, color="k", ls=":", lw=0.8)
    log_loss_axis(ax)
    ax.set(xlabel="position t", title=title)
    ax.legend(loc="upper left")
axes[0].set_ylabel(r"loss $\ell_t$ (nats/char)")
plt.show()

# %% [markdown]
# ### The table of Eq. 5
#
# Loss in nats per character, "all tokens / last 64 tokens" of a window of $k L$
# (at $1\times$ both are the in-distribution loss). The last column is the number of
# parameters: BiPE's intra table adds $L \times d$ = 3,072 to about 58,000.

# %%
def table_row(name, rep, n_params):
    cells = [f"{rep['in-dist']:.3f}"] + [
        f"{rep[f'all {k}x']:.3f} / {rep[f'far {k}x']:.3f}" for k in FACTORS[1:]
    ]
    return f"{name:<22}" + "".join(f"{c:>16}" for c in cells) + f"{n_params:>9,d}"


print(
    f"{'model':<22}" + "".join(f"{f'L x {k}':>16}" for k in FACTORS) + f"{'params':>9}"
)
for (pe, rule), rep in reports.items():
    print(table_row(pe if rule == "sentences" else f"{pe} ({rule})", rep,
                    models[(pe, rule)].n_params()))
for (pe, rule), rep in reports.items():
    run.metric(f"{pe} {rule}", {k: round(v, 4) for k, v in rep.items()})

# %% [markdown]
# Four things to read off. In distribution every encoding fits about equally well (the
# sinusoidal one at its own learning rate). RoPE and the sinusoidal encoding leave
# their training range badly: the sinusoidal model at once, since its input at an
# unseen position is one the network never read, RoPE progressively, as the unseen
# rotation angles of longer distances take over. BiPE-RoPE uses the same rotations,
# but on segment indices, and its far loss grows far more slowly: a longer text has more
# sentences, not longer ones. It is not flat at $8\times$ though: at $8L$ the segment
# distances (about 30) are also unseen (training windows hold about 4 sentences), and
# the loss creeps up, to about where "intra only", which has no inter-segment encoding
# at all, ends. ALiBi is already flat on this toy, whose dependencies reach at most one
# sentence back, and BiPE-ALiBi is flat too.

# %% [markdown]
# ### What gets harder far out?
#
# Only one kind of character needs the previous sentence: the first letter of a
# subject, which repeats the previous object (the names have distinct first letters,
# so the rest of the name follows). Guessing it blindly costs $\ln 8 \approx 2.08$
# nats. We split the loss into those characters and all others, in distribution
# ($t < L$) and far ($t \ge 8L - 64$), and measure where attention goes: the mass,
# averaged over layers and heads, on the query's own sentence, the previous one, and
# older ones.

# %%
def attention_by_segment(model, windows, positions, regions):
    """Mean attention mass of the queries of each region on their own, the previous
    and older segments: {region: [own, previous, older]}."""
    model.keep_attention()
    with torch.no_grad():
        model(windows, **(positions(windows) if positions is not None else {}))
    # (n, T, T)
    att = torch.stack([b.attn.last_attn for b in model.blocks]).mean((0, 2))
    model.keep_attention(False)
    _, seg = bilevel_ids(segment_ends(windows), max_intra=1)
    dist = seg[:, :, None] - seg[:, None, :]
    return {name: [float((att[:, q] * m).sum(-1).mean())
                   for m in (dist[:, q] == 0, dist[:, q] == 1, dist[:, q] >= 2)]
            for name, q in regions.items()}


inputs = eval_windows[:, :-1]
T8 = inputs.shape[1]
# the target x_{t+1} starts a subject
subject = torch.zeros_like(inputs, dtype=torch.bool)
subject[:, 1:] = (inputs[:, 1:] == TOK.id(" ")) & (inputs[:, :-1] == SEP_ID)
regions = {"in-dist": slice(0, train_len), "far 2x": slice(2 * train_len - FAR,
                                                         2 * train_len),
           "far 8x": slice(T8 - FAR, T8)}
print(
    f"{'model':<12}{'region':>9} | {'subject':>8} {'others':>7} | attention on: "
    f"{'own':>5} {'prev':>5} {'older':>5}"
)
split = {}
for pe in ("RoPE", "BiPE-RoPE", "ALiBi", "BiPE-ALiBi", "intra only"):
    nll = nlls[(pe, "sentences")]
    mass = attention_by_segment(models[(pe, "sentences")], inputs[:8],
                                positions_for(pe, train_len), regions)
    for region, r in regions.items():
        subj, other = nll[:, r][subject[:, r]].mean(), nll[:, r][~subject[:, r]].mean()
        own, prev, older = mass[region]
        split[(pe, region)] = (float(subj), float(other))
        print(
            f"{pe:<12}{region:>9} | {subj:8.3f} {other:7.3f} | {'':>13} {own:5.2f} "
            f"{prev:5.2f} {older:5.2f}"
        )
run.metric(
    "loss on subject letters / others",
    {
        f"{pe} {region}": [round(v, 3) for v in vals]
        for (pe, region), vals in split.items()
    },
)

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(8, 2.8), sharey=True)
names = ["RoPE", "BiPE-RoPE", "ALiBi", "BiPE-ALiBi", "intra only"]
x = np.arange(len(names))
colours = [STYLE[pe]["color"] for pe in names]
for ax, (region, title) in zip(axes, (("in-dist", "in distribution (t < L)"),
                                      ("far 8x", f"far: last {FAR} of 8L"))):
    ax.bar(x - 0.2, [split[(pe, region)][0] for pe in names], 0.4, color=colours,
           edgecolor=colours)
    ax.bar(x + 0.2, [split[(pe, region)][1] for pe in names], 0.4, color="white",
           edgecolor=colours, hatch="////")
    ax.axhline(np.log(8), color="k", ls=":", lw=1)
    ax.set_xticks(x, names)
    ax.set(title=title)
axes[0].set(ylabel="loss (nats/char)")
axes[0].legend(
    handles=[
        mpatches.Patch(facecolor="0.4", edgecolor="0.4", label="subject letters"),
        mpatches.Patch(facecolor="white", edgecolor="0.4", hatch="////",
                       label="other letters"),
        mlines.Line2D([], [], color="k", ls=":", lw=1,
                      label="ln 8: guessing the subject"),
    ],
    loc="upper left",
    fontsize=7,
)
plt.show()

# %% [markdown]
# The split shows where BiPE-RoPE's advantage comes from on this toy (the "Across
# seeds" table below shows how it varies from seed to seed). At $8\times$ **both**
# rotary models lose most of the cross-sentence lookup: the subject letter costs about
# $\ln 8$ (a blind guess) or more on most seeds, and their attention spreads over
# older sentences. What BiPE-RoPE keeps is everything *inside* a sentence, because
# every token's intra position is one it was trained on; RoPE loses that too. So here
# the intra-segment half of BiPE extrapolates and the inter-segment half does not: at
# $8L$ the segment distances (about 30) are as unseen by BiPE-RoPE's rotations as token
# distances are by RoPE's. At $2\times$ the segment distances are only twice those of
# training and the lookup partly survives. The ALiBi models keep the lookup at every
# length, because their linear penalty makes distant sentences irrelevant whatever
# their distance. (In distribution the subject costs more than far out because the
# first subject of a window often has no previous sentence in view.)
#
# ### Do the segments have to mean something?
#
# The same BiPE-RoPE with segments of the same mean length that ignore the sentences:
# fixed chunks, or random boundaries.

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6, 2.8))
for rule, ls in zip(SEGMENTATIONS, ("-", "--", ":")):
    ax.plot(smooth(curves[("BiPE-RoPE", rule)]), lw=1.2,
            **{**STYLE["BiPE-RoPE"], "linestyle": ls, "label": f"BiPE-RoPE, {rule}"})
ax.plot(smooth(curves[("RoPE", "sentences")]), lw=1,
        **{**STYLE["RoPE"], "label": "RoPE (flat)"})
ax.axvline(train_len, color="k", ls=":", lw=0.8)
log_loss_axis(ax)
ax.set(xlabel="position t", ylabel=r"loss $\ell_t$ (nats/char)",
       title="BiPE-RoPE with three segmentation rules")
ax.legend(loc="upper left")
plt.show()

# %% [markdown]
# Fixed chunks turn BiPE into a coarse flat encoding (the chunk index is just $\lfloor
# t / 18\rfloor$): the segment index no longer tells "same sentence" from "previous
# sentence", and the model extrapolates no better than RoPE. Random boundaries also cost
# in-distribution loss, because the intra position stops meaning "where in the
# sentence". The gain comes from segments aligned with the structure of the text.

# %% [markdown]
# ## Claims
#
# Paper claims first, each against an ablation (the same transformer with one piece of
# BiPE removed) or a baseline; then checks, which must hold if the code is right but
# are no evidence for the paper; then findings, which the run records but does not
# enforce. "far $k\times$" is Eq. 5's loss on the last 64 positions of a window $kL$
# long; "subject letters" are the characters that need the previous sentence, "other
# letters" all the rest (the split above). Each claim states its strength and where its
# threshold came from.
#
# - **BiPE against flat RoPE** (its ablation: the bilevel ids removed). BiPE-RoPE's far
#   loss is at most `C_VS_FLAT` of RoPE's, at $4\times$ and at $8\times$
#   (superiority), and its in-distribution loss at most `C_INDIST_COST` nats above
#   RoPE's (non-inferiority: the paper claims no more).
# - **The intra-segment half carries the result.** At $8\times$, BiPE-RoPE's loss on the
#   other letters is at most `C_INTRA_HALF` of RoPE's.
# - **The inter-segment half, where it works.** With ALiBi on segment indices, at
#   $8\times$, BiPE-ALiBi's subject-letter loss is at most `C_INTER_ALIBI` of that of
#   BiPE without its inter-segment half ("intra only": Eqs. 1–2, no RoPE at all).
# - **The segments must mean something.** BiPE-RoPE with fixed chunks or random
#   boundaries has a far $8\times$ loss at least `C_SEGMENTS` times that with sentences.
# - **Against the baselines.** ALiBi is the strongest flat encoding on this toy (it is
#   flat to $8\times$). BiPE-ALiBi's loss over all $8L$ tokens, and in distribution, is at
#   most `C_VS_ALIBI` nats above ALiBi's: non-inferiority, where the paper claims that
#   BiPE-ALiBi beats ALiBi (whether it does is recorded as the strict version of the
#   claim and as a finding). The tuned sinusoidal encoding, the paper's absolute
#   baseline: BiPE-RoPE's far $8\times$ loss is at most `C_VS_FLAT` of its loss.
#
# **Checks.** Flat RoPE blows up past its training length (the toy's premise); the
# sinusoidal baseline fits the training length (its in-distribution shortfall behind
# the worst other encoding is at most `C_FAIR_SIN` of the far $8\times$ gap that the
# baseline claim measures); Eqs. 3–4 see segment differences only; the ids of Eq. 1's
# example; and BiPE adds exactly the $L \times d$ intra table.
#
# **Findings: what did not reproduce, or not on every seed.** The paper's argument is
# that relative encoding on segment indices extrapolates because segment distances grow
# slowly. Here they still grow to about eight times those of training, and at $8\times$
# BiPE-RoPE's subject-letter loss is about $\ln 8$, the cost of a blind guess, or above
# it (when the model guesses wrongly with confidence) on most seeds, and its far loss is
# no lower than that of "intra only", which has no inter-segment encoding at all: both
# are findings against the paper. At $2\times$ the RoPE on segment indices still helps
# with the previous sentence, by an amount that varies from seed to seed (a finding:
# subject letters against "intra only"). Two more findings record how much BiPE-RoPE's
# loss rises at $2\times$ and whether BiPE-ALiBi beats ALiBi at $8\times$.
#
# **Changed after a failure.** Three statements were changed after runs failed them
# (the verdict counts the two claims that came out of it as weaker): (1) an earlier claim that BiPE-RoPE's subject-letter
# loss at $2\times$ is at most 0.7 of that of "intra only" held on seeds 0–9 and failed
# on two of seeds 10–14; it is now a finding. (2) An earlier claim that BiPE-RoPE's whole
# far $2\times$ loss is at most 1.2 times its in-distribution loss (a bar loosened from
# 1.15) measured 1.19 on one of seeds 5–9; that ratio mixes the two halves, which the
# split shows behave differently, so it is now a finding (against the original 1.15) and
# the claims are on each half separately. (3) The check that the sinusoidal baseline
# fits the training length compared its in-distribution loss with RoPE's (at most 0.05
# nats apart) and failed on seed 19, at 0.055; a difference of two separately trained
# models' losses is as noisy as the bar is small (the earlier version's seeds spanned
# $\pm 0.035$). It is now the ratio above: the
# question the check answers is whether the baseline's fit could explain the gap the
# baseline claim measures, and against that gap its shortfall is tiny. The old
# difference is still recorded (`in-dist sinusoidal - RoPE`).
#
# **The paper's verdict** follows the book's rule (`icmlbook.verdicts`): a headline is
# reproduced only when its claims hold at full strength (superiority, threshold not
# changed after a failure) and its findings go the paper's way. The paper's five
# headlines are named below, with the claims and findings that test each; the theory
# headline is not testable here.
#
# Thresholds were calibrated on trial runs and on seeds 0–9 of an earlier version of
# this experiment (the same models and data, before its random numbers came from named
# streams) and kept unchanged for the runs over seeds 0–19 of this version at the
# default tier; each comment says what was measured.

# %% tags=["thresholds"]
# the paper's verdict follows icmlbook.verdicts' rule, fixed before the final sweep
# (seeds 0-9 below: the runs of this experiment before its random numbers came from
# named streams; the thresholds were kept unchanged for the runs over seeds 0-19)
# far(k) of BiPE-RoPE / far(k) of RoPE (and / sinusoidal at 8x); calibrated: trials
# 0.24-0.37, then seeds 0-9: 0.24-0.37 (4x), 0.24-0.33 (8x), 0.23-0.28 (sinusoidal)
C_VS_FLAT = 0.5
# in-dist(BiPE-RoPE) - in-dist(RoPE), nats; calibrated: seed 0 -0.02, seeds 0-9
# -0.04-0.005 (non-inferiority; its strict version is <= 0)
C_INDIST_COST = 0.05
# other letters, far(8x), BiPE-RoPE / RoPE; changed after failure (it replaced the
# whole-loss far(2x) / in-dist claim): trials 0.22-0.30, seeds 0-9 0.22-0.29
C_INTRA_HALF = 0.5
# subject letters, far(8x), BiPE-ALiBi / intra only; changed after failure (as above):
# seed 0 0.16, seeds 0-9 0.03-0.32
C_INTER_ALIBI = 0.5
# far(8x) of a meaningless segmentation / sentences; calibrated: seed 0 2.4, seeds 0-9
# 1.7-2.4
C_SEGMENTS = 1.5
# BiPE-ALiBi - ALiBi, nats (all 8x tokens; in-dist); calibrated: trials far(8x) up to
# +0.04, seed 0 -0.02 on both, seeds 0-9 -0.02-0.03 (non-inferiority; strict <= 0)
C_VS_ALIBI = 0.05
C_ROPE_BLOWUP = 3.0  # far(8x) / in-dist of flat RoPE; trials 4.9-6.0; seeds 0-9 too
# sinusoidal in-dist shortfall behind the worst other encoding / its far(8x) excess
# over BiPE-RoPE: the baseline's fit is tiny next to the gap the claim measures.
# Changed after failure: it was in-dist(sinusoidal) - in-dist(RoPE) <= 0.05 nats
# (seeds 0-9 -0.03-0.03), which a fresh seed (19) failed at 0.055; that difference is
# kept as a metric. Ratio on seeds 0-9 of that version: -0.025-0.014, on seeds 10-19
# at most 0.029
C_FAIR_SIN = 0.1
C_SHIFT = 1e-4  # max |logit change| when all segment ids move by 1000 (float32)
C_IDS = 0  # ids of the example of Eq. 1 that differ from the hand-computed ones
C_TABLE = 0  # |params(BiPE) - params(RoPE) - L d|: the intra table, by construction
# finding reference: "near-flat at 2x", far(2x) of BiPE-RoPE within 15 % of its
# in-distribution loss (the bar set before any run, later loosened and then dropped)
C_NEAR_FLAT = 1.15

# %%
rep = {pe: reports[(pe, "sentences")] for pe in VARIANTS}
bipe, rope = rep["BiPE-RoPE"], rep["RoPE"]
ROPE_ABLATION = "RoPE: the same model with flat position ids"
for k in (4, 8):
    run.claim(f"BiPE-RoPE / RoPE far({k}x)", bipe[f"far {k}x"] / rope[f"far {k}x"],
              "<=", C_VS_FLAT,
              f"BiPE-RoPE's loss at {k}x the training length is far below RoPE's",
              versus="ablation", against=ROPE_ABLATION, strength="superiority",
              provenance="calibrated")
run.claim("in-dist cost BiPE-RoPE - RoPE", bipe["in-dist"] - rope["in-dist"], "<=",
          C_INDIST_COST, "BiPE-RoPE costs nothing in distribution", versus="ablation",
          against=ROPE_ABLATION, strength="non-inferiority", provenance="calibrated",
          strict=0.0)
run.claim("other letters far(8x): BiPE-RoPE / RoPE",
          split[("BiPE-RoPE", "far 8x")][1] / split[("RoPE", "far 8x")][1], "<=",
          C_INTRA_HALF,
          "inside a sentence BiPE-RoPE keeps its loss at 8x; RoPE does not",
          versus="ablation", against=ROPE_ABLATION, strength="superiority",
          provenance="changed after failure")
run.claim("subject letters far(8x): BiPE-ALiBi / intra only",
          split[("BiPE-ALiBi", "far 8x")][0] / split[("intra only", "far 8x")][0], "<=",
          C_INTER_ALIBI, "ALiBi on segment indices finds the previous sentence at 8x",
          versus="ablation", against="BiPE without its inter-segment encoding",
          strength="superiority", provenance="changed after failure")
worst_ablation = min(reports[("BiPE-RoPE", r)]["far 8x"] for r in ("chunks", "random"))
run.claim("meaningless segments / sentences far(8x)", worst_ablation / bipe["far 8x"],
          ">=", C_SEGMENTS, "BiPE needs segments that follow the text's structure",
          versus="ablation", against="BiPE-RoPE on fixed chunks or random boundaries",
          strength="superiority", provenance="calibrated")
ALIBI_BASELINE = "ALiBi, the strongest flat encoding on this toy"
run.claim("BiPE-ALiBi - ALiBi, all 8x tokens",
          rep["BiPE-ALiBi"]["all 8x"] - rep["ALiBi"]["all 8x"], "<=", C_VS_ALIBI,
          "BiPE-ALiBi is as good as ALiBi over 8x the training length",
          versus="baseline", against=ALIBI_BASELINE, strength="non-inferiority",
          provenance="calibrated", strict=0.0)
run.claim("in-dist BiPE-ALiBi - ALiBi", rep["BiPE-ALiBi"]["in-dist"] - rep["ALiBi"][
          "in-dist"], "<=", C_VS_ALIBI, "BiPE-ALiBi costs nothing in distribution",
          versus="baseline", against=ALIBI_BASELINE, strength="non-inferiority",
          provenance="calibrated", strict=0.0)
run.claim("BiPE-RoPE / sinusoidal far(8x)",
          bipe["far 8x"] / rep["sinusoidal"]["far 8x"], "<=", C_VS_FLAT,
          "BiPE-RoPE extrapolates far better than sinusoids",
          versus="baseline", against="sinusoidal APE, sqrt(d)-scaled tokens, own rate",
          strength="superiority", provenance="calibrated")

# %%
run.check("RoPE far(8x) / in-dist", rope["far 8x"] / rope["in-dist"], ">=",
          C_ROPE_BLOWUP, "the toy exposes flat RoPE's failure past its training length")
worst_other_fit = max(rep[pe]["in-dist"] for pe in VARIANTS if pe != "sinusoidal")
sin_shortfall = rep["sinusoidal"]["in-dist"] - worst_other_fit
sin_excess = rep["sinusoidal"]["far 8x"] - bipe["far 8x"]
run.check("sinusoidal in-dist shortfall / far(8x) excess", sin_shortfall / sin_excess,
          "<=", C_FAIR_SIN,
          "the sinusoidal baseline fits the training length (next to the gap claimed)")
run.metric("in-dist sinusoidal - RoPE", rep["sinusoidal"]["in-dist"] - rope["in-dist"])
for pe, change in shift_change.items():
    run.check(f"{pe}: logit change under a segment shift", change, "<=", C_SHIFT,
              "Eqs. 3-4 see segment differences only")
run.check("ids of the Eq. 1 example that differ", example_mismatch, "<=", C_IDS,
          "seg and intra of 'a b . c d \\n e'")
table = models[("BiPE-RoPE", "sentences")].n_params() - models[("RoPE", "sentences")
                                                              ].n_params()
run.check("|extra params - L d|", abs(table - train_len * D_MODEL), "<=", C_TABLE,
          "BiPE adds only the intra table")

# %%
subject_8x_vs_guess = split[("BiPE-RoPE", "far 8x")][0] - np.log(8)
run.finding("subject letters far(8x): BiPE-RoPE - ln 8", subject_8x_vs_guess, "<", 0.0,
            paper="the inter-segment encoding models the relationships between "
                  "segments and aims to improve extrapolation",
            shows="at 8x BiPE-RoPE guesses the letter that needs the previous sentence "
                  "about blindly (ln 8)")
run.finding("far(8x): BiPE-RoPE / intra only", bipe["far 8x"] / rep["intra only"][
            "far 8x"], "<", 1.0,
            paper="the inter-segment (relative) encoding improves extrapolation",
            shows="at 8x BiPE-RoPE is no better than BiPE without its RoPE")
run.finding("subject letters far(2x): BiPE-RoPE / intra only",
            split[("BiPE-RoPE", "far 2x")][0] / split[("intra only", "far 2x")][0], "<",
            1.0, paper="the inter-segment encoding models the relationships between "
                       "segments",
            shows="at 2x the RoPE on segment indices helps with the previous sentence, "
                  "by an amount that varies from seed to seed")
run.finding("far(2x) / in-dist BiPE-RoPE", bipe["far 2x"] / bipe["in-dist"], "<=",
            C_NEAR_FLAT, paper="BiPE keeps its loss low beyond the training length",
            shows="how much BiPE-RoPE's loss rises at 2x (the seeds within 15 % are "
                  "counted across seeds)")
run.finding("far(8x): BiPE-ALiBi - ALiBi", rep["BiPE-ALiBi"]["far 8x"]
            - rep["ALiBi"]["far 8x"], "<", 0.0,
            paper="BiPE-ALiBi extrapolates better than ALiBi",
            shows="on this toy BiPE-ALiBi ties ALiBi: either is ahead, by a few "
                  "hundredths of a nat")
run.headline(
    "length extrapolation",
    "our BiPE has superior length extrapolation capabilities across a wide range of "
    "tasks in diverse text modalities",
    source="Abstract; Sec. 4 (perplexity at up to 6x the training length)",
    claims=["BiPE-RoPE / RoPE far(4x)", "BiPE-RoPE / RoPE far(8x)",
            "BiPE-RoPE / sinusoidal far(8x)", "BiPE-ALiBi - ALiBi, all 8x tokens"],
    findings=["far(2x) / in-dist BiPE-RoPE", "far(8x): BiPE-ALiBi - ALiBi"],
)
run.headline(
    "no in-distribution cost",
    "BiPE stays competitive in distribution (paraphrased from the experiments)",
    source="Sec. 4 (evaluation at the training length)",
    claims=["in-dist cost BiPE-RoPE - RoPE", "in-dist BiPE-ALiBi - ALiBi"],
)
run.headline(
    "two encodings, two jobs",
    "The intra-segment encoding identifies the locations within a segment [...] via "
    "absolute positional encoding. The inter-segment encoding specifies the segment "
    "index, models the relationships between segments, and aims to improve "
    "extrapolation capabilities via relative positional encoding.",
    source="Abstract; Sec. 3",
    claims=["other letters far(8x): BiPE-RoPE / RoPE",
            "subject letters far(8x): BiPE-ALiBi / intra only"],
    findings=["subject letters far(8x): BiPE-RoPE - ln 8",
              "far(8x): BiPE-RoPE / intra only",
              "subject letters far(2x): BiPE-RoPE / intra only"],
)
run.headline(
    "segments from the text",
    "we leverage the intrinsic segmentation of language sequences",
    source="Abstract; Fig. 1 (segment lengths on PG-19)",
    claims=["meaningless segments / sentences far(8x)"],
)
run.headline(
    "theory",
    "Theoretical analysis shows this disentanglement of positional information makes "
    "learning more effective.",
    source="Abstract; Sec. 3 (Bi-NFA)",
    testable=False,
    why="a statement about the size of Transformers that represent bilevel automata, "
        "proved in the paper; no experiment at our scale tests it",
)

# %%
# NBVAL_CHECK_OUTPUT
run.verdict()

# %% [markdown]
# ## Across seeds
#
# One run is one seed. The table and strip plot below read this chapter's results
# file, made by `icmlbook sweep 07 --seeds 0-19 --update-results`: every claim, check
# and finding over seeds 0–19 at the default tier (the thresholds were fixed before
# these runs; seeds 0–9 calibrate, seeds 10–19 confirm), with the number of seeds on
# which it holds and its worst margin (how far inside the threshold the worst seed
# stayed); the paper's verdict over the seeds follows the same rule as a single run's.

# %%
across = icmlbook.across_seeds(run)

# %% [markdown]
# ## What a broken BiPE does
#
# The commonest bug is a segment rule that fires on the wrong tokens. If every token
# "ends a segment" (say the test reads `idx != sep_id`), Eq. 1 gives $\mathrm{seg}_t = t$
# and $\mathrm{intra}_t = 0$: BiPE-RoPE silently becomes plain RoPE and fails "BiPE
# against flat RoPE" at $4\times$ and $8\times$ and the within-sentence claim. The unit
# tests train this and other broken variants and check that each fails its claim: no
# intra table (Eq. 2 forgotten) fails the in-distribution cost; segment indices
# scrambled before Eq. 4 (a fixed shuffle of the positions) fail "in-dist BiPE-ALiBi -
# ALiBi"; the sign of Eq. 4 flipped, so that ALiBi rewards distant segments, fails the
# ALiBi claims over all $8L$ tokens and on the subject letters at $8\times$; a
# segmentation that ignores the sentences fails "the segments must mean something" by
# construction; and a "RoPE" baseline whose position ids are all 0, so that nothing
# rotates, fails the blow-up check. Here are the ids the first bug produces:

# %%
snippet = test_text[:26][None]
good_intra, good_seg = bilevel_ids(segment_ends(snippet), train_len)
bad_intra, bad_seg = bilevel_ids(snippet != SEP_ID, train_len)
rows = {"text": list(TOK.decode(snippet[0].tolist())),
        "seg, right": good_seg[0].tolist(), "seg, broken": bad_seg[0].tolist(),
        "intra, right": good_intra[0].tolist(), "intra, broken": bad_intra[0].tolist()}
for name, values in rows.items():
    print(f"{name:<14}" + "".join(f"{v:>3}" for v in values))

# %% [markdown]
# ## Explore
#
# Pick an encoding, the test length (in multiples of $L$, up to $16\times$), the number
# of modifiers per sentence in the *test* text (training used 0–2: longer sentences
# push the intra positions past anything BiPE saw, and its absolute table is a learned
# one) and the segmentation rule. The segmentation matters only for the BiPE models:
# for BiPE-RoPE it picks the model trained with that rule; BiPE-ALiBi was trained on
# sentences only, so another rule re-segments its test text (a train/test mismatch).
# The faint red curve is flat RoPE on the same text. On the right, where the last 40
# characters of one test window look (attention averaged over layers and heads): at
# $1\times$ the rotary models attend to their own and the previous sentence, at $8\times$
# they smear. Under the plot: the first characters of the test text with their segment
# and intra ids.

# %% tags=["hide-input"]
import ipywidgets as W

MAX_FACTOR = 16
widget_cache = {}


def widget_windows(mods):
    """Test windows of 16 L characters of a text with mods = (lo, hi) modifiers
    (cached)."""
    if ("text", mods) not in widget_cache:
        text = chain_text(make_grammar(*mods), cfg.widget_chars, py_rng("widget text"))
        widget_cache[("text", mods)] = sample_windows(
            text, cfg.widget_windows, MAX_FACTOR * train_len + 1,
            run.generator("widget windows"))
    return widget_cache[("text", mods)]


def widget_model(pe, rule):
    """The model trained with this segmentation, or the sentence-trained one."""
    return models[(pe, rule)] if (pe, rule) in models else models[(pe, "sentences")]


def widget_positions(pe, rule):
    return positions_for(pe, train_len, rule, chunk_len=chunk_len,
                         generator=run.generator("evaluation boundaries"))


def widget_curve(pe, rule, mods):
    """Per-position loss over 16 L of the model (pe, rule) on a test text (cached)."""
    key = ("curve", pe, rule, mods)
    if key not in widget_cache:
        widget_cache[key] = per_position_nll(
            widget_model(pe, rule), widget_windows(mods), widget_positions(pe, rule)
        )
    return widget_cache[key]


def widget_attention(pe, rule, mods, n, q=40, k=80):
    """Attention (mean over layers and heads) of the last q queries over the last k keys
    of one window of n characters, and the full stops among those keys (cached)."""
    key = ("attention", pe, rule, mods, n)
    if key not in widget_cache:
        window = widget_windows(mods)[:1, :n]
        model = widget_model(pe, rule)
        model.keep_attention()
        with torch.no_grad():
            pos = widget_positions(pe, rule)
            model(window, **(pos(window) if pos is not None else {}))
        att = torch.stack([b.attn.last_attn[0] for b in model.blocks]).mean((0, 1))
        model.keep_attention(False)
        stops = (window[0, n - k:] == SEP_ID).nonzero().flatten().numpy()
        widget_cache[key] = (att[n - q:, n - k:].numpy(), stops)
    return widget_cache[key]


# %% tags=["hide-input"]
def update(pe, test_factor, sentence_mods, segmentation):
    mods = (int(sentence_mods[0]), int(sentence_mods[1]))
    rule = segmentation if VARIANTS[pe][2] else "sentences"
    n = int(test_factor) * train_len
    curve, ref = (
        widget_curve(pe, rule, mods)[:n],
        widget_curve("RoPE", "sentences", mods)[:n],
    )
    w = min(16, n // 4)
    fig, (ax, ax_att) = plt.subplots(1, 2, figsize=(9.5, 2.8), width_ratios=(2.3, 1))
    if pe != "RoPE":
        ax.plot(smooth(ref, w), lw=1, alpha=0.6, **STYLE["RoPE"])
    ax.plot(smooth(curve, w), lw=1.3, **{**STYLE[pe], "label": f"{pe}" + (
        f", {rule}" if VARIANTS[pe][2] else "")})
    ax.axvline(train_len, color="k", ls=":", lw=0.8)
    far = curve[-FAR:].mean()
    log_loss_axis(ax)
    ax.set(
        xlabel="position t",
        ylabel=r"loss $\ell_t$ (nats/char)",
        title=f"{pe}: in-dist {curve[:train_len].mean():.3f}, last 64 of {test_factor} "
              f"L {far:.3f} (RoPE {ref[-FAR:].mean():.3f}); {mods[0]}-{mods[1]} "
              f"modifiers",
    )
    ax.legend(loc="upper left")
    att, stops = widget_attention(pe, rule, mods, n)
    im = ax_att.imshow(att, cmap="viridis", aspect="auto", vmin=0)
    fig.colorbar(im, ax=ax_att, label="attention weight")
    for x in stops:
        ax_att.axvline(x, color="w", lw=0.6, alpha=0.5)
    ax_att.grid(False)
    ax_att.set(
        title="attention, last 40 queries",
        xlabel="last 80 keys (lines: full stops)",
        xticks=[],
        yticks=[],
    )
    plt.show()
    text = widget_windows(mods)[:1, :28]
    intra, seg = bilevel_ids(
        segment_ends(
            text,
            rule,
            chunk_len=chunk_len,
            generator=run.generator("widget boundaries"),
        ),
        train_len,
    )
    print("text  ", "".join(f"{c:>3}" for c in TOK.decode(text[0].tolist())))
    print("seg   ", "".join(f"{v:>3}" for v in seg[0].tolist()))
    print("intra ", "".join(f"{v:>3}" for v in intra[0].tolist()))
    if not VARIANTS[pe][2]:
        print(
            f"({pe} reads the flat positions 0, 1, 2, ...; these ids are shown for "
            f"comparison)"
        )


# precompute the training distribution's curves: most moves only redraw
for pe, rule in RUNS:
    widget_curve(pe, rule, TRAIN_MODS)
controls = dict(
    pe=W.Dropdown(options=list(VARIANTS), value="BiPE-RoPE", description="encoding"),
    test_factor=W.IntSlider(value=8, min=1, max=MAX_FACTOR, description="test len / L"),
    sentence_mods=W.IntRangeSlider(value=TRAIN_MODS, min=0, max=MAX_MODS,
                                   description="modifiers"),
    segmentation=W.Dropdown(options=list(SEGMENTATIONS), value="sentences",
                            description="segments"),
)
icmlbook.explore(update, controls, run=run)

# %% [markdown]
# ## Paper vs. this book
#
# | | paper | this book |
# |---|---|---|
# | method | BiPE: learned intra-segment APE + RoPE/ALiBi on segment indices | the same (Eqs. 1–4), from scratch on the book's tiny transformer |
# | segments | full stop and newline of the LLaMA tokenizer | "." of a character-level toy language; chunk and random ablations (ours) |
# | model, data | 151M LLaMA-style model, the Pile, train length 1024 | 2 layers, $d = 48$, ~60k parameters, chained toy sentences, train length 64 |
# | evaluation | perplexity at 1–6× the training length (PG-19, ArXiv, GitHub) | per-position loss at 1–8× (Eq. 5), split into the letter that needs the previous sentence and all others (ours) |
# | headline | BiPE extrapolates better than its flat counterpart, competitive in distribution | BiPE-RoPE's far loss at $4\times$ and $8\times$ at most `C_VS_FLAT` of RoPE's (superiority); in-distribution cost at most `C_INDIST_COST` nats (non-inferiority) |
# | which half | the intra-segment APE captures a segment's content, the inter-segment RPE gives extrapolation | the intra half carries it: other letters at $8\times$ at most `C_INTRA_HALF` of RoPE's (claim, changed after a failure); the inter-segment RoPE helps at $2\times$ by an amount that varies with the seed and **not at $8\times$**, where BiPE-RoPE guesses the subject about blindly and is no better than "intra only" (findings); ALiBi on segment indices does find the previous sentence at $8\times$ (claim) |
# | segments that mean something | motivated by the segment statistics of text (Fig. 1) | chunks or random boundaries: far $8\times$ at least `C_SEGMENTS` times that with sentences (claim) |
# | BiPE-ALiBi | better than ALiBi on long text and arithmetic | tied with ALiBi: at most `C_VS_ALIBI` nats above it over $8L$ and in distribution (non-inferiority claims; whether it is ahead at $8\times$ is a finding); ALiBi is already flat here; slopes × 12 where the official code has × 96 |
# | sinusoidal baseline | one of the paper's baselines | token embeddings scaled by $\sqrt d$ as in Vaswani et al. and its own learning rate, so that it fits the training length (a check); BiPE-RoPE's far $8\times$ at most `C_VS_FLAT` of its loss (baseline claim) |
# | theory | Bi-NFA: BiPE represents bilevel automata with fewer parameters | not tested |
#
# **Paper coverage.**
#
# | the paper's main results | here |
# |---|---|
# | Fig. 1: segment lengths on PG-19 have bounded support, whatever the text's length | built into the toy language (0–2 modifiers per sentence); the claim "meaningless segments / sentences far(8x)" tests that the segments must follow the text |
# | Sec. 3: the Bi-NFA theory (a Transformer with BiPE represents bilevel automata with fewer parameters) | not testable: a proof about representation size; no experiment here tests it |
# | the arithmetic experiments (chain-of-thought steps as segments) | out of scope: the toy's cross-sentence dependency is one step deep; our language stands in for segmented text, not for arithmetic |
# | language modelling at 1–6× the training length (PG-19, ArXiv, GitHub; BiPE-RoPE against RoPE, BiPE-ALiBi against ALiBi, other encodings) | tested at 1–8× on the toy language: claims "BiPE-RoPE / RoPE far(4x)", "far(8x)", "BiPE-RoPE / sinusoidal far(8x)", "BiPE-ALiBi - ALiBi, all 8x tokens"; findings "far(2x) / in-dist BiPE-RoPE", "far(8x): BiPE-ALiBi - ALiBi" |
# | in-distribution performance | tested: claims "in-dist cost BiPE-RoPE - RoPE", "in-dist BiPE-ALiBi - ALiBi" |
# | the roles of the two encodings (abstract, Sec. 3) | tested by our split of the loss: claims "other letters far(8x)" and "subject letters far(8x): BiPE-ALiBi / intra only"; findings on BiPE-RoPE's subject letters at $2\times$ and $8\times$ and its far loss against "intra only" |
# | long-context benchmarks (SCROLLS), fine-tuning with YaRN | out of scope: real long documents and pretrained models |
#
# What did not reproduce, or not fully. BiPE-RoPE is not flat at $8\times$: its far loss
# rises while RoPE's rises several times more. This matches third-party reproductions
# on PG-19 (perplexity still grows with length, far less than RoPE's): BiPE *reduces*
# the length penalty. Our split by character says which half does the work at this
# scale: the intra-segment encoding keeps every within-sentence prediction in range,
# while the RoPE on segment indices loses the previous sentence at $8L$ just as flat
# RoPE does, because the segment distances are themselves 8 times those of training
# (Eq. 3); at $8\times$ the model without any inter-segment encoding does as well. The
# paper's argument that segment counts grow slowly holds in its data, where a training
# window of 1024 tokens spans many sentences; in ours a window holds about four, so
# every longer test meets unseen segment distances (exercise 1 counts them). We cannot
# tell from a toy whether the paper's long-text gains share that split. On this toy,
# BiPE-ALiBi only ties ALiBi, whose linear penalty already suppresses every distance it
# was not trained on; the paper's ALiBi gains come from real long text. Our slope
# multiplier is 12, not the official 96, which the official code applies for 12 heads
# and long LLaMA-token sentences (why 96, the paper does not say, as far as we read it;
# exercise 2 shows what 96 does to four heads). The paper's theory (bilevel automata
# represented with fewer parameters) is not tested here.

# %% [markdown]
# ## Exercises

# %% [markdown] tags=["exercise"]
# 1. **Unseen segment distances.** BiPE-RoPE's rotations (Eq. 3) see only segment
#    distances. What is the largest segment distance inside a training window of
#    $L + 1$ characters, and what share of the keys that a query in the far region of
#    $8L$ can attend to lie at a distance never met in training? How does that share
#    change with `train_len = 96` at the same test length of 512 characters, and what
#    does it predict for the finding "subject letters far(8x): BiPE-RoPE - ln 8"?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 1
# A window of $L + 1 = 65$ characters holds only a few sentences, so the largest
# segment distance $\mathrm{seg}_i - \mathrm{seg}_j$ it ever shows the model is a
# handful. A query in the last 64 positions of a 512-character window can attend to
# keys dozens of sentences back (Eq. 1 counts full stops). Every key more than the
# training maximum away meets a rotation angle $p\theta_k$ that training never
# produced. The cell counts both on the chapter's test windows. The share of unseen
# distances is large, and it shrinks only somewhat for `train_len = 96` (the largest
# training distance grows by a few sentences, the test distances stay the same):
# what matters is the largest distance seen, not the ratio of lengths. The previous
# sentence is at distance 1, which was seen; but with most keys at unseen distances, whose scores RoPE has never been trained to keep low, the
# attention spreads over them (the attention split above shows it), and the letter
# that needs the previous sentence is guessed about blindly: the finding.
# :::

# %% tags=["solution", "hide-cell"]
def max_train_distance(text, length, n=2000):
    """Largest segment distance inside windows of `length` characters of `text`."""
    starts = np.linspace(0, len(text) - length - 1, n).astype(int)
    windows = torch.stack([text[s:s + length] for s in starts.tolist()])
    _, seg = bilevel_ids(segment_ends(windows), max_intra=1)
    return int((seg[:, -1] - seg[:, 0]).max())


def unseen_share(windows, max_seen):
    """Share of the causal keys of the last FAR queries at a segment distance above
    max_seen."""
    _, seg = bilevel_ids(segment_ends(windows), max_intra=1)
    T = windows.shape[1]
    q = seg[:, T - FAR:, None]
    k = seg[:, None, :]
    causal = torch.ones(FAR, T, dtype=torch.bool).tril(T - FAR)
    far_keys = (q - k > max_seen) & causal
    return float(far_keys.sum() / (causal.sum() * windows.shape[0]))


test_inputs = eval_windows[:, :-1]
share_at = {}
for length in (train_len, 96):
    seen = max_train_distance(train_text, length + 1)
    share_at[length] = unseen_share(test_inputs, seen)
    print(f"train_len {length}: largest training distance {seen} segments; share of "
          f"the far queries' keys at unseen distances in 512 characters "
          f"{share_at[length]:.2f}")
# most keys of the far region (over half) lie at distances training never showed
S_UNSEEN = 0.5
icmlbook.solution_check("share of unseen segment distances at 8x, L = 64",
                        share_at[train_len], ">=", S_UNSEEN)

# %% [markdown] tags=["exercise"]
# 2. **The ALiBi slope.** With $H = 4$ heads, Eq. 4's slopes are $m_h = 2^{-2h}$. A
#    segment of distance 1 costs $c\, m_h$ nats in head $h$. For the official
#    multiplier $c = 96$ and for ours, $c = 12$, which heads can still look one
#    sentence back? Check it on a BiPE-ALiBi trained with $c = 96$: measure each head's
#    attention on the previous sentence.

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 2
# A key one segment back gets its softmax weight multiplied by $e^{-c\,m_h}$ relative
# to a key of the query's own sentence with the same content score. With $c = 96$ the
# four heads pay $24, 6, 1.5, 0.375$ nats: head 1 is blind to the previous sentence
# ($e^{-24} \approx 4\cdot10^{-11}$), head 2 nearly so ($e^{-6} \approx 0.0025$),
# heads 3 and 4 can look back. With $c = 12$ they pay $3, 0.75, 0.19, 0.05$ nats, and
# every head can. So the official $\times 96$ (set for 12 heads, whose flattest slope
# is $96 \cdot 2^{-8} = 0.375$) leaves only half of our four heads for the previous
# sentence. The cell trains BiPE-ALiBi with $c = 96$ (the chapter's budget) and
# measures each head's attention mass on the previous sentence, on the far queries of
# 8L: the steepest head's mass is a tiny fraction of the flattest head's.
# :::

# %% tags=["solution", "hide-cell"]
def head_mass_on_previous(model, windows, positions):
    """Attention mass of each head (mean over layers) of the last FAR queries on the
    previous segment."""
    model.keep_attention()
    with torch.no_grad():
        model(windows, **positions(windows))
    att = torch.stack([b.attn.last_attn for b in model.blocks]).mean(0)  # (n, H, T, T)
    model.keep_attention(False)
    _, seg = bilevel_ids(segment_ends(windows), max_intra=1)
    prev = (seg[:, :, None] - seg[:, None, :] == 1)[:, None, -FAR:]
    return (att[:, :, -FAR:] * prev).sum(-1).mean((0, 2)).numpy()


for c in (96.0, 12.0):
    print(f"c = {c:g}: nats per segment in heads 1-4:",
          np.round(c * 2.0 ** (-2 * np.arange(1, N_HEADS + 1)), 3))
alibi96, _ = train_model("BiPE-ALiBi", train_text, train_len=train_len, steps=cfg.steps,
                         batch=cfg.batch, init=run.stream_seed("weights"),
                         data=run.generator("training windows"), alibi_scale=96.0)
masses = {96: head_mass_on_previous(alibi96, test_inputs[:8],
                                    positions_for("BiPE-ALiBi", train_len)),
          12: head_mass_on_previous(models[("BiPE-ALiBi", "sentences")],
                                    test_inputs[:8],
                                    positions_for("BiPE-ALiBi", train_len))}
for c, m in masses.items():
    print(f"c = {c}: attention on the previous sentence, heads 1-4:", np.round(m, 3))
# the steepest head at c = 96 pays 24 nats per segment: under a tenth of the flattest's
S_BLIND_HEAD = 0.1
icmlbook.solution_check("c = 96: previous-sentence mass, head 1 / head 4",
                        masses[96][0] / masses[96][-1], "<=", S_BLIND_HEAD)

# %% [markdown] tags=["exercise"]
# 3. **Longer sentences.** In Explore, test on 4–6 modifiers and BiPE degrades. Which
#    intra positions does such a text use that no training sentence reached, and what
#    do the rows of the learned table $E_\text{intra}$ (Eq. 2) hold there? What share
#    of its tokens sits at such positions, and what would a sinusoidal intra table
#    change?

# %% [markdown] tags=["solution"]
# :::{dropdown} Solution to exercise 3
# Training sentences have 0–2 modifiers, so their intra positions stop at the length
# of the longest one; the table has $L$ rows, and the rows beyond that length get no
# gradient in training (a row is trained only when its position occurs). They keep
# their random initial values: a token there gets an input the network never read,
# exactly the failure of an absolute encoding past its training length, moved inside
# the sentence. The cell measures the longest training sentence, the share of tokens
# of a 4–6-modifier text past it (a sizeable share), and confirms that the table's
# rows past it are where they started: BiPE-RoPE's trained table differs from a fresh
# draw of the same initialisation only in the rows that training reached. A sinusoidal
# intra table would give those positions smooth, structured inputs, but sinusoids at
# unseen positions failed at once for the flat sinusoidal baseline: BiPE bets on
# segments of bounded length, as Fig. 1 of the paper measures on PG-19, and this toy
# breaks that bet on purpose.
# :::

# %% tags=["solution", "hide-cell"]
def intra_positions(text):
    """Intra positions (Eq. 1, unclamped) of every token of a text."""
    intra, _ = bilevel_ids(segment_ends(text[None]), max_intra=len(text))
    return intra[0]


longest = int(intra_positions(test_text).max())
long_text = chain_text(make_grammar(4, 6), 20_000, py_rng("exercise long sentences"))
beyond = float((intra_positions(long_text) > longest).float().mean())
table_rows = models[("BiPE-RoPE", "sentences")].pos.weight.detach()
torch.manual_seed(run.stream_seed("weights"))  # as train_model drew the weights
fresh_rows = make_model("BiPE-RoPE", train_len, alibi_scale).pos.weight.detach()
moved = (table_rows - fresh_rows).abs().amax(1)
print(f"longest training sentence: intra positions 0-{longest}; a text with 4-6 "
      f"modifiers puts {beyond:.0%} of its tokens beyond")
print(f"largest change of a table row in training: rows 0-{longest} "
      f"{float(moved[:longest + 1].min()):.3f} or more; rows {longest + 1}-"
      f"{train_len - 1} at most {float(moved[longest + 1:].max()):.1e}")
# the rows no training sentence reached did not move (the optimiser has no weight
# decay, and a row gets a gradient only where its position occurs)
S_UNTRAINED_ROW = 1e-6
icmlbook.solution_check("largest change of an untrained table row",
                        float(moved[longest + 1:].max()), "<=", S_UNTRAINED_ROW)

# %% [markdown]
# ## References
#
# - Z. He, G. Feng, S. Luo, K. Yang, L. Wang, J. Xu, Z. Zhang, H. Yang, D. He. Two Stones
#   Hit One Bird: Bilevel Positional Encoding for Better Length Extrapolation. ICML 2024.
# - J. Su, Y. Lu, S. Pan, A. Murtadha, B. Wen, Y. Liu. RoFormer: Enhanced Transformer with
#   Rotary Position Embedding. Neurocomputing 2024 (arXiv 2021).
# - O. Press, N. Smith, M. Lewis. Train Short, Test Long: Attention with Linear Biases
#   Enables Input Length Extrapolation (ALiBi). ICLR 2022.
# - A. Vaswani et al. Attention Is All You Need. NeurIPS 2017.

# %% tags=["remove-cell"]
run.finish();
