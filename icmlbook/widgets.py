"""What a reader sees move: ``progress`` for long loops and ``explore`` for every
chapter's interactive section.

``progress`` is a live bar for a reader; headless (``ICMLBOOK_HEADLESS=1``) at most
``lines`` short lines, so executed notebooks stay small. Never put a progress loop in a
cell that nbval checks.

``explore``, live (JupyterLab), shows the controls above an Output area and redraws on
every change. Headless (papermill, nbval) it draws the default view once under the
controls. At the smoke tier it also moves every control to each of its extremes, so a
crash at an extreme fails the tests. The slowest redraw is kept in the run record.
"""
from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from icmlbook.tiers import RULES


def headless() -> bool:
    return os.environ.get("ICMLBOOK_HEADLESS", "") not in ("", "0")


def progress(iterable: Iterable[Any], desc: str = "", total: int | None = None,
             lines: int = 4) -> Any:
    """Wrap ``iterable`` in a progress display; supports ``set_postfix(**numbers)``."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    if headless():
        return _Plain(iterable, desc, total, lines)
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=True)


class _Plain:
    """A headless progress display: a line at evenly spaced checkpoints."""

    def __init__(self, iterable: Iterable[Any], desc: str, total: int | None, lines: int):
        self.iterable, self.desc, self.total = iterable, desc, total
        self.lines = max(1, lines)
        self.postfix: dict[str, Any] = {}

    def set_postfix(self, **values: Any) -> None:
        self.postfix = values

    def __len__(self) -> int:
        return self.total or 0

    def __iter__(self) -> Iterator[Any]:
        t0 = time.perf_counter()
        marks = set()
        if self.total:
            marks = {max(1, round(self.total * k / self.lines)) for k in range(1, self.lines + 1)}
        n = 0
        for item in self.iterable:
            yield item
            n += 1
            if n in marks:
                self._line(n, time.perf_counter() - t0)
        if not self.total:
            self._line(n, time.perf_counter() - t0)

    def _line(self, n: int, seconds: float) -> None:
        post = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in self.postfix.items())
        of = f"/{self.total}" if self.total else ""
        print(f"{self.desc}: {n}{of} ({seconds:.1f}s) {post}".rstrip(), flush=True)


def extremes(widget: Any) -> list[Any]:
    """The values ``widget`` should survive: both ends of a slider, every option, both states."""
    cls = type(widget).__name__
    if cls == "FloatLogSlider":
        return [widget.base ** widget.min, widget.base ** widget.max]
    if cls in ("IntRangeSlider", "FloatRangeSlider"):
        return [(widget.min, widget.min), (widget.max, widget.max), (widget.min, widget.max)]
    if hasattr(widget, "min") and hasattr(widget, "max"):
        return [widget.min, widget.max]
    if hasattr(widget, "options"):
        opts = [o[1] if isinstance(o, tuple) else o for o in widget.options]
        return [tuple(opts[:1]), tuple(opts)] if cls == "SelectMultiple" else opts
    if isinstance(getattr(widget, "value", None), bool):
        return [True, False]
    return []


def extreme_settings(controls: dict[str, Any]) -> list[dict[str, Any]]:
    """Settings that visit every extreme of every control: setting i puts each control
    at its i-th extreme (its last one once it has run out), so all lows come together,
    then all highs, then the remaining options of the longest menu."""
    ext = {k: v for k, w in controls.items() if (v := extremes(w))}
    n = max((len(v) for v in ext.values()), default=0)
    return [{k: v[min(i, len(v) - 1)] for k, v in ext.items()} for i in range(n)]


def explore(update: Callable[..., Any], controls: dict[str, Any], *, run: Any = None,
            title: str | None = None) -> None:
    """Show ``controls`` (name -> ipywidget) and call ``update(**values)`` on every change.

    ``update`` draws with matplotlib and ends with ``plt.show()``. Where ``run``'s tier
    exercises widgets (smoke), each control is moved through :func:`extremes` and any
    value that makes ``update`` fail raises.

    Headless (``ICMLBOOK_HEADLESS=1``) the default view is drawn as a plain output, not
    inside an Output widget: nbclient answers every Output-widget update on the kernel's
    shell channel while it waits on that channel for the cell to finish, and runs were
    seen to hang there. Returns None, so a cell ending with it shows the view once.
    """
    import ipywidgets as W
    from IPython.display import display

    errors: list[str] = []
    slowest = [0.0]
    paused = [False]  # set while an exercise moves the controls: no live redraws

    def call(values: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        try:
            update(**values)
        except Exception as exc:  # collected, so an exercise reports every failing setting
            errors.append(f"{values}: {type(exc).__name__}: {exc}")
            traceback.print_exc()
        slowest[0] = max(slowest[0], time.perf_counter() - t0)

    for w in controls.values():
        if hasattr(w, "continuous_update"):
            w.continuous_update = False  # redraw on release, not on every pixel
    children = ([W.HTML(f"<b>{title}</b>")] if title else []) + list(controls.values())
    panel = W.Box(children, layout=W.Layout(flex_flow="row wrap"))
    if headless():
        display(panel)
        call({k: w.value for k, w in controls.items()})
    else:
        out = W.Output()

        def render(_change: Any = None) -> None:
            if paused[0]:
                return
            with out:
                out.clear_output(wait=True)
                call({k: w.value for k, w in controls.items()})

        for w in controls.values():
            w.observe(render, names="value")
        display(W.VBox([panel, out]))
        render()
    if errors:
        raise RuntimeError("the widget failed with its defaults: " + errors[0])
    tier_rules = RULES.get(getattr(run, "tier", None))
    if tier_rules and tier_rules.exercise_widgets:
        paused[0] = True
        try:
            _exercise(controls, call)
        finally:
            paused[0] = False
        if errors:
            raise RuntimeError("the widget failed at: " + " | ".join(errors))
    if run is not None:
        run.widget_seconds = round(slowest[0], 3)


def _exercise(controls: dict[str, Any], call: Callable[[dict[str, Any]], None]) -> None:
    """Draw every extreme setting out of sight, then put the controls back to their
    defaults without redrawing: the default view stays.

    Out of sight, ``plt.show()`` draws each open figure once on its canvas, at low dpi
    and without a layout engine: every artist is still drawn (a bad value at an
    extreme still raises), but neither the layout passes nor the PNG encoding of the
    inline backend are paid for figures nobody sees."""
    import matplotlib as mpl
    import matplotlib.pyplot as plt
    from IPython.utils.capture import capture_output

    def draw_out_of_sight(*_args: Any, **_kwargs: Any) -> None:
        try:
            for num in plt.get_fignums():
                fig = plt.figure(num)
                fig.set_layout_engine("none")
                fig.canvas.draw()
        finally:
            plt.close("all")

    defaults = {k: w.value for k, w in controls.items()}
    show = plt.show
    plt.show = draw_out_of_sight
    try:
        with capture_output(), mpl.rc_context({"figure.dpi": 30}):
            for setting in extreme_settings(controls):
                for k, v in setting.items():
                    controls[k].value = v  # the control must accept the value itself
                call({k: w.value for k, w in controls.items()})
                plt.close("all")
    finally:
        plt.show = show
    for k, v in defaults.items():
        controls[k].value = v
