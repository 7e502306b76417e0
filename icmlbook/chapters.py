"""The book's chapters: discovery from ``_toc.yml``, parameters, validation.

A chapter is ``book/chNN_slug.py`` (jupytext py:percent, the source of truth)
paired with ``book/chNN_slug.ipynb`` (the same cells with a default-tier run's
outputs). Its ``parameters``-tagged cell holds plain assignments with a comment
each; its ``validate``-tagged cell checks them with ``icmlbook.check_*``.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from icmlbook.tiers import shown


def skip_iri_grammar() -> None:
    """Keep nbformat's first import fast: jsonschema registers an IRI format check when
    ``rfc3987_syntax`` is installed, whose import compiles a grammar (over 3 s of CPU).
    Notebook schemas never use that format, so the import is blocked in this process (a
    ``None`` in ``sys.modules`` raises the ImportError jsonschema expects)."""
    sys.modules.setdefault("rfc3987_syntax", None)


CHAPTER_RE = re.compile(r"^ch(\d\d)_([a-z0-9_]+?)(\.ipynb|\.py|\.md)?$")


@dataclass(frozen=True)
class Parameter:
    name: str
    default: Any
    comment: str


@dataclass(frozen=True)
class Chapter:
    number: str  # "05"
    slug: str  # "conformal_betting"
    part: str
    root: Path = field(repr=False)

    @property
    def stem(self) -> str:
        return f"ch{self.number}_{self.slug}"

    @property
    def py(self) -> Path:
        return self.root / "book" / f"{self.stem}.py"

    @property
    def ipynb(self) -> Path:
        return self.root / "book" / f"{self.stem}.ipynb"

    @cached_property
    def notebook(self) -> Any:
        """The chapter's cells, read from the ``.py`` source (nbformat node)."""
        skip_iri_grammar()
        import jupytext

        return jupytext.read(self.py)

    @cached_property
    def _light_cells(self) -> list[tuple[str, list[str], str]]:
        """(kind, tags, source) of each cell, scanned straight from the py:percent text: a
        tenth of the time of a jupytext read, which the CLI's parameter checks and each
        Across-seeds cell would otherwise pay. A structure test holds the two equal."""
        return percent_cells(self.py.read_text(encoding="utf-8"))

    @property
    def title(self) -> str:
        for kind, _, source in self._light_cells:
            if kind == "markdown":
                m = re.search(r"^#\s+(.+)$", source, re.M)
                if m:
                    return m.group(1).strip()
        return self.slug.replace("_", " ")

    def cell(self, tag: str) -> str | None:
        """Source of the first cell tagged ``tag``, or None."""
        for _, tags, source in self._light_cells:
            if tag in tags:
                return source
        return None

    @property
    def code_hash(self) -> str:
        """A hash of what the chapter's code cells do, through :func:`code_statements`: it
        changes with the code, not with prose, comments, layout or where cells are cut.
        Results files are stamped with it. Cells tagged ``solution`` (worked solutions,
        which touch no claim or record) are left out."""
        code = [stmt for kind, tags, source in self._light_cells
                if kind == "code" and "solution" not in tags
                for stmt in code_statements(source)]
        return hashlib.sha256("\n# <stmt>\n".join(code).encode("utf-8")).hexdigest()[:16]

    @property
    def results_file(self) -> Path:
        """``results/chNN_slug.csv``: the claim values over the committed seeds."""
        return self.root / "results" / f"{self.stem}.csv"

    @property
    def thresholds(self) -> dict[str, Parameter]:
        """The named thresholds of the cell tagged ``thresholds``, with their provenance
        (the trailing comment); empty for a chapter without that cell."""
        source = self.cell("thresholds")
        return {} if source is None else parse_parameters(source, literal=False)

    @property
    def parameters(self) -> dict[str, Parameter]:
        source = self.cell("parameters")
        if source is None:
            raise ValueError(f"{self.stem}: no cell tagged 'parameters'")
        return parse_parameters(source)


_HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?:\s+tags=(?P<tags>\[[^\]]*\]))?")


