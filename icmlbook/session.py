"""A chapter's run: tier config, seeding, claim checks and the run record (its format,
and its reader :func:`read_record`); timing arms fairly and the digits, which several
chapters' experiments share.

    run = icmlbook.start("05_conformal_betting", tier=tier, seed=seed, params={...})
    cfg = run.pick(smoke=dict(T=3000), default=dict(T=6000))
    ...
    run.claim("validity at every scale", gap, "<=", C_GAP, "KT-ACI's miscoverage ...",
              versus="ablation", against="the same bettor with a fixed stake")   # paper claim
    run.check("wealth identity (Eq. 5)", err, "<=", C_IDENTITY, "W_T = eps + sum c_t s_t")
    run.finding("KT vs tuned OGD, strict", ratio, "<=", 1.0, paper="...", shows="...")
    run.headline("validity at every scale", "Thm. 1, Fig. 2", claims=[...], findings=[...])
    run.verdict()      # the verdict table; raises ClaimFailed at default/full
    run.finish()       # embeds the machine-readable record in the notebook
"""
from __future__ import annotations

import json
import math
import operator
import resource
import sys
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from icmlbook.plot import sketch_figures
from icmlbook.tiers import check_seed, check_tier, configure_torch, pick, rules, seed_everything
from icmlbook.verdicts import (PROVENANCE, STRENGTH, Finding, Headline, paper_verdict,
                               verdict_lines)

RECORD_MIME = "application/vnd.icmlbook.record+json"
RECORD_VERSION = 2
"""2: findings, headlines and the paper's verdict; claims carry strength and provenance."""

KINDS = ("paper", "check")
"""paper: what the paper says its method does, isolating an ingredient or against a
baseline; check: identities, closed forms, premises, counts."""
SECTIONS = {"paper": "paper claims", "check": "checks"}


_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}


def _holds(what: str, value: float, op: str, threshold: float) -> bool:
    """``value op threshold``, where NaN and infinities never hold; a ValueError names
    ``what`` for an unknown ``op``."""
    if op not in _OPS:
        raise ValueError(f"{what}: op must be one of {list(_OPS)}; got {op!r}")
    return bool(math.isfinite(value) and _OPS[op](value, threshold))


class ClaimFailed(AssertionError):
    """One or more claim checks failed at a tier where claims are enforced."""


VERSUS = ("ablation", "baseline")
"""What a paper claim isolates: the key ingredient against its ablation, or the method
against the strongest fair baseline."""


@dataclass
class Claim:
    name: str
    statement: str
    value: float
    op: str
    threshold: float
    passed: bool
    kind: str = "paper"
    versus: str | None = None
    against: str | None = None
    strength: str | None = None  # see icmlbook.verdicts.STRENGTH (paper claims only)
    provenance: str | None = None  # see icmlbook.verdicts.PROVENANCE
    strict: float | None = None  # threshold of the strict (superiority) version
    strict_passed: bool | None = None


