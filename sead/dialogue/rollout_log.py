"""Append-only JSONL log of every finished dialogue of a run. A line is written and flushed as soon as its
dialogue ends, so a crash or a dead simulator never loses a rollout that had already finished."""

from __future__ import annotations

import json
from pathlib import Path

from sead.dialogue.episode import Episode
from sead.run.json_lines import read_json_lines


class RolloutLog:
    def __init__(self, path: str | Path, *, fresh: bool = False):
        """`fresh` starts the file anew (a step replayed after resume); otherwise lines are appended."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "w" if fresh else "a", encoding="utf-8")

    def append(self, episode: Episode, **extra) -> None:
        self._fh.write(json.dumps({**episode.to_dict(), **extra}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_rollouts(path: str | Path) -> list[dict]:
    """Records of a rollout log, read as every JSON-lines file of a run is: a last line torn by a kill is dropped
    with a warning naming file and line, a bad line before it raises naming them."""
    return read_json_lines(Path(path))
