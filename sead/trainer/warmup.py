"""Optional supervised warm-up on dialogues of the scripted reference agent (no human labels).

A small base model (SmolLM2-135M) almost never writes SEAD's tag format, so every GRPO group has reward 0 and
no gradient. A short warm-up teaches the format and the SOP from dialogues the reference agent plays against
the same user simulator. The dialogues go through the ordinary episode runner, so their token ids and loss
mask are built exactly as in RL, and the loss is the mean negative log-likelihood of the agent tokens.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from sead.agents.scripted import ReferenceAgent
from sead.dialogue import EpisodeJob, RolloutLog, run_batch
from sead.errors import SEADInputError
from sead.models.loading import load_model
from sead.trainer.update import Sequence, masked_logprobs


@dataclass
class WarmupConfig:
    dialogues: int = 0          # 0 = no warm-up
    epochs: int = 1
    lr: float = 1e-4
    micro_batch: int = 2
    successful_only: bool = True  # imitate only dialogues the reference agent won
    seed: int = 77
    max_turns: int = 15         # the reference agent's dialogues run to their natural end ...
    max_new_tokens: int = 200   # ... with room for its full tag block, whatever the RL settings are
    max_minutes: float | None = None  # stop fine-tuning when the warm-up has taken this long (None = off)
    # An earlier run's `warmup/` directory: start from the model it saved instead of warming up again, and count
    # the minutes that warm-up took as this run's training time (RL settings can be tried from one warm-up).
    reuse: str | None = None


async def warmup(trainer, cfg: WarmupConfig, progress) -> dict:
    """Play the reference agent, then fine-tune the policy on its turns. Returns summary numbers."""
    started = time.perf_counter()
    agent = ReferenceAgent(trainer.scenario, trainer.tokenizer)
    profiles = trainer.controller_for_warmup.sample(cfg.dialogues)
    jobs = [EpisodeJob(p, seed=cfg.seed * 104_729 + i, episode_id=f"warmup{i}") for i, p in enumerate(profiles)]
    task = progress.add_task("warm-up dialogues", total=len(jobs))
    with RolloutLog(trainer.run_dir / "warmup" / "dialogues.jsonl", fresh=True) as log:
        episodes = await run_batch(jobs, scenario=trainer.scenario, agent=agent, user=trainer.user,
                                   tokenizer=trainer.tokenizer, log=log,
                                   cfg=replace(trainer.runner_cfg, max_turns=cfg.max_turns,
                                               max_new_tokens=cfg.max_new_tokens),
                                   on_done=lambda ep: progress.advance(task))
    progress.remove_task(task)
    chosen = [e for e in episodes if e.success or not cfg.successful_only]
    seqs = [Sequence(torch.tensor(s.ids), torch.tensor(s.mask), 0.0) for e in chosen for s in e.segments
            if sum(s.mask)]
    model = trainer.model
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    order = random.Random(cfg.seed)
    task = progress.add_task("warm-up fine-tuning", total=cfg.epochs * max(1, -(-len(seqs) // cfg.micro_batch)))
    model.train()
    losses, trained = [], 0
    deadline = None if cfg.max_minutes is None else started + 60 * cfg.max_minutes
    for _ in range(cfg.epochs):
        order.shuffle(seqs)
        for i in range(0, len(seqs), cfg.micro_batch):
            if deadline is not None and time.perf_counter() >= deadline:
                break
            batch = seqs[i:i + cfg.micro_batch]
            logps = masked_logprobs(model, batch, temperature=1.0).logps
            loss = -torch.cat(logps).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            trained += len(batch)
            progress.advance(task)
    progress.remove_task(task)
    return {"dialogues": len(episodes), "imitated": len(chosen), "sequences": len(seqs),
            "sequences_trained": trained, "stopped_by_time": trained < cfg.epochs * len(seqs),
            "minutes": (time.perf_counter() - started) / 60,
            "reference_CR": sum(e.success for e in episodes) / max(1, len(episodes)),
            # means of the first and last (up to) five optimiser steps: one dialogue's loss alone is noisy
            "nll_first": _mean(losses[:5]), "nll_last": _mean(losses[-5:])}


def reuse_warmup(trainer, src: str) -> dict:
    """Load the policy an earlier warm-up saved into `trainer.model`; returns that warm-up's summary."""
    where = Path(src).expanduser().resolve()
    if not (where / "model" / "config.json").exists() or not (where / "summary.json").exists():
        raise SEADInputError(f"{where} is not a warm-up directory (a run's warmup/ with model/ and summary.json)",
                             field="trainer.warmup.reuse")
    if trainer.tc.lora.enabled:
        raise SEADInputError("a saved warm-up is a full model; it cannot seed LoRA adapters (set "
                             "trainer.lora.enabled=false or warm up in this run)", field="trainer.warmup.reuse")
    warmed = load_model(trainer.model_cfg.at(where / "model"))[0]
    try:
        trainer.model.load_state_dict(warmed.state_dict())
    except RuntimeError as err:
        raise SEADInputError(f"the warm-up in {where} was made for another model than model.* names: "
                             f"{str(err).splitlines()[0]}", field="trainer.warmup.reuse") from err
    return {**json.loads((where / "summary.json").read_text()), "reused_from": str(where)}


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None
