"""A papermill smoke-tier run of every chapter (one test each), plus the CLI end to end."""
import json
import subprocess
import sys

import pytest
from helpers import ROOT

from icmlbook.chapters import list_chapters
from icmlbook.runner import execute

CHAPTERS = list_chapters(ROOT)


@pytest.mark.smoke
@pytest.mark.parametrize("ch", CHAPTERS, ids=[c.stem for c in CHAPTERS])
def test_smoke_run(ch, tmp_path):
    result = execute(ch, "smoke", 0, {}, tmp_path)
    assert result.ok, result.error
    rec = result.record
    assert rec is not None and rec["tier"] == "smoke" and rec["seed"] == 0
    assert len(rec["claims"]) >= 2
    assert all(c["value"] == c["value"] for c in rec["claims"]), "a claim measured NaN"
    assert rec["widget_seconds"] is not None, "the widget did not run (icmlbook.explore)"


def cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "icmlbook.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.smoke
def test_cli_run_writes_json(tmp_path):
    out = tmp_path / "r.json"
    res = cli("run", "5", "--tier", "smoke", "--seed", "3", "--json", str(out),
              "--out", str(tmp_path / "runs"))
    assert res.returncode == 0, res.stderr
    assert "05 conformal_betting" in res.stdout and "PASS" in res.stdout
    (entry,) = json.loads(out.read_text())
    assert entry["tier"] == "smoke" and entry["seed"] == 3 and entry["ok"]
    assert entry["record"]["seed"] == 3 and len(entry["record"]["claims"]) >= 2
    assert (tmp_path / "runs" / "ch05_conformal_betting.smoke.s3.ipynb").exists()


@pytest.mark.parametrize("args, message", [
    (("run", "99"), "unknown chapter '99'; valid chapters: "),
    (("run", "no_such_slug"), "05 (conformal_betting)"),
    (("run", "5", "--tier", "huge"), "invalid choice: 'huge'"),
    (("run", "5", "-p", "no_such_param", "1"), "has no parameter 'no_such_param'"),
    (("run", "5", "-p", "alpha", "0.9"), "alpha must be in (0.0, 0.5]; got 0.9"),
    (("run", "5", "-p", "window", "abc"), "window must be an integer; got 'abc'"),
    (("run", "5", "--inplace", "--seed", "1"), "--inplace stores the committed outputs"),
    (("run",), "name at least one chapter"),
    (("run", "5", "--jobs", "0"), "--jobs must be at least 1"),
])
def test_cli_bad_input_exits_2_before_any_kernel(args, message):
    res = cli(*args)
    assert res.returncode == 2
    assert message in res.stderr
    assert "[start]" not in res.stdout


def test_cli_list():
    res = cli("list", "--json")
    assert res.returncode == 0
    rows = json.loads(res.stdout)
    ch05 = next(r for r in rows if r["number"] == "05")
    assert ch05["parameters"]["tier"]["default"] == "default"
    assert ch05["part"].startswith("II.") and ch05["title"]
