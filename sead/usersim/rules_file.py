"""Reading a scenario's rules file (`sead.usersim.rules` describes its keys): YAML with no repeated or unknown
keys, one entry per SOP stage in order, one concern per behaviour category, phrases that belong to one stage or
concern only; every problem names the file and the field."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path
from typing import NoReturn

import yaml

from sead.errors import SEADInputError, read_user_text
from sead.usersim.rules import ConcernRules, Dynamics, Rules, StageRules
from sead.usersim.visible_text import normalise, says
from sead.yaml_loading import UniqueKeyLoader

TOP_KEYS = (
    "stages",
    "concerns",
    "contradictions",
    "success_line",
    "hangup_lines",
    "not_owner_line",
    "accept_lines",
    "stall_lines",
    "off_topic_lines",
    "dynamics",
)
STAGE_KEYS = ("name", "agent_cues", "user_ack", "reference_agent", "reference_rewordings")
CONCERN_KEYS = ("resolved_by", "reference_answer", "reference_rewordings")
_AT_LEAST_ONE = ("max_stages_per_reply", "max_concern_kinds_per_reply", "overlap_ngram")
DEFAULT_ACCEPT_LINES = ("Hm. Okay.", "Alright, fine.")
DEFAULT_STALL_LINES = ("Uh-huh. Later, maybe.", "Mm. Not now.")
DEFAULT_OFF_TOPIC_LINES = ("So? What do you want?", "Huh? Get to the point.")


def scenario_rules(scenario) -> Rules:
    """The rules file named by a scenario's `rules:` key, checked against its stages and behaviour library."""
    if scenario.rules_path is None:
        raise SEADInputError("this needs a rules file; set it in the scenario config", field="scenario.rules")
    return load_rules(scenario.rules_path, scenario.stages, scenario.library.categories)


