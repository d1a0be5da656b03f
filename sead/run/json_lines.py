"""JSON-lines files of a run: metrics.jsonl (every line strict JSON, appended whole) and the dialogue logs of
rollouts/, validation/ and an evaluation, each read back the same way even when the process writing it was killed
mid-line."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

from sead.errors import SEADInputError, parse_json

log = logging.getLogger(__name__)


def finite_or_none(value):
    """`value` with every NaN and infinity (at any depth) replaced by None: bare `NaN` is not JSON, and tools
    other than Python's json module refuse the whole file for it."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def json_line(record: dict) -> str:
    return json.dumps(finite_or_none(record), allow_nan=False) + "\n"


class JsonLinesAppender:
    """Appends records to a file, each line with one write() on an O_APPEND descriptor, so an interrupt or a
    kill leaves whole lines only (or, killed inside the system call, one torn last line, which `read_json_lines`
    skips)."""

    def __init__(self, path: Path):
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: dict) -> None:
        try:
            os.write(self._fd, json_line(record).encode("utf-8"))
        except OSError as e:  # a descriptor's error names no file
            raise OSError(e.errno, e.strerror, str(self.path)) from None

    def close(self) -> None:
        os.close(self._fd)


def read_json_lines(path: Path) -> list[dict]:
    """The records of `path`. A last line that is not a JSON object (a write cut short by a kill) is skipped with
    a warning; a bad line before it is damage this code never makes, and raises naming the file and line."""
    lines = [
        (n, raw)
        for n, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if raw.strip()
    ]
    records = []
    for i, (n, raw) in enumerate(lines):
        try:
            record = parse_json(raw)
        except json.JSONDecodeError as e:
            record, problem = None, f"invalid JSON ({e.msg} at column {e.colno})"
        else:
            problem = None if isinstance(record, dict) else f"a JSON {type(record).__name__}, not an object"
        if problem is None:
            records.append(record)
        elif i == len(lines) - 1:
            log.warning(
                "%s:%d: skipping the last line, %s: the process writing it was stopped mid-line", path, n, problem
            )
        else:
            raise SEADInputError(problem, path=path, line=n)
    return records
