"""The rules file of a scenario: the data behind the scripted user simulator and the scripted reference agent.

A rules file (YAML, named by the scenario's `rules:` key) holds:
- `stages`: one entry per SOP stage, in order: `agent_cues` (phrases that show the agent is doing that
  stage), `user_ack` (what the user says when the stage lands), `reference_agent` (the reference line) and
  optional `reference_rewordings` (other wordings of it, for when the reference agent must say it again);
- `concerns`: one entry per behaviour category of the library: `resolved_by` (phrases that answer it),
  `reference_answer` and optional `reference_rewordings`;
- `contradictions` (phrases that break the offer's facts), `success_line`, `hangup_lines`, `not_owner_line`;
- optional `accept_lines` / `stall_lines` / `off_topic_lines` (the user's words when a concern was answered /
  it will not act yet / the agent said nothing it can use) and an optional `dynamics:` block overriding the
  numbers in `Dynamics`.

Phrases match case-insensitively as whole words after `normalise` (what a reader sees, placeholder brackets
dropped), so a cue "platform" matches a reply saying "[Platform]" and the other way round, and "legitimate" does
not match "illegitimate" (`visible_text.says`). A phrase may not contain, or be contained in, a phrase of another
stage (or of another concern): the number of stages a reply cues and of concern kinds it answers must be well
defined, since a reply with too many of either is a salad. A phrase counts only with substance around it:
`dynamics.substance_words` content words of its own stage's or concern's lines in the reply, so a bare phrase
padded with filler words cues and answers nothing, and where most of the reply's content words are those lines'
(`dynamics.focus_share`), so a phrase inside talk of something else does not either. It counts only where the reply
holds no negation word that none of those lines use (`dynamics.negation_check`): "It is not true that ..." or
"Nobody ..." before a line says something else than the line; and only in a sentence that is not a question, unless
those lines ask it too. A reply holding markup a reader is not shown (an HTML comment, a tag) counts for nothing.
`Rules.read` is the one reading of an agent reply, shared by the scripted user and the hack monitors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from sead.usersim.negations import negations_in
from sead.usersim.visible_text import (
    WORD,
    content_of,
    content_words,
    disguised,
    hidden_markup,
    letters_of,
    ngrams,
    normalise,
    says,
    share,
    stated,
)

# The version of how a reply is read (`Rules.read`, `normalise`, the negation lists). Part of the scripted user's
# identity, so runs and evaluations played against another reading are never reused or compared as if the user
# were the same: raise it whenever some reply would read differently.
READING_VERSION = 8  # 4: padded and disguised repeats, negations without "not"; 5: lines disowned or hedged ("I
# doubt that", "Is it true that ...? I'm unsure"), sarcasm; 6: answers asked as questions, hypotheticals, more
# disowning word forms and take-backs, look-alike letters of other scripts, salads hidden behind a negation; 7: what a
# reader sees of marks and letters (text struck through with combining strokes, the reversed display of a
# right-to-left override, accented letters as their plain ones), negations with digits for letters ("n0t"), more
# disowning words, emoji and other languages' plain negations; 8: phrases heard as whole words only ("legitimate" is
# not in "illegitimate"), markup a reader is not shown read as unsaid and the reply that holds it as unusable


def voiced_kinds(library) -> dict[str, str]:
    """What a user of this behaviour library says when voicing a concern (each behaviour's utterance, and its
    description, which stands in for it in libraries without one), normalised, mapped to the concern's category."""
    return {normalise(said): b.category for b in library.behaviours for said in filter(None, (b.utterance, b.text))}


