"""The command line refuses bad input before any kernel starts, and survives Ctrl-C.

Most tests call ``icmlbook.cli.main`` in-process with the engine replaced by a stub
that fails the test if a run is ever started: validation must happen first. The
tests that need a kernel (Ctrl-C, a dying kernel) use a tiny two-chapter book and
are marked ``slow``.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import ROOT, default_sigint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icmlbook import cli
from icmlbook.chapters import list_chapters

CHAPTERS = list_chapters(ROOT)


@pytest.fixture()
def no_kernels(monkeypatch):
    """Any attempt to start a run fails the test; what the engine was asked is kept."""
    import icmlbook.batch

    asked = {}

    def refuse(jobs, out_dir, **kw):
        asked.update(jobs=jobs, **kw)
        return []

    monkeypatch.setattr(icmlbook.batch, "run_jobs", refuse)
    monkeypatch.chdir(ROOT)
    return asked


def main(*argv) -> int:
    """``icmlbook ARGV`` in-process: its exit status (argparse's own refusals included)."""
    try:
        return cli.main(list(argv))
    except SystemExit as exc:
        return exc.code


def clean_refusal(err: str) -> str:
    """The one error line of a refusal: ours, or argparse's after its usage lines."""
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if lines and lines[0].startswith("usage: "):  # argparse: usage, then one error line
        assert lines[-1].startswith("icmlbook") and ": error: " in lines[-1], err
        return lines[-1]
    assert len(lines) == 1 and lines[0].startswith("icmlbook: error: "), err
    return lines[0]


def refused(capsys, *argv, started=None):
    """Run the CLI in-process; assert exit 2 with a one-line message; return it."""
    rc = main(*argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert started is None or not started, "a run started before the input was checked"
    return clean_refusal(err)


# -- one test per row of the bad-input table ----------------------------------------------
def test_out_must_be_a_writable_folder(no_kernels, capsys, tmp_path):
    afile = tmp_path / "a_file"
    afile.write_text("x")
    assert "--out" in refused(capsys, "run", "5", "--out", str(afile), started=no_kernels)
    msg = refused(capsys, "run", "5", "--out", "/proc/icmlbook-out", started=no_kernels)
    assert "cannot write there" in msg
    msg = refused(capsys, "run", "5", "--out", str(afile / "below"), started=no_kernels)
    assert "cannot write there" in msg or "needs a folder" in msg
    assert "needs a folder" in refused(capsys, "run", "5", "--out", "", started=no_kernels)
    assert "needs a folder" in refused(capsys, "sweep", "5", "--out", "", started=no_kernels)


def test_json_must_be_a_writable_file(no_kernels, capsys, tmp_path):
    out = ["--out", str(tmp_path / "runs")]
    for bad in (tmp_path / "missing" / "r.json", tmp_path, Path("/proc/icmlbook.json")):
        msg = refused(capsys, "run", "5", "--json", str(bad), *out, started=no_kernels)
        assert "--json" in msg
    assert "--json" in refused(capsys, "sweep", "5", "--json", str(tmp_path), *out,
                               started=no_kernels)
    existing = tmp_path / "old.json"
    existing.write_text("[]")
    assert main("run", "5", "--json", str(existing), *out) == 0
    assert json.loads(existing.read_text()) == []  # the stub ran nothing


@pytest.mark.parametrize("pair, hint", [(("seed", "7"), "--seed"), (("seed", "abc"), "--seed"),
                                        (("tier", "full"), "--tier")])
def test_seed_and_tier_are_not_parameters(no_kernels, capsys, pair, hint):
    assert f"use {hint}" in refused(capsys, "run", "5", "-p", *pair, started=no_kernels)
    hint = "--seeds" if pair[0] == "seed" else hint
    assert f"use {hint}" in refused(capsys, "sweep", "5", "-p", *pair, started=no_kernels)


def test_a_choice_of_integers_refuses_a_float(no_kernels, capsys):
    msg = refused(capsys, "run", "8", "-p", "student_width", "12.0", started=no_kernels)
    assert "student_width must be one of 4, 8, 12, 16, 24; got 12.0" in msg
    assert main("run", "8", "-p", "student_width", "12", "--out", "/tmp/icmlbook-t") == 0


def test_a_parameter_given_twice_is_refused(no_kernels, capsys):
    msg = refused(capsys, "run", "5", "-p", "alpha", "0.7", "-p", "alpha", "0.2",
                  started=no_kernels)
    assert "-p 'alpha' is given twice" in msg


def test_odd_chapter_names_and_roots(no_kernels, capsys, monkeypatch, tmp_path):
    assert "unknown chapter '²'" in refused(capsys, "run", "²", started=no_kernels)
    assert "unknown chapter" in refused(capsys, "run", "٥٥٥", started=no_kernels)
    assert "not the book" in refused(capsys, "--root", str(tmp_path), "list")
    assert "not the book" in refused(capsys, "--root", str(tmp_path), "run", "5",
                                     started=no_kernels)
    assert "not the book" in refused(capsys, "--root", str(tmp_path), "report")
    monkeypatch.setenv("ICMLBOOK_ROOT", "/nonexistent")
    assert "ICMLBOOK_ROOT='/nonexistent' is not the book" in refused(capsys, "list")


def test_bench_needs_tiers_and_a_report_file(no_kernels, capsys, tmp_path):
    assert "at least one tier" in refused(capsys, "bench", "5", "--tiers", "")
    assert "at least one tier" in refused(capsys, "bench", "5", "--tiers", " , ")
    assert "unknown tier" in refused(capsys, "bench", "5", "--tiers", "smoke,huge")
    assert "--out" in refused(capsys, "bench", "5", "--out", str(tmp_path))


def test_jobs_are_capped_at_the_runs_with_a_note_beyond_the_cores(no_kernels, capsys,
                                                                   monkeypatch, tmp_path):
    assert main("run", "5", "05", "--jobs", "100", "--out", str(tmp_path)) == 0
    assert no_kernels["workers"] == 2
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert main("run", "5", "05", "--jobs", "100", "--out", str(tmp_path)) == 0
    assert "note: --jobs 2 kernels at once on 1 core(s)" in capsys.readouterr().err


def test_not_finite_floats_say_finite(no_kernels, capsys):
    for text in ("nan", "NaN", "inf", " -inf", "1e400"):  # argparse reads "-inf" as a flag
        msg = refused(capsys, "run", "5", "-p", "alpha", text, started=no_kernels)
        assert "alpha must be finite" in msg, msg


def test_a_huge_integer_is_not_echoed(no_kernels, capsys):
    digits = "7" * 5000
    for name in ("window", "alpha"):
        msg = refused(capsys, "run", "5", "-p", name, digits, started=no_kernels)
        assert len(msg) < 300 and "7777777777" in msg
    assert refused(capsys, "run", digits, started=no_kernels).count("7") < 100
    assert refused(capsys, "run", "5", "-p", digits, "1", started=no_kernels).count("7") < 100


# -- any value for any parameter of any chapter: accepted, or a clean exit 2 ---------------
TYPED = st.sampled_from(["nan", "inf", "-inf", "1e400", "True", "None", "[1, 2]", "{}", "()",
                         "'x'", "0x10", "1_000", "-0", "0.0", "  3  ", "((((((((((1))))))))))",
                         "(" * 200, "\x00", "9" * 5000, "٣", "²"])
VALUES = st.one_of(st.text(max_size=40), st.integers().map(str),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr), TYPED)
PARAMS = [(c.number, name) for c in CHAPTERS for name in c.parameters]


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(target=st.sampled_from(PARAMS), value=VALUES)
def test_any_value_is_accepted_or_refused_cleanly(no_kernels, capsys, tmp_path, target, value):
    number, name = target
    no_kernels.clear()
    rc = main("run", number, "-p", name, value, "--out", str(tmp_path / "runs"))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if rc == 0:
        assert no_kernels["jobs"], "accepted but nothing was asked to run"
    else:
        assert rc == 2 and not no_kernels, err
        assert len(clean_refusal(err)) < 600


# -- with kernels: Ctrl-C and a kernel that dies ------------------------------------------
TINY = '''# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% tags=["parameters"]
tier = "default"  # tier
seed = 0  # seed

# %% tags=["validate"]
from icmlbook import check_seed, check_tier

check_tier(tier)
check_seed(seed)

# %%
import os
import pathlib
import time

import icmlbook

run = icmlbook.start("{stem}", tier=tier, seed=seed, torch=False)
{body}
run.claim("one", 1.0, "<=", 2.0, "a claim that holds", versus="ablation", against="a")

# %%
run.verdict()

# %% tags=["remove-cell"]
run.finish();
'''


@pytest.fixture()
def tiny_book(tmp_path):
    """Chapter 05 finishes at once; chapter 16 writes its kernel's pid, then sleeps;
    chapter 19 kills its own kernel."""
    root = tmp_path / "tiny"
    (root / "book").mkdir(parents=True)
    bodies = {"ch05_conformal_betting": "",
              "ch16_marl_influence": f"pathlib.Path({str(tmp_path / 'pid')!r})"
                                     ".write_text(str(os.getpid()))\ntime.sleep(300)",
              "ch19_spike_distance": "os._exit(3)"}
    toc = "format: jb-book\nroot: book/intro\nparts:\n  - caption: Tiny\n    chapters:\n"
    for stem, body in bodies.items():
        (root / "book" / f"{stem}.py").write_text(TINY.format(stem=stem[2:], body=body))
        toc += f"      - file: book/{stem}\n"
    (root / "_toc.yml").write_text(toc)
    return root


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_stops_cleanly_with_the_finished_runs(tiny_book, tmp_path, jobs):
    out = tmp_path / "r.json"
    pid_file = tmp_path / "pid"
    # a terminal's Ctrl-C reaches the whole foreground process group: do the same
    proc = subprocess.Popen([sys.executable, "-m", "icmlbook.cli", "--root", str(tiny_book),
                             "run", "5", "16", "--jobs", jobs, "--json", str(out),
                             "--out", str(tmp_path / "runs")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=default_sigint)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.time() + 180
    while time.time() < deadline and not (
            pid_file.exists() and any(ln.startswith("[pass] 05") for ln in lines)):
        time.sleep(0.2)
    assert pid_file.exists(), "chapter 16 never started"
    kernel = int(pid_file.read_text())
    t0 = time.time()
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    stdout, stderr = "".join(lines), proc.stderr.read()
    assert time.time() - t0 < 20, "Ctrl-C took too long"
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted" in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert "05 conformal_betting" in stdout and "verdict" in stdout
    (entry,) = json.loads(out.read_text())
    assert entry["chapter"] == "05" and entry["ok"]
    for _ in range(50):  # the kernel follows its parent within a few seconds
        if not _alive(kernel):
            break
        time.sleep(0.2)
    assert not _alive(kernel), "an orphan kernel survived Ctrl-C"


@pytest.mark.slow
def test_a_kernel_that_dies_names_its_cell(tiny_book, tmp_path):
    res = subprocess.run([sys.executable, "-m", "icmlbook.cli", "--root", str(tiny_book),
                          "run", "19", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 1, res.stderr[-3000:]
    assert "cell 3 (`import os`)" in res.stderr and "DeadKernelError" in res.stderr, res.stderr
