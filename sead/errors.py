"""One error type for bad user input, so every message names where the problem is."""

from __future__ import annotations

import codecs
import json
from pathlib import Path


class SEADInputError(ValueError):
    """Bad config, prompt, behaviour library or profile file.

    The message always starts with the location (file, line, field) so a user can jump straight to it.
    """

    def __init__(
        self, message: str, *, path: str | Path | None = None, line: int | None = None, field: str | None = None
    ):
        self.path, self.line, self.field, self.detail = path, line, field, message
        where = ""
        if path is not None:
            where = str(path) + (f":{line}" if line is not None else "")
        if field:
            where = f"{where} [{field}]" if where else f"[{field}]"
        super().__init__(f"{where}: {message}" if where else message)


def parse_json(text: str | bytes):
    """`json.loads`, with nesting too deep for Python's reader (a RecursionError) raised as the JSONDecodeError
    any other bad JSON raises, so every reader's handler of bad JSON names the file instead of a traceback."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply to read", text if isinstance(text, str) else "", 0) from None


def jsonl_records(text: str, path: str | Path):
    """Yield (line number, parsed JSON) for each non-blank line; bad JSON raises naming file and line."""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield lineno, parse_json(raw)
        except json.JSONDecodeError as e:
            raise SEADInputError(f"invalid JSON ({e.msg} at column {e.colno})", path=path, line=lineno) from None


def read_user_bytes(path: str | Path, what: str) -> bytes:
    """The bytes of a file the user gave; a missing file, a directory or an unreadable one raises naming it."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SEADInputError(f"cannot read {what}: no such file", path=path) from None
    except IsADirectoryError:
        raise SEADInputError(f"cannot read {what}: it is a directory, not a file", path=path) from None
    except OSError as e:
        raise SEADInputError(f"cannot read {what}: {e.strerror or e}", path=path) from None


def read_user_text(path: str | Path, what: str) -> str:
    """The text of a file the user gave (prompt, behaviour library, rules, profiles), read as UTF-8.

    Every way such a file can be unusable (missing, a directory, binary, another encoding) raises naming the file,
    so no decoder traceback reaches the user. A leading byte-order mark, as some Windows editors write, is dropped.
    """
    raw = read_user_bytes(path, what).removeprefix(codecs.BOM_UTF8)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SEADInputError(
            f"{what} is not UTF-8 text (undecodable byte {raw[e.start]:#04x}); save it as UTF-8",
            path=path,
            line=raw.count(b"\n", 0, e.start) + 1,
        ) from None
    # NUL is valid UTF-8 but never appears in a text file: it marks a binary file given by mistake.
    nul = text.find("\0")
    if nul >= 0:
        raise SEADInputError(f"{what} is a binary file, not text", path=path, line=text.count("\n", 0, nul) + 1)
    return text
