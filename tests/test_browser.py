"""Real-browser checks in headless Chromium (Debian's package) driven by Playwright.

(a) The HTML book, built here and served on 127.0.0.1: the intro and four chapters
    render every formula (no raw TeX), load every image, show the widgets' controls,
    and make no request that leaves 127.0.0.1.
(b) JupyterLab on 127.0.0.1 with a token, on a copy of chapter 05: Run All gives no
    error output, a slider move redraws the widget's figure, and the chapter's .py
    opens as a notebook (the project's labconfig/overrides.json), with no news popup.

Screenshots go to _build/screenshots/. Playwright's own browser downloads are never
used: the system chromium is launched by path. Without chromium or playwright these
tests skip, saying how to install them; under CI (CI=true) they fail instead.
"""
from __future__ import annotations

import functools
import http.server
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import BOOK, ROOT

pytestmark = pytest.mark.browser

SHOTS = ROOT / "_build" / "screenshots"
# flags for a closed network: no background connections to the browser vendor's hosts
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-dev-shm-usage"]
HTML_PAGES = ["intro", "ch05_conformal_betting", "ch10_score_matching_gans",
              "ch16_marl_influence", "ch19_spike_distance"]
INSTALL_HINT = ("install Debian's chromium and Playwright for Python: "
                "`apt-get install chromium` and `pip install -e '.[dev]'` "
                "(never `playwright install`: the system chromium is used)")


def _chromium() -> str:
    exe = os.environ.get("ICMLBOOK_CHROMIUM") or shutil.which("chromium") \
        or shutil.which("chromium-browser")
    missing = []
    if not exe:
        missing.append("chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright")
    if missing:
        msg = f"{' and '.join(missing)} not found: {INSTALL_HINT}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return exe


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def _local_only(context, outside: list[str]):
    """Let requests to 127.0.0.1 (and inline data) through; record and abort the rest."""
    def handle(route):
        url = route.request.url
        if url.startswith(("http://127.0.0.1", "data:", "blob:")):
            route.continue_()
        else:
            outside.append(url)
            route.abort()
    context.route("**/*", handle)


# --- (a) the HTML book ---------------------------------------------------------------

