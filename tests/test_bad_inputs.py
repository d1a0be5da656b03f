"""Bad files a user can hand SEAD, tried through the `sead` command as a user runs it: each one exits with status 2
and a message naming the file (and the line or field where there is one), never a traceback."""

import json

import pytest
import yaml

from sead.cli.main import main
from sead.config import build_scenario, load_config, project_root
from sead.errors import SEADInputError
from sead.scenario import BehaviourLibrary

ROOT = project_root()
BEHAVIOURS = [b.text for b in BehaviourLibrary.load(ROOT / "assets" / "client_action.jsonl").behaviours]
GOOD_PROFILE = {"cooperation": 2, "emotion": 1, "trust": 3, "behaviours": []}


def sead(capsys, *argv) -> tuple[int, str]:
    """Exit status and everything printed. main() returning at all means no traceback reached the user."""
    code = main([str(a) for a in argv])
    printed = capsys.readouterr()
    return code, printed.out + printed.err


# --- any file the user names: wrong encoding, binary, empty, a folder, absent -----------------------------------

BAD_FILES = {
    "latin-1": (b"first line is fine\ncaf\xe9 au lait\n", ":2", "not UTF-8"),  # the bad byte is on line 2
    "binary": (b"GGUF\x03\x00\x00\x00\x00\x00", ":1", "binary file"),  # valid UTF-8, but NUL bytes
    "empty": (b"", "", "empty"),
    "directory": (None, "", "directory, not a file"),
    "missing": (None, "", "no such file"),
}

# Where each kind of file enters: the scenario's four files through `sead scenario check`, profile files through
# `sead profiles check` and as an evaluation test set.
ENTRY_POINTS = {
    "agent prompt": lambda p: ["scenario", "check", f"scenario.agent_prompt={p}"],
    "user prompt": lambda p: ["scenario", "check", f"scenario.user_prompt={p}"],
    "behaviour library": lambda p: ["scenario", "check", f"scenario.behaviour_library={p}"],
    "rules file": lambda p: ["scenario", "check", f"scenario.rules={p}"],
    "profile file": lambda p: ["profiles", "check", p],
    "eval test set": lambda p: ["eval", "scripted:reference", f"eval.testset={p}", f"eval.out_dir={p.parent / 'o'}"],
}


@pytest.mark.parametrize("kind", BAD_FILES)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_unreadable_files_are_refused_naming_the_file(tmp_path, capsys, entry, kind):
    content, where, words = BAD_FILES[kind]
    path = tmp_path / "input.jsonl"
    if kind == "directory":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    code, out = sead(capsys, *ENTRY_POINTS[entry](path))
    assert code == 2
    assert f"{path}{where}" in out and words in out
    assert not (tmp_path / "o").exists()  # nothing was evaluated


def test_a_byte_order_mark_is_not_an_error(tmp_path, capsys):
    """Windows editors start UTF-8 files with a BOM; the file is still good UTF-8."""
    library = tmp_path / "lib.jsonl"
    library.write_bytes(b"\xef\xbb\xbf" + (ROOT / "assets" / "client_action.jsonl").read_bytes())
    profiles = tmp_path / "p.jsonl"
    profiles.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD_PROFILE).encode() + b"\n")
    assert sead(capsys, "scenario", "check", f"scenario.behaviour_library={library}")[0] == 0
    assert sead(capsys, "profiles", "check", profiles)[0] == 0


