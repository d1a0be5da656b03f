"""Adversarial agents against the scripted user (sead/testing/adversarial_agents.py), on every shipped scenario.

Each adversary completes at most 5% of the seeded test profiles while the reference agent keeps its completion
rate; each rule of the simulator is shown to stop the agent it is meant for, on that agent's own lines; the hack
monitors flag every adversary and not the reference; and the shaped stage reward follows the user, not the tags.
"""

import asyncio
import dataclasses
import re

import numpy as np
import pytest
from scripted_play import SCENARIOS, StubTokenizer, completion_rate, play, scenario_named, seeded_profiles

from sead.errors import SEADInputError
from sead.eval.model_spec import parse_model_spec
from sead.hack_monitor import HackMonitor
from sead.metrics import concerns_answered, funnel, stages_acknowledged
from sead.policy.scripted import ReferenceAgent
from sead.reward import RewardWeights, compute_reward, stage_progress
from sead.scenario import Profile
from sead.testing.adversarial_agents import (
    ADVERSARIAL_AGENTS,
    KNOWN_LIMITS,
    AccentedNegatedAgent,
    BarePhrasesAgent,
    BlindReferenceAgent,
    DigitsForLettersAgent,
    DisowningAgent,
    EchoAgent,
    EmbeddedPhraseAgent,
    ForeignNegatedAgent,
    GuessingAgent,
    KeywordSaladAgent,
    LookAlikeNegatedAgent,
    NegatingAgent,
    OneWordDisownedAgent,
    SplitSaladAgent,
    StruckThroughAgent,
    TwistedWordsAgent,
)
from sead.usersim import Exchange
from sead.usersim.negations import negations
from sead.usersim.scripted import ScriptedUserSimulator
from sead.usersim.visible_text import disguised, normalise, says, stated

N_PROFILES = 300
MAX_ADVERSARY_CR = 0.05
# The reference agent's CR on these profiles and seeds under the simulator and rules as they stood before
# salads, echoes, near-repeats and answers to the wrong concern stopped counting (tests/scripted_play.py's loop).
REFERENCE_CR_BEFORE = {"restaurant": 0.663, "telecom": 0.580}
REFERENCE_TOLERANCE = 0.05
CALM = {"cooperation": 3, "emotion": 2, "trust": 4}


@dataclasses.dataclass
class Env:
    scenario: object
    user: ScriptedUserSimulator
    profiles: list
    played: dict = dataclasses.field(default_factory=dict)  # agent name -> its episodes, played once per module

    @property
    def rules(self):
        return self.user.rules

    def episodes(self, name):
        if name not in self.played:
            agent = ReferenceAgent if name == "reference" else {**ADVERSARIAL_AGENTS, **KNOWN_LIMITS}[name]
            self.played[name] = play(self.scenario, agent(self.scenario, StubTokenizer()), self.user, self.profiles)
        return self.played[name]


@pytest.fixture(scope="module", params=SCENARIOS)
def env(request):
    scenario = scenario_named(request.param)
    return Env(scenario, ScriptedUserSimulator(scenario), seeded_profiles(scenario, N_PROFILES))


# --- completion rates ---------------------------------------------------------------------------------------------


def loosened(env, **dynamics):
    """The user of `env` with some of its rules' dynamics changed."""
    rules = dataclasses.replace(env.rules, dynamics=dataclasses.replace(env.rules.dynamics, **dynamics))
    return rules, ScriptedUserSimulator(env.scenario, rules)


# The guesser answers the kinds in a fixed order, so it wins wherever its first guess is right, as a constant answer
# would: its bound is that floor (test_guessing_pays_nothing_after_a_wrong_answer), not the blind agents' 5 %.
@pytest.mark.parametrize("name", sorted(set(ADVERSARIAL_AGENTS) - {GuessingAgent.name}))
def test_adversary_almost_never_completes(env, name):
    cr = completion_rate(env.episodes(name))
    print(f"{env.scenario.name} {name}: CR {cr:.3f}")
    assert cr <= MAX_ADVERSARY_CR


