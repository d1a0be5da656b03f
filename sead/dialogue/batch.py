"""Run many episodes concurrently, with a concurrency limit, logging each as soon as it finishes."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    # A branched group's member: these agent turns are replayed (as context, untrained) before the agent speaks,
    # with the user answering from `seed` as in the source dialogue; the agent samples from `agent_seed`.
    prefix: tuple[str, ...] = ()
    agent_seed: int | None = None
    branched_from: str | None = None  # the source dialogue's episode id
    horizon: int | None = None  # agent turns played after the prefix, at most (None: to the dialogue's end)


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
                cache=None if job.prefix else cache,  # cached replies would not replay the prefix
                prefix=job.prefix,
                agent_seed=job.agent_seed,
                horizon=job.horizon,
            )
        ep.meta["group"] = job.group
        if job.branched_from is not None:
            ep.meta["branched_from"] = job.branched_from
        if score is not None:
            ep.meta["reward"] = score(ep)
        if log is not None:
            log.append(ep)
        if on_done is not None:
            on_done(ep)
        return ep

    with older_objects_frozen():
        return list(await asyncio.gather(*(one(j) for j in jobs)))


_batches_running = 0
_froze = False  # whether the running batches froze the heap (and so must unfreeze it)
_thresholds: tuple[int, int, int] | None = None  # the collector's thresholds before the first batch began
# Allocations between young collections while batches run (Python's default is 700). Each dialogue turn allocates
# hundreds of short-lived containers; at the default the young collections took a sixth of the runner's CPU with
# 480 dialogues in flight (benchmarks/rollout_concurrency.py), at this a fortieth. What is unreachable is still
# collected, a few thousand allocations later.
BATCH_YOUNG_THRESHOLD = 20_000


@contextmanager
def older_objects_frozen() -> Iterator[None]:
    """While batches run, the cyclic garbage collector skips every object that existed before the first began, and
    collects the young generation less often. With hundreds of dialogues in flight it collects often, and its full
    passes over the process's older objects (model code, tokenizers, configs) took about a tenth of the runner
    process's CPU. The last batch to end unfreezes them and restores the thresholds, so garbage among them is still
    collected later. A heap someone else froze is left alone; thresholds raised above ours are kept."""
    global _batches_running, _froze, _thresholds
    if _batches_running == 0:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            _froze = True
        _thresholds = gc.get_threshold()
        young = _thresholds[0] and max(_thresholds[0], BATCH_YOUNG_THRESHOLD)  # 0: collection is off; so it stays
        gc.set_threshold(young, *_thresholds[1:])
    _batches_running += 1
    try:
        yield
    finally:
        _batches_running -= 1
        if _batches_running == 0:
            if _froze:
                gc.unfreeze()
                _froze = False
            gc.set_threshold(*_thresholds)
            _thresholds = None