@pytest.mark.parametrize(
    "name, text, where, words",
    [
        ("agent.txt", "You are Alex.\nGreet {customer_name} first.\n", ":2 [customer_name]", "unknown placeholder"),
        ("agent.txt", "  \n\n", "", "prompt template is empty"),
        (
            "lib.jsonl",
            '{"category": "A", "behaviour": "x"}\n{"category": "A"}\n',
            ":2 [behaviour]",
            "empty or non-text",
        ),
        ("lib.jsonl", '{"category": "A", "behaviour": "x", "utterence": "hm"}\n', ":1 [utterence]", "unknown field"),
    ],
)
def test_bad_prompt_or_library_content_names_file_and_line(tmp_path, capsys, name, text, where, words):
    path = tmp_path / name
    path.write_text(text)
    key = "agent_prompt" if name == "agent.txt" else "behaviour_library"
    code, out = sead(capsys, "scenario", "check", f"scenario.{key}={path}")
    assert code == 2 and f"{path}{where}" in out and words in out


# --- `sead scenario check` reads and checks the rules file, as training does ----------------------------------


def _rules():
    return yaml.safe_load((ROOT / "assets" / "restaurant_rules.yaml").read_text())


def _mutated(change):
    def make():
        data = _rules()
        change(data)
        return yaml.safe_dump(data, sort_keys=False)

    return make


RULES_CASES = {
    "no concerns block": (_mutated(lambda d: d.pop("concerns")), " [concerns]", "non-empty mapping"),
    "a category without rules": (
        _mutated(lambda d: d["concerns"].pop("Cost_Concerns")),
        " [concerns]",
        "Cost_Concerns",
    ),
    "a misspelt category": (
        _mutated(lambda d: d["concerns"].update(Cost_Concern=d["concerns"].pop("Cost_Concerns"))),
        " [concerns]",
        "Cost_Concerns",
    ),
    "one stage too few": (_mutated(lambda d: d["stages"].pop()), " [stages]", "has 3 stages but the scenario has 4"),
    "a string for a list": (_mutated(lambda d: d.update(hangup_lines="Bye.")), " [hangup_lines]", "non-empty list"),
    "a number for a phrase": (
        _mutated(lambda d: d["stages"][0]["agent_cues"].insert(0, 7)),
        " [stages[0].agent_cues[0]]",
        "non-empty string",
    ),
    "an unknown key": (_mutated(lambda d: d.update(acept_lines=["Fine."])), " [acept_lines]", "unknown key"),
    "an unknown stage key": (
        _mutated(lambda d: d["stages"][1].update(user_acks=["Ok."])),
        " [stages[1].user_acks]",
        "unknown key",
    ),
    "an unknown noisy category": (
        _mutated(lambda d: d.update(dynamics={"noisy_categories": ["Mumbling"]})),
        " [dynamics.noisy_categories]",
        "Mumbling",
    ),
    "garbage YAML": (lambda: "stages:\n\t- name: identity_check\n", ":2", "invalid YAML"),  # a tab indents line 2
    "a key given twice": (
        lambda: (ROOT / "assets" / "restaurant_rules.yaml").read_text() + "success_line: Done.\n",
        "",
        "'success_line' appears twice",
    ),
    "a list, not a mapping": (lambda: "- stages\n- concerns\n", "", "must be a YAML mapping"),
}


@pytest.mark.parametrize("case", RULES_CASES)
def test_scenario_check_validates_the_rules_file(tmp_path, capsys, case):
    make, where, words = RULES_CASES[case]
    path = tmp_path / "rules.yaml"
    path.write_text(make())
    code, out = sead(capsys, "scenario", "check", f"scenario.rules={path}")
    assert code == 2 and f"{path}{where}" in out and words in out


def test_scenario_check_passes_the_shipped_rules_unchanged(tmp_path, capsys):
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(_rules()))
    assert sead(capsys, "scenario", "check", f"scenario.rules={path}")[0] == 0


# --- the scenario file itself --------------------------------------------------------------------------------


