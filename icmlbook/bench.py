"""``icmlbook bench``: wall time, peak memory and notebook size against the budgets.
Chapters run one at a time: on 2 cores a parallel job slows a chapter several-fold."""
from __future__ import annotations

import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from icmlbook.tiers import NOTEBOOK_MB, RULES


def bench(chapters: list[Any], tiers: list[str], report: Path) -> int:
    from icmlbook.batch import execute

    rows = []
    with tempfile.TemporaryDirectory(prefix="icmlbook-bench-") as tmp:
        for ch in chapters:
            for tier in tiers:
                print(f"[bench] {ch.number} {ch.slug} at {tier} ...", flush=True)
                r = execute(ch, tier, 0, {}, Path(tmp))
                rec = r.record or {}
                size = Path(r.output).stat().st_size / 2**20 if Path(r.output).exists() else 0.0
                committed = ch.ipynb.stat().st_size / 2**20 if ch.ipynb.exists() else 0.0
                rows.append({
                    "chapter": f"{ch.number} {ch.slug}", "tier": tier, "ok": r.ok,
                    "seconds": r.seconds, "budget": RULES[tier].budget_s,
                    "peak_mb": rec.get("peak_rss_mb"), "widget_s": rec.get("widget_seconds"),
                    "nb_mb": size, "committed_mb": committed,
                    "claims": "{}/{}".format(*r.claims), "error": r.error,
                })
    lines = _markdown(rows)
    print("\n".join(lines))
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"\nwritten to {report}")
    over = [r for r in rows if not r["ok"] or _over(r)]
    return 1 if over else 0


def _over(r: dict[str, Any]) -> bool:
    return bool((r["budget"] and r["seconds"] > r["budget"])
                or (r["peak_mb"] and RULES[r["tier"]].memory_mb
                    and r["peak_mb"] > RULES[r["tier"]].memory_mb)
                or r["committed_mb"] > NOTEBOOK_MB)


def _markdown(rows: list[dict[str, Any]]) -> list[str]:
    limits = ", ".join(f"{t} <= {r.budget_s:g} s and {r.memory_mb:g} MB"
                       for t, r in RULES.items() if r.budget_s)
    head = (f"# icmlbook bench ({time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, "
            f"budgets: {limits}, notebook <= {NOTEBOOK_MB:g} MB)")
    lines = [head, "", "| chapter | tier | seconds | peak MB | slowest widget s | notebook MB "
             "| committed MB | claims | within budget |", "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        ok = "ERROR: " + (r["error"] or "") if not r["ok"] else ("no" if _over(r) else "yes")
        peak = f"{r['peak_mb']:.0f}" if r["peak_mb"] else "?"
        widget = f"{r['widget_s']:.2f}" if r["widget_s"] is not None else "-"
        lines.append(f"| {r['chapter']} | {r['tier']} | {r['seconds']:.1f} | {peak} | {widget} "
                     f"| {r['nb_mb']:.2f} | {r['committed_mb']:.2f} | {r['claims']} | {ok} |")
    return lines
