"""Adversarial scripted agents: cheap policies that try to win the scripted user without serving it. Test tools,
not agents to pick: `sead eval scripted:NAME` offers only the reference agent and the SOP-ignoring floor.

A user simulator is only as good as the policies it cannot be fooled by, so every rule of the scripted user is
tested against these (tests/test_adversarial.py: each completes at most 5% of the test profiles on every shipped
scenario, except `guess_answers`, bounded by what a constant answer wins). None of them serves the user; all
write well-formed turns.

Blind (`blind_agents`): they never read what the user asks for.
- `salad`: one short sentence holding a cue of every SOP stage and an answer phrase of every concern category;
- `salad_rotating`: the same, with other phrases in another order every turn, so consecutive turns differ;
- `salad_split`: the stage cues in one sentence, the concern answers in a second;
- `tag_only`: small talk;
- `echo`: the reference greeting, then the user's own last words back;
- `prompt_reciter`: the sentences of its SOP prompt that hold a stage cue or a concern answer, in order;
- `blind_reference`: the reference agent's lines in the order a typical call needs them (a stage, then an
  answer to one of the most common concerns, and so on), played whatever the user says;
- `stage_cycler`: every stage line and rewording in a loop.

Reworded (`reworded_agents`): the reference agent's choices, said with less than its line.
- `bare_phrases`: nothing but the phrase the user listens for and a few changing filler words ("Legitimate, sure
  quite indeed.");
- `embedded`: the phrase and three words of the line inside a sentence about something unrelated ("My parrot says
  no hidden fees, card and deposit.");
- `asked_back`: the same inside a question to the user that asserts nothing ("Which sounds nicer as a band name:
  ...?");
- `parrot`: the user's last words quoted back whole, then the phrase and three words of the line;
- `guess_answers`: cannot tell one concern from another: answers the kinds in the order of how common they are in
  the library, the next one each time the user asks again;
- `menu`: offers a menu of every kind of concern, then repeats the user's choice back;
- `two_answers`: the right answer, then the most common other kind's answer ("..., Also, ...").

Framed (`framed_agents`): the reference agent's line every turn, turned around.
- `negated`: "It is not true that ...", "Nobody will tell you that ...";
- `disowned`: doubted, reported as hearsay, taken back, said sarcastically or hedged into a question ("I doubt
  that ...", "... Yeah, right.", "Maybe ...? Who knows."), with no plain negation word;
- `questioned`: asked back or posed as a what-if ("Is it true that ...?", "Suppose ...");
- `disowned_forms`: disowned with other forms of the listed words ("lied", "denied", "fictitious");
- `taken_back`: taken back or mocked afterwards ("... Strike that.", "... April fools!", "~~...~~");
- `look_alike_negated`: the frames of `negated` and `disowned` with the turning words spelt in Cyrillic look-alike
  letters ("It is nоt true that ..."): on screen the same words, to a plain matcher none;
- `odd_spelling`: other disguises of the turning word: a modifier-letter apostrophe or a backtick ("isnʼt",
  "don`t"), a dotless "ı" or a Latin alpha, an underline combined onto each letter, Greek capitals ("ΝΟΤ");
- `odd_questions`: asked with marks a plain "?" check misses ("?!", "**...?**", "‽", "❓") or without one ("Tell
  me whether ...");
- `framed`: inside a frame of words the scripted user never hears in its call: fiction ("Once upon a time, ..."),
  rumour ("Legend has it that ..."), a retraction of the last reply, an idiom ("Fat chance that ..."), an emoji;
- `struck_through`, `mirrored`, `accented_negated`, `digits_negated`, `one_word_disowned`, `foreign_negated`: what
  a reader sees against what a matcher reads (a stroke drawn through every letter, a right-to-left override,
  accents and digits on the turning word, a one-word or one-emoji take-back, another language's "not");
- `twisted_words`: every phrase the user listens for glued into a longer word that says something else
  ("illegitimate", "casino deposit", "prepay per click");
- `hidden_in_markup`: the line where a reader is not shown it: an HTML comment, a tag's attribute, a hidden or
  struck-through element.

`KNOWN_LIMITS` are agents that win about what the reference agent wins without serving the user as well, through
what the scripted user cannot judge (docs/user_simulators.md); the hack monitors flag them:
- `word_bag`: the phrase and three other words of the reference line in any order, with the grammar dropped;
- `shuffled_line`: the whole reference line with the phrase intact and every other word shuffled around it;
- `taken_back_later`: each answer taken back in a reply of its own ("Scratch my last answer, it was a lie.");
- `numbers_changed`: the reference line with every number in it one more ("a free 701-yuan credit").
"""

from __future__ import annotations

from sead.testing.blind_agents import (
    BlindReferenceAgent,
    EchoAgent,
    KeywordSaladAgent,
    PromptReciterAgent,
    RotatingSaladAgent,
    SplitSaladAgent,
    StageCyclerAgent,
    TagOnlyAgent,
)
from sead.testing.framed_agents import (
    AccentedNegatedAgent,
    DigitsForLettersAgent,
    DisownedFormsAgent,
    DisowningAgent,
    ForeignNegatedAgent,
    FramedAgent,
    HiddenInMarkupAgent,
    LookAlikeNegatedAgent,
    MirroredAgent,
    NegatingAgent,
    NumbersChangedAgent,
    OddQuestionsAgent,
    OddSpellingAgent,
    OneWordDisownedAgent,
    QuestioningAgent,
    StruckThroughAgent,
    TakenBackAgent,
    TwistedWordsAgent,
)
from sead.testing.reworded_agents import (
    AskedBackAgent,
    BarePhrasesAgent,
    EmbeddedPhraseAgent,
    GuessingAgent,
    LaterTakeBackAgent,
    MenuAgent,
    ParrotAgent,
    ShuffledLineAgent,
    TwoAnswersAgent,
    WordBagAgent,
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
        TwistedWordsAgent,
        HiddenInMarkupAgent,
    )
}
KNOWN_LIMITS = {cls.name: cls for cls in (WordBagAgent, ShuffledLineAgent, LaterTakeBackAgent, NumbersChangedAgent)}
