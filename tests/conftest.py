import os
import sys
from pathlib import Path

# Headless: progress loops print a few lines instead of a live bar.
os.environ.setdefault("ICMLBOOK_HEADLESS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

# One torch thread, as in the chapters: on 2 cores a tiny model's step is many times
# faster than with the default 2 threads.
import torch  # noqa: E402

torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Mark ``slow`` every test that needs a training fixture (a module-scoped fixture of
    a chapter's test file trains a model or solves a problem once for its tests), so
    that ``make test-fast`` (``-m "not slow ..."``) leaves them to ``make test``."""
    import pytest

    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info else []
        if any(d.scope in ("module", "session") and "test_ch" in (d.baseid or "")
               for group in defs for d in group):
            item.add_marker(pytest.mark.slow)