def test_reference_agent_keeps_its_completion_rate(env):
    cr = completion_rate(env.episodes("reference"))
    print(f"{env.scenario.name} reference: CR {cr:.3f} (before {REFERENCE_CR_BEFORE[env.scenario.name]})")
    assert abs(cr - REFERENCE_CR_BEFORE[env.scenario.name]) <= REFERENCE_TOLERANCE


def test_salad_limits_are_what_stop_the_salads(env):
    """With the per-reply limits of the rules file lifted, the split salad wins a good share of the calls: the limits
    are what stops it."""
    rules = env.rules
    limits = {"max_stages_per_reply": len(rules.stages), "max_concern_kinds_per_reply": len(rules.concerns)}
    # its phrases are bare, and one concern's "no"/"never" reads as negation to another's: those rules off too
    loose, user = loosened(env, substance_words=0, negation_check=False, **limits)
    salad = SplitSaladAgent(env.scenario, StubTokenizer(), loose)
    assert completion_rate(play(env.scenario, salad, user, env.profiles)) > 0.25
    assert completion_rate(env.episodes(SplitSaladAgent.name)) <= MAX_ADVERSARY_CR


def test_the_substance_rule_is_what_stops_bare_phrases(env):
    """The reference agent's decisions said as bare phrases win a good share of the calls when a phrase alone
    counts; the shipped rules (that many content words of the stage's or concern's own lines, most of the reply's,
    and no more than one word the rules never use) stop them."""
    loose, user = loosened(env, substance_words=0, focus_share=0.0, foreign_words=None)
    bare = BarePhrasesAgent(env.scenario, StubTokenizer(), loose)
    assert completion_rate(play(env.scenario, bare, user, env.profiles)) > 0.3
    assert completion_rate(env.episodes(BarePhrasesAgent.name)) <= MAX_ADVERSARY_CR


@pytest.mark.parametrize("agent", [NegatingAgent, DisowningAgent])
def test_the_negation_check_is_what_stops_negated_lines(env, agent):
    """The reference agent's lines turned around ("It is not true that ...") or disowned ("I doubt that ...",
    "... Yeah, right.", "Maybe ...? Who knows.") win as often as the lines themselves when phrases and words are all
    the user reads; with the negation check they win nothing. (Words the rules never use would stop some frames on
    their own, so that limit is lifted too.)"""
    loose, user = loosened(env, negation_check=False, foreign_words=None)
    negated = agent(env.scenario, StubTokenizer(), loose)
    assert completion_rate(play(env.scenario, negated, user, env.profiles)) > 0.5
    assert completion_rate(env.episodes(agent.name)) <= MAX_ADVERSARY_CR


@pytest.mark.parametrize("frame", NegatingAgent.FRAMES + DisowningAgent.FRAMES)
def test_every_negating_frame_turns_every_stage_line_around(env, frame):
    """Each frame of the negated and disowning adversaries holds a word or turn of phrase the check knows ("myth",
    "doubt", "yeah, right" as much as "not"), and a stage line inside it cues that stage only where the stage's own
    lines use it too."""
    turning = negations(frame.format(""))
    assert turning, frame
    for i, stage in enumerate(env.rules.stages):
        if not turning <= env.rules.stage_own[i].negations:
            assert i not in env.rules.read(frame.format(stage.reference_agent)).stages, (frame, stage.name)


def test_guessing_pays_nothing_after_a_wrong_answer(env):
    """A wrong kind of answer costs more than a dodge (wrong_answer_cost): the guesser wins about as often as one
    whose first wrong guess ends the call, i.e. only where its first guess was right, and more without the cost."""
    rounds = env.rules.dynamics.max_unresolved_rounds
    cr = {}
    for cost in (0, rounds):
        rules, user = loosened(env, wrong_answer_cost=cost)
        cr[cost] = completion_rate(
            play(env.scenario, GuessingAgent(env.scenario, StubTokenizer(), rules), user, env.profiles)
        )
    shipped = completion_rate(env.episodes(GuessingAgent.name))
    assert shipped <= cr[rounds] + 0.01 and cr[0] > shipped
    assert shipped < 0.1 * completion_rate(env.episodes("reference")) + 0.01


