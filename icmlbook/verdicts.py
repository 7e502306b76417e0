"""The paper's verdict: headlines, findings, and the one rule that grades them.

A chapter names its paper's headline claims, each tested by some of its paper claims
and findings. The rule below grades a single run and the seeds of a results file alike,
so the report and the chapter agree.

The rule (fixed before the final sweeps; a chapter cites it in its thresholds cell):

* a headline is **not testable** when the chapter says so and why;
* **reproduced** when every claim testing it holds at full strength (superiority, its
  threshold not changed after a failure) and every finding testing it goes the paper's
  way (on every seed, across seeds);
* **not reproduced** when none of its claims holds and every finding goes against the
  paper (on every seed);
* **partly** otherwise: a claim holds only in a weaker form (non-inferiority, within a
  factor, against a stand-in) or after a change, or a finding goes against the paper
  on some or all seeds while a claim holds, or only findings test it (they go the
  paper's way but were not pre-registered as claims).

The paper is *reproduced* when every testable headline is, *not reproduced* when none
is even partly, *not testable* when no headline is testable, and *partly* otherwise.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable

LADDER = ("reproduced", "partly", "not reproduced", "not testable")
"""The verdicts, from best to the one that says nothing."""

STRENGTH = ("superiority", "non-inferiority", "within a factor", "against a stand-in")
"""How strong a paper claim is: the method beats its ablation or baseline
(superiority); it is no worse up to a stated tolerance (non-inferiority); its ratio to
the paper's number or competitor lies within a factor; it beats a stand-in for the
paper's competitor, not the competitor itself."""

PROVENANCE = ("a priori", "calibrated", "changed after failure")
"""Where a threshold came from: fixed before any run (the paper's number, a principled
bound); calibrated on seeds 0-9 before the final sweep; or changed (the threshold, the
statistic or the design) after a run failed it."""


@dataclass
class Finding:
    """What the paper states and this book measures without claiming it."""

    name: str
    paper: str  # the paper's statement this tests
    shows: str  # what the measurement shows
    value: float
    op: str  # the paper's direction: value op reference is what the paper says
    reference: float
    holds: bool  # whether the paper's direction held


@dataclass
class Headline:
    """One headline claim of the paper and the claims and findings that test it."""

    name: str
    statement: str  # in the paper's words, with its number where it has one
    source: str  # where in the paper: "Table 2", "Fig. 3", "Thm. 1"
    claims: list[str]
    findings: list[str]
    testable: bool = True
    why: str = ""  # why not testable at this scale


def weak(claim: dict[str, Any]) -> str | None:
    """Why a paper claim (a record's, or a results file's row) counts as weaker than the
    paper's statement, or None."""
    reasons = []
    if claim.get("strength") not in (None, "", "superiority"):
        reasons.append(str(claim.get("strength")))
    if claim.get("provenance") == "changed after failure":
        reasons.append("changed after a failure")
    return ", ".join(reasons) or None


def grade(h: dict[str, Any], claims: dict[str, dict], findings: dict[str, bool | None]
          ) -> tuple[str, str]:
    """(verdict, reason) of one headline (a record's or a sidecar's: a dict).

    ``claims`` maps a claim's name to ``{"passed": bool, "weak": str | None}`` (passed:
    on every seed, across seeds); ``findings`` maps a finding's name to whether the
    paper's direction held (True), failed (False) or held on some seeds only (None).
    """
    if not h.get("testable"):
        return "not testable", h.get("why")
    missing = [n for n in h.get("claims") if n not in claims]
    missing += [n for n in h.get("findings") if n not in findings]
    if missing:
        raise KeyError(f"headline {h.get('name')!r} names unknown claims or findings: {missing}")
    cs = [(n, claims[n]) for n in h.get("claims")]
    fs = [(n, findings[n]) for n in h.get("findings")]
    held = [n for n, c in cs if c["passed"]]
    weakened = [f"{n} ({c['weak']})" for n, c in cs if c["passed"] and c["weak"]]
    failed = [n for n, c in cs if not c["passed"]]
    against = [n for n, f in fs if f is False]
    mixed = [n for n, f in fs if f is None]
    if held and not weakened and not failed and not against and not mixed:
        return "reproduced", "every claim holds at full strength" + (
            " and every finding goes the paper's way" if fs else "")
    if not held and fs and len(against) == len(fs):
        return "not reproduced", "findings against the paper: " + "; ".join(against)
    if not held and not fs:
        return "not reproduced", "no claim holds: " + "; ".join(failed)
    parts = [f"{label}: " + "; ".join(names) for label, names in (
        ("holds only weaker", weakened), ("fails", failed), ("against the paper", against),
        ("the paper's way on some seeds only", mixed)) if names]
    if not parts:  # no claim tests it and every finding goes the paper's way
        parts.append("the paper's way in findings only, which are not pre-registered claims")
    return "partly", "; ".join(parts)


def combine(verdicts: Iterable[str]) -> str:
    """The paper's verdict from its headlines' verdicts."""
    vs = [v for v in verdicts if v != "not testable"]
    if not vs:
        return "not testable"
    if all(v == "reproduced" for v in vs):
        return "reproduced"
    if all(v == "not reproduced" for v in vs):
        return "not reproduced"
    return "partly"


def grade_all(headlines: Iterable[dict], claims: dict[str, dict],
              findings: dict[str, bool | None]) -> dict[str, Any]:
    """Each headline's (verdict, reason) by :func:`grade`, and the paper's by
    :func:`combine`: the one assembly behind a run's verdict and a results file's."""
    graded = [(h["name"], *grade(h, claims, findings)) for h in headlines]
    return {"paper": combine(v for _, v, _ in graded),
            "headlines": [{"name": n, "verdict": v, "reason": r} for n, v, r in graded]}


def verdict_lines(v: dict[str, Any], title: str) -> list[str]:
    """The verdict as printed text: the paper's on one line, each headline below."""
    return [f"{title}: {v['paper'].upper()}",
            *(f"  {h['name']}: {h['verdict']} ({h['reason']})" for h in v["headlines"])]


def paper_verdict(headlines: list[Headline], claims: Iterable[Any],
                  findings: Iterable[Finding]) -> dict[str, Any]:
    """The verdict of one run: each headline's grade and the paper's."""
    cs = {c.name: {"passed": c.passed, "weak": weak(asdict(c))} for c in claims
          if c.kind == "paper"}
    return grade_all(map(asdict, headlines), cs, {f.name: f.holds for f in findings})
