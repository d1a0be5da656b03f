"""What a folder given as run_dir holds, as a start has to know before it writes there: a run's results (which no
start from step 0 may write over), the scaffolding a start writes before its first result (a start that failed,
which a new start may take over), or files that are no run's at all (a user's own folder, never written into)."""

from __future__ import annotations

import shutil
from pathlib import Path

from sead.run.layout import PARTIAL, RunLayout

# What wandb and `sead report` add beside the layout's own entries, and an unreadable machine record kept aside.
EXTRA_NAMES = ("wandb", "report.html", "machine.json.unreadable")


def results(layout: RunLayout) -> list[str]:
    """What `layout` holds that a start from step 0 would write over, each described in a few words; [] where it
    holds nothing but a start's scaffolding."""
    held = []
    if layout.metrics.is_file() and (lines := _lines(layout.metrics)):
        held.append(f"{layout.metrics.name} with {lines} line{'s' * (lines != 1)}")
    checkpoints = [p.name for p in layout.checkpoint_folders() if not p.name.endswith(PARTIAL)]
    if checkpoints:
        held.append(f"checkpoints {', '.join(checkpoints)}")
    validations = sorted(p.name for p in layout.validation_dir.glob("*.json")) if layout.validation_dir.is_dir() else []
    if validations:
        held.append(f"validation results {', '.join(validations)}")
    if layout.warmup.summary.is_file():
        held.append("a finished warm-up (warmup/)")
    return held


def foreign(layout: RunLayout) -> list[str]:
    """The entries of `layout.path` that SEAD never writes into a run directory, sorted; a config.yaml without the
    usersim.json every start writes beside it is a user's own file."""
    known = {e.name for e in (layout.lock, layout.config, layout.usersim, layout.machine, layout.metrics)}
    known |= {e.name for e in (layout.tensorboard, layout.rollouts_dir, layout.validation_dir, layout.controller_dir)}
    known |= {layout.checkpoints_dir.name, layout.response_cache.name, layout.warmup.path.name, "verl", *EXTRA_NAMES}
    known |= {p.name for p in [*layout.resume_configs().values(), *layout.resume_usersims().values()]}
    odd = [p.name for p in layout.path.iterdir() if p.name not in known and not _temporary(p.name, known)]
    if layout.config.exists() and not layout.usersim.exists():
        odd.append(layout.config.name)
    return sorted(odd)


def clear_failed_start(layout: RunLayout) -> list[str]:
    """Remove what a start that failed before its first result left (every entry but the lock this process holds);
    return the names removed. Call only where `results` and `foreign` are both empty."""
    removed = []
    for entry in sorted(layout.path.iterdir()):
        if entry == layout.lock:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(entry.name)
    return removed


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def _temporary(name: str, known: set[str]) -> bool:
    """`.config.yaml.tmp`: a file `write_text_atomic` was writing when its process stopped."""
    return name.startswith(".") and name.endswith(".tmp") and name[1:-4] in known