class Session:
    """State of one chapter run. Create it with :func:`start`."""

    def __init__(self, chapter: str, tier: str, seed: int, params: dict[str, Any] | None = None,
                 threads: int = 1, torch: bool = True):
        check_tier(tier)
        check_seed(seed)
        self.chapter, self.tier, self.seed = chapter, tier, seed
        self.params = dict(params or {})
        self.claims: list[Claim] = []
        self.findings: list[Finding] = []
        self.headlines: list[Headline] = []
        self.metrics: dict[str, Any] = {}
        self.widget_seconds: float | None = None
        self._t0 = time.perf_counter()
        seed_everything(seed, torch=torch)
        self.device = configure_torch(tier, threads) if torch else "cpu"
        if rules(tier).sketch_figures:
            sketch_figures()

    @property
    def enforced(self) -> bool:
        """Whether failed claims raise (default and full) or are only recorded (smoke)."""
        return rules(self.tier).enforce_claims

    def pick(self, **per_tier: dict[str, Any]) -> SimpleNamespace:
        """This tier's config; see :func:`icmlbook.tiers.pick`."""
        return pick(self.tier, **per_tier)

    # -- named random streams -------------------------------------------------
    def stream_seed(self, name: str) -> int:
        """A 63-bit seed for the random stream ``name`` of this chapter and seed.

        Derived with NumPy's ``SeedSequence`` from (seed, chapter, name), so streams of
        one run are independent of each other and of every other run's streams (run s's
        "data" stream is not run s+1's "init" stream, as ``seed + 1`` offsets were)."""
        words = [self.seed, zlib.crc32(self.chapter.encode()), zlib.crc32(name.encode())]
        import numpy as np

        return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> 1)

    def rng(self, name: str):
        """A NumPy ``Generator`` for the named stream (a fresh one on every call)."""
        import numpy as np

        return np.random.default_rng(self.stream_seed(name))

    def generator(self, name: str, device: str | None = None):
        """A torch ``Generator`` for the named stream (on ``device``, default CPU)."""
        import torch

        return torch.Generator(device=device or "cpu").manual_seed(self.stream_seed(name))

    def reseed(self, name: str) -> None:
        """Reseed Python's, NumPy's and torch's global generators from the named stream:
        for code that draws from the global generators (a module's weight init)."""
        seed_everything(self.stream_seed(name) % 2**32, torch="torch" in sys.modules)

    # -- claims ---------------------------------------------------------------
    def claim(self, name: str, value: float, op: str, threshold: float, statement: str,
              *, versus: str | None = None, against: str | None = None,
              strength: str | None = None, provenance: str | None = None,
              strict: float | None = None, digits: int = 4) -> bool:
        """A paper claim ``value op threshold``: what the paper says its method does,
        isolating something (``versus``, one of :data:`VERSUS`; ``against`` names the
        ablation or baseline). Prints the measurement; returns whether it holds.

        ``strength`` and ``provenance`` grade it (:mod:`icmlbook.verdicts`). A claim weaker
        than superiority gives ``strict``, the threshold of its superiority version (1.0
        for a ratio, 0.0 for a difference), whose pass is recorded, never enforced."""
        if versus not in VERSUS or not against:
            raise ValueError(f"claim {name!r}: versus must be one of {list(VERSUS)} and "
                             f"against must name the ablation or baseline")
        if strength is not None and strength not in STRENGTH:
            raise ValueError(f"claim {name!r}: strength must be one of {list(STRENGTH)}")
        if provenance is not None and provenance not in PROVENANCE:
            raise ValueError(f"claim {name!r}: provenance must be one of {list(PROVENANCE)}")
        if strength not in (None, "superiority") and strict is None:
            raise ValueError(f"claim {name!r}: a {strength} claim needs strict=, the "
                             "threshold of its superiority version")
        c = Claim(name, statement, float(value), op, float(threshold), False, "paper", versus,
                  against, strength, provenance, None if strict is None else float(strict))
        if c.strict is not None:
            c.strict_passed = _holds(f"claim {name!r}", c.value, op, c.strict)
        return self._declare(c, digits)

    def finding(self, name: str, value: float, op: str, reference: float, *, paper: str,
                shows: str, digits: int = 4) -> bool:
        """A finding: what the paper states and this book measures without claiming it (it
        did not reproduce, is a tie, depends on the budget). ``value op reference`` is the
        paper's statement in its own direction, ``paper`` quotes it, ``shows`` says what
        the measurement shows. Recorded, never enforced; returns whether the paper's
        direction held on this run."""
        if any(f.name == name for f in self.findings) or any(c.name == name for c in self.claims):
            raise ValueError(f"finding {name!r} declared twice (or also a claim)")
        value = float(value)
        holds = _holds(f"finding {name!r}", value, op, float(reference))
        self.findings.append(Finding(name, paper, shows, value, op, float(reference), holds))
        print(f"{'paper direction holds' if holds else 'paper direction fails'}  [finding] "
              f"{name}: measured {value:.{digits}g} (the paper's statement: {op} "
              f"{float(reference):.10g})")
        return holds

    def headline(self, name: str, statement: str, source: str, *, claims: list[str] = (),
                 findings: list[str] = (), testable: bool = True, why: str = "") -> None:
        """One headline claim of the paper, in its words and where it is (``source``:
        "Table 2"), tested by the named paper claims and findings, or ``testable=False``
        with ``why``. :meth:`verdict` grades it by :func:`icmlbook.verdicts.grade`."""
        if any(h.name == name for h in self.headlines):
            raise ValueError(f"headline {name!r} declared twice")
        if testable and not (claims or findings):
            raise ValueError(f"headline {name!r}: name the claims or findings that test it")
        if not testable and not why:
            raise ValueError(f"headline {name!r}: say why it is not testable at this scale")
        self.headlines.append(Headline(name, statement, source, list(claims), list(findings),
                                       testable, why))

    def check(self, name: str, value: float, op: str, threshold: float, statement: str,
              *, digits: int = 4) -> bool:
        """A sanity check ``value op threshold`` (an identity, closed form, premise, count):
        enforced like a claim, shown apart, as it is no evidence for the paper."""
        return self._declare(Claim(name, statement, float(value), op, float(threshold), False,
                                   "check"), digits)

    def _declare(self, c: Claim, digits: int) -> bool:
        if any(old.name == c.name for old in self.claims):
            raise ValueError(f"claim {c.name!r} declared twice")
        c.passed = _holds(f"claim {c.name!r}", c.value, c.op, c.threshold)
        self.claims.append(c)
        tag = "[check] " if c.kind == "check" else ""
        print(f"{'PASS' if c.passed else 'FAIL'}  {tag}{c.name}: measured {c.value:.{digits}g} "
              f"(needs {c.op} {c.threshold:.10g})")
        return c.passed

    def metric(self, name: str, value: Any) -> None:
        """Record a key number (or small list/dict) in the run record. Returns nothing, so
        a cell that ends in ``run.metric(...)`` shows no stray ``Out`` value."""
        self.metrics[name] = _jsonable(value)

    def verdict(self) -> None:
        """Print the verdict table, the findings and the paper's verdict on this run, and
        enforce claims and checks (at smoke: record only).

        It shows names, thresholds and verdicts, not the measured values (printed by
        :meth:`claim` and :meth:`finding`), so that nbval can compare it across machines."""
        if not self.claims:
            raise ValueError("verdict(): no claims were declared")
        mode = "enforced" if self.enforced else "recorded, not enforced"
        kinds = [k for k in KINDS if any(c.kind == k for c in self.claims)]
        width = max(max(len(c.name) for c in self.claims) + 2, *(len(SECTIONS[k]) for k in kinds))
        graded = any(c.strength for c in self.claims)
        extra = f"  {'strength':<15}" if graded else ""
        print(f"{'':<{width}}  {'needs':<12}  {'isolates':<8}{extra}  verdict")
        for k in kinds:
            print(SECTIONS[k])
            for c in [c for c in self.claims if c.kind == k]:
                more = f"  {c.strength or '-':<15}" if graded else ""
                print(f"  {c.name:<{width - 2}}  "
                      f"{c.op + ' ' + format(c.threshold, '.10g'):<12}  "
                      f"{c.versus or '-':<8}{more}  {'PASS' if c.passed else 'FAIL'}")
        print(f"{holding([asdict(c) for c in self.claims])} hold (tier {self.tier}: {mode})")
        if self.findings:
            width = max(len(f.name) for f in self.findings)
            print("findings (recorded, not enforced)")
            for f in self.findings:
                way = "the paper's way" if f.holds else "against the paper"
                print(f"  {f.name:<{width}}  paper: {f.op} {f.reference:.10g}  {way}")
        if self.headlines:
            v = paper_verdict(self.headlines, self.claims, self.findings)
            print("\n".join(verdict_lines(v, "the paper's verdict on this run")))
        failed = [c for c in self.claims if not c.passed]
        if failed and self.enforced:
            self.finish()
            detail = "; ".join(f"{c.name} (measured {c.value:.4g}, needs {c.op} {c.threshold:.10g})"
                               for c in failed)
            raise ClaimFailed(f"{len(failed)} claim(s) failed at tier {self.tier}, "
                              f"seed {self.seed}: {detail}")

    # -- record ---------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        """The machine-readable record of this run (also embedded by :meth:`finish`)."""
        status = ("no-claims" if not self.claims else "passed" if all(c.passed for c in self.claims)
                  else "failed" if self.enforced else "recorded")
        return {
            "icmlbook_record": RECORD_VERSION, "chapter": self.chapter, "tier": self.tier,
            "seed": self.seed, "params": _jsonable(self.params), "device": self.device,
            "seconds": round(time.perf_counter() - self._t0, 3),
            "peak_rss_mb": round(_peak_rss_mb(), 1), "widget_seconds": self.widget_seconds,
            "status": status, "claims": [asdict(c) for c in self.claims],
            "findings": [asdict(f) for f in self.findings],
            "headlines": [asdict(h) for h in self.headlines],
            "verdict": (paper_verdict(self.headlines, self.claims, self.findings)
                        if self.headlines else None),
            "metrics": self.metrics,
        }

    def finish(self) -> dict[str, Any]:
        """Embed the record in the notebook as a display output and return it."""
        rec = self.record()
        summary = (f"icmlbook record: chapter {rec['chapter']}, tier {rec['tier']}, "
                   f"seed {rec['seed']}: {holding(rec['claims']) or 'no claims'} hold")
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display({RECORD_MIME: rec, "text/plain": summary}, raw=True)
        else:
            print(summary)
        return rec


