"""icmlbook: the small support library of *ICML 2024, from scratch*.

Plumbing only: tiers and seeding, parameter checks, claim checks and the
run record, progress, plot style, widgets, the batch runner and sweeps, results
files and the reproduction report. The papers'
algorithms live in the chapters (``book/chNN_slug.py``).

``import icmlbook`` is light: torch, matplotlib and ipywidgets are imported
only by the functions that need them.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it (imported on first use)
_EXPORTS = {
    "TIERS": "tiers",
    "start": "session",
    "Session": "session",
    "ClaimFailed": "session",
    "solution_check": "session",
    "ParameterError": "params",
    "check_tier": "params",
    "check_seed": "params",
    "check_int": "params",
    "check_range": "params",
    "check_choice": "params",
    "check_bool": "params",
    "progress": "progressbar",
    "explore": "widgets",
    "use_style": "plot",
    "method_styles": "plot",
    "log_axis": "plot",
    "read_record": "record",
    "MLP": "nn",
    "Adam": "nn",
    "seconds_in_turns": "timing",
    "digits": "data",
    "sweep": "sweep",
    "across_seeds": "results",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'icmlbook' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"icmlbook.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
