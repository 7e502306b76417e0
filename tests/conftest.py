import os
import sys
from pathlib import Path

# Headless: progress loops print a few lines instead of a live bar.
os.environ.setdefault("ICMLBOOK_HEADLESS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
