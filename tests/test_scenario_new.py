"""`sead scenario new`: a scenario written into a project is accepted at once by `scenario check` and `train`;
`scenario check` refuses a scenario without the rules file that the configured parts read."""

import json
import shutil

import pytest
import yaml

from sead.cli.main import main
from sead.config import SHIPPED_CONFIG_DIR
from sead.run.json_lines import read_json_lines
from sead.run.layout import RunLayout


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A user's project: a copy of the shipped configs, no assets of its own."""
    root = tmp_path / "proj"
    shutil.copytree(SHIPPED_CONFIG_DIR, root / "configs")
    monkeypatch.setenv("SEAD_CONFIG_DIR", str(root / "configs"))
    return root


def test_a_new_scenario_checks_and_trains_at_once(project, tmp_path, capsys):
    assert main(["scenario", "new", "shop"]) == 0
    written = [line.removeprefix("wrote ") for line in capsys.readouterr().out.splitlines() if line.startswith("wrote")]
    assert sorted(written) == sorted(
        str(project / rel)
        for rel in (
            "configs/scenario/shop.yaml",
            "configs/format_prompt/shop_agent.txt",
            "configs/format_prompt/shop_user.txt",
            "assets/shop_behaviours.jsonl",
            "assets/shop_rules.yaml",
        )
    )
    spec = yaml.safe_load((project / "configs/scenario/shop.yaml").read_text())
    assert spec["name"] == "shop" and spec["rules"] == "assets/shop_rules.yaml"

    assert main(["scenario", "check", "scenario=shop", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["status"] == "OK" and info["rules"] == str(project / "assets/shop_rules.yaml")

    run = tmp_path / "run"
    argv = [
        "train",
        "scenario=shop",
        "preset=tiny",
        "scenario.agent_prompt=configs/format_prompt/shop_agent.txt",
        "trainer.iterations=1",
        "trainer.steps_per_iteration=1",
        "trainer.validation.at_start=false",
        f"run_dir={run}",
    ]
    assert main(argv) == 0
    assert "[progress] training steps: 0/1" in capsys.readouterr().out  # a log shows how far training is
    steps = [r for r in read_json_lines(RunLayout(run).metrics) if "validation" not in r]
    assert [r["step"] for r in steps] == [1]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["scenario"]["name"] == "shop" and saved["scenario"]["rules"] == "assets/shop_rules.yaml"


def test_new_refuses_a_bad_name_an_existing_scenario_and_an_unknown_template(project, capsys):
    assert main(["scenario", "new", "Shop-1"]) == 2
    assert "lowercase letters" in capsys.readouterr().out
    assert main(["scenario", "new", "restaurant"]) == 2  # would overwrite the shipped config
    assert "exists already" in capsys.readouterr().out
    assert main(["scenario", "new", "shop", "--from", "bakery"]) == 2
    assert "bakery.yaml" in capsys.readouterr().out
    assert not (project / "assets").exists()  # nothing half-written


def test_new_copies_another_shipped_scenario(project, capsys):
    assert main(["scenario", "new", "mobile", "--from", "telecom"]) == 0
    capsys.readouterr()
    assert main(["scenario", "check", "scenario=mobile", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    telecom = yaml.safe_load((SHIPPED_CONFIG_DIR / "scenario/telecom.yaml").read_text())
    assert info["stages"] == telecom["stages"]


def test_check_refuses_a_scenario_without_the_rules_its_simulator_reads(project, capsys):
    assert main(["scenario", "new", "shop"]) == 0
    config = project / "configs/scenario/shop.yaml"
    config.write_text("".join(line for line in config.read_text().splitlines(True) if not line.startswith("rules:")))
    capsys.readouterr()
    assert main(["scenario", "check", "scenario=shop"]) == 2
    err = capsys.readouterr().out
    assert "[scenario.rules]" in err and "the scripted user" in err
    # a simulator that does not read rules, and no warm-up: the same scenario passes
    assert main(["scenario", "check", "scenario=shop", "usersim=openai"]) == 0
    assert main(["scenario", "check", "scenario=shop", "usersim=openai", "trainer.warmup.dialogues=4"]) == 2
    assert "warm-up" in capsys.readouterr().out
