"""What the verl agent loop does around SEAD's episode runner, kept free of verl imports so it is tested alone.

- `SEADContext`: the scenario, user simulator, runner settings and scorer of a run, built once per process from
  the run's resolved config (verl creates a new agent-loop object for every trajectory).
- `trajectory_tokens`: an Episode's token ids and loss mask split the way verl wants them (prompt | response).
- `rollout_path` / `append_record`: the run directory's rollout JSONL, written from many worker processes.
- `play_row`: one dataset row -> one dialogue, recorded; the agent loop's whole job apart from verl's types.
"""

from __future__ import annotations

import fcntl
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from sead.dialogue.agent import AgentPolicy
from sead.dialogue.chat_tokens import ChatTokens
from sead.dialogue.episode import Episode
from sead.dialogue.runner import run_episode
from sead.dialogue.seeds import train_episode_seed
from sead.errors import SEADInputError
from sead.run.layout import RunLayout
from sead.run.scoring import EpisodeScorer
from sead.scenario.profiles import profile_from_dict

log = logging.getLogger(__name__)


@dataclass
class SEADContext:
    cfg: object
    scenario: object
    user: object
    runner_cfg: object
    score: EpisodeScorer
    layout: RunLayout
    _prompt_ids: list[int] | None = None

    @classmethod
    def from_config_file(cls, path: str | Path) -> SEADContext:
        from sead.config import build_scenario, build_usersim, runner_config

        path = Path(path)
        if not path.is_file():
            raise SEADInputError("the run's resolved SEAD config is missing", path=path)
        cfg = OmegaConf.load(path)
        scenario = build_scenario(cfg)
        return cls(
            cfg,
            scenario,
            build_usersim(cfg, scenario),
            runner_config(cfg),
            EpisodeScorer.for_run(cfg, scenario),
            RunLayout(Path(str(cfg.run_dir)).resolve()),
        )

    def first_prompt(self, tokenizer) -> list[int]:
        """The SOP prompt as the runner renders it: every dialogue starts with exactly these ids."""
        if self._prompt_ids is None:
            self._prompt_ids = list(
                ChatTokens(tokenizer, self.scenario.agent_system_prompt(), self.runner_cfg.sop_role).prompt_ids
            )
        return self._prompt_ids


_CONTEXTS: dict[str, SEADContext] = {}


def load_context(config_path: str | Path) -> SEADContext:
    key = str(Path(config_path).resolve())
    if key not in _CONTEXTS:
        _CONTEXTS[key] = SEADContext.from_config_file(key)
    return _CONTEXTS[key]


@dataclass
class TrajectoryTokens:
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float]
    truncated: bool


def trajectory_tokens(ep: Episode, prompt_ids: list[int], response_length: int) -> TrajectoryTokens:
    """Split the episode's first token segment into verl's prompt and response.

    The response mask is SEAD's loss mask unchanged (1 on sampled agent tokens only). A dialogue that ended in a
    simulator error gets an all-zero mask: it carries no verdict on the agent, so it must not train it. Only the
    first segment is used; the launcher sizes the context cap so that a dialogue never starts a second one.
    """
    if not ep.segments:
        raise ValueError("the episode has no token segments")
    seg = ep.segments[0]
    n = len(prompt_ids)
    if seg.ids[:n] != list(prompt_ids) or any(seg.mask[:n]):
        raise ValueError("the episode does not start with the SOP prompt the loop expects")
    if len(ep.segments) > 1:
        log.warning(
            "episode %s outgrew dialogue.max_context_tokens; only its first segment is trained",
            ep.meta.get("episode_id"),
        )
    ids, mask, lps = seg.ids[n:], seg.mask[n:], seg.logprobs[n:]
    truncated = len(ids) > response_length
    if truncated:
        ids, mask, lps = ids[:response_length], mask[:response_length], lps[:response_length]
    if ep.sim_error:
        mask = [0] * len(mask)
    return TrajectoryTokens(list(prompt_ids), list(ids), list(mask), list(lps), truncated)


def extra_fields(ep: Episode) -> dict:
    """Per-trajectory fields verl carries next to the tensors. Prefixed so they never collide with the reward
    function's keys, and the same keys for every episode (verl builds arrays from the first one's keys)."""
    record = ep.to_dict()
    record.pop("segments")  # the ids are already the trajectory; the reward needs only the transcript
    return {
        "sead_episode": record,
        "sead_profile": ep.profile.to_dict(),
        "sead_end_reason": ep.end_reason,
        "sead_statuses": [t.user.status if t.user else None for t in ep.turns],
        "sead_turns": ep.num_turns,
        "sead_transcript": [
            {"agent": t.agent.response, "user": t.user.reply if t.user else t.feedback} for t in ep.turns
        ],
    }


def rollout_path(layout: RunLayout, *, split: str, step: int, steps_per_iteration: int) -> Path:
    """Training dialogues go to the step's rollouts; validation ones to validation k, the validation after k
    iterations (0 = before training), as in the embedded trainer."""
    if split == "val":
        return layout.validation_dialogues(step // steps_per_iteration)
    return layout.rollouts(step)


def append_record(path: Path, record: dict) -> None:
    """Append one JSON line; several agent-loop worker processes write the same file, so lock it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record) + "\n").encode("utf-8")
    with open(path, "ab") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            fh.write(line)
            fh.flush()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


async def play_row(
    ctx: SEADContext,
    agent: AgentPolicy,
    tokenizer,
    *,
    extra_info: dict,
    step: int,
    session: int,
    group_size: int,
    steps_per_iteration: int,
    response_length: int,
) -> tuple[Episode, TrajectoryTokens]:
    """Play the row's profile, score it, append its record to the run directory, and split its tokens."""
    profile = profile_from_dict(json.loads(extra_info["profile"]), ctx.scenario.space, ctx.scenario.library)
    split, index = str(extra_info.get("split", "train")), int(extra_info.get("index", 0))
    ep = await run_episode(
        profile,
        scenario=ctx.scenario,
        agent=agent,
        user=ctx.user,
        tokenizer=tokenizer,
        cfg=ctx.runner_cfg,
        seed=train_episode_seed(int(ctx.cfg.seed), step, index, session, group_size),
        episode_id=f"{split}-s{step}-p{index}-r{session}",
    )
    ep.meta.update(group=index, step=step, reward=ctx.score(ep))
    tokens = trajectory_tokens(ep, ctx.first_prompt(tokenizer), response_length)
    ep.meta["truncated"] = tokens.truncated
    append_record(
        rollout_path(ctx.layout, split=split, step=step, steps_per_iteration=steps_per_iteration), ep.to_dict()
    )
    return ep, tokens
