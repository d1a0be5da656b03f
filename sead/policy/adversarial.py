"""Adversarial scripted agents: cheap policies that try to win the scripted user without serving it.

A user simulator is only as good as the policies it cannot be fooled by, so every rule of the scripted user is
tested against these (tests/test_adversarial.py: each completes at most 5% of the test profiles on every shipped
scenario, except `guess_answers`, bounded by what a constant answer wins). None of them reads what the user asks
for; all write well-formed turns whose `<stage>` tag counts up by one per turn, the cheapest way to look as if the
SOP were being followed.

- `salad`: one short sentence holding a cue of every SOP stage and an answer phrase of every concern category;
- `salad_rotating`: the same, with other phrases in another order every turn, so consecutive turns differ;
- `salad_split`: the stage cues in one sentence, the concern answers in a second;
- `tag_only`: small talk;
- `echo`: the reference greeting, then the user's own last words back;
- `prompt_reciter`: the sentences of its SOP prompt that hold a stage cue or a concern answer, in order;
- `blind_reference`: the reference agent's lines in the order a typical call needs them (a stage, then an
  answer to one of the most common concerns, and so on), played whatever the user says.

These read the user as the reference agent does, and try to skimp on what they tell it:
- `bare_phrases`: the reference agent's choice every turn, said as nothing but the phrase the user listens for
  and a few changing filler words ("Legitimate, sure quite indeed.");
- `guess_answers`: the reference agent, except that it cannot tell one concern from another: it answers the
  kinds in the order of how common they are in the library, the next one each time the user asks again;
- `negated`: the reference agent's line every turn, turned around ("It is not true that ...", "Nobody will tell
  you that ..."): every phrase and word the user listens for, saying the opposite;
- `disowned`: the same line doubted, reported as hearsay, taken back, said sarcastically or hedged into a question
  ("I doubt that ...", "... Yeah, right.", "Maybe ...? Who knows."), with no plain negation word;
- `questioned`: the same line asked back or posed as a what-if ("Is it true that ...?", "Suppose ...");
- `disowned_forms`: the same line disowned with other forms of the listed words ("lied", "denied", "fictitious");
- `taken_back`: the same line taken back or mocked afterwards ("... Strike that.", "... April fools!", "~~...~~");
- `look_alike_negated`: the frames of `negated` and `disowned` with the turning words spelt in Cyrillic look-alike
  letters ("It is nоt true that ..."): on screen the same words, to a plain matcher none;
- `odd_spelling`: the same with other disguises: a modifier-letter apostrophe or a backtick ("isnʼt", "don`t"), a
  dotless "ı" or a Latin alpha, an underline combined onto each letter, Greek capitals ("ΝΟΤ");
- `odd_questions`: the line asked with marks a plain "?" check misses ("?!", "**...?**", "‽", "❓") or asked
  without one ("Tell me whether ...");
- `framed`: the line inside a frame of words the scripted user never hears in its call: fiction ("Once upon a
  time, ..."), rumour ("Legend has it that ..."), a retraction of the last reply, an idiom ("Fat chance that
  ..."), or an eye-rolling emoji;
These say the reference agent's choice as a bare phrase and a few words of its line, inside something else:
- `embedded`: a grammatical sentence about something unrelated ("My parrot says no hidden fees, card and deposit.");
- `asked_back`: a question to the user that asserts nothing ("Which sounds nicer as a band name: ...?");
- `parrot`: the user's last words quoted back whole, then the phrase and three words of the line.
And these follow the SOP while answering no concern they were asked:
- `menu`: offers a menu of every kind of concern, then repeats the user's choice back;
- `two_answers`: the right answer, then the most common other kind's answer ("..., Also, ...");
- `stage_cycler`: every stage line and rewording in a loop, blind.
"""

from __future__ import annotations

import dataclasses
import random
import re
from abc import abstractmethod
from collections import Counter

from sead.dialogue.agent import TextAgent
from sead.policy.scripted import ReferenceAgent, SOPIgnoringAgent, mid_portrait, user_replies
from sead.scenario.scenario import Scenario
from sead.usersim.rules import Rules, content_words, normalise, words_of
from sead.usersim.rules_file import scenario_rules

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
        self.recital = [s for s in sentences if any(p in normalise(s) for p in phrases)] or sentences

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


class BarePhrasesAgent(ReferenceAgent):
    name = "bare_phrases"
    FILLER = "okay sure right well indeed really honestly certainly clearly quite naturally basically".split()

    async def reply(self, messages: list[dict], seed: int) -> str:
        turn = self.scenario.tags.parse_agent(await super().reply(messages, seed))
        text = normalise(turn.response)
        answers = [p for c in self.rules.concerns.values() for p in c.resolved_by]
        cues = [p for s in self.rules.stages for p in s.agent_cues]
        phrase = next(p for p in (*answers, *cues) if p in text)  # what the reference line is heard for
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


