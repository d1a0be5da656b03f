"""Scripted agents that need no model: a reference that follows the SOP and one that ignores it.

They bound what a trained policy should reach against a simulated user: the reference agent says each SOP
stage's reference line in order and answers every concern with its category's reference answer (from the
scenario's rules file); the SOP-ignoring agent makes small talk in a valid tag format and should almost never
succeed. Both are deterministic: the reference agent's reply is a function of the user's replies so far.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from sead.dialogue.agent import TextAgent
from sead.scenario.scenario import Scenario
from sead.usersim.rules import Rules, normalise, scenario_rules

# Said before a stage line the user did not take up, so a retry is not a word-for-word repeat.
RETRY_PREFIXES = ("Sorry, let me put that another way. ", "Just to be clear: ")
REANSWER_PREFIX = "To be clear: "
# Words this short or this common say nothing about which concern the user has.
_STOPWORDS = frozenset("that this with what your about will have from they them their just there does then "
                       "when where which would could should".split())
_WORD = re.compile(r"[a-z']+")
_MIN_SHARED_WORDS = 2


@dataclass(frozen=True)
class _Action:
    kind: str               # "stage", "answer" or "done"
    stage: int
    category: str | None = None


def _mid(dim) -> int:
    return (dim.low + dim.high) // 2


class ReferenceAgent(TextAgent):
    """Follows the SOP stage by stage and answers each concern the user voices."""

    name = "reference"

    def __init__(self, scenario: Scenario, tokenizer, rules: Rules | None = None):
        super().__init__(tokenizer)
        rules = rules or scenario_rules(scenario)
        self.scenario, self.rules = scenario, rules
        self.acks = [{normalise(a) for a in s.user_ack} for s in rules.stages]
        self.acks[-1].add(normalise(rules.success_line))
        self.not_concerns = set().union(*self.acks, *({normalise(x) for x in lines} for lines in (
            rules.accept_lines, rules.stall_lines, rules.off_topic_lines, rules.hangup_lines, [rules.not_owner_line])))
        self.phrases: dict[str, str] = {}           # normalised utterance or description -> category
        self.keywords: dict[str, set[str]] = {}     # category -> content words of its behaviours
        for b in scenario.library.behaviours:
            for said in filter(None, (b.utterance, b.text)):
                self.phrases[normalise(said)] = b.category
                self.keywords.setdefault(b.category, set()).update(_content_words(said))

    def identity(self) -> dict:
        return {"name": self.name, "rules": self.rules.source}

    async def reply(self, messages: list[dict], seed: int) -> str:
        # Replay the agent's own decisions over the user's replies: no state is kept between calls.
        action, landed, last_reply = _Action("stage", 0), -1, None
        said: Counter[_Action] = Counter()
        for reply in _user_replies(messages, self.scenario):
            said[action] += 1
            action, landed = self._decide(action, landed, reply)
            last_reply = reply
        return self.scenario.tags.format_agent(self._say(action, said[action]), self._portrait(last_reply),
                                               action.stage, 1 if action.kind == "done" else 0)

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
        if not text or text in self.not_concerns:
            return None
        for phrase, category in self.phrases.items():
            if phrase in text:
                return category
        words = _content_words(text)
        best = max(self.keywords, key=lambda c: len(words & self.keywords[c]))
        return best if len(words & self.keywords[best]) >= _MIN_SHARED_WORDS else None

    def _say(self, action: _Action, times: int) -> str:
        if action.kind == "answer":
            answer = self.rules.concerns[action.category].reference_answer
            return REANSWER_PREFIX + answer if times else answer
        line = self.rules.stages[action.stage].reference_agent
        if action.kind == "done" or not times:
            return line
        return RETRY_PREFIXES[times - 1] + line if times <= len(RETRY_PREFIXES) else line

    def _portrait(self, reply: str | None) -> dict[str, int]:
        """A rough read of the user from the last reply: acks raise cooperation, concerns lower trust."""
        space, d = self.scenario.space, self.rules.dynamics
        guess = {dim.name: _mid(dim) for dim in space.dimensions}
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
    LINES = ("How has your day been so far?", "Lovely weather we are having, isn't it?",
             "Did you catch the football last night?", "I had a great sandwich for lunch today.",
             "What kind of music do you like?", "Have you watched any good films lately?",
             "My cat knocked a plant over this morning.", "Do you prefer tea or coffee?")

    def __init__(self, scenario: Scenario, tokenizer):
        super().__init__(tokenizer)
        self.scenario = scenario

    async def reply(self, messages: list[dict], seed: int) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        portrait = {d.name: _mid(d) for d in self.scenario.space.dimensions}
        return self.scenario.tags.format_agent(self.LINES[(seed + turn) % len(self.LINES)], portrait, 0, 0)


def _user_replies(messages: list[dict], scenario: Scenario) -> list[str | None]:
    """The user's reply to each agent turn; None where the runner sent something else (e.g. format feedback).
    Messages before the first agent turn are the SOP prompt, whatever their role."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    out = []
    for m in messages[first:]:
        if m["role"] == "user":
            out.append(scenario.tags.parse_user(m["content"]).reply if "<user_reply>" in m["content"] else None)
    return out


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(normalise(text)) if len(w) >= 4 and w not in _STOPWORDS}
