"""The scripted user simulator and scripted agents: deterministic, well-formed, and harder for harder profiles.

Dialogues are driven by the text-only loop of scripted_play (no tokenizer, no runner) that passes seeds and
messages the way the episode runner does. The adversarial agents are in test_adversarial.py.
"""

import asyncio
import dataclasses
import random
from pathlib import Path

import pytest
import yaml
from scripted_play import SCENARIOS, StubTokenizer, completion_rate, play, scenario_named

from sead.config import build_scenario, load_config
from sead.errors import SEADInputError
from sead.policy.scripted import ReferenceAgent, SOPIgnoringAgent
from sead.scenario import Profile
from sead.usersim import Exchange
from sead.usersim.rules import READING_VERSION, Dynamics
from sead.usersim.rules_file import load_rules
from sead.usersim.scripted import ScriptedUserSimulator
from sead.usersim.visible_text import normalise

LEVELS = {  # value lists are sampled per profile
    "easy": {"cooperation": [3], "emotion": [2], "trust": [4]},
    "medium": {"cooperation": [2], "emotion": [1, 2], "trust": [2, 3]},
    "hard": {"cooperation": [1], "emotion": [1], "trust": [1]},
}


@dataclasses.dataclass
class Bundle:
    scenario: object
    user: ScriptedUserSimulator
    reference: ReferenceAgent
    ignoring: SOPIgnoringAgent


@pytest.fixture(scope="module", params=SCENARIOS)
def env(request):
    scenario = scenario_named(request.param)
    return Bundle(
        scenario,
        ScriptedUserSimulator(scenario),
        ReferenceAgent(scenario, StubTokenizer()),
        SOPIgnoringAgent(scenario, StubTokenizer()),
    )


def run_all(env, agent, profiles, seed0=0):
    return play(env.scenario, agent, env.user, profiles, [seed0 + i for i in range(len(profiles))])


def make_profiles(scenario, level, n, seed=7):
    rng = random.Random(seed)
    lo, hi = scenario.behaviours_per_profile
    texts = [b.text for b in scenario.library.behaviours]
    return [
        Profile.make({k: rng.choice(v) for k, v in level.items()}, rng.sample(texts, rng.randint(max(lo, 1), hi)))
        for _ in range(n)
    ]


def transcript(ep):
    return [t.agent.text for t in ep.turns], [t.user.text for t in ep.turns if t.user], ep.end_reason


def test_same_seed_same_transcript_and_seeds_matter(env):
    profiles = make_profiles(env.scenario, LEVELS["medium"], 20)
    first = [transcript(r) for r in run_all(env, env.reference, profiles)]
    again = [transcript(r) for r in run_all(env, env.reference, profiles)]
    other = [transcript(r) for r in run_all(env, env.reference, profiles, seed0=500)]
    assert first == again
    assert first != other


def test_replaying_history_gives_the_same_reply(env):
    profile = make_profiles(env.scenario, LEVELS["medium"], 1)[0]
    turns = [t for t in run_all(env, env.reference, [profile])[0].turns if t.user]
    history = [Exchange(t.agent.response, t.user.text) for t in turns]
    last = len(turns) - 1
    replayed = asyncio.run(env.user.respond(profile, history[:last], turns[last].agent.response, seed=last))
    assert replayed.text == turns[last].user.text


def test_every_turn_parses_cleanly_with_values_in_range(env):
    space = env.scenario.space
    for agent in (env.reference, env.ignoring):
        for level in LEVELS.values():
            for ep in run_all(env, agent, make_profiles(env.scenario, level, 15)):
                user_turns = ep.user_turns
                assert ep.turns and user_turns
                for turn in [t.agent for t in ep.turns] + user_turns:
                    assert turn.problems == [], turn.text
                for turn in user_turns:
                    assert turn.reply and turn.think is not None and turn.status in (-1, 0, 1)
                    assert all(space[n].low <= v <= space[n].high for n, v in turn.state.items())


