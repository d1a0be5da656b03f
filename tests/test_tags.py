"""Parsing model output never raises; problems are reported, unclosed tags repaired, status -1 read as -1."""

import pytest

from sead.scenario import TagSchema


@pytest.fixture
def schema(restaurant):
    return TagSchema(restaurant.space, len(restaurant.stages))


def test_well_formed_agent_turn(schema):
    text = schema.format_agent("Hi, this is Alex.", {"cooperation": 2, "emotion": 1, "trust": 3, "noise": 0}, 0, 0)
    turn = schema.parse_agent(text)
    assert turn.response == "Hi, this is Alex." and turn.stage == 0 and turn.status == 0
    assert turn.portrait == {"cooperation": 2, "emotion": 1, "trust": 3, "noise": 0}
    assert turn.malformed is None


def test_status_minus_one_is_read_as_minus_one(schema):
    assert schema.parse_agent("<response>bye</response><status>-1</status>").status == -1
    assert schema.parse_user("<user_reply>no</user_reply><user_status>-1</user_status>").status == -1


def test_missing_tags_are_reported_not_raised(schema):
    turn = schema.parse_agent("Sure, I can help with that!")
    assert turn.response is None and not turn.has_response
    assert "missing <response>" in turn.malformed and "missing <status>" in turn.malformed
    assert turn.status == 0 and turn.stage is None


def test_a_turn_with_two_responses_has_none(schema):
    portrait = {"cooperation": 2, "emotion": 1, "trust": 3, "noise": 0}
    one = schema.format_agent("Hi, this is Alex.", portrait, 0, 0)
    drifted = (  # one opening, answers closed inside the score tags: what a run drifted into (2026-11-28)
        "<response>Hi, this is Alex.</response>\n<cooperation_score>Totally fair to ask.</response>\n"
        "<cooperation_score>Yes, this is Alex.</response>"
    )
    for text in (
        one + "\n<response>And one more thing.</response>",
        "<response>a</response><response>b",
        drifted,
        one.replace("</response>", "</response></response>", 1),
    ):
        turn = schema.parse_agent(text)
        assert turn.response is None and not turn.has_response
        assert "more than one <response>" in turn.malformed
    assert schema.parse_agent(one + "\n<stage>1</stage>").response == "Hi, this is Alex."  # only <response> counts


def test_unclosed_tags_are_repaired(schema):
    turn = schema.parse_user("<user_think>hmm\n<user_reply>Who is this?\n<user_cooperation>2\n<user_status>0")
    assert turn.think == "hmm" and turn.reply == "Who is this?"
    assert turn.state["cooperation"] == 2 and turn.status == 0
    assert "unclosed <user_reply> repaired" in turn.problems


def test_out_of_range_and_garbage_values(schema):
    turn = schema.parse_agent("<response>x</response><trust_score>9</trust_score><stage>two</stage><status>7</status>")
    assert turn.portrait["trust"] is None and turn.stage is None and turn.status == 0
    assert any("out of range 0-5" in p for p in turn.problems)
    assert any("<stage> is not a number" in p for p in turn.problems)
    assert any("<status> must be one of" in p for p in turn.problems)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "<<<>>>",
        "<response>",
        "</response><response>",
        "\x00" * 5,
        "<user_status>1</user_status>" * 3,
        "<response>" + "a" * 10000,
    ],
)
def test_parsing_never_raises(schema, text):
    schema.parse_agent(text)
    schema.parse_user(text)
