"""Word order (sead/usersim/word_order.py): the scenarios' own lines read as sentences, the same lines taken apart
and words put side by side where English never puts them do not."""

import pytest
from scripted_play import SCENARIOS, scenario_named

from sead.usersim.rules_file import scenario_rules
from sead.usersim.visible_text import words_of
from sead.usersim.word_order import KnownLine, misplaced_pairs, scrambled, takes_apart


@pytest.fixture(scope="module", params=SCENARIOS)
def rules(request):
    return scenario_rules(scenario_named(request.param))


def known(rules):
    return [KnownLine.of(line) for line in rules.reference_lines]


def test_every_reference_line_reads_in_order(rules):
    lines = known(rules)
    assert len(lines) >= 20
    assert [line for line in rules.reference_lines if scrambled(line, lines)] == []


def test_a_line_with_the_words_around_its_phrase_reversed_is_taken_apart(rules):
    """The shuffled_line agent's move, made deterministic: the phrase intact, every other word in reverse order."""
    lines, checked = known(rules), 0
    phrases = [
        *(p for s in rules.stages for p in s.agent_cues),
        *(p for c in rules.concerns.values() for p in c.resolved_by),
    ]
    for line in rules.reference_lines:
        text = " ".join(words_of(line))
        phrase = next((p for p in phrases if p in text), None)
        if phrase is None:
            continue
        before, _, after = text.partition(phrase)
        others = words_of(f"{before} {after}")[::-1]
        assert takes_apart(" ".join([*others, phrase]) + ".", lines), line
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize(
    "text, pairs",
    [
        ("Card your we stays with you.", [("your", "we")]),
        ("We keep your card with the.", [("the", ".")]),
        ("Fees and or deposits never.", [("and", "or")]),
        ("I the owner can check.", [("i", "the")]),
        ("You need to is fine.", [("to", "is")]),
        ("Nothing I ask for is secret, and you can check this offer yourself.", []),  # a preposition ends a clause
        ("Open the app and go to the My Plan tab.", []),  # "my" opens a name
        ("So the in-office travel is minimal.", []),  # a hyphenated word is one word
        ("We at the platform team can add a can of cola; it's a must for the US market.", []),
    ],
)
def test_misplaced_pairs(text, pairs):
    assert misplaced_pairs(text) == pairs


def test_a_new_sentence_with_some_of_a_lines_words_is_not_taken_apart(rules):
    """Reusing a line's words in a sentence of one's own is what a paraphrase does: only a reply made mostly of one
    line's words, out of that line's order, is taken apart."""
    line = rules.reference_lines[0]
    own = " ".join(words_of(line)[:5])
    reply = f"Thanks for picking up, I will keep this short: {own} and then I will let you go."
    assert not takes_apart(reply, known(rules))
    assert takes_apart(" ".join(words_of(line)[::-1]) + ".", known(rules))


def test_a_reply_is_judged_by_the_line_whose_order_it_keeps():
    """Seen in a held-out GRPO run: the model said one restaurant line nearly word for word, with a few words that
    also make up most of another line; that other line keeps few of its pairs, the close one keeps 18 of 21."""
    rules = scenario_rules(scenario_named("restaurant"))
    reply = (
        "It's simple: open the merchant back-office app, then tap the Get More Exposure button at the top right and "
        "claim the credit."
    )
    close = next(line for line in rules.reference_lines if "then tap the Get More Exposure button" in line)
    other = next(line for line in rules.reference_lines if line.startswith("It's simple and I'll guide you"))
    assert takes_apart(reply, [KnownLine.of(other)])  # judged by the other line alone, it reads as taken apart
    assert not takes_apart(reply, [KnownLine.of(other), KnownLine.of(close)])
    assert not scrambled(reply, known(rules))
    shuffled = "the tap Get app, then open credit claim the merchant back-office More Exposure button at top right and."
    assert takes_apart(shuffled, known(rules))
