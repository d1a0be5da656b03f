"""How a training command takes a run directory: a fresh run never writes over an earlier one, a resume needs a
run to resume and continues from its newest checkpoint that verifies, under the settings and the user simulator that
run was made with. Call it while holding `run_dir_lock`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from sead.errors import SEADInputError
from sead.run.checkpoints import latest_checkpoint
from sead.run.frozen_config import resume_config, write_start_config
from sead.run.layout import RunLayout

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
        if layout.metrics.exists():  # its metrics, rollouts and checkpoints would mix with this run's
            raise SEADInputError(
                f"{run_dir} already holds a run; pass resume=true to continue it or choose another run_dir",
                field="run_dir",
            )
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
        log.warning("resume=true but %s holds no complete checkpoint: starting again from step 0", run_dir)
        return RunStart(None, None, write_start_config(run_dir, cfg, environment))
    path, state = found
    return RunStart(path, state, resume_config(run_dir, cfg, int(state["step"]), environment))
