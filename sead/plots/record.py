"""A benchmark's record: its numbers as JSON for machines and its plot beside them for people."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from sead.run.atomic import write_text_atomic


def write_record(result: dict, out: Path, plot: Callable[[dict, Path], None]) -> Path:
    """`result` as JSON at `out` (replaced whole) and `plot(result, png)` beside it; returns the PNG's path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(result, indent=1) + "\n")
    png = out.with_suffix(".png")
    plot(result, png)
    return png
