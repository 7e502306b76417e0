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

from icmlbook.chapters import Chapter, skip_iri_grammar
from icmlbook.record import read_record
from icmlbook.tiers import RULES


def run_key(stem: str, tier: str, seed: int, params: dict[str, Any]) -> str:
    """A file-name-safe name of one run: chapter, tier, seed and parameters."""
    extra = "".join(f".{k}={v}" for k, v in sorted(params.items()))
    return f"{stem}.{tier}.s{seed}{extra}".replace("/", "_").replace(" ", "")

NOISE_CELL_KEYS = ("papermill", "execution", "ExecuteTime", "collapsed", "scrolled")
# The kernel logs only critical errors: ipykernel otherwise warns on every start that local
# TCP is unencrypted, and logs "KeyboardInterrupt caught in kernel" at ERROR when nbclient
# interrupts an idle kernel on shutdown, which buries the runner's own progress lines.
# A cell's own errors reach the run as outputs, not through this log.
KERNEL_ARGS = ["--IPKernelApp.log_level=CRITICAL"]


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
    code_hash: str = ""

    @property
    def key(self) -> str:
        return run_key(f"ch{self.chapter}_{self.slug}", self.tier, self.seed, self.params)

    def counts(self) -> str:
        """Passed/total per kind, e.g. "paper claims 3/3, checks 2/2"."""
        from icmlbook.session import SECTIONS

        claims = (self.record or {}).get("claims", [])
        parts = []
        for kind, label in SECTIONS.items():
            group = [c for c in claims if c.get("kind", "unsorted") == kind]
            if group:
                parts.append(f"{label} {sum(c['passed'] for c in group)}/{len(group)}")
        return ", ".join(parts) or "no claims"

    def kind_counts(self, kind: str) -> str:
        """"passed/total" of the claims of one kind ("" when there are none)."""
        group = [c for c in (self.record or {}).get("claims", [])
                 if c.get("kind", "unsorted") == kind]
        return f"{sum(c['passed'] for c in group)}/{len(group)}" if group else ""

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
        return "FAILED" if RULES[self.tier].enforce_claims else "RECORDED"

    def as_json(self) -> dict[str, Any]:
        return {"chapter": self.chapter, "slug": self.slug, "tier": self.tier, "seed": self.seed,
                "params": self.params, "output": self.output, "seconds": round(self.seconds, 2),
                "ok": self.ok, "verdict": self.verdict, "error": self.error,
                "code_hash": self.code_hash, "record": self.record}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Result:
        return cls(d["chapter"], d["slug"], d["tier"], d["seed"], d["params"], d["output"],
                   d["seconds"], d["ok"], d["error"], d["record"], d.get("code_hash", ""))


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
    skip_iri_grammar()
    import nbformat
    import papermill as pm

    os.environ["ICMLBOOK_HEADLESS"] = "1"
    defaults = chapter.parameters
    given = {"tier": tier, "seed": seed, **params}
    # inject only what differs from the parameters cell (a default run injects nothing)
    inject = {k: v for k, v in given.items() if k not in defaults or defaults[k].default != v}
    out_path = chapter.ipynb if inplace else Path(out_dir) / f"{chapter.stem}.{tier}.s{seed}.ipynb"
    result = Result(chapter.number, chapter.slug, tier, seed, dict(params), str(out_path),
                    code_hash=chapter.code_hash)
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
                                execution_timeout=RULES[tier].cell_timeout_s)
            result.ok = True
        except pm.PapermillExecutionError as exc:
            result.error = _describe(exc)
        except Exception as exc:  # kernel died, timeout, ...
            result.error = f"{type(exc).__name__}: {exc}"
        result.seconds = time.perf_counter() - t0
        if executed.exists():
            nb = nbformat.read(executed, as_version=4)
            result.record = read_record(nb)
            if result.error and not result.error.startswith("cell "):
                result.error = f"{running_cell(nb)}: {result.error.removeprefix('a cell: ')}"
            if inplace and result.ok:
                nbformat.write(clean(nb), out_path)
            else:
                if inplace:  # keep the committed notebook; put the failed run aside
                    out_path = Path(out_dir) / f"{chapter.stem}.failed.ipynb"
                    result.output = str(out_path)
                out_path.parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, out_path)
    return result


def running_cell(nb: Any) -> str:
    """The cell a run stopped in without an error of its own (the kernel died, a timeout):
    the last code cell papermill started (it stamps ``start_time`` on each cell it runs)."""
    number, last = 0, None
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        number += 1
        if cell.metadata.get("papermill", {}).get("start_time"):
            last = (number, cell)
    if last is None:
        return "a cell"
    first = next((ln.strip() for ln in last[1].source.splitlines() if ln.strip()), "")
    first = first if len(first) <= 60 else first[:57] + "..."
    return f"cell {last[0]} (`{first}`)"


def _describe(exc: Any) -> str:
    where = f"cell {exc.exec_count}" if getattr(exc, "exec_count", None) else "a cell"
    return f"{where}: {exc.ename}: {exc.evalue}".strip()


def run_many(jobs: list[tuple[Chapter, str, int, dict[str, Any]]], out_dir: Path, inplace: bool,
             workers: int = 1, verbose: bool = False) -> list[Result]:
    """Execute several chapters, ``workers`` kernels at a time (on Dask when more than
    one): a thin front of :func:`icmlbook.sweep.run_jobs`, the one engine."""
    from icmlbook.sweep import Job, run_jobs

    return run_jobs([Job(*j) for j in jobs], Path(out_dir), workers=workers, inplace=inplace,
                    verbose=verbose)
