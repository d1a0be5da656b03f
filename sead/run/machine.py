"""machine.json: where a run ran and in which precision, one record per start or resume (machines differ between
sessions, and so do the fast paths and the precision `model.dtype=auto` picks)."""

from __future__ import annotations

import json

from sead.models.precision import Precision
from sead.run.atomic import write_text_atomic
from sead.run.layout import RunLayout


def record_machine(layout: RunLayout, precision: Precision, step: int) -> None:
    """Append this start's record (from `step`); earlier starts' records are kept."""
    records = json.loads(layout.machine.read_text()) if layout.machine.exists() else []
    records.append({"from_step": step, **precision.record()})
    write_text_atomic(layout.machine, json.dumps(records, indent=1) + "\n")
