"""Adversarial agents that say the reference agent's line and turn it around: negated, disowned, asked back, taken
back, framed as fiction, or with the turning word disguised from a plain matcher (look-alike letters, odd spellings,
accents, digits, marks drawn through the text, a right-to-left override). Test tools:
`sead.testing.adversarial_agents` lists them.
"""

from __future__ import annotations

import re
from functools import cached_property

from sead.policy.scripted import ReferenceAgent
from sead.usersim.visible_text import normalise, phrase_pattern


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


class HiddenInMarkupAgent(NegatingAgent):
    """The reference agent's line where a reader is not shown it, or shown it struck out or hidden: inside an HTML
    comment, a tag's attribute, or an element a browser hides or strikes through."""

    name = "hidden_in_markup"
    FRAMES = (
        "<!-- {} -->",
        "Okay. <!-- {} -->",
        "<!--{}-->",
        '<i title="{}"></i>',
        "<p hidden>{}</p>",
        "<s>{}</s>",
        "<del>{}</del>",
    )


class NumbersChangedAgent(NegatingAgent):
    """A known limit (`KNOWN_LIMITS`): the reference agent's line with every number in it one more ("a free 701-yuan
    credit", "from 21 GB to 41 GB"): other facts in the same words. The scripted user does not read numbers; where a
    phrase it listens for holds one, the line lands nothing."""

    name = "numbers_changed"
    FRAMES = ("",)

    def framed(self, frame: str, line: str) -> str:
        return re.sub(r"\d+", lambda m: str(int(m[0]) + 1), line)


class TwistedWordsAgent(NegatingAgent):
    """The reference agent's line with the phrases the user listens for glued into longer words that say something
    else ("illegitimate", "casino deposit", "prepay per click"): a reader reads other words, a matcher of substrings
    reads the line. Phrases that overlap are one stretch, glued at both ends."""

    name = "twisted_words"
    FRAMES = (("il", "ly"), ("un", "less"), ("casi", "s"), ("pre", "ed"), ("dis", "ish"), ("anti", "ism"))

    def framed(self, frame: tuple[str, str], line: str) -> str:
        text, (before, after) = normalise(line), frame
        spans = sorted((m.start(), m.end()) for p in self.listened_for for m in phrase_pattern(p).finditer(text))
        stretches: list[list[int]] = []
        for start, end in spans:
            if stretches and start < stretches[-1][1]:
                stretches[-1][1] = max(stretches[-1][1], end)
            else:
                stretches.append([start, end])
        for start, end in reversed(stretches):
            text = f"{text[:start]}{before}{text[start:end]}{after}{text[end:]}"
        return text[:1].upper() + text[1:]

    @cached_property
    def listened_for(self) -> tuple[str, ...]:
        """Every stage cue and concern answer phrase of the rules file."""
        return (
            *(p for s in self.rules.stages for p in s.agent_cues),
            *(p for c in self.rules.concerns.values() for p in c.resolved_by),
        )
