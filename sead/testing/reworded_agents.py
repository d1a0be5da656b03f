"""Adversarial agents that make the reference agent's choices and skimp on saying them: the phrase the user listens
for with little or nothing of its line around it, or the line inside talk of something else, or an answer to
another kind of concern than the one the user raised. Test tools: `sead.testing.adversarial_agents` lists them.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

from sead.policy.scripted import ReferenceAgent
from sead.scenario.scenario import Scenario
from sead.testing.blind_agents import last_user_reply
from sead.usersim.rules import Rules
from sead.usersim.visible_text import content_words, normalise, says, words_of


class BarePhrasesAgent(ReferenceAgent):
    name = "bare_phrases"
    FILLER = "okay sure right well indeed really honestly certainly clearly quite naturally basically".split()

    async def reply(self, messages: list[dict], seed: int) -> str:
        turn = self.scenario.tags.parse_agent(await super().reply(messages, seed))
        text = normalise(turn.response)
        answers = [p for c in self.rules.concerns.values() for p in c.resolved_by]
        cues = [p for s in self.rules.stages for p in s.agent_cues]
        phrase = next(p for p in (*answers, *cues) if says(text, p))  # what the reference line is heard for
        rng = random.Random(f"{seed}/{len(messages)}")
        return self.scenario.tags.format_agent(self.say(phrase, text, rng), turn.portrait, turn.stage, turn.status)

    def say(self, phrase: str, line: str, rng: random.Random) -> str:
        return f"{phrase.capitalize()}, {' '.join(rng.sample(self.FILLER, 3))}."

    @staticmethod
    def other_words(phrase: str, line: str) -> list[str]:
        """The content words of the reference line besides the phrase's, in a fixed order."""
        return sorted(content_words(line) - set(words_of(phrase)))


class WordBagAgent(BarePhrasesAgent):
    """A known limit of the scripted user, kept to show it (`KNOWN_LIMITS`): the phrase and three other words of
    the reference line, in any order, with the grammar dropped ("Legitimate restaurants fair understand."). The
    substance rule counts words, not sentences, so this wins what the reference wins; the hack monitors'
    `word_bag_share` is what shows it."""

    name = "word_bag"

    def say(self, phrase: str, line: str, rng: random.Random) -> str:
        own = self.other_words(phrase, line)
        bag = [phrase, *rng.sample(own, min(3, len(own)))]
        rng.shuffle(bag)
        return " ".join(bag).capitalize() + "."


class ShuffledLineAgent(BarePhrasesAgent):
    """A known limit of the scripted user, kept to show it (`KNOWN_LIMITS`): the reference agent's whole line, the
    phrase the user listens for intact and every other word shuffled around it ("card with you your we stays never
    ask for passwords and bank."). Every word the user counts is there; only the order is gone. The hack monitors'
    `scrambled_share` is what shows it."""

    name = "shuffled_line"

    def say(self, phrase: str, line: str, rng: random.Random) -> str:
        before, _, after = line.partition(phrase)
        others = words_of(f"{before} {after}")
        rng.shuffle(others)
        cut = rng.randrange(len(others) + 1)
        return " ".join([*others[:cut], phrase, *others[cut:]]).capitalize() + "."


class GuessingAgent(ReferenceAgent):
    name = "guess_answers"

    def __init__(self, scenario: Scenario, tokenizer, rules: Rules | None = None):
        super().__init__(scenario, tokenizer, rules)
        self.by_frequency = [c for c, _ in Counter(b.category for b in scenario.library.behaviours).most_common()]
        self.asked: Counter[str] = Counter()

    async def reply(self, messages: list[dict], seed: int) -> str:
        self.asked = Counter()  # the reference agent replays the whole dialogue on every call
        return await super().reply(messages, seed)

    def _decide(self, previous, landed, reply):
        action, landed = super()._decide(previous, landed, reply)
        if action.kind == "answer":  # a concern is open; which one, it does not know
            guess = self.by_frequency[self.asked[reply] % len(self.by_frequency)]
            self.asked[reply] += 1
            action = dataclasses.replace(action, category=guess)
        return action, landed


