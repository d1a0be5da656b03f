"""The four-phase loop on one machine: sample profiles, play dialogues, update the agent, reweight the controller.

Run directory layout (the same for every backend, so `sead audit-mask` and the evaluation suite read any run):
  config.yaml, usersim.json     resolved config; simulator identity and settings
  rollouts/step_NNNNNN.jsonl    every training dialogue (profile, transcript, statuses, reward, token ids + mask)
  validation/iter_NNN.jsonl     validation dialogues; validation/iter_NNN.json their metrics
  controller/                   update reports (JSON + heat map) and the controller state after each iteration
  metrics.jsonl, tensorboard/   per-step numbers
  checkpoints/step_NNNNNN/      HF model (safetensors), optimizer, RNG, controller state, counters
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sead.config import build_controller, build_scenario, build_usersim, reward_weights, runner_config, to_schema
from sead.controller import make_curriculum, write_controller_report
from sead.controller.controller import ProfileController
from sead.dialogue import EpisodeJob, RolloutLog, run_batch
from sead.errors import SEADInputError
from sead.metrics import compute_metrics
from sead.models.loading import ModelConfig, load_model
from sead.reward import compute_reward
from sead.trainer import lora
from sead.trainer.checkpoint import latest_checkpoint, load_training_state, save_checkpoint
from sead.trainer.metrics_log import MetricsLogger
from sead.trainer.policy import HFPolicy, SamplingConfig
from sead.trainer.schema import TrainerConfig
from sead.trainer.update import Updater, build_sequences
from sead.trainer.warmup import reuse_warmup, warmup

log = logging.getLogger(__name__)
console = Console()


class Trainer:
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.tc: TrainerConfig = to_schema(TrainerConfig, cfg.trainer, "trainer")
        self.scenario = build_scenario(cfg)
        self.controller = build_controller(cfg, self.scenario)
        self.user = build_usersim(cfg, self.scenario)
        self.runner_cfg = runner_config(cfg)
        self.weights = reward_weights(cfg)
        self.model_cfg = to_schema(ModelConfig, cfg.model, "model")
        self.run_dir = Path(str(cfg.run_dir)).resolve()
        self.step = 0
        self.train_seconds = 0.0  # warm-up and RL steps only: what trainer.max_minutes limits
        self.longest_step_s = 0.0  # so that the budget is not overrun by a step started just before it ends
        resume = latest_checkpoint(self.run_dir) if cfg.resume else None
        if cfg.resume and resume is None:
            console.print(f"[yellow]resume=true but {self.run_dir} holds no complete checkpoint: starting fresh")
        elif not cfg.resume and (self.run_dir / "metrics.jsonl").exists():
            # Never write a fresh run over an earlier one: its metrics, rollouts and checkpoints would mix.
            raise SEADInputError(f"{self.run_dir} already holds a run; pass resume=true to continue it or choose "
                                 "another run_dir", field="run_dir")
        console.print(f"run directory: {self.run_dir}")
        ref_model, self.tokenizer, label = load_model(self.model_cfg)
        warmed = self.run_dir / "warmup" / "model"
        if resume and (warmed / "config.json").exists():  # the KL anchor of a warmed-up run is the warmed model
            ref_model = load_model(self.model_cfg.at(warmed))[0]
        if self.tc.lora.enabled:
            # Adapters on the base network; the base under switched-off adapters is the KL reference.
            self.model = lora.wrap(ref_model, self.tc.lora, resume[0] / "adapter" if resume else None)
            self.ref = None
        else:
            self.model = (load_model(self.model_cfg.at(resume[0] / "model"))[0] if resume
                          else copy.deepcopy(ref_model))
            self.ref = ref_model.eval().requires_grad_(False) if self.tc.update.kl_coef else None
        total = self.tc.iterations * self.tc.steps_per_iteration
        self.updater = Updater(self.model, self.ref, self.tc.update, total)
        self.policy, self.val_policy = (
            HFPolicy(self.model, self.tokenizer, sampling, max_batch=self.tc.max_batch, label=label,
                     turn_cache_mb=self.tc.turn_cache_mb)
            for sampling in (self.tc.sampling, self.tc.validation.sampling))
        if resume:
            path, state = resume
            load_training_state(path, self.updater)
            self.controller.load_state_dict(state["controller"])
            self.step = int(state["step"])
            self.train_seconds = float(state.get("train_seconds", 0.0))
            self.longest_step_s = float(state.get("longest_step_s", 0.0))
            console.print(f"resuming from {path} (step {self.step})")
        self.val_profiles = self._fixed_sampler(self.tc.validation.seed).sample(self.tc.validation.profiles)
        # Warm-up profiles come from their own seeded sampler: the controller's draws stay those of the RL run.
        self.controller_for_warmup = self._fixed_sampler(self.tc.warmup.seed)
        self._write_run_files()
        self.logger = MetricsLogger(self.run_dir, tensorboard=self.tc.logging.tensorboard,
                                    wandb=self.tc.logging.wandb, wandb_mode=self.tc.logging.wandb_mode,
                                    config=OmegaConf.to_container(cfg),
                                    # resumed: keep lines up to the checkpoint; resume without one: start afresh
                                    resume_step=self.step if resume else (-1 if cfg.resume else None))

    def _fixed_sampler(self, seed: int) -> ProfileController:
        rule = make_curriculum("fixed", self.scenario.space, self.scenario.default_marginals)
        return ProfileController(self.scenario, rule, seed=seed)

    def _write_run_files(self) -> None:
        for sub in ("rollouts", "validation", "controller", "checkpoints"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(self.cfg), encoding="utf-8")
        (self.run_dir / "usersim.json").write_text(json.dumps(self.user.identity(), indent=2), encoding="utf-8")

    # -- phases ---------------------------------------------------------------------------------------------
    async def _play(self, jobs, policy, log_path: Path, progress, label: str):
        task = progress.add_task(label, total=len(jobs))
        with RolloutLog(log_path, fresh=True) as rlog:  # one file per step: a replayed step rewrites it
            episodes = await run_batch(jobs, scenario=self.scenario, agent=policy, user=self.user,
                                       tokenizer=self.tokenizer, cfg=self.runner_cfg, log=rlog,
                                       on_done=lambda ep: progress.advance(task), score=self._score)
        policy.turns.clear()  # finished dialogues: their keys/values would only hold memory until the next phase
        progress.remove_task(task)
        return episodes

    async def validate(self, iteration: int, progress) -> dict:
        t0 = time.perf_counter()
        jobs = [EpisodeJob(p, seed=self.tc.validation.seed * 7919 + i * 31 + trial, episode_id=f"val{i}-{trial}", group=i)
                for i, p in enumerate(self.val_profiles) for trial in range(self.tc.validation.trials)]
        eps = await self._play(jobs, self.val_policy, self.run_dir / "validation" / f"iter_{iteration:03d}.jsonl",
                               progress, f"validation {iteration}")
        m = compute_metrics(eps, self.scenario.space, seed=self.tc.validation.seed)
        # Where on the training curve this point lies (benchmarks/learning_curve.py plots CR against both).
        m["at"] = {"step": self.step, "train_minutes": self.train_seconds / 60}
        (self.run_dir / "validation" / f"iter_{iteration:03d}.json").write_text(json.dumps(m, indent=2))
        cr = m["metrics"]["CR"]
        console.print(f"[bold]validation {iteration}[/]: CR {_fmt(cr['mean'])} (95% CI {_fmt(cr['ci95'][0])}-"
                      f"{_fmt(cr['ci95'][1])}, n={cr['n']}), UPA {_fmt(m['metrics']['UPA']['mean'])}, "
                      f"turns {_fmt(m['metrics']['ADT']['mean'])}  [{time.perf_counter() - t0:.0f}s]")
        self.logger.log(self.step, {"validation": {k: v["mean"] for k, v in m["metrics"].items()}})
        return m

    async def train_step(self, progress) -> dict:
        t0 = time.perf_counter()
        profiles = self.controller.sample(self.tc.profiles_per_step)
        n = self.tc.rollouts_per_profile
        jobs = [EpisodeJob(p, seed=(int(self.cfg.seed) * 1_000_003 + self.step * 10_007 + i * n + k),
                           episode_id=f"s{self.step}-p{i}-r{k}", group=i)
                for i, p in enumerate(profiles) for k in range(n)]
        tokens_before = self.policy.generated_tokens
        eps = await self._play(jobs, self.policy, self.run_dir / "rollouts" / f"step_{self.step:06d}.jsonl",
                               progress, f"step {self.step} rollouts")
        t_roll = time.perf_counter() - t0
        rewards = [e.meta["reward"] for e in eps]  # scored as each episode finished (see _score)
        for e, r in zip(eps, rewards):
            self.controller.observe(e.profile, None if r is None else e.success)
        kept = [(e, r, j.group) for e, r, j in zip(eps, rewards, jobs) if r is not None]
        if not kept:
            raise RuntimeError("every dialogue of this step ended in a user-simulator error; check the simulator")
        seqs, sstats = build_sequences([e for e, _, _ in kept], [r["total"] for _, r, _ in kept],
                                       [g for _, _, g in kept], self.tc.update)
        t1 = time.perf_counter()
        upd = self.updater.step(seqs)
        t_upd = time.perf_counter() - t1
        m = compute_metrics(eps, self.scenario.space)
        comps = {k: sum(r["components"][k] for _, r, _ in kept) / len(kept) for k in kept[0][1]["components"]}
        out = {"reward": sum(r["total"] for _, r, _ in kept) / len(kept), "reward_components": comps,
               "CR": m["metrics"]["CR"]["mean"], "turns": m["metrics"]["ADT"]["mean"],
               "UPA": m["metrics"]["UPA"]["mean"], "sim_errors": m["counts"]["sim_error"], **upd, **sstats,
               "gen_tokens_per_s": (self.policy.generated_tokens - tokens_before) / max(t_roll, 1e-9),
               "time": {"rollout_s": t_roll, "update_s": t_upd, "step_s": time.perf_counter() - t0},
               "controller_marginals": {d: {str(v): p for v, p in mm.items()}
                                        for d, mm in self.controller.marginals().items()}}
        return out

    def _score(self, ep) -> dict | None:
        """The reward with its components, written into the rollout record; None for a simulator error."""
        r = compute_reward(ep, self.weights, self.scenario.space, num_stages=len(self.scenario.stages),
                           max_turns=self.runner_cfg.max_turns)
        return None if r is None else {"total": r.total, "components": r.components}

    def _state(self) -> dict:
        return {"step": self.step, "controller": self.controller.state_dict(), "train_seconds": self.train_seconds,
                "longest_step_s": self.longest_step_s}

    def _budget_spent(self) -> bool:
        """True when another RL step, if as long as the longest so far, would end past trainer.max_minutes."""
        return (self.tc.max_minutes is not None
                and self.train_seconds + self.longest_step_s > self.tc.max_minutes * 60)

    async def run(self) -> Path:
        tc = self.tc
        total = tc.iterations * tc.steps_per_iteration
        columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("ETA"), TimeRemainingColumn()]
        with Progress(*columns, console=console) as progress:
            budget = "" if tc.max_minutes is None else f" (stops after {tc.max_minutes:g} min of training)"
            overall = progress.add_task(f"[bold]training steps{budget}", total=total, completed=self.step)
            if self.step == 0 and (tc.warmup.dialogues > 0 or tc.warmup.reuse):
                summary = (reuse_warmup(self, tc.warmup.reuse) if tc.warmup.reuse
                           else await warmup(self, tc.warmup, progress))
                (self.run_dir / "warmup").mkdir(exist_ok=True)
                (self.run_dir / "warmup" / "summary.json").write_text(json.dumps(summary, indent=2))
                self.model.save_pretrained(self.run_dir / "warmup" / "model")
                self.tokenizer.save_pretrained(self.run_dir / "warmup" / "model")
                if self.ref is not None:  # KL keeps RL near the warmed-up model, not the format-less base
                    self.ref.load_state_dict(self.model.state_dict())
                reused = f" (reused from {summary['reused_from']})" if tc.warmup.reuse else ""
                console.print(f"warm-up{reused}: imitated {summary['imitated']}/{summary['dialogues']} reference "
                              f"dialogues (reference CR {summary['reference_CR']:.2f}); NLL {summary['nll_first']} "
                              f"-> {summary['nll_last']}")
                self.train_seconds += 60 * summary["minutes"]  # a reused warm-up counts as it did in its run
            if self.step == 0 and tc.validation.at_start:
                await self.validate(0, progress)
            while self.step < total and not self._budget_spent():
                t0 = time.perf_counter()
                self.step += 1
                out = await self.train_step(progress)
                report = self.controller.end_step()
                if report is not None:
                    json_path, png = write_controller_report(report, self.scenario.space, self.run_dir / "controller")
                    out["controller_update"] = report["reason"]
                self.logger.log(self.step, out)
                console.print(_summary(self.step, total, out))
                progress.advance(overall)
                step_s = time.perf_counter() - t0
                self.train_seconds += step_s
                self.longest_step_s = max(self.longest_step_s, step_s)
                if self.step % tc.steps_per_iteration == 0:
                    it = self.step // tc.steps_per_iteration
                    (self.run_dir / "controller" / f"state_iter_{it:03d}.json").write_text(
                        json.dumps(self.controller.state_dict(), indent=1))
                    await self.validate(it, progress)
                if self.step % tc.save_every == 0 or self.step == total or self._budget_spent():
                    save_checkpoint(self.run_dir, self.step, model=self.model, tokenizer=self.tokenizer,
                                    updater=self.updater, state=self._state())
            if self.step < total:  # stopped by trainer.max_minutes
                console.print(f"[yellow]training budget of {tc.max_minutes:g} min spent after step {self.step}")
                it = -(-self.step // tc.steps_per_iteration)
                # e.g. inside an iteration: still measure where it ended, unless this run (or the one it
                # resumes) already did
                if not _validated_at(self.run_dir, it, self.step):
                    await self.validate(it, progress)
        await self.user.aclose()
        self.logger.close()
        return self.run_dir


def _validated_at(run_dir: Path, iteration: int, step: int) -> bool:
    path = run_dir / "validation" / f"iter_{iteration:03d}.json"
    return path.exists() and json.loads(path.read_text())["at"]["step"] == step


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _summary(step: int, total: int, o: dict) -> str:
    t = o["time"]
    update = ("update skipped (no group with differing rewards)" if "skipped" in o else
              f"kl {o['kl']:.4f}  entropy {o['entropy']:.3f}  clip {o['clip_frac']:.3f}  grad {o['grad_norm']:.3f}")
    return (f"step {step}/{total}  reward {o['reward']:.3f}  CR {_fmt(o['CR'])}  turns {_fmt(o['turns'])}  "
            f"{update}  gen {o['gen_tokens_per_s']:.1f} tok/s  "
            f"rollout {t['rollout_s']:.0f}s update {t['update_s']:.0f}s"
            + (f"  | controller: {o['controller_update']}" if "controller_update" in o else ""))


def train(cfg: DictConfig) -> Path:
    return asyncio.run(Trainer(cfg).run())
