"""Where SEAD keeps what it makes once per machine (the converted demo model, compiled kernels)."""

from __future__ import annotations

import os
from pathlib import Path


def sead_cache_dir() -> Path:
    """`$SEAD_CACHE_DIR`, else `~/.cache/sead`."""
    return Path(os.environ.get("SEAD_CACHE_DIR", Path.home() / ".cache" / "sead"))
