"""How SEAD's tensor threads wait between parallel regions: briefly, then asleep, so that a machine shared with
other work slows SEAD in proportion rather than by an order of magnitude.

torch's CPU build runs its kernels on GNU OpenMP, whose idle threads spin for 300,000 iterations (milliseconds)
before they sleep. Alone, the spin catches the next parallel region at once. Beside other work it is ruinous: a
thread spins out its time slice waiting for a peer the scheduler has taken off its core, and a decoding step is
hundreds of regions. On a 2-vCPU AMD EPYC (Zen 3) beside one busy loop per core, fp32 decoding kept 0.12-0.27 of
its speed alone that way; with a spin of 1,000 iterations (tens of microseconds) it keeps about half, and alone it
runs as fast as with the long spin, which `OMP_WAIT_POLICY=PASSIVE` (no spin at all) does not
(`benchmarks/shared_machine.py`, docs/performance.md).

`share_cores()` runs on `import sead`: GNU OpenMP reads its settings once, when torch loads it, so a script that
imports torch before SEAD keeps OpenMP's defaults. A wait policy or spin count already in the environment wins.
"""

from __future__ import annotations

import os

SPIN_ENV, POLICY_ENV = "GOMP_SPINCOUNT", "OMP_WAIT_POLICY"
SPIN_COUNT = "1000"


def share_cores() -> None:
    if SPIN_ENV not in os.environ and POLICY_ENV not in os.environ:
        os.environ[SPIN_ENV] = SPIN_COUNT
