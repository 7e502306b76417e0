"""The book's matplotlib style: one look for every chapter, one colour per method, log
axes whose labels do not overlap, and the smoke tier's cheaper way of drawing."""
from __future__ import annotations

import math
from typing import Any

PALETTE = ["#1b6ca8", "#d1495b", "#2a9d8f", "#edae49", "#6a4c93", "#555555", "#8ab17d"]
"""Colour-blind-friendly enough for up to seven methods; use in this order."""

COLOUR_NAMES = dict(zip(PALETTE, ["blue", "red", "teal", "amber", "purple", "grey", "green"]))
"""The word for each palette colour, for prose and legends ("the red curve")."""

_SKETCH = False
"""Set by :func:`sketch_figures`: :func:`use_style` then turns the layout engine off."""

LINESTYLES = ["-", "--", "-.", ":"]
"""Line styles; the eighth method and later reuse a colour with the next style."""


def sketch_figures(on: bool = True) -> None:
    """Draw figures for the smoke tier, whose outputs nobody looks at: no constrained
    layout (set here and kept by :func:`use_style`), and, in a notebook, PNGs stored
    as drawn rather than trimmed to their bounding box, which costs a second draw.
    Every artist is still drawn once, so a bad value still raises; on the measured
    chapters, layout and trimming were close to half of a smoke run's figure time
    (about a tenth of the whole run). ``on=False`` restores the reader's figures."""
    global _SKETCH
    import matplotlib as mpl
    from IPython import get_ipython

    _SKETCH = on
    mpl.rcParams["figure.constrained_layout.use"] = not on
    if get_ipython() is not None and "inline" in mpl.get_backend():
        from matplotlib_inline.config import InlineBackend

        InlineBackend.instance().print_figure_kwargs = {"bbox_inches": None if on else "tight"}


def use_style(dpi: int = 100) -> None:
    """Apply the book's style. At 100 dpi a 7-inch five-panel strip stays readable and
    a chapter's notebook stays well under 1.5 MB."""
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update({
        "figure.figsize": (7.0, 3.4), "figure.dpi": dpi, "savefig.dpi": dpi,
        "figure.constrained_layout.use": not _SKETCH, "axes.prop_cycle": cycler(color=PALETTE),
        "axes.spines.top": False, "axes.spines.right": False,
        "axes.grid": True, "grid.alpha": 0.25, "axes.titlesize": 10, "axes.labelsize": 9,
        "xtick.labelsize": 8, "ytick.labelsize": 8, "legend.fontsize": 8,
        "legend.frameon": False, "lines.linewidth": 1.4, "image.cmap": "viridis",
    })


def method_styles(*methods: str) -> dict[str, dict[str, Any]]:
    """A fixed style per method, in the order given: ``{name: {"color", "linestyle",
    "label"}}``, to unpack into every plot call (``ax.plot(x, y, **STYLE[name])``).
    Declared once per chapter, a method keeps its colour in every figure, and no two
    methods share a (colour, line style) pair."""
    if not methods:
        raise ValueError("method_styles needs at least one method name")
    repeated = sorted({m for m in methods if methods.count(m) > 1})
    if repeated:
        raise ValueError(f"method named twice: {', '.join(repeated)}")
    return {name: {"color": PALETTE[i % len(PALETTE)],
                   "linestyle": LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)], "label": name}
            for i, name in enumerate(methods)}


def log_axis(ax: Any, axis: str = "y") -> None:
    """Log-scale ``axis`` ("x" or "y") of ``ax`` with labels that do not overlap.

    Call it after the data are drawn. Over three decades or more only the powers of
    ten are labelled; over less, 1, 2 and 5 times the powers of ten, written plainly
    (0.2, 0.5, 1). Minor ticks stay, unlabelled: matplotlib's default labels them
    too on a short span, and they then run into each other."""
    from matplotlib.ticker import (FuncFormatter, LogFormatterSciNotation, LogLocator,
                                   NullFormatter)

    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', not {axis!r}")
    getattr(ax, f"set_{axis}scale")("log")
    lo, hi = sorted(getattr(ax, f"get_{axis}lim")())
    decades = math.log10(hi / lo) if lo > 0 else math.inf
    subs = (1.0,) if decades >= 3 else (1.0, 2.0, 5.0)
    target = getattr(ax, f"{axis}axis")
    target.set_major_locator(LogLocator(base=10, subs=subs))
    target.set_minor_locator(LogLocator(base=10, subs=[s for s in range(2, 10)
                                                        if float(s) not in subs]))
    target.set_minor_formatter(NullFormatter())
    target.set_major_formatter(LogFormatterSciNotation() if decades >= 3
                               else FuncFormatter(lambda v, _: f"{v:g}"))