def solution_check(name: str, value: float, op: str, threshold: float, digits: int = 4) -> None:
    """The assertion that ends an exercise's worked solution: ``value op threshold``,
    printed, and an AssertionError at every tier when it fails. Solutions are not
    evidence for the paper: they touch neither the claims nor the run record."""
    ok = _holds(f"solution check {name!r}", float(value), op, float(threshold))
    print(f"solution check {'holds' if ok else 'FAILS'}: {name}: measured "
          f"{float(value):.{digits}g} (needs {op} {float(threshold):.10g})")
    if not ok:
        raise AssertionError(f"solution check {name!r}: {float(value):.{digits}g} is not "
                             f"{op} {float(threshold):.10g}")


def start(chapter: str, tier: str = "default", seed: int = 0,
          params: dict[str, Any] | None = None, threads: int = 1, torch: bool = True) -> Session:
    """Begin a chapter run: validate tier and seed, seed every generator, set torch up
    (``threads`` CPU threads; ``torch=False`` for chapters that never import it)."""
    return Session(chapter, tier, seed, params, threads=threads, torch=torch)


# -- what several chapters' experiments share ---------------------------------------------
def seconds_in_turns(fns: dict[str, Callable[[], object]], reps: int = 3,
                     clock: Callable[[], float] = time.process_time) -> dict[str, float]:
    """Median seconds of each ``fn()`` over ``reps`` repeats, by ``clock`` (CPU time of
    this process by default). The fns take turns in every repeat, so a burst of load
    from elsewhere hits all of them alike; torch's global RNG is left as it was, so
    timing changes no other number of the run."""
    import statistics

    import torch

    times: dict[str, list[float]] = {name: [] for name in fns}
    with torch.random.fork_rng():
        for _ in range(reps):
            for name, fn in fns.items():
                start = clock()
                fn()
                times[name].append(clock() - start)
    return {name: float(statistics.median(t)) for name, t in times.items()}


