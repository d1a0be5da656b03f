"""How a training command takes a run directory: a fresh run writes only into a new or empty folder (or over the
scaffolding of a start that failed before its first result), never over an earlier run or a user's own files; a
resume needs a run to resume and continues from its checkpoint of the highest step that verifies, under the settings
and the user simulator that run was made with, and what was measured after that checkpoint is measured again. A
resume refuses to start from step 0 over checkpoints it cannot verify. Call it while holding `run_dir_lock`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from sead.errors import SEADInputError
from sead.run.checkpoints import latest_checkpoint
from sead.run.contents import clear_failed_start, foreign, results
from sead.run.frozen_config import resume_config, write_start_config
from sead.run.layout import PARTIAL, RunLayout
from sead.run.validation_table import read_validation

log = logging.getLogger(__name__)


@dataclass
class RunStart:
    checkpoint: Path | None  # the checkpoint to continue from; None: start at step 0
    state: dict | None  # its trainer state (step, controller, counters)
    config_file: Path  # the config in effect, for processes that read it from disk (verl's workers)

    @property
    def step(self) -> int:
        return int(self.state["step"]) if self.state else 0


def start_or_resume(run_dir: Path, cfg: DictConfig, environment: dict) -> RunStart:
    """`environment`: what replies are judged by (`sead.usersim.base.environment_identity`)."""
    layout = RunLayout(run_dir)
    if not cfg.resume:
        _take_for_a_new_run(layout)
        return RunStart(None, None, write_start_config(run_dir, cfg, environment))
    if not layout.config.exists() and not layout.metrics.exists():
        raise SEADInputError(
            f"resume=true but {run_dir} holds no run (no {layout.config.name}, no "
            f"{layout.metrics.name}); check run_dir, or leave out resume=true to start a new run "
            "there",
            field="run_dir",
        )
    found = latest_checkpoint(run_dir)
    if found is None:
        unverified = [p.name for p in layout.checkpoint_folders() if not p.name.endswith(PARTIAL)]
        if unverified:  # a start from step 0 would write over them, and over the metrics of their steps
            raise SEADInputError(
                f"resume=true, but no checkpoint of this run verifies (the warnings above say why), so it can only "
                f"start again from step 0, which would write over what it holds: {'; '.join(results(layout))}. "
                "Nothing was changed. Restore a checkpoint to continue the run, or start a new run in another "
                "run_dir (or move these files away first)",
                path=run_dir,
            )
        log.warning("resume=true but %s holds no checkpoint yet: starting again from step 0", run_dir)
        return RunStart(None, None, write_start_config(run_dir, cfg, environment))
    path, state = found
    step = int(state["step"])
    config_file = resume_config(run_dir, cfg, step, environment)
    discard_measured_after(layout, step)
    return RunStart(path, state, config_file)


def _take_for_a_new_run(layout: RunLayout) -> None:
    """Refuse a folder that holds a run or files that are no run's; clear what a failed start left."""
    if not layout.path.exists():
        return
    held = results(layout)
    if held:  # its metrics, rollouts and checkpoints would mix with this run's
        raise SEADInputError(
            f"already holds a run ({'; '.join(held)}); pass resume=true to continue it or choose another run_dir",
            path=layout.path,
            field="run_dir",
        )
    others = foreign(layout)
    if others:
        raise SEADInputError(
            f"holds files that are not a SEAD run's ({', '.join(others[:8])}{', ...' if len(others) > 8 else ''}); "
            "a new run goes into a new or empty folder: choose another run_dir",
            path=layout.path,
            field="run_dir",
        )
    removed = clear_failed_start(layout)
    if removed:
        log.warning(
            "%s holds what a start that failed before its first result left (%s): starting afresh over it",
            layout.path,
            ", ".join(removed),
        )


def discard_measured_after(layout: RunLayout, step: int) -> None:
    """Remove the validations measured after checkpoint `step`: the resume replays the steps they measured, so they
    describe weights that are about to be trained again (with changed settings, other weights); each is measured
    again where the replay reaches it, and its metrics line, dropped with the steps after `step`, written anew."""
    for iteration in layout.validated_iterations():
        path = layout.validation_metrics(iteration)
        measured = read_validation(path)["at"]["step"]
        if measured > step:
            path.unlink()
            layout.validation_dialogues(iteration).unlink(missing_ok=True)
            log.warning(
                "%s measured step %d, which this resume from step %d replays: it is measured again",
                path.relative_to(layout.path),
                measured,
                step,
            )
