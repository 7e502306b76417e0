"""Small datasets the chapters share, read without importing the library that ships
them: importing scikit-learn costs a second or two, more than the smoke tier can spare.
"""
from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np


def digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 digits as ``(X, y)``: pixels 0..16 as float64, shape (1797, 64), and
    the labels 0..9 as int64, in the file's order (that of ``load_digits``)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("icmlbook.digits() reads the digits shipped with "
                                  "scikit-learn; install it (pip install scikit-learn)")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path) as f:
        table = np.loadtxt(f, delimiter=",")
    return table[:, :-1], table[:, -1].astype(np.int64)