def code_statements(source: str) -> list[str]:
    """The syntax tree of each top-level statement of a code cell as text: the same whatever
    the comments, docstrings, line breaks, quotes or spacing, and across Python versions
    (empty or None fields are left out, as newer ``ast.dump`` does). A cell that does not
    parse (a notebook magic) is one statement, as written."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [source]
    for node in ast.walk(tree):  # docstrings and other bare strings are prose
        if isinstance(getattr(node, "body", None), list):
            node.body = [s for s in node.body if not (
                isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                and isinstance(s.value.value, str))] or (
                [] if isinstance(node, ast.Module) else [ast.Pass()])

    def canon(node: Any) -> str:
        if isinstance(node, ast.AST):
            fields = [f"{name}={canon(value)}" for name in node._fields
                      if (value := getattr(node, name, None)) is not None and value != []]
            return f"{type(node).__name__}({','.join(fields)})"
        if isinstance(node, list):
            return "[" + ",".join(canon(v) for v in node) + "]"
        return repr(node)

    return [canon(stmt) for stmt in tree.body]


def percent_cells(text: str) -> list[tuple[str, list[str], str]]:
    """The cells of a jupytext py:percent file as (kind, tags, source), without jupytext.

    Enough for the cells the package reads by tag (parameters, validate, thresholds)
    and for the title; everything else reads the full notebook with jupytext."""
    cells: list[tuple[str, list[str], list[str]]] = []
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            tags = json.loads(m.group("tags")) if m.group("tags") else []
            cells.append(("markdown" if m.group("md") else "code", tags, []))
        elif cells:
            kind, _, body = cells[-1]
            if kind == "markdown":
                line = line[2:] if line.startswith("# ") else line.lstrip("#")
            body.append(line)
    return [(kind, tags, "\n".join(body).strip()) for kind, tags, body in cells]


def book_root(start: str | Path | None = None) -> Path:
    """The repository root: $ICMLBOOK_ROOT, else the nearest folder above ``start``
    (default: the working directory, then this package) holding ``_toc.yml``."""
    env = os.environ.get("ICMLBOOK_ROOT")
    if env:
        if not is_book(Path(env)):
            raise FileNotFoundError(f"ICMLBOOK_ROOT={env!r} is not the book (a folder with "
                                    "_toc.yml and book/)")
        return Path(env).resolve()
    candidates = [Path(start or Path.cwd()).resolve(), Path(__file__).resolve().parent]
    for base in candidates:
        for d in (base, *base.parents):
            if is_book(d):
                return d
    raise FileNotFoundError("cannot find the book (a folder with _toc.yml and book/); "
                            "run from the repository or set ICMLBOOK_ROOT")


def is_book(path: Path) -> bool:
    """Whether ``path`` is the repository root: it holds ``_toc.yml`` and ``book/``."""
    try:
        return (path / "_toc.yml").is_file() and (path / "book").is_dir()
    except (OSError, ValueError):  # e.g. a name too long, or with a NUL byte
        return False


def list_chapters(root: str | Path | None = None) -> list[Chapter]:
    """Chapters in ``_toc.yml`` order, with the part (caption) each belongs to."""
    import yaml

    root = book_root(root)
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    chapters = []
    for part in toc.get("parts", []):
        for entry in part.get("chapters", []) or []:
            m = CHAPTER_RE.match(Path(entry.get("file", "")).name)
            if m:
                chapters.append(Chapter(m.group(1), m.group(2), part.get("caption", ""), root))
    return chapters


def resolve(name: str, chapters: list[Chapter]) -> Chapter:
    """A chapter by number (``5``, ``05``), slug, ``05_slug`` or ``ch05_slug``."""
    key = str(name).strip().lower().removesuffix(".py").removesuffix(".ipynb")
    key = Path(key).name.removeprefix("ch")
    for ch in chapters:
        if key.isascii() and key.isdigit() and key.lstrip("0") == ch.number.lstrip("0"):
            return ch
        if key in (ch.slug, f"{ch.number}_{ch.slug}"):
            return ch
    valid = ", ".join(f"{c.number} ({c.slug})" for c in chapters) or "none yet"
    raise LookupError(f"unknown chapter {shown(name)}; valid chapters: {valid}")


def parse_parameters(source: str, literal: bool = True) -> dict[str, Parameter]:
    """Names, literal defaults and comments (trailing, or the comment lines right above)
    of a parameters cell. ``literal=False`` keeps a non-literal value as its source."""
    tree = ast.parse(source)
    lines = source.splitlines()
    params: dict[str, Parameter] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            name = node.targets[0].id
            try:
                default = ast.literal_eval(node.value)
            except ValueError as exc:
                if literal:
                    raise ValueError(f"parameter {name} needs a literal default") from exc
                default = ast.get_source_segment(source, node.value)
            line = lines[node.lineno - 1]
            comment = line.split("#", 1)[1].strip() if "#" in line else ""
            above = node.lineno - 2
            while not comment and above >= 0 and lines[above].lstrip().startswith("#"):
                above -= 1
            if not comment and above < node.lineno - 2:  # a comment block right above
                comment = " ".join(c.strip().lstrip("#").strip()
                                   for c in lines[above + 1:node.lineno - 1])
            params[name] = Parameter(name, default, comment)
    return params
