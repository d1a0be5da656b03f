"""Scenarios are data: the shipped scenarios load, and bad files give errors that name file, line and field."""

import json

import pytest

from sead.config import build_scenario, load_config
from sead.errors import SEADInputError
from sead.scenario import BehaviourLibrary, Profile, PromptTemplate, read_profiles, write_profiles


@pytest.mark.parametrize("name", ["restaurant", "telecom"])
def test_shipped_scenarios_load_and_render(name):
    scenario = build_scenario(load_config([f"scenario={name}"]))
    assert len(scenario.stages) == 4
    profile = Profile.make({"cooperation": 2, "emotion": 1, "trust": 3}, [scenario.library.behaviours[0].text])
    prompt = scenario.user_system_prompt(profile)
    assert "${" not in prompt and "- " + scenario.library.behaviours[0].text in prompt
    assert "<response>" in scenario.agent_system_prompt() and "<user_reply>" in prompt


def test_restaurant_library_matches_the_original_shape(restaurant):
    cats = restaurant.library.categories
    assert len(cats) == 14
    assert 90 <= len(restaurant.library) <= 105


def test_scenarios_differ(restaurant):
    telecom = build_scenario(load_config(["scenario=telecom"]))
    assert telecom.agent_system_prompt() != restaurant.agent_system_prompt()
    assert not set(b.text for b in telecom.library.behaviours) & set(b.text for b in restaurant.library.behaviours)


def test_library_reads_the_original_single_object_format(tmp_path):
    path = tmp_path / "client_action.jsonl"
    path.write_text(
        json.dumps(
            {
                "User_Persona_Classification": {
                    "0. Identity_Verification": ["Says they are not the owner.", "Asks who is calling."],
                    "2. Cost_Concerns": ["Asks about hidden fees."],
                }
            },
            indent=2,
        )
    )
    lib = BehaviourLibrary.load(path)
    assert len(lib) == 3
    assert lib.categories == {"Identity_Verification": 2, "Cost_Concerns": 1}


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "lines, line, field, words",
    [
        (['{"category": "A", "behaviour": "x"}', '{"category": "A", "behaviour": '], 2, None, "invalid JSON"),
        (['{"category": "A", "behaviour": "x"}', '{"category": "A", "behaviour": "  "}'], 2, "behaviour", "empty"),
        (['{"category": "A", "behaviour": "x"}', '{"category": "B", "behaviour": "x"}'], 2, "behaviour", "duplicate"),
        (['{"behaviour": "x"}'], 1, "category", "empty"),
    ],
)
def test_bad_behaviour_library_names_line_and_field(tmp_path, lines, line, field, words):
    path = _write(tmp_path, "lib.jsonl", "\n".join(lines))
    with pytest.raises(SEADInputError) as e:
        BehaviourLibrary.load(path)
    assert e.value.line == line and e.value.field == field and words in str(e.value)
    assert str(path) in str(e.value)


def test_empty_library_is_an_error(tmp_path):
    with pytest.raises(SEADInputError, match="empty"):
        BehaviourLibrary.load(_write(tmp_path, "lib.jsonl", "\n\n"))


def test_template_accepts_both_placeholder_spellings():
    t = PromptTemplate.parse(
        "coop ${initial_cooperation} trust {initial_trust} {{literal}}",
        "t",
        required=["initial_cooperation", "initial_trust"],
    )
    assert t.render({"initial_cooperation": 3, "initial_trust": 1}) == "coop 3 trust 1 {literal}"


def test_template_unknown_placeholder_names_file_and_line(tmp_path):
    path = _write(tmp_path, "user.txt", "line one\nhello ${initial_cooperation}\nand ${initial_mood}\n")
    with pytest.raises(SEADInputError) as e:
        PromptTemplate.load(path, required=["initial_cooperation"])
    assert e.value.line == 3 and e.value.field == "initial_mood" and str(path) in str(e.value)


