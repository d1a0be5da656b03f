"""One error type for bad user input, so every message names where the problem is."""

from __future__ import annotations

from pathlib import Path


class SEADInputError(ValueError):
    """Bad config, prompt, behaviour library or profile file.

    The message always starts with the location (file, line, field) so a user can jump straight to it.
    """

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None,
                 field: str | None = None):
        self.path, self.line, self.field, self.detail = path, line, field, message
        where = ""
        if path is not None:
            where = str(path) + (f":{line}" if line is not None else "")
        if field:
            where = f"{where} [{field}]" if where else f"[{field}]"
        super().__init__(f"{where}: {message}" if where else message)


def jsonl_records(text: str, path: str | Path):
    """Yield (line number, parsed JSON) for each non-blank line; bad JSON raises naming file and line."""
    import json

    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield lineno, json.loads(raw)
        except json.JSONDecodeError as e:
            raise SEADInputError(f"invalid JSON ({e.msg} at column {e.colno})", path=path, line=lineno) from None
