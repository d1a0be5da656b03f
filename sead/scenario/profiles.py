"""User profiles (the initial state of one simulated user) and profile files (JSONL or parquet)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from sead.errors import SEADInputError, jsonl_records
from sead.scenario.behaviours import BehaviourLibrary
from sead.scenario.profile_space import ProfileSpace


@dataclass(frozen=True)
class Profile:
    """Initial values of the sampled dimensions plus the behaviours the user will show."""

    state: tuple[tuple[str, int], ...]
    behaviours: tuple[str, ...]

    @classmethod
    def make(cls, state: dict[str, int], behaviours: Iterable[str]) -> "Profile":
        return cls(tuple(state.items()), tuple(behaviours))

    @property
    def values(self) -> dict[str, int]:
        return dict(self.state)

    def key(self) -> tuple[int, ...]:
        """The joint state, the unit the curriculum keeps statistics on."""
        return tuple(v for _, v in self.state)

    def to_dict(self) -> dict:
        return {**self.values, "behaviours": list(self.behaviours)}


def profile_from_dict(obj, space: ProfileSpace, library: BehaviourLibrary | None, *, path=None, line=None) -> Profile:
    """Validate one profile record; errors name the file, line and field."""
    if not isinstance(obj, dict):
        raise SEADInputError("a profile must be a JSON object", path=path, line=line)
    state = {}
    for dim in space.sampled:
        if dim.name not in obj:
            raise SEADInputError("missing field", path=path, line=line, field=dim.name)
        state[dim.name] = space.check_value(dim.name, obj[dim.name], path=path, line=line)
    behaviours = obj.get("behaviours", obj.get("behaviors", []))
    if hasattr(behaviours, "tolist"):  # parquet list columns come back as numpy arrays
        behaviours = behaviours.tolist()
    if isinstance(behaviours, str):  # a JSON-encoded list, as the original stored it in parquet
        try:
            behaviours = json.loads(behaviours)
        except json.JSONDecodeError:
            raise SEADInputError("not a list or a JSON list of strings", path=path, line=line,
                                 field="behaviours") from None
    if not isinstance(behaviours, list) or not all(isinstance(b, str) for b in behaviours):
        raise SEADInputError("must be a list of behaviour strings", path=path, line=line, field="behaviours")
    if library is not None:
        for b in behaviours:
            if b not in library:
                raise SEADInputError(f"unknown behaviour {b!r} (not in {library.source})",
                                     path=path, line=line, field="behaviours")
    return Profile.make(state, behaviours)


def write_profiles(profiles: list[Profile], path: str | Path) -> Path:
    """Write profiles to .jsonl or .parquet (chosen by suffix); written to a temp file then renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    rows = [p.to_dict() for p in profiles]
    if path.suffix == ".parquet":
        import pandas as pd

        pd.DataFrame(rows).to_parquet(tmp, index=False)
    elif path.suffix in (".jsonl", ".json"):
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        raise SEADInputError("profile files must end in .jsonl or .parquet", path=path)
    tmp.replace(path)
    return path


def read_profiles(path: str | Path, space: ProfileSpace, library: BehaviourLibrary | None) -> list[Profile]:
    path = Path(path)
    if not path.exists():
        raise SEADInputError("profile file not found", path=path)
    if path.suffix == ".parquet":
        import pandas as pd

        try:
            records = pd.read_parquet(path).to_dict("records")
        except Exception as e:  # pyarrow raises several types for a corrupt file
            raise SEADInputError(f"cannot read parquet: {e}", path=path) from None
        # Rows are numbered from 1 like lines, so messages read the same for both formats.
        return [profile_from_dict(r, space, library, path=path, line=i) for i, r in enumerate(records, start=1)]
    profiles = [profile_from_dict(obj, space, library, path=path, line=lineno)
                for lineno, obj in jsonl_records(path.read_text(encoding="utf-8"), path)]
    if not profiles:
        raise SEADInputError("profile file holds no profiles", path=path)
    return profiles