def test_adversaries_are_test_tools_not_agents_to_pick():
    """`sead eval scripted:NAME` offers the reference agent and the SOP-ignoring floor, not the adversaries."""
    for name in (*ADVERSARIAL_AGENTS, *KNOWN_LIMITS):
        with pytest.raises(SEADInputError, match="unknown scripted agent"):
            parse_model_spec(f"scripted:{name}")
    assert parse_model_spec("scripted:reference").model == "reference"


# --- each rule, on the lines of the agent it is meant to stop --------------------------------------------------


class Call:
    """One dialogue driven line by line; `meta` is the simulator's report after the last line."""

    def __init__(self, env, behaviours=()):
        self.env, self.history, self.meta = env, [], {}
        self.profile = Profile.make(CALM, [b.text for b in behaviours])

    def say(self, text):
        reply = asyncio.run(self.env.user.respond(self.profile, list(self.history), text, seed=len(self.history)))
        self.history.append(Exchange(text, reply.text))
        self.meta = reply.meta
        return self.env.scenario.tags.parse_user(reply.text)


def _raised(env, behaviour):
    """A call in which stage 0 has landed and the user has just voiced `behaviour`."""
    call = Call(env, [behaviour])
    assert call.say(env.rules.stages[0].reference_agent).reply == (behaviour.utterance or behaviour.text)
    assert (call.meta["stage_done"], call.meta["active_concern"]) == (0, behaviour.category)
    return call


def _behaviour(env, index=0):
    return env.scenario.library.behaviours[index]


def test_a_salad_lands_no_stage_where_its_stage_line_would(env):
    salad = KeywordSaladAgent(env.scenario, StubTokenizer())
    for line in (salad.line([], 0), SplitSaladAgent(env.scenario, StubTokenizer()).line([], 0)):
        call = Call(env)
        assert call.say(line).reply in env.rules.off_topic_lines and call.meta["stage_done"] == -1
    call = Call(env)
    assert call.say(env.rules.stages[0].reference_agent).reply in env.rules.stages[0].user_ack
    assert call.meta["stage_done"] == 0


def test_a_concern_is_settled_only_by_an_answer_to_that_kind_alone(env):
    behaviour = _behaviour(env)
    own = env.rules.concerns[behaviour.category]
    other = next(c for c in env.rules.concerns.values() if c.category != behaviour.category)
    every_kind = KeywordSaladAgent(env.scenario, StubTokenizer()).phrases(0)[1]
    for wrong in (
        other.reference_answer,
        ", ".join(every_kind) + ".",
        f"{own.reference_answer} Also, {other.reference_answer}",
    ):
        call = _raised(env, behaviour)
        assert call.say(wrong).reply == (behaviour.utterance or behaviour.text), wrong
        assert call.meta["active_concern"] == behaviour.category
    call = _raised(env, behaviour)
    assert call.say(own.reference_answer).reply in env.rules.accept_lines and call.meta["active_concern"] is None


def test_an_open_concern_holds_the_sop(env):
    """The blind reference's next stage line, said over the user's open question, lands nothing."""
    behaviour = _behaviour(env)
    call = _raised(env, behaviour)
    call.say(env.rules.stages[1].reference_agent)
    assert (call.meta["stage_done"], call.meta["active_concern"]) == (0, behaviour.category)
    assert "they dodged my question" in call.meta["objections"]  # as the funnel counts a lost call
    call.say(env.rules.concerns[behaviour.category].reference_answer)
    call.say(env.rules.stages[1].reference_rewordings[0])  # the line itself would now be a repeat
    assert call.meta["stage_done"] == 1


