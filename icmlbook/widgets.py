"""``explore``: one helper for every chapter's interactive section.

It shows the controls above an Output area and redraws on every change. Run
headless (papermill, nbval, the book build) it renders once with the default
values, and the stored notebook shows that figure. At the smoke tier it also
moves every control to each of its extremes (slider ends, every option, both
states of a checkbox), so a crash at an extreme fails the tests, then puts the
defaults back. The slowest redraw is kept in the run record.
"""
from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any


def extremes(widget: Any) -> list[Any]:
    """The values ``widget`` should survive: both ends of a slider, every option, both states."""
    cls = type(widget).__name__
    if cls == "FloatLogSlider":
        return [widget.base ** widget.min, widget.base ** widget.max]
    if cls in ("IntRangeSlider", "FloatRangeSlider"):
        return [(widget.min, widget.min), (widget.max, widget.max), (widget.min, widget.max)]
    if hasattr(widget, "min") and hasattr(widget, "max"):
        return [widget.min, widget.max]
    if cls == "SelectMultiple":
        opts = [o[1] if isinstance(o, tuple) else o for o in widget.options]
        return [tuple(opts[:1]), tuple(opts)]
    if hasattr(widget, "options"):
        return [o[1] if isinstance(o, tuple) else o for o in widget.options]
    if isinstance(getattr(widget, "value", None), bool):
        return [True, False]
    return []


def extreme_settings(controls: dict[str, Any]) -> list[dict[str, Any]]:
    """Settings that visit every extreme of every control: setting i puts each control
    at its i-th extreme (its last one once it has run out), so all lows come together,
    then all highs, then the remaining options of the longest menu."""
    ext = {k: extremes(w) for k, w in controls.items()}
    ext = {k: v for k, v in ext.items() if v}
    n = max((len(v) for v in ext.values()), default=0)
    return [{k: v[min(i, len(v) - 1)] for k, v in ext.items()} for i in range(n)]


def explore(update: Callable[..., Any], controls: dict[str, Any], *, run: Any = None,
            exercise: bool | None = None, title: str | None = None) -> None:
    """Show ``controls`` (name -> ipywidget) and call ``update(**values)`` on every change.

    ``update`` draws with matplotlib and ends with ``plt.show()``. ``exercise``
    (default: ``run.tier == "smoke"``) moves each control through
    :func:`extremes` and raises if any value makes ``update`` fail.
    Returns None, so that a cell ending with ``explore(...)`` shows the view once.
    """
    import ipywidgets as W
    from IPython.display import display

    out = W.Output()
    errors: list[str] = []
    slowest = [0.0]
    paused = [False]

    def render(_change: Any = None) -> None:
        if paused[0]:
            return
        values = {k: w.value for k, w in controls.items()}
        t0 = time.perf_counter()
        with out:
            out.clear_output(wait=True)
            try:
                update(**values)
            except Exception as exc:  # the Output widget would swallow it: keep it
                errors.append(f"{values}: {type(exc).__name__}: {exc}")
                traceback.print_exc()
        slowest[0] = max(slowest[0], time.perf_counter() - t0)

    def set_all(values: dict[str, Any]) -> None:
        paused[0] = True  # one redraw for the whole setting, not one per control
        try:
            for k, v in values.items():
                controls[k].value = v
        finally:
            paused[0] = False
        render()

    for w in controls.values():
        if hasattr(w, "continuous_update"):
            w.continuous_update = False  # redraw on release, not on every pixel
        w.observe(render, names="value")
    children = ([W.HTML(f"<b>{title}</b>")] if title else []) + list(controls.values())
    box = W.VBox([W.Box(children, layout=W.Layout(flex_flow="row wrap")), out])
    display(box)
    render()
    if exercise is None:
        exercise = run is not None and getattr(run, "tier", None) == "smoke"
    if exercise:
        import matplotlib as mpl

        defaults = {k: w.value for k, w in controls.items()}
        with mpl.rc_context({"figure.dpi": 30}):  # these views are replaced: draw them cheaply
            for setting in extreme_settings(controls):
                set_all(setting)
        set_all(defaults)
        if errors:
            raise RuntimeError("the widget failed at: " + " | ".join(errors))
    if errors:
        raise RuntimeError("the widget failed with its defaults: " + errors[0])
    if run is not None:
        run.widget_seconds = round(slowest[0], 3)
