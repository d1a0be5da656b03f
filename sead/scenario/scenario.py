"""A scenario bundles everything the loop needs to know about one kind of call, all loaded from data files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from sead.errors import SEADInputError
from sead.scenario.behaviours import BehaviourLibrary
from sead.scenario.profile_space import ProfileSpace, normalise_distribution
from sead.scenario.profiles import Profile, read_profiles
from sead.scenario.tags import TagSchema
from sead.scenario.template import PromptTemplate

BEHAVIOURS_PLACEHOLDER = "specific_behaviors"
NO_BEHAVIOUR_LINE = "- (no specific behaviour: react naturally to the call)"
USER_PROMPTS_KEPT = 4096  # rendered user prompts remembered (one per profile in flight is what matters)
# The keys of a scenario config (configs/scenario/NAME.yaml) -> what each holds; file paths are from the project root.
SCENARIO_KEYS = {
    "name": "the scenario's name, in run directories and reports",
    "description": "one line on what the call is for",
    "agent_prompt": "the agent's system prompt: the SOP and the tag format its turns must keep",
    "user_prompt": "the simulated user's prompt; ${initial_<dimension>}, ${specific_behaviors} filled per profile",
    "behaviour_library": "JSONL, one behaviour a line: {category, behaviour, utterance}",
    "rules": "the scripted user's and reference agent's rules file (null: none; those two then cannot run)",
    "stages": "the SOP's stage names, in order; <stage> tags and the rules file refer to them by position and name",
    "dimensions": "the user state: NAME: {low, high, sampled, allowed}; `allowed` is what the controller samples",
    "behaviours_per_profile": "{min, max}: how many behaviours of the library one profile draws",
    "default_marginals": "each sampled dimension's sampling distribution before any curriculum: {value: weight}",
}


@dataclass
class Scenario:
    name: str
    description: str
    space: ProfileSpace
    stages: tuple[str, ...]
    agent_prompt: PromptTemplate
    user_prompt: PromptTemplate
    library: BehaviourLibrary
    behaviours_per_profile: tuple[int, int]
    default_marginals: dict[str, dict[int, float]]
    rules_path: Path | None
    # The simulator is asked once per turn with the same profile; rendering its prompt each time cost more CPU
    # than the request. A plain dict, so a scenario still pickles (verl sends it to its workers).
    _user_prompts: dict[Profile, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    # Both are asked for on every turn or dialogue, hundreds in flight per process; fields are not reassigned.
    @cached_property
    def tags(self) -> TagSchema:
        return TagSchema(self.space, len(self.stages))

    @cached_property
    def _agent_system_text(self) -> str:
        return self.agent_prompt.render({})

    def agent_system_prompt(self) -> str:
        return self._agent_system_text

    def user_system_prompt(self, profile: Profile) -> str:
        prompt = self._user_prompts.get(profile)
        if prompt is None:
            if len(self._user_prompts) >= USER_PROMPTS_KEPT:
                self._user_prompts.clear()
            prompt = self._user_prompts[profile] = self._render_user_prompt(profile)
        return prompt

    def _render_user_prompt(self, profile: Profile) -> str:
        values: dict[str, object] = {f"initial_{k}": v for k, v in profile.values.items()}
        lines = [f"- {b}" for b in profile.behaviours] or [NO_BEHAVIOUR_LINE]
        values[BEHAVIOURS_PLACEHOLDER] = "\n".join(lines)
        return self.user_prompt.render(values)

    @classmethod
    def from_config(cls, cfg: Mapping, root: str | Path) -> Scenario:
        """Build from the `scenario` config group; file paths are relative to the project root.

        Every file of the scenario is read and checked here, the rules file included, so `sead scenario check`
        (which builds the scenario the same way) fails on any scenario problem that `sead train` would hit."""
        root = Path(root)
        unknown = sorted(set(cfg) - set(SCENARIO_KEYS))
        if unknown:
            raise SEADInputError(
                f"unknown key(s) {unknown} (known: {', '.join(SCENARIO_KEYS)})", field=f"scenario.{unknown[0]}"
            )
        space = ProfileSpace.from_config(cfg.get("dimensions") or {})
        stages = _stages(cfg.get("stages"))
        user_placeholders = [f"initial_{n}" for n in space.sampled_names] + [BEHAVIOURS_PLACEHOLDER]
        lo, hi = _behaviour_count(cfg.get("behaviours_per_profile") or {"min": 1, "max": 3})
        library = BehaviourLibrary.load(_path(root, cfg, "behaviour_library"))
        if hi > len(library):
            raise SEADInputError(
                f"asks for up to {hi} behaviours but the library has {len(library)}",
                field="scenario.behaviours_per_profile.max",
            )
        rules_path = _path(root, cfg, "rules") if cfg.get("rules") is not None else None
        if rules_path is not None:
            # Imported here: sead.usersim's package imports this module.
            from sead.usersim.rules_file import load_rules

            load_rules(rules_path, stages, library.categories)
        return cls(
            name=str(cfg.get("name") or "unnamed"),
            description=str(cfg.get("description") or ""),
            space=space,
            stages=stages,
            agent_prompt=PromptTemplate.load(_path(root, cfg, "agent_prompt")),
            user_prompt=PromptTemplate.load(_path(root, cfg, "user_prompt"), required=user_placeholders),
            library=library,
            behaviours_per_profile=(lo, hi),
            default_marginals=_default_marginals(cfg.get("default_marginals") or {}, space),
            rules_path=rules_path,
        )

    def read_profiles(self, path: str | Path) -> list[Profile]:
        """A profile file checked against this scenario: ranges, library and the number of behaviours."""
        return read_profiles(path, self.space, self.library, max_behaviours=self.behaviours_per_profile[1])

    def summary(self) -> dict:
        return {
            "name": self.name,
            "stages": list(self.stages),
            "dimensions": {
                d.name: {"range": [d.low, d.high], "sampled": d.sampled, "allowed": list(d.allowed)}
                for d in self.space.dimensions
            },
            "joint_states": len(self.space.states()),
            "rules": None if self.rules_path is None else str(self.rules_path),
            "behaviours": len(self.library),
            "categories": self.library.categories,
            "behaviours_per_profile": list(self.behaviours_per_profile),
            "agent_prompt": {"file": self.agent_prompt.source, "words": len(self.agent_prompt.text.split())},
            "user_prompt": {
                "file": self.user_prompt.source,
                "words": len(self.user_prompt.text.split()),
                "placeholders": sorted(self.user_prompt.placeholders),
            },
        }


def _path(root: Path, cfg: Mapping, key: str) -> Path:
    value = cfg.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SEADInputError(f"a file path is required, got {value!r}", field=f"scenario.{key}")
    return root / value


def _stages(value) -> tuple[str, ...]:
    field = "scenario.stages"
    if not isinstance(value, (list, tuple)) or not value:
        raise SEADInputError(f"must be a non-empty list of SOP stage names, got {value!r}", field=field)
    for i, stage in enumerate(value):
        if not isinstance(stage, str) or not stage.strip():
            raise SEADInputError(f"must be a stage name, got {stage!r}", field=f"{field}[{i}]")
    repeated = sorted({s for s in value if value.count(s) > 1})
    if repeated:
        raise SEADInputError(f"stage names repeat: {repeated}", field=field)
    return tuple(value)


def _default_marginals(spec: Mapping, space: ProfileSpace) -> dict[str, dict[int, float]]:
    """Each sampled dimension's marginal as given, or uniform over its allowed values."""
    field = "scenario.default_marginals"
    if not isinstance(spec, Mapping):
        raise SEADInputError("must map sampled dimensions to {value: probability}", field=field)
    unknown = sorted(set(spec) - set(space.sampled_names))
    if unknown:
        raise SEADInputError(
            f"{unknown} not sampled dimensions (sampled: {', '.join(space.sampled_names)})",
            field=f"{field}.{unknown[0]}",
        )
    return {
        d.name: (
            normalise_distribution(spec[d.name], d, field=f"{field}.{d.name}")
            if d.name in spec
            else {v: 1 / len(d.allowed) for v in d.allowed}
        )
        for d in space.sampled
    }


def _behaviour_count(spec: Mapping) -> tuple[int, int]:
    if not isinstance(spec, Mapping) or set(spec) != {"min", "max"}:
        raise SEADInputError(f"must be {{min: N, max: M}}, got {spec!r}", field="scenario.behaviours_per_profile")
    lo, hi = spec["min"], spec["max"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)):
        raise SEADInputError("needs integer 'min' and 'max'", field="scenario.behaviours_per_profile")
    if not 0 <= lo <= hi:
        raise SEADInputError(f"need 0 <= min <= max, got {lo}..{hi}", field="scenario.behaviours_per_profile")
    return lo, hi
