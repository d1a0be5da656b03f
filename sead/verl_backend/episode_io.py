"""What the verl agent loop does around SEAD's episode runner, kept free of verl imports so it is tested alone.

- `SEADContext`: the scenario, user simulator, runner settings and scorer of a run, built once per process from
  the run's resolved config (verl creates a new agent-loop object for every trajectory).
- `trajectory_tokens`: an Episode's token ids and loss mask split the way verl wants them (prompt | response).
- `rollout_path` / `append_record`: the run directory's rollout JSONL, written from many worker processes.
- `RunPlays` / `dialogue_of_row`: which dialogue a play of a dataset row is, from the row's own data and how often
  the row was played before in the same verl run, so that no verl trainer has to say (verl's V1 trainer passes a
  step and a session index; its legacy trainer, which verl's development branch restores, passes neither).
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
    _append_locked(path, (json.dumps(record) + "\n").encode("utf-8"))


def _append_locked(path: Path, line: bytes, count: bytes | None = None) -> int:
    """Append `line` under an exclusive lock; return how many lines equal to `count` the file held before."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            seen = 0
            if count is not None:
                fh.seek(0)
                seen = sum(held == count for held in fh)
            fh.write(line)
            fh.flush()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return seen


@dataclass(frozen=True)
class RunPlays:
    """What one verl run (one SEAD iteration) plays, as the outer loop writes it into the agent-loop config: each
    training row `group_size` times in its step, and the validation rows `val_trials` times for each of
    `validations` (k: the validation after k iterations; 0, before training, comes first in the first run).
    `plays_file` counts the plays of each row across the run's worker processes."""

    plays_file: Path
    steps_per_iteration: int
    validations: tuple[int, ...]
    group_size: int
    val_trials: int

    def claim(self, extra_info: dict) -> int:
        """This play's number among the plays of its row in this run (0 for the first), counted in `plays_file`:
        the n plays of one row in one step (a GRPO group) are the same row n times, told apart by nothing else."""
        key = f"{extra_info.get('split', 'train')} {extra_info.get('step')} {extra_info['group']}\n".encode()
        return _append_locked(self.plays_file, key, count=key)


@dataclass(frozen=True)
class RowDialogue:
    split: str
    step: int  # the SEAD step it trains (validation: the step after which it measures)
    group: int  # the profile's place among its step's profiles, or in the validation set
    session: int  # the rollout's place in its group, or the validation trial

    @property
    def episode_id(self) -> str:
        return f"{self.split}-s{self.step}-p{self.group}-r{self.session}"


def dialogue_of_row(extra_info: dict, play: int, plays: RunPlays) -> RowDialogue:
    """Which dialogue the `play`-th play of a row is: training rows carry their step; validation rows are played
    `val_trials` times per validation, the validations in order."""
    split, group = str(extra_info.get("split", "train")), int(extra_info["group"])
    if split == "train":
        return RowDialogue(split, int(extra_info["step"]), group, play)
    validation = plays.validations[min(play // plays.val_trials, len(plays.validations) - 1)]
    return RowDialogue(split, validation * plays.steps_per_iteration, group, play % plays.val_trials)


async def play_row(
    ctx: SEADContext, agent: AgentPolicy, tokenizer, *, extra_info: dict, plays: RunPlays, response_length: int
) -> tuple[Episode, TrajectoryTokens]:
    """Play one play of the row's profile, score it, append its record to the run directory, and split its
    tokens."""
    profile = profile_from_dict(json.loads(extra_info["profile"]), ctx.scenario.space, ctx.scenario.library)
    d = dialogue_of_row(extra_info, plays.claim(extra_info), plays)
    ep = await run_episode(
        profile,
        scenario=ctx.scenario,
        agent=agent,
        user=ctx.user,
        tokenizer=tokenizer,
        cfg=ctx.runner_cfg,
        seed=train_episode_seed(int(ctx.cfg.seed), d.step, d.group, d.session, plays.group_size),
        episode_id=d.episode_id,
    )
    ep.meta.update(group=d.group, step=d.step, reward=ctx.score(ep))
    tokens = trajectory_tokens(ep, ctx.first_prompt(tokenizer), response_length)
    ep.meta["truncated"] = tokens.truncated
    path = rollout_path(ctx.layout, split=d.split, step=d.step, steps_per_iteration=plays.steps_per_iteration)
    append_record(path, ep.to_dict())
    return ep, tokens
