"""Scripted agents that need no model: a reference that follows the SOP and one that ignores it.

They bound what a trained policy should reach against a simulated user: the reference agent says each SOP
stage's reference line in order and answers every concern with its category's reference answer (from the
scenario's rules file), one thing per turn, in new words whenever it has to say something again (the rules
file's rewordings); the SOP-ignoring agent makes small talk in a valid tag format and should almost never
succeed. Both are deterministic: the reference agent's reply is a function of the user's replies so far.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sead.dialogue.agent import TextAgent
from sead.scenario.scenario import Scenario
from sead.usersim.rules import Rules, voiced_kinds
from sead.usersim.rules_file import scenario_rules
from sead.usersim.visible_text import content_words, normalise

_MIN_SHARED_WORDS = 2


@dataclass(frozen=True)
class _Action:
    kind: str  # "stage", "answer" or "done"
    stage: int
    category: str | None = None


def mid_portrait(space) -> dict[str, int]:
    """The middle of every dimension's range: a portrait that knows nothing about the user."""
    return {dim.name: (dim.low + dim.high) // 2 for dim in space.dimensions}


class ReferenceAgent(TextAgent):
    """Follows the SOP stage by stage and answers each concern the user voices."""

    name = "reference"

    def __init__(self, scenario: Scenario, tokenizer, rules: Rules | None = None):
        super().__init__(tokenizer)
        rules = rules or scenario_rules(scenario)
        self.scenario, self.rules = scenario, rules
        self.acks = [{normalise(a) for a in s.user_ack} for s in rules.stages]
        self.acks[-1].add(normalise(rules.success_line))
        self.phrases = voiced_kinds(scenario.library)  # normalised utterance or description -> category
        self.keywords: dict[str, set[str]] = {}  # category -> content words of its behaviours
        for phrase, category in self.phrases.items():
            self.keywords.setdefault(category, set()).update(content_words(phrase))

    def identity(self) -> dict:
        return {"name": self.name, "rules": self.rules.source}

    async def reply(self, messages: list[dict], seed: int) -> str:
        # Replay the agent's own decisions over the user's replies: no state is kept between calls.
        action, landed, last_reply = _Action("stage", 0), -1, None
        said: Counter[str | int] = Counter()  # times each line (a category's answer, a stage's line) was said
        for reply in user_replies(messages, self.scenario):
            said[_topic(action)] += 1
            action, landed = self._decide(action, landed, reply)
            last_reply = reply
        return self.scenario.tags.format_agent(
            self._say(action, said[_topic(action)]),
            self._portrait(last_reply),
            action.stage,
            1 if action.kind == "done" else 0,
        )

    def _decide(self, previous: _Action, landed: int, reply: str | None) -> tuple[_Action, int]:
        """The next action after the user's reply to `previous`, and the last stage known to have landed."""
        last = len(self.rules.stages) - 1
        text = normalise(reply or "")
        concern = self.concern_of(reply)
        # The user voices a concern only after a stage landed, so a concern answering a stage line counts too.
        if previous.kind == "stage" and reply is not None and (text in self.acks[previous.stage] or concern):
            landed = max(landed, previous.stage)
        if concern is not None:
            return _Action("answer", max(landed, 0), concern), landed
        if landed == last and text in self.acks[last]:
            return _Action("done", last), landed
        return _Action("stage", min(landed + 1, last)), landed

    def concern_of(self, reply: str | None) -> str | None:
        """The behaviour category a user reply voices: a library utterance in it, else shared keywords."""
        text = normalise(reply or "")
        if not text or text in self.rules.canned_user_lines:
            return None
        for phrase, category in self.phrases.items():
            if phrase in text:
                return category
        words = content_words(text)
        best = max(self.keywords, key=lambda c: len(words & self.keywords[c]))
        return best if len(words & self.keywords[best]) >= _MIN_SHARED_WORDS else None

    def _lines(self, action: _Action) -> tuple[str, ...]:
        """What the agent may say for an action: the reference line, then its rewordings."""
        if action.kind == "answer":
            concern = self.rules.concerns[action.category]
            return concern.reference_answer, *concern.reference_rewordings
        stage = self.rules.stages[action.stage]
        return stage.reference_agent, *stage.reference_rewordings

    def _say(self, action: _Action, times: int) -> str:
        # A user who hears the same sentence twice is annoyed and takes nothing from it; past the last rewording
        # the agent has nothing new to say and repeats it.
        lines = self._lines(action)
        return lines[min(times, len(lines) - 1)]

    def _portrait(self, reply: str | None) -> dict[str, int]:
        """A rough read of the user from the last reply: acks raise cooperation, concerns lower trust."""
        space, d = self.scenario.space, self.rules.dynamics
        guess = mid_portrait(space)
        text = normalise(reply or "")
        concern = self.concern_of(reply)
        if any(text in acks for acks in self.acks):
            shift = {"cooperation": 1}
        elif concern is not None:
            shift = {"trust": -1}
        else:
            shift = {"cooperation": -1} if reply is not None else {}
        if concern is not None and d.is_noisy(concern):
            shift["noise"] = d.noise_active - d.noise_base
        for name in guess:
            base = d.noise_base if name == "noise" else guess[name]
            guess[name] = min(space[name].high, max(space[name].low, base + shift.get(name, 0)))
        return guess


class SOPIgnoringAgent(TextAgent):
    """Well-formed turns of small talk that never follow the SOP: a floor any trained agent should beat."""

    name = "sop_ignoring"
    LINES = (
        "How has your day been so far?",
        "Lovely weather we are having, isn't it?",
        "Did you catch the football last night?",
        "I had a great sandwich for lunch today.",
        "What kind of music do you like?",
        "Have you watched any good films lately?",
        "My cat knocked a plant over this morning.",
        "Do you prefer tea or coffee?",
    )

    def __init__(self, scenario: Scenario, tokenizer):
        super().__init__(tokenizer)
        self.scenario = scenario

    async def reply(self, messages: list[dict], seed: int) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        return self.scenario.tags.format_agent(
            self.LINES[(seed + turn) % len(self.LINES)], mid_portrait(self.scenario.space), 0, 0
        )


def _topic(action: _Action) -> str | int:
    """What a line is about: a concern category or a stage (closing the call repeats the last stage's topic)."""
    return action.category if action.kind == "answer" else action.stage


def user_replies(messages: list[dict], scenario: Scenario) -> list[str | None]:
    """The user's reply to each agent turn; None where the runner sent something else (e.g. format feedback).
    Messages before the first agent turn are the SOP prompt, whatever their role."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    out = []
    for m in messages[first:]:
        if m["role"] == "user":
            out.append(scenario.tags.parse_user(m["content"]).reply if "<user_reply>" in m["content"] else None)
    return out
