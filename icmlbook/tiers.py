"""Tiers (smoke / default / full) and their rules in one table; the parameter checks of
a chapter's validation cell; seeding and device choice.

Everything that behaves by tier reads :data:`RULES`, so a tier changes here and nowhere
else. This module imports nothing from the rest of the package.
"""
from __future__ import annotations

import ctypes
import math
import random
from collections.abc import Sequence
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
    """The rules of ``tier``; a :class:`ParameterError` names the tiers for anything else."""
    check_tier(tier)
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
    for name in reversed(TIERS[: TIERS.index(tier) + 1]):
        if name in per_tier:
            return SimpleNamespace(**per_tier[name])
    raise ValueError(f"pick(): no config for tier {tier!r} or a smaller tier")


# -- parameter checks ---------------------------------------------------------------------
# For a chapter's validation cell: a ParameterError whose one line names the parameter, the
# value and what is allowed, or None (the cell shows no output). ``icmlbook run`` executes
# that cell in-process before any kernel starts, so the same message reaches a batch user
# with exit status 2: keep this module free of heavy imports.
class ParameterError(ValueError):
    """A chapter parameter has a value the chapter cannot run with."""


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` for a message, cut to about ``limit`` characters (a 5000-digit
    integer or a pasted paragraph is not echoed back in full)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        digits = len(str(abs(value))) if value.bit_length() < 13000 else "thousands of"
        return f"an integer with {digits} digits"
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 12]}... ({len(text)} characters)"


def check_tier(tier: Any) -> None:
    if tier not in TIERS:
        raise ParameterError(f"tier must be one of {', '.join(TIERS)}; got {shown(tier)}")


def check_int(name: str, value: Any, lo: int | None = None, hi: int | None = None) -> None:
    """An integer in [lo, hi] (either bound may be None)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"{name} must be an integer; got {shown(value)}")
    _check_bounds(name, value, lo, hi)


SEED_MAX = 2**31 - 1
"""Seeds are integers in [0, SEED_MAX] (the CLI, the chapters and the sweeps agree)."""


def check_seed(seed: Any) -> None:
    check_int("seed", seed, 0, SEED_MAX)


def check_range(name: str, value: Any, lo: float | None = None, hi: float | None = None,
                *, lo_open: bool = False, hi_open: bool = False) -> None:
    """A real number in [lo, hi]; ``lo_open``/``hi_open`` exclude an end."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParameterError(f"{name} must be a number; got {shown(value)}")
    if not math.isfinite(value):
        raise ParameterError(f"{name} must be finite; got {shown(value)}")
    _check_bounds(name, value, lo, hi, lo_open, hi_open)


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    """One of ``choices``, of the same type (12.0 is not the integer choice 12)."""
    if not any(type(value) is type(c) and value == c for c in choices):
        raise ParameterError(f"{name} must be one of {', '.join(map(repr, choices))}; got {shown(value)}")


def _check_bounds(name, value, lo, hi, lo_open=False, hi_open=False) -> None:
    low_bad = lo is not None and (value <= lo if lo_open else value < lo)
    high_bad = hi is not None and (value >= hi if hi_open else value > hi)
    if low_bad or high_bad:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        lo_s = "-inf" if lo is None else repr(lo)
        hi_s = "inf" if hi is None else repr(hi)
        raise ParameterError(f"{name} must be in {left}{lo_s}, {hi_s}{right}; got {shown(value)}")


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
