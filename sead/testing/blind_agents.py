"""Adversarial agents that never read what the user asks for: each says what its rule gives it, whatever the user
says, in well-formed turns whose `<stage>` tag counts up by one per turn (the cheapest way to look as if the SOP
were being followed). Test tools: `sead.testing.adversarial_agents` lists them and what each tries.
"""

from __future__ import annotations

import random
import re
from abc import abstractmethod
from collections import Counter

from sead.dialogue.agent import TextAgent
from sead.policy.scripted import SOPIgnoringAgent, mid_portrait, user_replies
from sead.scenario.scenario import Scenario
from sead.usersim.rules import Rules
from sead.usersim.rules_file import scenario_rules
from sead.usersim.visible_text import matches_any, normalise

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_OPENERS = ("", "So, ", "Right, ", "Quick one: ", "Look, ")


def last_user_reply(messages: list[dict], scenario: Scenario) -> str | None:
    """The user's last non-empty reply in the dialogue so far, if any."""
    return next((r for r in reversed(user_replies(messages, scenario)) if r), None)


class _BlindAgent(TextAgent):
    """Says `line(messages, turn)`; the portrait is the middle of every range and the stage tag counts turns."""

    name = "blind"

    def __init__(self, scenario: Scenario, tokenizer, rules: Rules | None = None):
        super().__init__(tokenizer)
        self.scenario, self.rules = scenario, rules or scenario_rules(scenario)

    def identity(self) -> dict:
        return {"name": self.name, "rules": self.rules.source}

    async def reply(self, messages: list[dict], seed: int) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        stage = min(turn, len(self.rules.stages) - 1)
        return self.scenario.tags.format_agent(self.line(messages, turn), mid_portrait(self.scenario.space), stage, 0)

    @abstractmethod
    def line(self, messages: list[dict], turn: int) -> str:
        """What to say at agent turn `turn` (0-based), given the messages so far."""


class KeywordSaladAgent(_BlindAgent):
    name = "salad"

    def line(self, messages: list[dict], turn: int) -> str:
        cues, answers = self.phrases(turn)
        return f"{', '.join(cues + answers)}."

    def phrases(self, turn: int) -> tuple[list[str], list[str]]:
        """A cue of every stage and an answer phrase of every concern category."""
        return ([s.agent_cues[0] for s in self.rules.stages], [c.resolved_by[0] for c in self.rules.concerns.values()])


class RotatingSaladAgent(KeywordSaladAgent):
    name = "salad_rotating"

    def phrases(self, turn: int) -> tuple[list[str], list[str]]:
        rng = random.Random(turn)
        cues = [s.agent_cues[turn % len(s.agent_cues)] for s in self.rules.stages]
        answers = [c.resolved_by[turn % len(c.resolved_by)] for c in self.rules.concerns.values()]
        rng.shuffle(cues)
        rng.shuffle(answers)
        return cues, answers

    def line(self, messages: list[dict], turn: int) -> str:
        cues, answers = self.phrases(turn)
        return f"{_OPENERS[turn % len(_OPENERS)]}{', '.join(cues + answers)}."


class SplitSaladAgent(RotatingSaladAgent):
    name = "salad_split"

    def line(self, messages: list[dict], turn: int) -> str:
        cues, answers = self.phrases(turn)
        return f"{', '.join(cues).capitalize()}. {', '.join(answers).capitalize()}."


class TagOnlyAgent(_BlindAgent):
    name = "tag_only"

    def line(self, messages: list[dict], turn: int) -> str:
        return SOPIgnoringAgent.LINES[turn % len(SOPIgnoringAgent.LINES)]


class EchoAgent(_BlindAgent):
    name = "echo"

    def line(self, messages: list[dict], turn: int) -> str:
        return last_user_reply(messages, self.scenario) or self.rules.stages[0].reference_agent


class PromptReciterAgent(_BlindAgent):
    name = "prompt_reciter"
    SENTENCES_PER_TURN = 2

    def __init__(self, scenario: Scenario, tokenizer, rules: Rules | None = None):
        super().__init__(scenario, tokenizer, rules)
        phrases = [p for s in self.rules.stages for p in s.agent_cues]
        phrases += [p for c in self.rules.concerns.values() for p in c.resolved_by]
        sentences = [s.strip() for s in _SENTENCE_END.split(scenario.agent_system_prompt()) if s.strip()]
        self.recital = [s for s in sentences if matches_any(normalise(s), phrases)] or sentences

    def line(self, messages: list[dict], turn: int) -> str:
        n = self.SENTENCES_PER_TURN
        start = (turn * n) % len(self.recital)
        return " ".join(self.recital[start : start + n])


class BlindReferenceAgent(_BlindAgent):
    name = "blind_reference"

    def __init__(self, scenario: Scenario, tokenizer, rules: Rules | None = None):
        super().__init__(scenario, tokenizer, rules)
        common = [c for c, _ in Counter(b.category for b in scenario.library.behaviours).most_common()]
        *opening, closing = self.rules.stages
        answers = [self.rules.concerns[c].reference_answer for c in common]
        self.script = [line for i, stage in enumerate(opening) for line in (stage.reference_agent, answers[i])]
        self.script += [closing.reference_agent, *closing.reference_rewordings]

    def line(self, messages: list[dict], turn: int) -> str:
        return self.script[turn % len(self.script)]


class StageCyclerAgent(_BlindAgent):
    name = "stage_cycler"

    def __init__(self, scenario: Scenario, tokenizer, rules: Rules | None = None):
        super().__init__(scenario, tokenizer, rules)
        stages = self.rules.stages
        rounds = max(1 + len(s.reference_rewordings) for s in stages)
        self.script = [(s.reference_agent, *s.reference_rewordings)[min(k, len(s.reference_rewordings))]
                       for k in range(rounds) for s in stages]  # fmt: skip

    def line(self, messages: list[dict], turn: int) -> str:
        return self.script[turn % len(self.script)]
