"""The run record embedded in an executed notebook, and its reader."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORD_MIME = "application/vnd.icmlbook.record+json"
RECORD_VERSION = 2
"""2: findings, headlines and the paper's verdict; claims carry strength and provenance."""

KINDS = ("paper", "check")
"""paper: what the paper says its method does, isolating an ingredient or against a
baseline; check: identities, closed forms, premises, counts."""
SECTIONS = {"paper": "paper claims", "check": "checks"}


def tally(claims: list[dict[str, Any]], kinds: tuple[str, ...] = KINDS,
          labels: bool = True) -> str:
    """Passed/total per kind of a record's claims: "paper claims 3/3, checks 2/2" (or
    "3/3" for one kind with ``labels=False``; "" when there are none)."""
    parts = []
    for kind in kinds:
        group = [c for c in claims if c.get("kind") == kind]
        if group:
            n = f"{sum(bool(c['passed']) for c in group)}/{len(group)}"
            parts.append(f"{SECTIONS.get(kind, kind)} {n}" if labels else n)
    return ", ".join(parts)


def holding(claims: list[dict[str, Any]]) -> str:
    """Passed/total per kind present, as a run's verdict and record say it: "3/3 paper
    claims and 2/2 checks" ("" when there are none)."""
    return " and ".join(f"{tally(claims, (k,), labels=False)} {SECTIONS[k]}" for k in KINDS
                        if any(c["kind"] == k for c in claims))


def read_record(notebook: str | Path | dict) -> dict[str, Any] | None:
    """The last icmlbook record in an executed notebook (path or nbformat dict), or None."""
    if isinstance(notebook, (str, Path)):
        nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    else:
        nb = notebook
    found = None
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) or []:
            data = out.get("data") or {}
            if RECORD_MIME in data:
                rec = data[RECORD_MIME]
                found = json.loads(rec) if isinstance(rec, str) else rec
    return found
