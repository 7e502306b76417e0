"""The ``icmlbook`` command: list, run and benchmark chapters.

    icmlbook list
    icmlbook run 5 --tier smoke --seed 3 --json r.json
    icmlbook run --all --jobs 2 --out runs/
    icmlbook run 05 --inplace            # re-execute the committed notebook
    icmlbook bench --all --out bench.md

Bad input (unknown chapter, tier or parameter, a value the chapter rejects)
exits with status 2 before any kernel starts; a chapter that fails exits 1.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from icmlbook.tiers import TIERS


class UsageError(Exception):
    """Bad input: reported in one message, exit status 2."""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"icmlbook: error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="icmlbook", description="ICML 2024, from scratch: "
                                "list, run and benchmark the book's chapters.")
    p.add_argument("--root", help="the repository (default: found from the working directory)")
    sub = p.add_subparsers(dest="command", required=True)

    ls = sub.add_parser("list", help="chapters with their parameters and defaults")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(func=cmd_list)

    run = sub.add_parser("run", help="execute chapters headless with papermill")
    _add_selection(run)
    run.add_argument("--tier", default="default", choices=TIERS, help="default: %(default)s")
    run.add_argument("--seed", type=int, default=0, help="default: %(default)s")
    run.add_argument("-p", "--param", nargs=2, action="append", default=[],
                     metavar=("NAME", "VALUE"), help="set a chapter parameter (repeatable)")
    run.add_argument("--out", default="runs", help="folder for executed notebooks "
                     "(default: %(default)s)")
    run.add_argument("--inplace", action="store_true", help="write the outputs into "
                     "book/chNN_slug.ipynb (default tier, seed 0, no -p only)")
    run.add_argument("--jobs", type=int, default=1, help="kernels at once (default: 1)")
    run.add_argument("--json", metavar="FILE", help="write the collected records here")
    run.add_argument("-v", "--verbose", action="store_true", help="stream each chapter's "
                     "printed output (progress lines) while it runs (with --jobs 1)")
    run.set_defaults(func=cmd_run)

    bench = sub.add_parser("bench", help="time chapters at smoke and default against budgets")
    _add_selection(bench)
    bench.add_argument("--tiers", default="smoke,default", help="default: %(default)s")
    bench.add_argument("--out", default="bench.md", help="markdown report (default: %(default)s)")
    bench.set_defaults(func=cmd_bench)
    return p


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("chapters", nargs="*", metavar="CH", help="number (5, 05) or slug")
    p.add_argument("--all", action="store_true", help="every chapter in _toc.yml")


def _select(args: argparse.Namespace) -> list[Any]:
    from icmlbook.chapters import book_root, list_chapters, resolve

    try:
        chapters = list_chapters(book_root(args.root))
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from exc
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
    from icmlbook.chapters import book_root, list_chapters

    chapters = list_chapters(book_root(args.root))
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


def cmd_run(args: argparse.Namespace) -> int:
    from icmlbook.chapters import validate
    from icmlbook.params import ParameterError
    from icmlbook.runner import run_many

    chapters = _select(args)
    if args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.seed < 0:
        raise UsageError(f"--seed must be a non-negative integer; got {args.seed}")
    overrides = dict(args.param)
    if args.inplace and (args.tier != "default" or args.seed != 0 or overrides):
        raise UsageError("--inplace stores the committed outputs: default tier, seed 0, "
                         "no -p (use --out for other runs)")
    jobs = []
    for ch in chapters:
        try:
            params = validate(ch, {**overrides, "tier": args.tier, "seed": args.seed})
        except ParameterError as exc:
            msg = str(exc)
            prefix = "" if msg.startswith("chapter ") else f"chapter {ch.number} ({ch.slug}): "
            raise UsageError(prefix + msg) from exc
        params.pop("tier"), params.pop("seed")
        jobs.append((ch, args.tier, args.seed, params))
    out = Path(args.out)
    results = run_many(jobs, out, args.inplace, workers=args.jobs, verbose=args.verbose)
    _table(results)
    if args.json:
        Path(args.json).write_text(json.dumps([r.as_json() for r in results], indent=2) + "\n")
    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"\nchapter {r.chapter} ({r.slug}) failed in {r.error}\n  "
              f"executed notebook: {r.output}", file=sys.stderr)
    return 1 if failed else 0


def _table(results: list[Any]) -> None:
    print(f"\n{'chapter':<34} {'tier':<8} {'seed':>4} {'seconds':>8} {'claims':>7}  verdict")
    for r in results:
        passed, total = r.claims
        print(f"{r.chapter + ' ' + r.slug:<34} {r.tier:<8} {r.seed:>4} {r.seconds:>8.1f} "
              f"{f'{passed}/{total}':>7}  {r.verdict}")


def cmd_bench(args: argparse.Namespace) -> int:
    from icmlbook.bench import bench

    chapters = _select(args)
    tiers = [t.strip() for t in args.tiers.split(",") if t.strip()]
    bad = [t for t in tiers if t not in TIERS]
    if bad:
        raise UsageError(f"unknown tier {bad[0]!r}; tiers are {', '.join(TIERS)}")
    return bench(chapters, tiers, Path(args.out))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
