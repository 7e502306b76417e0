"""Committed results: each chapter's claim, check and finding values over its seeds.

Seeds 0-9 are the **calibration** seeds (thresholds are set on them) and seeds 10-19
the **confirmation** seeds (swept once, after the thresholds are frozen); the ``split``
column says which. ``results/chNN_slug.csv`` is written by :data:`REFRESH` and stamped
with the hash of the chapter's code cells, so a code change makes it stale (the structure
tests say so) while a prose edit does not. A chapter's "Across seeds" cell shows it with
:func:`across_seeds`; the reproduction report (:mod:`icmlbook.report`) gathers all of them.
"""
from __future__ import annotations

import json
import math
import statistics
import textwrap
from pathlib import Path
from typing import Any

from icmlbook.chapters import Chapter, list_chapters
from icmlbook.tiers import CALIBRATION_SEEDS, COMMITTED_TIER, CONFIRMATION_SEEDS, RULES
from icmlbook.verdicts import grade_all, verdict_lines, weak

SPLITS = {"calibration": CALIBRATION_SEEDS, "confirmation": CONFIRMATION_SEEDS}
COLUMNS = ["seed", "split", "kind", "versus", "name", "value", "op", "threshold", "passed",
           "strength", "provenance", "strict", "strict_passed", "seconds", "peak_mb",
           "code_hash"]
"""A finding's row (kind "finding") holds the paper's direction in op/threshold and in
``passed`` whether it held; it is never enforced."""
REFRESH = "icmlbook sweep {number} --seeds 0-19 --update-results"
"""The command that refreshes a chapter's results file."""


def split_of(seed: int) -> str:
    """"calibration" (seeds 0-9), "confirmation" (10-19) or "other"."""
    return next((k for k, seeds in SPLITS.items() if seed in seeds), "other")


def margin(value: float, op: str, threshold: float) -> float:
    """How far ``value`` is inside its threshold (negative: on the failing side)."""
    if value is None or not math.isfinite(value):
        return -math.inf
    return value - threshold if op in (">=", ">") else threshold - value


def percent(v: float | None) -> str:
    """A relative margin for display: one decimal, capped at +-1000 % (a threshold of
    1e-9 with a value of -0.01 is a margin of a billion per cent, which says nothing)."""
    if v is None or v != v:
        return "-"
    return f"{v:.1f}" if abs(v) < 1000 else (">1000" if v > 0 else "<-1000")


def write_results(chapter: Chapter, df: Any) -> Path:
    """Write the chapter's rows of a sweep ``df`` to its results file, after checking that
    they are seeds 0-9 (or 0-19) at the default tier, with no errors, from the current
    code; the headlines and statements of the seed-0 record go to its ``.json`` sidecar."""
    rows = df[df["chapter"] == chapter.number]
    seeds = tuple(sorted(set(rows["seed"])))
    problems = []
    if seeds not in (CALIBRATION_SEEDS, CALIBRATION_SEEDS + CONFIRMATION_SEEDS):
        problems.append(f"seeds {list(seeds)} (need 0-9 or 0-19)")
    if set(rows["tier"]) != {COMMITTED_TIER}:
        problems.append(f"tier {sorted(set(rows['tier']))} (need {COMMITTED_TIER})")
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


def write_sidecar(chapter: Chapter, record: dict[str, Any]) -> Path | None:
    """``results/chNN_slug.json``: the headlines, the paper's verdict rule's inputs that do
    not vary by seed (statements of claims and findings), from one run's record."""
    path = chapter.results_file.with_suffix(".json")
    if not record.get("headlines") and not record.get("findings"):
        path.unlink(missing_ok=True)
        return None
    meta = {
        "code_hash": chapter.code_hash,
        "headlines": record.get("headlines", []),
        "claims": {c["name"]: c["statement"] for c in record.get("claims", [])},
        "findings": {f["name"]: {"paper": f["paper"], "shows": f["shows"]}
                     for f in record.get("findings", [])},
    }
    path.write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_sidecar(chapter: Chapter) -> dict[str, Any] | None:
    """The chapter's ``.json`` sidecar (headlines and statements), or None."""
    path = chapter.results_file.with_suffix(".json")
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def read_results(chapter: Chapter) -> Any:
    """The chapter's results file as a DataFrame, or None if it has none."""
    import pandas as pd

    rows = read_rows(chapter)
    return None if rows is None else pd.DataFrame(rows, columns=COLUMNS)


