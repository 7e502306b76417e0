"""The batch engine behind ``icmlbook run``, ``sweep`` and ``bench``: plan chapter runs,
execute each with papermill in a fresh kernel (here, one after the other, or as Dask
tasks), keep their records, make the tidy table of a sweep and the bench report.

    jobs = plan(chapters, "default", range(10), {})           # validated, no kernel yet
    results = run_jobs(jobs, Path("runs"), workers=2)         # papermill, one kernel each
    df = sweep(["05", "16"], seeds=range(10))                 # the same, as a tidy DataFrame
"""
from __future__ import annotations

import ast
import copy
import hashlib
import json
import logging
import os
import platform
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

from icmlbook.chapters import Chapter, list_chapters, resolve, skip_iri_grammar
from icmlbook.results import split_of
from icmlbook.session import holding, read_record
from icmlbook.tiers import (NOTEBOOK_MB, RULES, ParameterError, check_seed, check_tier,
                            shown)

COLUMNS = ["chapter", "slug", "seed", "split", "tier", "kind", "versus", "name", "value",
           "op", "threshold", "passed", "strength", "provenance", "strict", "strict_passed",
           "status", "seconds", "peak_mb", "code_hash"]
"""The tidy table: one row per chapter x seed x claim, check or finding (a run that
ended before any claim gives one row with kind "error")."""


def run_key(stem: str, tier: str, seed: int, params: dict[str, Any]) -> str:
    """A file-name-safe name of one run: chapter, tier, seed and parameters (executed
    notebooks and records are named by it, so runs with other parameters never collide)."""
    extra = "".join(f".{k}={v}" for k, v in sorted(params.items()))
    return f"{stem}.{tier}.s{seed}{extra}".replace("/", "_").replace(" ", "")


NOISE_CELL_KEYS = ("papermill", "execution", "ExecuteTime", "collapsed", "scrolled")
# The kernel logs only critical errors: ipykernel otherwise warns on every start that local
# TCP is unencrypted, and logs "KeyboardInterrupt caught in kernel" at ERROR when nbclient
# interrupts an idle kernel on shutdown, which buries the runner's own progress lines.
# A cell's own errors reach the run as outputs, not through this log.
KERNEL_ARGS = ["--IPKernelApp.log_level=CRITICAL"]


@dataclass(frozen=True)
class Job:
    """One planned run: a chapter at a tier and seed with validated parameters."""

    chapter: Chapter
    tier: str
    seed: int
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return run_key(self.chapter.stem, self.tier, self.seed, self.params)

    def result(self, output: str, **kw: Any) -> Result:
        """This run's :class:`Result`, with no outcome yet (or the one in ``kw``)."""
        return Result(self.chapter.number, self.chapter.slug, self.tier, self.seed,
                      dict(self.params), output, code_hash=self.chapter.code_hash, **kw)


class Interrupted(Exception):
    """Ctrl-C during a batch: ``results`` holds the runs that had finished."""

    def __init__(self, results: list[Result]):
        super().__init__(f"interrupted after {len(results)} finished run(s)")
        self.results = results


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

    @property
    def claims(self) -> list[dict[str, Any]]:
        """The paper claims and checks of the run record (none without one)."""
        return (self.record or {}).get("claims") or []

    @property
    def verdict(self) -> str:
        """PASS, FAILED, RECORDED (smoke: failures recorded, not enforced) or ERROR (the run
        ended before its claims), read from the run record's status."""
        status = (self.record or {}).get("status")
        if not self.claims or (not self.ok and status == "passed"):
            return "ERROR"  # no claims, or a cell after the verdict failed
        return {"passed": "PASS", "failed": "FAILED", "recorded": "RECORDED"}.get(status, "ERROR")

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 2), "verdict": self.verdict}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Result:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


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


def execute(job: Job, out_dir: Path, inplace: bool = False, verbose: bool = False) -> Result:
    """Run one planned run headless with papermill (what a Dask worker is given); never
    raises for a failing chapter.

    ``verbose`` streams the chapter's printed output (its progress lines) as it runs."""
    skip_iri_grammar()
    import nbformat
    import papermill as pm

    os.environ["ICMLBOOK_HEADLESS"] = "1"
    chapter, defaults = job.chapter, job.chapter.parameters
    given = {"tier": job.tier, "seed": job.seed, **job.params}
    # inject only what differs from the parameters cell (a default run injects nothing)
    inject = {k: v for k, v in given.items() if k not in defaults or defaults[k].default != v}
    out_path = chapter.ipynb if inplace else Path(out_dir) / f"{job.key}.ipynb"
    result = job.result(str(out_path))
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
                                execution_timeout=RULES[job.tier].cell_timeout_s)
            result.ok = True
        except pm.PapermillExecutionError as exc:
            where = f"cell {exc.exec_count}" if getattr(exc, "exec_count", None) else "a cell"
            result.error = f"{where}: {exc.ename}: {exc.evalue}".strip()
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


