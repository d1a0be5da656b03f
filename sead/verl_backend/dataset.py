"""The parquet files verl's RLHFDataset reads: one row per profile, in the order the controller drew them.

verl needs `prompt` (chat messages: here the SOP prompt, so its length filter sees what the agent sees),
`data_source`, `reward_model.ground_truth` (read by its reward managers even when unused) and `extra_info`.
The profile travels as JSON inside `extra_info`: parquet struct columns would force one schema on every
scenario's dimensions and drop empty behaviour lists to nulls.
"""

from __future__ import annotations

import json
from pathlib import Path

from sead.scenario.profiles import Profile

DATA_SOURCE = "sead"


def profile_rows(
    profiles: list[Profile], *, system_prompt: str, sop_role: str, split: str, agent_name: str = "sead_dialogue"
) -> list[dict]:
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    return [
        {
            "data_source": DATA_SOURCE,
            "agent_name": agent_name,
            "prompt": [{"role": sop_role, "content": system_prompt}],
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"index": i, "split": split, "profile": json.dumps(p.to_dict())},
        }
        for i, p in enumerate(profiles)
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
