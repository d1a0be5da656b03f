"""trainer.max_minutes: the training time a run may spend. Warm-up and RL steps count, validation does not (it
measures, it does not train). The clock travels in checkpoints, so a resumed run goes on spending the same budget."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainingBudget:
    max_minutes: float | None  # None: no limit
    train_seconds: float = 0.0
    longest_step_s: float = 0.0  # so that no step is started just before the budget ends and then overruns it

    @classmethod
    def resumed(cls, max_minutes: float | None, state: dict) -> TrainingBudget:
        return cls(max_minutes, float(state.get("train_seconds", 0.0)), float(state.get("longest_step_s", 0.0)))

    def state(self) -> dict:
        return {"train_seconds": self.train_seconds, "longest_step_s": self.longest_step_s}

    def add_warmup(self, minutes: float) -> None:
        self.train_seconds += 60 * minutes

    def add_step(self, seconds: float) -> None:
        self.train_seconds += seconds
        self.longest_step_s = max(self.longest_step_s, seconds)

    def spent(self) -> bool:
        """True when another RL step, if as long as the longest so far, would end past the budget."""
        return self.max_minutes is not None and self.train_seconds + self.longest_step_s > self.max_minutes * 60
