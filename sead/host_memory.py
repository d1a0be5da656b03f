"""How a SEAD process takes host memory for tensors: fewer page faults in a training update.

A CPU update allocates and frees gigabytes of activations (a micro-batch of whole dialogues holds several GB);
each fresh page costs a page fault and zeroing in the kernel. Measured on the 2-vCPU VM
(2026-11-27), an update of 10 whole dialogues took 0.7-2.7M page faults and 6-15 s of system CPU with the
defaults (the most in a process's first update). Two settings cut that:

- `prefer_huge_pages()` (run on `import sead`): torch's own `THP_MEM_ALLOC_ENABLE`, which advises transparent huge
  pages for tensors of 2 MB and more, so one fault maps 2 MB instead of 4 kB. torch reads it once, on its first
  allocation, so it is set before torch loads; `THP_MEM_ALLOC_ENABLE=0` in the environment keeps it off, and a
  process that imported torch before SEAD keeps torch's default. Where the kernel's THP mode is `never`, the
  advice is ignored.
- `keep_freed_memory()` (the trainer, at start): glibc serves allocations under 32 MB from its heap and keeps what
  is freed there instead of returning it to the system, so the next micro-batch reuses pages already faulted in.
  By default glibc maps each large allocation afresh and raises that limit only as it sees frees. The resident
  size then stays near the update's peak between updates. No-op off glibc.
- `give_back()` (the trainer, where rollouts and the warm-up end and before each micro-batch of an update): what
  was freed goes back to the system, so the next phase's peak does not stand on the holes the last one left
  (`benchmarks/demo_memory.py` measures the demo's peak).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

THP_ENV = "THP_MEM_ALLOC_ENABLE"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit


def prefer_huge_pages() -> None:
    os.environ.setdefault(THP_ENV, "1")


@functools.cache
def _libc():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:  # no C library to load
        return None


def give_back() -> bool:
    """Return the heap's free pages to the system (glibc's `malloc_trim`); False where there is no such call."""
    trim = getattr(_libc(), "malloc_trim", None)
    return bool(trim(0)) if trim is not None else False


@functools.cache
def keep_freed_memory() -> bool:
    """True where glibc took the settings (once per process)."""
    mallopt = getattr(_libc(), "mallopt", None)  # None off glibc (musl has no mallopt)
    if mallopt is None:
        return False
    kept = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX) == 1
    return mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1 and kept
