"""Timing the arms of an experiment against each other on a busy machine."""
from __future__ import annotations

import time
from typing import Callable


def seconds_in_turns(fns: dict[str, Callable[[], object]], reps: int = 3,
                     clock: Callable[[], float] = time.process_time) -> dict[str, float]:
    """Median seconds of each ``fn()`` over ``reps`` repeats, by ``clock`` (CPU time of
    this process by default). The fns take turns in every repeat, so a burst of load
    from elsewhere hits all of them alike; torch's global RNG is left as it was, so
    timing changes no other number of the run."""
    import statistics

    import torch

    times: dict[str, list[float]] = {name: [] for name in fns}
    with torch.random.fork_rng():
        for _ in range(reps):
            for name, fn in fns.items():
                start = clock()
                fn()
                times[name].append(clock() - start)
    return {name: float(statistics.median(t)) for name, t in times.items()}