def plan(chapters: list[Chapter], tier: str, seeds: Any, overrides: dict[str, Any]
         ) -> list[Job]:
    """The runs of ``chapters`` x ``seeds`` at ``tier``, each chapter's ``overrides``
    checked in-process first (names, and values through the chapter's validate cell):
    bad input raises :class:`ParameterError` naming the chapter, before any kernel."""
    check_tier(tier)
    seeds = list(seeds)
    for s in seeds:
        check_seed(s)
    jobs = []
    for ch in chapters:
        values = validate(ch, {**overrides, "tier": tier, "seed": seeds[0] if seeds else 0})
        values.pop("tier"), values.pop("seed")
        jobs += [Job(ch, tier, s, values) for s in seeds]
    return jobs


def save_record(result: Result, records_dir: Path) -> Path:
    """Write one finished run to ``records_dir/<run key>.json`` (atomically)."""
    records_dir.mkdir(parents=True, exist_ok=True)
    path = records_dir / f"{result.key}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.as_json(), indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def load_records(records_dir: Path) -> dict[str, Result]:
    """Finished runs in ``records_dir`` by run key (unreadable files are skipped)."""
    found = {}
    for path in sorted(Path(records_dir).glob("*.json")):
        try:
            found[path.stem] = Result.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError):
            continue
    return found


# -- parameters from the command line, checked before any kernel starts ----------------
BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def coerce(raw: Any, default: Any) -> Any:
    """A command-line value as the type of the parameter's default, where that is clear."""
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    if isinstance(default, bool):
        return BOOLEANS.get(text.lower(), raw)
    if isinstance(default, str):
        return raw
    if isinstance(default, float) and text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return float(text)  # so that the check says "must be finite", not "a number"
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def validate(chapter: Chapter, overrides: dict[str, Any]) -> dict[str, Any]:
    """Check override names and values against the chapter (its ``validate`` cell, run
    in-process); return the coerced overrides, or raise :class:`ParameterError` naming
    the chapter."""
    params = chapter.parameters
    name = f"chapter {chapter.number} ({chapter.slug})"
    unknown = [n for n in overrides if n not in params]
    if unknown:
        raise ParameterError(f"{name} has no parameter {', '.join(map(shown, unknown))}; "
                             f"its parameters are: {', '.join(params)}")
    values = {n: coerce(v, params[n].default) for n, v in overrides.items()}
    namespace: dict[str, Any] = {}
    exec(compile(chapter.cell("parameters") or "", f"<{chapter.stem} parameters>", "exec"),
         namespace)
    namespace.update(values)
    check = chapter.cell("validate")
    if check is not None:
        try:
            exec(compile(check, f"<{chapter.stem} validate>", "exec"), namespace)
        except ParameterError as exc:
            raise ParameterError(f"{name}: {exc}") from exc
        except Exception as exc:  # a check that trips over an odd value: still bad input
            given = ", ".join(f"{n}={shown(v)}" for n, v in values.items()) or "the defaults"
            raise ParameterError(f"{name} cannot check {given}: {type(exc).__name__}: "
                                 f"{exc}") from exc
    return values


