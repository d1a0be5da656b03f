"""Write a controller update report: JSON for machines, a heat-map PNG for people."""

from __future__ import annotations

import json
from pathlib import Path

from sead.plots.heatmaps import draw_state_heatmaps
from sead.scenario.profile_space import ProfileSpace


def write_controller_report(report: dict, space: ProfileSpace, out_dir: str | Path) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"controller_update_{report['update']:03d}"
    json_path = out_dir / f"{stem}.json"
    tmp = json_path.with_name(json_path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2), encoding="utf-8")
    tmp.replace(json_path)

    per_state = report["per_state"]

    def lookup(key: str):
        return lambda state: per_state.get(",".join(map(str, state)), {}).get(key)

    top = max((s["new_weight"] for s in per_state.values()), default=1.0) or 1.0
    cr = report["completion_rate"]
    png = draw_state_heatmaps(
        out_dir / f"{stem}.png",
        report["dims"],
        [d.allowed for d in space.sampled],
        [
            ("completion rate", lookup("cr"), (0.0, 1.0)),
            ("old weight", lookup("old_weight"), (0.0, top)),
            ("new weight", lookup("new_weight"), (0.0, top)),
        ],
        title=f"update {report['update']} ({report['rule']}): CR "
        f"{'n/a' if cr is None else f'{cr:.2f}'} over {report['dialogues']} dialogues",
    )
    return json_path, png
