"""The one look of long work in SEAD: a rich progress bar with counts, elapsed time and ETA.

A bar draws only on a terminal. Where the output is a log file or CI, each unfinished task prints a line every
`LOG_EVERY` seconds instead (done/total, elapsed, ETA), so a log shows the job is alive and how far it is.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

LOG_EVERY = 30.0  # seconds between progress lines where the output is not a terminal


def _clock(seconds: float | None) -> str:
    return "?" if seconds is None else str(timedelta(seconds=round(seconds)))


class LoggedProgress(Progress):
    """A rich Progress that, off a terminal, prints a status line per unfinished task every `log_every` seconds."""

    def __init__(self, *columns, log_every: float, **kwargs):
        super().__init__(*columns, **kwargs)
        self.log_every = log_every
        self._first: dict[TaskID, float] = {}  # each task's count when added: a resumed job's done work is not rate
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def logs(self) -> bool:
        return not self.console.is_terminal and not self.disable

    def add_task(self, description: str, *args, **kwargs) -> TaskID:
        """Off a terminal a task's first line comes at once: a log shows each phase start with its total."""
        task_id = super().add_task(description, *args, **kwargs)
        self._first[task_id] = self._tasks[task_id].completed
        if self.logs:
            self._print([self._line(self._tasks[task_id])])
        return task_id

    def eta(self, task: Task) -> float | None:
        """Seconds left at the mean rate since the task was added (rich's own estimate needs two updates within
        half a minute, which a training step of minutes never gives)."""
        done = task.completed - self._first.get(task.id, 0)
        if task.total is None or not done or not task.elapsed:
            return None
        return (task.total - task.completed) * task.elapsed / done

    def _line(self, t: Task) -> str:
        total = "?" if t.total is None else f"{t.total:g}"
        share = f" ({100 * t.completed / t.total:.0f}%)" if t.total else ""
        return (
            f"[progress] {Text.from_markup(t.description).plain}: {t.completed:g}/{total}{share}, "
            f"{_clock(t.elapsed or 0)} elapsed, ETA {_clock(self.eta(t))}"
        )

    def status_lines(self) -> list[str]:
        with self._lock:
            return [self._line(t) for t in self._tasks.values() if t.visible and not t.finished]

    def _print(self, lines: list[str]) -> None:
        for line in lines:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def _log(self) -> None:
        while not self._stop.wait(self.log_every):
            self._print(self.status_lines())

    def start(self) -> None:
        super().start()
        if self.logs and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._log, name="progress-log", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        super().stop()


def progress_bar(console: Console, log_every: float | None = None) -> LoggedProgress:
    return LoggedProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        log_every=LOG_EVERY if log_every is None else log_every,
    )


@contextmanager
def phase(console: Console, description: str, log_every: float | None = None) -> Iterator[None]:
    """One step of work that reports no progress of its own (a model conversion): 0/1 with its elapsed time, in a
    log every `log_every` seconds while it runs."""
    with progress_bar(console, log_every) as progress:
        task = progress.add_task(description, total=1)
        yield
        progress.advance(task)