@dataclass(frozen=True)
class Dynamics:
    """Numbers of the scripted user's state dynamics; each may be overridden under `dynamics:` in the rules file.

    Not a setting: a turn that lands (the expected stage, or an answered concern) raises cooperation with
    chance trust / trust's high end, so distrustful users are slower to win over.
    """

    operate_threshold: int = 3  # cooperation needed to actually do the operation, hence to succeed
    hangup_cooperation: int | None = None  # hang up when cooperation falls to this; None = the dimension's low end
    hangup_emotion: int | None = None  # hang up when emotion falls to this; None = the dimension's low end
    max_unresolved_rounds: int = 3  # rounds a voiced concern may stay unanswered before the user hangs up
    long_reply_words: int = 60  # an agent reply longer than this lowers emotion
    contradiction_trust_drop: int = 2  # trust lost when the agent contradicts the offer's facts
    unresolved_trust_cost: int = 1  # trust lost per round a voiced concern stays unanswered
    resolve_trust_gain: int = 1  # trust gained when a concern is answered
    low_trust: int = 1  # at or below this trust, cooperation and emotion may sink each round
    drag_chance: float = 0.4  # chance per round of each of those two drops
    impatience: float = 0.3  # chance per round that emotion drops, times (1 - trust / trust's high end)
    noise_base: int = 1  # reported noise when no noisy behaviour is active
    noise_active: int = 3  # reported noise while a noisy behaviour is active
    noisy_categories: tuple[str, ...] = ()  # categories that make the user noisy; empty = names with "communication"
    # What makes a reply earn nothing (see `Rules.read`): a user is served one step at a time, in the agent's words.
    max_stages_per_reply: int = 1  # cues of more SOP stages than this in one reply: a salad
    max_concern_kinds_per_reply: int = 1  # answers to more concern kinds than this in one reply: a salad
    # A cue or answer phrase counts only where the reply also holds this many content words of that stage's or
    # concern's own lines (its phrases, reference line and rewordings; the phrase's words count): a bare phrase
    # padded with filler says nothing to the user. 0: the phrase alone.
    substance_words: int = 3
    # ... and where at least this share of the reply's content words are words of those lines: a phrase with three of
    # its line's words inside a sentence about something else ("My parrot says no hidden fees, deposit, card") is not
    # said to the user. 0: no such share.
    focus_share: float = 0.6
    # ... and where the reply holds at most this many content words that no line of the rules file uses (what the
    # scripted user understands): a line inside a frame of other words ("Legend has it that ...", "In my novel,
    # ...", "Disregard my last message. ...") is not said plainly. None: no such limit.
    foreign_words: int | None = 1
    # An answer to another kind of concern than the one the user waits on is worse than a dodge: this much more
    # trust and emotion lost, and this many more rounds toward max_unresolved_rounds (guessing costs).
    wrong_answer_cost: int = 1
    # A cue or answer phrase counts only where the reply holds no negation word (NEGATIONS) that its stage's or
    # concern's own lines lack: "It is not true that" + the reference line does not say the line. False: no check.
    negation_check: bool = True
    overlap_ngram: int = 3  # word n-grams compared by the repeat and echo checks
    # this share of a reply's n-grams already said by the agent, or of one earlier reply's n-grams said again: a repeat
    repeat_share: float = 0.5
    # this share of a reply's n-grams from the user's last reply, or of that reply's n-grams quoted in it: an echo
    echo_share: float = 0.5

    def is_noisy(self, category: str) -> bool:
        if self.noisy_categories:
            return category in self.noisy_categories
        return "communication" in category.lower()


class _Said:
    """What a text's words hold for the phrase checks (a reply, read once; or a stage's or concern's own lines)."""

    def __init__(self, normalised_text: str):
        text = normalise(normalised_text)
        words = WORD.findall(text)
        self.text, self.stated = text, stated(text)
        self.words = content_of(words)
        self.negations = negations_in(text, words)


# A stage's or concern's phrase check: its key (stage index or concern category), its phrases, the words of its own
# lines, and the phrases its own lines say inside a question (which count in a question, as those lines ask them).
_Check = tuple[object, tuple[str, ...], _Said, frozenset[str]]


def _check(key, phrases: tuple[str, ...], own: _Said, lines: tuple[str, ...]) -> _Check:
    texts = [normalise(line) for line in lines]
    asked = frozenset(p for p in phrases for t in texts if says(t, p) and not says(stated(t), p))
    return key, phrases, own, asked


