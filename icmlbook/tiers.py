"""Tiers (smoke / default / full), seeding and device choice."""
from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

TIERS = ("smoke", "default", "full")
"""smoke: every code path at tiny sizes (tests); default: what readers run and
what is committed; full: closer to the paper's scale, on a GPU when present."""

ENFORCED_TIERS = ("default", "full")
"""Claims are enforced at these tiers and only recorded at smoke."""


def pick(tier: str, **per_tier: dict[str, Any]) -> SimpleNamespace:
    """The config of ``tier`` from keyword dicts ``smoke=...``, ``default=...``, ``full=...``.

    A tier that is not given falls back to the next smaller one (full -> default),
    so a chapter with nothing bigger to do at full just omits it.
    """
    from icmlbook.params import check_tier

    check_tier(tier)
    unknown = set(per_tier) - set(TIERS)
    if unknown:
        raise ValueError(f"pick(): unknown tier keys {sorted(unknown)}; use {TIERS}")
    order = TIERS[: TIERS.index(tier) + 1]
    for name in reversed(order):
        if name in per_tier:
            return SimpleNamespace(**per_tier[name])
    raise ValueError(f"pick(): no config for tier {tier!r} or a smaller tier")


def seed_everything(seed: int, torch: bool = True) -> None:
    """Seed Python's, NumPy's and (unless ``torch=False``) torch's global generators."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    if torch:
        import torch as _torch

        _torch.manual_seed(seed)


def configure_torch(tier: str, threads: int = 1) -> str:
    """Set torch's threads; return the device name.

    CUDA is used only at the ``full`` tier and only when present. On the CPU,
    one thread is the default: on 2 cores a tiny model's step was measured 15x
    faster with 1 thread than with 2 (see CONVENTIONS). A chapter with large
    matmuls may pass more and say so.
    """
    import torch

    torch.set_num_threads(max(1, int(threads)))
    if tier == "full" and torch.cuda.is_available():
        return "cuda"
    # No torch.use_deterministic_algorithms here: it imports torch's compiler stack
    # (measured 1.7 s per chapter, a tenth of the smoke budget), and the CPU kernels the
    # chapters use give the same numbers for a fixed seed and thread count anyway.
    return "cpu"
