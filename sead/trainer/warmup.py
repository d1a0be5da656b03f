"""Optional supervised warm-up on dialogues of the scripted reference agent (no human labels).

A small base model (SmolLM2-135M) almost never writes SEAD's tag format, so every GRPO group has reward 0 and
no gradient. A short warm-up teaches the format and the SOP from dialogues the reference agent plays against
the same user simulator. The dialogues go through the ordinary episode runner, so their token ids and loss
mask are built exactly as in RL, and the loss is the mean negative log-likelihood of the agent tokens.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import time
from dataclasses import replace
from pathlib import Path

import torch

from sead import compute, host_memory
from sead.dialogue import EpisodeJob, RolloutLog, RunnerConfig, run_batch
from sead.dialogue.episode import Episode
from sead.dialogue.rollout_log import read_rollouts
from sead.dialogue.seeds import imitation_seed, warmup_episode_seed
from sead.errors import SEADInputError, parse_json
from sead.models.loading import ModelConfig, load_model
from sead.policy.scripted import ReferenceAgent
from sead.run.fixed_profiles import fixed_profiles
from sead.run.layout import WarmupFolder
from sead.scenario.scenario import Scenario
from sead.trainer.estimators import Sequence
from sead.trainer.schema import WarmupConfig
from sead.trainer.scoring import masked_logprobs
from sead.usersim.base import UserSimulator


async def warmup(
    cfg: WarmupConfig,
    *,
    model,
    tokenizer,
    scenario: Scenario,
    user: UserSimulator,
    runner_cfg: RunnerConfig,
    out: WarmupFolder,
    progress,
    forward_context=contextlib.nullcontext,
) -> dict:
    """Play the reference agent against `user`, log its dialogues to `out`, then fine-tune `model` on its turns
    (forwards inside `forward_context`, see `Updater`). Returns summary numbers."""
    started = time.perf_counter()
    agent = ReferenceAgent(scenario, tokenizer)
    # Their own seeded draws: the controller's stay those of the RL run.
    profiles = fixed_profiles(scenario, cfg.dialogues, cfg.seed)
    jobs = [
        EpisodeJob(p, seed=warmup_episode_seed(cfg.seed, i), episode_id=f"warmup{i}") for i, p in enumerate(profiles)
    ]
    task = progress.add_task("warm-up dialogues", total=len(jobs))
    with RolloutLog(out.dialogues, fresh=True) as log:
        episodes = await run_batch(
            jobs,
            scenario=scenario,
            agent=agent,
            user=user,
            tokenizer=tokenizer,
            log=log,
            cfg=replace(runner_cfg, max_turns=cfg.max_turns, max_new_tokens=cfg.max_new_tokens),
            on_done=lambda ep: progress.advance(task),
        )
    progress.remove_task(task)
    # A dialogue the simulator broke off says nothing about the reference agent: neither imitated nor counted
    # (as in sead.metrics).
    played = [e for e in episodes if not e.sim_error]
    chosen = imitated(played, cfg.successful_only)
    seqs = [s for e in chosen for s in agent_sequences(e)]
    task = progress.add_task("warm-up fine-tuning", total=cfg.epochs * max(1, -(-len(seqs) // cfg.micro_batch)))
    deadline = None if cfg.max_minutes is None else started + 60 * cfg.max_minutes

    def summary(losses: list[float], trained: int, epochs: int) -> dict:
        return {
            "dialogues": len(episodes),
            "sim_errors": len(episodes) - len(played),
            "imitated": len(chosen),
            "sequences": len(seqs),
            "epochs": epochs,
            "sequences_trained": trained,
            "stopped_by_time": trained < epochs * len(seqs),
            "minutes": (time.perf_counter() - started) / 60,
            "reference_CR": sum(e.success for e in played) / len(played) if played else None,
            # means of the first and last (up to) five optimiser steps, never the same ones: one dialogue's loss
            # alone is noisy
            "nll_first": _mean(losses[: _ends(len(losses))]),
            "nll_last": _mean(losses[len(losses) - _ends(len(losses)) :]),
        }

    def keep_epoch(epoch: int, losses: list[float], trained: int) -> None:
        # The model after `epoch` of a longer warm-up is the model of a warm-up of that many epochs (same shuffles,
        # same optimiser state, constant lr): one run measures several warm-up lengths.
        kept = out.epoch(epoch)
        save_warmup(kept, summary(losses, trained, epoch), model, tokenizer)
        shutil.copyfile(out.dialogues, kept.dialogues)  # the imitation anchor's pool, as in the full warm-up

    losses, trained = await compute.arun(
        _imitate,
        model,
        seqs,
        cfg,
        deadline=deadline,
        forward_context=forward_context,
        advance=lambda: progress.advance(task),
        on_epoch=keep_epoch if cfg.keep_epochs else None,
    )
    progress.remove_task(task)
    host_memory.give_back()  # the optimiser's moments, before the weights are written out beside them
    return summary(losses, trained, cfg.epochs)


def imitated(episodes: list[Episode], successful_only: bool) -> list[Episode]:
    """The dialogues a warm-up learns from: those the reference agent won (or all it played), none the simulator
    broke off."""
    return [e for e in episodes if not e.sim_error and (e.success or not successful_only)]


def agent_sequences(episode: Episode) -> list[Sequence]:
    """A dialogue's segments with agent tokens, as sequences to imitate (advantage unused)."""
    return [Sequence(torch.tensor(s.ids), torch.tensor(s.mask), 0.0) for s in episode.segments if sum(s.mask)]


