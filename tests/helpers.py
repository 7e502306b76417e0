"""Helpers for the tests: load a chapter's definitions without running its experiment."""
from __future__ import annotations

import ast
import signal
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def chapter_defs(stem: str) -> types.ModuleType:
    """The imports, functions, classes and ALL_CAPS constants of ``book/<stem>.py``.

    Chapters keep their algorithms in functions that take what they need as
    arguments, so unit tests can call them without executing the notebook's
    experiment cells (which this skips).
    """
    path = BOOK / f"{stem}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module = types.ModuleType(stem)
    module.__file__ = str(path)
    for node in tree.body:
        code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
            exec(code, module.__dict__)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
            if names and all(isinstance(n, ast.Name) and n.id.isupper() for n in names):
                try:  # ALL_CAPS constants, also A, B = 1, 2
                    exec(code, module.__dict__)
                except NameError:
                    pass  # computed from the experiment's variables: not a constant
    return module


def default_sigint() -> None:
    """``preexec_fn`` for a CLI child: SIGINT as a terminal gives it. A test process may
    run with SIGINT ignored (a test runner's worker), and an ignored signal is inherited."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
