"""icmlbook: the small support library of *ICML 2024, from scratch*.

Three groups of modules (:data:`GROUPS`; README, "How the package is built"): the **kit**
a chapter's kernel imports, the **models** two or more chapters share, and the **tools**
that run, sweep, benchmark and report on chapters from outside. The papers' algorithms
live in the chapters. ``import icmlbook`` is light: torch, matplotlib and ipywidgets are
imported only by the functions that need them.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

GROUPS = {
    "kit": ("tiers", "verdicts", "session", "chapters", "results",
            "plot", "widgets"),
    "models": ("nn", "tinygpt", "toylang", "diffusion"),
    "tools": ("batch", "report", "offline_html", "cli"),
}
"""Each module's group. A module imports only from its own group or the groups listed
before it (tools -> models -> kit)."""

# public name -> module that defines it (imported on first use)
_EXPORTS = {name: module for module, names in {
    "tiers": ("TIERS", "ParameterError", "check_tier", "check_seed", "check_int", "check_range",
              "check_choice"),
    "session": ("start", "Session", "ClaimFailed", "solution_check", "read_record",
                "seconds_in_turns", "digits"),
    "widgets": ("progress", "explore"),
    "plot": ("use_style", "method_styles", "log_axis"),
    "nn": ("MLP", "Adam"),
    "batch": ("sweep",),
    "results": ("across_seeds",),
}.items() for name in names}

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
