"""sead/host_memory.py: `import sead` asks torch for huge pages (unless told not to), and after
`keep_freed_memory` a freed tensor's memory stays on glibc's heap for the next allocation instead of going back to
the system. Each check runs in a fresh interpreter: both settings are per process."""

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A 24 MB tensor made, touched and freed; glibc's own accounting (mallinfo2) of where it came from and where it
# went. By default glibc maps an allocation that size with mmap and unmaps it on free: the next one faults on new
# pages. With the freed memory kept, it comes from the heap and stays there, free for the next allocation.
WHERE_FREED_MEMORY_GOES = """
import ctypes, json, sys, torch
from sead import host_memory
FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in FIELDS.split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
if sys.argv[1] == "keep":
    assert host_memory.keep_freed_memory()
t = torch.empty(24 * 2**20, dtype=torch.uint8).fill_(1)
held = libc.mallinfo2()
del t
freed = libc.mallinfo2()
print(json.dumps({"mapped_while_held": held.hblkhd, "free_on_heap_after": freed.fordblks}))
"""


def run(code: str, *args: str, env: dict | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def glibc_with_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")  # glibc >= 2.33
    except OSError:
        return False


@pytest.mark.skipif(not glibc_with_mallinfo2(), reason="glibc's malloc and its accounting")
def test_freed_memory_stays_in_the_process_for_the_next_allocation():
    small_pages = {**os.environ, "THP_MEM_ALLOC_ENABLE": "0"}  # torch's plain allocation path
    default, kept = (json.loads(run(WHERE_FREED_MEMORY_GOES, way, env=small_pages)) for way in ("default", "keep"))
    size = 24 * 2**20
    assert default["mapped_while_held"] >= size and default["free_on_heap_after"] < size, default  # the baseline
    assert kept["mapped_while_held"] < size and kept["free_on_heap_after"] >= size, kept


HUGE_PAGES = """
import json, os, torch
t = torch.ones(64 * 2**20 // 4)
huge = [int(line.split()[1]) for line in open("/proc/self/smaps_rollup") if line.startswith("AnonHugePages")]
print(json.dumps({"env": os.environ.get("THP_MEM_ALLOC_ENABLE"), "huge_kb": huge[0] if huge else None}))
"""


def thp_mode() -> str:
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    text = path.read_text() if path.exists() else "[never]"
    return text[text.index("[") + 1 : text.index("]")]


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/smaps_rollup")
def test_import_sead_asks_torch_for_huge_pages_unless_told_not_to():
    unset = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}  # this process's sead set it
    with_sead = json.loads(run("import sead\n" + HUGE_PAGES, env=unset))
    assert with_sead["env"] == "1"
    if thp_mode() in ("madvise", "always"):  # where the kernel grants them
        assert with_sead["huge_kb"] >= 32 * 1024, with_sead
    refused = json.loads(run("import sead\n" + HUGE_PAGES, env={**os.environ, "THP_MEM_ALLOC_ENABLE": "0"}))
    assert refused["env"] == "0"
    if thp_mode() == "madvise":  # only torch's advice gives huge pages in this mode
        assert refused["huge_kb"] == 0, refused
