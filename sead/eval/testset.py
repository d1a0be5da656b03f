"""Seeded test sets: a fixed list of profiles that every evaluated model plays, identified by a content hash.

The hash is taken over the profiles themselves (canonical JSON), so a copy of the file, or the same set
written as JSONL instead of parquet, has the same hash, and any edit to a profile changes it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from sead.errors import SEADInputError
from sead.run.fixed_profiles import fixed_profiles
from sead.scenario import Profile, Scenario, write_profiles


@dataclass
class TestSet:
    profiles: list[Profile]
    path: Path
    hash: str

    def __len__(self) -> int:
        return len(self.profiles)


def content_hash(profiles: list[Profile]) -> str:
    canon = json.dumps([p.to_dict() for p in profiles], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()[:16]


def sample_testset(scenario: Scenario, n: int, seed: int) -> list[Profile]:
    """n profiles from the scenario's default marginals (the `fixed` rule), reproducible from the seed."""
    if n < 1:
        raise SEADInputError(f"a test set needs at least one profile, got {n}", field="eval.testset_size")
    return fixed_profiles(scenario, n, seed)


def make_testset(scenario: Scenario, n: int, seed: int, path: str | Path) -> TestSet:
    profiles = sample_testset(scenario, n, seed)
    return TestSet(profiles, write_profiles(profiles, path), content_hash(profiles))


def load_testset(path: str | Path, scenario: Scenario) -> TestSet:
    """Read and validate a profile file (ranges, behaviours): a bad file fails here, before any dialogue."""
    profiles = scenario.read_profiles(path)
    return TestSet(profiles, Path(path), content_hash(profiles))


def default_testset_path(out_root: str | Path, scenario: Scenario, n: int, seed: int) -> Path:
    return Path(out_root) / f"{scenario.name}-n{n}-seed{seed}.parquet"
