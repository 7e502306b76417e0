"""icmlbook: the small support library of *ICML 2024, from scratch*.

Three groups of modules (:data:`GROUPS`; README, "How the package is built"): the
**kit** a chapter's kernel imports (its run, claims, verdict, results, figures and
widgets), the **models** two or more chapters share, and the **tools** that run,
sweep, benchmark and report on chapters from outside (no chapter imports them).
Imports point from tools to models to kit, never back (a test holds it). The papers'
algorithms live in the chapters (``book/chNN_slug.py``).

``import icmlbook`` is light: torch, matplotlib and ipywidgets are imported
only by the functions that need them.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

GROUPS = {
    "kit": ("tiers", "params", "record", "verdicts", "session", "chapters", "results",
            "plot", "progressbar", "widgets", "timing", "data"),
    "models": ("nn", "tinygpt", "toylang", "diffusion"),
    "tools": ("batch", "bench", "report", "offline_html", "cli"),
}
"""Each module's group. A module imports only from its own group or the groups listed
before it (tools -> models -> kit)."""

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
    "sweep": "batch",
    "across_seeds": "results",
}

__all__ = sorted(_EXPORTS) + ["GROUPS", "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'icmlbook' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"icmlbook.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