class EmbeddedPhraseAgent(BarePhrasesAgent):
    """The reference agent's choice as its phrase and three words of its line, inside a sentence about something
    else (a new one each turn, so no turn repeats another)."""

    name = "embedded"
    TEMPLATES = (
        "My cousin keeps a note that says {p}, next to the words {a}, {b} and {c}, on her fridge.",
        "At the pub quiz last night the answer was {p}, and the bonus words were {a}, {b} and {c}.",
        "I once read a poem about {a}, {b} and {c}; its last line was {p}.",
        "My parrot has learned to say {p}, and sometimes {a}, {b} or {c}, in the mornings.",
        "On the radio they played a song called {p}, with verses about {a}, {b} and {c}.",
        "Our football club chants {p} at every match, and the kids shout {a}, {b} and {c}.",
        "In my dream a talking cat whispered {p} and then hummed {a}, {b} and {c}.",
        "Somebody scratched {p} into the park bench, beside {a}, {b} and {c}.",
    )

    def say(self, phrase: str, line: str, rng: random.Random) -> str:
        own = self.other_words(phrase, line)
        a, b, c = rng.sample(own, 3) if len(own) >= 3 else (own + ["today", "again", "anyway"])[:3]
        return rng.choice(self.TEMPLATES).format(p=f'"{phrase}"', a=a, b=b, c=c)


class AskedBackAgent(EmbeddedPhraseAgent):
    name = "asked_back"
    TEMPLATES = (
        "Quick question for you: have you ever heard someone say {p} while talking about {a}, {b} and {c}?",
        "Would you rather chat about {a}, {b} or {c}, or about {p}?",
        "Can you guess which word I'm thinking of: {p}, {a}, {b} or {c}?",
        "Which of these sounds nicer to you as a band name: {p}, {a}, {b} or {c}?",
        "Which would make the best name for a boat: {p}, {a}, {b} or {c}?",
        "What colour do {p}, {a}, {b} and {c} make you think of?",
        "Is {p} a better crossword answer than {a}, {b} or {c}?",
        "Would your dog come if you called out {p}, {a}, {b} or {c}?",
    )


class ParrotAgent(BarePhrasesAgent):
    name = "parrot"

    async def reply(self, messages: list[dict], seed: int) -> str:
        self.heard = last_user_reply(messages, self.scenario)
        return await super().reply(messages, seed)

    def say(self, phrase: str, line: str, rng: random.Random) -> str:
        own = self.other_words(phrase, line)
        words = " ".join(rng.sample(own, min(3, len(own))))
        return f'You said "{self.heard}" {phrase.capitalize()}, {words}.' if self.heard else line


class MenuAgent(ReferenceAgent):
    name = "menu"

    async def reply(self, messages: list[dict], seed: int) -> str:
        self.heard = last_user_reply(messages, self.scenario)
        return await super().reply(messages, seed)

    def _say(self, action, times: int) -> str:
        if action.kind != "answer":
            return super()._say(action, times)
        if times == 0:
            kinds = ", ".join(c.replace("_", " ").lower() for c in self.rules.concerns)
            return f"Happy to help. Which of these is it about: {kinds}? Just pick one."
        return f"Got it, you picked: {self.heard}"


class TwoAnswersAgent(ReferenceAgent):
    name = "two_answers"

    def __init__(self, scenario: Scenario, tokenizer, rules: Rules | None = None):
        super().__init__(scenario, tokenizer, rules)
        self.by_frequency = [c for c, _ in Counter(b.category for b in scenario.library.behaviours).most_common()]

    def _say(self, action, times: int) -> str:
        line = super()._say(action, times)
        if action.kind != "answer":
            return line
        other = next(c for c in self.by_frequency if c != action.category)
        return f"{line} Also, {self.rules.concerns[other].reference_answer}"


class LaterTakeBackAgent(ReferenceAgent):
    """A known limit (`KNOWN_LIMITS`): after each answer to a concern, a reply of its own that takes the answer back,
    then the reference agent's next line. The scripted user reads each reply on its own, so the answer stands; the
    take-back is a turn in which the user hears nothing."""

    name = "taken_back_later"
    TAKE_BACK = "Scratch my last answer, it was a lie."

    async def reply(self, messages: list[dict], seed: int) -> str:
        said = [self.scenario.tags.parse_agent(m["content"]) for m in messages if m["role"] == "assistant"]
        if said and said[-1].response in self.answers:
            last = said[-1]
            return self.scenario.tags.format_agent(self.TAKE_BACK, last.portrait, last.stage, 0)
        return await super().reply(self._without_take_backs(messages), seed)

    def _without_take_backs(self, messages: list[dict]) -> list[dict]:
        """The dialogue as the reference agent would have had it: each take-back and the user's reply to it left out."""
        kept, skip = [], False
        for m in messages:
            if skip:
                skip = False
            elif m["role"] == "assistant" and self.scenario.tags.parse_agent(m["content"]).response == self.TAKE_BACK:
                skip = True
            else:
                kept.append(m)
        return kept

    @property
    def answers(self) -> frozenset[str]:
        return frozenset(
            line for c in self.rules.concerns.values() for line in (c.reference_answer, *c.reference_rewordings)
        )