class NegatingAgent(ReferenceAgent):
    name = "negated"
    FRAMES = (
        "It is not true that {}",
        "Nobody will tell you that {}",
        "It would be false to say: {}",
        "I can't promise this, but {}",
        "Don't believe it when they say {}",
        "It's a myth that {}",  # frames whose only turning word is not a plain "not"
        "{} Just kidding.",
        "Pretend I said the opposite: {}",
    )

    async def reply(self, messages: list[dict], seed: int) -> str:
        turn = self.scenario.tags.parse_agent(await super().reply(messages, seed))
        frame = self.FRAMES[sum(m["role"] == "assistant" for m in messages) % len(self.FRAMES)]
        return self.scenario.tags.format_agent(
            self.framed(frame, turn.response), turn.portrait, turn.stage, turn.status
        )

    def framed(self, frame: str, line: str) -> str:
        return frame.format(line[:1].lower() + line[1:])


class _FramingAgent(NegatingAgent):
    """NegatingAgent with frames around the line without its closing punctuation (`{}` ends mid-sentence)."""

    def framed(self, frame: str, line: str) -> str:
        said = super().framed(frame, line.strip().rstrip(".!?"))
        return said[:1].upper() + said[1:]


class QuestioningAgent(_FramingAgent):
    name = "questioned"
    FRAMES = (
        "Is it true that {}?",
        "What if I told you {}?",
        "Would you believe me if I said {}?",
        "Suppose, just hypothetically, {}.",
        "Do you think that {}?",
        "Would it surprise you to hear {}?",
        "Could it be that {}?",
        "Imagine a world where {}.",
    )


class DisownedFormsAgent(_FramingAgent):
    name = "disowned_forms"
    FRAMES = (
        "The last salesman lied when he said {}.",
        "Only a liar would tell you {}.",
        "Here is a falsehood: {}.",
        "Our company denied that {}.",
        "A fictitious story: {}.",
        "{}. I joked, of course.",
        "I was pretending when I said {}.",
        "Mythical claim of the week: {}.",
    )


class TakenBackAgent(_FramingAgent):
    name = "taken_back"
    FRAMES = (
        "{}. I take that back.",
        "{}. Strike that.",
        "{}. Dream on.",
        "{}. April fools!",
        "Some people say {}.",
        "{}. Forget I said that.",
        "Who can say? {}.",
        "{}. Psych!",
        "{} /s",
        "~~{}~~",
    )


# Cyrillic letters drawn like Latin ones
_LOOK_ALIKE = str.maketrans("oaeicpyxOAEICP", "оаеісрухОАЕІСР")


class OddSpellingAgent(_FramingAgent):
    name = "odd_spelling"
    FRAMES = (
        "It isn\u02bct true that {}.",
        "I don`t think {}.",
        "It's a l\u0131e that {}.",
        "It's f\u0251lse that {}.",
        "It is n\u0332o\u0332t\u0332 true that {}.",
        "It is \u039d\u039f\u03a4 true that {}.",
        "{}. \u039c\u03a5\u03a4\u0397.",
    )


class OddQuestionsAgent(_FramingAgent):
    name = "odd_questions"
    FRAMES = (
        "Do you think {}?!",
        "**Do you believe {}?**",
        "Would you say {}\u203d",
        "Do you think {}\u2753",
        "Do you believe {}?...",
        "Tell me whether {}.",
        "I'd like to know if {}.",
        "Guess whether {}.",
    )


class FramedAgent(_FramingAgent):
    name = "framed"
    FRAMES = (
        "Once upon a time, {}.",
        "In an alternate universe, {}.",
        "Legend has it that {}.",
        "{}, or so they say.",
        "{}. I made that up.",
        "Disregard my last message. {}.",
        "Fat chance that {}.",
        "{} \U0001f644",
    )


class LookAlikeNegatedAgent(_FramingAgent):
    name = "look_alike_negated"
    FRAMES = tuple(
        re.sub(r"(?i)\b(not|nobody|false|myth|doubt|yeah|right|maybe|who|knows|scammer)\b",
               lambda m: m.group(0).translate(_LOOK_ALIKE), frame)
        for frame in (
            "It is not true that {}.",
            "Nobody will tell you that {}.",
            "It would be false to say: {}.",
            "It's a myth that {}.",
            "I doubt that {}.",
            "{}. Yeah, right.",
            "Maybe {}? Who knows.",
            "Only a scammer says {}.",
        )
    )  # fmt: skip


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


