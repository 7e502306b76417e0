"""Progress for long loops: a live bar for a reader; headless (``ICMLBOOK_HEADLESS=1``)
at most ``lines`` short lines, so executed notebooks stay small. Never put a progress
loop in a cell that nbval checks.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from typing import Any


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