@pytest.fixture
def scenario_file(tmp_path, monkeypatch):
    """Writes configs/scenario/mine.yaml in a copy of the configs, from restaurant.yaml plus `changes`."""
    import shutil

    configs = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", configs)
    monkeypatch.setenv("SEAD_CONFIG_DIR", str(configs))

    def write(**changes):
        spec = yaml.safe_load((ROOT / "configs" / "scenario" / "restaurant.yaml").read_text())
        for key in ("agent_prompt", "user_prompt", "behaviour_library", "rules"):
            spec[key] = str(ROOT / spec[key])
        spec.update(changes)
        (configs / "scenario" / "mine.yaml").write_text(yaml.safe_dump(spec))
        return "scenario=mine"

    return write


@pytest.mark.parametrize(
    "changes, field, words",
    [
        ({"behavior_library": "assets/client_action.jsonl"}, "scenario.behavior_library", "unknown key"),
        ({"stages": "identity_check"}, "scenario.stages", "non-empty list"),
        ({"stages": ["a", "b", "a", "c"]}, "scenario.stages", "repeat"),
        (
            {"behaviours_per_profile": {"min": 1, "max": 3, "avg": 2}},
            "scenario.behaviours_per_profile",
            "{min: N, max: M}",
        ),
        (
            {"dimensions": {"cooperation": {"low": 0, "high": 4, "sampeld": True}}},
            "scenario.dimensions.cooperation.sampeld",
            "unknown key",
        ),
        (
            {"dimensions": {"trust": {"low": 0, "high": 5, "sampled": "yes please"}}},
            "scenario.dimensions.trust.sampled",
            "true or false",
        ),
        (
            {"dimensions": {"trust": {"low": 0, "high": 5, "allowed": [1, "two"]}}},
            "scenario.dimensions.trust.allowed",
            "must be an integer",
        ),
        (
            {"default_marginals": {"cooperation": {0: 0.2, 1: 0.3, 2: 0.3, 3: 0.2}}},
            "scenario.default_marginals.cooperation",
            "never samples",
        ),
        ({"default_marginals": {"noise": {1: 1.0}}}, "scenario.default_marginals.noise", "not sampled dimensions"),
    ],
)
def test_bad_scenario_file_is_refused_naming_the_key(capsys, scenario_file, changes, field, words):
    code, out = sead(capsys, "scenario", "check", scenario_file(**changes))
    assert code == 2 and f"[{field}]" in out and words in out


def test_a_scenario_file_in_another_encoding_is_named(tmp_path, capsys, scenario_file):
    choose = scenario_file()
    path = tmp_path / "configs" / "scenario" / "mine.yaml"
    path.write_bytes(path.read_bytes() + "# caf\xe9\n".encode("latin-1"))  # Hydra alone gives a bare traceback
    code, out = sead(capsys, "scenario", "check", choose)
    assert code == 2 and "mine.yaml" in out and "UTF-8" in out


def test_marginals_on_values_never_sampled_are_refused_not_renormalised(capsys, scenario_file):
    """Cooperation samples 1-3; weight on 0 used to be dropped and the rest silently scaled up."""
    code, out = sead(
        capsys, "scenario", "check", scenario_file(), "controller.marginals={cooperation: {0: 0.5, 1: 0.25, 2: 0.25}}"
    )
    assert code == 2 and "[controller.marginals.cooperation]" in out and "puts weight 0.5 on 0" in out
    # Zero weight on a value that is not sampled says nothing wrong and is accepted.
    marginals = {0: 0.0, 1: 0.3, 2: 0.4, 3: 0.3}
    assert sead(capsys, "scenario", "check", scenario_file(default_marginals={"cooperation": marginals}))[0] == 0
    assert build_scenario(load_config(["scenario=mine"])).default_marginals["cooperation"] == {1: 0.3, 2: 0.4, 3: 0.3}


# --- profile files: `sead profiles check FILE` and eval test sets -------------------------------------------