def test_completion_rate_falls_with_difficulty(env):
    rates = {
        name: completion_rate(run_all(env, env.reference, make_profiles(env.scenario, level, 60)))
        for name, level in LEVELS.items()
    }
    print(f"{env.scenario.name} reference completion rates: {rates}")
    assert rates["easy"] > 0.6
    assert rates["easy"] > rates["medium"] > rates["hard"]


def test_lower_initial_state_never_helps(env):
    base = {"cooperation": 2, "emotion": 2, "trust": 3}
    behaviours = [p.behaviours for p in make_profiles(env.scenario, LEVELS["medium"], 60)]

    def rate(state):
        return completion_rate(run_all(env, env.reference, [Profile.make(state, b) for b in behaviours]))

    reference = rate(base)
    for name in base:
        assert rate({**base, name: base[name] - 1}) <= reference + 0.05, name


def test_sop_ignoring_agent_almost_never_succeeds(env):
    profiles = [p for level in LEVELS.values() for p in make_profiles(env.scenario, level, 30)]
    assert completion_rate(run_all(env, env.ignoring, profiles)) <= 0.05


def test_contradiction_lowers_trust(env):
    rules, tags = env.user.rules, env.scenario.tags
    profile = Profile.make({"cooperation": 3, "emotion": 3, "trust": 4}, [])
    line = rules.stages[0].reference_agent

    def trust_after(text):
        return tags.parse_user(asyncio.run(env.user.respond(profile, [], text, seed=1)).text).state["trust"]

    assert (
        trust_after(f"{line} Also, {rules.contradictions[0]}.")
        == trust_after(line) - rules.dynamics.contradiction_trust_drop
    )


def test_unanswered_concern_ends_in_a_hangup(env):
    rules, tags = env.user.rules, env.scenario.tags
    behaviour = env.scenario.library.behaviours[0]
    profile = Profile.make({"cooperation": 4, "emotion": 3, "trust": 5}, [behaviour.text])
    history = []

    async def say(text):
        reply = await env.user.respond(profile, list(history), text, seed=len(history))
        history.append(Exchange(text, reply.text))
        return tags.parse_user(reply.text)

    raised = asyncio.run(say(rules.stages[0].reference_agent))
    assert raised.reply == (behaviour.utterance or behaviour.text) and raised.status == 0
    dodges = [asyncio.run(say(line)) for line in SOPIgnoringAgent.LINES[: rules.dynamics.max_unresolved_rounds]]
    assert [t.status for t in dodges] == [0] * (len(dodges) - 1) + [-1]
    assert dodges[0].state["trust"] < raised.state["trust"]


def test_answered_concern_raises_trust(env):
    rules, tags = env.user.rules, env.scenario.tags
    behaviour = env.scenario.library.behaviours[0]
    profile = Profile.make({"cooperation": 2, "emotion": 2, "trust": 2}, [behaviour.text])
    first = asyncio.run(env.user.respond(profile, [], rules.stages[0].reference_agent, seed=3))
    history = [Exchange(rules.stages[0].reference_agent, first.text)]
    answer = rules.concerns[behaviour.category].reference_answer
    after = tags.parse_user(asyncio.run(env.user.respond(profile, history, answer, seed=4)).text)
    assert after.state["trust"] == tags.parse_user(first.text).state["trust"] + rules.dynamics.resolve_trust_gain
    assert after.status == 0 and after.reply in rules.accept_lines


def test_reference_agent_recognises_every_library_concern(env):
    for b in env.scenario.library.behaviours:
        assert env.reference.concern_of(b.utterance or b.text) == b.category, b.text
    for line in (*env.user.rules.stall_lines, *env.user.rules.stages[0].user_ack):
        assert env.reference.concern_of(line) is None


def test_reference_agent_closes_only_after_the_user_confirms_the_last_stage(env):
    tags, stages = env.scenario.tags, env.user.rules.stages
    messages = [{"role": "system", "content": "sop"}]
    for i, stage in enumerate(stages):
        said = tags.parse_agent(asyncio.run(env.reference.reply(messages, seed=i)))
        assert (said.stage, said.status, said.response) == (i, 0, stage.reference_agent)
        messages += [
            {"role": "assistant", "content": said.text},
            {"role": "user", "content": f"<user_reply>{stage.user_ack[0]}</user_reply>"},
        ]
    closing = tags.parse_agent(asyncio.run(env.reference.reply(messages, seed=9)))
    assert closing.status == 1 and closing.stage == len(stages) - 1


