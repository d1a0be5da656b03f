"""Dialogues of scripted agents against the scripted user, without tokens: the episode runner's turn order, seeds,
messages and end rules, so hundreds of test profiles play in a second. Each dialogue comes back as the Episode the
runner makes, with every user turn's simulator report under `USER_REPORTS` (what stage progress is read from)."""

import asyncio

from sead.config import build_scenario, load_config
from sead.dialogue.episode import USER_REPORTS, Episode, Turn
from sead.dialogue.runner import RunnerConfig, user_message_for_agent
from sead.dialogue.seeds import eval_episode_seed, turn_seed
from sead.eval.settings import EvalConfig
from sead.eval.testset import sample_testset
from sead.usersim import Exchange

MAX_TURNS = 15
FORMAT_ERROR = RunnerConfig().format_error_message
SCENARIOS = ("restaurant", "telecom")


class StubTokenizer:
    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [1] * len(text.split())


def scenario_named(name):
    return build_scenario(load_config([f"scenario={name}"]))


def seeded_profiles(scenario, n):
    """The first n profiles of the seeded default test set that `sead eval` plays."""
    return sample_testset(scenario, EvalConfig().testset_size, EvalConfig().testset_seed)[:n]


async def converse(scenario, agent, user, profile, seed, max_turns=MAX_TURNS):
    tags = scenario.tags
    messages = [{"role": "system", "content": scenario.agent_system_prompt()}]
    history, turns, reports, end = [], [], [], "turn_limit"
    for turn in range(max_turns):
        agent_turn = tags.parse_agent(await agent.reply(messages, turn_seed(seed, turn)))
        messages.append({"role": "assistant", "content": agent_turn.text})
        if not agent_turn.has_response:  # the runner's default (`on_malformed=feedback`): tell the agent, go on
            turns.append(Turn(agent_turn, feedback=FORMAT_ERROR))
            messages.append({"role": "user", "content": FORMAT_ERROR})
            continue
        if agent_turn.status == 1:
            turns.append(Turn(agent_turn))
            end = "agent_done"
            break
        reply = await user.respond(profile, list(history), agent_turn.response, seed=turn_seed(seed, turn))
        user_turn = tags.parse_user(reply.text)
        turns.append(Turn(agent_turn, user_turn))
        reports.append(reply.meta)
        history.append(Exchange(agent_turn.response, reply.text))
        if user_turn.status in (1, -1):
            end = "user_success" if user_turn.status == 1 else "user_hangup"
            break
        messages.append({"role": "user", "content": user_message_for_agent(user_turn, "reply")})
    return Episode(profile, turns, end, meta={USER_REPORTS: reports})


def play(scenario, agent, user, profiles, seeds=None):
    """One dialogue per profile; seeds default to those `sead eval` gives the test set (eval.seed 0, one trial)."""
    seeds = seeds or [eval_episode_seed(0, i, 0) for i in range(len(profiles))]

    async def batch():
        return await asyncio.gather(*(converse(scenario, agent, user, p, s) for p, s in zip(profiles, seeds)))

    return asyncio.run(batch())


def completion_rate(episodes):
    return sum(e.success for e in episodes) / len(episodes)
