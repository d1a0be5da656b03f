"""User profiles (the initial state of one simulated user) and profile files (JSONL or parquet)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sead.errors import SEADInputError, jsonl_records, parse_json, read_user_bytes, read_user_text
from sead.scenario.behaviours import BehaviourLibrary
from sead.scenario.profile_space import ProfileSpace


@dataclass(frozen=True)
class Profile:
    """Initial values of the sampled dimensions plus the behaviours the user will show."""

    state: tuple[tuple[str, int], ...]
    behaviours: tuple[str, ...]

    @classmethod
    def make(cls, state: dict[str, int], behaviours: Iterable[str]) -> Profile:
        return cls(tuple(state.items()), tuple(behaviours))

    @property
    def values(self) -> dict[str, int]:
        return dict(self.state)

    def key(self) -> tuple[int, ...]:
        """The joint state, the unit the curriculum keeps statistics on."""
        return tuple(v for _, v in self.state)

    def to_dict(self) -> dict:
        return {**self.values, "behaviours": list(self.behaviours)}


BEHAVIOUR_KEYS = ("behaviours", "behaviors")  # the original spelt it the American way


def profile_from_dict(
    obj,
    space: ProfileSpace,
    library: BehaviourLibrary | None,
    *,
    path=None,
    line=None,
    max_behaviours: int | None = None,
) -> Profile:
    """Validate one profile record; errors name the file, line and field."""
    if not isinstance(obj, dict):
        raise SEADInputError("a profile must be a JSON object", path=path, line=line)
    known = (*space.sampled_names, *BEHAVIOUR_KEYS)
    unknown = sorted(str(k) for k in obj if k not in known)
    if unknown:
        raise SEADInputError(
            f"unknown field(s) {unknown} (a profile holds {', '.join(known)})", path=path, line=line, field=unknown[0]
        )
    if all(k in obj for k in BEHAVIOUR_KEYS):
        raise SEADInputError("give behaviours or behaviors, not both", path=path, line=line, field="behaviours")
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
            behaviours = parse_json(behaviours)
        except json.JSONDecodeError:
            raise SEADInputError(
                "not a list or a JSON list of strings", path=path, line=line, field="behaviours"
            ) from None
    if not isinstance(behaviours, list) or not all(isinstance(b, str) for b in behaviours):
        raise SEADInputError("must be a list of behaviour strings", path=path, line=line, field="behaviours")
    repeated = sorted({b for b in behaviours if behaviours.count(b) > 1})
    if repeated:
        raise SEADInputError(f"behaviours repeat: {repeated}", path=path, line=line, field="behaviours")
    if max_behaviours is not None and len(behaviours) > max_behaviours:
        raise SEADInputError(
            f"{len(behaviours)} behaviours, more than the scenario's maximum of {max_behaviours} "
            "(scenario.behaviours_per_profile.max)",
            path=path,
            line=line,
            field="behaviours",
        )
    if library is not None:
        for b in behaviours:
            if b not in library:
                raise SEADInputError(
                    f"unknown behaviour {b!r} (not in {library.source})", path=path, line=line, field="behaviours"
                )
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


def read_profiles(
    path: str | Path, space: ProfileSpace, library: BehaviourLibrary | None, *, max_behaviours: int | None = None
) -> list[Profile]:
    """Every profile of a JSONL or parquet file, validated; an empty file is an error, as a run could not use it."""
    path = Path(path)
    if path.suffix == ".parquet":
        records = enumerate(_parquet_records(path), start=1)
    else:
        records = jsonl_records(read_user_text(path, "profile file"), path)
    profiles = [
        profile_from_dict(obj, space, library, path=path, line=line, max_behaviours=max_behaviours)
        for line, obj in records
    ]
    if not profiles:
        raise SEADInputError("profile file is empty: it holds no profiles", path=path)
    return profiles


def _parquet_records(path: Path) -> list[dict]:
    """Rows of a parquet profile file; they are numbered from 1 like lines, so messages read the same."""
    import pandas as pd

    raw = read_user_bytes(path, "profile file")
    try:
        return pd.read_parquet(io.BytesIO(raw)).to_dict("records")
    except Exception as e:  # pyarrow raises several types for a corrupt file
        raise SEADInputError(f"cannot read parquet: {e}", path=path) from None