def load_rules(path: str | Path, stages: Iterable[str], categories: Iterable[str]) -> Rules:
    """Read and validate a rules file against the scenario's SOP stages and the library's categories."""
    path = Path(path)
    text = read_user_text(path, "rules file")
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise SEADInputError(
            f"invalid YAML: {getattr(e, 'problem', None) or e}", path=path, line=mark.line + 1 if mark else None
        ) from None
    if data is None:
        raise SEADInputError("rules file is empty", path=path)
    if not isinstance(data, dict):
        raise SEADInputError("a rules file must be a YAML mapping", path=path)
    r = _Reader(path)
    r.known(data, TOP_KEYS, "")
    stage_names, categories = list(stages), list(categories)
    raw_stages = r.items(data, "stages")
    if len(raw_stages) != len(stage_names):
        raise SEADInputError(
            f"has {len(raw_stages)} stages but the scenario has {len(stage_names)}: {stage_names}",
            path=path,
            field="stages",
        )
    parsed_stages = []
    for i, s in enumerate(raw_stages):
        f = f"stages[{i}]"
        s = r.known(r.mapping(s, f), STAGE_KEYS, f)
        if s.get("name") not in (None, stage_names[i]):
            raise SEADInputError(
                f"is named {s.get('name')!r} but the scenario's stage {i} is {stage_names[i]!r}",
                path=path,
                field=f"{f}.name",
            )
        parsed_stages.append(
            StageRules(
                name=stage_names[i],
                agent_cues=tuple(normalise(c) for c in r.strings(s, "agent_cues", f)),
                user_ack=r.strings(s, "user_ack", f),
                reference_agent=r.text(s, "reference_agent", f),
                reference_rewordings=r.optional_strings(s, "reference_rewordings", (), f),
            )
        )
    raw_concerns = r.mapping(data.get("concerns"), "concerns")
    concerns = {}
    for category, c in raw_concerns.items():
        f = f"concerns.{category}"
        c = r.known(r.mapping(c, f), CONCERN_KEYS, f)
        concerns[str(category)] = ConcernRules(
            str(category),
            tuple(normalise(p) for p in r.strings(c, "resolved_by", f)),
            r.text(c, "reference_answer", f),
            r.optional_strings(c, "reference_rewordings", (), f),
        )
    missing = [c for c in categories if c not in concerns]
    if missing:
        raise SEADInputError(f"no entry for behaviour categories {missing} of the library", path=path, field="concerns")
    extra = [c for c in concerns if c not in categories]
    if extra:  # most likely a misspelt category, whose real entry is then missing or never used
        raise SEADInputError(
            f"{extra} are not behaviour categories of the library (it has {categories})",
            path=path,
            field=f"concerns.{extra[0]}",
        )
    r.distinct({f"stages[{i}].agent_cues": s.agent_cues for i, s in enumerate(parsed_stages)})
    r.distinct({f"concerns.{c}.resolved_by": rules.resolved_by for c, rules in concerns.items()})
    dynamics = r.dynamics(data.get("dynamics"))
    unknown_noisy = [c for c in dynamics.noisy_categories if c not in categories]
    if unknown_noisy:
        raise SEADInputError(
            f"{unknown_noisy} are not behaviour categories of the library", path=path, field="dynamics.noisy_categories"
        )
    rules = Rules(
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
        dynamics=dynamics,
    )
    r.lands_its_own(rules)
    return rules


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

    def known(self, value: dict, keys: tuple[str, ...], field: str) -> dict:
        unknown = sorted(str(k) for k in value if k not in keys)
        if unknown:
            self.fail(
                f"unknown key(s) {unknown} (known: {', '.join(keys)})", f"{field}.{unknown[0]}" if field else unknown[0]
            )
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

    def optional_strings(self, parent: dict, key: str, default: tuple[str, ...], prefix: str = "") -> tuple[str, ...]:
        return self.strings(parent, key, prefix) if key in parent else default

    def distinct(self, groups: dict[str, tuple[str, ...]]) -> None:
        """No phrase of one group may contain, or be contained in, a phrase of another."""
        for field, phrases in groups.items():
            for i, p in enumerate(phrases):
                others = ((g, q) for g, qs in groups.items() if g != field for q in qs)
                clash = next(((g, q) for g, q in others if says(q, p) or says(p, q)), None)
                if clash:
                    self.fail(
                        f"{p!r} overlaps {clash[1]!r} of {clash[0]}: a reply saying it would count as both",
                        f"{field}[{i}]",
                    )

    def text(self, parent: dict, key: str, prefix: str = "") -> str:
        value = parent.get(key)
        if not isinstance(value, str) or not value.strip():
            self.fail("is missing or not a non-empty string", f"{prefix}.{key}" if prefix else key)
        return " ".join(value.split())

    def lands_its_own(self, rules: Rules) -> None:
        """Every reference line and rewording must do what it is the reference for, read alone: else the reference
        agent, and any agent that imitates it, could never win this user."""
        lines = [
            (
                f"stages[{i}]",
                "reference_agent",
                s.reference_agent,
                s.reference_rewordings,
                lambda t, i=i: i in rules.stages_cued(t),
            )
            for i, s in enumerate(rules.stages)
        ] + [
            (
                f"concerns.{c}",
                "reference_answer",
                r.reference_answer,
                r.reference_rewordings,
                lambda t, c=c: c in rules.kinds_answered(t),
            )
            for c, r in rules.concerns.items()
        ]
        for where, key, reference, rewordings, lands in lines:
            named = [(key, reference), *((f"reference_rewordings[{k}]", line) for k, line in enumerate(rewordings))]
            for name, line in named:
                if not lands(normalise(line)):
                    self.fail(
                        f"{line!r} does not do what it is the reference for: it needs one of the phrases and "
                        f"dynamics.substance_words ({rules.dynamics.substance_words}) content words of these lines, "
                        f"making up at least dynamics.focus_share ({rules.dynamics.focus_share:g}) of its own",
                        f"{where}.{name}",
                    )

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
            elif key in ("drag_chance", "impatience", "repeat_share", "echo_share", "focus_share"):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                    self.fail(f"must be a probability in [0, 1], got {v!r}", field)
                out[key] = float(v)
            elif key == "negation_check":
                if not isinstance(v, bool):
                    self.fail(f"must be true or false, got {v!r}", field)
                out[key] = v
            elif v is None and (key.startswith("hangup_") or key == "foreign_words"):
                out[key] = None
            elif isinstance(v, bool) or not isinstance(v, int) or v < (1 if key in _AT_LEAST_ONE else 0):
                self.fail(
                    f"must be {'a positive' if key in _AT_LEAST_ONE else 'a non-negative'} integer, got {v!r}", field
                )
            else:
                out[key] = v
        return Dynamics(**out)
