"""A folder's manifest: every file with its size and SHA-256, written last. A folder whose files all match it is
complete and unchanged; a file cut short (disk full, a copy interrupted), missing, or overwritten in place shows
up as a mismatch instead of as a loader traceback or, worse, as weights that load and train on garbage."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from sead.errors import parse_json
from sead.run.atomic import write_text_atomic

MANIFEST = "manifest.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: Path) -> None:
    files = {
        p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    write_text_atomic(folder / MANIFEST, json.dumps({"files": files}, indent=1))


def manifest_problem(folder: Path) -> str | None:
    """None when every file the manifest lists is there with its size and hash; else the first problem."""
    try:
        files = [
            (name, int(want["bytes"]), str(want["sha256"]))
            for name, want in parse_json((folder / MANIFEST).read_text(encoding="utf-8"))["files"].items()
        ]
    except FileNotFoundError:
        return f"no {MANIFEST} (an unfinished write, or a format older than manifests), so it is not trusted"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return f"{MANIFEST} is unreadable ({type(e).__name__}: {e})"
    for name, size, sha256 in files:
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, manifest says {size}"
        if _sha256(path) != sha256:
            return f"{name} does not match its SHA-256 in the manifest (changed after it was written)"
    return None
