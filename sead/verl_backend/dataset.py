"""The parquet files verl's RLHFDataset reads: one row per profile, in the order the controller drew them.

verl needs `prompt` (chat messages: here the SOP prompt, so its length filter sees what the agent sees),
`data_source`, `reward_model.ground_truth` (read by its reward managers even when unused) and `extra_info`.
The profile travels as JSON inside `extra_info`: parquet struct columns would force one schema on every
scenario's dimensions and drop empty behaviour lists to nulls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from sead.scenario.profiles import Profile

DATA_SOURCE = "sead"
AGENT_NAME = "sead_dialogue"  # the agent loop every row names (registered by agent_loop.py)


def training_rows(by_step: Mapping[int, list[Profile]], *, system_prompt: str, sop_role: str) -> list[dict]:
    """Each step's profiles, in step order. A row's `extra_info` says which dialogues it is, so that the agent loop
    reads it from the row whichever of verl's trainers plays it: its SEAD `step` and `group`, the profile's place
    among that step's profiles."""
    placed = [({"step": step, "group": g}, p) for step, profiles in by_step.items() for g, p in enumerate(profiles)]
    return _rows(placed, "train", system_prompt, sop_role)


def validation_rows(profiles: list[Profile], *, system_prompt: str, sop_role: str) -> list[dict]:
    """The validation profiles; `group` is a profile's place in the validation set."""
    return _rows([({"group": g}, p) for g, p in enumerate(profiles)], "val", system_prompt, sop_role)


def _rows(placed: list[tuple[dict, Profile]], split: str, system_prompt: str, sop_role: str) -> list[dict]:
    """`index` is a row's place in its file, which verl reads as the row's id."""
    return [
        {
            "data_source": DATA_SOURCE,
            "agent_name": AGENT_NAME,
            "prompt": [{"role": sop_role, "content": system_prompt}],
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"index": i, "split": split, **where, "profile": json.dumps(p.to_dict())},
        }
        for i, (where, p) in enumerate(placed)
    ]


def write_rows(rows: list[dict], path: str | Path) -> Path:
    import pandas as pd

    if not rows:
        raise ValueError("no rows to write: verl needs at least one profile")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pd.DataFrame(rows).to_parquet(tmp, index=False)
    tmp.replace(path)
    return path