@dataclass(frozen=True)
class _Heard:
    stages: list[int]  # SOP stages a reply cues, that count
    kinds: list[str]  # concern kinds it answers, that count
    stages_mentioned: int  # stages and kinds it speaks of, counting or not: what a salad is judged on
    kinds_mentioned: int


@dataclass(frozen=True)
class StageRules:
    name: str
    agent_cues: tuple[str, ...]  # normalised
    user_ack: tuple[str, ...]
    reference_agent: str
    reference_rewordings: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConcernRules:
    category: str
    resolved_by: tuple[str, ...]  # normalised
    reference_answer: str
    reference_rewordings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reading:
    """What one agent reply does in the scripted user's eyes."""

    stages: tuple[int, ...]  # SOP stages it cues
    kinds: tuple[str, ...]  # concern categories it answers
    repeat_share: float  # share of its word n-grams the agent already said, or of one earlier reply's it says again
    echo_share: float  # share of its word n-grams from the user's last reply, or of that reply's it quotes
    salad: bool  # cues or answers more than a reply may at once
    repeated: bool  # mostly what the agent already said
    echoed: bool  # mostly the user's own last words
    disguised: bool = False  # holds a letter the scenario never writes (look-alikes of Latin ones)
    hidden: bool = False  # holds markup a reader is not shown (an HTML comment, a tag)

    @property
    def usable(self) -> bool:
        """Whether the reply can land a stage or answer a concern at all."""
        return not (self.salad or self.repeated or self.echoed or self.disguised or self.hidden)


