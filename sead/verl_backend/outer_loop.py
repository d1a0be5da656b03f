"""SEAD's four phases around verl: one verl run per curriculum iteration, the controller in between.

Per iteration: the controller draws the iteration's profiles (phase 1) into a parquet; verl trains
`steps_per_iteration` GRPO steps on them (phases 2-3), each dialogue played by SEAD's agent loop, which writes it to
rollouts/; then the controller observes every dialogue of those steps and reweights (phase 4), and the iteration's
HF weights become the next run's starting model. This is the design's fallback to a trainer hook inside verl: it
touches no private verl method, and because the controller reweights once per iteration (every `steps_per_iteration`
steps, in both backends), the controller sees exactly what it would see in the embedded loop. What a new run per
iteration changes: the optimiser state and verl's KL reference restart from the previous iteration's weights (as the
original SEAD scripts did).

The run directory is the embedded trainer's (`sead.run.layout`), written through the same pieces (lock, manifests,
frozen config, step records, controller files, validation metrics). verl's own files (parquets, logs, FSDP
checkpoints) go to verl/iter_NNN/.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

import yaml
from omegaconf import DictConfig

from sead.config import build_controller, build_scenario, build_usersim, group_config
from sead.controller.plausibility import training_profiles
from sead.dialogue.episode import Episode
from sead.dialogue.rollout_log import read_rollouts
from sead.errors import SEADInputError
from sead.hack_monitor import HackMonitor
from sead.run.checkpoints import commit_checkpoint, new_checkpoint_dir
from sead.run.fixed_profiles import fixed_profiles
from sead.run.json_lines import read_json_lines
from sead.run.layout import CheckpointFolder, RunLayout
from sead.run.lock import run_dir_lock, run_dir_path
from sead.run.metrics_log import MetricsLogger
from sead.run.start import start_or_resume
from sead.run.steps import finish_step, write_controller_state, write_validation_metrics
from sead.usersim.base import environment_identity
from sead.verl_backend.dataset import AGENT_NAME, training_rows, validation_rows, write_rows
from sead.verl_backend.launcher import (
    RunFiles,
    check_sead_config,
    run_verl,
    verl_environment,
    verl_overrides,
    verl_settings,
)

VerlRunner = Callable[[list[str], dict, Path], None]


class VerlTrainer:
    def __init__(self, cfg: DictConfig, runner: VerlRunner = run_verl):
        self.cfg, self.runner = cfg, runner
        self.vs = verl_settings(cfg)
        self.tc = check_sead_config(cfg, self.vs)
        self.scenario = build_scenario(cfg)
        self.monitor = HackMonitor.for_scenario(self.scenario)  # per-step reward-hacking monitors
        self.controller = build_controller(cfg, self.scenario)
        self.plausibility = group_config(cfg, "controller").plausibility
        self.checked: dict[int, dict | None] = {}  # the plausibility pass's counts per step, for its metrics line
        self.layout = RunLayout(run_dir_path(cfg.run_dir))
        self.model_path, self.step = str(cfg.model.path), 0
        # identity only; the agent-loop workers build their own simulators
        start = start_or_resume(self.layout.path, cfg, environment_identity(build_usersim(cfg, self.scenario)))
        self.config_file = start.config_file  # what the agent-loop workers read: the settings in effect
        if start.checkpoint:
            self.controller.load_state_dict(start.state["controller"])
            self.step, self.model_path = start.step, str(CheckpointFolder(start.checkpoint).model)
        if self.step % self.tc.steps_per_iteration:
            raise SEADInputError(
                f"the newest checkpoint (step {self.step}) is not at an iteration boundary", field="resume"
            )
        self.val_profiles = fixed_profiles(self.scenario, self.tc.validation.profiles, self.tc.validation.seed)
        self.layout.create()

    @property
    def row_format(self) -> dict:
        """What every dataset row's prompt is made of (`training_rows`, `validation_rows`)."""
        return {"system_prompt": self.scenario.agent_system_prompt(), "sop_role": str(self.cfg.dialogue.sop_role)}

    def _files(self, iteration: int) -> RunFiles:
        return RunFiles(
            self.layout.verl_iteration(iteration),
            model_path=self.model_path,
            validate_first=iteration == 0,
            sead_config=self.config_file,
        )

    def prepare_iteration(self, iteration: int) -> list[str]:
        """Write the iteration's data and agent-loop config; return the verl overrides that run it."""
        spi = self.tc.steps_per_iteration
        # A rerun after a crash appends to these files: start them afresh.
        stale = [self.layout.rollouts(iteration * spi + k) for k in range(1, spi + 1)]
        stale += [self.layout.validation_dialogues(k) for k in [iteration + 1] + ([0] if iteration == 0 else [])]
        for path in stale:
            path.unlink(missing_ok=True)
        by_step = {}
        for step in range(iteration * spi + 1, (iteration + 1) * spi + 1):
            # step by step, as the embedded loop draws and checks them: the same profiles, asked the same
            by_step[step], self.checked[step] = asyncio.run(
                training_profiles(
                    self.controller,
                    self.tc.profiles_per_step,
                    self.scenario,
                    self.plausibility,
                    run_seed=int(self.cfg.seed),
                    step=step,
                )
            )
        files = self._files(iteration)
        files.plays_file.unlink(missing_ok=True)  # a rerun after a crash plays every row afresh
        write_rows(training_rows(by_step, **self.row_format), files.train_file)
        write_rows(validation_rows(self.val_profiles, **self.row_format), files.val_file)
        files.agent_loop_config.write_text(
            yaml.safe_dump(
                [
                    {
                        "name": AGENT_NAME,
                        "_target_": "sead.verl_backend.agent_loop.SEADDialogueAgentLoop",
                        "sead_config": str(self.config_file),
                        "plays_file": str(files.plays_file),
                        "steps_per_iteration": spi,
                        # verl validates before training (first run only) and after its last step
                        "validations": [0, 1] if files.validate_first else [iteration + 1],
                    }
                ]
            ),
            encoding="utf-8",
        )
        return verl_overrides(self.cfg, self.vs, self.tc, files)

    def run(self) -> Path:
        spi, total = self.tc.steps_per_iteration, self.tc.iterations
        logger = MetricsLogger(
            self.layout,
            tensorboard=self.tc.logging.tensorboard,
            wandb=False,
            resume_step=self.step if self.cfg.resume else None,
        )
        try:
            for iteration in range(self.step // spi, total):
                overrides = self.prepare_iteration(iteration)
                files = self._files(iteration)
                self.runner(overrides, verl_environment(files.metrics_file), files.log_file)
                if iteration == 0:
                    self._validation_metrics(0)
                self._feed_controller(iteration, logger, files.metrics_file)
                self._validation_metrics(iteration + 1)
                self._checkpoint(files.hf_model(spi))
        finally:
            logger.close()
        return self.layout.path

    def _feed_controller(self, iteration: int, logger: MetricsLogger, verl_metrics: Path) -> None:
        """Phase 4 from the dialogues verl played: observe each, count each step, log SEAD's numbers per step."""
        verl_steps = _read_verl_metrics(verl_metrics)
        for local in range(1, self.tc.steps_per_iteration + 1):
            self.step = iteration * self.tc.steps_per_iteration + local
            path = self.layout.rollouts(self.step)
            if not path.exists():
                raise RuntimeError(f"verl finished but wrote no dialogues for step {self.step} ({path})")
            episodes = [Episode.from_dict(r) for r in read_rollouts(path)]
            record = finish_step(
                episodes,
                controller=self.controller,
                space=self.scenario.space,
                layout=self.layout,
                monitor=self.monitor,
            )
            record.update = {"verl": verl_steps.get(local, {})}
            record.plausibility = self.checked.get(self.step)
            logger.log(self.step, record.to_dict())
        write_controller_state(self.controller, self.layout, iteration + 1)

    def _validation_metrics(self, k: int) -> None:
        path = self.layout.validation_dialogues(k)
        if path.exists():
            write_validation_metrics(
                [Episode.from_dict(r) for r in read_rollouts(path)],
                space=self.scenario.space,
                seed=self.tc.validation.seed,
                layout=self.layout,
                iteration=k,
                step=k * self.tc.steps_per_iteration,
                train_minutes=None,
            )

    def _checkpoint(self, hf_dir: Path) -> None:
        """The embedded checkpoint layout around verl's HF export, so eval, audit-mask and resume read it."""
        if not (hf_dir / "config.json").is_file():
            raise RuntimeError(f"verl wrote no HF model at {hf_dir} (is hf_model in checkpoint.save_contents?)")
        tmp = new_checkpoint_dir(self.layout.path, self.step)
        shutil.copytree(hf_dir, tmp.model)
        state = {"step": self.step, "controller": self.controller.state_dict(), "backend": "verl"}
        self.model_path = str(commit_checkpoint(self.layout.path, self.step, state).model)


def _read_verl_metrics(path: Path) -> dict[int, dict]:
    """verl's file logger: one {"step", "data"} line per logged step (validation lines share a step)."""
    out: dict[int, dict] = {}
    for rec in read_json_lines(path) if path.exists() else []:
        out.setdefault(int(rec["step"]), {}).update(rec["data"])
    return out


def train_with_verl(cfg: DictConfig, runner: VerlRunner = run_verl) -> Path:
    with run_dir_lock(run_dir_path(cfg.run_dir)):
        return VerlTrainer(cfg, runner).run()
