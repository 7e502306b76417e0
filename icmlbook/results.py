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


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if v == v]  # NaN is the one value unequal to itself


def summary_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`summary` over plain rows (dicts with the :data:`COLUMNS` keys), without
    pandas: per claim, in the order declared, paper claims first, then checks."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["name"], []).append(r)
    out = []
    for name, g in groups.items():
        op, thr = g[0]["op"], float(g[0]["threshold"])
        values = [float(r["value"]) for r in g]
        seen = _finite(values)
        worst = min(margin(v, op, thr) for v in values)
        versus = g[0]["versus"]
        out.append({
            "kind": g[0]["kind"], "claim": name,
            "isolates": versus if isinstance(versus, str) and versus else "-",
            "needs": f"{op} {thr:.6g}",
            "min": min(seen, default=math.nan), "median": _median(seen),
            "max": max(seen, default=math.nan),
            "passed": f"{sum(bool(r['passed']) for r in g)}/{len(g)}",
            "worst margin": worst,
            "worst margin %": (None if thr == 0 else round(100 * worst / abs(thr), 1)),
        })
    order = {"paper": 0, "check": 1, "unsorted": 2}
    return sorted(out, key=lambda row: order[row["kind"]])  # sorted() is stable


def _median(values: list[float]) -> float:
    if not values:
        return math.nan
    v, mid = sorted(values), len(values) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def summary(df: Any) -> Any:
    """Per claim, in the order declared: kind, threshold, min / median / max over seeds,
    passing seeds and the worst margin (absolute, and relative to the threshold)."""
    import pandas as pd

    return pd.DataFrame(summary_rows(df.to_dict("records")))


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """The results file as plain rows, typed as :func:`read_results` types them; the
    smoke tier's Across-seeds cell reads it this way, without importing pandas."""
    import csv

    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["seed"] = int(r["seed"])
        r["versus"] = r["versus"] or None
        r["value"] = float(r["value"]) if r["value"] else math.nan
        r["threshold"] = float(r["threshold"])
        r["passed"] = r["passed"] == "True"
    return rows


def across_seeds(run: Any, root: str | Path | None = None) -> list[dict[str, Any]] | None:
    """The "Across seeds" cell: the chapter's committed results as a table and a strip
    plot (one panel per claim, the threshold dashed). Returns the summary rows.

    At the smoke tier the table is printed as text and the plot is left out, so the
    cell imports neither pandas nor anything else it would not otherwise need."""
    from icmlbook.chapters import list_chapters

    stem = f"ch{run.chapter}"
    chapter = next((c for c in list_chapters(root) if c.stem == stem), None)
    if chapter is None:
        raise LookupError(f"across_seeds(): no chapter {stem} in _toc.yml")
    refresh = REFRESH.format(number=chapter.number)
    if not chapter.results_file.exists():
        print(f"No results file yet ({chapter.results_file.name}); make it with `{refresh}`.")
        return None
    rows = _read_rows(chapter.results_file)
    seeds = sorted({r["seed"] for r in rows})
    current = {r["code_hash"] for r in rows} == {chapter.code_hash}
    state = ("made from this chapter's current code" if current else
             f"STALE: the chapter's code changed since; refresh with `{refresh}`")
    print(f"Seeds {seeds[0]}-{seeds[-1]} at the {RESULTS_TIER} tier ({len(seeds)} runs, "
          f"{chapter.results_file.relative_to(chapter.root)}), {state}.")
    table = summary_rows(rows)
    shown = [{**row, **{col: f"{row[col]:.4g}" for col in ("min", "median", "max",
                                                           "worst margin")},
              "worst margin %": percent(row["worst margin %"])} for row in table]
    if RULES[run.tier].results_plot:
        import pandas as pd
        from IPython.display import display

        display(pd.DataFrame(shown).set_index("claim"))
        _strip_plot(rows, table)
    else:  # the committed results are the same at every tier; smoke keeps to its budget
        print(_text_table(shown))
        print(f"(the strip plot of these values is drawn at the {RESULTS_TIER} tier)")
    return table


def _text_table(rows: list[dict[str, Any]]) -> str:
    """Rows of strings as a fixed-width table, one claim per line."""
    cols = list(rows[0])
    cells = [cols] + [[str(r[c]) for c in cols] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip()
                     for line in cells)


def _strip_plot(rows: list[dict[str, Any]], table: list[dict[str, Any]]) -> None:
    import matplotlib.pyplot as plt
    import numpy as np

    names = [row["claim"] for row in table]
    cols = min(5, len(names))
    nrows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(1.9 * cols, 2.1 * nrows), squeeze=False,
                             layout="constrained")
    for ax, name in zip(axes.flat, names):
        g = [r for r in rows if r["name"] == name]
        kind = g[0]["kind"]
        x = np.random.default_rng(0).uniform(-0.15, 0.15, len(g))
        colour = [("C0" if kind == "paper" else "0.45") if r["passed"] else "C3" for r in g]
        ax.scatter(x, [r["value"] for r in g], s=12, c=colour, zorder=3)
        ax.axhline(g[0]["threshold"], color="k", ls="--", lw=1)
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
