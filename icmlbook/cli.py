"""The ``icmlbook`` command: list, run, sweep and benchmark chapters; write the report.

    icmlbook run 5 --tier smoke --seed 3 --json r.json
    icmlbook sweep 5 16 --seeds 0-9      # chapters x seeds on Dask, a tidy table

Bad input (unknown chapter, tier or parameter, a value the chapter rejects)
exits with status 2 before any kernel starts; a chapter that fails exits 1.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from icmlbook.chapters import book_root, is_book, list_chapters, resolve
from icmlbook.report import PAGE, render, write
from icmlbook.results import write_results, write_sidecar
from icmlbook.session import tally
from icmlbook.tiers import (CALIBRATION_SEEDS, COMMITTED_SEED, COMMITTED_TIER,
                            CONFIRMATION_SEEDS, SEED_MAX, TIERS, ParameterError, shown)


class UsageError(Exception):
    """Bad input: reported in one message, exit status 2 (as is a :class:`ParameterError`
    from :func:`icmlbook.batch.plan`)."""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, ParameterError) as exc:
        print(f"icmlbook: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before or after the runs (during them: see cmd_run)
        print("\nicmlbook: interrupted", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="icmlbook", description="ICML 2024, from scratch: "
                                "list, run and benchmark the book's chapters.")
    p.add_argument("--root", help="the repository (default: found from the working directory)")
    sub = p.add_subparsers(dest="command", required=True)

    ls = sub.add_parser("list", help="chapters with their parameters and defaults")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(func=cmd_list)

    run = sub.add_parser("run", help="execute chapters headless with papermill")
    _add_selection(run, runs=True)
    run.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    run.add_argument("--out", default="runs", help="folder for executed notebooks "
                     "(default: %(default)s)")
    run.add_argument("--inplace", action="store_true", help="write the outputs into "
                     "book/chNN_slug.ipynb (default tier, seed 0, no -p only)")
    run.add_argument("--jobs", type=int, default=1, help="kernels at once (default: 1)")
    run.add_argument("--json", metavar="FILE", help="write the collected records here")
    run.add_argument("-v", "--verbose", action="store_true", help="stream each chapter's "
                     "printed output (progress lines) while it runs (with --jobs 1)")
    run.set_defaults(func=cmd_run)

    sw = sub.add_parser("sweep", help="chapters x seeds on Dask: a tidy table of every claim")
    _add_selection(sw, runs=True)
    sw.add_argument("--seeds", default="0-9", help="e.g. 0-9, 3, 0,2,5-7 (default: %(default)s)")
    sw.add_argument("--workers", type=int, default=None, help="workers of the embedded "
                    "LocalCluster (default: one per core)")
    sw.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler, e.g. "
                    "tcp://HOST:8786, instead of the embedded cluster")
    sw.add_argument("--out", default="sweeps", help="folder for records/, notebooks/, "
                    "sweep.parquet and sweep.csv (default: %(default)s)")
    sw.add_argument("--json", metavar="FILE", help="also write the runs' records here")
    sw.add_argument("--resume", action="store_true", help="skip runs already recorded in "
                    "OUT/records for the same chapter code")
    sw.add_argument("--update-results", action="store_true", help="write results/chNN_slug.csv "
                    "(needs --seeds 0-9 or 0-19 at the default tier, no -p)")
    sw.set_defaults(func=cmd_sweep)

    rep = sub.add_parser("report", help="write the reproduction report page from results/")
    rep.add_argument("--check", action="store_true", help="exit 1 if the page is not current")
    rep.set_defaults(func=cmd_report)

    bench = sub.add_parser("bench", help="time chapters at smoke and default against budgets")
    _add_selection(bench)
    bench.add_argument("--tiers", default="smoke,default", help="default: %(default)s")
    bench.add_argument("--out", default="bench.md", help="markdown report (default: %(default)s)")
    bench.set_defaults(func=cmd_bench)
    return p


def _add_selection(p: argparse.ArgumentParser, runs: bool = False) -> None:
    """The chapters to act on; with ``runs``, the runs' tier and parameters too."""
    p.add_argument("chapters", nargs="*", metavar="CH", help="number (5, 05) or slug")
    p.add_argument("--all", action="store_true", help="every chapter in _toc.yml")
    if runs:
        p.add_argument("--tier", default="default", choices=TIERS, help="default: %(default)s")
        p.add_argument("-p", "--param", nargs=2, action="append", default=[],
                       metavar=("NAME", "VALUE"), help="set a chapter parameter (repeatable)")