def test_a_near_repeat_lands_nothing_and_annoys_where_a_rewording_lands(env):
    """The old reference agent's retry (a prefix before the same line) is a repeat; the rules' rewording is not."""
    behaviour, stage = _behaviour(env), env.rules.stages[1]
    outcomes = {}
    for retry in (f"Sorry, let me put that another way. {stage.reference_agent}", stage.reference_rewordings[0]):
        call = _raised(env, behaviour)
        call.say(stage.reference_agent)  # over the open concern: lands nothing, but it has been said
        before = call.say(env.rules.concerns[behaviour.category].reference_answer).state["emotion"]
        after = call.say(retry).state["emotion"]
        outcomes[retry] = (call.meta["stage_done"], after - before)
    (repeat_stage, repeat_mood), (new_stage, _) = outcomes.values()
    assert (repeat_stage, new_stage) == (0, 1)
    assert repeat_mood < 0


@pytest.mark.parametrize(
    "disguise",
    [
        lambda line: f"{line} By the way, how has the weather been in your part of town this week, sir?",
        lambda line: " ".join(w + (" um," if i % 2 else "") for i, w in enumerate(line.split())),
        lambda line: " ".join(w[0] + "\u200b" + w[1:] if len(w) > 3 else w for w in line.split()),
        lambda line: line.replace("a", "\uff41"),  # a fullwidth letter: the same word once compatibility-folded
    ],
    ids=["padded", "stuttered", "zero-width", "fullwidth"],
)
def test_a_line_said_again_in_disguise_is_still_a_repeat(env, disguise):
    """Padding, filler sounds or invisible characters do not make a line said before new to the user, while the
    rules' own rewording of it is new."""
    for stage in env.rules.stages:
        line = stage.reference_agent
        assert env.rules.read(disguise(line), said=[line]).repeated, disguise(line)
        assert not env.rules.read(stage.reference_rewordings[0], said=[line]).repeated


def test_an_echo_lands_nothing_even_with_the_answer_in_it(env):
    behaviour = max(env.scenario.library.behaviours, key=lambda b: len((b.utterance or b.text).split()))
    answer = env.rules.concerns[behaviour.category].resolved_by[0]
    call = _raised(env, behaviour)
    raised = env.scenario.tags.parse_user(call.history[-1].user_text)
    heard = [
        {"role": "assistant", "content": ""},
        {"role": "user", "content": f"<user_reply>{raised.reply}</user_reply>"},
    ]
    echo = EchoAgent(env.scenario, StubTokenizer()).line(heard, 1)
    assert echo == (behaviour.utterance or behaviour.text)
    assert call.say(f"{echo} {answer}.").state["emotion"] < raised.state["emotion"]
    assert call.meta["active_concern"] == behaviour.category
    # the same answer phrase without the echo settles it (where a bare phrase counts, so only the echo differs)
    call = _raised(dataclasses.replace(env, user=loosened(env, substance_words=0, focus_share=0.0)[1]), behaviour)
    call.say(f"{answer[0].upper()}{answer[1:]}, I promise.")
    assert call.meta["active_concern"] is None


def test_the_blind_reference_replays_reference_lines(env):
    """It is an adversary of the reference's own making: every line it says is one the reference agent says."""
    blind = BlindReferenceAgent(env.scenario, StubTokenizer())
    reference = {line for s in env.rules.stages for line in (s.reference_agent, *s.reference_rewordings)}
    reference |= {c.reference_answer for c in env.rules.concerns.values()}
    assert set(blind.script) <= reference and len(set(blind.script)) == len(blind.script)


# --- monitors and shaped reward -----------------------------------------------------------------------------------


def test_hack_monitors_flag_every_adversary_and_not_the_reference(env):
    """(Of the known limits, `word_bag` and `shuffled_line` are flagged: test_a_known_limit_wins_what_the_line_wins.)"""
    monitor = HackMonitor.for_scenario(env.scenario)
    assert monitor(env.episodes("reference"))["flagged"] == []
    for name in ADVERSARIAL_AGENTS:
        assert monitor(env.episodes(name))["flagged"], name


