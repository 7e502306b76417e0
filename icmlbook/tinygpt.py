"""A tiny causal transformer with a pluggable positional encoding, plus sampling and a
next-token training loop (chapters 07, 08, 09, 17). nanoGPT-shaped and deliberately
plain: pre-LayerNorm blocks, multi-head attention written out (so its weights can be
looked at), GELU MLP.

Positions come in two independent flavours, each with its own position ids (default
``0..T-1``), so that a chapter can plug in its own scheme (chapter 07's BiPE feeds
intra-sentence ids to the absolute table and sentence ids to RoPE/ALiBi):

* ``abs_pe``: None, ``"sinusoidal"`` or ``"learned"``, added to the token embedding at
  ``abs_pos`` (ids past a learned table's end are clamped to its last row). With
  ``"sinusoidal"`` the token embedding is scaled as in Vaswani et al. (Sec. 3.4), so
  that tokens and the unit-amplitude sinusoids have comparable magnitudes;
* ``rel_pe``: None, ``"rope"`` or ``"alibi"``, inside every attention layer at ``rel_pos``.

``PE_PRESETS`` names the usual combinations.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icmlbook.nn import Adam

PE_PRESETS = {
    "none": (None, None),
    "sinusoidal": ("sinusoidal", None),
    "learned": ("learned", None),
    "rope": (None, "rope"),
    "alibi": (None, "alibi"),
}


@dataclass
class GPTConfig:
    vocab_size: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int | None = None          # default 4 * d_model
    max_len: int = 256               # rows of a learned absolute table
    abs_pe: str | None = None
    rel_pe: str | None = None
    rope_base: float = 10000.0
    alibi_scale: float = 1.0         # multiplies the standard slopes 2^(-8h/H)

    def __post_init__(self) -> None:
        if self.abs_pe not in (None, "sinusoidal", "learned"):
            raise ValueError(f"abs_pe must be None, 'sinusoidal' or 'learned', got {self.abs_pe!r}")
        if self.rel_pe not in (None, "rope", "alibi"):
            raise ValueError(f"rel_pe must be None, 'rope' or 'alibi', got {self.rel_pe!r}")
        if self.d_model % self.n_heads or (self.rel_pe == "rope" and (self.d_model // self.n_heads) % 2):
            raise ValueError("d_model must split into n_heads heads (of even size for RoPE)")

    @classmethod
    def preset(cls, pe: str, **kw) -> GPTConfig:
        """``GPTConfig.preset("rope", vocab_size=30)``; see ``PE_PRESETS``."""
        if pe not in PE_PRESETS:
            raise ValueError(f"unknown positional encoding {pe!r}; choose from {sorted(PE_PRESETS)}")
        abs_pe, rel_pe = PE_PRESETS[pe]
        return cls(abs_pe=abs_pe, rel_pe=rel_pe, **kw)


# -- positional encodings ----------------------------------------------------
def sinusoidal(pos: Tensor, d: int) -> Tensor:
    """Vaswani et al.'s table evaluated at (any, even unseen) positions ``pos``: (..., d)."""
    i = torch.arange(0, d, 2, dtype=torch.float32, device=pos.device)
    angle = pos.float()[..., None] / (10000.0 ** (i / d))
    out = torch.zeros(*pos.shape, d, device=pos.device)
    out[..., 0::2] = torch.sin(angle)
    out[..., 1::2] = torch.cos(angle[..., : d // 2])
    return out


def rope(x: Tensor, pos: Tensor, base: float = 10000.0) -> Tensor:
    """Rotate pairs of channels of ``x`` (B, H, T, hd) by angle pos * theta_i,
    theta_i = base^(-2i/hd) (Su et al.). Then q_i . k_j depends on pos_i - pos_j only."""
    hd = x.shape[-1]
    theta = base ** (-torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd)
    angle = pos.float()[:, None, :, None] * theta           # (B, 1, T, hd/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


def alibi_slopes(n_heads: int, scale: float = 1.0) -> Tensor:
    """Press et al.'s geometric head slopes m_h = 2^(-8h/H), h = 1..H, times ``scale``."""
    h = torch.arange(1, n_heads + 1, dtype=torch.float32)
    return scale * 2.0 ** (-8.0 * h / n_heads)


# -- the model ---------------------------------------------------------------
class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg, self.h = cfg, cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        if cfg.rel_pe == "alibi":
            self.register_buffer("slopes", alibi_slopes(cfg.n_heads, cfg.alibi_scale), persistent=False)
        self.last_attn: Tensor | None = None
        self.keep_attn = False

    def forward(self, x: Tensor, rel_pos: Tensor) -> Tensor:
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        if self.cfg.rel_pe == "rope":
            q, k = rope(q, rel_pos, self.cfg.rope_base), rope(k, rel_pos, self.cfg.rope_base)
        logits = q @ k.transpose(-1, -2) / math.sqrt(d // self.h)       # (B, H, T, T)
        if self.cfg.rel_pe == "alibi":
            dist = (rel_pos[:, :, None] - rel_pos[:, None, :]).float()   # (B, T, T): pos_i - pos_j
            logits = logits - self.slopes[:, None, None] * dist[:, None]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = logits.masked_fill(~causal, float("-inf")).softmax(-1)
        if self.keep_attn:
            self.last_attn = att.detach()
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, d))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        d_ff = cfg.d_ff or 4 * cfg.d_model
        self.ln1, self.attn = nn.LayerNorm(cfg.d_model), Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, d_ff), nn.GELU(), nn.Linear(d_ff, cfg.d_model))

    def forward(self, x: Tensor, rel_pos: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x), rel_pos)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Token ids (B, T) -> next-token logits (B, T, V). ``embeds`` (B, T, d) may replace
    ``idx`` (chapter 17); ``return_hidden=True`` returns the final hidden states."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model) if cfg.abs_pe == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)
        if cfg.abs_pe == "sinusoidal":  # Vaswani et al.: unit-scale tokens next to the PE
            with torch.no_grad():
                self.tok.weight.mul_(cfg.d_model ** -0.5 / 0.02)
        self.tok_scale = math.sqrt(cfg.d_model) if cfg.abs_pe == "sinusoidal" else 1.0

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: Tensor | None = None, *, embeds: Tensor | None = None,
                abs_pos: Tensor | None = None, rel_pos: Tensor | None = None,
                return_hidden: bool = False) -> Tensor:
        x = self.tok(idx) * self.tok_scale if embeds is None else embeds
        B, T, _ = x.shape
        default = torch.arange(T, device=x.device).expand(B, T)
        abs_pos = default if abs_pos is None else abs_pos.expand(B, T)
        rel_pos = default if rel_pos is None else rel_pos.expand(B, T)
        if self.cfg.abs_pe == "learned":
            x = x + self.pos(abs_pos.clamp(max=self.cfg.max_len - 1))
        elif self.cfg.abs_pe == "sinusoidal":
            x = x + sinusoidal(abs_pos, self.cfg.d_model)
        for block in self.blocks:
            x = block(x, rel_pos)
        x = self.ln_f(x)
        return x if return_hidden else self.head(x)

    def keep_attention(self, on: bool = True) -> None:
        """Store each layer's attention weights in ``block.attn.last_attn``."""
        for block in self.blocks:
            block.attn.keep_attn = on
            block.attn.last_attn = None


