"""`sead scenario new NAME`: a working scenario to edit, copied from one that ships with SEAD and renamed.

The copy is the shipped scenario's five files (config, agent prompt, user prompt, behaviour library, rules) under
names of the new scenario, so `sead scenario check scenario=NAME` and `sead train scenario=NAME` accept it at once and
every later edit can be checked against a scenario that worked.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from sead.errors import SEADInputError, read_user_text

NAME = re.compile(r"[a-z][a-z0-9_]*")
# scenario key -> where the new scenario's copy goes, relative to the project root
FILES = {
    "agent_prompt": "configs/format_prompt/{name}_agent.txt",
    "user_prompt": "configs/format_prompt/{name}_user.txt",
    "behaviour_library": "assets/{name}_behaviours.jsonl",
    "rules": "assets/{name}_rules.yaml",
}
CONFIG = "configs/scenario/{name}.yaml"


def header(name: str, template: str) -> str:
    return f"""\
# Scenario `{name}`, written by `sead scenario new {name}` as a copy of the {template} scenario. Edit its files:
#   agent_prompt       the SOP the agent follows; keep its tag format (<response>, portrait scores, <stage>, <status>)
#   user_prompt        the simulated user's instructions; ${{initial_<dimension>}} and ${{specific_behaviors}} are
#                      filled in per profile
#   behaviour_library  one JSON object a line: {{"category": ..., "behaviour": ..., "utterance": ...}}
#   rules              the scripted user's and the reference agent's cues and answers, per stage below and per
#                      category of the library (sead/usersim/rules_file.py names every key it reads)
# Check it: sead scenario check scenario={name}
# Try it:   sead train scenario={name} preset=tiny scenario.agent_prompt={FILES["agent_prompt"].format(name=name)}
#           (the tiny and cpu presets otherwise set the restaurant's compact agent prompt)
"""


def new_scenario(name: str, root: Path, template_root: Path, template: str = "restaurant") -> list[Path]:
    """Write scenario `name` into the project at `root`, copied from scenario `template` of the project at
    `template_root`; return the files written. Refuses a bad name or a file that already exists."""
    if not NAME.fullmatch(name):
        raise SEADInputError(f"a scenario name is lowercase letters, digits and _, starting with a letter: {name!r}")
    source = template_root / "configs" / "scenario" / f"{template}.yaml"
    text = read_user_text(source, "scenario config")
    spec = yaml.safe_load(text)
    targets = {key: root / pattern.format(name=name) for key, pattern in FILES.items()}
    config = root / CONFIG.format(name=name)
    taken = [p for p in [config, *targets.values()] if p.exists()]
    if taken:
        raise SEADInputError("exists already; choose another name or remove it", path=taken[0])
    for key, target in targets.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(read_user_text(template_root / spec[key], f"scenario {key}"), encoding="utf-8")
    renamed = {"name": name, **{key: FILES[key].format(name=name) for key in FILES}}
    for key, value in renamed.items():  # line by line, so the template's comments stay beside their keys
        text, n = re.subn(rf"(?m)^{key}:[ \t]*\S+", f"{key}: {value}", text)
        if n != 1:
            raise SEADInputError(f"expected one top-level `{key}:` line", path=source)
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(header(name, template) + _without_leading_comment(text), encoding="utf-8")
    return [config, *targets.values()]


def _without_leading_comment(text: str) -> str:
    """The template's own opening comment describes the template, not the copy."""
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)