def read_rows(chapter: Chapter) -> list[dict[str, Any]] | None:
    """The chapter's results file as plain rows, typed (None if it has none): the smoke
    tier's Across-seeds cell reads it this way, without importing pandas."""
    import csv

    if not chapter.results_file.exists():
        return None
    with open(chapter.results_file, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:  # files made before the split/strength columns read with defaults
        r["seed"] = int(r["seed"])
        r["split"] = r.get("split") or split_of(r["seed"])
        for k in ("versus", "strength", "provenance"):
            r[k] = r.get(k) or None
        for k in ("value", "seconds", "peak_mb"):
            r[k] = float(r[k]) if r.get(k) else math.nan
        r["threshold"] = float(r["threshold"])
        r["passed"] = r["passed"] == "True"
        r["strict"] = float(r["strict"]) if r.get("strict") else None
        r["strict_passed"] = r["strict_passed"] == "True" if r.get("strict_passed") else None
    return rows


def summary_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`summary` over plain rows (dicts with the :data:`COLUMNS` keys), without
    pandas: per claim, in the order declared, paper claims first, then checks, then
    findings. ``calibration``/``confirmation`` count the seeds of each split on which
    the claim holds (a finding: on which the paper's direction held); ``strict``
    counts the seeds on which a weaker claim also clears its superiority version."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["name"], []).append(r)
    out = []
    for name, g in groups.items():
        op, thr = g[0]["op"], float(g[0]["threshold"])
        values = [float(r["value"]) for r in g]
        seen = [v for v in values if v == v]  # NaN is the one value unequal to itself
        worst = min(margin(v, op, thr) for v in values)
        row = {"kind": g[0]["kind"], "claim": name, "isolates": _label(g[0]["versus"]),
               "needs": f"{op} {thr:.6g}", "min": min(seen, default=math.nan),
               "median": statistics.median(seen) if seen else math.nan,
               "max": max(seen, default=math.nan)}
        for split in SPLITS:
            part = [r for r in g if r["split"] == split]
            if part or split == "calibration":
                row[split] = f"{sum(bool(r['passed']) for r in part)}/{len(part)}"
        row["passed"] = f"{sum(bool(r['passed']) for r in g)}/{len(g)}"
        row["worst margin"] = worst
        row["worst margin %"] = None if thr == 0 else round(100 * worst / abs(thr), 1)
        row["strength"] = _label(g[0]["strength"])
        row["provenance"] = _label(g[0]["provenance"])
        stricts = [bool(r["strict_passed"]) for r in g if r["strict_passed"] in (True, False)]
        row["strict"] = f"{sum(stricts)}/{len(stricts)}" if stricts else "-"
        out.append(row)
    order = {"paper": 0, "check": 1, "finding": 2}
    return sorted(out, key=lambda row: order[row["kind"]])  # sorted() is stable


def _label(v: Any) -> str:
    """A text column's value, "-" where empty (None from the csv reader, NaN through
    pandas)."""
    return v if isinstance(v, str) and v else "-"


def verdict_across(rows: list[dict[str, Any]], meta: dict[str, Any] | None
                   ) -> dict[str, Any] | None:
    """The paper's verdict over every seed of a results file, by the rule of
    :mod:`icmlbook.verdicts`: a claim counts as holding if it holds on every seed, a
    finding as the paper's way if on every seed, against it if on none."""
    if not meta or not meta.get("headlines"):
        return None
    claims: dict[str, dict] = {}
    findings: dict[str, bool | None] = {}
    for name in dict.fromkeys(r["name"] for r in rows):
        g = [r for r in rows if r["name"] == name]
        n_ok = sum(bool(r["passed"]) for r in g)
        if g[0]["kind"] == "finding":
            findings[name] = True if n_ok == len(g) else False if n_ok == 0 else None
        elif g[0]["kind"] == "paper":
            claims[name] = {"passed": n_ok == len(g), "weak": weak(g[0])}
    return grade_all(meta["headlines"], claims, findings)


def summary(df: Any) -> Any:
    """Per claim, in the order declared: kind, threshold, min / median / max over seeds,
    passing seeds and the worst margin (absolute, and relative to the threshold)."""
    import pandas as pd

    return pd.DataFrame(summary_rows(df.to_dict("records")))


def across_seeds(run: Any, root: str | Path | None = None) -> list[dict[str, Any]] | None:
    """The "Across seeds" cell: the chapter's committed results as a table and a strip
    plot (one panel per claim, the threshold dashed); returns the summary rows. At the
    smoke tier the table is text and there is no plot, so pandas is never imported."""
    stem = f"ch{run.chapter}"
    chapter = next((c for c in list_chapters(root) if c.stem == stem), None)
    if chapter is None:
        raise LookupError(f"across_seeds(): no chapter {stem} in _toc.yml")
    refresh = REFRESH.format(number=chapter.number)
    if not chapter.results_file.exists():
        print(f"No results file yet ({chapter.results_file.name}); make it with `{refresh}`.")
        return None
    rows = read_rows(chapter)
    current = {r["code_hash"] for r in rows} == {chapter.code_hash}
    state = ("made from this chapter's current code" if current else
             f"STALE: the chapter's code changed since; refresh with `{refresh}`")
    print(f"{_describe_seeds(rows)} at the {COMMITTED_TIER} tier "
          f"({chapter.results_file.relative_to(chapter.root)}), {state}.")
    table = summary_rows(rows)
    shown = [{k: v for k, v in {
        **row, **{col: f"{row[col]:.4g}" for col in ("min", "median", "max", "worst margin")},
        "worst margin %": percent(row["worst margin %"])}.items()
        if k != "passed" and not all(r[k] == "-" for r in table)} for row in table]
    if RULES[run.tier].results_plot:
        import pandas as pd
        from IPython.display import display

        display(pd.DataFrame(shown).set_index("claim"))
        _strip_plot(rows, table)
    else:  # the committed results are the same at every tier; smoke keeps to its budget
        print(_text_table(shown))
        print(f"(the strip plot of these values is drawn at the {COMMITTED_TIER} tier)")
    verdict = verdict_across(rows, read_sidecar(chapter))
    if verdict:
        print("\n".join(verdict_lines(verdict, "The paper's verdict over these seeds")))
    return table


def _describe_seeds(rows: list[dict[str, Any]]) -> str:
    """"Calibration seeds 0-9 (10 runs) and confirmation seeds 10-19 (10 runs)"."""
    parts = []
    for split in (*SPLITS, "other"):
        seeds = sorted({r["seed"] for r in rows if r["split"] == split})
        if seeds:
            span = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"{seeds[0]}"
            parts.append(f"{split} seeds {span} ({len(seeds)} runs)")
    text = " and ".join(parts)
    return text[0].upper() + text[1:]


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
        x = x + np.array([0.2 if r["split"] == "confirmation" else -0.2 for r in g])
        if kind == "finding":  # never enforced: purple where the paper's direction held
            colour = ["C4" if r["passed"] else "C1" for r in g]
        else:
            colour = [("C0" if kind == "paper" else "0.45") if r["passed"] else "C3" for r in g]
        ax.scatter(x, [r["value"] for r in g], s=12, c=colour, zorder=3)
        ax.axhline(g[0]["threshold"], color="k", ls="--", lw=1)
        ax.set_xlim(-0.5, 0.5)
        ax.set_xticks([])
        title = "\n".join(textwrap.wrap(name, 26)[:3])  # at most three short lines
        ax.set_title(("" if kind == "paper" else f"[{kind}] ") + title, fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.suptitle("each claim and check over seeds (dots: calibration left, confirmation right; "
                 "red: a failing seed), its threshold (dashed); findings: purple where the "
                 "paper's direction held, orange where not", fontsize=8)
    plt.show()
