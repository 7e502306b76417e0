"""Sphinx extension: the HTML book loads MathJax and the widget manager from the build.

Jupyter Book takes MathJax, require.js and the ipywidgets html-manager from CDNs;
offline, every formula shows as raw TeX and every widget only its static image. This
extension vendors the three from the npm registry at build time (pinned versions, checked
against their sha512 integrity) into ``_static/vendor/``, so the built book makes no
request outside its own folder. npm, because no PyPI package ships the html-manager;
MathJax comes the same way, for one mechanism and one cache.

The downloads are cached in ``.vendor/`` (ignored by git; ``ICMLBOOK_VENDOR_DIR`` moves
it). ``_config.yml`` enables the extension (``sphinx: extra_extensions``) and points
``mathjax_path`` and ``nb_ipywidgets_js`` at the files under ``vendor/``.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> (version, npm integrity, files to keep: paths inside the tarball's package/)
PACKAGES = {
    "mathjax": (
        "3.2.2",
        "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
        # the combined component Sphinx loads, plus what it loads on demand (TeX
        # extensions, the CHTML fonts, the menu and its accessibility parts)
        ["es5/tex-mml-chtml.js", "es5/input/", "es5/output/chtml/", "es5/output/chtml.js",
         "es5/a11y/", "es5/ui/", "es5/sre/", "es5/adaptors/", "LICENSE"],
    ),
    "requirejs": (
        "2.3.8",
        "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
        ["require.js", "LICENSE"],
    ),
    "@jupyter-widgets/html-manager": (
        "1.0.15",
        "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
        # embed-amd.js and the icon fonts it refers to, next to it
        ["dist/embed-amd.js", "dist/*.woff", "dist/*.woff2", "dist/*.ttf", "dist/*.eot",
         "dist/*.svg", "dist/embed.js.LICENSE.txt", "LICENSE"],
    ),
}


def _integrity(path: Path) -> str:
    digest = hashlib.sha512(path.read_bytes()).digest()
    return "sha512-" + base64.b64encode(digest).decode()


def _tarball(name: str) -> Path:
    """The package's tarball in the cache, fetched with `npm pack` when missing."""
    version, integrity, _ = PACKAGES[name]
    cache = Path(os.environ.get("ICMLBOOK_VENDOR_DIR", ROOT / ".vendor"))
    cache.mkdir(parents=True, exist_ok=True)
    tgz = cache / f"{name.replace('@', '').replace('/', '-')}-{version}.tgz"
    if not (tgz.exists() and _integrity(tgz) == integrity):
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError(
                f"icmlbook.offline_html: {tgz.name} is not in {cache} and npm is not "
                "installed; install Node.js and npm (Debian: apt-get install npm) once, "
                "or put the tarball there by hand")
        # fetched into the cache folder, then renamed: two builds running at once
        # (pytest-xdist) never read a half-written tarball
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            res = subprocess.run([npm, "pack", "--json", f"{name}@{version}",
                                  "--pack-destination", tmp],
                                 check=False, capture_output=True, text=True, timeout=300)
            if res.returncode != 0:
                raise RuntimeError(f"npm pack {name}@{version} failed:\n{res.stderr[-2000:]}")
            info = json.loads(res.stdout)[0]
            os.replace(Path(tmp) / info["filename"], tgz)
    got = _integrity(tgz)
    if got != integrity:
        tgz.unlink()
        raise RuntimeError(f"{name}@{version}: integrity {got} is not the pinned {integrity}")
    return tgz


def _wanted(member: str, patterns: list[str]) -> bool:
    """Whether a tarball member is kept: under a folder pattern ("es5/input/"), or matching
    a file pattern ("dist/*.woff") in that folder itself, not below it."""
    from fnmatch import fnmatch

    rel = member.removeprefix("package/")
    return any(rel.startswith(pat) if pat.endswith("/") else
               fnmatch(rel, pat) and "/" not in rel[len(pat.rsplit("/", 1)[0]) + 1:]
               for pat in patterns)


def vendor(dest: Path) -> None:
    """Unpack the kept files of every package under ``dest`` (``_static/vendor``)."""
    for name, (version, _, patterns) in PACKAGES.items():
        target = dest / name
        stamp = target / ".version"
        if not (stamp.exists() and stamp.read_text() == version):
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            with tarfile.open(_tarball(name)) as tar:
                for m in tar.getmembers():
                    rel = Path(m.name.removeprefix("package/"))
                    if m.isfile() and _wanted(m.name, patterns) and ".." not in rel.parts:
                        path = target / rel
                        path.parent.mkdir(parents=True, exist_ok=True)
                        with tar.extractfile(m) as src, open(path, "wb") as dst:
                            shutil.copyfileobj(src, dst)
            stamp.write_text(version)


# The html-manager takes the folder of its icon fonts from its require.js module URL,
# which by default is relative to the page (book/@jupyter-widgets/...). This runs after
# require.js and before embed-amd.js and maps the module names to the vendored copy.
REQUIRE_PATHS_JS = """\
// icmlbook: widget modules are served from the book's own _static/vendor/ folder.
(function () {
  var src = document.currentScript.src;
  var base = src.slice(0, src.lastIndexOf("/") + 1);
  require.config({paths: {"@jupyter-widgets": base + "@jupyter-widgets"}});
})();
"""


def _builder_inited(app) -> None:
    if app.builder.format != "html":
        return
    # unpacked under the build's own doctree folder, then copied by Sphinx as a
    # static path: the source tree stays untouched
    static_root = Path(app.doctreedir).parent / "icmlbook_static"
    vendor(static_root / "vendor")
    (static_root / "vendor" / "require-paths.js").write_text(REQUIRE_PATHS_JS)
    app.config.html_static_path.append(str(static_root))


def _drop_thebe(app, pagename, templatename, context, doctree) -> None:
    """Leave out sphinx-thebe's scripts: Jupyter Book always loads the extension, whose
    inline config names a CDN copy of thebe; the book has no live-code button, so
    the scripts would never run."""
    files = context.get("script_files")
    if not files:
        return

    def thebe(js) -> bool:
        name = str(getattr(js, "filename", js) or "")
        body = str(getattr(js, "attributes", {}).get("body", ""))
        return name.endswith("sphinx-thebe.js") or "THEBE_JS_URL" in body
    context["script_files"] = [js for js in files if not thebe(js)]


def setup(app):
    app.connect("builder-inited", _builder_inited, priority=100)
    app.connect("html-page-context", _drop_thebe)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