def digits() -> tuple[Any, Any]:
    """The 1797 digits as ``(X, y)``: pixels 0..16 as float64, shape (1797, 64), and
    the labels 0..9 as int64, in the file's order (that of ``load_digits``). Read without
    importing scikit-learn, which costs a second or two, more than the smoke tier can spare."""
    import gzip
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("icmlbook.digits() reads the digits shipped with "
                                  "scikit-learn; install it (pip install scikit-learn)")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path) as f:
        table = np.loadtxt(f, delimiter=",")
    return table[:, :-1], table[:, -1].astype(np.int64)


# -- the run record's counts and its reader -----------------------------------------------
def tally(claims: list[dict[str, Any]], kind: str) -> str:
    """"passed/total" of a record's claims of one kind ("" when there are none)."""
    group = [c for c in claims if c.get("kind") == kind]
    return f"{sum(bool(c['passed']) for c in group)}/{len(group)}" if group else ""


def holding(claims: list[dict[str, Any]]) -> str:
    """Passed/total per kind present, as a run's verdict, record and the batch engine say
    it: "3/3 paper claims and 2/2 checks" ("" when there are none)."""
    return " and ".join(f"{tally(claims, k)} {SECTIONS[k]}" for k in KINDS if tally(claims, k))


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


def _peak_rss_mb() -> float:
    """Peak resident memory of this process in MB (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _jsonable(value: Any) -> Any:
    """Convert numpy/torch scalars and arrays to plain JSON types."""
    try:
        return json.loads(json.dumps(value))
    except TypeError:
        pass
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return repr(value)
