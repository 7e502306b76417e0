"""Execute chapters with papermill and collect their records."""
from __future__ import annotations

import copy
import hashlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icmlbook.chapters import Chapter
from icmlbook.record import read_record

NOISE_CELL_KEYS = ("papermill", "execution", "ExecuteTime", "collapsed", "scrolled")
# The kernel logs only errors: ipykernel otherwise warns on every start that local TCP
# is unencrypted, which buries the runner's own progress lines.
KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
# Seconds a single cell may run before the run fails (instead of hanging a batch or CI).
CELL_TIMEOUT = {"smoke": 120, "default": 600, "full": None}


@dataclass
class Result:
    chapter: str  # "05"
    slug: str
    tier: str
    seed: int
    params: dict[str, Any]
    output: str
    seconds: float = 0.0
    ok: bool = False
    error: str | None = None
    record: dict[str, Any] | None = field(default=None)

    @property
    def claims(self) -> tuple[int, int]:
        claims = (self.record or {}).get("claims", [])
        return sum(c["passed"] for c in claims), len(claims)

    @property
    def verdict(self) -> str:
        if not self.ok:
            return "ERROR" if not self.record or not self.record.get("claims") else "FAILED"
        passed, total = self.claims
        if passed == total:
            return "PASS"
        return "RECORDED" if self.tier == "smoke" else "FAILED"

    def as_json(self) -> dict[str, Any]:
        return {"chapter": self.chapter, "slug": self.slug, "tier": self.tier, "seed": self.seed,
                "params": self.params, "output": self.output, "seconds": round(self.seconds, 2),
                "ok": self.ok, "verdict": self.verdict, "error": self.error,
                "record": self.record}


def source_notebook(chapter: Chapter) -> Any:
    """The chapter's notebook built from its ``.py`` source, with stable cell ids."""
    nb = copy.deepcopy(chapter.notebook)
    for i, cell in enumerate(nb.cells):
        cell["id"] = hashlib.sha1(f"{i}:{cell.source}".encode()).hexdigest()[:12]
    return nb


def clean(nb: Any) -> Any:
    """Strip papermill/nbclient metadata noise and empty tags (before committing)."""
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        for key in NOISE_CELL_KEYS:
            cell.metadata.pop(key, None)
        if "tags" in cell.metadata and not cell.metadata["tags"]:
            del cell.metadata["tags"]
    return nb


def execute(chapter: Chapter, tier: str, seed: int, params: dict[str, Any], out_dir: Path,
            inplace: bool = False, verbose: bool = False) -> Result:
    """Run one chapter headless with papermill; never raises for a failing chapter.

    ``verbose`` streams the chapter's printed output (its progress lines) as it runs."""
    import nbformat
    import papermill as pm

    os.environ["ICMLBOOK_HEADLESS"] = "1"
    defaults = chapter.parameters
    given = {"tier": tier, "seed": seed, **params}
    # inject only what differs from the parameters cell (a default run injects nothing)
    inject = {k: v for k, v in given.items() if k not in defaults or defaults[k].default != v}
    out_path = chapter.ipynb if inplace else Path(out_dir) / f"{chapter.stem}.{tier}.s{seed}.ipynb"
    result = Result(chapter.number, chapter.slug, tier, seed, dict(params), str(out_path))
    with tempfile.TemporaryDirectory(prefix="icmlbook-") as tmp:
        src = Path(tmp) / f"{chapter.stem}.ipynb"
        nbformat.write(source_notebook(chapter), src)
        executed = Path(tmp) / "executed.ipynb"
        t0 = time.perf_counter()
        try:
            pm.execute_notebook(str(src), str(executed), parameters=inject, kernel_name="python3",
                                progress_bar=False, log_output=verbose,
                                stdout_file=sys.stdout if verbose else None,
                                cwd=str(chapter.py.parent), extra_arguments=KERNEL_ARGS,
                                execution_timeout=CELL_TIMEOUT[tier])
            result.ok = True
        except pm.PapermillExecutionError as exc:
            result.error = _describe(exc)
        except Exception as exc:  # kernel died, timeout, ...
            result.error = f"{type(exc).__name__}: {exc}"
        result.seconds = time.perf_counter() - t0
        if executed.exists():
            nb = nbformat.read(executed, as_version=4)
            result.record = read_record(nb)
            if inplace and result.ok:
                nbformat.write(clean(nb), out_path)
            else:
                if inplace:  # keep the committed notebook; put the failed run aside
                    out_path = Path(out_dir) / f"{chapter.stem}.failed.ipynb"
                    result.output = str(out_path)
                out_path.parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, out_path)
    return result


def _describe(exc: Any) -> str:
    where = f"cell {exc.exec_count}" if getattr(exc, "exec_count", None) else "a cell"
    return f"{where}: {exc.ename}: {exc.evalue}".strip()


def run_many(jobs: list[tuple[Chapter, str, int, dict[str, Any]]], out_dir: Path, inplace: bool,
             workers: int = 1, verbose: bool = False) -> list[Result]:
    """Execute several chapters, ``workers`` kernels at a time, printing progress lines."""
    from concurrent.futures import ProcessPoolExecutor

    def announce(ch: Chapter, tier: str, seed: int) -> None:
        print(f"[start] {ch.number} {ch.slug} (tier {tier}, seed {seed})", flush=True)

    def report(r: Result) -> None:
        passed, total = r.claims
        extra = f": {r.error}" if r.error else ""
        print(f"[{r.verdict.lower()}] {r.chapter} {r.slug} in {r.seconds:.1f}s, "
              f"claims {passed}/{total}{extra}", flush=True)

    results: list[Result] = []
    if workers <= 1 or len(jobs) == 1:
        for ch, tier, seed, params in jobs:
            announce(ch, tier, seed)
            results.append(execute(ch, tier, seed, params, out_dir, inplace, verbose))
            report(results[-1])
        return results
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = []
        for ch, tier, seed, params in jobs:
            announce(ch, tier, seed)
            futures.append(pool.submit(execute, ch, tier, seed, params, out_dir, inplace))
        for fut in futures:
            results.append(fut.result())
            report(results[-1])
    return results
