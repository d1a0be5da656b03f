"""The rules file of a scenario: the data behind the scripted user simulator and the scripted reference agent.

A rules file (YAML, named by the scenario's `rules:` key) holds:
- `stages`: one entry per SOP stage, in order: `agent_cues` (phrases that show the agent is doing that
  stage), `user_ack` (what the user says when the stage lands) and `reference_agent` (the reference line);
- `concerns`: one entry per behaviour category of the library: `resolved_by` (phrases that answer it) and
  `reference_answer`;
- `contradictions` (phrases that break the offer's facts), `success_line`, `hangup_lines`, `not_owner_line`;
- optional `accept_lines` / `stall_lines` / `off_topic_lines` (the user's words when a concern was answered /
  it will not act yet / the agent said nothing it can use) and an optional `dynamics:` block overriding the
  numbers in `Dynamics`.

Phrases match case-insensitively as substrings after `normalise`, which also drops the brackets of
placeholders, so a cue "platform" matches a reply saying "[Platform]" and the other way round.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Iterable, NoReturn

import yaml

from sead.errors import SEADInputError

_SPACES = re.compile(r"\s+")
_FOLD = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "[": "", "]": ""})

DEFAULT_ACCEPT_LINES = ("Hm. Okay.", "Alright, fine.")
DEFAULT_STALL_LINES = ("Uh-huh. Later, maybe.", "Mm. Not now.")
DEFAULT_OFF_TOPIC_LINES = ("So? What do you want?", "Huh? Get to the point.")


def normalise(text: str) -> str:
    """Lowercase, straight quotes, no placeholder brackets, single spaces: the form every match is made on."""
    return _SPACES.sub(" ", text.translate(_FOLD).lower()).strip()


def matches_any(normalised_text: str, phrases: Iterable[str]) -> bool:
    return any(p in normalised_text for p in phrases)


@dataclass(frozen=True)
class Dynamics:
    """Numbers of the scripted user's state dynamics; each may be overridden under `dynamics:` in the rules file.

    Not a setting: a turn that lands (the expected stage, or an answered concern) raises cooperation with
    chance trust / trust's high end, so distrustful users are slower to win over.
    """

    operate_threshold: int = 3          # cooperation needed to actually do the operation, hence to succeed
    hangup_cooperation: int | None = None  # hang up when cooperation falls to this; None = the dimension's low end
    hangup_emotion: int | None = None   # hang up when emotion falls to this; None = the dimension's low end
    max_unresolved_rounds: int = 3      # rounds a voiced concern may stay unanswered before the user hangs up
    long_reply_words: int = 60          # an agent reply longer than this lowers emotion
    contradiction_trust_drop: int = 2   # trust lost when the agent contradicts the offer's facts
    unresolved_trust_cost: int = 1      # trust lost per round a voiced concern stays unanswered
    resolve_trust_gain: int = 1         # trust gained when a concern is answered
    low_trust: int = 1                  # at or below this trust, cooperation and emotion may sink each round
    drag_chance: float = 0.4            # chance per round of each of those two drops
    impatience: float = 0.3             # chance per round that emotion drops, times (1 - trust / trust's high end)
    noise_base: int = 1                 # reported noise when no noisy behaviour is active
    noise_active: int = 3               # reported noise while a noisy behaviour is active
    noisy_categories: tuple[str, ...] = ()  # categories that make the user noisy; empty = names with "communication"

    def is_noisy(self, category: str) -> bool:
        if self.noisy_categories:
            return category in self.noisy_categories
        return "communication" in category.lower()


@dataclass(frozen=True)
class StageRules:
    name: str
    agent_cues: tuple[str, ...]         # normalised
    user_ack: tuple[str, ...]
    reference_agent: str


@dataclass(frozen=True)
class ConcernRules:
    category: str
    resolved_by: tuple[str, ...]        # normalised
    reference_answer: str


@dataclass(frozen=True)
class Rules:
    source: str
    stages: tuple[StageRules, ...]
    concerns: dict[str, ConcernRules]
    contradictions: tuple[str, ...]     # normalised
    success_line: str
    hangup_lines: tuple[str, ...]
    not_owner_line: str
    accept_lines: tuple[str, ...]
    stall_lines: tuple[str, ...]
    off_topic_lines: tuple[str, ...]
    dynamics: Dynamics

    def stages_cued(self, normalised_text: str) -> list[int]:
        return [i for i, s in enumerate(self.stages) if matches_any(normalised_text, s.agent_cues)]


def scenario_rules(scenario) -> Rules:
    """The rules file named by a scenario's `rules:` key, checked against its stages and behaviour library."""
    if scenario.rules_path is None:
        raise SEADInputError("this needs a rules file; set it in the scenario config", field="scenario.rules")
    return load_rules(scenario.rules_path, scenario.stages, scenario.library.categories)