def test_template_missing_placeholder_is_an_error(tmp_path):
    path = _write(tmp_path, "user.txt", "only ${initial_cooperation}\n")
    with pytest.raises(SEADInputError, match=r"missing required placeholder.*specific_behaviors"):
        PromptTemplate.load(path, required=["initial_cooperation", "specific_behaviors"])


def test_profile_files_round_trip_in_both_formats(tmp_path, restaurant):
    profiles = [
        Profile.make({"cooperation": 1, "emotion": 2, "trust": 4}, [restaurant.library.behaviours[3].text]),
        Profile.make({"cooperation": 3, "emotion": 1, "trust": 1}, []),
    ]
    for suffix in (".jsonl", ".parquet"):
        path = write_profiles(profiles, tmp_path / f"p{suffix}")
        assert read_profiles(path, restaurant.space, restaurant.library) == profiles


@pytest.mark.parametrize(
    "record, field, words",
    [
        ({"cooperation": 9, "emotion": 1, "trust": 2, "behaviours": []}, "cooperation", "out of range 0-4"),
        ({"cooperation": 2, "emotion": 1, "behaviours": []}, "trust", "missing"),
        (
            {"cooperation": 2, "emotion": 1, "trust": 2, "behaviours": ["Sings a song."]},
            "behaviours",
            "unknown behaviour",
        ),
        ({"cooperation": "two", "emotion": 1, "trust": 2, "behaviours": []}, "cooperation", "not an integer"),
    ],
)
def test_bad_profile_file_names_line_and_field(tmp_path, restaurant, record, field, words):
    good = {"cooperation": 2, "emotion": 1, "trust": 2, "behaviours": []}
    path = _write(tmp_path, "p.jsonl", json.dumps(good) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(SEADInputError) as e:
        read_profiles(path, restaurant.space, restaurant.library)
    assert e.value.line == 2 and e.value.field == field and words in str(e.value)


def test_scenario_config_errors_name_the_field(restaurant_cfg):
    with pytest.raises(SEADInputError, match=r"scenario.default_marginals.cooperation.*sum to 1.2000, not 1"):
        build_scenario(load_config(["scenario.default_marginals.cooperation={1: 0.5, 2: 0.4, 3: 0.3}"]))
    with pytest.raises(SEADInputError, match=r"scenario.dimensions.trust.allowed.*outside 0-5"):
        build_scenario(load_config(["scenario.dimensions.trust.allowed=[1,7]"]))
    with pytest.raises(SEADInputError, match=r"call_missing.txt.*cannot read"):
        build_scenario(load_config(["scenario.agent_prompt=configs/format_prompt/call_missing.txt"]))


def test_a_new_scenario_needs_only_files(tmp_path, monkeypatch):
    """A user adds a scenario by adding files and selecting it: no code change."""
    import shutil

    root = tmp_path / "proj"
    shutil.copytree(load_config.__globals__["config_dir"](), root / "configs")
    (root / "assets").mkdir()
    (root / "assets" / "refund.jsonl").write_text(
        '{"category": "Angry", "behaviour": "Demands a manager."}\n{"category": "Angry", "behaviour": "Swears."}\n'
    )
    (root / "configs" / "format_prompt" / "refund_agent.txt").write_text("You handle refunds. Use <response>.\n")
    (root / "configs" / "format_prompt" / "refund_user.txt").write_text(
        "Patience ${initial_patience}.\n${specific_behaviors}\nReply in <user_reply>.\n"
    )
    (root / "configs" / "scenario" / "refund.yaml").write_text(
        "name: refund\nagent_prompt: configs/format_prompt/refund_agent.txt\n"
        "user_prompt: configs/format_prompt/refund_user.txt\nbehaviour_library: assets/refund.jsonl\n"
        "stages: [greet, refund]\ndimensions:\n  patience: {low: 0, high: 2}\n"
        "behaviours_per_profile: {min: 1, max: 1}\n"
    )
    monkeypatch.setenv("SEAD_CONFIG_DIR", str(root / "configs"))
    cfg = load_config(["scenario=refund"])
    scenario = build_scenario(cfg)
    assert scenario.space.sampled_names == ("patience",)
    assert "Patience 1." in scenario.user_system_prompt(Profile.make({"patience": 1}, ["Swears."]))


def test_compact_prompt_has_a_rule_satisfying_answer_for_every_concern(restaurant):
    """The compact prompt's FAQ ("- cue words? answer") is only useful to a small model if copying a line answers
    the concern in the scripted user's eyes: each category needs a line whose answer resolves it, and no answer
    may contradict the offer's facts."""
    from sead.usersim.rules_file import scenario_rules
    from sead.usersim.visible_text import matches_any, normalise

    rules = scenario_rules(restaurant)
    prompt = build_scenario(load_config(["scenario.agent_prompt=configs/format_prompt/call_chatbot_compact.txt"]))
    answers = [
        normalise(line.split("? ", 1)[1])
        for line in prompt.agent_system_prompt().splitlines()
        if line.startswith("- ") and "? " in line
    ]
    assert len(answers) == len(rules.concerns)
    unanswered = [
        c.category for c in rules.concerns.values() if not any(matches_any(a, c.resolved_by) for a in answers)
    ]
    assert unanswered == []
    assert [a for a in answers if matches_any(a, rules.contradictions)] == []


def test_user_prompts_are_remembered_per_profile_and_the_scenario_still_pickles(restaurant):
    import pickle

    first = Profile.make({"cooperation": 1, "emotion": 3, "trust": 4}, [restaurant.library.behaviours[0].text])
    second = Profile.make({"cooperation": 4, "emotion": 0, "trust": 1}, [])
    prompts = [restaurant.user_system_prompt(p) for p in (first, second, first)]
    assert prompts[0] is prompts[2] and prompts[0] != prompts[1]
    assert "Cooperation at the start: 1" in prompts[0] and "Cooperation at the start: 4" in prompts[1]
    copy = pickle.loads(pickle.dumps(restaurant))
    assert copy.user_system_prompt(second) == prompts[1]


def test_a_huge_dimension_range_is_refused_before_any_list_is_built(capsys):
    """`high: 1000000000` once made `sead scenario check` build a billion-value list (about 80 GB)."""
    from sead.cli.main import main

    assert main(["scenario", "check", "scenario.dimensions.trust.high=1000000000"]) == 2
    assert "[scenario.dimensions.trust]: 0-1000000000 holds 1000000001 values" in capsys.readouterr().out
    wide = [f"scenario.dimensions.{d}={{low: 0, high: 60, allowed: null}}" for d in ("cooperation", "emotion", "trust")]
    with pytest.raises(SEADInputError, match=r"226981 joint states \(61 \(cooperation\) x 61 \(emotion\) x 61"):
        build_scenario(load_config(wide))


@pytest.mark.parametrize("token", ["<|im_end|>", "<|start_header_id|>", "[INST]", "</s>", "<end_of_turn>"])
def test_a_prompt_or_behaviour_holding_a_chat_control_token_is_refused_at_load(tmp_path, token):
    """In the agent's or the user's prompt such text would be read as a turn's start or end, and forge turns."""
    prompt = _write(tmp_path, "agent.txt", f"You are an agent.\nSay: {token}assistant\n")
    with pytest.raises(SEADInputError, match="a chat template's control token") as e:
        PromptTemplate.load(prompt)
    assert e.value.path == str(prompt) and e.value.line == 2 and token in str(e.value)
    library = _write(
        tmp_path,
        "lib.jsonl",
        f'{{"category": "A", "behaviour": "Fine."}}\n{{"category": "A", "behaviour": "Ok {token} go"}}\n',
    )
    with pytest.raises(SEADInputError, match="a chat template's control token") as e:
        BehaviourLibrary.load(library)
    assert e.value.line == 2 and e.value.field == "behaviour"
