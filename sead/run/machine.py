"""machine.json: where a run ran and in which precision, one record per start or resume (machines differ between
sessions, and so do the fast paths and the precision `model.dtype=auto` picks)."""

from __future__ import annotations

import json
import logging

from sead.errors import parse_json
from sead.models.precision import Precision
from sead.run.atomic import write_text_atomic
from sead.run.layout import RunLayout

log = logging.getLogger(__name__)


def record_machine(layout: RunLayout, precision: Precision, step: int) -> None:
    """Append this start's record (from `step`); earlier starts' records are kept. A file that does not read as a
    list of records (cut short, edited) is kept as machine.json.unreadable, and the records start again."""
    records = []
    if layout.machine.exists():
        try:
            records = parse_json(layout.machine.read_text(encoding="utf-8"))
            if not (isinstance(records, list) and all(isinstance(r, dict) for r in records)):
                raise ValueError("not a list of records")
        except (OSError, UnicodeDecodeError, ValueError) as e:  # OSError: e.g. a folder of that name
            kept = layout.machine.with_name(layout.machine.name + ".unreadable")
            layout.machine.replace(kept)
            log.warning("%s is unreadable (%s): kept as %s, the records start again", layout.machine, e, kept.name)
            records = []
    records.append({"from_step": step, **precision.record()})
    write_text_atomic(layout.machine, json.dumps(records, indent=1) + "\n")
