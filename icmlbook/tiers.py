"""Tiers (smoke / default / full) and their rules in one table; seeding and device choice.

Everything that behaves by tier reads :data:`RULES`, so a tier changes here and nowhere
else. This module imports nothing from the rest of the package.
"""
from __future__ import annotations

import ctypes
import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any


@dataclass(frozen=True)
class TierRules:
    """What a tier does. ``None`` for a limit means: none."""

    purpose: str
    enforce_claims: bool  # failed claims and checks raise at verdict() (else: recorded only)
    cell_timeout_s: float | None  # a single cell running longer fails the run
    budget_s: float | None  # wall seconds per chapter on a 2-core CPU, kernel start included
    memory_mb: float | None  # peak resident memory per chapter
    exercise_widgets: bool  # widgets are driven to every extreme of every control
    sketch_figures: bool  # figures are drawn without a layout engine and stored untrimmed
    results_plot: bool  # the Across-seeds cell draws its strip plot (the table: always)
    cuda: bool  # a GPU is used when present


RULES: dict[str, TierRules] = {
    "smoke": TierRules("every code path at tiny sizes (the tests)", enforce_claims=False,
                       cell_timeout_s=120, budget_s=15, memory_mb=1536,
                       exercise_widgets=True, sketch_figures=True, results_plot=False,
                       cuda=False),
    "default": TierRules("what readers run and what is committed", enforce_claims=True,
                         cell_timeout_s=600, budget_s=120, memory_mb=1536,
                         exercise_widgets=False, sketch_figures=False, results_plot=True,
                         cuda=False),
    "full": TierRules("closer to the paper's scale, on a GPU when present",
                      enforce_claims=True, cell_timeout_s=None, budget_s=None, memory_mb=None,
                      exercise_widgets=False, sketch_figures=False, results_plot=True,
                      cuda=True),
}

TIERS = tuple(RULES)
"""smoke, default, full: in increasing size."""

ENFORCED_TIERS = tuple(t for t, r in RULES.items() if r.enforce_claims)
"""Claims are enforced at these tiers and only recorded at the others."""

NOTEBOOK_MB = 1.5
"""Largest committed notebook."""

COMMITTED_TIER = "default"
COMMITTED_SEED = 0
"""What a committed notebook holds: a run at this tier and seed."""
CALIBRATION_SEEDS = tuple(range(10))
CONFIRMATION_SEEDS = tuple(range(10, 20))
"""Thresholds are set on the calibration seeds; the confirmation seeds are swept once,
after the thresholds are frozen. A results file holds both (at the committed tier)."""


def rules(tier: str) -> TierRules:
    """The rules of ``tier``; a ValueError names the tiers for anything else."""
    if tier not in RULES:
        raise ValueError(f"tier must be one of {', '.join(TIERS)}; got {tier!r}")
    return RULES[tier]


def pick(tier: str, **per_tier: dict[str, Any]) -> SimpleNamespace:
    """The config of ``tier`` from keyword dicts ``smoke=...``, ``default=...``, ``full=...``.

    A tier that is not given falls back to the next smaller one (full -> default),
    so a chapter with nothing bigger to do at full just omits it.
    """
    rules(tier)
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
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    if torch:
        import torch as _torch

        _torch.manual_seed(seed)


def configure_torch(tier: str, threads: int = 1) -> str:
    """Set torch's threads; return the device name (CUDA where the tier allows it and
    one is present). One thread by default: on 2 cores a tiny model's step was measured
    15x faster with 1 thread than with 2; a chapter with large matmuls may pass more."""
    import torch

    torch.set_num_threads(max(1, int(threads)))
    keep_freed_memory()
    if rules(tier).cuda and torch.cuda.is_available():
        return "cuda"
    # No torch.use_deterministic_algorithms here: it imports torch's compiler stack
    # (measured 1.7 s per chapter, a tenth of the smoke budget), and the CPU kernels the
    # chapters use give the same numbers for a fixed seed and thread count anyway.
    return "cpu"


def keep_freed_memory() -> bool:
    """Let glibc keep the memory a chapter frees, for its next step to reuse.

    By default glibc hands freed memory back to the system (it unmaps large blocks and
    trims the top of the heap), so a training loop that frees and allocates the same
    tensors at every step faults every page back in at every step. On the 2-core
    virtual machines the book is measured on, that kernel time was as large as the
    computation's own. Raising the two thresholds keeps the memory in the process: the
    numbers computed are the same, and the peak hardly moves (the memory is reused, not
    added to). A no-op without glibc (macOS, Windows); returns whether it applied.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    # older glibc caps the mmap threshold at 32 MiB and refuses more
    return bool(mallopt(M_TRIM_THRESHOLD, 1 << 30)
                and (mallopt(M_MMAP_THRESHOLD, 1 << 30) or mallopt(M_MMAP_THRESHOLD, 32 << 20)))
