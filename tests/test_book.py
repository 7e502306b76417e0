"""The HTML book builds with zero warnings (-W -n --keep-going)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT


@pytest.mark.book
def test_book_builds_without_warnings(tmp_path):
    jb = Path(sys.executable).parent / "jupyter-book"
    exe = str(jb) if jb.exists() else shutil.which("jupyter-book")
    assert exe, "jupyter-book is not installed (pip install -e '.[book]')"
    res = subprocess.run([exe, "build", str(ROOT), "-W", "-n", "--keep-going",
                          "--path-output", str(tmp_path)], capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    html = tmp_path / "_build" / "html"
    assert (html / "book" / "intro.html").exists() or (html / "intro.html").exists()
    assert list(html.rglob("ch05_conformal_betting.html"))
