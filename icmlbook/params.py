"""Parameter checks for a chapter's validation cell: a :class:`ParameterError` whose one
line names the parameter, the value and what is allowed, or None (the cell shows no
output). ``icmlbook run`` executes that cell in-process before any kernel starts, so the
same message reaches a batch user with exit status 2: keep it free of heavy imports.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from icmlbook.tiers import TIERS  # one way: tiers imports nothing from params


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