def load_rules(path: str | Path, stages: Iterable[str], categories: Iterable[str]) -> Rules:
    """Read and validate a rules file against the scenario's SOP stages and the library's categories."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SEADInputError(f"cannot read rules file: {e.strerror}", path=path) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise SEADInputError(f"invalid YAML: {getattr(e, 'problem', None) or e}", path=path,
                             line=mark.line + 1 if mark else None) from None
    if not isinstance(data, dict):
        raise SEADInputError("a rules file must be a YAML mapping", path=path)
    r = _Reader(path)
    stage_names = list(stages)
    raw_stages = r.items(data, "stages")
    if len(raw_stages) != len(stage_names):
        raise SEADInputError(f"has {len(raw_stages)} stages but the scenario has {len(stage_names)}: {stage_names}",
                             path=path, field="stages")
    parsed_stages = []
    for i, s in enumerate(raw_stages):
        f = f"stages[{i}]"
        s = r.mapping(s, f)
        if s.get("name") not in (None, stage_names[i]):
            raise SEADInputError(f"is named {s.get('name')!r} but the scenario's stage {i} is {stage_names[i]!r}",
                                 path=path, field=f"{f}.name")
        parsed_stages.append(StageRules(
            name=stage_names[i],
            agent_cues=tuple(normalise(c) for c in r.strings(s, "agent_cues", f)),
            user_ack=r.strings(s, "user_ack", f),
            reference_agent=r.text(s, "reference_agent", f)))
    raw_concerns = r.mapping(data.get("concerns"), "concerns")
    concerns = {}
    for category, c in raw_concerns.items():
        f = f"concerns.{category}"
        c = r.mapping(c, f)
        concerns[str(category)] = ConcernRules(str(category),
                                               tuple(normalise(p) for p in r.strings(c, "resolved_by", f)),
                                               r.text(c, "reference_answer", f))
    missing = [c for c in categories if c not in concerns]
    if missing:
        raise SEADInputError(f"no entry for behaviour categories {missing} of the library", path=path,
                             field="concerns")
    return Rules(
        source=str(path),
        stages=tuple(parsed_stages),
        concerns=concerns,
        contradictions=tuple(normalise(p) for p in r.strings(data, "contradictions")),
        success_line=r.text(data, "success_line"),
        hangup_lines=r.strings(data, "hangup_lines"),
        not_owner_line=r.text(data, "not_owner_line"),
        accept_lines=r.optional_strings(data, "accept_lines", DEFAULT_ACCEPT_LINES),
        stall_lines=r.optional_strings(data, "stall_lines", DEFAULT_STALL_LINES),
        off_topic_lines=r.optional_strings(data, "off_topic_lines", DEFAULT_OFF_TOPIC_LINES),
        dynamics=r.dynamics(data.get("dynamics")),
    )


class _Reader:
    """Typed access to the parsed YAML; every failure names the file and the dotted field."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, message: str, field: str) -> NoReturn:
        raise SEADInputError(message, path=self.path, field=field)

    def mapping(self, value, field: str) -> dict:
        if not isinstance(value, dict) or not value:
            self.fail("must be a non-empty mapping", field)
        return value

    def items(self, parent: dict, key: str, prefix: str = "") -> list:
        field = f"{prefix}.{key}" if prefix else key
        value = parent.get(key)
        if not isinstance(value, list) or not value:
            self.fail("is missing or not a non-empty list", field)
        return value

    def strings(self, parent: dict, key: str, prefix: str = "") -> tuple[str, ...]:
        field = f"{prefix}.{key}" if prefix else key
        values = self.items(parent, key, prefix)
        for i, v in enumerate(values):
            if not isinstance(v, str) or not v.strip():
                self.fail("must be a non-empty string", f"{field}[{i}]")
        return tuple(" ".join(v.split()) for v in values)

    def optional_strings(self, parent: dict, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        return self.strings(parent, key) if key in parent else default

    def text(self, parent: dict, key: str, prefix: str = "") -> str:
        value = parent.get(key)
        if not isinstance(value, str) or not value.strip():
            self.fail("is missing or not a non-empty string", f"{prefix}.{key}" if prefix else key)
        return " ".join(value.split())

    def dynamics(self, value) -> Dynamics:
        if value is None:
            return Dynamics()
        if not isinstance(value, dict):
            self.fail("must be a mapping of numbers", "dynamics")
        known = {f.name: f for f in fields(Dynamics)}
        out = {}
        for key, v in value.items():
            field = f"dynamics.{key}"
            if key not in known:
                self.fail(f"unknown setting (known: {sorted(known)})", field)
            if key == "noisy_categories":
                if not isinstance(v, list) or not all(isinstance(c, str) for c in v):
                    self.fail("must be a list of category names", field)
                out[key] = tuple(v)
            elif key in ("drag_chance", "impatience"):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                    self.fail(f"must be a probability in [0, 1], got {v!r}", field)
                out[key] = float(v)
            elif v is None and key.startswith("hangup_"):
                out[key] = None
            elif isinstance(v, bool) or not isinstance(v, int) or v < 0:
                self.fail(f"must be a non-negative integer, got {v!r}", field)
            else:
                out[key] = v
        return Dynamics(**out)