@pytest.fixture(scope="module")
def html_site(tmp_path_factory):
    """Build the HTML book (stored outputs, no execution) and serve it on 127.0.0.1."""
    out = tmp_path_factory.mktemp("html")
    jb = Path(sys.executable).parent / "jupyter-book"
    exe = str(jb) if jb.exists() else shutil.which("jupyter-book")
    assert exe, "jupyter-book is not installed (pip install -e '.[book]')"
    res = subprocess.run([exe, "build", str(ROOT), "--path-output", str(out)],
                         check=False, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    html = out / "_build" / "html"
    handler = functools.partial(_QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", html
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_html_has_no_cdn_reference(html_site):
    """No page or vendored script asks a CDN for MathJax, require.js or the widgets."""
    _, html = html_site
    cdns = ("cdn.jsdelivr.net", "cdnjs.cloudflare.com", "unpkg.com")
    found = {str(p.relative_to(html)): cdn for p in html.rglob("*.html")
             for cdn in cdns if cdn in p.read_text(encoding="utf-8", errors="replace")}
    assert not found, f"CDN references in the built HTML: {found}"


@pytest.mark.parametrize("page", HTML_PAGES)
def test_html_page_renders_offline(browser, html_site, page):
    base, _ = html_site
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    outside, failed = [], []
    _local_only(context, outside)
    tab = context.new_page()
    tab.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400
           else None)
    tab.goto(f"{base}/book/{page}.html", wait_until="networkidle")
    tab.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
    tab.evaluate("() => MathJax.startup.promise")
    text = tab.inner_text("article")
    raw = [m for m in ("\\(", "\\)", "\\[", "\\]", "\\begin{", "$$") if m in text]
    assert not raw, f"{page}: raw TeX left on the page ({raw})"
    n_math = tab.locator("span.math, div.math").count()
    assert tab.locator("mjx-container").count() >= n_math, f"{page}: unrendered formulas"
    images = tab.evaluate("() => Array.from(document.images).map("
                          "i => [i.currentSrc.slice(0, 80), i.complete && i.naturalWidth > 0])")
    if page != "intro":
        assert images, f"{page}: no figure"
    broken = [src for src, ok in images if not ok]
    assert not broken, f"{page}: images that did not load: {broken}"
    n_views = tab.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
    if n_views:
        tab.wait_for_selector(".jupyter-widgets .widget-slider, .jupyter-widgets select",
                              timeout=30_000)
        assert tab.locator(".widget-slider").count() >= 1, f"{page}: no slider"
    assert not outside, f"{page}: requests left 127.0.0.1: {outside[:5]}"
    assert not failed, f"{page}: failed requests: {failed[:5]}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS / f"html_{page}.png"))
    if page == "ch05_conformal_betting":
        tab.locator("div.math mjx-container").first.scroll_into_view_if_needed()
        tab.screenshot(path=str(SHOTS / "html_ch05_math.png"))
        tab.locator(".widget-slider").first.scroll_into_view_if_needed()
        tab.screenshot(path=str(SHOTS / "html_ch05_widget.png"))
    context.close()


def test_html_solution_is_folded_and_opens(browser, html_site):
    """An exercise's worked solution is folded in the HTML book: its reasoning under a
    "Solution to exercise 1" dropdown and its code and output under a toggle; opening
    them shows the reasoning and the solution check's output."""
    base, _ = html_site
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    _local_only(context, [])
    tab = context.new_page()
    tab.goto(f"{base}/book/ch05_conformal_betting.html", wait_until="networkidle")
    drop = tab.locator("details.sd-dropdown", has_text="Solution to exercise 1").first
    assert drop.count() == 1 and drop.get_attribute("open") is None, "the solution is not folded"
    body = drop.locator(".sd-summary-content, .sd-card-body").first
    assert not body.is_visible()
    drop.locator("summary").first.click()
    assert body.is_visible() and len(body.inner_text()) > 40
    code = tab.locator("details.hide", has_text="solution check holds").first
    output = code.locator(".cell_output").first
    assert not output.is_visible(), "the solution's code and output are not folded"
    code.locator("summary").first.click()
    output.wait_for(state="visible")
    assert "solution check holds" in output.inner_text()
    SHOTS.mkdir(parents=True, exist_ok=True)
    output.scroll_into_view_if_needed()
    tab.screenshot(path=str(SHOTS / "html_ch05_solution.png"))
    context.close()


# --- (b) JupyterLab --------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 with a token, on a copy of chapter 05 and its pair."""
    work = tmp_path_factory.mktemp("lab")
    root = work / "book"
    root.mkdir()
    for name in ("ch05_conformal_betting.py", "ch05_conformal_betting.ipynb"):
        shutil.copy2(BOOK / name, root / name)
    shutil.copy2(ROOT / "jupytext.toml", root / "jupytext.toml")
    token, port = secrets.token_hex(16), _free_port()
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(work / "user-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(work / "workspaces"),
           "JUPYTER_RUNTIME_DIR": str(work / "runtime"), "JUPYTER_PREFER_ENV_PATH": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    env.pop("ICMLBOOK_HEADLESS", None)  # a reader's session, as `make lab` gives
    log = open(work / "lab.log", "w")  # noqa: SIM115 (open while the server runs)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", f"--LabApp.app_settings_dir={ROOT / 'labconfig'}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.extension_manager=readonly",
         "--allow-root"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("JupyterLab did not start:\n" + (work / "lab.log").read_text()[-3000:])
            time.sleep(0.5)
    yield url, token, root
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


NEWS = "notified about official Jupyter news"

CELLS_JS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const cells = Array.from(w.content.model.cells);
  return cells.filter(c => c.type === 'code').map(c => {
    const outs = [];
    for (let i = 0; i < c.outputs.length; i++) outs.push(c.outputs.get(i).toJSON());
    return {n: c.executionCount, errors: outs.filter(o => o.output_type === 'error')
              .map(o => o.ename + ': ' + o.evalue)};
  });
}"""


def _open_lab(browser, url, token, path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    outside = []
    _local_only(context, outside)
    tab = context.new_page()
    tab.goto(f"{url}/lab/tree/{path}?token={token}")
    tab.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                          " && window.jupyterapp.shell.currentWidget.content", timeout=120_000)
    return context, tab, outside


def test_lab_runs_chapter_and_widget_redraws(browser, lab):
    url, token, _ = lab
    context, tab, _ = _open_lab(browser, url, token, "ch05_conformal_betting.ipynb")
    tab.wait_for_function("() => { const s = window.jupyterapp.shell.currentWidget"
                          ".sessionContext.session; return s && s.kernel &&"
                          " s.kernel.status === 'idle'; }", timeout=120_000)
    # Run > Run All Cells, from the menu bar as a reader would
    tab.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    tab.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    tab.wait_for_function(f"() => ({CELLS_JS})().every(c => c.n !== null)"
                          " && window.jupyterapp.shell.currentWidget.sessionContext"
                          ".session.kernel.status === 'idle'", timeout=300_000)
    cells = tab.evaluate(CELLS_JS)
    errors = [e for c in cells for e in c["errors"]]
    assert not errors, f"error outputs after Run All: {errors}"
    assert NEWS not in tab.inner_text("body"), "the Jupyter news popup is shown"
    slider = tab.locator(".jp-OutputArea .widget-slider").first
    slider.scroll_into_view_if_needed()
    image = tab.locator(".jp-OutputArea .widget-output img").first
    image.wait_for(timeout=60_000)
    before = image.get_attribute("src")
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS / "lab_ch05_widget_before.png"))
    slider.locator(".noUi-handle").first.focus()
    for _ in range(5):
        tab.keyboard.press("ArrowRight")
    tab.wait_for_function(
        "before => { const i = document.querySelector('.jp-OutputArea .widget-output img');"
        " return i && i.getAttribute('src') !== before; }", arg=before, timeout=60_000)
    tab.wait_for_timeout(500)
    tab.screenshot(path=str(SHOTS / "lab_ch05_widget_after.png"))
    context.close()


def test_lab_opens_chapter_py_as_notebook(browser, lab):
    url, token, _ = lab
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    _local_only(context, [])
    tab = context.new_page()
    tab.goto(f"{url}/lab?token={token}")
    # double-click the .py in the file browser, as a reader would
    item = tab.locator(".jp-DirListing-item", has_text="ch05_conformal_betting.py")
    item.first.wait_for(timeout=120_000)
    item.first.dblclick()
    tab.wait_for_function(
        "() => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.context && w.context.path.endsWith('ch05_conformal_betting.py'); }",
        timeout=60_000)
    kind = tab.evaluate("() => window.jupyterapp.shell.currentWidget.node.className")
    assert "jp-NotebookPanel" in kind, f"the .py opened as {kind!r}, not as a notebook"
    tab.locator(".jp-NotebookPanel:visible .jp-Cell").first.wait_for(timeout=30_000)
    assert NEWS not in tab.inner_text("body"), "the Jupyter news popup is shown"
    SHOTS.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(SHOTS / "lab_ch05_py_as_notebook.png"))
    context.close()
