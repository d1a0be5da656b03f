"""One writer per run directory. Two trainers on one run_dir would interleave their metrics and overwrite each
other's rollouts and checkpoints, so a run holds an exclusive flock on RUN_DIR/.lock for as long as it writes.
The kernel drops the lock when its holder exits, however it exits: a lock file left by a killed run blocks
nothing. (On a shared filesystem the lock needs one that supports flock, e.g. NFSv4.)"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sead.errors import SEADInputError
from sead.run.layout import RunLayout


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir` for the `with` block; raise SEADInputError naming the holder's PID if another process
    holds it. A folder this call created is removed again if the block fails before it holds any result (a bad
    model path or a dead simulator must not leave an empty run behind)."""
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(RunLayout(run_dir).lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            raise SEADInputError(
                f"another process (PID {holder}) is writing this run directory; wait for it to "
                "end, stop it, or choose another run_dir",
                path=run_dir,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        try:
            yield
        except BaseException:
            if created and _scaffolding_only(run_dir):
                shutil.rmtree(run_dir, ignore_errors=True)
            raise
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


def _scaffolding_only(run_dir: Path) -> bool:
    """Nothing but what a run writes before its first result: the lock, its config, empty folders."""
    layout = RunLayout(run_dir)
    setup = {layout.lock, layout.config, layout.usersim}
    return all(p in setup or (p.is_dir() and not any(p.iterdir())) for p in run_dir.iterdir())