PROFILE_CASES = {
    "duplicate behaviours": ({**GOOD_PROFILE, "behaviours": BEHAVIOURS[:1] * 2}, "behaviours", "repeat"),
    "an unknown field": ({**GOOD_PROFILE, "mood": 2}, "mood", "unknown field"),
    "a state that is not sampled": ({**GOOD_PROFILE, "noise": 1}, "noise", "unknown field"),
    "both spellings": ({**GOOD_PROFILE, "behaviors": []}, "behaviours", "not both"),
    "a huge number": ({**GOOD_PROFILE, "trust": 1e400}, "trust", "not an integer"),
}


@pytest.mark.parametrize("command", ["profiles check", "eval"])
@pytest.mark.parametrize("case", PROFILE_CASES)
def test_bad_profile_is_refused_naming_file_line_and_field(tmp_path, capsys, command, case):
    record, field, words = PROFILE_CASES[case]
    path = tmp_path / "profiles.jsonl"
    path.write_text(json.dumps(GOOD_PROFILE) + "\n" + json.dumps(record) + "\n")
    argv = ["profiles", "check", path] if command == "profiles check" else ENTRY_POINTS["eval test set"](path)
    code, out = sead(capsys, *argv)
    assert code == 2 and f"{path}:2 [{field}]" in out and words in out


def test_too_many_behaviours_in_a_test_set_are_refused(tmp_path, capsys, restaurant):
    """The scenario asks for at most 3 behaviours a profile; a hand-written test set with 4 is refused."""
    path = tmp_path / "profiles.jsonl"
    path.write_text(json.dumps(GOOD_PROFILE) + "\n" + json.dumps({**GOOD_PROFILE, "behaviours": BEHAVIOURS[:4]}) + "\n")
    for entry in ("eval test set", "profile file"):
        code, out = sead(capsys, *ENTRY_POINTS[entry](path))
        assert code == 2 and f"{path}:2 [behaviours]" in out and "more than the scenario's maximum of 3" in out
    with pytest.raises(SEADInputError, match=r"profiles.jsonl:2 \[behaviours\]"):
        restaurant.read_profiles(path)


@pytest.mark.parametrize(
    "rows, where, words",
    [
        (
            [GOOD_PROFILE, {**GOOD_PROFILE, "trust": None}],
            ":2 [trust]",
            "not an integer",
        ),  # a missing cell reads as NaN
        ([GOOD_PROFILE, {**GOOD_PROFILE, "mood": 1}], ":1 [mood]", "unknown field"),  # a column is on every row
        ([], "", "empty"),
    ],
)
def test_bad_parquet_profiles_are_refused_naming_file_and_row(tmp_path, capsys, rows, where, words):
    import pandas as pd

    path = tmp_path / "profiles.parquet"
    pd.DataFrame(rows).to_parquet(path)
    code, out = sead(capsys, "profiles", "check", path)
    assert code == 2 and f"{path}{where}" in out and words in out


# --- what used to end in a traceback: YAML syntax, deep JSON, broken model folders, a full disk --------------------


def test_a_yaml_syntax_error_in_a_scenario_file_names_file_and_line(tmp_path, capsys, scenario_file):
    choose = scenario_file()
    path = tmp_path / "configs" / "scenario" / "mine.yaml"
    path.write_text(path.read_text() + "stages: [greet, refund\nname: {\n")
    code, out = sead(capsys, "scenario", "check", choose)
    assert code == 2 and "mine.yaml:" in out and "not valid YAML" in out


def test_a_key_given_twice_in_a_scenario_file_names_file_and_line(tmp_path, capsys, scenario_file):
    choose = scenario_file()
    path = tmp_path / "configs" / "scenario" / "mine.yaml"
    text = path.read_text()
    first = next(line for line in text.splitlines() if line and not line.startswith((" ", "#", "-")))
    path.write_text(text + first + "\n")  # a top-level key again, as a careless edit leaves it
    code, out = sead(capsys, "scenario", "check", choose)
    assert code == 2 and "mine.yaml:" in out and "appears twice" in out