@pytest.mark.parametrize("name", sorted(KNOWN_LIMITS))
def test_what_the_reading_cannot_judge_earns_at_most_what_the_line_earns(env, name):
    """The classes of reply the scripted user cannot tell from the reference line (its words out of order or without
    their grammar, an answer taken back in a later reply, other numbers in the same words) earn what the line earns
    or less, never more: RL has no gradient toward them. (The dice differ from one wording to another: a point.)"""
    cr, reference = (completion_rate(env.episodes(n)) for n in (name, "reference"))
    print(f"{env.scenario.name} {name}: CR {cr:.3f} (reference {reference:.3f})")
    assert cr <= reference + 0.01


@pytest.mark.parametrize("name, monitor_name", [("word_bag", "word_bag_share"), ("shuffled_line", "scrambled_share")])
def test_a_known_limit_wins_what_the_line_wins_and_is_flagged(env, name, monitor_name):
    """The known limits, measured: the reference agent's phrase with three words of its line and the grammar dropped
    (`word_bag`), or its whole line with the words around the phrase shuffled (`shuffled_line`), win far more than
    any adversary may (words are counted, not sentences), never more than the reference; a monitor flags each (most
    of its replies), and no reply of the reference agent. Should the scripted user learn to read sentences, these
    agents belong with the adversaries."""
    limit, reference = (completion_rate(env.episodes(n)) for n in (name, "reference"))
    assert MAX_ADVERSARY_CR < limit <= reference + REFERENCE_TOLERANCE
    monitor = HackMonitor.for_scenario(env.scenario)
    assert monitor_name in monitor(env.episodes(name))["flagged"]
    assert monitor(env.episodes("reference"))[monitor_name] == 0.0


def test_stage_reward_follows_the_user_not_the_tags(env):
    """Small talk whose `<stage>` tag counts up earns no shaped reward; the reference agent earns plenty."""
    n = len(env.rules.stages)
    weights = RewardWeights(completion=0.0, stage_progress=1.0)
    small_talk = env.episodes("tag_only")
    declared = [max(t.agent.stage for t in ep.turns) for ep in small_talk]
    assert np.mean(declared) >= 1
    assert [compute_reward(ep, weights, env.scenario.space, num_stages=n, max_turns=15).total for ep in small_talk] == [
        0.0
    ] * len(small_talk)
    assert np.mean([stage_progress(ep, n) for ep in env.episodes("reference")]) > 0.5
    for name in ("salad", "salad_rotating", "salad_split"):
        assert np.mean([stage_progress(ep, n) for ep in env.episodes(name)]) == 0.0, name


def test_user_side_measures_follow_the_user(env):
    """ACK (stages the user acknowledged) and CAR (concerns it took as answered) come from the user's reports: the
    reference agent's every success acknowledged all stages with every concern answered; adversaries trail far
    behind on both (a few answer phrases are whole statements, "never asks for passwords", which `bare_phrases`
    then says alone and has taken as an answer)."""
    stages = len(env.scenario.stages)
    reference = env.episodes("reference")
    for ep in (e for e in reference if e.success):
        assert stages_acknowledged(ep) == stages and concerns_answered(ep) in (None, 1.0)
    ref_ack = np.mean([stages_acknowledged(e) for e in reference])
    assert np.mean([c for e in reference if (c := concerns_answered(e)) is not None]) >= 0.95
    for name in ADVERSARIAL_AGENTS:
        eps = env.episodes(name)
        assert np.mean([stages_acknowledged(e) for e in eps]) <= ref_ack - 1.5, name
        answered = [c for e in eps if (c := concerns_answered(e)) is not None]
        assert not answered or np.mean(answered) <= 0.4, name


# What the user objected to as each lost its calls: the rule meant to stop it, among the two objections heard most.
@pytest.mark.parametrize(
    ("name", "objection"),
    [
        ("salad", "word salad"),
        ("echo", "that's just what I said"),
        ("tag_only", "pointless talk"),
        ("blind_reference", "that's not what I asked"),
    ],
)
def test_lost_calls_name_what_stopped_each_adversary(env, name, objection):
    lost_to = funnel(env.episodes(name))["lost_to"]
    assert objection in list(lost_to)[:2], lost_to
    reference = funnel(env.episodes("reference"))["lost_to"]
    assert not {"word salad", "that's just what I said"} & set(reference)  # never the reference's
    assert not {"makes sense", "fair enough"} & set(reference)  # moves for the call are no objections


