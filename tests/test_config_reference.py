"""The configuration and CLI references are generated from the schemas and the command registry and kept current;
`sead config show` prints the config in effect with each key's comment; a key that is not one gets a suggestion."""

import dataclasses

import pytest

from sead.backends import EMBEDDED_ONLY, VERL_REFUSES, backend_of
from sead.cli import reference
from sead.cli.main import main
from sead.cli.registry import COMMANDS
from sead.config import SHIPPED_CONFIG_DIR, number
from sead.config_docs import field_comment, presets, schema_keys, usersim_sections


def test_the_reference_files_are_current():
    assert reference.stale() == [], "the config or CLI reference is out of date: run `sead docs`"


def test_docs_check_fails_on_a_stale_file_until_docs_writes_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reference, "REFERENCE_DIR", tmp_path)
    assert main(["docs", "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["docs"]) == 0
    assert main(["docs", "--check"]) == 0
    (tmp_path / "cli.md").write_text("edited by hand\n")
    assert main(["docs", "--check"]) == 1


def _row(text: str, key: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| `{key}` |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_the_config_reference_has_every_key_with_its_default_domain_and_backend():
    text = reference.config_reference()
    assert text.startswith(reference.GENERATED)
    for key in schema_keys():
        assert f"| `{key}` |" in text
    assert _row(text, "trainer.update.clip_low")[1:5] == ["float", "`0.2`", ">= 0 and < 1", "both"]
    assert _row(text, "trainer.update.estimator")[3] == "one of grpo, ppo"
    # integer bounds written out whole, float ones short
    assert _row(text, "seed")[3] == ">= 0 and <= 2147483647"
    assert _row(text, "profiles.n")[3] == ">= 1 and <= 10000000"
    assert _row(text, "usersim.max_tokens")[3] == ">= 1 and <= 1000000"
    assert _row(text, "trainer.max_minutes")[3] == "> 0 and <= 1e+06"
    assert _row(text, "eval.sampling.temperature")[3] == ">= 0.01 and <= 10 (or 0)"
    assert _row(text, "trainer.validation.sampling.temperature")[2] == "`0.0`"  # the default its parent gives it
    assert _row(text, "trainer.lora.enabled")[4] == "embedded (verl refuses)"
    assert _row(text, "trainer.cuda_graph")[4] == "embedded"
    assert _row(text, "verl.n_gpus_per_node")[4] == "verl"
    assert _row(text, "eval.limit")[4] == "sead eval"
    assert "low_var_kl to the frozen reference" in _row(text, "trainer.update.kl_coef")[5]
    assert "null = $OPENAI_API_KEY" in _row(text, "usersim.api_key")[5]  # from configs/usersim/openai.yaml
    assert "SOP" in _row(text, "scenario.stages")[1]
    for name in presets(SHIPPED_CONFIG_DIR):
        assert f"| `{name}` |" in text


def test_every_key_says_what_it_does():
    """Each schema field's comment (or a user simulator's line comment) is its documentation in the reference."""
    keys = [*schema_keys().values(), *(k for s in usersim_sections(SHIPPED_CONFIG_DIR) for k in s.keys)]
    assert len(keys) > 150
    assert [k.key for k in keys if not k.comment] == []


def test_the_backend_table_names_real_keys():
    keys = schema_keys()
    assert set(VERL_REFUSES) <= set(keys)
    sections = {k.rsplit(".", 1)[0] for k in keys}
    assert [s for s in EMBEDDED_ONLY if s not in keys and s not in sections] == []
    assert backend_of("trainer.warmup.lr") == "embedded" and backend_of("trainer.warmup_steps") == "both"


def test_the_cli_reference_shows_every_command_usage():
    text = reference.cli_reference()
    for cmd in COMMANDS.values():
        assert f"## `{cmd.name}`" in text and cmd.help() in text


@dataclasses.dataclass
class _Documented:
    # above: what it is
    # (a second line)
    alpha: int = number(1, ge=0)  # beside it
    beta: str = "b"


@dataclasses.dataclass
class _Derived(_Documented):
    beta: str = "c"  # the derived class's own


def test_a_fields_comment_is_the_block_above_it_and_the_one_beside_it():
    assert field_comment(_Documented, "alpha") == "above: what it is (a second line) beside it"
    assert field_comment(_Documented, "beta") == ""
    assert field_comment(_Derived, "beta") == "the derived class's own"
    assert field_comment(_Derived, "alpha") == "above: what it is (a second line) beside it"  # inherited


def test_config_show_prints_the_values_in_effect_with_their_comments(capsys):
    assert main(["config", "show", "trainer.update.kl_coef", "trainer.update.kl_coef=0.01"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["trainer:", "  update:"]
    assert out[2].startswith("    kl_coef: 0.01  # low_var_kl to the frozen reference")
    assert main(["config", "show", "usersim", "usersim=openai"]) == 0
    out = capsys.readouterr().out
    assert "  name: openai  # which simulator" in out and "api_key: null  # null = $OPENAI_API_KEY" in out
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("scenario:\n") and "\ntrainer:\n" in out and "\nseed: 0  # the run's seed" in out


@pytest.mark.parametrize(
    "argv, suggestion",
    [
        (["config", "show", "trainer.updte"], "did you mean trainer.update"),
        (["scenario", "check", "trainer.updat.lr=1"], "did you mean trainer.update.lr"),  # Hydra refuses it
        (["train", "+trainer.update.lrr=1"], "did you mean trainer.update.lr"),  # the schema refuses it
    ],
)
def test_a_key_that_is_not_one_gets_the_nearest_keys(argv, suggestion, capsys):
    assert main(argv) == 2
    assert suggestion in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, simulators",
    [
        (["train", "usersim.timeout=5"], "usersim=openai only"),  # Hydra refuses it
        (["eval", "scripted:reference", "usersim.max_tokens=5"], "usersim=openai only"),
        (["scenario", "check", "usersim.temperature=0.5"], "usersim=hf and of usersim=openai only"),
        (["train", "usersim=openai", "usersim.max_new_tokens=5"], "usersim=hf only"),
        (["config", "show", "usersim.model_path"], "usersim=hf only"),
    ],
)
def test_another_simulators_key_names_the_simulators_that_take_it(argv, simulators, capsys, tmp_path):
    key = argv[-1].split("=")[0]
    assert main([*argv, f"run_dir={tmp_path / 'run'}"] if argv[0] == "train" else argv) == 2
    out = capsys.readouterr().out
    assert f"{key} is a setting of {simulators}" in out and "did you mean" not in out and "+usersim" not in out


def test_a_key_appended_for_another_simulator_names_the_simulator_that_takes_it(tmp_path, capsys):
    """`+usersim.KEY=`: Hydra takes it, the scripted simulator's constructor does not."""
    assert main(["train", "+usersim.timeout=5", f"run_dir={tmp_path / 'run'}"]) == 2
    assert "usersim.timeout is a setting of usersim=openai only" in capsys.readouterr().out
    assert not (tmp_path / "run").exists()


def test_a_key_set_to_null_is_shown_not_taken_for_a_missing_one(capsys):
    assert main(["config", "show", "usersim.api_key", "usersim=openai"]) == 0
    assert "api_key: null" in capsys.readouterr().out


def test_sead_help_lists_the_presets(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in presets(SHIPPED_CONFIG_DIR):
        assert f"\n  {name} " in out
