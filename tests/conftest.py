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