def _root(args: argparse.Namespace) -> Path:
    """The book: ``--root`` exactly (never a folder above it), else found as usual."""
    if args.root is not None:
        if not is_book(Path(args.root)):
            raise UsageError(f"--root {shown(args.root)}: not the book (a folder with "
                             "_toc.yml and book/)")
        return Path(args.root).resolve()
    try:
        return book_root()
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from exc


def _select(args: argparse.Namespace) -> list[Any]:
    chapters = list_chapters(_root(args))
    if args.all and args.chapters:
        raise UsageError("name chapters or use --all, not both")
    if args.all:
        return chapters
    if not args.chapters:
        raise UsageError("name at least one chapter (e.g. 5 or conformal_betting) or use --all")
    try:
        return [resolve(name, chapters) for name in args.chapters]
    except LookupError as exc:
        raise UsageError(str(exc).strip("'\"")) from exc


def cmd_list(args: argparse.Namespace) -> int:
    chapters = list_chapters(_root(args))
    rows = [{"number": c.number, "slug": c.slug, "title": c.title, "part": c.part,
             "parameters": {p.name: {"default": p.default, "help": p.comment}
                            for p in c.parameters.values()}} for c in chapters]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    part = None
    for r in rows:
        if r["part"] != part:
            part = r["part"]
            print(f"\n{part}")
        print(f"  {r['number']}  {r['slug']:<32} {r['title']}")
        for name, p in r["parameters"].items():
            print(f"        {name + ' = ' + repr(p['default']):<28} # {p['help']}")
    return 0


def _overrides(pairs: list[list[str]], seed_flag: str) -> dict[str, str]:
    """``-p NAME VALUE`` pairs as a dict: each name once; tier and seed have own flags."""
    own = {"tier": "--tier", "seed": seed_flag}
    values: dict[str, str] = {}
    for name, value in pairs:
        if name in own:
            raise UsageError(f"-p {name}: use {own[name]} to set the {name}")
        if name in values:
            raise UsageError(f"-p {shown(name)} is given twice ({shown(values[name])} and "
                             f"{shown(value)}); give each parameter once")
        values[name] = value
    return values


def _writable(path: str | None, flag: str, folder: bool = False) -> None:
    """``path`` can be written: a folder (made if missing) or a file (new or existing) in
    an existing folder. Checked before any kernel starts, so no finished run is lost."""
    if path is None:
        return
    p = Path(path)
    try:
        if folder:
            if not path or (p.exists() and not p.is_dir()):
                raise UsageError(f"{flag} {shown(path)}: needs a folder")
            p.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=p).close()
            return
        if not path or p.is_dir() or not p.parent.is_dir():
            raise UsageError(f"{flag} {shown(path)}: needs a file in an existing folder")
        existed = p.exists()
        open(p, "a", encoding="utf-8").close()
        if not existed:
            p.unlink()
    except OSError as exc:
        raise UsageError(f"{flag} {shown(path)}: cannot write there ({exc.strerror})") from None


def _workers(asked: int, runs: int, flag: str) -> int:
    """At most one worker per run; a note when more are asked for than there are cores."""
    cores = os.cpu_count() or 1
    n = min(asked, runs)
    if n > cores:
        print(f"note: {flag} {n} kernels at once on {cores} core(s); each will run slower",
              file=sys.stderr)
    return n


def parse_seeds(spec: str) -> list[int]:
    """``0-9``, ``3``, ``0,2,5-7`` -> sorted distinct seeds (UsageError otherwise)."""
    seeds: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a, b = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise UsageError(f"--seeds: {shown(part)} is not a seed or a range like 0-9") from None
        if not (0 <= a <= b <= SEED_MAX) or b - a > 100000:
            raise UsageError(f"--seeds: {shown(part)} is not a range of seeds in [0, 2**31)")
        seeds.update(range(a, b + 1))
    return sorted(seeds)


def _execute(jobs: list[Any], out_dir: Path, stopped: str, **kw: Any) -> tuple[list[Any], int]:
    """Run the jobs: (results, 0), or after Ctrl-C (the finished runs, 130), saying
    ``stopped`` about them."""
    from icmlbook.batch import Interrupted, run_jobs

    try:
        return run_jobs(jobs, out_dir, **kw), 0
    except Interrupted as exc:
        print(f"\ninterrupted: {len(exc.results)} {stopped}", file=sys.stderr)
        return exc.results, 130