# -- losses, sampling, training ----------------------------------------------
PositionFn = Callable[[Tensor], dict[str, Tensor]]


def _positions(positions: PositionFn | None, idx: Tensor) -> dict[str, Tensor]:
    return {} if positions is None else positions(idx)


def lm_loss(model: TinyGPT, idx: Tensor, mask: Tensor | None = None,
            positions: PositionFn | None = None) -> Tensor:
    """Mean next-token cross-entropy of ``idx`` (B, T); ``mask`` (B, T-1) picks
    which targets count (e.g. not padding, not the prompt)."""
    logits = model(idx[:, :-1], **_positions(positions, idx[:, :-1]))
    nll = F.cross_entropy(logits.transpose(1, 2), idx[:, 1:], reduction="none")
    if mask is None:
        return nll.mean()
    return (nll * mask).sum() / mask.sum().clamp(min=1)


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log p(target) at every position: logits (B, T, V), targets (B, T) -> (B, T)."""
    return logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set logits outside the top-k / nucleus (top-p) set to -inf (the most
    likely token always survives)."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cum - sorted_logits.softmax(-1) >= top_p      # mass before this token already >= p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@torch.no_grad()
def generate(model: TinyGPT, prompt: Tensor, n_new: int, *, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None,
             generator: torch.Generator | None = None,
             positions: PositionFn | None = None) -> Tensor:
    """Sample ``n_new`` tokens after ``prompt`` (B, T0) -> (B, T0 + n_new); greedy at
    ``temperature=0``. No KV cache: every step re-reads the whole prefix (cheap at this
    size, and any position scheme ``positions(idx)`` stays exact)."""
    idx = prompt
    for _ in range(n_new):
        logits = model(idx, **_positions(positions, idx))[:, -1]
        if temperature == 0:
            nxt = logits.argmax(-1, keepdim=True)
        else:
            probs = filter_logits(logits / temperature, top_k, top_p).softmax(-1)
            nxt = torch.multinomial(probs, 1, generator=generator)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


def fit_lm(model: TinyGPT, batches: Iterator[Tensor] | Callable[[int], Tensor], steps: int, *,
           lr: float = 3e-3, weight_decay: float = 0.0, clip: float = 1.0,
           positions: PositionFn | None = None, desc: str = "train",
           progress: bool = True) -> list[float]:
    """Train on next-token prediction for ``steps`` AdamW steps (torch's arithmetic,
    ``icmlbook.nn.Adam``) with a cosine-decayed learning rate; ``batches`` is an iterator of (B, T) id
    tensors or a function ``step -> batch``. Returns the loss per step."""
    from icmlbook.widgets import progress as bar

    opt = Adam(model.parameters(), lr=lr, weight_decay=weight_decay, decoupled=True)
    losses: list[float] = []
    model.train()
    for step in bar(range(steps), desc=desc) if progress else range(steps):
        batch = batches(step) if callable(batches) else next(batches)
        loss = lm_loss(model, batch, positions=positions)
        opt.zero_grad()
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.lr = lr * (0.5 * (1 + math.cos(math.pi * min(step, steps) / steps)))
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses
