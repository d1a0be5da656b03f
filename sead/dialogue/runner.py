"""The episode runner: one dialogue between the agent and the simulated user.

The same code runs in embedded training, verl training and evaluation; backends differ only in the
AgentPolicy they pass. The agent speaks first. A dialogue ends on user status 1 (success) or -1 (hang-up),
agent status 1, the turn limit, the token budget, or a context that no longer fits its cap. A simulator that keeps
failing ends it as `sim_error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass, field

from sead.config import number, one_of
from sead.dialogue.agent import AgentPolicy, AgentRequest
from sead.dialogue.chat_tokens import ChatTokens, ContextOverflow, plain_ids
from sead.dialogue.episode import USER_REPORTS, Episode, Turn
from sead.dialogue.response_cache import ResponseCache, ResponseCacheConfig
from sead.dialogue.seeds import turn_seed
from sead.errors import SEADInputError
from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario
from sead.scenario.tags import UserTurn
from sead.usersim.base import Exchange, SimulatorError, UserReply, UserSimulator, environment_identity

log = logging.getLogger(__name__)


@dataclass
class RunnerConfig:
    max_turns: int = number(15, ge=1, le=1000)  # agent turns before a dialogue ends as turn_limit
    max_new_tokens: int = number(500, ge=1, le=1_000_000)  # per agent turn
    max_total_tokens: int = number(32768, ge=1, le=10_000_000)  # per episode, everything after the first prompt
    # rolling cap: oldest turns are dropped, never the SOP prompt
    max_context_tokens: int = number(8192, ge=1, le=10_000_000)
    sop_role: str = one_of("system", "user")  # role of the SOP prompt message ("user": templates without system)
    agent_sees: str = one_of("reply", "think_and_reply")  # what of a user turn the agent is shown
    on_malformed: str = one_of("feedback", "end")  # feedback: tell the agent and go on (the original) | end it
    format_error_message: str = (  # what on_malformed=feedback tells the agent, as the user's turn
        "[format error] Your last message did not have exactly one <response>...</response> block. "
        "Answer again in the required tag format."
    )
    user_timeout: float = number(120.0, gt=0, le=3600)  # seconds per simulator call
    # extra attempts after a failed call; then the dialogue ends as sim_error
    user_retries: int = number(3, ge=0, le=100)
    backoff_base: float = number(0.5, ge=0, le=600)  # seconds; doubles per attempt
    backoff_max: float = number(8.0, ge=0, le=3600)  # seconds: the longest wait between attempts
    concurrency: int = number(64, ge=1, le=100_000)  # episodes in flight at once (batch runner)
    response_cache: ResponseCacheConfig = field(default_factory=ResponseCacheConfig)  # training dialogues only


class UnusableReply(SimulatorError):
    """The simulator answered, but with nothing a user could have said (no <user_reply> even after repair)."""


def user_message_for_agent(turn: UserTurn, agent_sees: str) -> str:
    reply = f"<user_reply>{turn.reply}</user_reply>"
    if agent_sees == "think_and_reply" and turn.think:
        return f"<user_think>{turn.think}</user_think>\n{reply}"
    return reply


def retry_wait(cfg: RunnerConfig, attempt: int, error: Exception | None) -> float:
    """Seconds before attempt `attempt` (1: the first retry): the exponential backoff, or the wait the simulator
    asked for (a rate limit's Retry-After) where that is longer, up to dialogue.user_timeout: a burst of 429s then
    waits out the limit instead of using up every retry within a second."""
    backoff = min(cfg.backoff_max, cfg.backoff_base * 2 ** (attempt - 1))
    asked = getattr(error, "retry_after", None)
    return backoff if asked is None else max(backoff, min(asked, cfg.user_timeout))


async def ask_user(
    user: UserSimulator,
    scenario: Scenario,
    profile: Profile,
    history: list[Exchange],
    agent_response: str,
    *,
    seed: int,
    cfg: RunnerConfig,
) -> tuple[UserReply, UserTurn, int]:
    """Call the simulator with timeout and exponential backoff; return the reply, its parse, and retries used."""
    last: Exception | None = None
    for attempt in range(cfg.user_retries + 1):
        if attempt:
            await asyncio.sleep(retry_wait(cfg, attempt, last))
        try:
            # asyncio.timeout, not wait_for: no extra task per call, which hundreds of dialogues in flight pay for;
            # and none at all over a simulator whose own deadline comes first.
            own = user.call_deadline
            covered = own is not None and own <= cfg.user_timeout
            async with contextlib.nullcontext() if covered else asyncio.timeout(cfg.user_timeout):
                reply = await user.respond(profile, history, agent_response, seed=seed)
            turn = scenario.tags.parse_user(reply.text)
            if not turn.reply:
                raise UnusableReply(f"no <user_reply> in simulator output {reply.text[:80]!r}")
            return reply, turn, attempt
        except TimeoutError:
            last = SimulatorError(f"no answer within {cfg.user_timeout:g} s")
        except Exception as e:  # any simulator failure is retried, then ends the episode as sim_error
            last = e
        log.warning("user simulator attempt %d/%d failed: %s", attempt + 1, cfg.user_retries + 1, last)
    raise SimulatorError(f"gave up after {cfg.user_retries + 1} attempts: {last}")


async def run_episode(
    profile: Profile,
    *,
    scenario: Scenario,
    agent: AgentPolicy,
    user: UserSimulator,
    tokenizer,
    cfg: RunnerConfig,
    seed: int,
    episode_id: str = "",
    cache: ResponseCache | None = None,
    prefix: tuple[str, ...] = (),
    agent_seed: int | None = None,
    horizon: int | None = None,
) -> Episode:
    """One dialogue. `prefix`: agent turns (tagged text) replayed before the agent speaks, trained on by no one;
    `agent_seed`: the agent's sampling seed where it is not the dialogue's `seed` (which the user answers from);
    `horizon`: the dialogue ends once the agent has played this many turns after the prefix (None: no such end)."""
    t_start = time.perf_counter()
    timing = {"agent_s": 0.0, "user_s": 0.0}
    tokens = {"agent_prompt": 0, "agent_completion": 0, "user_prompt": 0, "user_completion": 0}
    chat = ChatTokens(tokenizer, scenario.agent_system_prompt(), cfg.sop_role)
    turns: list[Turn] = []
    history: list[Exchange] = []
    cache_rng, last_was_hit = random.Random(seed), False
    meta: dict = {
        "episode_id": episode_id,
        "seed": seed,
        "user_retries": 0,
        "cache_hits": 0,
        "tokenizer": getattr(tokenizer, "name_or_path", None) or None,
        USER_REPORTS: [],
    }
    if prefix:
        meta["prefix_turns"] = len(prefix)
    sampling_seed = seed if agent_seed is None else agent_seed
    end = "turn_limit"
    for turn_index in range(cfg.max_turns):
        if horizon is not None and turn_index >= len(prefix) + horizon:
            end = "branch_horizon"
            break
        try:
            chat.fit(cfg.max_new_tokens, cfg.max_context_tokens)
        except ContextOverflow as e:
            if not turns:  # the SOP prompt alone leaves no room: every dialogue would end here
                raise SEADInputError(
                    f"{e}: the SOP prompt and one agent turn of dialogue.max_new_tokens={cfg.max_new_tokens} must fit",
                    field="dialogue.max_context_tokens",
                ) from None
            end = "context_overflow"
            break
        if turn_index < len(prefix):
            eos = tokenizer.eos_token_id  # the turn closes as a sampled one would
            replayed = plain_ids(tokenizer, prefix[turn_index]) + ([eos] if eos is not None else [])
            agent_turn = scenario.tags.parse_agent(chat.add_agent(replayed, trained=False))
        else:
            t0 = time.perf_counter()
            request_seed = turn_seed(sampling_seed, turn_index)
            # A copy of the ids (the runner extends its list), the message dicts themselves (never changed once
            # appended): copying every message on every turn was a share of the runner's CPU.
            out = await agent.generate(
                AgentRequest(list(chat.prompt_ids), list(chat.messages), cfg.max_new_tokens, request_seed)
            )
            timing["agent_s"] += time.perf_counter() - t0
            tokens["agent_prompt"] += len(chat.prompt_ids)
            tokens["agent_completion"] += len(out.token_ids)
            agent_turn = scenario.tags.parse_agent(chat.add_agent(out.token_ids, out.logprobs))
        if not agent_turn.has_response and cfg.on_malformed == "end":
            turns.append(Turn(agent_turn))
            end = "format_error"
            break
        if not agent_turn.has_response:
            # As the original: tell the agent its format was wrong; this counts toward the turn limit.
            turns.append(Turn(agent_turn, feedback=cfg.format_error_message))
            chat.add_user(cfg.format_error_message)
        elif agent_turn.status == 1:
            turns.append(Turn(agent_turn))
            end = "agent_done"
            break
        else:
            t0 = time.perf_counter()
            cached = cache.lookup(agent_turn.stage, cache_rng, last_was_hit) if cache else None
            last_was_hit = cached is not None
            try:
                if cached is not None:
                    reply, user_turn, retries = UserReply(cached), scenario.tags.parse_user(cached), 0
                    meta["cache_hits"] += 1
                else:
                    reply, user_turn, retries = await ask_user(
                        user, scenario, profile, history, agent_turn.response, seed=turn_seed(seed, turn_index), cfg=cfg
                    )
                    if cache:
                        cache.add(agent_turn.stage, reply.text)
            except SimulatorError as e:
                turns.append(Turn(agent_turn))
                meta["sim_error"] = str(e)
                end = "sim_error"
                break
            finally:
                timing["user_s"] += time.perf_counter() - t0
            meta["user_retries"] += retries
            meta[USER_REPORTS].append(dict(reply.meta))  # a cached reply reports nothing: {}
            tokens["user_prompt"] += reply.prompt_tokens
            tokens["user_completion"] += reply.completion_tokens
            turns.append(Turn(agent_turn, user_turn))
            history.append(Exchange(agent_turn.response, reply.text))
            if user_turn.status in (1, -1):
                end = "user_success" if user_turn.status == 1 else "user_hangup"
                break
            chat.add_user(user_message_for_agent(user_turn, cfg.agent_sees))
        if chat.appended > cfg.max_total_tokens:
            end = "token_budget"
            break
    timing["total_s"] = time.perf_counter() - t_start
    timing["runner_s"] = timing["total_s"] - timing["agent_s"] - timing["user_s"]
    meta.update(timing=timing, agent=agent.identity(), user_simulator=environment_identity(user))
    return Episode(profile, turns, end, tokens, meta, segments=chat.segments)