def cmd_run(args: argparse.Namespace) -> int:
    from icmlbook.batch import plan

    chapters = _select(args)
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if not 0 <= args.seed <= SEED_MAX:
        raise UsageError(f"--seed must be an integer in [0, {SEED_MAX}]; got {shown(args.seed)}")
    overrides = _overrides(args.param, "--seed")
    if args.inplace and (args.tier != COMMITTED_TIER or args.seed != COMMITTED_SEED or overrides):
        raise UsageError("--inplace stores the committed outputs: default tier, seed 0, "
                         "no -p (use --out for other runs)")
    jobs = plan(chapters, args.tier, [args.seed], overrides)
    _writable(args.out, "--out", folder=True)
    _writable(args.json, "--json")
    results, status = _execute(jobs, Path(args.out), "run(s) had finished",
                               workers=_workers(args.jobs, len(jobs), "--jobs"),
                               inplace=args.inplace, verbose=args.verbose)
    _table(results)
    if args.json:
        Path(args.json).write_text(json.dumps([r.as_json() for r in results], indent=2) + "\n")
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"\nchapter {r.chapter} ({r.slug}) failed in {r.error}\n  "
              f"executed notebook: {r.output}", file=sys.stderr)
    return status or (1 if failed else 0)


def _table(results: list[Any]) -> None:
    print(f"\n{'chapter':<34} {'tier':<8} {'seed':>4} {'seconds':>8} {'paper':>6} "
          f"{'checks':>6}  verdict")
    for r in results:
        print(f"{r.chapter + ' ' + r.slug:<34} {r.tier:<8} {r.seed:>4} {r.seconds:>8.1f} "
              f"{tally(r.claims, 'paper') or '-':>6} {tally(r.claims, 'check') or '-':>6}  "
              f"{r.verdict}")


def cmd_sweep(args: argparse.Namespace) -> int:
    from icmlbook.batch import plan, tidy, write_tables

    chapters = _select(args)
    seeds = parse_seeds(args.seeds)
    overrides = _overrides(args.param, "--seeds")
    if args.workers is not None and args.workers < 1:
        raise UsageError("--workers must be at least 1")
    committed = [list(CALIBRATION_SEEDS), list(CALIBRATION_SEEDS + CONFIRMATION_SEEDS)]
    if args.update_results and (seeds not in committed or args.tier != COMMITTED_TIER
                                or overrides):
        raise UsageError("--update-results writes the committed results: --seeds 0-9 "
                         "(calibration) or 0-19 (with confirmation), --tier default, no -p")
    jobs = plan(chapters, args.tier, seeds, overrides)
    _writable(args.out, "--out", folder=True)
    _writable(args.json, "--json")
    out = Path(args.out)
    workers = _workers(args.workers or os.cpu_count() or 1, len(jobs), "--workers")
    try:
        results, status = _execute(jobs, out / "notebooks", f"finished run(s) are in "
                                   f"{out / 'records'}; --resume continues", workers=workers,
                                   scheduler=args.scheduler, records_dir=out / "records",
                                   resume=args.resume)
    except OSError as exc:  # e.g. no scheduler at --scheduler
        raise UsageError(f"cannot reach the Dask scheduler {args.scheduler}: {exc}") from exc
    df = tidy(results)
    paths = write_tables(df, out)
    _table(results)
    print(f"\n{len(df)} rows ({len(results)} runs) in " + " and ".join(map(str, paths)))
    if args.json:
        Path(args.json).write_text(json.dumps([r.as_json() for r in results], indent=2) + "\n")
    if args.update_results and status == 0:
        for ch in chapters:
            try:
                print(f"results: {write_results(ch, df)}")
                first = min((r for r in results if r.chapter == ch.number), key=lambda r: r.seed)
                write_sidecar(ch, first.record or {})
            except ValueError as exc:
                print(f"results: {exc}", file=sys.stderr)
                status = 1
    return status or int(any(not r.ok for r in results))


def cmd_report(args: argparse.Namespace) -> int:
    root = _root(args)
    if args.check:
        page = root / PAGE
        current = page.exists() and page.read_text(encoding="utf-8") == render(root)
        print(f"{PAGE}: {'current' if current else 'NOT current: run `icmlbook report`'}")
        return 0 if current else 1
    print(f"written {write(root)}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from icmlbook.batch import bench

    chapters = _select(args)
    tiers = [t.strip() for t in args.tiers.split(",") if t.strip()]
    bad = [t for t in tiers if t not in TIERS]
    if bad:
        raise UsageError(f"--tiers: unknown tier {shown(bad[0])}; tiers are {', '.join(TIERS)}")
    if not tiers:
        raise UsageError(f"--tiers: name at least one tier of {', '.join(TIERS)}")
    _writable(args.out, "--out")
    return bench(chapters, tiers, Path(args.out))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
