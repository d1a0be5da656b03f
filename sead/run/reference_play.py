"""The scripted reference agent, which the warm-up imitates, played on a run's own validation dialogues: the same
users, seeds, simulator and turn limit. Set beside the models, it shows how much room the warm-up leaves: against
the scripted user it never leaves a concern open, so the calls it loses are lost to the user's impatience and
distrust, which an agent's words reach only through the user's trust, and right answers already raise it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from omegaconf import DictConfig

from sead.config import build_scenario, build_usersim, runner_config
from sead.dialogue import RolloutLog, run_batch
from sead.policy.scripted import ReferenceAgent
from sead.run.fixed_profiles import fixed_profiles
from sead.run.paired import validation_jobs


def play_reference(cfg: DictConfig, out: Path) -> Path:
    """Play the reference agent on `cfg`'s validation dialogues and write them to `out` (read like a validation's
    dialogues, e.g. by `held_out_outcomes`). Its turns have the warm-up's token room (its lines whole, as they were
    imitated) within the validation's turn limit. Transcribed with SmolLM2's tokenizer, as the eval suite's scripted
    agents are: the user reads only the text."""
    from sead.models.smollm import load_tokenizer

    scenario, vc = build_scenario(cfg), cfg.trainer.validation
    jobs = validation_jobs(fixed_profiles(scenario, vc.profiles, vc.seed), vc.seed, vc.trials)
    tokenizer = load_tokenizer()

    async def play():
        with RolloutLog(out, fresh=True) as log:
            await run_batch(
                jobs,
                scenario=scenario,
                agent=ReferenceAgent(scenario, tokenizer),
                user=build_usersim(cfg, scenario),
                tokenizer=tokenizer,
                cfg=replace(runner_config(cfg), max_new_tokens=cfg.trainer.warmup.max_new_tokens),
                log=log,
            )

    asyncio.run(play())
    return out
