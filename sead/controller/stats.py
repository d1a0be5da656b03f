"""Completion statistics keyed on the *sampled* profile state (the original keyed them on the first state the
simulator reported, which mixes up what the controller chose with how the agent's first turn went)."""

from __future__ import annotations

from dataclasses import dataclass, field


def state_label(state: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in state)


@dataclass
class CompletionStats:
    dims: tuple[str, ...]
    counts: dict[tuple[int, ...], list[int]] = field(default_factory=dict)  # state -> [dialogues, successes]
    sim_errors: int = 0

    def record(self, state: tuple[int, ...], success: bool) -> None:
        _add(self.counts, tuple(state), 1, int(bool(success)))

    @property
    def total(self) -> int:
        return sum(n for n, _ in self.counts.values())

    @property
    def successes(self) -> int:
        return sum(s for _, s in self.counts.values())

    def completion_rate(self) -> float | None:
        return self.successes / self.total if self.total else None

    def state_rate(self, state: tuple[int, ...]) -> tuple[int, float | None]:
        n, s = self.counts.get(tuple(state), (0, 0))
        return n, (s / n if n else None)

    def per_value(self, dim_index: int) -> dict[int, tuple[int, int]]:
        """Marginal counts for one dimension: value -> (dialogues, successes)."""
        out: dict[int, list[int]] = {}
        for state, (n, s) in self.counts.items():
            entry = out.setdefault(state[dim_index], [0, 0])
            entry[0] += n
            entry[1] += s
        return {v: (n, s) for v, (n, s) in sorted(out.items())}

    def to_dict(self) -> dict:
        return {
            "dims": list(self.dims),
            "sim_errors": self.sim_errors,
            "counts": {state_label(k): v for k, v in sorted(self.counts.items())},
        }

    @classmethod
    def pooled(cls, windows: list[CompletionStats]) -> CompletionStats:
        """One window holding every dialogue of `windows` (same dims)."""
        out = cls(windows[0].dims)
        for w in windows:
            for key, (n, s) in w.counts.items():
                _add(out.counts, key, n, s)
            out.sim_errors += w.sim_errors
        return out

    @classmethod
    def from_dict(cls, d: dict) -> CompletionStats:
        counts = {tuple(int(x) for x in k.split(",")): [int(n), int(s)] for k, (n, s) in d["counts"].items()}
        return cls(tuple(d["dims"]), counts, int(d.get("sim_errors", 0)))


def _add(table: dict, key, n: int, hits: int) -> None:
    """Add to a state's [dialogues, successes]."""
    entry = table.setdefault(key, [0, 0])
    entry[0] += n
    entry[1] += hits