def test_every_reference_line_is_one_clean_move(env):
    """Each stage line and its rewordings cue that stage alone; each answer and its rewordings answer that kind alone
    (and cue at most one stage); no rewording repeats the lines before it, so the reference agent can say a thing
    again without being taken for a repeat."""
    rules = env.user.rules
    moves = [((i,), None, (s.reference_agent, *s.reference_rewordings)) for i, s in enumerate(rules.stages)]
    moves += [(None, (c.category,), (c.reference_answer, *c.reference_rewordings)) for c in rules.concerns.values()]
    for stages, kinds, lines in moves:
        assert len(lines) >= 2, lines[0]
        for k, line in enumerate(lines):
            reading = rules.read(line, lines[:k])
            assert reading.usable, line
            assert reading.stages == stages if stages else reading.kinds == kinds, line


def test_identity_names_rules_reading_and_dynamics(env):
    ident = env.user.identity()
    assert ident["name"] == "scripted" and ident["rules"] == str(env.scenario.rules_path)
    assert ident["reading"] == READING_VERSION  # a change to how replies are read is a change of simulator
    assert ident["dynamics"]["operate_threshold"] == Dynamics().operate_threshold


def test_phrases_match_case_and_brackets_insensitively():
    assert normalise("  Hi from [Platform]\u2019s  TEAM ") == "hi from platform's team"
    assert normalise("[platform]") == normalise("Platform")


# --- bad rules files -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def restaurant_rules():
    scenario = build_scenario(load_config(["scenario=restaurant"]))
    return scenario, yaml.safe_load(Path(scenario.rules_path).read_text())


def _del(key):
    return lambda d: d.pop(key)


@pytest.mark.parametrize(
    "mutate, field",
    [
        (_del("stages"), "stages"),
        (lambda d: d["stages"].pop(), "stages"),
        (lambda d: d["stages"][2].update(agent_cues=[]), "stages[2].agent_cues"),
        (lambda d: d["stages"][3].update(name="wrap_up"), "stages[3].name"),
        (lambda d: d["stages"][1].pop("reference_agent"), "stages[1].reference_agent"),
        (lambda d: d["stages"][0].update(user_ack=["ok", 5]), "stages[0].user_ack[1]"),
        (lambda d: d["concerns"].pop("Cost_Concerns"), "concerns"),
        (lambda d: d["concerns"]["Cost_Concerns"].pop("resolved_by"), "concerns.Cost_Concerns.resolved_by"),
        (lambda d: d.update(hangup_lines=[]), "hangup_lines"),
        (_del("success_line"), "success_line"),
        (lambda d: d.update(dynamics={"operate_thresold": 2}), "dynamics.operate_thresold"),
        (lambda d: d.update(dynamics={"drag_chance": 1.5}), "dynamics.drag_chance"),
        (lambda d: d.update(dynamics={"max_unresolved_rounds": "three"}), "dynamics.max_unresolved_rounds"),
        (lambda d: d.update(dynamics={"repeat_share": 1.5}), "dynamics.repeat_share"),
        (lambda d: d.update(dynamics={"focus_share": -0.1}), "dynamics.focus_share"),
        (lambda d: d.update(dynamics={"foreign_words": -1}), "dynamics.foreign_words"),
        (lambda d: d.update(dynamics={"max_stages_per_reply": 0}), "dynamics.max_stages_per_reply"),
        (lambda d: d.update(dynamics={"overlap_ngram": "3"}), "dynamics.overlap_ngram"),
        (lambda d: d.update(dynamics={"negation_check": 1}), "dynamics.negation_check"),
        (lambda d: d["stages"][0].update(reference_rewording=["Hi."]), "stages[0].reference_rewording"),
        (
            lambda d: d["concerns"]["Cost_Concerns"].update(reference_rewordings=["Free.", ""]),
            "concerns.Cost_Concerns.reference_rewordings[1]",
        ),
        # a phrase of two concerns (or two stages) would make one reply answer both kinds, or cue both stages
        (
            lambda d: d["concerns"]["Cost_Concerns"]["resolved_by"].append("you pay per click"),
            "concerns.Cost_Concerns.resolved_by[3]",
        ),
        (lambda d: d["stages"][1]["agent_cues"].append("bye for now"), "stages[1].agent_cues[7]"),
        # a reference line the user would not take: a bare phrase, or any line under an impossible substance bar
        (
            lambda d: d["concerns"]["Cost_Concerns"].update(reference_rewordings=["No deposit."]),
            "concerns.Cost_Concerns.reference_rewordings[0]",
        ),
        (lambda d: d.update(dynamics={"substance_words": 40}), "stages[0].reference_agent"),
    ],
)
def test_bad_rules_file_names_file_and_field(tmp_path, restaurant_rules, mutate, field):
    scenario, data = restaurant_rules
    data = yaml.safe_load(yaml.safe_dump(data))
    mutate(data)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SEADInputError) as e:
        load_rules(path, scenario.stages, scenario.library.categories)
    assert e.value.path == path and e.value.field == field and str(path) in str(e.value)


