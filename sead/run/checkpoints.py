"""Checkpoint folders, whatever writes them (the embedded trainer, the verl outer loop): written under a temporary
name, given the trainer state and a manifest, renamed when complete. Resume takes the newest one whose files match
its manifest and says which newer ones it skipped and why."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from sead.errors import parse_json
from sead.run.layout import PARTIAL, CheckpointFolder, RunLayout, checkpoint_step
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
    """The checkpoint of the highest step that verifies, with its trainer state; each higher one is skipped with a
    warning naming it and what is wrong with it, and a folder not named as a checkpoint is named as ignored."""
    layout = RunLayout(run_dir)
    if layout.checkpoints_dir.is_dir():
        for other in sorted(p for p in layout.checkpoints_dir.iterdir() if checkpoint_step(p) is None):
            log.warning(
                "%s: ignored, not a checkpoint's name (step_NNNNNN); a copy kept there is never resumed from",
                other.relative_to(run_dir),
            )
    for path in layout.checkpoint_folders():
        where = path.relative_to(run_dir)
        if path.name.endswith(PARTIAL):
            log.warning("%s: skipped, a partial checkpoint (the run stopped while writing it)", where)
            continue
        problem = checkpoint_problem(path)
        if problem is None:
            return path, read_trainer_state(path)
        log.warning("%s: skipped, %s; falling back to an earlier checkpoint", where, problem)
    return None


def checkpoint_problem(path: Path) -> str | None:
    """None where checkpoint folder `path` is whole (its files match its manifest) and its trainer state is of the
    step its name says; else what is wrong."""
    problem = manifest_problem(path)
    if problem is not None:
        return problem
    try:
        state = read_trainer_state(path)
    except (OSError, ValueError) as e:
        return f"{CheckpointFolder(path).trainer_state.name} is unreadable ({type(e).__name__}: {e})"
    named = checkpoint_step(path)
    if named is not None and state.get("step") != named:
        return f"its trainer state is of step {state.get('step')!r}, not of step {named} (a folder renamed by hand?)"
    return None


def read_trainer_state(path: Path) -> dict:
    state = parse_json(CheckpointFolder(path).trainer_state.read_text(encoding="utf-8"))
    if not isinstance(state, dict):
        raise ValueError("not a JSON object")
    return state
