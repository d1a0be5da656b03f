"""One writer per output folder. Two trainers on one run_dir would interleave their metrics and overwrite each
other's rollouts and checkpoints, and two `sead eval` into one folder each other's dialogues, so a writer holds an
exclusive flock on the folder itself for as long as it writes. The lock is the kernel's, on the folder's inode:
deleting or replacing the `.lock` file beside it (which only tells a second writer the holder's PID) unlocks
nothing, and the kernel drops the lock when its holder exits, however it exits, so nothing a killed writer left
blocks the next one. (On a shared filesystem the lock needs one that supports flock, e.g. NFSv4.)"""

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

PID_FILE = RunLayout.lock.name  # the holder's PID, for the message a second writer gets


def run_dir_path(value) -> Path:
    """The absolute folder a `run_dir` setting names; an empty one, or one that cannot be resolved (a symlink
    loop), raises naming the field."""
    text = str(value).strip()
    if not text:
        raise SEADInputError("is empty; name the folder the run is written to", field="run_dir")
    try:
        return Path(text).expanduser().resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop, before Python 3.13
        raise SEADInputError(f"cannot be resolved to a folder: {e}", path=text, field="run_dir") from None


@contextmanager
def folder_lock(folder: Path, what: str = "run directory", setting: str = "run_dir") -> Iterator[None]:
    """Hold `folder` (created where missing) for the `with` block; raise SEADInputError naming the holder's PID if
    another process holds it, or naming the folder if it cannot be one. A folder this call created is removed again
    if the block fails before it holds any result (a bad model path or a dead simulator must not leave an empty run
    behind); where it fails in a folder it found, a `.lock` this call wrote there goes too."""
    created = not folder.exists()
    fd = _open_folder(folder, what, setting)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise SEADInputError(
                f"another process (PID {_holder(folder)}) is writing this {what}; wait for it to end, stop it, "
                f"or choose another {setting}",
                path=folder,
            ) from None
        had_pid_file = (folder / PID_FILE).exists()
        _write_pid(folder, what)
        try:
            yield
        except BaseException:
            if created and _scaffolding_only(folder):
                shutil.rmtree(folder, ignore_errors=True)
            elif not had_pid_file:  # a folder of the user's that was refused is left as it was found
                (folder / PID_FILE).unlink(missing_ok=True)
            raise
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


def run_dir_lock(run_dir: Path):
    """`folder_lock` of a training run's folder."""
    return folder_lock(run_dir)


def _open_folder(folder: Path, what: str, setting: str) -> int:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except (FileExistsError, NotADirectoryError):
        blocker = _first_non_folder(folder)
        if blocker == folder:
            raise SEADInputError(f"is a file, not a folder: choose another {setting}", path=folder) from None
        raise SEADInputError(
            f"is a file, so no folder can be made inside it for {setting}={folder}: choose another {setting}, "
            "or move this file away",
            path=blocker,
        ) from None
    except OSError as e:
        raise SEADInputError(f"cannot make or open this {what}: {e.strerror or e}", path=folder) from None


def _first_non_folder(path: Path) -> Path:
    """The first of `path` and the folders above it, from the root down, that is there but is not a folder."""
    return next((p for p in [*reversed(path.parents), path] if p.exists() and not p.is_dir()), path)


def _holder(folder: Path) -> str:
    try:
        return (folder / PID_FILE).read_text(encoding="ascii", errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"


def _write_pid(folder: Path, what: str) -> None:
    pid_file = folder / PID_FILE
    try:
        pid_file.unlink(missing_ok=True)  # a new file: one a former holder left may be read-only or a link
        pid_file.write_text(f"{os.getpid()}\n", encoding="ascii")
    except OSError as e:
        raise SEADInputError(f"cannot write into this {what}: {e.strerror or e}", path=folder) from None


def _scaffolding_only(run_dir: Path) -> bool:
    """Nothing but what a run writes before its first result: the lock, its config, empty folders."""
    layout = RunLayout(run_dir)
    setup = {layout.lock, layout.config, layout.usersim}
    return all(p in setup or (p.is_dir() and not any(p.iterdir())) for p in run_dir.iterdir())