# -- many runs ----------------------------------------------------------------------------
def run_jobs(jobs: list[Job], out_dir: Path, *, workers: int = 1, scheduler: str | None = None,
             inplace: bool = False, verbose: bool = False, records_dir: Path | None = None,
             resume: bool = False) -> list[Result]:
    """Execute ``jobs`` (one worker and no scheduler: here, one after the other; else on
    Dask) and return their results in order. ``records_dir`` gets each run's record as
    soon as it finishes, so a killed worker or Ctrl-C (:class:`Interrupted`) loses no
    finished run; ``resume`` reuses those with the chapter's current code hash."""
    out_dir = Path(out_dir)
    done: dict[int, Result] = {}
    say = partial(print, flush=True)
    if resume and records_dir is not None:
        old = load_records(records_dir)
        for i, job in enumerate(jobs):
            r = old.get(job.key)
            if r is not None and r.code_hash == job.chapter.code_hash and r.record:
                done[i] = r
        if done:
            say(f"[resume] {len(done)} of {len(jobs)} run(s) already recorded for this code")
    todo = [i for i in range(len(jobs)) if i not in done]

    def finished(i: int, r: Result, say) -> None:
        done[i] = r
        if records_dir is not None:
            save_record(r, records_dir)
        say(describe(r))

    try:
        if todo and scheduler is None and min(workers, len(todo)) <= 1:
            for i in todo:
                job = jobs[i]
                say(f"[start] {job.chapter.number} {job.chapter.slug} (tier {job.tier}, "
                    f"seed {job.seed})")
                finished(i, execute(job, out_dir, inplace, verbose), say)
        elif todo:
            _on_dask([(i, jobs[i]) for i in todo], out_dir, inplace, workers, scheduler, finished)
    except KeyboardInterrupt:
        raise Interrupted([done[i] for i in sorted(done)]) from None
    return [done[i] for i in range(len(jobs))]


def _on_dask(todo: list[tuple[int, Job]], out_dir: Path, inplace: bool, workers: int,
             scheduler: str | None, finished) -> None:
    from distributed import Client, LocalCluster, as_completed
    from tqdm.auto import tqdm

    cluster = None
    if scheduler is None:
        n = max(1, min(workers, len(todo)))
        # A terminal's Ctrl-C reaches every process of the foreground group. The worker
        # processes inherit an ignored SIGINT (Python keeps it ignored), so only this
        # process sees it: it stops the cluster and keeps the finished runs.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.ERROR)
        finally:  # a handler not set from Python reads as None: put Python's default
            signal.signal(signal.SIGINT,
                          signal.default_int_handler if previous is None else previous)
        client = Client(cluster)
        where = f"an embedded LocalCluster of {n} worker(s)"
    else:
        client = Client(scheduler, timeout=30)
        where = f"the cluster at {scheduler}"
    progress = tqdm(total=len(todo), desc="runs", unit="run", file=sys.stderr,
                    disable=not sys.stderr.isatty())
    say = progress.write if not progress.disable else partial(print, flush=True)
    say(f"[dask] {len(todo)} run(s) on {where}")
    futures = {}
    try:
        for i, job in todo:
            fut = client.submit(execute, job, out_dir, inplace, False, pure=False,
                                key=f"icmlbook-{job.key}-{time.time_ns()}")
            futures[fut] = i
        jobs = dict(todo)
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                result = fut.result()
            except Exception as exc:  # the worker died (KilledWorker) or the task could not run
                result = jobs[i].result("", error=f"{type(exc).__name__}: {exc}")
            finished(i, result, say)
            progress.update(1)
    finally:
        progress.close()
        for fut in futures:
            fut.cancel()
        client.close()
        if cluster is not None:
            cluster.close()


def describe(r: Result) -> str:
    """One line for a finished run: verdict, chapter, seed, time, paper claims, checks."""
    extra = f": {r.error}" if r.error else ""
    return (f"[{r.verdict.lower()}] {r.chapter} {r.slug} (tier {r.tier}, seed {r.seed}) in "
            f"{r.seconds:.1f}s, {holding(r.claims)}{extra}")


# -- the tidy table -----------------------------------------------------------------------
def tidy(results: list[Result]) -> Any:
    """One row per chapter x seed x claim (see :data:`COLUMNS`), as a pandas DataFrame."""
    import pandas as pd

    rows = []
    for r in results:
        rec = r.record or {}
        base = {"chapter": r.chapter, "slug": r.slug, "seed": r.seed, "tier": r.tier,
                "split": split_of(r.seed), "status": r.verdict, "seconds": round(r.seconds, 2),
                "peak_mb": rec.get("peak_rss_mb"), "code_hash": r.code_hash}
        if not r.claims:
            rows.append({**base, "kind": "error", "versus": None, "name": r.error, "value": None,
                         "op": None, "threshold": None, "passed": False})
        for c in r.claims:
            rows.append({**base, "kind": c["kind"], "versus": c.get("versus"),
                         "name": c["name"], "value": c["value"], "op": c["op"],
                         "threshold": c["threshold"], "passed": bool(c["passed"]),
                         "strength": c.get("strength"), "provenance": c.get("provenance"),
                         "strict": c.get("strict"), "strict_passed": c.get("strict_passed")})
        for f in rec.get("findings") or []:
            rows.append({**base, "kind": "finding", "versus": None, "name": f["name"],
                         "value": f["value"], "op": f["op"], "threshold": f["reference"],
                         "passed": bool(f["holds"])})
    return pd.DataFrame(rows, columns=COLUMNS)