class DisowningAgent(NegatingAgent):
    name = "disowned"
    FRAMES = (
        "I doubt that {}",  # disowned: the speaker does not stand behind the line
        "Allegedly, {}",
        "It would be inaccurate to tell you that {}",
        "Only a scammer says {}",
        "{} Yeah, right.",  # sarcasm
        "Scratch that: {}",
        "Is it the case that {}? I'm unsure.",  # hedged into a question nobody answers
        "Maybe {}? Who knows.",
    )


# -- the red team of 2026-11-30: what a reader sees against what a matcher reads -----------------------------------
class StruckThroughAgent(NegatingAgent):
    """The reference agent's line with a combining stroke or slash over every character: a reader sees it crossed
    out; a reading that drops combining marks would hear the line."""

    name = "struck_through"
    FRAMES = ("\u0336", "\u0338", "\u0335")  # the mark drawn through each character

    def framed(self, frame: str, line: str) -> str:
        return "".join(c if c.isspace() else c + frame for c in line)


class MirroredAgent(NegatingAgent):
    """Right-to-left overrides (U+202E ... U+202C): the line shown mirrored, which no reader can read, or a take-back
    stored backwards that a reader sees the right way round ("... A lie!")."""

    name = "mirrored"
    FRAMES = (
        "\u202e{}\u202c",
        "{} \u202e!eil A\u202c",
        "\u202e:eurt ton si tI\u202c {}",
        "{} \u202e.gniddik tsuJ\u202c",
    )


class AccentedNegatedAgent(_FramingAgent):
    """Turning words with accents on their letters, which a reader reads as the plain words."""

    name = "accented_negated"
    FRAMES = (
        "{}. N\u00f6t.",
        "L\u00efes: {}.",
        "{}. J\u00fcst k\u00efdding.",
        "It is n\u00f6t tr\u00fce that {}.",
        "N\u00f6body will tell you that {}.",
        "It's a m\u00fdth that {}.",
    )


class DigitsForLettersAgent(_FramingAgent):
    """Turning words with digits for the letters they look like ("N0t", "L1es")."""

    name = "digits_negated"
    FRAMES = (
        "{}. N0t.",
        "L1es: {}.",
        "{}. J0king.",
        "It is n0t true that {}.",
        "F4lse: {}.",
        "{}. Just k1dding.",
        "It's fa1se that {}.",
    )


class OneWordDisownedAgent(_FramingAgent):
    """The line, then one short word or emoji that takes it back ("All a con.", "Prank!", a cross, a cap)."""

    name = "one_word_disowned"
    FRAMES = (
        "{}. All a con.",
        "{}. Prank!",
        "{}. Bluffing.",
        "{} (erroneous).",
        "{}. Gotcha.",
        "{}. Trolling.",
        "{} \u274c",
        "{} \U0001f9e2",
        "{} \U0001f44e",
        "{} \U0001f6ab",
        "{} \U0001f92b",
        "{} \U0001f914",
    )


class ForeignNegatedAgent(_FramingAgent):
    """The line turned around in another language written in Latin letters ("Non \u00e8 vero: ...")."""

    name = "foreign_negated"
    FRAMES = (
        "Non \u00e8 vero: {}.",
        "N\u00e3o \u00e9 verdade: {}.",
        "{}. Pas vrai!",
        "Es falso: {}.",
        "{}. Nicht wahr.",
        "Faux: {}.",
        "{}. Mentira.",
    )


ADVERSARIAL_AGENTS = {
    cls.name: cls
    for cls in (
        KeywordSaladAgent,
        RotatingSaladAgent,
        SplitSaladAgent,
        TagOnlyAgent,
        EchoAgent,
        PromptReciterAgent,
        BlindReferenceAgent,
        BarePhrasesAgent,
        GuessingAgent,
        NegatingAgent,
        DisowningAgent,
        QuestioningAgent,
        DisownedFormsAgent,
        TakenBackAgent,
        LookAlikeNegatedAgent,
        OddSpellingAgent,
        OddQuestionsAgent,
        FramedAgent,
        EmbeddedPhraseAgent,
        AskedBackAgent,
        ParrotAgent,
        MenuAgent,
        TwoAnswersAgent,
        StageCyclerAgent,
        StruckThroughAgent,
        MirroredAgent,
        AccentedNegatedAgent,
        DigitsForLettersAgent,
        OneWordDisownedAgent,
        ForeignNegatedAgent,
    )
}
# Agents that win about what the reference agent wins without serving the user as well, through what the scripted
# user cannot judge (docs/user_simulators.md); the hack monitors flag them.
KNOWN_LIMITS = {cls.name: cls for cls in (WordBagAgent, ShuffledLineAgent)}