@pytest.mark.parametrize("emptied", ["", "seed: 1\n"])
def test_a_runs_config_emptied_or_cut_short_is_refused_on_resume(tmp_path, capsys, emptied):
    from sead.run.layout import RunLayout
    from sead.trainer.loop import train

    run = train(load_config(["preset=tiny", "trainer.iterations=1", f"run_dir={tmp_path / 'run'}"]))
    RunLayout(run).config.write_text(emptied)
    code, out = sead(capsys, "train", "preset=tiny", f"run_dir={run}", "resume=true")
    assert code == 2 and "config.yaml" in out and ("lacks" in out or "cannot read" in out) and "restore it" in out


@pytest.mark.parametrize("command", ["profiles", "testset"])
def test_json_nested_too_deeply_is_refused_naming_the_file(tmp_path, capsys, command):
    bad = tmp_path / "deep.jsonl"
    bad.write_text(json.dumps(GOOD_PROFILE) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    argv = (
        ["profiles", "check", bad]
        if command == "profiles"
        else ["eval", "scripted:reference", f"eval.testset={bad}", f"eval.out_dir={tmp_path / 'o'}"]
    )
    code, out = sead(capsys, *argv)
    assert code == 2 and f"{bad}:2" in out and "nested too deeply" in out


@pytest.fixture
def broken_model(tmp_path, tiny_model_dir):
    import shutil

    def make(damage: str):
        folder = tmp_path / damage
        shutil.copytree(tiny_model_dir, folder)
        if damage == "weights cut short":
            weights = next(folder.glob("*.safetensors"))
            weights.write_bytes(weights.read_bytes()[:1000])
        else:
            (folder / "tokenizer.json").write_text("{not json")
        return folder

    return make


@pytest.mark.parametrize("damage, words", [("weights cut short", "model weights"), ("tokenizer garbled", "tokenizer")])
def test_a_broken_model_folder_is_named_not_a_loader_traceback(tmp_path, capsys, broken_model, damage, words):
    folder = broken_model(damage)
    code, out = sead(
        capsys, "train", "preset=tiny", "model.preset=path", f"model.path={folder}", f"run_dir={tmp_path / 'r'}"
    )
    assert code == 2 and f"{folder}: cannot load the {words}" in out
    assert not (tmp_path / "r").exists()


def test_a_checkpoint_named_directly_is_held_to_its_manifest(tmp_path, capsys, tiny_model_dir):
    import shutil

    from sead.run.checkpoints import commit_checkpoint, new_checkpoint_dir
    from sead.run.layout import RunLayout

    run = RunLayout(tmp_path / "run")
    shutil.copytree(tiny_model_dir, new_checkpoint_dir(run.path, 2).model, dirs_exist_ok=True)
    checkpoint = commit_checkpoint(run.path, 2, {"step": 2})
    weights = next(checkpoint.model.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:1000])  # a copy cut short
    code, out = sead(capsys, "eval", checkpoint.path, f"eval.out_dir={tmp_path / 'o'}", "eval.limit=1")
    assert code == 2 and "this checkpoint does not verify" in out and "has 1000 bytes, manifest says" in out


def test_a_full_disk_is_named_with_the_file_not_a_traceback(tmp_path, capsys, monkeypatch):
    import errno
    import os

    from sead.run.json_lines import JsonLinesAppender

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as the kernel reports it: no file named

    log = JsonLinesAppender(tmp_path / "metrics.jsonl")
    monkeypatch.setattr("sead.run.json_lines.os.write", full)
    with pytest.raises(OSError) as e:
        log.write({"step": 1})
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "metrics.jsonl")

    def no_room(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "profiles.jsonl"))

    monkeypatch.setattr("sead.scenario.write_profiles", no_room)
    code, out = sead(capsys, "profiles", "sample", f"profiles.out={tmp_path / 'profiles.jsonl'}")
    assert code == 2 and f"{tmp_path / 'profiles.jsonl'}: No space left on device" in out and "Traceback" not in out
