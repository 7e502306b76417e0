"""The run record embedded in an executed notebook, and its reader."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORD_MIME = "application/vnd.icmlbook.record+json"
RECORD_VERSION = 1


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
