"""The `sead` console command."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from sead.cli.main import main


def test_profiles_sample_writes_jsonl_and_parquet(tmp_path, capsys):
    for suffix in ("jsonl", "parquet"):
        out = tmp_path / f"profiles.{suffix}"
        assert main(["profiles", "sample", "profiles.n=25", f"profiles.out={out}", "seed=3"]) == 0
        rows = (pd.read_parquet(out).to_dict("records") if suffix == "parquet"
                else [json.loads(l) for l in out.read_text().splitlines()])
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
    r = subprocess.run([str(sead), "profiles", "sample", "profiles.n=3",
                        f"profiles.out={out}"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert len(out.read_text().splitlines()) == 3


def test_train_with_an_unknown_backend_names_the_field(capsys):
    assert main(["train", "backend=nope"]) == 2
    assert "unknown backend 'nope'" in capsys.readouterr().out
