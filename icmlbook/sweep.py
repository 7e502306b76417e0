"""Chapters x seeds on Dask: the one engine behind ``icmlbook sweep`` and ``run --jobs``.

    df = icmlbook.sweep(["05", "16"], seeds=range(10))      # a tidy pandas DataFrame
    icmlbook sweep 5 16 --seeds 0-9 --out sweeps/            # the same from the shell
    icmlbook sweep --all --scheduler tcp://HOST:8786         # on an existing cluster

Each run is one papermill execution in a fresh kernel, submitted as one Dask task.
By default the runs go to an embedded ``LocalCluster`` (one worker process per core,
one thread each); ``scheduler=`` sends them to a running cluster instead (its workers
need this package installed and the repository at the same path, as on a shared
file system). Every finished run's record is written to ``OUT/records/`` at once,
so a killed worker or a Ctrl-C loses nothing that had finished, and ``resume=True``
skips the runs already recorded for the same chapter code, tier, seed and parameters.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icmlbook.chapters import Chapter
from icmlbook.results import split_of
from icmlbook.runner import Result, execute, run_key

COLUMNS = ["chapter", "slug", "seed", "split", "tier", "kind", "versus", "name", "value",
           "op", "threshold", "passed", "strength", "provenance", "strict", "strict_passed",
           "status", "seconds", "peak_mb", "code_hash"]
"""The tidy table: one row per chapter x seed x claim, check or finding (a run that
ended before any claim gives one row with kind "error")."""


@dataclass
class Job:
    chapter: Chapter
    tier: str
    seed: int
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return run_key(self.chapter.stem, self.tier, self.seed, self.params)


class Interrupted(Exception):
    """Ctrl-C during a batch: ``results`` holds the runs that had finished."""

    def __init__(self, results: list[Result]):
        super().__init__(f"interrupted after {len(results)} finished run(s)")
        self.results = results


# -- one run ------------------------------------------------------------------------------
def _execute(number: str, slug: str, part: str, root: str, tier: str, seed: int,
             params: dict[str, Any], out_dir: str, inplace: bool, verbose: bool) -> Result:
    """The task a worker runs: rebuild the chapter from plain fields, execute it."""
    chapter = Chapter(number, slug, part, Path(root))
    return execute(chapter, tier, seed, params, Path(out_dir), inplace=inplace, verbose=verbose)


def _args(job: Job, out_dir: Path, inplace: bool, verbose: bool) -> tuple:
    ch = job.chapter
    return (ch.number, ch.slug, ch.part, str(ch.root), job.tier, job.seed, dict(job.params),
            str(out_dir), inplace, verbose)


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


# -- many runs ----------------------------------------------------------------------------
def run_jobs(jobs: list[Job], out_dir: Path, *, workers: int = 1, scheduler: str | None = None,
             inplace: bool = False, verbose: bool = False, records_dir: Path | None = None,
             resume: bool = False, bar: bool | None = None) -> list[Result]:
    """Execute ``jobs`` and return their results in the order of ``jobs``.

    One worker and no scheduler: in this process, one after the other (``verbose``
    streams each chapter's output). Otherwise on Dask. ``records_dir`` gets each run's
    record as soon as it finishes; ``resume`` reuses the records there whose chapter
    code hash matches (a run that errored before its claims is run again). Ctrl-C
    raises :class:`Interrupted` carrying the finished runs.
    """
    out_dir = Path(out_dir)
    done: dict[int, Result] = {}
    if resume and records_dir is not None:
        old = load_records(records_dir)
        for i, job in enumerate(jobs):
            r = old.get(job.key)
            if r is not None and r.code_hash == job.chapter.code_hash and r.record:
                done[i] = r
        if done:
            print(f"[resume] {len(done)} of {len(jobs)} run(s) already recorded for this code",
                  flush=True)
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
                print(f"[start] {job.chapter.number} {job.chapter.slug} (tier {job.tier}, "
                      f"seed {job.seed})", flush=True)
                finished(i, _execute(*_args(job, out_dir, inplace, verbose)),
                         lambda s: print(s, flush=True))
        elif todo:
            _on_dask([(i, jobs[i]) for i in todo], out_dir, inplace, workers, scheduler, bar,
                     finished)
    except KeyboardInterrupt:
        raise Interrupted([done[i] for i in sorted(done)]) from None
    return [done[i] for i in range(len(jobs))]


def _on_dask(todo: list[tuple[int, Job]], out_dir: Path, inplace: bool, workers: int,
             scheduler: str | None, bar: bool | None, finished) -> None:
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
                    disable=(not sys.stderr.isatty()) if bar is None else not bar)
    say = progress.write if not progress.disable else (lambda s: print(s, flush=True))
    say(f"[dask] {len(todo)} run(s) on {where}")
    futures = {}
    try:
        for i, job in todo:
            fut = client.submit(_execute, *_args(job, out_dir, inplace, False), pure=False,
                                key=f"icmlbook-{job.key}-{time.time_ns()}")
            futures[fut] = i
        jobs = dict(todo)
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                result = fut.result()
            except Exception as exc:  # the worker died (KilledWorker) or the task could not run
                job = jobs[i]
                result = Result(job.chapter.number, job.chapter.slug, job.tier, job.seed,
                                dict(job.params), "", error=f"{type(exc).__name__}: {exc}",
                                code_hash=job.chapter.code_hash)
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
            f"{r.seconds:.1f}s, {r.counts()}{extra}")


# -- the tidy table -----------------------------------------------------------------------
def tidy(results: list[Result]) -> Any:
    """One row per chapter x seed x claim (see :data:`COLUMNS`), as a pandas DataFrame."""
    import pandas as pd

    rows = []
    for r in results:
        rec = r.record or {}
        base = {"chapter": r.chapter, "slug": r.slug, "seed": r.seed, "tier": r.tier,
                "split": split_of(r.seed),
                "status": r.verdict, "seconds": round(r.seconds, 2),
                "peak_mb": rec.get("peak_rss_mb"), "code_hash": r.code_hash}
        claims = rec.get("claims") or []
        if not claims:
            rows.append({**base, "kind": "error", "versus": None, "name": r.error, "value": None,
                         "op": None, "threshold": None, "passed": False})
        for c in claims:
            rows.append({**base, "kind": c.get("kind", "unsorted"), "versus": c.get("versus"),
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
    from icmlbook.chapters import list_chapters, resolve, validate
    from icmlbook.params import check_seed, check_tier

    check_tier(tier)
    book = list_chapters(root)
    chosen = book if chapters is None else [
        c if isinstance(c, Chapter) else resolve(c, book) for c in chapters]
    seeds = list(seeds)
    for s in seeds:
        check_seed(s)
    jobs = []
    for ch in chosen:
        values = validate(ch, {**(params or {}), "tier": tier, "seed": 0})
        values.pop("tier"), values.pop("seed")
        jobs += [Job(ch, tier, s, values) for s in seeds]
    out = Path(out)
    results = run_jobs(jobs, out / "notebooks", workers=workers or os.cpu_count() or 1,
                       scheduler=scheduler, records_dir=out / "records", resume=resume)
    df = tidy(results)
    write_tables(df, out)
    return df