def test_a_phrase_inside_a_longer_word_of_another_concern_is_no_overlap(tmp_path, restaurant_rules):
    """Phrases are heard as whole words, so "illegitimate" (here an answer to one concern) and "legitimate" (one to
    another) never count as one another: the file is accepted; a phrase holding another's whole words is refused
    (test_bad_rules_file_names_file_and_field)."""
    scenario, data = restaurant_rules
    data = yaml.safe_load(yaml.safe_dump(data))
    data["concerns"]["Suitability_Doubts"]["resolved_by"].append("illegitimate")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    rules = load_rules(path, scenario.stages, scenario.library.categories)
    assert "illegitimate" in rules.concerns["Suitability_Doubts"].resolved_by


def test_missing_rules_file_or_unknown_behaviour_is_refused(restaurant_rules):
    scenario, _ = restaurant_rules
    with pytest.raises(SEADInputError) as e:
        ScriptedUserSimulator(dataclasses.replace(scenario, rules_path=None))
    assert e.value.field == "scenario.rules"
    stranger = Profile.make({"cooperation": 2, "emotion": 2, "trust": 2}, ["Juggles while talking."])
    with pytest.raises(SEADInputError) as e:
        asyncio.run(ScriptedUserSimulator(scenario).respond(stranger, [], "Hello", seed=0))
    assert e.value.field == "behaviours"


def test_invalid_yaml_names_file_and_line(tmp_path, restaurant_rules):
    scenario, _ = restaurant_rules
    path = tmp_path / "rules.yaml"
    path.write_text("stages:\n  - name: a\n    agent_cues: [unclosed\n")
    with pytest.raises(SEADInputError) as e:
        load_rules(path, scenario.stages, scenario.library.categories)
    assert e.value.path == path and e.value.line is not None and "invalid YAML" in str(e.value)


def test_dynamics_block_overrides_defaults(tmp_path, restaurant_rules):
    scenario, data = restaurant_rules
    data = {**data, "dynamics": {"operate_threshold": scenario.space["cooperation"].high + 1, "foreign_words": None}}
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    rules = load_rules(path, scenario.stages, scenario.library.categories)
    assert rules.dynamics.operate_threshold == scenario.space["cooperation"].high + 1
    assert rules.dynamics.foreign_words is None  # null lifts the limit
    assert rules.dynamics.long_reply_words == Dynamics().long_reply_words
    env = Bundle(
        scenario,
        ScriptedUserSimulator(scenario, rules),
        ReferenceAgent(scenario, StubTokenizer(), rules),
        SOPIgnoringAgent(scenario, StubTokenizer()),
    )
    assert completion_rate(run_all(env, env.reference, make_profiles(scenario, LEVELS["easy"], 20))) == 0
