"""A scenario bundles everything the loop needs to know about one kind of call, all loaded from data files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from sead.errors import SEADInputError
from sead.scenario.behaviours import BehaviourLibrary
from sead.scenario.profile_space import ProfileSpace, normalise_distribution
from sead.scenario.profiles import Profile
from sead.scenario.tags import TagSchema
from sead.scenario.template import PromptTemplate

BEHAVIOURS_PLACEHOLDER = "specific_behaviors"
NO_BEHAVIOUR_LINE = "- (no specific behaviour: react naturally to the call)"


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

    @property
    def tags(self) -> TagSchema:
        return TagSchema(self.space, len(self.stages))

    def agent_system_prompt(self) -> str:
        return self.agent_prompt.render({})

    def user_system_prompt(self, profile: Profile) -> str:
        values: dict[str, object] = {f"initial_{k}": v for k, v in profile.values.items()}
        lines = [f"- {b}" for b in profile.behaviours] or [NO_BEHAVIOUR_LINE]
        values[BEHAVIOURS_PLACEHOLDER] = "\n".join(lines)
        return self.user_prompt.render(values)

    @classmethod
    def from_config(cls, cfg: Mapping, root: str | Path) -> "Scenario":
        """Build from the `scenario` config group; file paths are relative to the project root."""
        root = Path(root)
        space = ProfileSpace.from_config(cfg.get("dimensions") or {})
        stages = tuple(str(s) for s in (cfg.get("stages") or ()))
        if not stages:
            raise SEADInputError("a scenario needs at least one SOP stage", field="scenario.stages")
        user_placeholders = [f"initial_{n}" for n in space.sampled_names] + [BEHAVIOURS_PLACEHOLDER]
        lo, hi = _behaviour_count(cfg.get("behaviours_per_profile") or {"min": 1, "max": 3})
        library = BehaviourLibrary.load(_path(root, cfg, "behaviour_library"))
        if hi > len(library):
            raise SEADInputError(f"asks for up to {hi} behaviours but the library has {len(library)}",
                                 field="scenario.behaviours_per_profile.max")
        marginals = {}
        for dim in space.sampled:
            spec = (cfg.get("default_marginals") or {}).get(dim.name)
            field = f"scenario.default_marginals.{dim.name}"
            marginals[dim.name] = (normalise_distribution(spec, dim, field=field) if spec is not None
                                   else {v: 1 / len(dim.allowed) for v in dim.allowed})
        rules = cfg.get("rules")
        return cls(
            name=str(cfg.get("name") or "unnamed"),
            description=str(cfg.get("description") or ""),
            space=space,
            stages=stages,
            agent_prompt=PromptTemplate.load(_path(root, cfg, "agent_prompt")),
            user_prompt=PromptTemplate.load(_path(root, cfg, "user_prompt"), required=user_placeholders),
            library=library,
            behaviours_per_profile=(lo, hi),
            default_marginals=marginals,
            rules_path=(root / rules) if rules else None,
        )

    def summary(self) -> dict:
        return {
            "name": self.name,
            "stages": list(self.stages),
            "dimensions": {d.name: {"range": [d.low, d.high], "sampled": d.sampled, "allowed": list(d.allowed)}
                           for d in self.space.dimensions},
            "joint_states": len(self.space.states()),
            "behaviours": len(self.library),
            "categories": self.library.categories,
            "behaviours_per_profile": list(self.behaviours_per_profile),
            "agent_prompt": {"file": self.agent_prompt.source, "words": len(self.agent_prompt.text.split())},
            "user_prompt": {"file": self.user_prompt.source, "words": len(self.user_prompt.text.split()),
                            "placeholders": sorted(self.user_prompt.placeholders)},
        }


def _path(root: Path, cfg: Mapping, key: str) -> Path:
    value = cfg.get(key)
    if not value:
        raise SEADInputError("a file path is required", field=f"scenario.{key}")
    return root / str(value)


def _behaviour_count(spec: Mapping) -> tuple[int, int]:
    try:
        lo, hi = int(spec["min"]), int(spec["max"])
    except (KeyError, TypeError, ValueError):
        raise SEADInputError("needs integer 'min' and 'max'", field="scenario.behaviours_per_profile") from None
    if not 0 <= lo <= hi:
        raise SEADInputError(f"need 0 <= min <= max, got {lo}..{hi}", field="scenario.behaviours_per_profile")
    return lo, hi
