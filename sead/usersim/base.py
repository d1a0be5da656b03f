"""The one interface every user simulator implements (scripted rules, an OpenAI-compatible endpoint, in-process HF).

A simulator sees the profile and the dialogue so far, and answers with raw text in the user tag format
(`<user_think>`, `<user_reply>`, `<user_cooperation>`, ..., `<user_status>`). The episode runner parses it,
so every backend is held to the same format and the same repair rules.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from sead.config import MAX_TEMPERATURE, MIN_TEMPERATURE, Domain
from sead.errors import SEADInputError
from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario
from sead.scenario.tags import AGENT_READING_VERSION

# The ranges of the numbers an LLM-backed simulator is built with (the keys of usersim.*, its constructor's
# arguments, so no schema checks them at load): a reply cut to a token or unbounded, a call that may never time out.
SIMULATOR_SETTINGS = {
    "temperature": Domain(ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE, also=(0,)),  # 0: greedy, where the server allows
    "top_p": Domain(gt=0, le=1),
    "top_k": Domain(ge=0, le=1_000_000),
    "max_tokens": Domain(ge=1, le=1_000_000),  # of one user reply
    "max_new_tokens": Domain(ge=1, le=1_000_000),
    "timeout": Domain(gt=0, le=3600),  # seconds per call
}


def check_settings(**values) -> None:
    """Raise SEADInputError naming `usersim.<key>` for the first value outside SIMULATOR_SETTINGS' range."""
    for key, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise SEADInputError(f"must be a number, got {value!r}", field=f"usersim.{key}")
        if problem := SIMULATOR_SETTINGS[key].problem(value):
            raise SEADInputError(problem, field=f"usersim.{key}")


@dataclass(frozen=True)
class Exchange:
    """One past round as the simulator needs it: the agent's spoken text and the user's own raw output."""

    agent_response: str
    user_text: str | None = None


@dataclass
class UserReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    meta: dict = field(default_factory=dict)


class SimulatorError(RuntimeError):
    """The simulator could not answer (timeout, HTTP error, dead server, an answer too large to be a reply). The
    runner retries, then gives up on the episode as `sim_error`: it never counts as an agent failure.
    `retry_after`: the seconds the simulator asked to wait before the next call (a rate limit's Retry-After)."""

    def __init__(self, message: str, *, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class UserSimulator(ABC):
    name: str = "base"
    # Seconds within which `respond` always answers or raises by itself (its own deadline), or None. The runner
    # sets no deadline of its own over one at least as short: a second timer per call is CPU it need not spend.
    call_deadline: float | None = None

    def __init__(self, scenario: Scenario):
        self.scenario = scenario

    @abstractmethod
    async def respond(self, profile: Profile, history: list[Exchange], agent_response: str, *, seed: int) -> UserReply:
        """The user's answer to `agent_response`, given the rounds before it. `seed` identifies the episode
        so a stochastic simulator can be deterministic per dialogue."""

    def identity(self) -> dict:
        """Name, model and settings, written into every rollout record and result file."""
        return {"name": self.name}

    async def check_health(self) -> None:  # noqa: B027  (optional: most simulators have nothing to check)
        """Fail fast, before any dialogue, when the simulator cannot answer: raise SEADInputError naming each
        unreachable URL (or other cause), which the CLI turns into exit status 2. Default: nothing to check."""

    async def aclose(self) -> None:  # noqa: B027  (optional: most simulators hold no connections)
        """Release connections."""


def environment_identity(user: UserSimulator) -> dict:
    """What a reply is judged by: the simulator's identity and the version of how agent turns are read. Runs and
    evaluations record this, and are reused or compared only where it matches."""
    return {**user.identity(), "agent_reading": AGENT_READING_VERSION}


def comparable_environment(identity: dict) -> dict:
    """What makes two recorded identities (`environment_identity`) one environment: all of it, in JSON's types,
    with the rules file by name only, since a run moved to another folder or checkout names it by another path."""
    identity = json.loads(json.dumps(identity))
    return {**identity, "rules": Path(identity["rules"]).name} if identity.get("rules") else identity