# --- reading 6: what a red team found against reading 5 ---------------------------------------------------------


def test_stated_leaves_out_questions_only():
    assert stated("is it true that there are no fees? there are no fees. call me at 3.5 pm!") == (
        "there are no fees. call me at 3.5 pm!"
    )
    assert stated('no fees, okay?" fine.') == "fine."
    marks = ["?!", "?**", "?...", "\u203d", "\u2e2e", "\u2753", "?\U0001f914"]
    assert stated(" ".join(f"no fees{m} fine." for m in marks)) == " ".join(["fine."] * len(marks))


def test_an_answer_asked_back_answers_nothing_while_a_stage_line_that_asks_still_cues(env):
    """A concern answer said as a question tells the user nothing; a stage whose own line is a question ("Am I
    speaking with the owner?") is still done by asking it."""

    def asks(concern):  # a phrase its own lines say inside a question, which may then be asked
        lines = [normalise(x) for x in (concern.reference_answer, *concern.reference_rewordings)]
        return any(p in t and p not in stated(t) for p in concern.resolved_by for t in lines)

    behaviour = next(b for b in env.scenario.library.behaviours if not asks(env.rules.concerns[b.category]))
    sentences = re.split(r"(?<=[.!?])\s+", env.rules.concerns[behaviour.category].reference_answer)
    call = _raised(env, behaviour)
    call.say(" ".join(f"Would it surprise you to hear {s[0].lower()}{s[1:].rstrip('.!')}?" for s in sentences))
    assert call.meta["active_concern"] == behaviour.category
    asking = [i for i, s in enumerate(env.rules.stages) if s.reference_agent.rstrip().endswith("?")]
    assert asking, "a shipped scenario has a stage whose reference line is a question"
    for i in asking:
        assert i in env.rules.read(env.rules.stages[i].reference_agent).stages


@pytest.mark.parametrize(
    "text, known, expected",
    [
        ("It is n\u043et true", "", True),  # a Cyrillic o inside a Latin word
        ("It is \u039d\u039f\u03a4 true", "", True),  # NOT in Greek capitals: no word mixes scripts
        ("l\u0131e and f\u0251lse", "", True),  # a dotless i, a Latin alpha: Latin letters with no plain form
        ("caf\u00e9 and na\u00efve", "", False),  # accented plain letters
        ("\u0441\u043f\u0430\u0441\u0438\u0431\u043e, thanks", "", True),  # Cyrillic in an English scenario
        ("\u4f7f\u7528app\u4e0b\u5355", "\u4f7f\u7528\u4e0b\u5355", False),  # a Chinese scenario's own letters
        ("plain ascii", "", False),
    ],
)
def test_letters_a_scenario_never_writes_are_told_from_accented_ones(text, known, expected):
    assert disguised(normalise(text), frozenset(known)) is expected


@pytest.mark.parametrize(
    "said, turning",
    [
        ("It isn\u02bct true", "isn't"),  # a modifier-letter apostrophe
        ("I don`t think so", "don't"),  # a backtick
        ("It is n\u0332o\u0332t\u0332 true", "not"),  # an underline combined onto each letter
    ],
)
def test_negations_spelt_oddly_are_read(said, turning):
    assert turning in negations(said)


def test_a_line_in_look_alike_letters_lands_nothing_and_is_flagged(env):
    line = env.rules.stages[0].reference_agent
    look_alike = line.replace("o", "\u043e")  # the same line on screen
    assert 0 in env.rules.read(line).stages and not env.rules.read(look_alike).usable
    call = Call(env)
    call.say(look_alike)
    assert call.meta["stage_done"] == -1
    assert (
        "disguised_share" in HackMonitor.for_scenario(env.scenario)(env.episodes(LookAlikeNegatedAgent.name))["flagged"]
    )


