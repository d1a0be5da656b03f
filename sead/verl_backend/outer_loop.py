"""SEAD's four phases around verl: one verl run per curriculum iteration, the controller in between.

Per iteration: the controller draws the iteration's profiles (phase 1) into a parquet; verl trains
`steps_per_iteration` GRPO steps on them (phases 2-3), each dialogue played by SEAD's agent loop, which writes
it to rollouts/; then the controller observes every dialogue of those steps and reweights (phase 4), and the
iteration's HF weights become the next run's starting model. This is the design's fallback to a trainer hook
inside verl: it touches no private verl method, and because controller.update_every equals
steps_per_iteration, the controller sees exactly what it would see in the embedded loop. What a new run per
iteration changes: the optimiser state and verl's KL reference restart from the previous iteration's weights
(as the original SEAD scripts did).

The run directory has the embedded layout (sead/trainer/loop.py): config.yaml, usersim.json, rollouts/,
validation/, controller/, metrics.jsonl, tensorboard/, checkpoints/step_NNNNNN/{model/, trainer_state.json}.
verl's own files (parquets, logs, FSDP checkpoints) go to verl/iter_NNN/.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import yaml
from omegaconf import DictConfig, OmegaConf

from sead.config import build_controller, build_scenario, build_usersim
from sead.controller import make_curriculum, write_controller_report
from sead.controller.controller import ProfileController
from sead.dialogue.episode import Episode
from sead.dialogue.rollout_log import read_rollouts
from sead.errors import SEADInputError
from sead.metrics import compute_metrics
from sead.trainer.checkpoint import COMPLETE, latest_checkpoint, step_dir
from sead.trainer.metrics_log import MetricsLogger
from sead.verl_backend.dataset import profile_rows, write_rows
from sead.verl_backend.launcher import (RunFiles, check_sead_config, run_verl, verl_environment, verl_overrides,
                                        verl_settings)

VerlRunner = Callable[[list[str], dict, Path], None]


class VerlTrainer:
    def __init__(self, cfg: DictConfig, runner: VerlRunner = run_verl):
        self.cfg, self.runner = cfg, runner
        self.vs = verl_settings(cfg)
        self.tc = check_sead_config(cfg, self.vs)
        self.scenario = build_scenario(cfg)
        self.controller = build_controller(cfg, self.scenario)
        self.run_dir = Path(str(cfg.run_dir)).resolve()
        self.model_path, self.step = str(cfg.model.path), 0
        resume = latest_checkpoint(self.run_dir) if cfg.resume else None
        if not cfg.resume and (self.run_dir / "metrics.jsonl").exists():
            raise SEADInputError(f"{self.run_dir} already holds a run; pass resume=true to continue it or choose "
                                 "another run_dir", field="run_dir")
        if resume:
            path, state = resume
            self.controller.load_state_dict(state["controller"])
            self.step, self.model_path = int(state["step"]), str(path / "model")
        if self.step % self.tc.steps_per_iteration:
            raise SEADInputError(f"the newest checkpoint (step {self.step}) is not at an iteration boundary",
                                 field="resume")
        rule = make_curriculum("fixed", self.scenario.space, self.scenario.default_marginals)
        self.val_profiles = ProfileController(self.scenario, rule, seed=self.tc.validation.seed).sample(
            self.tc.validation.profiles)
        self._write_run_files()

    def _write_run_files(self) -> None:
        for sub in ("rollouts", "validation", "controller", "checkpoints", "verl"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(self.cfg), encoding="utf-8")
        user = build_usersim(self.cfg, self.scenario)  # identity only; the agent-loop workers build their own
        (self.run_dir / "usersim.json").write_text(json.dumps(user.identity(), indent=2), encoding="utf-8")

    def _rows(self, profiles, split: str) -> list[dict]:
        return profile_rows(profiles, system_prompt=self.scenario.agent_system_prompt(),
                            sop_role=str(self.cfg.dialogue.sop_role), split=split)

    def prepare_iteration(self, iteration: int) -> list[str]:
        """Write the iteration's data and agent-loop config; return the verl overrides that run it."""
        spi = self.tc.steps_per_iteration
        work = self.run_dir / "verl" / f"iter_{iteration:03d}"
        # A rerun after a crash appends to these files: start them afresh.
        stale = [self.run_dir / "rollouts" / f"step_{iteration * spi + k:06d}.jsonl" for k in range(1, spi + 1)]
        stale += [self.run_dir / "validation" / f"iter_{k:03d}.jsonl"
                  for k in [iteration + 1] + ([0] if iteration == 0 else [])]
        for path in stale:
            path.unlink(missing_ok=True)
        profiles = self.controller.sample(self.tc.profiles_per_step * spi)
        files = RunFiles(train_file=write_rows(self._rows(profiles, "train"), work / "train.parquet"),
                         val_file=write_rows(self._rows(self.val_profiles, "val"), work / "val.parquet"),
                         agent_loop_config=work / "agent_loop.yaml", checkpoint_dir=work / "checkpoints",
                         model_path=self.model_path, validate_first=iteration == 0)
        files.agent_loop_config.write_text(yaml.safe_dump([{
            "name": "sead_dialogue", "_target_": "sead.verl_backend.agent_loop.SEADDialogueAgentLoop",
            "sead_config": str(self.run_dir / "config.yaml"), "step_offset": iteration * spi,
            "steps_per_iteration": spi}]), encoding="utf-8")
        return verl_overrides(self.cfg, self.vs, self.tc, files)

    def run(self) -> Path:
        spi, total = self.tc.steps_per_iteration, self.tc.iterations
        logger = MetricsLogger(self.run_dir, tensorboard=self.tc.logging.tensorboard, wandb=False,
                               resume_step=self.step if self.cfg.resume else None)
        try:
            for iteration in range(self.step // spi, total):
                work = self.run_dir / "verl" / f"iter_{iteration:03d}"
                overrides = self.prepare_iteration(iteration)
                self.runner(overrides, verl_environment(work / "metrics.jsonl"), work / "verl.log")
                if iteration == 0:
                    self._validation_metrics(0)
                self._feed_controller(iteration, logger, work / "metrics.jsonl")
                self._validation_metrics(iteration + 1)
                self._checkpoint(work / "checkpoints" / f"global_step_{spi}" / "actor" / "huggingface")
        finally:
            logger.close()
        return self.run_dir

    def _feed_controller(self, iteration: int, logger: MetricsLogger, verl_metrics: Path) -> None:
        """Phase 4 from the dialogues verl played: observe each, count each step, log SEAD's numbers per step."""
        verl_steps = _read_verl_metrics(verl_metrics)
        for local in range(1, self.tc.steps_per_iteration + 1):
            self.step = iteration * self.tc.steps_per_iteration + local
            path = self.run_dir / "rollouts" / f"step_{self.step:06d}.jsonl"
            if not path.exists():
                raise RuntimeError(f"verl finished but wrote no dialogues for step {self.step} ({path})")
            records = list(read_rollouts(path))
            episodes = [Episode.from_dict(r) for r in records]
            rewards = [r["meta"].get("reward") for r in records]
            for ep, reward in zip(episodes, rewards):
                self.controller.observe(ep.profile, None if reward is None else ep.success)
            m = compute_metrics(episodes, self.scenario.space)
            scored = [r["total"] for r in rewards if r is not None]
            out = {"reward": sum(scored) / len(scored) if scored else None, "CR": m["metrics"]["CR"]["mean"],
                   "turns": m["metrics"]["ADT"]["mean"], "UPA": m["metrics"]["UPA"]["mean"],
                   "sim_errors": m["counts"]["sim_error"], "dialogues": len(episodes),
                   "verl": verl_steps.get(local, {}),
                   "controller_marginals": {d: {str(v): p for v, p in mm.items()}
                                            for d, mm in self.controller.marginals().items()}}
            report = self.controller.end_step()
            if report is not None:
                write_controller_report(report, self.scenario.space, self.run_dir / "controller")
                out["controller_update"] = report["reason"]
            logger.log(self.step, out)
        (self.run_dir / "controller" / f"state_iter_{iteration + 1:03d}.json").write_text(
            json.dumps(self.controller.state_dict(), indent=1))

    def _validation_metrics(self, k: int) -> None:
        path = self.run_dir / "validation" / f"iter_{k:03d}.jsonl"
        if path.exists():
            eps = [Episode.from_dict(r) for r in read_rollouts(path)]
            m = compute_metrics(eps, self.scenario.space, seed=self.tc.validation.seed)
            path.with_suffix(".json").write_text(json.dumps(m, indent=2))

    def _checkpoint(self, hf_dir: Path) -> None:
        """The embedded checkpoint layout around verl's HF export, so eval, audit-mask and resume read it."""
        if not (hf_dir / "config.json").is_file():
            raise RuntimeError(f"verl wrote no HF model at {hf_dir} (is hf_model in checkpoint.save_contents?)")
        final = step_dir(self.run_dir, self.step)
        tmp = final.with_name(final.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(hf_dir, tmp / "model")
        state = {"step": self.step, "controller": self.controller.state_dict(), "backend": "verl"}
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1), encoding="utf-8")
        (tmp / COMPLETE).write_text(str(self.step))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        self.model_path = str(final / "model")


def _read_verl_metrics(path: Path) -> dict[int, dict]:
    """verl's file logger: one {"step", "data"} line per logged step (validation lines share a step)."""
    out: dict[int, dict] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                out.setdefault(int(rec["step"]), {}).update(rec["data"])
    return out


def train_with_verl(cfg: DictConfig) -> Path:
    return VerlTrainer(cfg).run()
