"""A dialogue whose context no longer fits dialogue.max_context_tokens ends by itself as `context_overflow` and
counts like any other failure; the other dialogues of the batch play on. Only an SOP prompt that leaves no room
for a single agent turn stops everything, as the config error it is."""

import asyncio

import pytest

from sead.dialogue import ChatTokens, EpisodeJob, RunnerConfig, TextAgent, run_batch
from sead.dialogue.episode import Episode
from sead.errors import SEADInputError
from sead.metrics import compute_metrics
from sead.run.fixed_profiles import fixed_profiles
from sead.run.scoring import EpisodeScorer
from sead.usersim.base import UserReply, UserSimulator

MAX_NEW = 48


class TerseAgent(TextAgent):
    async def reply(self, messages, seed):
        return "<response>Hi.</response>\n<stage>0</stage>\n<status>0</status>"


class Rambler(UserSimulator):
    """Answers in three words, except in the dialogue with seed 1, where every answer runs to 400."""

    async def respond(self, profile, history, agent_response, *, seed):
        words = 400 if seed // 1000 == 1 else 3  # the runner's per-turn seed is the dialogue's seed * 1000 + turn
        state = {d.name: d.low for d in self.scenario.space.dimensions}
        return UserReply(self.scenario.tags.format_user(" ".join(["fine"] * words), state, 0))


def play(scenario, tokenizer, cap: int) -> list[Episode]:
    jobs = [EpisodeJob(p, seed=i, episode_id=f"e{i}") for i, p in enumerate(fixed_profiles(scenario, 2, seed=0))]
    cfg = RunnerConfig(max_turns=3, max_new_tokens=MAX_NEW, max_context_tokens=cap)
    return asyncio.run(
        run_batch(
            jobs, scenario=scenario, agent=TerseAgent(tokenizer), user=Rambler(scenario), tokenizer=tokenizer, cfg=cfg
        )
    )


def test_an_overflowing_context_ends_its_own_dialogue_as_an_agent_failure(restaurant_cfg, restaurant, smollm_tokenizer):
    prompt = len(ChatTokens(smollm_tokenizer, restaurant.agent_system_prompt()).prompt_ids)
    # room for the SOP prompt, a turn and a short user message; not for the rambling one
    short, overflowed = play(restaurant, smollm_tokenizer, cap=prompt + MAX_NEW + 60)
    assert (short.end_reason, short.num_turns) == ("turn_limit", 3)
    assert (overflowed.end_reason, overflowed.num_turns) == ("context_overflow", 1)
    assert not overflowed.sim_error and not overflowed.success
    assert Episode.from_dict(overflowed.to_dict()).end_reason == "context_overflow"  # rollout logs read it back
    score = EpisodeScorer.for_run(restaurant_cfg, restaurant)(overflowed)  # trained on, not left out
    assert score is not None and score["components"]["completion"] == 0.0
    result = compute_metrics([short, overflowed], restaurant.space)
    assert result["counts"]["sim_error"] == 0 and result["metrics"]["CR"]["n"] == 2
    assert result["end_reasons"]["context_overflow"] == 1


def test_an_sop_prompt_that_leaves_no_room_for_a_turn_is_a_config_error(restaurant, smollm_tokenizer):
    prompt = len(ChatTokens(smollm_tokenizer, restaurant.agent_system_prompt()).prompt_ids)
    with pytest.raises(SEADInputError) as e:
        play(restaurant, smollm_tokenizer, cap=prompt + MAX_NEW - 1)
    assert e.value.field == "dialogue.max_context_tokens" and "dialogue.max_new_tokens=48" in str(e.value)
