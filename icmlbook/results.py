"""Committed results: each chapter's claim values over seeds 0-9 at the default tier.

``results/chNN_slug.csv`` is written by ``icmlbook sweep CH --seeds 0-9
--update-results`` and stamped with the hash of the chapter's code cells, so a code
change makes it stale (the structure tests say so) while a prose edit does not.
A chapter's "Across seeds" cell shows it with :func:`across_seeds`; the
reproduction report (:mod:`icmlbook.report`) gathers all of them.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from icmlbook.chapters import Chapter
from icmlbook.tiers import RULES

RESULTS_TIER = "default"
RESULTS_SEEDS = tuple(range(10))
COLUMNS = ["seed", "kind", "versus", "name", "value", "op", "threshold", "passed",
           "seconds", "peak_mb", "code_hash"]
REFRESH = "icmlbook sweep {number} --seeds 0-9 --update-results"
"""The command that refreshes a chapter's results file."""


def margin(value: float, op: str, threshold: float) -> float:
    """How far ``value`` is inside its threshold (negative: on the failing side)."""
    if value is None or not math.isfinite(value):
        return -math.inf
    return value - threshold if op in (">=", ">") else threshold - value


def relative_margin(value: float, op: str, threshold: float) -> float | None:
    """:func:`margin` as a fraction of ``|threshold|`` (None for a zero threshold)."""
    return None if threshold == 0 else margin(value, op, threshold) / abs(threshold)


def percent(v: float | None) -> str:
    """A relative margin for display: one decimal, capped at +-1000 % (a threshold of
    1e-9 with a value of -0.01 is a margin of a billion per cent, which says nothing)."""
    if v is None or v != v:
        return "-"
    return f"{v:.1f}" if abs(v) < 1000 else (">1000" if v > 0 else "<-1000")


def write_results(chapter: Chapter, df: Any) -> Path:
    """Write the chapter's rows of a sweep ``df`` to its results file, after checking that
    they are seeds 0-9 at the default tier, with no errors, from the current code."""
    rows = df[df["chapter"] == chapter.number]
    seeds = tuple(sorted(set(rows["seed"])))
    problems = []
    if seeds != RESULTS_SEEDS:
        problems.append(f"seeds {list(seeds)} (need 0-9)")
    if set(rows["tier"]) != {RESULTS_TIER}:
        problems.append(f"tier {sorted(set(rows['tier']))} (need {RESULTS_TIER})")
    if (rows["kind"] == "error").any():
        problems.append("runs that ended in an error")
    if set(rows["code_hash"]) != {chapter.code_hash}:
        problems.append("runs of another version of the chapter's code")
    if problems:
        raise ValueError(f"chapter {chapter.number}: cannot write {chapter.results_file.name}: "
                         + "; ".join(problems))
    path = chapter.results_file
    path.parent.mkdir(parents=True, exist_ok=True)
    out = rows[COLUMNS].sort_values("seed", kind="stable")
    out.to_csv(path, index=False, float_format="%.8g")
    return path


def read_results(chapter: Chapter) -> Any:
    """The chapter's results file as a DataFrame, or None if it has none."""
    import pandas as pd

    path = chapter.results_file
    return pd.read_csv(path, keep_default_na=False, na_values=[""]) if path.exists() else None


def is_current(chapter: Chapter, df: Any) -> bool:
    """Whether the results were made from the chapter's current code."""
    return df is not None and set(df["code_hash"]) == {chapter.code_hash}


def summary(df: Any) -> Any:
    """Per claim, in the order declared: kind, threshold, min / median / max over seeds,
    passing seeds and the worst margin (absolute, and relative to the threshold)."""
    import pandas as pd

    rows = []
    for name, g in df.groupby("name", sort=False):
        op, thr = g["op"].iloc[0], float(g["threshold"].iloc[0])
        margins = [margin(v, op, thr) for v in g["value"]]
        worst = min(margins)
        rows.append({
            "kind": g["kind"].iloc[0], "claim": name,
            "isolates": g["versus"].iloc[0] if isinstance(g["versus"].iloc[0], str) else "-",
            "needs": f"{op} {thr:.6g}", "min": g["value"].min(), "median": g["value"].median(),
            "max": g["value"].max(), "passed": f"{int(g['passed'].sum())}/{len(g)}",
            "worst margin": worst,
            "worst margin %": (None if thr == 0 else round(100 * worst / abs(thr), 1)),
        })
    out = pd.DataFrame(rows)
    order = {"paper": 0, "check": 1, "unsorted": 2}
    return out.sort_values("kind", key=lambda k: k.map(order), kind="stable").reset_index(
        drop=True)


def across_seeds(run: Any, root: str | Path | None = None) -> Any:
    """The "Across seeds" cell: the chapter's committed results as a table and a strip
    plot (one panel per claim, the threshold dashed). Returns the summary table."""
    from IPython.display import display

    from icmlbook.chapters import list_chapters

    stem = f"ch{run.chapter}"
    chapter = next((c for c in list_chapters(root) if c.stem == stem), None)
    if chapter is None:
        raise LookupError(f"across_seeds(): no chapter {stem} in _toc.yml")
    df = read_results(chapter)
    refresh = REFRESH.format(number=chapter.number)
    if df is None:
        print(f"No results file yet ({chapter.results_file.name}); make it with `{refresh}`.")
        return None
    seeds = sorted(set(df["seed"]))
    state = ("made from this chapter's current code" if is_current(chapter, df) else
             f"STALE: the chapter's code changed since; refresh with `{refresh}`")
    print(f"Seeds {seeds[0]}-{seeds[-1]} at the {RESULTS_TIER} tier ({len(seeds)} runs, "
          f"{chapter.results_file.relative_to(chapter.root)}), {state}.")
    table = summary(df)
    shown = table.copy()
    for col in ("min", "median", "max", "worst margin"):
        shown[col] = [f"{v:.4g}" for v in table[col]]
    shown["worst margin %"] = [percent(v) for v in table["worst margin %"]]
    display(shown.set_index("claim"))
    if RULES[run.tier].results_plot:
        _strip_plot(df, table)
    else:  # the committed results are the same at every tier; smoke keeps to its budget
        print(f"(the strip plot of these values is drawn at the {RESULTS_TIER} tier)")
    return table


def _strip_plot(df: Any, table: Any) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(table["claim"])
    cols = min(5, len(names))
    nrows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(1.9 * cols, 2.1 * nrows), squeeze=False,
                             layout="constrained")
    for ax, name in zip(axes.flat, names):
        g = df[df["name"] == name]
        kind = g["kind"].iloc[0]
        x = np.random.default_rng(0).uniform(-0.15, 0.15, len(g))
        colour = np.where(g["passed"], "C0" if kind == "paper" else "0.45", "C3")
        ax.scatter(x, g["value"], s=12, c=list(colour), zorder=3)
        ax.axhline(g["threshold"].iloc[0], color="k", ls="--", lw=1)
        ax.set_xlim(-0.5, 0.5)
        ax.set_xticks([])
        ax.set_title(("" if kind == "paper" else f"[{kind}] ") + _wrap(name), fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle("each claim and check over seeds (dots; red: a failing seed), its threshold "
                 "(dashed)", fontsize=8)
    plt.show()


def _wrap(text: str, width: int = 26) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)[:3])
