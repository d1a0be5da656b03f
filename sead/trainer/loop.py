"""The four-phase loop on one machine: sample profiles, play dialogues, update the agent, reweight the controller.
It writes the run directory laid out in `sead.run.layout`, through the same pieces as the verl backend."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from sead import compute, host_memory
from sead.config import build_controller, build_scenario, build_usersim, check_config, group_config, runner_config
from sead.controller.plausibility import check_endpoint
from sead.dialogue import ChatTokens, RolloutLog, run_batch
from sead.dialogue.response_cache import ResponseCache
from sead.hack_monitor import HackMonitor
from sead.models import decode_kernel
from sead.models.loading import ModelConfig, load_model
from sead.models.precision import Precision, RolloutWeights
from sead.policy.hf import HFPolicy
from sead.progress import progress_bar
from sead.run.fixed_profiles import fixed_profiles
from sead.run.frozen_config import write_start_config
from sead.run.layout import BASE_MODEL, CheckpointFolder, RunLayout
from sead.run.lock import run_dir_lock, run_dir_path
from sead.run.machine import record_machine
from sead.run.metrics_log import MetricsLogger
from sead.run.paired import validation_jobs
from sead.run.scoring import EpisodeScorer
from sead.run.start import start_or_resume
from sead.run.steps import (
    StepRecord,
    finish_step,
    unplayed_step,
    write_controller_state,
    write_validation_metrics,
)
from sead.run.validation_table import changes, user_side, validated_at, validation_table, with_ci
from sead.trainer.budget import TrainingBudget
from sead.trainer.checkpoint import load_training_state, save_checkpoint
from sead.trainer.models import build_models, frozen_copy
from sead.trainer.plan import fit_config, probe
from sead.trainer.recompute import training_forward
from sead.trainer.rollouts import StepPlays
from sead.trainer.schema import TrainerConfig
from sead.trainer.step_line import fmt, step_line
from sead.trainer.update import Updater
from sead.trainer.warmup import anchor_draw, imitation_anchor, reuse_warmup, save_warmup, warmup
from sead.trainer.weight_average import WeightAverage
from sead.usersim.base import environment_identity

console = Console()


class Trainer(StepPlays):
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        check_config(cfg)  # every group and number, before the simulator or a model is built
        self.tc: TrainerConfig = group_config(cfg, "trainer")
        self.runner_cfg = runner_config(cfg)
        self.model_cfg: ModelConfig = group_config(cfg, "model")
        self.precision = Precision.for_training(self.model_cfg.dtype, self.model_cfg.device)
        self.scenario = build_scenario(cfg)
        self.monitor = HackMonitor.for_scenario(self.scenario)  # per-step reward-hacking monitors
        self.controller = build_controller(cfg, self.scenario)
        self.plausibility = group_config(cfg, "controller").plausibility
        self.user = build_usersim(cfg, self.scenario)
        asyncio.run(self.user.check_health())  # a dead simulator fails here, not after minutes of loading
        asyncio.run(check_endpoint(self.plausibility))
        self.score = EpisodeScorer.for_run(cfg, self.scenario)
        self.layout = RunLayout(run_dir_path(cfg.run_dir))
        start = start_or_resume(self.layout.path, cfg, environment_identity(self.user))
        console.print(f"run directory: {self.layout.path}")
        decode_kernel.prebuild(self.precision.compute)  # beside the models' loading and conversion
        self.model, self.ref, self.tokenizer, label = build_models(
            self.model_cfg, self.tc, start.checkpoint, self.layout.warmup.model, self.precision.master
        )
        self.updater = Updater(
            self.model,
            self.ref,
            self.tc.update,
            temperature=self.tc.sampling.temperature,
            forward_context=self._training_forward,
        )
        # rollouts and validation sample from a compute-precision copy when training keeps fp32 master weights
        self.rollout_model = RolloutWeights(self.model, self.precision)
        self.label = label
        self.policy, self.val_policy = (
            self._hf_policy(self.rollout_model.model, sampling)
            for sampling in (self.tc.sampling, self.tc.validation.sampling)
        )
        # trainer.weight_ema: validation measures the average, from its own compute-precision copy
        self.average = WeightAverage(self.tc.weight_ema) if self.tc.weight_ema > 0 else None
        self.average_view: tuple[RolloutWeights, HFPolicy] | None = None
        self.step, self.budget = 0, TrainingBudget(self.tc.max_minutes)
        self._anchor_pool: list | None = None  # the warm-up's dialogues, where trainer.update.imitation_coef is on
        if start.checkpoint:
            load_training_state(start.checkpoint, self.updater)
            if self.average and (updates := start.state.get("weight_average_updates", 0)):
                averaged = load_model(
                    self.model_cfg.at(CheckpointFolder(start.checkpoint).model), self.precision.master
                )
                self.average.resume(averaged[0], updates)
            self.controller.load_state_dict(start.state["controller"])
            self.step, self.budget = start.step, TrainingBudget.resumed(self.tc.max_minutes, start.state)
            console.print(f"resuming from {start.checkpoint} (step {self.step})")
        if self.tc.fit_minutes and not start.checkpoint:
            self._fit_to_machine()
        self.val_profiles = fixed_profiles(self.scenario, self.tc.validation.profiles, self.tc.validation.seed)
        self.layout.create()
        record_machine(self.layout, self.precision, self.step)
        console.print(f"precision: {self.precision.describe()}")
        self.cache = ResponseCache.for_run(self.runner_cfg.response_cache, self.layout.response_cache)
        self.logger = MetricsLogger(
            self.layout,
            tensorboard=self.tc.logging.tensorboard,
            wandb=self.tc.logging.wandb,
            wandb_mode=self.tc.logging.wandb_mode,
            config=OmegaConf.to_container(cfg),
            # resumed: keep lines up to the checkpoint; resume without one: start afresh
            resume_step=self.step if start.checkpoint else (-1 if cfg.resume else None),
        )

    def _fit_to_machine(self) -> None:
        """trainer.fit_minutes: probe this machine, print the plan, and cut the warm-up and validation where the
        run would not fit; the run's config.yaml then holds what it runs, so a resume goes on with the same."""
        sop = self.scenario.agent_system_prompt()
        prompt = list(ChatTokens(self.tokenizer, sop, self.runner_cfg.sop_role).prompt_ids)
        rates = probe(self.policy, self.model, prompt, self._training_forward)
        if fit_config(self.cfg, self.runner_cfg, rates, len(prompt), console.print):
            write_start_config(self.layout.path, self.cfg, environment_identity(self.user))
            self.tc = group_config(self.cfg, "trainer")

    def _training_forward(self):
        """The context of every training forward of the policy (`training_forward`)."""
        return training_forward(self.model, self.precision.autocast, self.tc.recompute_activations)

    def _hf_policy(self, model, sampling) -> HFPolicy:
        return HFPolicy(
            model,
            self.tokenizer,
            sampling,
            max_batch=self.tc.max_batch,
            label=self.label,
            turn_cache_mb=self.tc.turn_cache_mb,
            cuda_graph=self.tc.cuda_graph,
        )

    def _validation_policy(self) -> HFPolicy:
        """The policy validation plays: the live one, or the weights' average once there is one."""
        if self.average is None or self.average.model is None:
            return self.val_policy
        if self.average_view is None:
            weights = RolloutWeights(self.average.model, self.precision)
            self.average_view = weights, self._hf_policy(weights.model, self.tc.validation.sampling)
        weights, policy = self.average_view
        weights.refresh()
        return policy

    def _averaged(self) -> dict | None:
        """What validation and checkpoints hold where it is the weights' average."""
        if self.average is None or self.average.model is None:
            return None
        return {"ema_decay": self.average.decay, "updates": self.average.updates}

    # -- phases ---------------------------------------------------------------------------------------------
    async def _play(
        self,
        jobs,
        policy,
        log_path: Path,
        progress,
        label: str,
        cache: ResponseCache | None = None,
        fresh=True,
        runner_cfg=None,
    ):
        """Play `jobs` and log them to `log_path`: anew (one file per step: a replayed step rewrites it), or
        appended after a step's earlier round (`fresh=False`). `runner_cfg`: other dialogue settings than the run's."""
        task = progress.add_task(label, total=len(jobs))
        await compute.arun(self.rollout_model.refresh)  # the rollout copy follows every update, warm-up and resume
        with RolloutLog(log_path, fresh=fresh) as rlog:
            episodes = await run_batch(
                jobs,
                scenario=self.scenario,
                agent=policy,
                user=self.user,
                tokenizer=self.tokenizer,
                cfg=runner_cfg or self.runner_cfg,
                log=rlog,
                on_done=lambda ep: progress.advance(task),
                score=self.score,
                cache=cache,
            )
        if isinstance(policy, HFPolicy):  # finished dialogues and stale packed weights would only hold memory
            policy.release()
            host_memory.give_back()
        progress.remove_task(task)
        return episodes

    async def _warm_up(self, progress) -> None:
        """Supervised warm-up on the reference agent's dialogues (or an earlier run's), before the first RL step."""
        wc = self.tc.warmup
        kl = self.ref is not None
        self.ref = self.updater.ref = None  # the reference is the warmed-up model: none is held while it trains
        host_memory.give_back()
        if wc.reuse:
            summary = compute.run(
                reuse_warmup, wc.reuse, model=self.model, model_cfg=self.model_cfg, lora_enabled=self.tc.lora.enabled
            )
        else:
            summary = await warmup(
                wc,
                model=self.model,
                tokenizer=self.tokenizer,
                scenario=self.scenario,
                user=self.user,
                runner_cfg=self.runner_cfg,
                out=self.layout.warmup,
                progress=progress,
                forward_context=self._training_forward,
            )
        compute.run(save_warmup, self.layout.warmup, summary, self.model, self.tokenizer)
        if kl:  # KL keeps RL near the warmed-up model, not the format-less base
            self.ref = self.updater.ref = compute.run(frozen_copy, self.model)
        reused = f" (reused from {summary['reused_from']})" if wc.reuse else ""
        console.print(
            f"warm-up{reused}: imitated {summary['imitated']}/{summary['dialogues']} reference "
            f"dialogues (reference CR {fmt(summary['reference_CR'])}); NLL {fmt(summary['nll_first'])} "
            f"-> {fmt(summary['nll_last'])}"
        )
        self.budget.add_warmup(summary["minutes"])  # a reused warm-up counts as it did in its run

    async def validate(self, iteration: int | str, progress) -> dict:
        """Greedy dialogues with the fixed validation profiles: after `iteration`, or of the base model before the
        warm-up (BASE_MODEL)."""
        t0 = time.perf_counter()
        vc = self.tc.validation
        jobs = validation_jobs(self.val_profiles, vc.seed, vc.trials)
        name = "base model (before warm-up)" if iteration == BASE_MODEL else iteration
        policy = await compute.arun(self._validation_policy)
        eps = await self._play(
            jobs, policy, self.layout.validation_dialogues(iteration), progress, f"validation {name}"
        )
        # Where on the training curve this point lies: after how many steps and minutes of training.
        m = write_validation_metrics(
            eps,
            space=self.scenario.space,
            seed=vc.seed,
            layout=self.layout,
            iteration=iteration,
            step=self.step,
            train_minutes=self.budget.train_seconds / 60,
            averaged=self._averaged(),
        )
        console.print(
            f"[bold]validation {name}[/]: "
            + ", ".join(f"{n} {with_ci(m, n)}" for n in ("CR", *user_side(m)))
            + f" (n={m['counts']['evaluated']}), "
            f"UPA {fmt(m['metrics']['UPA']['mean'])}, turns {fmt(m['metrics']['ADT']['mean'])}  "
            f"[{time.perf_counter() - t0:.0f}s]"
            + (f" (the weights' average over {a['updates']} updates)" if (a := m["at"].get("averaged")) else "")
        )
        if iteration != BASE_MODEL:  # the base model's numbers are not a point of this run's training curve
            self.logger.log(self.step, {"validation": {k: v["mean"] for k, v in m["metrics"].items()}})
        return m

    def _load_imitation_anchor(self) -> None:
        """The warm-up's dialogues for `trainer.update.imitation_coef`: read once, before any step, so a missing
        file fails early."""
        if self.tc.update.imitation_coef and self._anchor_pool is None:
            self._anchor_pool = imitation_anchor(self.tc.warmup, self.layout.warmup)

    def _imitation_anchor(self) -> list:
        return anchor_draw(self._anchor_pool, int(self.cfg.seed), self.step, self.tc.update.imitation_dialogues)

    async def train_step(self, progress) -> StepRecord:
        t0 = time.perf_counter()
        tokens_before = self.policy.generated_tokens
        eps, checked, refills = await self._rollouts(progress)
        t_branches = time.perf_counter()
        branches = await self._branches(eps, progress)
        t_roll, branches_s = time.perf_counter() - t0, time.perf_counter() - t_branches
        scored = [e for e in eps + branches if e.meta["reward"] is not None]  # scored as each dialogue ended
        if not scored:
            raise RuntimeError("every dialogue of this step ended in a user-simulator error; check the simulator")
        seqs, group_counts = self.updater.estimator.sequences(
            scored, [e.meta["reward"]["total"] for e in scored], [e.meta["group"] for e in scored]
        )
        t1 = time.perf_counter()
        anchor = self._imitation_anchor()
        update = await compute.arun(self.updater.step, seqs, group_counts["played_tokens"], anchor)
        if self.average and "skipped" not in update:
            await compute.arun(self.average.update, self.model)
        t_upd = time.perf_counter() - t1
        record = finish_step(  # whole dialogues only: a branch does not start where a user starts
            eps, controller=self.controller, space=self.scenario.space, layout=self.layout, monitor=self.monitor
        )
        record.update = {**update, **group_counts, "refill_rounds": refills}
        if branches:
            won = [e.success for e in branches if not e.sim_error]
            record.update["branches"] = {"dialogues": len(branches), "CR": sum(won) / len(won) if won else None}
        record.plausibility = checked
        record.response_cache = self.cache.step_counts() if self.cache else None
        record.gen_tokens_per_s = (self.policy.generated_tokens - tokens_before) / max(t_roll, 1e-9)
        record.time = {"rollout_s": t_roll, "update_s": t_upd, "step_s": time.perf_counter() - t0}
        if branches:  # part of rollout_s: the recipe spends most of its rollout time here
            record.time["branches_s"] = branches_s
        return record

    async def anchor_step(self, progress) -> StepRecord:
        """A step of the anchor's control (`trainer.update.policy_gradient=false`): this step's draw of the
        imitation anchor, one optimiser step on it and the weight average, as a run with the anchor takes; no
        dialogue is played, so the controller learns nothing."""
        t0 = time.perf_counter()
        update = await compute.arun(self.updater.imitate, self._imitation_anchor())
        if self.average:
            await compute.arun(self.average.update, self.model)
        return unplayed_step(self.controller, update, time.perf_counter() - t0)

    async def _validate_if_due(self, total: int, progress) -> None:
        """Validate where this step ends an iteration the schedule measures (or ends the run), unless that was
        measured already at this step."""
        tc = self.tc
        it, within = divmod(self.step, tc.steps_per_iteration)
        due = not within and (it % tc.validation.every == 0 or self.step == total)
        if due and not validated_at(self.layout, it, self.step):
            await self.validate(it, progress)

    def _state(self) -> dict:
        averaged = {"weight_average_updates": self.average.updates} if self.average else {}
        return {"step": self.step, "controller": self.controller.state_dict(), **self.budget.state(), **averaged}

    async def run(self) -> Path:
        try:
            await self._train()
        finally:  # also on an error or Ctrl-C: connections closed, every logger flushed
            await self.user.aclose()
            self.logger.close()
            if self.cache:
                self.cache.close()
        return self.layout.path

    async def _train(self) -> None:
        tc = self.tc
        total = tc.iterations * tc.steps_per_iteration
        with progress_bar(console) as progress:
            budget = "" if tc.max_minutes is None else f" (stops after {tc.max_minutes:g} min of training)"
            overall = progress.add_task(f"[bold]training steps{budget}", total=total, completed=self.step)
            if self.step == 0 and (tc.warmup.dialogues > 0 or tc.warmup.reuse):
                if tc.validation.before_warmup and not self.layout.validation_metrics(BASE_MODEL).exists():
                    await self.validate(BASE_MODEL, progress)
                await self._warm_up(progress)
            self._load_imitation_anchor()
            if self.step == 0 and tc.validation.at_start:
                await self.validate(0, progress)
            if self.step:  # resumed from a checkpoint whose validation was cut off: measured before going on
                await self._validate_if_due(total, progress)
            while self.step < total and not self.budget.spent():
                t0 = time.perf_counter()
                self.step += 1
                record = await (self.train_step if tc.update.policy_gradient else self.anchor_step)(progress)
                self.logger.log(self.step, record.to_dict())
                console.print(step_line(self.step, total, record))
                progress.advance(overall)
                self.budget.add_step(time.perf_counter() - t0)
                if self.step % tc.steps_per_iteration == 0:
                    write_controller_state(self.controller, self.layout, self.step // tc.steps_per_iteration)
                # saved before it is validated: a run killed while validating (memory, a reboot) resumes here
                if self.step % tc.save_every == 0 or self.step == total or self.budget.spent():
                    compute.run(
                        save_checkpoint,
                        self.layout.path,
                        self.step,
                        model=self.model,
                        tokenizer=self.tokenizer,
                        updater=self.updater,
                        state=self._state(),
                        averaged=self.average.model if self.average else None,
                    )
                await self._validate_if_due(total, progress)
            if self.step < total:  # stopped by trainer.max_minutes
                console.print(f"[yellow]training budget of {tc.max_minutes:g} min spent after step {self.step}")
                it = -(-self.step // tc.steps_per_iteration)
                # e.g. inside an iteration: still measure where it ended, unless this run (or the one it
                # resumes) already did
                if not validated_at(self.layout, it, self.step):
                    await self.validate(it, progress)
        console.print(validation_table(self.layout))
        for line in changes(self.layout):
            console.print(line)


def train(cfg: DictConfig) -> Path:
    host_memory.keep_freed_memory()  # each micro-batch's activations reuse the last one's pages
    with run_dir_lock(run_dir_path(cfg.run_dir)):
        return compute.serve(Trainer(cfg).run())  # the tensor work on this thread, the loop beside it
