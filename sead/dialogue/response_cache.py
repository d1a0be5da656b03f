"""The original system's user-response cache: an optional speed-up, OFF by default (`dialogue.response_cache`).

With a per-stage probability, instead of calling the simulator, the runner replays a raw user reply cached
earlier under the same agent-declared SOP stage. Side effects, which is why it is off by default:
- a cached reply was written for a different profile and history, so it may not fit this dialogue;
- its `<user_status>` counts: a cached success or hang-up ends this dialogue;
- its state tags become this user's reported state, so the state trajectory (and UPA, EI/TI/CI) can jump.
Guards as the original: no hits for a stage until it holds `min_entries` replies, never two hits in a row in
one dialogue, bounded size with the oldest evicted. It persists in a file: `path`, else the run directory's
response_cache.jsonl. The embedded trainer uses one cache for its training dialogues only (never validation, the
warm-up or `sead eval`); the verl backend refuses it, as its agent-loop workers are processes that cannot share one.
"""

from __future__ import annotations

import json
import random
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

from sead.config import number
from sead.errors import parse_json


@dataclass
class ResponseCacheConfig:
    # replay a cached user reply instead of calling the simulator, per SOP stage (the original's speed-up; its
    # replies were written for other users, see the module docstring); never measured here
    enabled: bool = False
    # chance of replaying a cached reply, per SOP stage the agent declares; a stage not listed is never replayed
    hit_rates: dict[int, float] = number(default_factory=lambda: {0: 0.9, 1: 0.5, 2: 0.2, 3: 0.0}, ge=0, le=1)
    min_entries: int = number(10, ge=1, le=1_000_000)  # replies a stage must hold before it is replayed from
    max_per_stage: int = number(500, ge=1, le=10_000_000)  # then the oldest is evicted
    min_chars: int = number(10, ge=0, le=1_000_000)  # shorter replies are not stored
    path: str | None = None  # None: the run directory's response_cache.jsonl


class ResponseCache:
    def __init__(self, cfg: ResponseCacheConfig):
        self.cfg = cfg
        self.rates = {int(k): float(v) for k, v in cfg.hit_rates.items()}
        self.entries: dict[int, deque[str]] = {}
        self.hits = self.misses = 0
        self._path = Path(cfg.path) if cfg.path else None
        if self._path and self._path.exists():
            for line in self._path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = parse_json(line)
                    self._store(int(rec["stage"]), str(rec["text"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a torn or foreign line only costs one cache entry
        self._fh = open(self._path, "a", encoding="utf-8") if self._path else None

    @classmethod
    def for_run(cls, cfg: ResponseCacheConfig, default_path: Path) -> ResponseCache | None:
        """A run's one cache where it is enabled: at `cfg.path`, else at `default_path` (in the run directory)."""
        return cls(replace(cfg, path=cfg.path or str(default_path))) if cfg.enabled else None

    def _store(self, stage: int, text: str) -> None:
        self.entries.setdefault(stage, deque(maxlen=self.cfg.max_per_stage)).append(text)

    def lookup(self, stage: int | None, rng: random.Random, previous_was_hit: bool) -> str | None:
        pool = self.entries.get(stage) if stage is not None else None
        if previous_was_hit or not pool or len(pool) < self.cfg.min_entries:
            self.misses += 1
            return None
        if rng.random() >= self.rates.get(stage, 0.0):
            self.misses += 1
            return None
        self.hits += 1
        return pool[rng.randrange(len(pool))]

    def add(self, stage: int | None, text: str) -> None:
        if stage is None or len(text.strip()) < self.cfg.min_chars:
            return
        self._store(stage, text)
        if self._fh:
            self._fh.write(json.dumps({"stage": stage, "text": text}) + "\n")
            self._fh.flush()

    def step_counts(self) -> dict:
        """Hits and misses since the last call, and the replies held now: one training step's numbers."""
        counts = {"hits": self.hits, "misses": self.misses, "entries": sum(map(len, self.entries.values()))}
        self.hits = self.misses = 0
        return counts

    def close(self) -> None:
        if self._fh:
            self._fh.close()