def imitation_anchor(cfg: WarmupConfig, own: WarmupFolder) -> list[list[Sequence]]:
    """The dialogues a warm-up imitated, each as its sequences: the imitation anchor's pool
    (`trainer.update.imitation_coef`), from the warm-up that played them (the run's `own`, or the one
    `trainer.warmup.reuse` names)."""
    src = WarmupFolder(Path(cfg.reuse).expanduser().resolve()) if cfg.reuse else own
    if not src.dialogues.exists():
        raise SEADInputError(
            f"the imitation anchor reads the dialogues a warm-up played, and {src.dialogues} is missing (a run that "
            "reused a warm-up keeps only its model: point trainer.warmup.reuse at the run that played it)",
            field="trainer.update.imitation_coef",
        )
    chosen = imitated([Episode.from_dict(r) for r in read_rollouts(src.dialogues)], cfg.successful_only)
    pool = [seqs for e in chosen if (seqs := agent_sequences(e))]
    if not pool:
        raise SEADInputError(
            f"the warm-up in {src.path} imitated no dialogue, so the imitation anchor has nothing to hold to",
            field="trainer.update.imitation_coef",
        )
    return pool


def anchor_draw(pool: list[list[Sequence]] | None, run_seed: int, step: int, n: int) -> list[Sequence]:
    """A step's draw of `n` of the anchor's dialogues, as sequences ([] where there is no pool)."""
    if not pool:
        return []
    chosen = random.Random(imitation_seed(run_seed, step)).sample(pool, min(n, len(pool)))
    return [s for seqs in chosen for s in seqs]


def _imitate(
    model, seqs: list[Sequence], cfg: WarmupConfig, *, deadline, forward_context, advance, on_epoch=None
) -> tuple[list, int]:
    """Fine-tune `model` on `seqs`, one optimiser step per micro-batch until `deadline` (perf_counter seconds, or
    None); `on_epoch(epoch, losses, trained)` after each whole epoch but the last. Returns the losses and the
    sequences trained on."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    order = random.Random(cfg.seed)
    model.train()
    losses, trained = [], 0
    for epoch in range(1, cfg.epochs + 1):
        order.shuffle(seqs)
        for i in range(0, len(seqs), cfg.micro_batch):
            if deadline is not None and time.perf_counter() >= deadline:
                break
            batch = seqs[i : i + cfg.micro_batch]
            opt.zero_grad(set_to_none=True)  # before the forward: the last step's gradients would sit beside it
            with forward_context():
                logps = masked_logprobs(model, batch, temperature=1.0).logps
            loss = -torch.cat(logps).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            trained += len(batch)
            advance()
        if on_epoch is not None and epoch < cfg.epochs and trained == epoch * len(seqs):
            on_epoch(epoch, losses, trained)
    opt.zero_grad(set_to_none=True)  # the last step's gradients: as large as the weights
    return losses, trained


def reuse_warmup(src: str, *, model, model_cfg: ModelConfig, lora_enabled: bool) -> dict:
    """Load the policy an earlier warm-up saved into `model`; returns that warm-up's summary."""
    where = WarmupFolder(Path(src).expanduser().resolve())
    if not (where.model / "config.json").exists() or not where.summary.exists():
        raise SEADInputError(
            f"{where.path} is not a warm-up directory (a run's warmup/ with model/ and summary.json)",
            field="trainer.warmup.reuse",
        )
    if lora_enabled:
        raise SEADInputError(
            "a saved warm-up is a full model; it cannot seed LoRA adapters (set "
            "trainer.lora.enabled=false or warm up in this run)",
            field="trainer.warmup.reuse",
        )
    warmed = load_model(model_cfg.at(where.model), str(next(model.parameters()).dtype).removeprefix("torch."))[0]
    try:
        model.load_state_dict(warmed.state_dict())
    except RuntimeError as err:
        raise SEADInputError(
            f"the warm-up in {where.path} was made for another model than model.* names: {str(err).splitlines()[0]}",
            field="trainer.warmup.reuse",
        ) from err
    return {**parse_json(where.summary.read_text()), "reused_from": str(where.path)}


def save_warmup(out: WarmupFolder, summary: dict, model, tokenizer) -> None:
    """What a later run reuses, and where this run's KL anchor is reloaded from on resume."""
    out.path.mkdir(exist_ok=True)
    out.summary.write_text(json.dumps(summary, indent=2))
    model.save_pretrained(out.model)
    tokenizer.save_pretrained(out.model)


def _ends(n: int) -> int:
    """How many optimiser steps each end of the warm-up's loss curve averages: five, or half of a shorter curve."""
    return min(5, max(1, n // 2))


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None
