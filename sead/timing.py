"""Best-of-n wall-clock timing, for the benchmarks (the least disturbed run is the closest to what the code costs
on a shared, noisy machine)."""

from __future__ import annotations

import time


def timed(fn, repeats: int, sync=None) -> float:
    """Seconds of the fastest of `repeats` calls of `fn`. `sync` (e.g. torch.cuda.synchronize) runs before the
    clock starts and before it stops, so that work a GPU queued is counted where it was asked for."""
    best = float("inf")
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        best = min(best, time.perf_counter() - t0)
    return best
