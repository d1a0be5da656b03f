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

from sead.scenario.profiles import Profile
from sead.scenario.scenario import Scenario
from sead.scenario.tags import AGENT_READING_VERSION


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
    """The simulator could not answer (timeout, HTTP error, dead server). The runner retries, then gives up
    on the episode as `sim_error`: it never counts as an agent failure."""


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
