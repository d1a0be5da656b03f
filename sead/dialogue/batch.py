"""Run many episodes concurrently, with a concurrency limit, logging each as soon as it finishes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from sead.dialogue.agent import AgentPolicy
from sead.dialogue.episode import Episode
from sead.dialogue.response_cache import ResponseCache
from sead.dialogue.rollout_log import RolloutLog
from sead.dialogue.runner import RunnerConfig, run_episode
from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario
from sead.usersim.base import UserSimulator


@dataclass
class EpisodeJob:
    profile: Profile
    seed: int
    episode_id: str
    group: int = 0  # GRPO group: rollouts of one profile share it


async def run_batch(
    jobs: list[EpisodeJob],
    *,
    scenario: Scenario,
    agent: AgentPolicy,
    user: UserSimulator,
    tokenizer,
    cfg: RunnerConfig,
    log: RolloutLog | None = None,
    on_done: Callable[[Episode], None] | None = None,
    cache: ResponseCache | None = None,
    score: Callable[[Episode], dict | None] | None = None,
) -> list[Episode]:
    """Episodes in job order. A simulator failure ends only its own episode (as sim_error).
    `score` (e.g. the reward) is stored in `meta["reward"]` before the episode is logged."""
    gate = asyncio.Semaphore(max(1, cfg.concurrency))

    async def one(job: EpisodeJob) -> Episode:
        async with gate:
            ep = await run_episode(
                job.profile,
                scenario=scenario,
                agent=agent,
                user=user,
                tokenizer=tokenizer,
                cfg=cfg,
                seed=job.seed,
                episode_id=job.episode_id,
                cache=cache,
            )
        ep.meta["group"] = job.group
        if score is not None:
            ep.meta["reward"] = score(ep)
        if log is not None:
            log.append(ep)
        if on_done is not None:
            on_done(ep)
        return ep

    return list(await asyncio.gather(*(one(j) for j in jobs)))
