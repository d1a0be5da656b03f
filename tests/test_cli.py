"""The `sead` console command."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sead.cli.main import is_override, main
from sead.cli.registry import COMMANDS
from sead.run.layout import RunLayout


def test_profiles_sample_writes_jsonl_and_parquet(tmp_path, capsys):
    for suffix in ("jsonl", "parquet"):
        out = tmp_path / f"profiles.{suffix}"
        assert main(["profiles", "sample", "profiles.n=25", f"profiles.out={out}", "seed=3"]) == 0
        rows = (
            pd.read_parquet(out).to_dict("records")
            if suffix == "parquet"
            else [json.loads(l) for l in out.read_text().splitlines()]
        )
        assert len(rows) == 25 and {"cooperation", "emotion", "trust", "behaviours"} <= set(rows[0])
    assert main(["profiles", "check", str(out)]) == 0
    assert "25 valid profiles" in capsys.readouterr().out


def test_scenario_check_summarises(capsys):
    assert main(["scenario", "check", "scenario=telecom", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["status"] == "OK" and info["name"] == "telecom"
    assert info["joint_states"] == 24 and len(info["stages"]) == 4
    assert main(["scenario", "check"]) == 0
    assert "scenario restaurant: OK" in capsys.readouterr().out


def test_bad_input_exits_2_with_the_field_named(tmp_path, capsys):
    assert main(["scenario", "check", "controller.target=abc"]) == 2
    assert "controller.target" in capsys.readouterr().out
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"cooperation": 2, "emotion": 1, "trust": 7, "behaviours": []}\n')
    assert main(["profiles", "check", str(bad)]) == 2
    out = capsys.readouterr().out
    assert f"{bad}:1" in out and "trust" in out and "out of range" in out


def test_unknown_command_prints_usage(capsys):
    assert main(["profiles", "fly"]) == 2
    assert "sead profiles sample" in capsys.readouterr().err


def test_console_script_is_installed(tmp_path):
    out = tmp_path / "p.jsonl"
    sead = Path(sys.executable).parent / "sead"  # the console script pip installed next to this python
    r = subprocess.run(
        [str(sead), "profiles", "sample", "profiles.n=3", f"profiles.out={out}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert len(out.read_text().splitlines()) == 3


def test_train_with_an_unknown_backend_names_the_field(capsys):
    assert main(["train", "backend=nope"]) == 2
    assert "[backend]: must be one of embedded, verl, got 'nope'" in capsys.readouterr().out


@pytest.mark.parametrize("words", sorted(COMMANDS))
def test_every_command_answers_help_with_its_usage_and_does_nothing_else(words, monkeypatch, capsys):
    def no_config(*a, **k):
        raise AssertionError("--help composed a config: the command would have run")

    monkeypatch.setattr("sead.cli.main.load_config", no_config)
    cmd = COMMANDS[words]
    for flag in ("--help", "-h"):
        assert main([*words, flag]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: {cmd.name} ") and cmd.summary in out
        assert "key=value" in out and "Hydra override" in out
        assert all(arg in out for arg in cmd.args)  # every positional argument and flag is explained


def test_train_help_and_a_mistyped_flag_start_no_training(monkeypatch, capsys):
    def no_training(cfg):
        raise AssertionError("training started")

    monkeypatch.setattr("sead.trainer.loop.train", no_training)
    assert main(["train", "--help"]) == 0 and "usage: sead train" in capsys.readouterr().out
    assert main(["train", "--hlep"]) == 2
    assert "sead train takes no arguments, got --hlep" in capsys.readouterr().out


def test_eval_help_is_not_taken_for_a_model(capsys):
    assert main(["eval", "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: sead eval MODEL [MODEL ...]" in out and "scripted:NAME" in out and "no such model" not in out


def test_sead_help_lists_every_command(capsys):
    for argv in (["--help"], ["-h"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert all(c.name in out for c in COMMANDS.values())
    assert main(["profiles", "--help"]) == 0  # a group lists its own commands
    out = capsys.readouterr().out
    assert "sead profiles check" in out and "sead train" not in out
    assert main([]) == 2 and "sead train" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["sead", "sead.cli.main"])
def test_python_dash_m_runs_the_command(module, tmp_path):
    out = tmp_path / "p.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", module, "profiles", "sample", "profiles.n=3", f"profiles.out={out}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert len(out.read_text().splitlines()) == 3
    r = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "sead profiles sample" in r.stdout


@pytest.mark.parametrize(
    "arg,expected",
    [
        ("seed=3", True),
        ("trainer.update.lr=1e-5", True),
        ("+verl.bogus=1", True),
        ("++seed=1", True),
        ("~controller.marginals=null", True),
        ("model.path=/models/a=b", True),  # only the key decides
        ("tmp/a=b/profiles.jsonl", False),
        ("/abs/x=1/run", False),
        ("--html", False),
        ("outputs/run", False),
        ("=3", False),
        ("1x=2", False),
    ],
)
def test_an_override_is_a_config_key_then_equals(arg, expected):
    assert is_override(arg) is expected


def test_an_existing_path_with_equals_is_an_argument(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["profiles", "sample", "profiles.n=4", f"profiles.out={tmp_path / 'p.jsonl'}"]) == 0
    for name in ("tmp/a=b/profiles.jsonl", "n=4.jsonl"):  # a path with a `/`, and one whose name looks like a key
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text((tmp_path / "p.jsonl").read_text())
        capsys.readouterr()
        assert main(["profiles", "check", name]) == 0
        assert f"{name}: 4 valid profiles" in capsys.readouterr().out
    run = tmp_path / "runs" / "lr=1e-5"
    run.mkdir(parents=True)
    RunLayout(run).metrics.write_text('{"step": 1, "reward": 0.5, "CR": 0.5}\n{"step": 2, "reward": 0.7, "CR": 0.6}\n')
    assert main(["report", "runs/lr=1e-5"]) == 0
    assert (run / "report.html").is_file()


@pytest.mark.parametrize(
    "run_dir, named",
    [("", "[run_dir]: is empty"), ("loop", "loop [run_dir]: cannot be resolved")],
)
def test_report_names_a_run_dir_that_cannot_be_a_folder(tmp_path, monkeypatch, capsys, run_dir, named):
    monkeypatch.chdir(tmp_path)
    os.symlink("loop", tmp_path / "loop")
    assert main(["report", run_dir]) == 2
    assert named in capsys.readouterr().out


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "argv,message",
    [
        (["train", "trainer.max_batch=0"], "[trainer.max_batch]: must be >= 1 and <= 65536, got 0"),
        (["train", "trainer.profiles_per_step=0"], "[trainer.profiles_per_step]: must be >= 1 and <= 1000000, got 0"),
        (
            ["train", "trainer.update.estimator=ppo2"],
            "[trainer.update.estimator]: must be one of grpo, ppo, got 'ppo2'",
        ),
        (["train", "dialogue.max_turns=0", "usersim=hf"], "[dialogue.max_turns]: must be >= 1 and <= 1000, got 0"),
        (["eval", "scripted:reference", "eval.max_batch=0"], "[eval.max_batch]: must be >= 1 and <= 65536, got 0"),
    ],
)
def test_values_that_used_to_hang_fail_before_a_model_loads_or_a_folder_is_written(
    argv, message, tmp_path, monkeypatch, capsys
):
    def no_model(*a, **k):
        raise AssertionError("a model was loaded")

    for target in (
        "sead.trainer.loop.load_model",
        "sead.trainer.loop.build_usersim",
        "sead.eval.agents.build_agent",
        "sead.cli.eval_commands.build_usersim",
    ):
        monkeypatch.setattr(target, no_model)
    monkeypatch.chdir(tmp_path)
    assert main([*argv, f"run_dir={tmp_path / 'run'}", f"eval.out_dir={tmp_path / 'eval'}"]) == 2
    assert message in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # no run directory, test set or results folder


def test_an_unknown_config_choice_lists_the_choices_without_hydras_search_path(capsys):
    assert main(["train", "controller=nope"]) == 2
    out = capsys.readouterr().out
    assert "Could not find 'controller/nope'" in out and "sead_joint" in out and "search path" not in out


def test_profiles_sample_refuses_a_count_outside_its_declared_range(tmp_path, capsys):
    assert main(["profiles", "sample", "profiles.n=0", f"profiles.out={tmp_path / 'p.jsonl'}"]) == 2
    assert (
        "[profiles.n]: must be >= 1 and <= 10000000, got 0" in capsys.readouterr().out
        and not (tmp_path / "p.jsonl").exists()
    )