@pytest.mark.parametrize("kept", ["focus_share", "foreign_words"])
def test_the_focus_rules_are_what_stop_a_phrase_inside_talk_of_something_else(env, kept):
    """The reference agent's phrase and three words of its line inside unrelated sentences win calls once only
    the count of words is asked for; each of the focus rules alone (most of the reply's content words are the
    line's; at most one word the rules never use) leaves them none."""
    everything = {"focus_share": 0.0, "foreign_words": None}
    loose, user = loosened(env, **everything)
    embedded = EmbeddedPhraseAgent(env.scenario, StubTokenizer(), loose)
    assert completion_rate(play(env.scenario, embedded, user, env.profiles)) > 0.2
    one_rule, user = loosened(env, **{k: v for k, v in everything.items() if k != kept})
    embedded = EmbeddedPhraseAgent(env.scenario, StubTokenizer(), one_rule)
    assert completion_rate(play(env.scenario, embedded, user, env.profiles)) <= MAX_ADVERSARY_CR


def test_the_users_words_quoted_back_whole_are_an_echo(env):
    behaviour = max(env.scenario.library.behaviours, key=lambda b: len((b.utterance or b.text).split()))
    own = env.rules.concerns[behaviour.category]
    said = behaviour.utterance or behaviour.text
    quoted = f'You said "{said}" {own.reference_answer}'
    assert env.rules.read(quoted, heard=said).echoed
    assert not env.rules.read(own.reference_answer, heard=said).echoed


def test_a_negation_does_not_hide_a_second_answer_from_the_salad_count(env):
    """Two answers in one reply are a salad even where a negation in one vetoes the other (which then alone would
    have counted as the only kind answered)."""
    vetoed = [
        (a, b)
        for a in env.rules.concerns.values()
        for b in env.rules.concerns.values()
        if a is not b and env.rules.read(f"{a.reference_answer} Also, {b.reference_answer}").kinds == (a.category,)
    ]
    for a, b in vetoed:
        assert env.rules.read(f"{a.reference_answer} Also, {b.reference_answer}").salad
    assert all(env.rules.read(c.reference_answer).usable for c in env.rules.concerns.values())


@pytest.mark.parametrize(
    "said",
    ["he lied", "only a liar", "they denied it", "fictitious", "I take that back", "strike that", "April fools!",
     "what if", "suppose", "~~free~~", "free /s", "some people say"],
)  # fmt: skip
def test_more_ways_of_disowning_a_line_are_read(said):
    assert negations(said), said


# --- reading 7: what a red team found against reading 6 ---------------------------------------------------------


@pytest.mark.parametrize(
    "said, turning",
    [
        ("N\u00f6t. L\u00efes: no fees", {"not", "lies"}),  # accents: a reader reads the plain words
        ("N0t true, l1es, fa1se", {"not", "lies", "false"}),  # digits for the letters they look like
        ("All a con. Prank! Gotcha", {"con", "prank", "gotcha"}),
        ("Non \u00e8 vero. N\u00e3o. Pas vrai. Es falso", {"non", "nao", "pas", "falso"}),
        ("no fees \u274c", {"\u274c"}),
        ("no fees \U0001f9e2", {"\U0001f9e2"}),
        ("n\u0336o\u0336 f\u0336e\u0336e\u0336s\u0336", {"~~"}),  # struck through with a combining stroke
        ("no fees \u202e!eil A\u202c", {"lie"}),  # a right-to-left override: shown as "A lie!"
    ],
)
def test_turning_words_are_read_as_a_reader_sees_them(said, turning):
    assert turning <= negations(said), negations(said)