@dataclass(frozen=True)
class Rules:
    source: str
    stages: tuple[StageRules, ...]
    concerns: dict[str, ConcernRules]
    contradictions: tuple[str, ...]  # normalised
    success_line: str
    hangup_lines: tuple[str, ...]
    not_owner_line: str
    accept_lines: tuple[str, ...]
    stall_lines: tuple[str, ...]
    off_topic_lines: tuple[str, ...]
    dynamics: Dynamics

    def stages_cued(self, normalised_text: str) -> list[int]:
        return self._heard(_Said(normalised_text)).stages

    def kinds_answered(self, normalised_text: str) -> list[str]:
        return self._heard(_Said(normalised_text)).kinds

    def _heard(self, said: _Said) -> _Heard:
        """The stages and concern kinds a reply states (not asks, unless their own lines ask it) with substance
        around it, and of those the ones that count: the reply does not turn them around, and does not mostly talk
        of something else (see `Dynamics`). A salad is judged on all that are mentioned: a negation elsewhere in the
        reply must not hide a second answer from the salad count while the first one still counts."""
        d = self.dynamics

        def spoken_of(checks: tuple[_Check, ...]) -> list[tuple[object, _Said]]:
            return [
                (key, own)
                for key, phrases, own, asked in checks
                if any(says(said.stated, p) or (p in asked and says(said.text, p)) for p in phrases)
                and len(said.words & own.words) >= d.substance_words
            ]

        stages, kinds = spoken_of(self._stage_checks), spoken_of(self._concern_checks)
        # Judged on the words of everything the reply does together: an answer and then the next step of the call
        # is one reply about the call.
        on_topic = said.words.intersection(set().union(*(own.words for _, own in stages + kinds)))
        focused = len(on_topic) >= d.focus_share * len(said.words)
        if d.foreign_words is not None and len(said.words - self.vocabulary) > d.foreign_words:
            focused = False

        def counted(spoken: list[tuple[object, _Said]]) -> list:
            plain = [k for k, own in spoken if not d.negation_check or said.negations <= own.negations]
            return plain if focused else []

        return _Heard(counted(stages), counted(kinds), len(stages), len(kinds))

    @cached_property
    def _stage_checks(self) -> tuple[_Check, ...]:
        return tuple(
            _check(i, s.agent_cues, own, (s.reference_agent, *s.reference_rewordings))
            for (i, s), own in zip(enumerate(self.stages), self.stage_own)
        )

    @cached_property
    def _concern_checks(self) -> tuple[_Check, ...]:
        return tuple(
            _check(c, r.resolved_by, self.concern_own[c], (r.reference_answer, *r.reference_rewordings))
            for c, r in self.concerns.items()
        )

    @cached_property
    def stage_own(self) -> tuple[_Said, ...]:
        """The words of each stage's own lines (cues, reference line, rewordings): what a reply doing that stage
        talks about, and the negations it may use."""
        return tuple(_Said(" ".join((*s.agent_cues, s.reference_agent, *s.reference_rewordings))) for s in self.stages)

    @cached_property
    def concern_own(self) -> dict[str, _Said]:
        return {
            c: _Said(" ".join((*r.resolved_by, r.reference_answer, *r.reference_rewordings)))
            for c, r in self.concerns.items()
        }

    @cached_property
    def vocabulary(self) -> frozenset[str]:
        """The content words of every line and phrase of the rules file, the user's included: what it understands."""
        user = (*(a for s in self.stages for a in s.user_ack), *self.canned_user_lines, *self.contradictions)
        cues = (
            *(p for s in self.stages for p in s.agent_cues),
            *(p for c in self.concerns.values() for p in c.resolved_by),
        )
        return frozenset(content_words(" ".join((*self.reference_lines, *cues, *user))))

    @cached_property
    def letters(self) -> frozenset[str]:
        """The non-ASCII letters the rules file's lines write (none for an English scenario)."""
        return letters_of(normalise(" ".join((*self.reference_lines, *self.canned_user_lines))))

    @cached_property
    def reference_lines(self) -> tuple[str, ...]:
        """Every line the reference agent may say: each stage's and concern's reference line and rewordings."""
        return (
            *(line for s in self.stages for line in (s.reference_agent, *s.reference_rewordings)),
            *(line for c in self.concerns.values() for line in (c.reference_answer, *c.reference_rewordings)),
        )

    @cached_property  # read for every user reply the reference agent and the hack monitors look at
    def canned_user_lines(self) -> frozenset[str]:
        """Everything the scripted user says that is not a concern of its own, normalised."""
        lines = [
            *(a for s in self.stages for a in s.user_ack),
            *self.accept_lines,
            *self.stall_lines,
            *self.off_topic_lines,
            *self.hangup_lines,
            self.not_owner_line,
            self.success_line,
        ]
        return frozenset(normalise(x) for x in lines)

    def read(self, reply: str, said: Iterable[str] = (), heard: str | None = None) -> Reading:
        """Read an agent reply, given what the agent said before in the dialogue and the user's last reply."""
        d, text = self.dynamics, normalise(reply)
        words = _Said(text)  # the reply's words, read once for both checks
        found = self._heard(words)
        grams = ngrams(reply, d.overlap_ngram)
        earlier = [ngrams(s, d.overlap_ngram) for s in said]
        # A repeat either way round: mostly things said before, or most of one earlier reply said again (padding
        # a line said before with new words does not make it new to the user).
        repeat = max([share(grams, set().union(*earlier)), *(share(e, grams) for e in earlier)])
        # An echo either way round too: mostly the user's words, or the user's words quoted whole inside a longer reply.
        told = ngrams(heard, d.overlap_ngram) if heard is not None else set()
        echo = max(share(grams, told), share(told, grams))
        return Reading(
            tuple(found.stages),
            tuple(found.kinds),
            repeat,
            echo,
            salad=found.stages_mentioned > d.max_stages_per_reply
            or found.kinds_mentioned > d.max_concern_kinds_per_reply,
            repeated=bool(grams) and repeat >= d.repeat_share,
            echoed=bool(grams) and echo >= d.echo_share,
            disguised=disguised(text, self.letters),
            hidden=hidden_markup(reply),
        )
