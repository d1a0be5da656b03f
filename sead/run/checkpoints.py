"""Checkpoint folders, whatever writes them (the embedded trainer, the verl outer loop): written under a temporary
name, given the trainer state and a manifest, renamed when complete. Resume takes the newest one whose files match
its manifest and says which newer ones it skipped and why."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from sead.run.layout import PARTIAL, CheckpointFolder, RunLayout
from sead.run.manifest import manifest_problem, write_manifest

log = logging.getLogger(__name__)


def new_checkpoint_dir(run_dir: Path, step: int) -> CheckpointFolder:
    """An empty folder to write step `step`'s checkpoint into; `commit_checkpoint` makes it the checkpoint."""
    tmp = RunLayout(run_dir).partial_checkpoint(step)
    shutil.rmtree(tmp.path, ignore_errors=True)
    tmp.path.mkdir(parents=True)
    return tmp


def commit_checkpoint(run_dir: Path, step: int, state: dict) -> CheckpointFolder:
    """Add the trainer state (step, controller, counters) and the manifest to the folder `new_checkpoint_dir`
    gave, then make it step `step`'s checkpoint."""
    layout = RunLayout(run_dir)
    tmp, final = layout.partial_checkpoint(step), layout.checkpoint(step)
    tmp.trainer_state.write_text(json.dumps(state, indent=1), encoding="utf-8")
    write_manifest(tmp.path)  # last: a folder with a matching manifest was written completely
    shutil.rmtree(final.path, ignore_errors=True)  # a replayed step after a resume rewrites its checkpoint
    tmp.path.rename(final.path)
    return final


def latest_checkpoint(run_dir: Path) -> tuple[Path, dict] | None:
    """The newest checkpoint that verifies, with its trainer state; each newer one is skipped with a warning
    naming it and what is wrong with it."""
    for path in RunLayout(run_dir).checkpoint_folders():
        where = path.relative_to(run_dir)
        if path.name.endswith(PARTIAL):
            log.warning("%s: skipped, a partial checkpoint (the run stopped while writing it)", where)
            continue
        problem = manifest_problem(path)
        if problem is None:
            state = CheckpointFolder(path).trainer_state
            try:
                return path, json.loads(state.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                problem = f"{state.name} is unreadable ({type(e).__name__}: {e})"
        log.warning("%s: skipped, %s; falling back to an earlier checkpoint", where, problem)
    return None