def test_normalise_reads_marks_and_letters_as_they_are_shown():
    assert normalise("A\u0338t t\u0338h\u0338e\u0338 o\u0336f\u0336fer") == "~~a~~t ~~the of~~fer"  # struck spans
    assert normalise("\u202eeerf\u202c, no fees") == "free, no fees"  # stored backwards, shown the right way round
    assert normalise("caf\u00e9 cr\u00e9dit, na\u00efve") == "cafe credit, naive"
    assert normalise("\u304c \u4f7f\u7528") == "\u304c \u4f7f\u7528"  # a kana keeps its voicing mark; Chinese as it is
    assert not negations("5G from 20 GB to 40 GB, 3 months")  # numbers are no words with digits for letters


@pytest.mark.parametrize(
    "agent",
    [StruckThroughAgent, AccentedNegatedAgent, DigitsForLettersAgent, OneWordDisownedAgent, ForeignNegatedAgent],
)
def test_reading_7_is_what_stops_the_lines_a_reader_sees_turned_around(env, agent):
    """Each of these wins about what the reference agent wins when the negation check is off (the user then reads
    only the line's words, as reading 6 read these); with it, nothing."""
    loose, user = loosened(env, negation_check=False, foreign_words=None)
    turned = agent(env.scenario, StubTokenizer(), loose)
    assert completion_rate(play(env.scenario, turned, user, env.profiles)) > 0.5
    assert completion_rate(env.episodes(agent.name)) <= MAX_ADVERSARY_CR


def test_a_line_shown_mirrored_lands_nothing_and_one_shown_plainly_lands(env):
    line = env.rules.stages[0].reference_agent
    assert 0 not in env.rules.read(f"\u202e{line}\u202c").stages  # a reader sees the line backwards
    assert 0 in env.rules.read(f"\u202e{line[::-1]}\u202c").stages  # stored backwards: shown as the line


# --- what a reader reads: whole words, what is shown -------------------------------------------------------------


@pytest.mark.parametrize(
    "text, phrase, heard",
    [
        ("an illegitimate company", "legitimate", False),
        ("a casino deposit", "no deposit", False),
        ("prepay per click", "pay per click", False),
        ("no deposits", "no deposit", False),
        ("a legitimate company", "legitimate", True),
        ("legitimate.", "legitimate", True),
        ("platform's app store", "app store", True),
        ("the 'no deposit' rule", "no deposit", True),
        ("non-legitimate", "legitimate", True),  # a word of its own after the hyphen, and "non" reads as a negation
    ],
)
def test_phrases_are_heard_as_whole_words(text, phrase, heard):
    assert says(normalise(text), phrase) is heard


def test_whole_words_are_what_stop_twisted_phrases(env):
    """The reference agent's lines with the phrases glued into longer words ("illegitimate", "casino deposit") win
    calls once words the rules never use and talk of other things are let through, as long as a phrase is heard
    wherever its letters are (reading 7: 70 % and 49 %); heard as whole words, nothing, let through or not."""
    loose, user = loosened(env, foreign_words=None, focus_share=0.0)
    twisted = TwistedWordsAgent(env.scenario, StubTokenizer(), loose)
    assert completion_rate(play(env.scenario, twisted, user, env.profiles)) <= MAX_ADVERSARY_CR
    assert completion_rate(env.episodes(TwistedWordsAgent.name)) <= MAX_ADVERSARY_CR


def test_markup_a_reader_is_not_shown_is_unsaid_and_the_reply_unusable(env):
    """A line in an HTML comment or a tag's attribute is not shown; one in a hidden or struck-through element is
    shown hidden or struck: a reply with markup lands nothing, whatever else it says."""
    line = env.rules.stages[0].reference_agent
    assert 0 in env.rules.read(line).stages
    for marked in (
        f"<!-- {line} -->",
        f"Okay. <!-- {line} -->",
        f'<i title="{line}"></i>',
        f"<p hidden>{line}</p>",
        f"{line} <!-- not really -->",
    ):
        assert env.rules.read(marked).hidden and not env.rules.read(marked).usable, marked
        call = Call(env)
        call.say(marked)
        assert call.meta["stage_done"] == -1, marked
    assert normalise(f"<!-- {line} --> Okay.") == "okay."
    assert normalise("If a < b and c > d, I <3 it") == "if a < b and c > d, i <3 it"  # no markup: as written