def write_tables(df: Any, out_dir: Path) -> list[Path]:
    """``sweep.parquet`` and ``sweep.csv`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "sweep.parquet", out_dir / "sweep.csv"]
    df.to_parquet(paths[0], index=False)
    df.to_csv(paths[1], index=False)
    return paths


# -- the Python API -----------------------------------------------------------------------
def sweep(chapters: list[str | Chapter] | None = None, seeds: Any = range(10),
          tier: str = "default", params: dict[str, Any] | None = None, *,
          out: str | Path = "sweeps", workers: int | None = None, scheduler: str | None = None,
          resume: bool = False, root: str | Path | None = None) -> Any:
    """Run ``chapters`` (numbers, slugs or :class:`Chapter`; None: all) over ``seeds`` and
    return the tidy DataFrame. Parameters are validated first, as by the CLI."""
    book = list_chapters(root)
    chosen = book if chapters is None else [
        c if isinstance(c, Chapter) else resolve(c, book) for c in chapters]
    jobs = plan(chosen, tier, seeds, params or {})
    out = Path(out)
    results = run_jobs(jobs, out / "notebooks", workers=workers or os.cpu_count() or 1,
                       scheduler=scheduler, records_dir=out / "records", resume=resume)
    df = tidy(results)
    write_tables(df, out)
    return df


# -- the bench report ----------------------------------------------------------------------
def bench(chapters: list[Chapter], tiers: list[str], report: Path) -> int:
    """``icmlbook bench``: wall time, peak memory and notebook size against the budgets,
    written to ``report`` (Markdown); 1 if a run failed or is over a budget. Chapters run
    one at a time: on 2 cores a parallel job slows a chapter several-fold."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="icmlbook-bench-") as tmp:
        for ch in chapters:
            for tier in tiers:
                print(f"[bench] {ch.number} {ch.slug} at {tier} ...", flush=True)
                r = execute(Job(ch, tier, 0), Path(tmp))
                rec = r.record or {}
                size = Path(r.output).stat().st_size / 2**20 if Path(r.output).exists() else 0.0
                committed = ch.ipynb.stat().st_size / 2**20 if ch.ipynb.exists() else 0.0
                rows.append({
                    "chapter": f"{ch.number} {ch.slug}", "tier": tier, "ok": r.ok,
                    "seconds": r.seconds, "budget": RULES[tier].budget_s,
                    "peak_mb": rec.get("peak_rss_mb"), "widget_s": rec.get("widget_seconds"),
                    "nb_mb": size, "committed_mb": committed,
                    "claims": holding(r.claims) or "-", "error": r.error,
                })
    lines = _bench_table(rows)
    print("\n".join(lines))
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"\nwritten to {report}")
    return int(any(not r["ok"] or _over_budget(r) for r in rows))


def _over_budget(r: dict[str, Any]) -> bool:
    return bool((r["budget"] and r["seconds"] > r["budget"])
                or (r["peak_mb"] and RULES[r["tier"]].memory_mb
                    and r["peak_mb"] > RULES[r["tier"]].memory_mb)
                or r["committed_mb"] > NOTEBOOK_MB)


def _bench_table(rows: list[dict[str, Any]]) -> list[str]:
    limits = ", ".join(f"{t} <= {r.budget_s:g} s and {r.memory_mb:g} MB"
                       for t, r in RULES.items() if r.budget_s)
    head = (f"# icmlbook bench ({time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, "
            f"budgets: {limits}, notebook <= {NOTEBOOK_MB:g} MB)")
    lines = [head, "", "| chapter | tier | seconds | peak MB | slowest widget s | notebook MB "
             "| committed MB | claims | within budget |", "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        ok = "ERROR: " + (r["error"] or "") if not r["ok"] else ("no" if _over_budget(r) else "yes")
        peak = f"{r['peak_mb']:.0f}" if r["peak_mb"] else "?"
        widget = f"{r['widget_s']:.2f}" if r["widget_s"] is not None else "-"
        lines.append(f"| {r['chapter']} | {r['tier']} | {r['seconds']:.1f} | {peak} | {widget} "
                     f"| {r['nb_mb']:.2f} | {r['committed_mb']:.2f} | {r['claims']} | {ok} |")
    return lines
