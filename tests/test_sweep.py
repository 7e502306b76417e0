"""Sweeps over chapters x seeds on Dask: the embedded cluster, an external one, resume, Ctrl-C."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import ROOT, default_sigint

from icmlbook.batch import COLUMNS, sweep

BIN = Path(sys.executable).parent


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "icmlbook.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, **kw)


@pytest.mark.smoke
def test_sweep_two_chapters_two_seeds_on_the_embedded_cluster(tmp_path):
    df = sweep(["05", "16"], seeds=[0, 1], tier="smoke", out=tmp_path, workers=2)
    assert list(df.columns) == COLUMNS
    assert set(zip(df["chapter"], df["seed"])) == {("05", 0), ("05", 1), ("16", 0), ("16", 1)}
    assert (df["tier"] == "smoke").all() and df["kind"].isin(["paper", "check", "finding"]).all()
    assert (df[df["chapter"] == "05"]["code_hash"] != "").all()
    # one record per run, written as it finished, and the tables on disk
    assert len(list((tmp_path / "records").glob("*.json"))) == 4
    back = pd.read_parquet(tmp_path / "sweep.parquet")
    assert back.shape == df.shape and len(pd.read_csv(tmp_path / "sweep.csv")) == len(df)
    # --resume: nothing left to run, the same table back
    t0 = time.perf_counter()
    again = sweep(["05", "16"], seeds=[0, 1], tier="smoke", out=tmp_path, workers=2,
                  resume=True)
    assert time.perf_counter() - t0 < 20 and len(again) == len(df)


@pytest.mark.smoke
def test_sweep_cli_against_a_dask_scheduler_and_two_workers(tmp_path):
    info = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                               "0", "--no-dashboard", "--scheduler-file", str(info)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)]
    try:
        deadline = time.time() + 60
        while not info.exists() and time.time() < deadline:
            time.sleep(0.2)
        address = json.loads(info.read_text())["address"]
        for _ in range(2):
            procs.append(subprocess.Popen(
                [str(BIN / "dask"), "worker", "--scheduler-file", str(info), "--nthreads", "1",
                 "--nworkers", "1", "--no-dashboard", "--host", "127.0.0.1"], cwd=ROOT,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        res = cli("sweep", "5", "--seeds", "0-1", "--tier", "smoke", "--scheduler", address,
                  "--out", str(tmp_path / "sw"), "--json", str(tmp_path / "r.json"))
        assert res.returncode == 0, res.stderr[-3000:]
        assert f"the cluster at {address}" in res.stdout + res.stderr
        df = pd.read_csv(tmp_path / "sw" / "sweep.csv")
        assert sorted(set(df["seed"])) == [0, 1] and df["passed"].any()
        assert len(json.loads((tmp_path / "r.json").read_text())) == 2
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


@pytest.mark.smoke
def test_ctrl_c_keeps_finished_runs_and_resume_finishes_the_rest(tmp_path):
    out = tmp_path / "sw"
    proc = subprocess.Popen([sys.executable, "-m", "icmlbook.cli", "sweep", "5", "--seeds", "0-3",
                             "--tier", "smoke", "--workers", "1", "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    deadline = time.time() + 240
    while time.time() < deadline and not list((out / "records").glob("*.json")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted" in stderr and "Traceback" not in stderr
    finished = len(list((out / "records").glob("*.json")))
    assert 1 <= finished < 4 and (out / "sweep.csv").exists() and "verdict" in stdout
    res = cli("sweep", "5", "--seeds", "0-3", "--tier", "smoke", "--workers", "2", "--out",
              str(out), "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"[resume] {finished} of 4 run(s) already recorded" in res.stdout
    assert len(list((out / "records").glob("*.json"))) == 4


@pytest.mark.parametrize("args, message", [
    (("sweep", "5", "--seeds", "9-3"), "--seeds: '9-3' is not a range"),
    (("sweep", "5", "--seeds", "x"), "--seeds: 'x' is not a seed"),
    (("sweep", "5", "--seeds", "0-4", "--update-results"), "--update-results writes the "),
    (("sweep", "5", "--workers", "0"), "--workers must be at least 1"),
    (("sweep", "5", "--out", "README.md"), "--out 'README.md': needs a folder"),
    (("sweep", "5", "--json", "no/such/dir/r.json"), "needs a file in an existing folder"),
    (("sweep", "5", "-p", "alpha", "0.9"), "alpha must be in (0.0, 0.5]"),
    (("sweep",), "name at least one chapter"),
])
def test_sweep_bad_input_exits_2_before_any_run(args, message):
    res = cli(*args)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "[dask]" not in res.stdout + res.stderr
