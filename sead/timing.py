"""Best-of-n wall-clock timing, for the benchmarks (the least disturbed run is the closest to what the code costs
on a shared, noisy machine)."""

from __future__ import annotations

import time


def timed(fn, repeats: int) -> float:
    """Seconds of the fastest of `repeats` calls of `fn`."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
